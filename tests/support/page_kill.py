"""Test-only entry point: one dispatch batch that SIGKILLs its own process inside the page
transaction, right after the named statement ran and before the commit.

`python -m tests.support.page_kill STATEMENT`; settings come from the environment like the
daemon's (QINGLONG_DATABASE_URL, QINGLONG_PROFILE, QINGLONG_PAGE_SIZE, QINGLONG_OWNER_ID, …).
If the page transaction never runs that statement, the batch ends and the process exits 0.
"""

from __future__ import annotations

import os
import signal
import sys

import anyio

from qinglong_dispatcher import bootstrap, clock
from qinglong_dispatcher.config.settings import load_settings
from tests.support import page_crash


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


async def main(after: str) -> None:
    settings = load_settings()
    store = await bootstrap.open_store(settings)
    page_crash.crash_inside(store, after=after, crash=_kill)
    the_dispatcher = bootstrap.build_dispatcher(settings, store, clock.SystemClock())
    try:
        await the_dispatcher.dispatch_batch()
    finally:
        await store.close()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
