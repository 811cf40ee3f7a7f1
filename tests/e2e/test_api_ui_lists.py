"""The operator's lists over a real listener, real tokens and both databases: `GET
/api/v1/approvals?status=` with who decided, how and when (a bad status a 400 naming the field,
writing nothing), the recovery list's verdict in words, the UI's approvals page with its
status filter, and relative times on the UI's lists, without JavaScript."""

from __future__ import annotations

import datetime
import html
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from qinglong_dispatcher.domain import recovery, uncertainty
from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.api_writes import Served, assert_problem, serving
from tests.support.api_writes import submit as api_submit
from tests.support.clock import ManualClock
from tests.support.recovery import started_execution
from tests.support.targets import submit_change
from tests.support.ui_client import UiClient


@pytest.fixture(params=stores.DIALECTS)
async def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> AsyncIterator[Served]:
    async with serving(request.param, tmp_path_factory, tmp_path) as it:
        yield it


async def _ids(it: Served, query: str) -> list[str]:
    status, _, body = await it.call("GET", "/approvals" + query, "vic")
    assert status == 200, body
    return [row["approval_request_id"] for row in body["approvals"]]


async def test_approvals_by_status_with_who_decided_how_and_when(served: Served) -> None:
    it = served
    rejected = (await api_submit(it, "sam", "t1"))["approval_request_id"]
    it.clock.advance(ms=5)
    waiting = (await api_submit(it, "sam", "t2"))["approval_request_id"]
    it.clock.advance(ms=5)
    status, _, body = await it.call(
        "POST", f"/approvals/{rejected}/reject", "alice", {"reason": "dup", "comment": "as t2 "}
    )
    assert status == 200, body

    assert await _ids(it, "") == [waiting]  # the default: the waiting queue, as before
    assert await _ids(it, "?status=pending") == [waiting]
    assert await _ids(it, "?status=all") == [waiting, rejected]
    assert await _ids(it, "?status=approved") == []
    status, _, body = await it.call("GET", "/approvals?status=rejected", "vic")
    assert status == 200, body
    (row,) = body["approvals"]
    assert (row["approval_request_id"], row["status"]) == (rejected, "rejected")
    assert (row["decided_by"], row["decided_principal"]) == (it.names["alice"], it.names["alice"])
    assert row["decision_code"] == "by_other"
    assert row["decided_at_ms"] >= row["created_at_ms"]
    assert row["plan"]["taskId"] == "t1"
    # Why, read by a viewer (on PostgreSQL through the definer function: it may read neither
    # the votes nor the audit table itself): the reason code and the comment, trimmed.
    assert row["reasons"] == [
        {"decision": "reject", "principal": it.names["alice"], "reason": "dup", "comment": "as t2"}
    ]
    (waiting_row,) = (await it.call("GET", "/approvals", "vic"))[2]["approvals"]
    assert waiting_row["reasons"] == []
    # Every member the schema names, and no other.
    _, _, document = await it.call("GET", "/openapi.json", None)
    schema = document["components"]["schemas"]["WaitingApproval"]
    assert set(row) == set(schema["properties"]) == set(schema["required"])

    # One cursor format: a page of `all` continues under `all` and under one status alike.
    status, _, first = await it.call("GET", "/approvals?status=all&limit=1", "vic")
    assert first["next"] is not None
    assert await _ids(it, f"?status=all&after={first['next']}") == [rejected]
    assert await _ids(it, f"?status=rejected&after={first['next']}") == [rejected]
    assert await _ids(it, f"?status=pending&after={first['next']}") == []

    before = await it.everything()
    for bad in ("decided", "", "PENDING", "all%00"):
        answer = await it.call("GET", f"/approvals?status={bad}", "vic")
        assert_problem(answer, 400, "invalid_input")
        assert answer[2]["detail"].startswith("status:"), answer[2]
    assert await it.everything() == before


