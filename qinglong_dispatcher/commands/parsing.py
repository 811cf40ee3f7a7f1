"""What the command tree's builders share: handlers imported on use, and typed arguments.

Standard library only: `cli.build_parser` and the `*_arguments` modules build every command's
arguments without importing a handler, so a read command never loads the daemon, the actions
or the bench.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from qinglong_dispatcher.config.settings import Settings

    Handler = Callable[[Settings, argparse.Namespace], Awaitable[int]]


def lazy(module: str, name: str) -> Handler:
    """The handler `name` of `commands.<module>`, imported when the command runs."""

    async def handler(settings: Settings, args: argparse.Namespace) -> int:
        found: Handler = getattr(
            importlib.import_module(f"qinglong_dispatcher.commands.{module}"), name
        )
        return await found(settings, args)

    # Named as the function it stands for: logs, tracebacks and tests see which command it is.
    handler.__module__ = f"qinglong_dispatcher.commands.{module}"
    handler.__qualname__ = handler.__name__ = name
    return handler


def positive_int(text: str) -> int:
    """An integer ≥ 1 (`tick --max-pages 0` would claim nothing and report success)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value
