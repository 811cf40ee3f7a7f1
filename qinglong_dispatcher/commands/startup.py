"""What the command line needs before it has imported anything heavy: Ctrl-C held through the
imports, and a mistyped global option named as such. Standard library only: `cli` imports
this at its top, ahead of argparse's parse and of pydantic, anyio and the commands.
"""

from __future__ import annotations

import contextlib
import difflib
import signal
import threading
from collections.abc import Iterator, Sequence

GLOBAL_OPTIONS = ("--config", "--profile", "--database")
"""The global options that take a value (`cli._shared_options`)."""
FLAGS = ("--version", "--help", "-h")


@contextlib.contextmanager
def held_interrupts() -> Iterator[None]:
    """Note a Ctrl-C instead of raising it mid-import, then raise it at the end, at a point
    where nothing is half done.

    A KeyboardInterrupt inside an import leaves a half-imported module, is printed and lost
    by importlib's own callbacks, or, inside a native extension's initialisation
    (pydantic-core), becomes a panic that is not a KeyboardInterrupt at all. Only in the main
    thread, and only over Python's own handler: a program embedding `main` keeps its own."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    noted: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, _frame: noted.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if noted:
        raise KeyboardInterrupt


def unknown_global_option(given: Sequence[str]) -> str:
    """The message for an unknown option before the command ("" when there is none).

    argparse reads `--profle cluster status` as an unknown `--profle` followed by the command
    `cluster`, and reports "invalid choice: 'cluster'", which sends the reader looking in the
    wrong place: name the option, and the one it resembles."""
    takes_value, flags = GLOBAL_OPTIONS, FLAGS
    skip = False
    for token in given:
        if skip:
            skip = False
            continue
        if not token.startswith("-") or token == "-":
            return ""  # the command: what follows is its own
        name = token.split("=", 1)[0]
        matches = [o for o in (*takes_value, *flags) if o.startswith(name) and name != "-"]
        if len(matches) == 1:
            skip = matches[0] in takes_value and "=" not in token
            continue
        shown = name if len(name) <= 40 and name.isprintable() else "?"
        near = difflib.get_close_matches(name, takes_value + flags[:2], n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        return f"unrecognized option: {shown}{hint}"
    return ""
