"""The settings' defaults that depend on the profile, the host or the process's environment."""

from __future__ import annotations

import os
import secrets
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal


def default_owner_id(profile: object, environ: Mapping[str, str]) -> str:
    """host:pid on edge (one process per file); on cluster the pod name (`HOSTNAME`, else the
    host name), the pid and a random suffix, so two replicas sharing a host (or a `HOSTNAME`
    and pid 1 in two containers) never share an owner id."""
    host = socket.gethostname()
    if profile == "cluster":
        return f"{environ.get('HOSTNAME') or host}:{os.getpid()}:{secrets.token_hex(3)}"
    return f"{host}:{os.getpid()}"


def owner_id(data: dict[str, Any]) -> str:
    return default_owner_id(data.get("profile"), os.environ)


def log_format() -> Literal["json", "console"]:
    """Readable lines on a terminal, JSON lines for a journal, a file or a collector."""
    stream = sys.stderr
    return "console" if stream is not None and stream.isatty() else "json"


def tool_sandbox(data: dict[str, Any]) -> Path | None:
    # Cluster needs shared storage the operator names; a local default would split replicas.
    return None if data.get("profile") == "cluster" else Path("var/tool-sandbox")


def plan_keyring(data: dict[str, Any]) -> Path | None:
    # systemd's LoadCredential=plan-keys:… puts the ring here; without it, plans stay in clear.
    folder = os.environ.get("CREDENTIALS_DIRECTORY")
    candidate = Path(folder) / "plan-keys" if folder else None
    return candidate if candidate is not None and candidate.is_file() else None
