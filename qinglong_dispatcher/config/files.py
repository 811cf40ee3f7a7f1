"""A settings file (`--config`, a profile's TOML): read bounded, every fault one line."""

from __future__ import annotations

import difflib
import errno
import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic_settings import BaseSettings, InitSettingsSource

from qinglong_dispatcher import bounded_files
from qinglong_dispatcher.domain import errors

NESTED_TOO_DEEPLY = "not valid TOML (nested too deeply)"
"""What a TOML file nested past the parser's stack is (tomllib raises RecursionError)."""


def layer(path: Path, kind: str, model: type[BaseSettings]) -> dict[str, Any]:
    """The settings of `model` a flat TOML file holds; every problem is one ConfigurationError
    line naming the file (and the key, for an unknown one)."""
    path = path.expanduser()  # as the TOML source does, so the check below sees its file
    # The TOML source skips a file it cannot find; a named one that is absent is an error.
    if not path.is_file():
        reason = "not a regular file" if path.exists() else os.strerror(errno.ENOENT)
        raise errors.ConfigurationError(f"{kind} {path}: cannot be read ({reason})")
    try:
        # Bounded: a regular file may still be huge, and the cap costs one read.
        data = bounded_files.read_at_most(path, bounded_files.CONFIG_MAX_BYTES)
        toml_data = tomllib.loads(data.decode("utf-8"))
    except bounded_files.TooLarge as exc:
        raise errors.ConfigurationError(f"{kind} {path}: cannot be read ({exc})") from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise errors.ConfigurationError(f"{kind} {path}: cannot be read ({reason})") from None
    except ValueError as exc:  # TOMLDecodeError, or bytes that are not UTF-8
        detail = " ".join(str(exc).split())
        raise errors.ConfigurationError(f"{kind} {path}: not valid TOML ({detail})") from None
    except RecursionError:  # tomllib recurses into nested arrays and inline tables
        raise errors.ConfigurationError(f"{kind} {path}: {NESTED_TOO_DEEPLY}") from None
    source = InitSettingsSource(model, toml_data)  # what the TOML source does with it
    # Checked here, not by extra="forbid", so the message names the file and the key as written.
    for key in toml_data:
        if key not in model.model_fields:
            near = difflib.get_close_matches(key, model.model_fields, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise errors.ConfigurationError(f"{kind} {path}: unknown setting {key!r}{hint}")
    return source()


def regular_file(value: Path | None) -> Path | None:
    """A setting naming a file: refused unless it names a regular file (None passes)."""
    # Its contents are checked when the actions are built (run, tick): here, that it is
    # there at all, so that a mistyped path is refused by every command alike.
    if value is not None and not value.is_file():
        raise ValueError(f"not a readable regular file: {value}")
    return value
