"""`QINGLONG_DATABASE_URL_FILE`: the database URL read from a file, so that a password need be
neither on a command line (`/proc/PID/cmdline`) nor in the environment."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from qinglong_dispatcher import bounded_files
from qinglong_dispatcher.domain import errors

DATABASE_URL_ENV = "QINGLONG_DATABASE_URL"

URL_FILE_ENV = "QINGLONG_DATABASE_URL_FILE"
"""A file holding the database URL, so that a password need not be on a command line."""


def database_url(environ: Mapping[str, str], flag: str | None) -> str | None:
    """`--database`, else the URL in the `QINGLONG_DATABASE_URL_FILE` file (which takes the
    place of `QINGLONG_DATABASE_URL`: both, or the file and the flag, contradict)."""
    named = {key.upper(): value for key, value in environ.items() if value != ""}
    if URL_FILE_ENV not in named:
        return flag
    if flag is not None or DATABASE_URL_ENV in named:
        given = "--database" if flag is not None else DATABASE_URL_ENV
        raise errors.ConfigurationError(f"{URL_FILE_ENV} and {given} contradict: set one")
    path = Path(named[URL_FILE_ENV]).expanduser()
    try:
        return bounded_files.read_one_line(path, bounded_files.URL_FILE_MAX_BYTES)
    except bounded_files.TooLarge as exc:
        reason = str(exc)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
    except ValueError as exc:  # the reason only: the text may be a password
        reason = "not UTF-8" if isinstance(exc, UnicodeDecodeError) else str(exc)
    raise errors.ConfigurationError(f"{URL_FILE_ENV} {path}: cannot be read ({reason})")
