"""The audit export names the trace a record belongs to, on both dialects: the ledger lines of
a dispatch and the audit records of its request carry the trace id it was submitted under;
those of a dispatch submitted without one carry null."""

from __future__ import annotations

from qinglong_dispatcher import api
from tests.contract.test_audit_export import exported
from tests.support import stores
from tests.support.actions import make_api
from tests.support.clock import ManualClock

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
GIVEN = f"00-{TRACE}-00f067aa0ba902b7-01"


async def test_records_carry_the_trace_their_dispatch_was_submitted_under(
    harness: stores.Harness, clock: ManualClock
) -> None:
    the_api = make_api(harness.approver_store, clock)
    plan = api.run_create_plan({"projectId": "p1", "taskId": "t1", "taskRevision": 1})
    (traced,) = await the_api.submit(
        [plan], requested_by="sam", approved_by="sam", traceparent=GIVEN
    )
    plain_plan = api.run_create_plan({"projectId": "p1", "taskId": "t2", "taskRevision": 1})
    (plain,) = await the_api.submit([plain_plan], requested_by="sam", approved_by="sam")
    records = [record for record, _ in await exported(harness.store)]
    ledger = {
        (r.dispatch_id, r.trace_id) for r in records if r.source == "ledger" and r.dispatch_id
    }
    assert ledger == {(traced.dispatch_id, TRACE), (plain.dispatch_id, None)}
    audits = [r for r in records if r.source == "audit"]
    about_traced = {traced.dispatch_id, traced.approval_request_id}
    about_plain = {plain.dispatch_id, plain.approval_request_id}
    assert [r for r in audits if r.subject_id in about_traced]  # the request's trail exists
    assert {r.trace_id for r in audits if r.subject_id in about_traced} == {TRACE}
    assert {r.trace_id for r in audits if r.subject_id in about_plain} <= {None}
