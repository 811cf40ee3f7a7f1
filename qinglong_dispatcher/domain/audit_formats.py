"""The audit export's wire forms: a JSON line, an ArcSight CEF line, an RFC 5424 syslog message.

Each takes the record as schema v1 prints it (`audit_export.Record.as_dict`), so every form
carries the same fields and none can carry more: a record holds ids, names and codes, never
a token's secret or a plan's member.
"""

from __future__ import annotations

import enum
import ipaddress
import json
import re
from collections.abc import Mapping
from typing import Final

VENDOR: Final = "qinglong"
PRODUCT: Final = "qinglong-dispatcher"
APP_NAME: Final = "qinglong-dispatcher"

SD_ID: Final = "audit@32473"
"""The structured data element of a syslog message (32473: the private enterprise number
RFC 5612 sets aside for documentation; a collector matches on the name)."""

FACILITY_LOG_AUDIT: Final = 13
"""RFC 5424 facility 13, "log audit"."""

_ESCAPED_HEADER = re.compile(r"([\\|])")
_ESCAPED_VALUE = re.compile(r"([\\=])")
_SD_ESCAPED = re.compile(r'([\\"\]])')


class Format(enum.StrEnum):
    """`--format` and the API's `format`."""

    JSONL = "jsonl"
    CEF = "cef"


def json_line(record: Mapping[str, object]) -> str:
    """One JSON object on one line (keys sorted, UTF-8 kept), no newline."""
    return json.dumps(record, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def severity(record: Mapping[str, object]) -> int:
    """CEF severity 0-10: a refused authentication 7, a settling by hand or a cancel 5,
    anything else 3."""
    kind = str(record["kind"])
    if kind == "api.auth_failed":
        return 7
    if "resol" in kind or "cancel" in kind or record.get("to_status") == "blocked":
        return 5
    return 3


def _header(text: str) -> str:
    """A CEF header field: `\\` and `|` escaped, line breaks as spaces (the header is a line)."""
    return _ESCAPED_HEADER.sub(r"\\\1", text).replace("\r", " ").replace("\n", " ")


def cef_value(text: str) -> str:
    """A CEF extension value: `\\` and `=` escaped, CR and LF as `\\r` and `\\n`."""
    return _ESCAPED_VALUE.sub(r"\\\1", text).replace("\r", "\\r").replace("\n", "\\n")


_CEF_CUSTOM: Final = (
    ("cs1", "requestId", "request_id"),
    ("cs2", "tokenId", "token_id"),
    ("cs3", "traceId", "trace_id"),
    ("cs4", "cursor", "cursor"),
    ("cs5", "project", "project_id"),
    ("cs6", "subject", "subject_id"),
)


def cef_line(record: Mapping[str, object], *, version: str) -> str:
    """One CEF:0 line: header `vendor|product|version|kind|name|severity`, then the extension
    (`rt` the commit time in ms, `externalId` source:id, `suser` the principal, `suid` the
    actor's given name, `src` the client's IP address (`shost` when it is none), `cs1`-`cs6`
    request id, token or session id, trace id, cursor, project, subject; `outcome` the detail
    or the new status, `act` a ledger line's `from->to`)."""
    kind = str(record["kind"])
    name = f"{record['source']} {kind}"
    fields = (VENDOR, PRODUCT, version, kind, name)
    header = "|".join(["CEF:0", *(_header(f) for f in fields), str(severity(record))])
    pairs: list[tuple[str, object]] = [
        ("rt", record["committed_at_ms"]),
        ("externalId", f"{record['source']}:{record['event_id']}"),
        ("suser", record.get("principal")),
        ("suid", record.get("actor")),
        (_address_key(record.get("client_address")), record.get("client_address")),
        ("outcome", record.get("detail_code") or record.get("to_status")),
        ("act", record.get("from_status") and f"{record['from_status']}->{record['to_status']}"),
    ]
    for key, label, field in _CEF_CUSTOM:
        value = record.get(field)
        if field == "token_id" and value is None:
            value = record.get("session_id")
        if value is not None:
            pairs += [(f"{key}Label", label), (key, value)]
    extension = " ".join(f"{k}={cef_value(str(v))}" for k, v in pairs if v not in (None, ""))
    return f"{header}|{extension}"


def _address_key(address: object) -> str:
    """`src` for an IP address (CEF wants one there), `shost` for anything else (`local`, a
    unix socket's peer)."""
    try:
        ipaddress.ip_address(str(address))
    except ValueError:
        return "shost"
    return "src"


def _sd_value(text: str) -> str:
    return _SD_ESCAPED.sub(r"\\\1", text)


def _printable(text: str, limit: int) -> str:
    """An RFC 5424 header field: printable US-ASCII, at most `limit`, `-` when empty."""
    shown = "".join(c if "!" <= c <= "~" else "_" for c in text)[:limit]
    return shown or "-"


def syslog_message(record: Mapping[str, object], *, hostname: str, procid: str) -> bytes:
    """An RFC 5424 message: PRI (log audit, CEF severity mapped to notice or warning), the
    record's commit time, `APP-NAME` qinglong-dispatcher, `MSGID` the kind, structured data
    `[audit@32473 schema cursor source id]`, then a BOM and the record's JSON line."""
    level = 4 if severity(record) >= 5 else 5  # warning, notice
    pri = FACILITY_LOG_AUDIT * 8 + level
    sd = (
        f'[{SD_ID} schema="{record["schema_version"]}" cursor="{_sd_value(str(record["cursor"]))}"'
        f' source="{record["source"]}" id="{record["event_id"]}"]'
    )
    head = (
        f"<{pri}>1 {record['at']} {_printable(hostname, 255)} {APP_NAME} "
        f"{_printable(procid, 128)} {_printable(str(record['kind']), 32)} {sd} "
    )
    return head.encode("ascii") + b"\xef\xbb\xbf" + json_line(record).encode()
