"""Test-only entry point: one dispatch batch whose `tool.invoke` SIGKILLs its own process.

The kill comes at the action's `after_adapter` point: the start barrier committed, the file
is written, and neither the StepRun nor the execution is settled yet. Settings come from the
environment like the daemon's (QINGLONG_DATABASE_URL, QINGLONG_TOOL_SANDBOX_DIR, …).
"""

from __future__ import annotations

import os
import signal

import anyio

from qinglong_dispatcher import bootstrap, clock
from qinglong_dispatcher.actions.tool_invoke import file_write
from qinglong_dispatcher.actions.tool_invoke import handler as tool_invoke
from qinglong_dispatcher.config.settings import load_settings
from qinglong_dispatcher.domain import records
from tests.support import repositories


async def _kill_after_adapter(point: str, dispatch: records.Dispatch) -> None:
    if point == "after_adapter":
        os.kill(os.getpid(), signal.SIGKILL)


async def main() -> None:
    settings = load_settings()
    assert settings.tool_sandbox_dir is not None
    store = await bootstrap.open_store(settings)
    the_clock = clock.SystemClock()
    handler = tool_invoke.ToolInvokeHandler(
        store,
        repositories.steps(store),
        the_clock,
        adapter=file_write.FileWriteAdapter(settings.tool_sandbox_dir),
        profile=settings.profile,
        fault_hook=_kill_after_adapter,
    )
    the_dispatcher = bootstrap.build_dispatcher(
        settings, store, the_clock, extra_handlers={tool_invoke.ACTION_TYPE: handler}
    )
    try:
        await the_dispatcher.dispatch_batch()
    finally:
        await store.close()


if __name__ == "__main__":
    anyio.run(main)