async def test_deny_votes_and_comments_are_shown_with_the_decision(served: Served) -> None:
    it = served
    denied = (await api_submit(it, "sam", "t1"))["approval_request_id"]
    approved = (await api_submit(it, "sam", "t2"))["approval_request_id"]
    status, _, body = await it.call(
        "POST", f"/approvals/{denied}/votes", "bob", {"vote": "deny", "reason": "not this week"}
    )
    assert status == 200, body
    status, _, body = await it.call(
        "POST", f"/approvals/{approved}/approve", "alice", {"comment": "checked with ops"}
    )
    assert status == 200, body
    status, _, body = await it.call("GET", "/approvals?status=all", "vic")
    assert status == 200, body
    reasons = {row["approval_request_id"]: row["reasons"] for row in body["approvals"]}
    assert reasons[denied] == [
        {
            "decision": "deny",
            "principal": it.names["bob"],
            "reason": "not this week",
            "comment": None,
        }
    ]
    assert reasons[approved] == [
        {
            "decision": "approve",
            "principal": it.names["alice"],
            "reason": None,
            "comment": "checked with ops",
        }
    ]
    # The comment is in the approve's own audit row.
    status, _, body = await it.call("GET", f"/audit?subject={approved}&kind=api.approve", "vic")
    assert status == 200, body
    assert [e["comment"] for e in body["audit"]] == ["checked with ops"]

    # A comment is one printable line: anything else is a 400 naming it, writing nothing.
    other = (await api_submit(it, "sam", "t3"))["approval_request_id"]
    before = await it.everything()
    for bad in ("two\nlines", "x" * 501, 7):
        answer = await it.call(
            "POST", f"/approvals/{other}/reject", "alice", {"reason": "r", "comment": bad}
        )
        assert_problem(answer, 400, "invalid_input")
        assert answer[2]["detail"].startswith("comment:"), answer[2]
    assert await it.everything() == before


async def test_the_recovery_list_says_its_last_observation_in_words(served: Served) -> None:
    it = served
    past = ManualClock(it.clock.now_ms() - 3_600_000)
    await submit_runs(it.harness.approver_store, past, 1)
    stuck, _ = await started_execution(it.harness, past)
    await it.harness.store.record_observation(
        stuck.dispatch_id,
        outcome=recovery.ObservationOutcome.MISSING,
        reason_code=recovery.MANUAL_ONLY,
        now_ms=it.clock.now_ms(),
    )
    status, _, body = await it.call("GET", "/recovery", "vic")
    assert status == 200, body
    (row,) = body["recovery_required"]
    last = row["last_observation"]
    assert row["dispatch_id"] == stuck.dispatch_id
    assert (last["outcome"], last["reason"], last["count"]) == ("missing", recovery.MANUAL_ONLY, 1)
    (snap,) = await it.harness.store.list_recovery_required(now_ms=it.clock.now_ms(), limit=10)
    assert snap.observation is not None
    assert last["verdict"] == uncertainty.observation_verdict(snap.observation)
    assert last["verdict"].startswith("no automatic evidence for this action")
    # The UI's lists say how long ago beside each time, read on the server's clock.
    async with UiClient(it) as ui:
        await ui.sign_in("vic")
        _, _, page = await ui.get("/ui/dispatches")
        assert stuck.dispatch_id in page
        assert '<span class="ago">(1 h ago)</span>' in page
        _, _, page = await ui.get("/ui/recovery")
        assert stuck.dispatch_id in page
        assert re.search(r'<span class="ago">\(\d+ (s|min|h) ago\)</span>', page), page


