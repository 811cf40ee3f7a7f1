"""`run.create`: queue one Run of an approved task revision, exactly once.

- `plan`: `RunCreatePlan` — the task revision, its executor, priority and references;
- `handler`: inspect resolves the immutable plan; execute creates the Run, its receipt and
  the completion in one transaction (`committed`);
- `evidence`: the receipt and the Run, read-only;
- its tables: `runs`, `run_attempts`, `run_events` and `approved_run_action_receipts`
  (migration `0002_runs_and_receipts`), written by its own transaction `store.py` with its
  statements `queries/<dialect>.sql`: its repository (`tables.Repository`, built here over
  the store it is given) runs it alone, the page transaction a page at a time
  (`tables.TABLES`, which the handler supplies).

See `docs/actions.md#runcreate`.
"""

from __future__ import annotations

from qinglong_dispatcher.actions import contract
from qinglong_dispatcher.actions.run_create import evidence, handler, plan, tables

ACTION_TYPE = plan.ACTION_TYPE

ACTION = contract.BuiltInSpec(
    action_type=ACTION_TYPE,
    plan_model=plan.RunCreatePlan,
    handler=lambda ctx: handler.RunCreateHandler(
        ctx.store, tables.Repository(ctx.store), ctx.clock
    ),
    evidence=lambda ctx: evidence.RunCreateEvidence(tables.Repository(ctx.store)),
)
