"""What a database URL says: its dialect and SQLite file, and a form safe to show."""

from __future__ import annotations

from pathlib import Path
from urllib import parse

from qinglong_dispatcher import resources

_URL_FORMS = "sqlite:///relative.db, sqlite:////abs/path.db or postgresql://…"


def redact(url: str) -> str:
    """The URL with any password replaced, safe for an error message or a log line."""
    try:
        parts = parse.urlsplit(url)
        if parts.password is None:
            return url
    except ValueError:
        return "<unparsable URL>"
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parse.urlunsplit(parts._replace(netloc=netloc))


def split(url: str) -> tuple[resources.Dialect, Path | None]:
    """Return the dialect of `url` and, for SQLite, the file path; ValueError if malformed."""
    if url.startswith(("postgresql://", "postgres://")):
        return "postgres", None
    if not url.startswith("sqlite:"):
        raise ValueError(f"must be {_URL_FORMS} (got {redact(url)!r})")
    raw = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else ""
    # A file path only: no host, no query, no in-memory database (the store must be durable).
    if not raw or raw.endswith("/") or raw == ":memory:" or any(c in raw for c in "?#"):
        raise ValueError(
            f"a SQLite URL must be sqlite:///relative.db or sqlite:////abs/path.db (got {url!r})"
        )
    return "sqlite", Path(raw)
