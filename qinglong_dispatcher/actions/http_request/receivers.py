"""The configured receivers of `http.request`: where a plan may send, parsed from one TOML file.

A plan never carries a URL: it names a receiver, and everything that decides where the bytes
go and what may be trusted about the answer (origin, methods, path prefixes, CA, timeouts,
the bearer and webhook secrets by reference, the idempotency contract of the receiver) is
operator configuration, read once at startup. Every refusal is a `ConfigurationError` of one
line naming the receiver and the field, never a secret (secrets are references, read per use).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import re
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final, Literal
from urllib import parse as urlparse

from qinglong_dispatcher import bounded_files
from qinglong_dispatcher.actions import secrets
from qinglong_dispatcher.domain import errors, plans

METHODS: Final = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
DEFAULT_MAX_RESPONSE_BYTES: Final = 1024 * 1024
DEFAULT_FAILED_STATUSES: Final = (400, 401, 403, 422)
MAX_KEEP_HEADERS: Final = 16
CA_FILE_MAX_BYTES: Final = 1024 * 1024

Lookup = Literal["none", "replay", "get"]

_HEADER_NAME = re.compile(r"[a-z0-9!#$%&'*+.^_`|~-]{1,64}")
_PREFIX = re.compile(r"/[A-Za-z0-9\-._~!$&'()*+,;=:@/]*")
# Kept response headers go into the receipt: never one that carries a credential.
_NEVER_KEPT: Final = frozenset({"set-cookie", "cookie", "authorization", "proxy-authorization"})

_FIELDS: Final = frozenset(
    {
        "base_url",
        "methods",
        "path_prefixes",
        "ca_file",
        "allow_plain_http",
        "connect_timeout_seconds",
        "read_timeout_seconds",
        "total_timeout_seconds",
        "max_response_bytes",
        "keep_headers",
        "auth",
        "webhook_secret",
        "concurrency",
        "failed_statuses",
        "idempotency",
    }
)
_IDEMPOTENCY_FIELDS: Final = frozenset(
    {"dedupes", "key_retention_seconds", "lookup", "lookup_path"}
)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Idempotency:
    """What the receiver promises about `Idempotency-Key` (what recovery may rely on)."""

    dedupes: bool = False
    """It stores the result per key and answers a same-key resend from it, never twice."""
    key_retention_seconds: int = 0
    """How long it keeps a key; evidence is asked only within that time of the start."""
    lookup: Lookup = "none"
    lookup_path: str | None = None
    """For `lookup = "get"`: the path (with `{key}`) answering the key's state."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Receiver:
    """One configured receiver: an origin and what a plan may do there."""

    name: str
    base_url: str
    """Scheme, host, optional port and optional base path, without a trailing slash."""
    host: str
    methods: frozenset[str]
    path_prefixes: tuple[str, ...]
    ca_pem: str | None = dataclasses.field(default=None, repr=False)
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 10.0
    total_timeout_s: float = 12.0  # below either profile's default execute timeout (15 s)
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    keep_headers: tuple[str, ...] = ()
    auth: secrets.SecretRef | None = None
    webhook_secret: secrets.SecretRef | None = None
    concurrency: int = 4
    failed_statuses: frozenset[int] = frozenset(DEFAULT_FAILED_STATUSES)
    idempotency: Idempotency = Idempotency()

    def allows_path(self, path: str) -> bool:
        """Whether `path` lies under a prefix, segment-wise: `/v1/a` holds `/v1/a/b`, not
        `/v1/ab`."""
        return any(
            path == prefix or path.startswith(prefix if prefix.endswith("/") else prefix + "/")
            for prefix in self.path_prefixes
        )


class ReceiverSet:
    """The receivers by name (immutable after load)."""

    def __init__(self, receivers: Mapping[str, Receiver], *, source: str) -> None:
        self._receivers = dict(receivers)
        self.source = source

    def get(self, name: str) -> Receiver | None:
        """The receiver called `name`, if configured."""
        return self._receivers.get(name)

    def __iter__(self) -> Iterator[Receiver]:
        return iter(self._receivers.values())

    def __len__(self) -> int:
        return len(self._receivers)

    def require_within(self, execute_timeout_s: float) -> None:
        """Refuse a receiver whose total timeout is not below the execute timeout: the
        dispatcher would cut the execute off mid-request, which can only end indeterminate."""
        for receiver in self:
            if receiver.total_timeout_s >= execute_timeout_s:
                raise errors.ConfigurationError(
                    f"{self.source}: receivers.{receiver.name}.total_timeout_seconds must be "
                    f"below the execute timeout ({execute_timeout_s:g} s)"
                )


