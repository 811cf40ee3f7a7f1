"""`tool.invoke`: run one reviewed built-in tool for one Tool StepRun of a Run, at most once.

- `plan`: `ToolInvocationPlan` — the Run, its Tool StepRun, the reviewed tool and its bounded
  content; the tool registry, the step records and the start barrier's pure rules are in
  `domain.tools`;
- `invocations`: the start command a dispatch becomes, its identities derived from the
  dispatch id;
- `handler`: inspect checks the StepRun waits for this very approval; execute commits the
  tool's own start barrier before the adapter runs (`file_write`, inside `sandbox`);
- `evidence`: the barrier and the file the adapter left, read-only;
- its tables: `step_runs`, `step_run_mutations`, `tool_execution_start_barriers` and the
  audit receipts (migration `0004_tool_steps`), written by its own transactions `steps.py`
  and `barriers.py` with its statements `queries/<dialect>.sql`, run by its repository
  (`tables.Repository`, built here over the store it is given);
- submitting a step (plan, waiting StepRun, approval) is `api.submit_tool_invocation`.

See `docs/actions.md#toolinvoke`.
"""

from __future__ import annotations

from qinglong_dispatcher.actions import contract
from qinglong_dispatcher.actions.tool_invoke import evidence, file_write, handler, plan, tables

ACTION_TYPE = plan.ACTION_TYPE


def _handler(ctx: contract.BuiltInContext) -> handler.ToolInvokeHandler | None:
    # Without a sandbox there is nowhere to write: no handler, so dispatches wait for one.
    if ctx.tool_sandbox_dir is None:
        return None
    return handler.ToolInvokeHandler(
        ctx.store,
        tables.Repository(ctx.store),
        ctx.clock,
        adapter=file_write.FileWriteAdapter(ctx.tool_sandbox_dir),
        profile=ctx.profile,
    )


ACTION = contract.BuiltInSpec(
    action_type=ACTION_TYPE,
    plan_model=plan.ToolInvocationPlan,
    handler=_handler,
    # Always there: without a visible sandbox it answers `unavailable`, never `missing`.
    evidence=lambda ctx: evidence.ToolInvokeEvidence(
        ctx.store, tables.Repository(ctx.store), ctx.tool_sandbox_dir
    ),
)
