"""Loads a dialect's named SQL blocks (`-- name --` headers), once per process."""

from __future__ import annotations

import functools
import re
from pathlib import Path

_HEADER = re.compile(r"^--\s*([a-z_][a-z0-9_]*)\s*--\s*$", re.MULTILINE)
_REFERENCE = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


@functools.cache
def load(path: Path) -> dict[str, str]:
    """Map block name to its SQL text; a repeated name is a programming error."""
    text = path.read_text(encoding="utf-8")
    parts = _HEADER.split(text)
    blocks: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in blocks:
            raise ValueError(f"{path.name}: block {name!r} is defined twice")
        blocks[name] = body.strip().rstrip(";")
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
