"""Keyset positions of the paged listings: `<milliseconds>:<identifier>`, parsed one way."""

from __future__ import annotations

import re

from qinglong_dispatcher.domain import errors, plans

_POSITION = re.compile(r"([0-9]{1,18}):(.+)", re.DOTALL)


def parse(text: str, *, form: str) -> tuple[int, str]:
    """The (milliseconds, identifier) of a cursor as a listing printed it; anything else is
    `InvalidInput` naming `form` (such as `<created_at_ms>:<dispatch_id>`), never the text."""
    found = _POSITION.fullmatch(text)
    if found is None or not plans.is_identifier(found.group(2)):
        raise errors.InvalidInput(f"after: must be a cursor {form} as listed")
    return int(found.group(1)), found.group(2)
