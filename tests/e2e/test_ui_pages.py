"""The operator UI over a real listener and real tokens on both dialects, without a browser:
the session cookie and its ends (idle, revocation, sign-out), the cross-site refusals of a
form, roles, escaping and the security headers. Every refusal writes nothing."""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import anyio
import pytest

from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.api_writes import Served, serving
from tests.support.api_writes import submit as api_submit
from tests.support.ui_client import UiClient

CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'"
)


@pytest.fixture(params=stores.DIALECTS)
async def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> AsyncIterator[Served]:
    async with serving(request.param, tmp_path_factory, tmp_path) as it:
        yield it


@pytest.fixture
async def sqlite_served(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> AsyncIterator[Served]:
    async with serving("sqlite", tmp_path_factory, tmp_path) as it:
        yield it


def assert_secure_headers(headers: Mapping[str, str]) -> None:
    assert headers.get("Content-Security-Policy") == CSP
    assert headers.get("X-Content-Type-Options") == "nosniff"
    assert headers.get("Referrer-Policy") == "no-referrer"
    assert headers.get("Cache-Control") == "no-store"


async def test_sign_in_gives_a_strict_session_cookie_and_every_page_is_locked_down(
    sqlite_served: Served,
) -> None:
    it = sqlite_served
    async with UiClient(it) as ui:
        status, headers, _ = await ui.get("/ui/dispatches")
        assert (status, headers["Location"]) == (303, "/ui/signin?next=%2Fui%2Fdispatches")
        assert_secure_headers(headers)
        status, headers, text = await ui.get("/ui/signin")
        assert status == 200
        assert_secure_headers(headers)
        assert "<script" not in text.lower()
        status, headers, _ = await ui.post(
            "/ui/signin", {"token": it.secrets["vic"], "next": "/ui/dispatches"}, csrf=False
        )
        assert (status, headers["Location"]) == (303, "/ui/dispatches")
        cookie = headers["Set-Cookie"]
        assert cookie.startswith("qinglong_ui=")
        flags = {part.strip().split("=")[0].lower() for part in cookie.split(";")[1:]}
        assert flags == {"httponly", "path", "samesite"}  # no Secure without TLS
        assert "Path=/ui" in cookie
        assert "SameSite=Strict" in cookie
        for path in ("/ui", "/ui/dispatches", "/ui/approvals", "/ui/recovery", "/ui/audit"):
            status, headers, text = await ui.get(path)
            assert status == 200, (path, text[:300])
            assert headers["Content-Type"] == "text/html; charset=utf-8"
            assert_secure_headers(headers)
            assert '<link rel="stylesheet" href="/ui/static/ui.css">' in text
        status, headers, css = await ui.get("/ui/static/ui.css")
        assert (status, headers["Content-Type"]) == (200, "text/css; charset=utf-8")
        assert "body" in css
        status, _, text = await ui.get("/ui/session")
        assert it.token_ids["vic"] in text
        assert it.secrets["vic"] not in text
        # An open redirect is not: `next` stays within /ui.
        async with UiClient(it) as other:
            _, headers, _ = await other.post(
                "/ui/signin", {"token": it.secrets["vic"], "next": "//evil.test/ui"}, csrf=False
            )
            assert headers["Location"] == "/ui"


async def test_a_bad_token_is_refused_and_failures_are_limited_per_address(
    sqlite_served: Served,
) -> None:
    it = sqlite_served
    before = await it.everything()
    async with UiClient(it) as ui:
        for sent in ({"Origin": "http://evil.test"}, {"Sec-Fetch-Site": "cross-site"}):
            status, answer, text = await ui.post(
                "/ui/signin", {"token": it.secrets["vic"]}, headers=sent, csrf=False
            )
            assert (status, "cross_site_refused" in text) == (403, True)
            assert "Set-Cookie" not in answer
        for bad in ("", "qlt_" + "x" * 43, "not a token <script>"):
            status, headers, text = await ui.post("/ui/signin", {"token": bad}, csrf=False)
            assert status == 401
            assert "Set-Cookie" not in headers
            assert "<script>" not in text
        for _ in range(7):
            await ui.post("/ui/signin", {"token": "wrong"}, csrf=False)
        # The API's limiter of the address: now even a good token waits.
        status, headers, text = await ui.post(
            "/ui/signin", {"token": it.secrets["vic"]}, csrf=False
        )
        assert status == 429, text[:300]
        assert int(headers["Retry-After"]) >= 1
        assert "rate_limited" in text
        assert ui.cookie() is None
    assert await it.everything() == before
    # Each refused sign-in is audited like a refused API request (the 429 is not: it never
    # reached the token store).
    refusals = await it.harness.raw(
        f"SELECT detail_code FROM {it.table('security_audit_events')} "
        "WHERE kind = 'api.auth_failed' ORDER BY event_id"
    )
    assert [r["detail_code"] for r in refusals] == ["missing", "invalid", "malformed"] + [
        "invalid"
    ] * 7


async def test_the_root_address_leads_to_the_ui_and_costs_no_failure(
    sqlite_served: Served,
) -> None:
    it = sqlite_served
    async with UiClient(it) as ui:
        for _ in range(12):  # more than the address's budget of failures
            status, headers, _ = await ui.get("/")
            assert (status, headers["Location"]) == (302, "/ui")
        status, _, _ = await ui.post("/ui/signin", {"token": it.secrets["vic"]}, csrf=False)
        assert status == 303  # signed in: not held back as a failing address


async def test_an_idle_session_ends_and_a_revoked_token_ends_its_session_at_once(
    served: Served,
) -> None:
    it = served
    sessions = it.ctx.ui_sessions
    # The deadlines are the database's clock: short ones, slept through.
    sessions.idle_s, sessions.lifetime_s = 0.8, 60.0
    async with UiClient(it) as ui:
        await ui.sign_in("vic")
        cookie = ui.cookie().value
        await anyio.sleep(0.5)
        assert (await ui.get("/ui"))[0] == 200  # a request moves the idle deadline on
        await anyio.sleep(0.5)
        assert (await ui.get("/ui"))[0] == 200
        await anyio.sleep(1.0)
        status, headers, _ = await ui.get("/ui")
        assert (status, headers["Location"]) == (303, "/ui/signin?next=%2Fui")
        assert await sessions.find(cookie) is None
    sessions.idle_s, sessions.lifetime_s = 60.0, 0.6
    async with UiClient(it) as ui:
        await ui.sign_in("vic")
        await anyio.sleep(0.4)
        assert (await ui.get("/ui"))[0] == 200
        await anyio.sleep(0.4)
        assert (await ui.get("/ui"))[0] == 303  # the absolute lifetime, however busy
    async with UiClient(it) as ui:
        await ui.sign_in("alice")
        assert (await ui.get("/ui/approvals"))[0] == 200
        await it.admin.revoke_token(it.token_ids["alice"])
        status, headers, _ = await ui.get("/ui/approvals")
        assert status == 303
        assert headers["Location"].startswith("/ui/signin")
        before = await it.everything()
        approval = await api_submit(it, "sam")
        before = await it.everything()
        status, _, text = await ui.post(
            f"/ui/approvals/{approval['approval_request_id']}/approve", {"confirmed": "yes"}
        )
        assert status == 401, text[:300]
        assert "signed_out" in text
        assert await it.everything() == before


async def test_sign_out_ends_the_session(sqlite_served: Served) -> None:
    it = sqlite_served
    async with UiClient(it) as ui:
        await ui.sign_in("vic")
        cookie = ui.cookie().value
        status, headers, _ = await ui.post("/ui/signout", {})
        assert (status, headers["Location"]) == (303, "/ui/signin")
        assert ui.cookie() is None or ui.cookie().value == ""
        ui.session.cookie_jar.update_cookies({"qinglong_ui": cookie})
        assert (await ui.get("/ui"))[0] == 303  # the old id no longer opens anything


@pytest.mark.parametrize(
    ("headers", "csrf", "code"),
    [
        ({"Origin": "http://evil.test"}, True, "cross_site_refused"),
        ({"Origin": "null"}, True, "cross_site_refused"),
        ({"Sec-Fetch-Site": "cross-site"}, True, "cross_site_refused"),
        ({"Sec-Fetch-Site": "same-site"}, True, "cross_site_refused"),
        ({}, False, "csrf_refused"),
        ({}, "wrong", "csrf_refused"),
    ],
)
async def test_a_form_from_elsewhere_is_refused_and_writes_nothing(
    served: Served, headers: dict[str, str], csrf: bool | str, code: str
) -> None:
    it = served
    approval = await api_submit(it, "sam")
    path = f"/ui/approvals/{approval['approval_request_id']}/approve"
    async with UiClient(it) as ui:
        await ui.sign_in("alice")
        if csrf == "wrong":
            ui.csrf = ui.csrf[:-2] + "xx"
        before = await it.everything()
        status, answer_headers, text = await ui.post(
            path, {"confirmed": "yes"}, headers=headers, csrf=bool(csrf)
        )
        assert status == 403, text[:300]
        assert code in text
        assert_secure_headers(answer_headers)
        assert await it.everything() == before
        # The same form, same-origin and with its token, goes through.
        same = {"Origin": ui.origin, "Sec-Fetch-Site": "same-origin"}
        if csrf == "wrong":
            await ui.get("/ui/approvals")
        status, _, text = await ui.post(path, {"confirmed": "yes"}, headers=same)
        assert status == 200, text[:500]
        assert "Approved" in text


async def test_a_null_origin_passes_only_with_a_same_origin_fetch_site(
    sqlite_served: Served,
) -> None:
    """Under `Referrer-Policy: no-referrer` a browser sends `Origin: null` with its own
    same-origin form; `Sec-Fetch-Site: same-origin` (which no page can set) vouches for it."""
    it = sqlite_served
    async with UiClient(it) as ui:
        await ui.sign_in("alice")
        approval = await api_submit(it, "sam")
        path = f"/ui/approvals/{approval['approval_request_id']}/reject"
        fields = {"confirmed": "yes", "reason": "not_needed"}
        before = await it.everything()
        for refused in ({"Origin": "null"}, {"Origin": "null", "Sec-Fetch-Site": "same-site"}):
            status, _, text = await ui.post(path, fields, headers=refused)
            assert (status, "cross_site_refused" in text) == (403, True)
        assert await it.everything() == before
        same = {"Origin": "null", "Sec-Fetch-Site": "same-origin"}
        status, _, text = await ui.post(path, fields, headers=same)
        assert (status, "Rejected" in text) == (200, True), text[:300]


async def test_a_viewer_sees_no_form_and_its_post_is_refused(served: Served) -> None:
    it = served
    approval = await api_submit(it, "sam")
    async with UiClient(it) as ui:
        await ui.sign_in("vic")
        _, _, text = await ui.get("/ui/approvals")
        assert approval["approval_request_id"] in text
        assert "/approve" not in text
        assert "/reject" not in text
        assert "Request an action" not in text
        before = await it.everything()
        for path, fields in (
            (f"/ui/approvals/{approval['approval_request_id']}/approve", {"confirmed": "yes"}),
            (
                f"/ui/approvals/{approval['approval_request_id']}/reject",
                {"confirmed": "yes", "reason": "no"},
            ),
            ("/ui/approvals/new", {"action": "run.create", "plan": "{}"}),
        ):
            status, _, text = await ui.post(path, fields)
            assert status == 403, text[:300]
            assert "forbidden" in text
        assert (await ui.get("/ui/approvals/new"))[0] == 403
        assert await it.everything() == before


async def test_a_submit_then_an_approval_with_its_confirmation_as_the_api_writes_them(
    served: Served,
) -> None:
    it = served
    async with UiClient(it) as ui:
        await ui.sign_in("sam")
        plan = (
            '{"schemaVersion": 1, "actionRef": "ui-ref-1", "projectId": "shop",'
            ' "taskId": "t1", "taskRevision": 1, "executorType": "local", "priority": 5,'
            ' "taskName": "<script>alert(1)</script>"}'
        )
        status, _, text = await ui.post("/ui/approvals/new", {"action": "run.create", "plan": plan})
        assert status == 201, text[:800]
        approval_id = text.split("Approval request ", 1)[1].split(" ", 1)[0]
        _, _, text = await ui.get("/ui/approvals")
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
        assert "<script>" not in text
    async with UiClient(it) as ui:
        await ui.sign_in("alice")
        before = await it.everything()
        path = f"/ui/approvals/{approval_id}/approve"
        status, _, text = await ui.post(path, {})
        assert status == 200
        assert "Confirm" in text
        assert 'name="confirmed" value="yes"' in text
        assert "&lt;script&gt;" in text  # the preview, escaped
        assert "<script>" not in text
        assert await it.everything() == before  # asking wrote nothing
        status, _, text = await ui.post(path, {"confirmed": "yes"})
        assert status == 200, text[:800]
        dispatch_id = text.split("/ui/dispatches/", 1)[1].split('"', 1)[0]
        rows = await it.audit(approval_id)
        assert [(r["kind"], r["principal"]) for r in rows][-3:] == [
            ("approval.approved", it.names["alice"]),
            ("api.approve", it.names["alice"]),
            ("approval.consumed", it.names["alice"]),
        ]
        assert rows[-2]["token_id"] == it.token_ids["alice"]
        assert rows[-2]["client_address"] == "127.0.0.1"
        assert rows[-2]["request_id"].startswith("req_")
        assert rows[0]["kind"] == "approval.created"
        assert rows[0]["principal"] == it.names["sam"]
        status, _, text = await ui.get(f"/ui/dispatches/{dispatch_id}")
        assert status == 200
        assert "pending" in text
        assert "&lt;script&gt;" in text
        assert "<script>" not in text
        _, _, text = await ui.get(f"/ui/audit?subject={dispatch_id}")
        assert "api.consume" in text
        # The whole log, newest first, filtered by principal, with each request's token id.
        _, _, text = await ui.get(f"/ui/audit?principal={it.names['sam']}&kind=api.create")
        assert "api.create" in text
        assert it.token_ids["sam"] in text
        assert "api.consume" not in text
        status, _, text = await ui.get("/ui/audit?kind=%3Cscript%3E")
        assert status == 400
        assert "<script>" not in text


async def test_a_self_approval_shows_the_databases_refusal_and_writes_nothing(
    served: Served,
) -> None:
    it = served
    approval = await api_submit(it, "alice")
    async with UiClient(it) as ui:
        await ui.sign_in("alice")
        before = await it.everything()
        status, headers, text = await ui.post(
            f"/ui/approvals/{approval['approval_request_id']}/approve", {"confirmed": "yes"}
        )
        assert status == 403, text[:800]
        assert headers["Content-Type"] == "text/html; charset=utf-8"
        assert "self_approval_refused" in text
        assert "Traceback" not in text
        assert await it.everything() == before


async def test_a_bad_reason_is_refused_escaped_and_writes_nothing(served: Served) -> None:
    it = served
    approval = await api_submit(it, "sam")
    async with UiClient(it) as ui:
        await ui.sign_in("alice")
        before = await it.everything()
        path = f"/ui/approvals/{approval['approval_request_id']}/reject"
        status, _, text = await ui.post(path, {"reason": "<script>x</script>"})
        assert status == 200  # the confirmation shows the reason, escaped
        assert "&lt;script&gt;x&lt;/script&gt;" in text
        assert "<script>" not in text
        status, _, text = await ui.post(path, {"reason": "<script>x</script>", "confirmed": "yes"})
        assert status == 400, text[:500]
        assert "invalid_input" in text
        assert "<script>" not in text
        assert await it.everything() == before
        status, _, text = await ui.post(path, {"reason": "not_needed", "confirmed": "yes"})
        assert status == 200, text[:500]
        rows = await it.audit(approval["approval_request_id"])
        assert ("api.reject", it.names["alice"]) in [(r["kind"], r["principal"]) for r in rows]


async def test_unknown_pages_and_bad_ids_are_html_pages(sqlite_served: Served) -> None:
    it = sqlite_served
    async with UiClient(it) as ui:
        await ui.sign_in("vic")
        for path, status, code in (
            ("/ui/nowhere", 404, "not_found"),
            ("/ui/dispatches/nope", 404, "dispatch_not_found"),
            ("/ui/dispatches?status=lost", 400, "invalid_input"),
            ("/ui/dispatches?what=1", 400, "invalid_input"),
        ):
            got, headers, text = await ui.get(path)
            assert (got, code in text) == (status, True), (path, text[:300])
            assert headers["Content-Type"] == "text/html; charset=utf-8"
            assert_secure_headers(headers)


async def test_the_dispatch_list_pages_by_keyset_and_filters_by_state(
    sqlite_served: Served,
) -> None:
    it = sqlite_served
    ids = {c.dispatch_id for c in await submit_runs(it.harness.approver_store, it.clock, 53)}
    async with UiClient(it) as ui:
        await ui.sign_in("vic")
        _, _, first = await ui.get("/ui/dispatches?status=pending")
        shown = set(re.findall(r'href="/ui/dispatches/([^"]+)"', first))
        assert len(shown) == 50
        after = re.search(r'href="(/ui/dispatches\?[^"]*after=[^"]+)" rel="next"', first)
        assert after is not None
        _, _, second = await ui.get(html.unescape(after.group(1)))
        rest = set(re.findall(r'href="/ui/dispatches/([^"]+)"', second))
        assert len(rest) == 3
        assert shown | rest == ids
        assert 'rel="next"' not in second
        _, _, none = await ui.get("/ui/dispatches?status=succeeded")
        assert "No dispatch matches." in none


async def test_a_dispatch_page_shows_its_takeovers_against_their_bound(served: Served) -> None:
    it = served
    taken, fresh = await submit_runs(it.harness.approver_store, it.clock, 2, max_attempts=2)
    for owner in ("w1", "w2"):  # w1 dies before the barrier; w2 takes its lease over
        claimed = await it.harness.store.claim(
            taken.dispatch_id,
            now_ms=it.clock.now_ms(),
            owner=owner,
            token=f"t-{owner}",
            lease_ms=50,
        )
        assert claimed.lease is not None
        # The served clock is real time: the database's must see the lease expire too.
        await asyncio.sleep(0.1)
        it.clock.advance(ms=100)
    async with UiClient(it) as ui:
        await ui.sign_in("vic")
        shown: dict[str, list[str]] = {}
        for row in (taken, fresh):
            _, _, text = await ui.get(f"/ui/dispatches/{row.dispatch_id}")
            shown[row.dispatch_id] = re.findall(r"<dt>takeovers</dt><dd>([^<]*)</dd>", text)
    assert shown == {taken.dispatch_id: ["1/8"], fresh.dispatch_id: ["0/8"]}


async def test_an_operator_cancels_a_waiting_dispatch_after_confirming(served: Served) -> None:
    it = served
    dispatch_id = (await submit_runs(it.harness.approver_store, it.clock, 1))[0].dispatch_id
    async with UiClient(it) as ui:
        await ui.sign_in("carol")
        _, _, text = await ui.get(f"/ui/dispatches/{dispatch_id}")
        assert f"/ui/dispatches/{dispatch_id}/cancel" in text
        before = await it.everything()
        path = f"/ui/dispatches/{dispatch_id}/cancel"
        status, _, text = await ui.post(path, {"reason": "not_needed"})
        assert (status, "Confirm" in text) == (200, True)
        assert await it.everything() == before
        status, headers, text = await ui.post(path, {"reason": "not_needed", "confirmed": "yes"})
        assert (status, headers.get("Location")) == (303, f"/ui/dispatches/{dispatch_id}"), text
        _, _, text = await ui.get(f"/ui/dispatches/{dispatch_id}")
        assert "<b>cancelled</b>" in text
        rows = await it.audit(dispatch_id)
        assert ("api.cancel", it.names["carol"], it.token_ids["carol"]) in [
            (r["kind"], r["principal"], r["token_id"]) for r in rows
        ]
    async with UiClient(it) as ui:
        await ui.sign_in("alice")  # an approver sees no cancel form
        other = (await submit_runs(it.harness.approver_store, it.clock, 1))[0].dispatch_id
        _, _, text = await ui.get(f"/ui/dispatches/{other}")
        assert "/cancel" not in text


async def test_a_plan_nested_past_the_parsers_stack_is_a_400_page_and_writes_nothing(
    sqlite_served: Served,
) -> None:
    it = sqlite_served
    async with UiClient(it) as ui:
        await ui.sign_in("sam")
        before = await it.everything()
        deep = "[" * 40_000 + "]" * 40_000  # form-encoded 240 KB; was RecursionError, 500
        status, _, text = await ui.post("/ui/approvals/new", {"action": "run.create", "plan": deep})
        assert status == 400, text[:500]
        assert "invalid_input" in text
        assert "nested deeper than" in text
        assert await it.everything() == before
