"""The console script `qinglong-dispatcher`: `cli.main`, with Ctrl-C quiet from the start.

The script pip writes imports this module first, and `cli` takes tens of milliseconds to
import (argparse and what it pulls in). A KeyboardInterrupt raised in the middle of an
import prints a traceback, can leave a half-imported module behind, and inside a native
extension's initialisation (pydantic-core) turns into a panic: so while `cli` is imported a
Ctrl-C is only noted, and answered with exit 130 once the import is done. `cli.main` holds
Ctrl-C the same way through its own imports and parsing.
"""

from __future__ import annotations

# `_signal`, the built-in module under `signal`: it is loaded before any Python code runs,
# while `signal` first imports enum and functools, tens of milliseconds with nothing guarded.
import _signal  # type: ignore[import-not-found]  # a built-in module without a stub

EXIT_INTERRUPTED = 130
"""Ctrl-C (SIGINT), as a shell reports a process it ended: 128 + 2 (`cli.EXIT_INTERRUPTED`)."""


def main() -> int:
    """Run the command line; 130 when interrupted, whenever it happens."""
    noted: list[int] = []
    previous = _signal.signal(_signal.SIGINT, lambda signum, _frame: noted.append(signum))
    try:
        from qinglong_dispatcher import cli
    finally:
        _signal.signal(_signal.SIGINT, previous)
    if noted:
        return EXIT_INTERRUPTED
    try:
        return cli.main()
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
