"""The audit export's pure parts: cursor, horizon, interleaving, schema v1, CEF and RFC 5424."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from qinglong_dispatcher.domain import audit_export, audit_formats, errors

SCHEMA = json.loads(
    (Path(__file__).parents[2] / "docs" / "audit" / "record-v1.schema.json").read_text("utf-8")
)
Cursor = audit_export.Cursor


def _audit(event_id: int, at: int = 1_000, **fields: Any) -> audit_export.Record:
    values: dict[str, Any] = {
        "kind": "approval.approved",
        "principal": "alice",
        "actor": "alice",
        "project_id": "p",
        "subject_id": "a-1",
        "detail_code": "by_requester",
        **fields,
    }
    return audit_export.Record(source="audit", event_id=event_id, committed_at_ms=at, **values)


def _ledger(event_id: int, at: int = 1_000) -> audit_export.Record:
    return audit_export.Record(
        source="ledger",
        event_id=event_id,
        committed_at_ms=at,
        kind=audit_export.LEDGER_KIND,
        dispatch_id="d-1",
        subject_id="d-1",
        project_id="p",
        version=1,
        from_status="pending",
        to_status="leased",
        attempt=1,
        lease_owner="host:1",
    )


@pytest.mark.parametrize(
    "text", ["", "1", "1.", ".1", "a.1", "1.2.3", "-1.2", "1 .2", "1" * 19 + ".1"]
)
def test_a_cursor_is_two_ids_or_refused(text: str) -> None:
    with pytest.raises(errors.InvalidInput, match="after: must be a cursor"):
        Cursor.parse(text)


def test_a_cursor_prints_as_it_parses() -> None:
    assert str(Cursor.parse("12.40")) == "12.40"
    assert Cursor.parse("0.0") == Cursor()


@pytest.mark.parametrize(
    "text", ["yesterday", "2026-12-01", "2026-12-01T00:00:00", "2026-13-01T00:00:00Z", "1700000000"]
)
def test_since_needs_an_rfc3339_time_with_offset(text: str) -> None:
    with pytest.raises(errors.InvalidInput, match="since:"):
        audit_export.parse_since(text)


def test_since_reads_the_offset() -> None:
    assert audit_export.parse_since("1970-01-01T01:00:00+01:00") == 0
    assert audit_export.parse_since("1970-01-01T00:00:01.5Z") == 1_500


def test_the_horizon_waits_out_every_writer_it_saw() -> None:
    horizon = audit_export.Horizon()
    # Id 5 is visible; transaction A (which may hold id 4) and B are writing.
    assert horizon.observe(
        audit_export.Probe(audit_max=5, ledger_max=2, audit_writers=frozenset({"3/1", "4/9"}))
    ) == Cursor(0, 2)
    # B ended, A still writes; 9 is visible now, C writes too.
    probe = audit_export.Probe(audit_max=9, ledger_max=2, audit_writers=frozenset({"3/1", "5/2"}))
    assert horizon.observe(probe) == Cursor(0, 2)
    # A ended: everything at or below 5 is final, not yet 9 (C may hold 8).
    probe = audit_export.Probe(audit_max=9, ledger_max=3, audit_writers=frozenset({"5/2"}))
    assert horizon.observe(probe) == Cursor(5, 3)
    assert horizon.pending
    assert horizon.observe(audit_export.Probe(audit_max=9, ledger_max=3)) == Cursor(9, 3)
    assert not horizon.pending


def test_the_horizon_starts_at_the_resumed_cursor_and_never_falls() -> None:
    horizon = audit_export.Horizon(Cursor(7, 7))
    probe = audit_export.Probe(audit_max=3, ledger_max=3, audit_writers=frozenset({"1/1"}))
    assert horizon.observe(probe) == Cursor(7, 7)


def test_the_horizon_keeps_a_bounded_list_under_a_writer_that_never_ends() -> None:
    horizon = audit_export.Horizon()
    for seen in range(1, 200):
        writers = frozenset({"9/9", f"1/{seen}"})
        horizon.observe(audit_export.Probe(audit_max=seen, ledger_max=0, audit_writers=writers))
    assert horizon.safe == Cursor()
    assert horizon.observe(audit_export.Probe(audit_max=200, ledger_max=0)) == Cursor(200, 0)


def test_merge_interleaves_by_commit_time_and_moves_the_cursor_per_stream() -> None:
    audits = [_audit(3, at=10), _audit(4, at=30)]
    ledgers = [_ledger(8, at=20), _ledger(9, at=30)]
    page = audit_export.merge(Cursor(2, 7), audits, ledgers, limit=3)
    assert [(r.source, r.event_id, str(c)) for r, c in page.records] == [
        ("audit", 3, "3.7"),
        ("ledger", 8, "3.8"),
        ("audit", 4, "4.8"),
    ]
    assert page.after == Cursor(4, 8)


def test_a_stream_keeps_its_id_order_even_when_its_clock_went_back() -> None:
    page = audit_export.merge(Cursor(), [_audit(1, at=50), _audit(2, at=10)], [], limit=10)
    assert [r.event_id for r, _ in page.records] == [1, 2]


def test_records_of_both_sources_match_schema_v1() -> None:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    with_request = _audit(
        1, token_id="tok_" + "a" * 16, client_address="192.0.2.1", request_id="req_1"
    )
    for record in (with_request, _ledger(1)):
        validator.validate(record.as_dict(Cursor(1, 1)))
    printed = with_request.as_dict(Cursor(1, 0))
    assert printed["schema_version"] == 1
    assert printed["trace_id"] is None
    assert printed["at"] == "1970-01-01T00:00:01.000Z"


def test_schema_v1_refuses_a_field_it_does_not_name() -> None:
    record = {**_ledger(1).as_dict(Cursor(0, 1)), "lease_token": "t"}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(record, SCHEMA)


def test_cef_escapes_its_header_and_extension() -> None:
    record = _audit(
        1, kind="api.auth_failed", actor="a|b\\c", detail_code="x=y\\z\nnext\rend"
    ).as_dict(Cursor(1, 0))
    line = audit_formats.cef_line(record, version="1|2\\3")
    header, extension = line.rsplit("|", 1)[0], line.split("|", 7)[7]
    assert header.startswith("CEF:0|qinglong|qinglong-dispatcher|1\\|2\\\\3|api.auth_failed|")
    assert line.count("\n") == 0
    assert "suid=a|b\\\\c" in extension
    assert "outcome=x\\=y\\\\z\\nnext\\rend" in extension
    assert "|7|" in line  # a refused authentication is severity 7


def test_cef_names_the_request_and_never_a_missing_value() -> None:
    record = _audit(2, token_id="tok_" + "b" * 16, client_address="192.0.2.9", request_id="req_9")
    extension = audit_formats.cef_line(record.as_dict(Cursor(2, 0)), version="0.1.0")
    pairs = dict(re.findall(r"(\w+)=(\S+)", extension.split("|", 7)[7]))
    assert pairs["src"] == "192.0.2.9"
    assert (pairs["cs1Label"], pairs["cs1"]) == ("requestId", "req_9")
    assert (pairs["cs2Label"], pairs["cs2"]) == ("tokenId", "tok_" + "b" * 16)
    assert (pairs["cs4Label"], pairs["cs4"]) == ("cursor", "2.0")
    assert "cs3" not in pairs  # no trace id: the pair is left out, not printed empty
    local = _audit(3, token_id="tok_" + "b" * 16, client_address="local", request_id="req_3")
    extension = audit_formats.cef_line(local.as_dict(Cursor(3, 0)), version="0.1.0")
    assert " shost=local " in extension
    assert " src=" not in extension


SYSLOG = re.compile(
    rb"<(?P<pri>\d{1,3})>1 (?P<ts>\S+) (?P<host>\S+) (?P<app>\S+) (?P<proc>\S+) (?P<msgid>\S+) "
    rb"(?P<sd>\[(?:[^\]\\]|\\.)*\]) \xef\xbb\xbf(?P<msg>.*)",
    re.DOTALL,
)


def parse_syslog(frame: bytes) -> dict[str, Any]:
    """An RFC 5424 message's parts (the test's own reading of the format)."""
    found = SYSLOG.fullmatch(frame)
    assert found is not None, frame
    parts = {k: v.decode() for k, v in found.groupdict().items()}
    parts["record"] = json.loads(parts.pop("msg"))
    return parts


def test_a_syslog_message_is_rfc5424_with_the_record_as_its_message() -> None:
    record = _audit(3, actor='odd"]\\name').as_dict(Cursor(3, 1))
    frame = audit_formats.syslog_message(record, hostname="edge box", procid="42")
    parts = parse_syslog(frame)
    assert parts["pri"] == str(13 * 8 + 5)
    assert parts["ts"] == "1970-01-01T00:00:01.000Z"
    assert (parts["host"], parts["app"], parts["proc"]) == ("edge_box", "qinglong-dispatcher", "42")
    assert parts["msgid"] == "approval.approved"
    assert parts["sd"] == '[audit@32473 schema="1" cursor="3.1" source="audit" id="3"]'
    assert parts["record"] == record
