"""What a built-in action's transactions borrow of the store's own (`ports.transactions.Shared`).

This module is the `Shared` the store hands an action's transaction (a module satisfies the
protocol): the action's package sees the port, never these adapter modules.
"""

from __future__ import annotations

from qinglong_dispatcher.adapters.sql import approvals, completions, recovery, rows

read_row = rows.read_row
complete = completions.complete
complete_checked = completions.complete_checked
create_approval = approvals.create
approve = approvals.approve
consume = approvals.consume
database_now_ms = recovery.database_now_ms