async def test_the_ui_filters_approvals_by_status_with_relative_times(served: Served) -> None:
    it = served
    rejected = (await api_submit(it, "sam", "t1"))["approval_request_id"]
    waiting = (await api_submit(it, "sam", "t2"))["approval_request_id"]
    await it.call("POST", f"/approvals/{rejected}/reject", "alice", {"reason": "dup"})
    it.clock.advance(s=180)
    async with UiClient(it) as ui:
        await ui.sign_in("vic")
        status, _, page = await ui.get("/ui/approvals")
        assert status == 200
        assert '<select name="status"' in page
        assert '<option value="rejected">' in page
        assert waiting in page
        assert rejected not in page
        assert "(3 min ago)" in page  # created, read on the server's clock
        # The one script is the live refresh of our own (progressive: the list is all there).
        assert re.findall(r"<script[^>]*>", page) == ['<script src="/ui/static/live.js" defer>']
        status, _, page = await ui.get("/ui/approvals?status=rejected")
        assert status == 200
        assert rejected in page
        assert waiting not in page
        assert '<option value="rejected" selected>' in page
        decided = re.search(r"<dt>decided by</dt><dd>([^<]*)</dd>", page)
        assert decided is not None
        assert html.unescape(decided.group(1)) == f"{it.names['alice']} ({it.names['alice']})"
        assert "<dt>why</dt><dd>by_other</dd>" in page
        said = html.escape(f"reject by {it.names['alice']}")
        assert f"<dt>{said}</dt><dd>dup</dd>" in page  # the reject's reason code
        assert "/reject" not in page  # a decided row offers no decision
        status, _, page = await ui.get("/ui/approvals?status=lost")
        assert status == 400
        assert "invalid_input" in page


def _rows(page: str) -> list[str]:
    """The dispatch ids a list page's table links, in order."""
    return re.findall(r'<a href="/ui/dispatches/([^"?]+)">', page)


async def test_the_ui_dispatch_list_filters_as_the_api_and_pages_both_ways(
    served: Served,
) -> None:
    it = served
    await submit_runs(it.harness.approver_store, it.clock, 3)
    status, _, body = await it.call("GET", "/dispatches?project=proj-1", "vic")
    assert status == 200, body
    newest_first = [d["dispatch_id"] for d in body["dispatches"]]
    assert len(newest_first) == 3
    async with UiClient(it) as ui:
        await ui.sign_in("vic")
        status, _, page = await ui.get("/ui/dispatches?project=proj-1&limit=1")
        assert status == 200, page  # `?project=` is a filter, as the API's
        assert _rows(page) == newest_first[:1]
        assert 'rel="prev"' not in page
        found = re.search(r'<a href="([^"]+)" rel="next">', page)
        assert found is not None
        status, _, second = await ui.get(html.unescape(found.group(1)))
        assert status == 200
        assert _rows(second) == newest_first[1:2]
        onward = re.search(r'<a href="([^"]+)" rel="next">', second)
        assert onward is not None
        status, _, third = await ui.get(html.unescape(onward.group(1)))
        assert _rows(third) == newest_first[2:]
        assert 'rel="next"' not in third
        again = re.search(r'<a href="([^"]+)" rel="prev">', third)
        assert again is not None
        status, _, page = await ui.get(html.unescape(again.group(1)))
        assert _rows(page) == newest_first[1:2]  # back one page, filters kept
        assert 'value="proj-1"' in page
        back = re.search(r'<a href="([^"]+)" rel="prev">', page)
        assert back is not None
        status, _, first = await ui.get(html.unescape(back.group(1)))
        assert _rows(first) == newest_first[:1]
        status, _, page = await ui.get("/ui/dispatches?project=elsewhere")
        assert status == 200
        assert _rows(page) == []
        status, _, page = await ui.get("/ui/dispatches?limit=9999")
        assert status == 400
        assert "limit:" in page


async def test_the_ui_approval_list_filters_and_pages_both_ways(served: Served) -> None:
    it = served
    for task in ("t1", "t2", "t3"):
        await api_submit(it, "sam", task)
        it.clock.advance(ms=5)
    status, _, body = await it.call("GET", "/approvals?status=all", "vic")
    newest_first = [row["approval_request_id"] for row in body["approvals"]]
    project = body["approvals"][0]["project_id"]

    def shown(page: str) -> list[str]:
        return re.findall(r'<h2><a href="/ui/approvals/([^"?]+)">', page)

    async with UiClient(it) as ui:
        await ui.sign_in("vic")
        status, _, page = await ui.get(f"/ui/approvals?status=all&project={project}&limit=2")
        assert status == 200, page
        assert shown(page) == newest_first[:2]
        found = re.search(r'<a href="([^"]+)" rel="next">', page)
        assert found is not None
        _, _, second = await ui.get(html.unescape(found.group(1)))
        assert shown(second) == newest_first[2:]
        back = re.search(r'<a href="([^"]+)" rel="prev">', second)
        assert back is not None
        _, _, first = await ui.get(html.unescape(back.group(1)))
        assert shown(first) == newest_first[:2]
        _, _, none = await ui.get("/ui/approvals?status=all&project=elsewhere&action=run.create")
        assert shown(none) == []


