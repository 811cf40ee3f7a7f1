"""A test kit for action authors: an installed action's own tests, on the daemon's real path.

    from qinglong_dispatcher import testing

    async def test_a_note_is_written(tmp_path):
        async with testing.open_kit(ACTION, tmp_path) as kit:
            done = await kit.dispatch({"schemaVersion": 1, "actionRef": "n-1", ...})
            testing.assert_succeeded(done, code="note_written", attempts=1)

`open_kit` takes the action's `ActionSpec` (no install needed) or its entry point's name. It
needs no test runner: an async context manager and plain `AssertionError`s. Nothing in the
dispatcher imports this package (an import contract keeps it so).
"""

from __future__ import annotations

from qinglong_dispatcher.testing.clock import ManualClock
from qinglong_dispatcher.testing.kit import (
    APPROVED_BY,
    CRASH_POINTS,
    REQUESTED_BY,
    ActionKit,
    SimulatedCrash,
    from_entry_point,
    open_kit,
)
from qinglong_dispatcher.testing.ledger import (
    Dispatched,
    assert_failed,
    assert_receipt,
    assert_recovery_required,
    assert_settled_by_evidence,
    assert_status,
    assert_succeeded,
)

__all__ = [
    "APPROVED_BY",
    "CRASH_POINTS",
    "REQUESTED_BY",
    "ActionKit",
    "Dispatched",
    "ManualClock",
    "SimulatedCrash",
    "assert_failed",
    "assert_receipt",
    "assert_recovery_required",
    "assert_settled_by_evidence",
    "assert_status",
    "assert_succeeded",
    "from_entry_point",
    "open_kit",
]
