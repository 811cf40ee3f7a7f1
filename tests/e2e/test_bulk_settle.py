"""Bulk settle over a real listener, real tokens and both databases: `POST
/api/v1/recovery/settle` settles each named `recovery_required` dispatch alone under its own
fence, so a live lease refuses its row and undoes nothing of the others; every settled row has
its own audit rows (with the comment); bad input settles nothing; a viewer or an approver may
not; and the inbox in a real browser (Debian's Chromium through Playwright) ticks several
rows, confirms, and reports each."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import async_playwright

from tests.e2e.test_ui_browser import VIEWPORT, Ui, served, shots
from tests.support import system_tools
from tests.support.actions import submit_runs
from tests.support.api_writes import Served, assert_problem
from tests.support.clock import ManualClock
from tests.support.recovery import started_execution

__all__ = ["served", "shots"]  # the fixtures of the browser test, shared


async def _stuck(it: Served, count: int) -> list[str]:
    """`count` dispatches whose lease ran out an hour ago after their start barrier."""
    past = ManualClock(it.clock.now_ms() - 3_600_000)
    found = []
    for _ in range(count):
        await submit_runs(it.harness.approver_store, past, 1)
        dispatch, _ = await started_execution(it.harness, past)
        found.append(dispatch.dispatch_id)
    return found


async def _statuses(it: Served, ids: list[str]) -> list[str]:
    out = []
    for dispatch_id in ids:
        status, _, body = await it.call("GET", f"/dispatches/{dispatch_id}", "vic")
        assert status == 200, body
        out.append(body["execution"]["effective_status"])
    return out


async def test_each_row_is_settled_alone_and_reported(served: Served) -> None:
    it = served
    first, second = await _stuck(it, 2)
    await submit_runs(it.harness.approver_store, it.clock, 1)
    live, _ = await started_execution(it.harness, it.clock)  # its lease still holds
    body = {
        "dispatch_ids": [first, live.dispatch_id, second],
        "as": "failed",
        "reason": "checked_by_hand",
        "comment": "receiver shows nothing",
    }
    status, _, answer = await it.call("POST", "/recovery/settle", "carol", body)
    assert status == 200, answer
    results = {r["dispatch_id"]: r for r in answer["results"]}
    assert [r["dispatch_id"] for r in answer["results"]] == body["dispatch_ids"]
    assert (results[first]["status"], results[first]["problem"]) == ("failed", None)
    assert (results[second]["status"], results[second]["problem"]) == ("failed", None)
    assert results[live.dispatch_id]["problem"] == "recovery_refused"
    assert results[live.dispatch_id]["status"] is None
    assert await _statuses(it, [first, second, live.dispatch_id]) == [
        "failed",
        "failed",
        "executing",
    ]
    for settled in (first, second):
        rows = await it.audit(settled)
        assert [(r["kind"], r["principal"]) for r in rows] == [
            ("recovery.manual_resolution", it.names["carol"]),
            ("api.resolve", it.names["carol"]),
        ]
    assert await it.audit(live.dispatch_id) == []
    status, _, page = await it.call("GET", f"/audit?subject={first}&kind=api.resolve", "vic")
    assert [e["comment"] for e in page["audit"]] == ["receiver shows nothing"]


@pytest.mark.parametrize(
    "body",
    [
        {"as": "failed", "reason": "r"},
        {"dispatch_ids": [], "as": "failed", "reason": "r"},
        {"dispatch_ids": ["d-1", "d-1"], "as": "failed", "reason": "r"},
        {"dispatch_ids": ["not an id"], "as": "failed", "reason": "r"},
        {"dispatch_ids": [f"d-{i}" for i in range(51)], "as": "failed", "reason": "r"},
        {"dispatch_ids": "STUCK", "as": "maybe", "reason": "r"},
        {"dispatch_ids": "STUCK", "as": "failed"},
        {"dispatch_ids": "STUCK", "as": "failed", "reason": "r", "comment": "a\nb"},
        {"dispatch_ids": "STUCK", "as": "failed", "reason": "r", "principal": "x"},
    ],
)
async def test_bad_input_settles_nothing(served: Served, body: dict[str, object]) -> None:
    it = served
    (stuck,) = await _stuck(it, 1)
    if body.get("dispatch_ids") == "STUCK":
        body = {**body, "dispatch_ids": [stuck]}
    before = await it.everything()
    assert_problem(await it.call("POST", "/recovery/settle", "carol", body), 400, "invalid_input")
    assert await it.everything() == before
    assert await _statuses(it, [stuck]) == ["recovery_required"]


async def test_only_an_operator_settles(served: Served) -> None:
    it = served
    (stuck,) = await _stuck(it, 1)
    before = await it.everything()
    body = {"dispatch_ids": [stuck], "as": "failed", "reason": "r"}
    for who in ("vic", "alice", "sam"):
        assert_problem(await it.call("POST", "/recovery/settle", who, body), 403, "forbidden")
    assert await it.everything() == before


@pytest.mark.slow
async def test_the_inbox_settles_the_ticked_rows_in_a_browser(served: Served, shots: Path) -> None:
    chromium = system_tools.chromium()
    it = served
    first, second, untouched = await _stuck(it, 3)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, headless=True)
        try:
            for script in (True, False):  # the same form with JavaScript off
                if not script:
                    first, second, untouched = await _stuck(it, 3)
                context = await browser.new_context(viewport=VIEWPORT, java_script_enabled=script)
                page = await context.new_page()
                page.set_default_timeout(15_000)
                ui = Ui(page, it, shots)
                await ui.sign_in("carol")
                await page.goto(ui.base + "/ui/inbox")
                await page.check(f"input[name='pick-{first}']")
                await page.check(f"input[name='pick-{second}']")
                await page.select_option("select[name=as]", "failed")
                await page.fill("input[name=reason]", "checked_by_hand")
                await page.fill("input[name=comment]", "both shown nothing")
                await page.click("button:has-text('Settle selected')")
                question = await page.text_content("main") or ""
                assert "Settle 2 dispatch(es) as failed" in question
                assert first in question
                assert second in question
                assert untouched not in question
                await page.click("button:has-text('Settle')")
                report = await page.text_content("main") or ""
                assert "Settled 2 of 2." in report, report
                if script:
                    await ui.shot("inbox-bulk-settled")
                assert await _statuses(it, [first, second, untouched]) == [
                    "failed",
                    "failed",
                    "recovery_required",
                ]
                await context.close()
        finally:
            await browser.close()
