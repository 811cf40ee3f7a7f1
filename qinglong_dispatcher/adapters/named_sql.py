"""Loads a dialect's named SQL blocks (`-- name --` headers), once per process.

A dialect's statements are a folder of files by area (`queries/executions.sql`, …) and the
file of that dialect in each folder the built-in actions lend the store (`run_create/queries/
sqlite.sql`, …: the statements of the tables only that action writes; the composition root
hands the folders over): one namespace, so a name appears in one file only, and a block may
splice one from another file.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from pathlib import Path

_HEADER = re.compile(r"^--\s*([a-z_][a-z0-9_]*)\s*--\s*$", re.MULTILINE)
_REFERENCE = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


def load_dialect(folder: Path, dialect: str, actions: Sequence[Path]) -> dict[str, str]:
    """`load` of a dialect's folder and of its file (`<dialect>.sql`) in each of `actions`."""
    files = (statements / f"{dialect}.sql" for statements in actions)
    return load(*sorted(folder.glob("*.sql")), *files)


def load_folder(folder: Path) -> dict[str, str]:
    """`load` of every `*.sql` file in `folder`, in name order."""
    return load(*sorted(folder.glob("*.sql")))


@functools.cache
def load(*paths: Path) -> dict[str, str]:
    """Map block name to its SQL text; a name defined twice (in one file or two) is refused."""
    blocks: dict[str, str] = {}
    defined_in: dict[str, str] = {}
    for path in paths:
        parts = _HEADER.split(path.read_text(encoding="utf-8"))
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in blocks:
                raise ValueError(
                    f"{path.name}: block {name!r} is defined in {defined_in[name]} too"
                )
            blocks[name] = body.strip().rstrip(";")
            defined_in[name] = path.name
    # A block may splice in another with `{name}` (shared column lists, a statement and its
    # locking variant); a spliced block may splice in turn, a few levels deep at most.
    for _ in range(3):
        blocks = _spliced(blocks)
    return blocks


def _spliced(blocks: dict[str, str]) -> dict[str, str]:
    """Every `{name}` of a known block replaced by that block's text (one level)."""
    return {
        name: _REFERENCE.sub(lambda m: blocks.get(m.group(1), m.group(0)), body)
        for name, body in blocks.items()
    }
