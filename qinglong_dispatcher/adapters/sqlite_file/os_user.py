"""The principal an edge store authenticates: the OS user running the process."""

from __future__ import annotations

import os
import pwd


def os_principal() -> str:
    """On an edge device file permissions are the authority: the OS user is the principal.

    It names approvals, recovery resolutions and the tool start's audit event; PostgreSQL's
    statements write `session_user` instead and ignore it. The name comes from the effective
    uid's passwd entry, never from `LOGNAME`/`USER`: any local user can set those, and the
    file's permissions check the uid, so the uid is what the record must name.
    """
    uid = os.geteuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # no passwd entry (a container's arbitrary uid)
        return f"uid:{uid}"
