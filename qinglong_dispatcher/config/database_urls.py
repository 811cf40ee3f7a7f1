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
        _check_ports(url)
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


def _ports(url: str) -> list[str]:
    """The ports a libpq URL names: after each host of its (multi-host) authority, and in
    its `port` query parameter (one, or a comma-separated list)."""
    authority = url.partition("://")[2].split("/", 1)[0].split("?", 1)[0]
    found = []
    for host in authority.rpartition("@")[2].split(","):
        port = host.rpartition("]")[2] if host.startswith("[") else host
        if ":" in port:
            found.append(port.rpartition(":")[2])
    query = parse.urlsplit(url).query if "?" in url else ""
    for value in parse.parse_qs(query, keep_blank_values=True).get("port", []):
        found.extend(value.split(","))
    return found


def _check_ports(url: str) -> None:
    """A port outside 1–65535 is a configuration error now, not an OverflowError from the
    socket layer when the driver connects (an internal error, exit 70)."""
    for port in _ports(url):
        digits = port.isascii() and port.isdigit() and len(port) <= 8  # int() of these only
        if port and not (digits and 1 <= int(port) <= 65535):
            shown = port if digits else "?"
            raise ValueError(
                f"the port must be between 1 and 65535 (got {shown} in {redact(url)!r})"
            )