async def test_dispatches_filter_by_target_and_time_range(served: Served) -> None:
    it = served
    made = []
    for ref, router in (("ref-1", "router-1"), ("ref-2", "router-2"), ("ref-3", None)):
        made.append(
            (
                it.clock.now_ms(),
                await submit_change(it.harness.approver_store, it.clock, ref, router),
            )
        )
        it.clock.advance(s=120)
    (t1, d1), (t2, d2), (_, d3) = made

    async def ids(query: str) -> list[str]:
        status, _, body = await it.call("GET", "/dispatches" + query, "vic")
        assert status == 200, body
        return [row["dispatch_id"] for row in body["dispatches"]]

    assert await ids("?target=router-1") == [d1]
    assert await ids(f"?from_ms={t2}") == [d3, d2]
    assert await ids(f"?to_ms={t2}") == [d1]
    assert await ids(f"?from_ms={t1}&to_ms={t2 + 1}&target=router-2") == [d2]
    for bad, field in (
        ("from_ms=x", "from_ms"),
        (f"from_ms={t2}&to_ms={t1}", "to_ms"),
        ("target=a b", "target"),
    ):
        answer = await it.call("GET", f"/dispatches?{bad}", "vic")
        assert_problem(answer, 400, "invalid_input")
        assert answer[2]["detail"].startswith(field), answer[2]

    minute = datetime.datetime.fromtimestamp(t2 / 1000, datetime.UTC).strftime("%Y-%m-%dT%H:%M")
    async with UiClient(it) as ui:
        await ui.sign_in("vic")
        _, _, page = await ui.get("/ui/dispatches?target=router-2")
        assert _rows(page) == [d2]
        _, _, page = await ui.get(f"/ui/dispatches?from={minute}")
        assert _rows(page) == [d3, d2]
        assert f'value="{minute}"' in page  # the filter is kept in the form
        status, _, page = await ui.get("/ui/dispatches?from=yesterday")
        assert status == 400
        assert "from:" in page


async def test_approvals_filter_by_time_range_on_the_api_and_the_ui(served: Served) -> None:
    it = served
    made = []
    for task in ("t1", "t2", "t3"):
        made.append((it.clock.now_ms(), (await api_submit(it, "sam", task))["approval_request_id"]))
        it.clock.advance(s=120)
    (t1, a1), (t2, a2), (_, a3) = made
    assert await _ids(it, f"?from_ms={t2}") == [a3, a2]
    assert await _ids(it, f"?to_ms={t2}") == [a1]
    assert await _ids(it, f"?status=all&from_ms={t1}&to_ms={t2 + 1}") == [a2, a1]
    for bad, field in (("from_ms=x", "from_ms"), (f"from_ms={t2}&to_ms={t1}", "to_ms")):
        answer = await it.call("GET", f"/approvals?{bad}", "vic")
        assert_problem(answer, 400, "invalid_input")
        assert answer[2]["detail"].startswith(field), answer[2]

    def shown(page: str) -> list[str]:
        return re.findall(r'<h2><a href="/ui/approvals/([^"?]+)">', page)

    minute = datetime.datetime.fromtimestamp(t2 / 1000, datetime.UTC).strftime("%Y-%m-%dT%H:%M")
    async with UiClient(it) as ui:
        await ui.sign_in("vic")
        _, _, page = await ui.get(f"/ui/approvals?from={minute}")
        assert shown(page) == [a3, a2]
        assert f'value="{minute}"' in page  # the filter is kept in the form
        _, _, page = await ui.get(f"/ui/approvals?status=all&to={minute}")
        assert shown(page) == [a1]
        status, _, page = await ui.get(f"/ui/approvals?from={minute}&to={minute}")
        assert status == 400
        assert "to: must be after from" in page