def load(path: Path) -> ReceiverSet:
    """Parse the TOML file at `path` (`[receivers.NAME]` tables)."""
    source = str(path)
    try:
        data = tomllib.loads(
            bounded_files.read_at_most(path, bounded_files.CONFIG_MAX_BYTES).decode()
        )
    except bounded_files.TooLarge:
        raise errors.ConfigurationError(
            f"{source}: larger than {bounded_files.CONFIG_MAX_BYTES} bytes"
        ) from None
    except OSError as exc:
        raise errors.ConfigurationError(
            f"{source}: cannot be read ({exc.strerror or type(exc).__name__})"
        ) from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as exc:
        why = " (nested too deeply)" if isinstance(exc, RecursionError) else ""  # tomllib recursed
        raise errors.ConfigurationError(f"{source}: not a valid UTF-8 TOML file{why}") from None
    return parse(data, source=source)


def parse(mapping: Mapping[str, object], *, source: str) -> ReceiverSet:
    """The receivers of an already-decoded TOML document."""
    unknown = set(mapping) - {"receivers"}
    if unknown:
        raise errors.ConfigurationError(f"{source}: unknown table {_shown(min(unknown))}")
    tables = mapping.get("receivers", {})
    if not isinstance(tables, Mapping):
        raise errors.ConfigurationError(f"{source}: receivers must be a table of tables")
    found: dict[str, Receiver] = {}
    for name, table in tables.items():
        if not plans.is_identifier(name):
            raise errors.ConfigurationError(
                f"{source}: receivers.{_shown(name)}: name must match "
                "[A-Za-z0-9][A-Za-z0-9._:-]{0,127}"
            )
        if not isinstance(table, Mapping):
            raise errors.ConfigurationError(f"{source}: receivers.{name} must be a table")
        found[name] = _Parser(source, name).receiver(table)
    return ReceiverSet(found, source=source)


def _shown(key: object) -> str:
    return key if isinstance(key, str) and re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", key) else "?"


