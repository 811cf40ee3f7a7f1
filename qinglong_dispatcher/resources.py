"""Locate the data folders shipped beside the code: SQL migrations and profile defaults."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal, get_args

Dialect = Literal["sqlite", "postgres"]
"""The two store dialects; also the names of the folders under `migrations/`."""

_DIALECTS: frozenset[str] = frozenset(get_args(Dialect))
_PROFILE_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")


def _data_dir(name: str) -> Path:
    """Return the folder `name` from an installed wheel or, failing that, the source tree.

    The wheel force-includes `migrations/` and `profiles/` inside the package; in a
    source checkout they sit beside it. The path is derived from this file only, so the
    working directory never matters.
    """
    packaged = Path(__file__).parent / name
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / name


def migrations_dir(dialect: Dialect) -> Path:
    """Return the folder that holds the ordered `NNNN_name.sql` migrations of `dialect`."""
    if dialect not in _DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}: expected sqlite or postgres")
    return _data_dir("migrations") / dialect


def profile_file(name: str) -> Path:
    """Return the path of the defaults file `profiles/<name>.toml` (it may not exist)."""
    if not _PROFILE_NAME.fullmatch(name):
        raise ValueError(f"invalid profile name {name!r}")
    return _data_dir("profiles") / f"{name}.toml"
