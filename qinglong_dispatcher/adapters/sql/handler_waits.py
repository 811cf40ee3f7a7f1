"""Waking handler waits: a daemon that has an action's handler makes its waits due now.

A dispatch whose action had no handler went back to `pending` with a due time about a minute
ahead (`ReleaseKind.WAIT`, result code `handler_missing`). A daemon that starts with the
handler need not let it sit out that minute: this one statement moves the due time of those
rows to now, and nothing else (the state-machine triggers admit exactly that, and no ledger
line: nothing was claimed or changed status).
"""

from __future__ import annotations

import json
from collections.abc import Collection

from qinglong_dispatcher.adapters.sql import query


async def wake_handler_waits(
    q: query.Query, action_types: Collection[str], *, now_ms: int
) -> tuple[str, ...]:
    """Make due at `now_ms` every handler wait of these action types; the ids woken."""
    if not action_types:
        return ()
    found = await q.all(
        "wake_handler_waits",
        {"action_types": json.dumps(sorted(action_types)), "now_ms": now_ms},
    )
    return tuple(sorted(row["dispatch_id"] for row in found))
