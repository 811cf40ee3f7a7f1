"""The built-in actions' own repositories over a test's store, as their factories build them
(`actions/run_create/tables.Repository`, `actions/tool_invoke/tables.Repository`)."""

from __future__ import annotations

from qinglong_dispatcher.actions.run_create import tables as run_create_tables
from qinglong_dispatcher.actions.tool_invoke import tables as tool_invoke_tables
from qinglong_dispatcher.ports import action_tables


def runs(store: action_tables.StoreHost) -> run_create_tables.Repository:
    """`run.create`'s repository (Runs and receipts) running on `store`."""
    return run_create_tables.Repository(store)


def steps(store: action_tables.StoreHost) -> tool_invoke_tables.Repository:
    """`tool.invoke`'s repository (StepRuns and start barriers) running on `store`."""
    return tool_invoke_tables.Repository(store)
