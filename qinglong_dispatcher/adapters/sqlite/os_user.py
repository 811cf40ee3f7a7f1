"""The principal an edge store authenticates: the OS user running the process."""

from __future__ import annotations

import getpass
import os


def os_principal() -> str:
    """On an edge device file permissions are the authority: the OS user is the principal.

    It names approvals, recovery resolutions and the tool start's audit event; PostgreSQL's
    statements write `session_user` instead and ignore it.
    """
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid:{os.geteuid()}"
