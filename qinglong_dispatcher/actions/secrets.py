"""Secrets by reference: what a receiver's or a command's configuration names instead of a value.

A reference is one of

- `credential:NAME` — the file `NAME` in `$CREDENTIALS_DIRECTORY` (systemd `LoadCredential=`);
- `file:/absolute/path` — a file, such as a mounted Kubernetes Secret;
- `env:VARIABLE` — an environment variable of the daemon.

The value is read each time it is used, so a rotated file applies without a restart, and it
lives only in the memory of the request or process that needs it: never in a plan, a digest,
the database, a log line, a metric or an error. Errors name the reference, never the value.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final, Literal

from qinglong_dispatcher import bounded_files
from qinglong_dispatcher.domain import errors

MAX_SECRET_BYTES: Final = 64 * 1024
"""A token, a password or an HMAC key; far less in practice."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")

Kind = Literal["credential", "file", "env"]


class SecretUnavailable(errors.QinglongError):
    """A referenced secret cannot be read now (missing, unreadable, empty or too large)."""

    code = "secret_unavailable"


@dataclasses.dataclass(frozen=True, slots=True)
class SecretRef:
    """Where a secret is; `str(ref)` is the reference as configured, safe to show."""

    kind: Kind
    name: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"

    @classmethod
    def parse(cls, text: object) -> SecretRef:
        """A reference from configuration; ValueError (naming no value) when it is not one."""
        if not isinstance(text, str) or ":" not in text:
            raise ValueError("a secret reference is credential:NAME, file:/PATH or env:NAME")
        kind, _, name = text.partition(":")
        if kind == "credential" and _NAME.fullmatch(name):
            return cls("credential", name)
        if kind == "file" and name.startswith("/") and "\x00" not in name:
            return cls("file", name)
        if kind == "env" and _VARIABLE.fullmatch(name):
            return cls("env", name)
        raise ValueError("a secret reference is credential:NAME, file:/PATH or env:NAME")

    def read(self, environ: Mapping[str, str] | None = None) -> bytes:
        """The secret's bytes now (one trailing newline dropped); `SecretUnavailable` else."""
        env = os.environ if environ is None else environ
        if self.kind == "env":
            value = env.get(self.name)
            if not value:
                raise SecretUnavailable(f"secret {self} is not set")
            data = value.encode("utf-8")
            if len(data) > MAX_SECRET_BYTES:
                raise SecretUnavailable(f"secret {self} is larger than {MAX_SECRET_BYTES} bytes")
            return data
        if self.kind == "credential":
            folder = env.get("CREDENTIALS_DIRECTORY")
            if not folder:
                raise SecretUnavailable(f"secret {self}: $CREDENTIALS_DIRECTORY is not set")
            path = Path(folder) / self.name
        else:
            path = Path(self.name)
        try:
            data = bounded_files.read_at_most(path, MAX_SECRET_BYTES)
        except bounded_files.TooLarge:
            raise SecretUnavailable(
                f"secret {self} is larger than {MAX_SECRET_BYTES} bytes"
            ) from None
        except OSError as exc:
            raise SecretUnavailable(
                f"secret {self} cannot be read ({exc.strerror or type(exc).__name__})"
            ) from None
        data = data.removesuffix(b"\n")
        if not data:
            raise SecretUnavailable(f"secret {self} is empty")
        return data
