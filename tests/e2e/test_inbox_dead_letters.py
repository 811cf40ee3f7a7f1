"""Dead letters in the operator's inbox over a real listener, real tokens and both databases:
a notification given up after its attempts (a receiver that never answers) is a row of an
operator's inbox, by API and in a real browser (Debian's Chromium through Playwright), naming
the event, the subscription by name and the attempts, linking its subject's page; never the
subscription's URL or secret. An approver or a viewer does not get it."""

from __future__ import annotations

from pathlib import Path

import anyio
from playwright.async_api import async_playwright

from qinglong_dispatcher.domain import notifications as n
from qinglong_dispatcher.notifying import deliverer
from tests.e2e.test_ui_browser import VIEWPORT, Ui, served, shots
from tests.support import system_tools
from tests.support.actions import submit_runs
from tests.support.api_writes import Served

__all__ = ["served", "shots"]

NOWHERE = "http://127.0.0.1:9/never-answers?token=do-not-show"
ONCE = deliverer.Timing(
    poll_s=0.01, lease_ms=5_000, max_attempts=1, backoff_base_ms=1, backoff_cap_ms=1, settle_ms=0
)


async def _dead_letter(it: Served) -> str:
    """One request told to a receiver that never answers, given up after one attempt; its id."""
    await it.admin.add_subscription(
        n.Subscription(
            name="pager",
            url=NOWHERE,
            secret_ref="env:QL_TEST_WHSEC",
            kinds=("approval.requested",),
        )
    )
    (one,) = await submit_runs(it.harness.approver_store, it.clock, 1)
    d = deliverer.Deliverer(
        it.harness.store, owner="d1", timing=ONCE, environ={"QL_TEST_WHSEC": "whsec_AAAA"}
    )
    await d.start()
    try:
        for _ in range(100):
            await d.tick()
            if (await it.harness.store.delivery_stats()).dead == 1:
                return one.approval_request_id
            await anyio.sleep(0.01)
    finally:
        await d.aclose()
    raise AssertionError("no dead letter")


async def test_a_dead_letter_is_in_the_operators_inbox_only(served: Served, shots: Path) -> None:
    it = served
    request = await _dead_letter(it)
    status, _, body = await it.call("GET", "/inbox", "carol")
    assert status == 200, body
    [letter] = [i for i in body["items"] if i["kind"] == "dead_letter"]
    assert (letter["id"], letter["action"], letter["project"]) == (request, "run.create", "proj-1")
    assert letter["summary"] == (
        "approval.requested to pager given up after 1 attempts (no answer): nobody was told"
    )
    assert "127.0.0.1" not in str(body)
    assert "do-not-show" not in str(body)
    for who in ("bob", "vic"):
        status, _, body = await it.call("GET", "/inbox", who)
        assert status == 200, body
        assert all(i["kind"] != "dead_letter" for i in body["items"]), who
    status, _, body = await it.call("GET", "/inbox?q=pager", "carol")
    assert [i["id"] for i in body["items"]] == [request]

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=system_tools.chromium(), headless=True
        )
        try:
            context = await browser.new_context(viewport=VIEWPORT, java_script_enabled=False)
            page = await context.new_page()
            page.set_default_timeout(15_000)
            carol = Ui(page, it, shots)
            await carol.sign_in("carol")
            await page.goto(carol.base + "/ui/inbox?q=pager")
            row = page.locator("ul#inbox li.dead_letter")
            assert await row.count() == 1
            text = await row.text_content() or ""
            assert "notification not delivered" in text, text
            assert "given up after 1 attempts" in text, text
            assert "do-not-show" not in (await page.content())
            await carol.shot("inbox-dead-letter")
            await row.locator(f"a:has-text('{request}')").click()
            assert await page.text_content("h1") == f"Approval {request}"
        finally:
            await browser.close()
