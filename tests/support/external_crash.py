"""Test-only entry point: one dispatch batch whose installed action SIGKILLs its own process.

`python -m tests.support.external_crash ACTION_TYPE POINT`: the installed action of
ACTION_TYPE (loaded from the entry points like the daemon's) is killed at POINT —
`before_execute` (the start barrier committed, no effect yet) or `after_execute` (the effect
done, the execution not completed). Settings come from the environment like the daemon's.
"""

from __future__ import annotations

import os
import signal
import sys

import anyio

from qinglong_dispatcher import bootstrap, clock, ports
from qinglong_dispatcher.actions import registry
from qinglong_dispatcher.config.settings import load_settings
from qinglong_dispatcher.domain import records


class KilledAt:
    """An action's handler, with a SIGKILL of this process before or after its execute."""

    def __init__(self, inner: ports.ApprovedActionHandler, point: str) -> None:
        self.action_type = inner.action_type
        self._inner = inner
        self._point = point

    async def inspect(self, dispatch: records.Dispatch) -> ports.InspectResult:
        return await self._inner.inspect(dispatch)

    async def execute(self, ctx: ports.ExecutionContext) -> ports.ExecuteResult:
        if self._point == "before_execute":
            os.kill(os.getpid(), signal.SIGKILL)
        result = await self._inner.execute(ctx)
        if self._point == "after_execute":
            os.kill(os.getpid(), signal.SIGKILL)
        return result


async def main(action_type: str, point: str) -> None:
    settings = load_settings()
    store = await bootstrap.open_store(settings, create=False)
    the_clock = clock.SystemClock()
    installed = registry.installed()
    inner = installed.handlers(installed.context(store, the_clock))[action_type]
    the_dispatcher = bootstrap.build_dispatcher(
        settings, store, the_clock, extra_handlers={action_type: KilledAt(inner, point)}
    )
    try:
        await the_dispatcher.dispatch_batch()
    finally:
        await store.close()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
