"""Signals: the first SIGTERM/SIGINT asks for a graceful stop, a second one exits at once."""

from __future__ import annotations

import os
import signal
import sys

import anyio
import anyio.abc
import structlog

log = structlog.get_logger("qinglong_dispatcher.shutdown")

SECOND_SIGNAL_EXIT = 1


async def watch(
    stop: anyio.Event, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Set `stop` on the first signal; on the second, leave immediately with status 1.

    Signal handlers only set the event (the loop owns the orderly stop); the second signal
    is the operator saying "now": nothing is flushed or completed, leases expire on their own.
    `task_status` is told once the handlers are installed: before that, a SIGTERM still has
    its default effect, so nothing may report the daemon ready earlier.
    """
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for signum in signals:
            name = signal.Signals(signum).name
            if not stop.is_set():
                log.info("daemon.stopping", signal=name)
                stop.set()
                continue
            log.warning("daemon.killed", signal=name)
            sys.stderr.flush()
            os._exit(SECOND_SIGNAL_EXIT)