class _Parser:
    """Parses one `[receivers.NAME]` table; every error names receiver and field."""

    def __init__(self, source: str, name: str) -> None:
        self._source = source
        self._name = name

    def fail(self, field: str, rule: str) -> errors.ConfigurationError:
        return errors.ConfigurationError(f"{self._source}: receivers.{self._name}.{field} {rule}")

    def receiver(self, table: Mapping[str, object]) -> Receiver:
        for key in table:
            if key not in _FIELDS:
                raise self.fail(_shown(key), "is not a receiver field")
        allow_plain = self.boolean(table, "allow_plain_http", False)
        base_url, host = self.base_url(table.get("base_url"), allow_plain=allow_plain)
        connect = self.seconds(table, "connect_timeout_seconds", 5.0)
        read = self.seconds(table, "read_timeout_seconds", 10.0)
        total = self.seconds(table, "total_timeout_seconds", 12.0)
        if total < connect or total < read:
            raise self.fail(
                "total_timeout_seconds", "must not be below the connect and read timeouts"
            )
        return Receiver(
            name=self._name,
            base_url=base_url,
            host=host,
            methods=self.methods(table.get("methods")),
            path_prefixes=self.prefixes(table.get("path_prefixes")),
            ca_pem=self.ca(table.get("ca_file")),
            connect_timeout_s=connect,
            read_timeout_s=read,
            total_timeout_s=total,
            max_response_bytes=self.integer(
                table, "max_response_bytes", DEFAULT_MAX_RESPONSE_BYTES, 1, 64 * 1024 * 1024
            ),
            keep_headers=self.keep_headers(table.get("keep_headers", [])),
            auth=self.secret(table, "auth"),
            webhook_secret=self.secret(table, "webhook_secret"),
            concurrency=self.integer(table, "concurrency", 4, 1, 256),
            failed_statuses=self.failed_statuses(
                table.get("failed_statuses", list(DEFAULT_FAILED_STATUSES))
            ),
            idempotency=self.idempotency(table.get("idempotency", {})),
        )

    def base_url(self, value: object, *, allow_plain: bool) -> tuple[str, str]:
        field = "base_url"
        if not isinstance(value, str) or not value.isascii() or not value.isprintable():
            raise self.fail(field, "must be an ASCII URL string")
        try:
            parts = urlparse.urlsplit(value)
            port = parts.port
        except ValueError:
            raise self.fail(field, "is not a valid URL") from None
        host = parts.hostname
        if parts.scheme not in ("https", "http") or not host:
            raise self.fail(field, "must be an https:// URL with a host")
        if parts.username is not None or parts.password is not None:
            raise self.fail(field, "must not carry credentials (use auth)")
        if parts.query or parts.fragment or "?" in value or "#" in value:
            raise self.fail(field, "must not have a query or a fragment")
        if (
            (parts.path and not _PREFIX.fullmatch(parts.path))
            or ".." in parts.path
            or "//" in parts.path
        ):
            raise self.fail(field, "has a path that is not plain")
        if parts.scheme == "http" and not (allow_plain or _is_loopback(host)):
            raise self.fail(
                field, "must be https (http only for a loopback address or allow_plain_http = true)"
            )
        netloc = f"[{host}]" if ":" in host else host
        if port is not None:
            netloc = f"{netloc}:{port}"
        return f"{parts.scheme}://{netloc}{parts.path.rstrip('/')}", host

    def methods(self, value: object) -> frozenset[str]:
        if (
            not isinstance(value, list)
            or not value
            or not all(isinstance(m, str) and m in METHODS for m in value)
        ):
            raise self.fail("methods", f"must be a non-empty list of {', '.join(sorted(METHODS))}")
        return frozenset(value)

    def prefixes(self, value: object) -> tuple[str, ...]:
        rule = 'must be a non-empty list of plain paths starting with "/"'
        if not isinstance(value, list) or not value:
            raise self.fail("path_prefixes", rule)
        for prefix in value:
            if (
                not isinstance(prefix, str)
                or not _PREFIX.fullmatch(prefix)
                or ".." in prefix
                or "//" in prefix
            ):
                raise self.fail("path_prefixes", rule)
        return tuple(value)

    def ca(self, value: object) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or not value.startswith("/"):
            raise self.fail("ca_file", "must be an absolute path")
        try:
            pem = bounded_files.read_at_most(Path(value), CA_FILE_MAX_BYTES).decode("ascii")
        except (OSError, bounded_files.TooLarge, UnicodeDecodeError):
            raise self.fail("ca_file", "cannot be read as a PEM file") from None
        if "-----BEGIN CERTIFICATE-----" not in pem:
            raise self.fail("ca_file", "holds no PEM certificate")
        return pem

    def boolean(self, table: Mapping[str, object], field: str, default: bool) -> bool:
        value = table.get(field, default)
        if not isinstance(value, bool):
            raise self.fail(field, "must be true or false")
        return value

    def seconds(self, table: Mapping[str, object], field: str, default: float) -> float:
        value = table.get(field, default)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise self.fail(field, "must be a number of seconds")
        if not 0 < value <= 3600:
            raise self.fail(field, "must be above 0 and at most 3600")
        return float(value)

    def integer(
        self, table: Mapping[str, object], field: str, default: int, low: int, high: int
    ) -> int:
        value = table.get(field, default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(field, f"must be an integer from {low} to {high}")
        return value

    def keep_headers(self, value: object) -> tuple[str, ...]:
        rule = f"must be a list of at most {MAX_KEEP_HEADERS} lowercase header names"
        if not isinstance(value, list) or len(value) > MAX_KEEP_HEADERS:
            raise self.fail("keep_headers", rule)
        for name in value:
            if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
                raise self.fail("keep_headers", rule)
            if name in _NEVER_KEPT:
                raise self.fail("keep_headers", "must not name a credential header")
        return tuple(value)

    def secret(self, table: Mapping[str, object], field: str) -> secrets.SecretRef | None:
        value = table.get(field)
        if value is None:
            return None
        try:
            return secrets.SecretRef.parse(value)
        except ValueError:
            raise self.fail(field, "must be credential:NAME, file:/PATH or env:NAME") from None

    def failed_statuses(self, value: object) -> frozenset[int]:
        rule = "must be a list of 4xx statuses other than 409"
        if not isinstance(value, list):
            raise self.fail("failed_statuses", rule)
        for status in value:
            # 409 is in flight, never proof that nothing happened.
            if (
                isinstance(status, bool)
                or not isinstance(status, int)
                or not 400 <= status <= 499
                or status == 409
            ):
                raise self.fail("failed_statuses", rule)
        return frozenset(value)

    def idempotency(self, value: object) -> Idempotency:
        if not isinstance(value, Mapping):
            raise self.fail("idempotency", "must be a table")
        for key in value:
            if key not in _IDEMPOTENCY_FIELDS:
                raise self.fail(f"idempotency.{_shown(key)}", "is not an idempotency field")
        dedupes = self.boolean(value, "dedupes", False)
        retention = self.integer(value, "key_retention_seconds", 0, 0, 366 * 86400)
        lookup = value.get("lookup", "none")
        if lookup not in ("none", "replay", "get"):
            raise self.fail("idempotency.lookup", 'must be "none", "replay" or "get"')
        # Resending to find out is safe only where the receiver proves it cannot execute twice:
        # a receiver that does not store results per key would perform the effect again.
        if lookup == "replay" and not dedupes:
            raise self.fail("idempotency.lookup", '"replay" needs dedupes = true')
        if lookup != "none" and retention == 0:
            raise self.fail("idempotency.key_retention_seconds", "must be above 0 for a lookup")
        path = value.get("lookup_path")
        if lookup == "get":
            if (
                not isinstance(path, str)
                or path.count("{key}") != 1
                or not _PREFIX.fullmatch(path.replace("{key}", "k"))
            ):
                raise self.fail(
                    "idempotency.lookup_path", 'must be a plain path holding "{key}" once'
                )
            if ".." in path or "//" in path:
                raise self.fail("idempotency.lookup_path", "must be a plain path")
        elif path is not None:
            raise self.fail("idempotency.lookup_path", 'is only for lookup = "get"')
        assert lookup in ("none", "replay", "get")
        return Idempotency(
            dedupes=dedupes,
            key_retention_seconds=retention,
            lookup=lookup,
            lookup_path=path if isinstance(path, str) else None,
        )


def _is_loopback(host: str) -> bool:
    # Only a literal address: a name's resolution is not ours to trust for sending in clear.
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
