"""The tool sandbox: the one place the paths of `builtin.file.write` are derived and checked.

A target is always `<sandbox>/<project id>/<dispatch id>`: both names are identifiers (no
separator, never `.` or `..`) and the resolved result must sit directly inside the resolved
sandbox, so neither a plan nor a symlink can lead a write elsewhere. The sandbox directory
itself must already exist; nothing here creates it. These are blocking filesystem calls:
callers run them on a worker thread.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from qinglong_dispatcher.domain import errors, plans


def content_sha256(data: bytes) -> str:
    """The plain SHA-256 of file content (what `sha256sum` prints)."""
    return hashlib.sha256(data).hexdigest()


def policy_root(configured: Path) -> str:
    """The sandbox setting as the policy fence binds it: absolute, without touching the disk."""
    return os.path.abspath(configured)


def root(configured: Path | None) -> Path:
    """The resolved sandbox directory; `SandboxUnavailable` when unset, absent or not a dir."""
    if configured is None:
        raise errors.SandboxUnavailable("QINGLONG_TOOL_SANDBOX_DIR is not set")
    try:
        resolved = configured.resolve(strict=True)
    except OSError:
        raise errors.SandboxUnavailable(
            f"QINGLONG_TOOL_SANDBOX_DIR {configured} does not exist (create it first)"
        ) from None
    if not resolved.is_dir():
        raise errors.SandboxUnavailable(
            f"QINGLONG_TOOL_SANDBOX_DIR {configured} is not a directory"
        )
    return resolved


def _name(what: str, value: str) -> str:
    plans.require_identifier(what, value)
    if value in (".", "..") or os.sep in value or (os.altsep and os.altsep in value):
        raise errors.InvalidInput(f"{what}: may not name a path")
    return value


def project_dir(sandbox: Path, project_id: str) -> Path:
    """`<sandbox>/<project id>`, derived from an identifier, never from a plan path."""
    return sandbox / _name("project id", project_id)


def target(sandbox: Path, project_id: str, dispatch_id: str) -> Path:
    """`<sandbox>/<project id>/<dispatch id>`."""
    return project_dir(sandbox, project_id) / _name("dispatch id", dispatch_id)


def require_inside(sandbox: Path, directory: Path) -> Path:
    """The resolved `directory`, which must be a direct child of the resolved sandbox."""
    try:
        resolved = directory.resolve(strict=True)
    except OSError:
        raise errors.SandboxUnavailable("the project directory is not visible") from None
    if resolved.parent != sandbox or not resolved.is_dir():
        raise errors.SandboxUnavailable("the project directory leaves the sandbox")
    return resolved
