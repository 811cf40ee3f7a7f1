"""What a PostgreSQL driver error means: a typed store error, or the database's own refusal.

Nothing above the PostgreSQL adapter sees asyncpg: each of its errors becomes one of
`domain.errors` here, with a low-sensitivity message (a SQLSTATE and a class name, never row
contents); the project's own SQLSTATEs (`QLA…`, `QLT01`, …) name the rule that refused.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

import asyncpg

from qinglong_dispatcher.domain import errors

DRIVER_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.exceptions.InternalClientError,
    OSError,
    TimeoutError,
)
"""What asyncpg raises; anything else (a typed refusal, a rollback signal) passes through."""
RETRY_SQLSTATES = frozenset({"40001", "40P01"})  # serialization_failure, deadlock_detected

APPROVAL_SQLSTATES: dict[str, type[errors.ApprovalError]] = {
    "QLA01": errors.ApprovalNotPermitted,
    "QLA02": errors.SelfApprovalRefused,
    **dict.fromkeys(("QLA03", "QLA05"), errors.ApprovalTransitionRefused),
    "QLA04": errors.ApprovalExpired,
    "QLW02": errors.WindowEmpty,
}
"""The refusals of the approval trigger (migration 0005) and of a window never open (0040)."""

TRANSITION_REFUSED = "QLT01"
"""SQLSTATE of the state-machine triggers (migration 0006)."""

INTEGRITY_REFUSED = frozenset(
    {"QLF01", "QLF02", "QLF03", "QLH01", "QLR01", "QLI01", "QLI02", "QLW01", "QLZ01", "QLZ02"}
)
"""SQLSTATEs of the guards of fences, resolutions, records, holds, windows and freezes."""

SUBMIT_DECLINED = "QLS01"
"""SQLSTATE of migration 0018's `submit_one` when one of its updates matched nothing: it rolled
back, and the caller runs the shared submit transaction, which names the refusal."""

Translated = errors.StoreError | errors.ApprovalError
"""What a driver error becomes: a store fault, or the database's refusal of an approval step."""


def translate(exc: BaseException) -> Translated:
    """Map a driver error to a typed store error (messages carry no row contents)."""
    if isinstance(exc, asyncpg.PostgresError):
        return _translate_sqlstate(exc)
    if isinstance(exc, asyncpg.exceptions.DataError):
        return errors.StoreError("a value does not fit its column", code="invalid_value")
    if isinstance(exc, asyncpg.InterfaceError | OSError | asyncpg.exceptions.InternalClientError):
        return errors.StoreUnavailable(f"PostgreSQL cannot be used ({exc.__class__.__name__})")
    if isinstance(exc, TimeoutError):
        return errors.StoreUnavailable("PostgreSQL did not answer in time")
    return errors.StoreError(f"PostgreSQL driver error ({exc.__class__.__name__})")


def _translate_sqlstate(exc: Any) -> Translated:
    state = str(getattr(exc, "sqlstate", "") or "")
    name = exc.__class__.__name__
    refusal = APPROVAL_SQLSTATES.get(state)
    if refusal is not None:
        # The trigger's message names no row contents beyond the request id and states.
        return refusal(exc.args[0] if exc.args else None)
    if state in RETRY_SQLSTATES or state in ("55P03", "57014"):
        # Retries spent, a lock wait beyond lock_timeout, or statement_timeout: all rolled back.
        return errors.StoreBusy(f"PostgreSQL is busy ({state} {name})")
    if state.startswith(("08", "28")) or state in ("57P01", "57P02", "57P03", "53300", "3D000"):
        return errors.StoreUnavailable(f"PostgreSQL cannot be used ({state} {name})")
    if state == "25P03":  # idle_in_transaction_session_timeout ended the session
        return errors.StoreUnavailable(f"PostgreSQL ended the session ({state} {name})")
    if state == "53100":
        return errors.StoreFull()
    if state in ("XX001", "XX002"):
        return errors.StoreCorrupted()
    if state == TRANSITION_REFUSED or state in INTEGRITY_REFUSED:
        # The trigger's message names the rule and the two statuses, never row contents.
        return errors.TransitionRefused(exc.args[0] if exc.args else None)
    if state.startswith("23"):
        return errors.StoreError("a constraint refused the write", code="constraint_violation")
    if state == SUBMIT_DECLINED:
        return errors.StoreError("the one-statement submit declined", code="submit_declined")
    if state == "42501":
        return errors.StoreError(
            f"PostgreSQL refused the privilege: {exc.args[0] if exc.args else name}",
            code="permission_denied",
        )
    if state in ("42P01", "42703", "3F000"):
        return errors.SchemaError(
            f"the database schema does not match this release ({state}); run migrate"
        )
    return errors.StoreError(f"PostgreSQL error ({state} {name})")


def describe_url(url: str) -> str:
    """`host:port[,host:port…]/database` of a URL: what to name in an error, never the user's
    password (nor the user: the server's own message names it where it matters)."""
    parts = urllib.parse.urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2] or "localhost"
    database = parts.path.lstrip("/") or "(default database)"
    return f"{hosts}/{database}"


def opening_error(url: str, exc: BaseException) -> Translated:
    """The typed error of a failed connect, naming the server and why (its own message)."""
    error = translate(exc)
    if isinstance(exc, asyncpg.PostgresError):
        reason = exc.args[0] if exc.args else exc.__class__.__name__
    elif isinstance(exc, OSError) and exc.strerror:
        reason = exc.strerror
    elif isinstance(exc, TimeoutError):
        reason = "no answer in time"
    else:
        reason = str(exc) or exc.__class__.__name__
    return type(error)(f"PostgreSQL at {describe_url(url)} cannot be used: {reason}")
