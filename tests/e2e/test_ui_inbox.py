"""The inbox in a real browser (Debian's Chromium, headless, driven by Playwright) over a real
listener, real tokens and both databases: under a policy whose group holds bob but not alice,
bob's inbox shows sam's request and not his own (under the policy or under none), alice's
only the one under no policy; an operator's shows a `recovery_required` dispatch with its
evidence's verdict; the filters (a plain GET form, with JavaScript off) narrow it; each row
links to its page; at 390 px nothing scrolls sideways."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Browser, BrowserContext, Page, async_playwright

from qinglong_dispatcher.domain import recovery
from tests.e2e.test_ui_browser import VIEWPORT, Ui, served, shots
from tests.support import system_tools
from tests.support.actions import submit_runs
from tests.support.api_writes import Served
from tests.support.api_writes import submit as api_submit
from tests.support.clock import ManualClock
from tests.support.policies import two_of_three
from tests.support.recovery import started_execution

__all__ = ["served", "shots"]  # the fixtures of the browser test, shared

NARROW = {"width": 390, "height": 844}
VERDICT = "no automatic evidence for this action: check the target"


async def _signed_in(
    browser: Browser, it: Served, who: str, shots: Path, *, script: bool = True
) -> tuple[BrowserContext, Ui]:
    context = await browser.new_context(viewport=VIEWPORT, java_script_enabled=script)
    page = await context.new_page()
    page.set_default_timeout(15_000)
    ui = Ui(page, it, shots)
    await ui.sign_in(who)
    return context, ui


async def _rows(page: Page) -> str:
    if await page.locator("ul#inbox").count() == 0:
        return ""
    return await page.locator("ul#inbox").text_content() or ""


async def _no_sideways_scroll(ui: Ui, shot: str | None = None) -> None:
    await ui.page.set_viewport_size(NARROW)  # type: ignore[arg-type]
    await ui.page.reload()
    width = await ui.page.evaluate("document.documentElement.scrollWidth")
    assert width <= NARROW["width"], width
    assert await ui.page.locator("nav a:has-text('Inbox')").is_visible()
    if shot is not None:
        await ui.shot(shot)


@pytest.mark.slow
async def test_the_inbox_shows_what_waits_on_each_person(served: Served, shots: Path) -> None:
    chromium = system_tools.chromium()
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
    # Before the policy: bob's request under none, which any approver but bob may decide.
    free = (await api_submit(it, "bob", "inbox-free"))["approval_request_id"]
    async with two_of_three(it), async_playwright() as playwright:
        theirs = (await api_submit(it, "sam", "inbox-a"))["approval_request_id"]
        own = (await api_submit(it, "bob", "inbox-b"))["approval_request_id"]
        browser = await playwright.chromium.launch(executable_path=chromium, headless=True)
        try:
            # bob, in the policy's group: sam's request, not his own, no recovery row.
            _, bob = await _signed_in(browser, it, "bob", shots)
            assert await bob.page.locator("nav li").first.text_content() == "Inbox"
            await bob.page.click("nav a:has-text('Inbox')")
            rows = await _rows(bob.page)
            assert theirs in rows, rows
            assert own not in rows, rows
            assert free not in rows, rows
            assert stuck.dispatch_id not in rows, rows
            assert it.names["sam"] in rows, rows
            assert "policy two" in rows, rows
            await bob.shot("inbox")
            await bob.page.click(f"ul#inbox a:has-text('{theirs}')")
            assert await bob.page.text_content("h1") == f"Approval {theirs}"
            await bob.page.goto(bob.base + "/ui/inbox?action=http.request")
            assert await _rows(bob.page) == ""
            await bob.page.goto(bob.base + "/ui/inbox?action=run.create&project=shop")
            assert theirs in await _rows(bob.page)
            await _no_sideways_scroll(bob)

            # alice, an approver outside the group: only the request under no policy.
            _, alice = await _signed_in(browser, it, "alice", shots)
            await alice.page.goto(alice.base + "/ui/inbox")
            rows = await _rows(alice.page)
            assert free in rows, rows
            assert "no policy" in rows, rows
            assert theirs not in rows, rows
            assert own not in rows, rows
            await alice.page.goto(alice.base + "/ui/inbox?q=nothing-has-this")
            assert "Nothing waits on you." in (await alice.page.text_content("main") or "")

            # carol, an operator, with JavaScript off: the recovery row and its verdict.
            _, carol = await _signed_in(browser, it, "carol", shots, script=False)
            await carol.page.goto(carol.base + "/ui/inbox")
            rows = await _rows(carol.page)
            assert stuck.dispatch_id in rows, rows
            assert VERDICT in rows, rows
            assert theirs not in rows, rows  # carol is in no group of the policy
            await carol.shot("inbox-recovery")
            form = carol.page.locator("form.filters")
            await form.locator("input[name=q]").fill(stuck.dispatch_id[-8:].upper())
            await form.locator("button").click()
            assert "q=" in carol.page.url
            assert stuck.dispatch_id in await _rows(carol.page)
            await form.locator("input[name=q]").fill("nothing-has-this")
            await form.locator("button").click()
            assert await _rows(carol.page) == ""
            await carol.page.goto(carol.base + "/ui/inbox?project=shop")
            rows = await _rows(carol.page)
            assert free in rows, rows
            assert stuck.dispatch_id not in rows, rows
            await carol.page.goto(carol.base + "/ui/inbox?project=proj-1&sort=newest")
            await carol.page.click(f"ul#inbox a:has-text('{stuck.dispatch_id}')")
            assert stuck.dispatch_id in (await carol.page.text_content("h1") or "")
            assert await carol.page.locator("section.evidence form").count() == 1

            # A bad filter is the page's error, never a traceback.
            await carol.page.goto(carol.base + "/ui/inbox?sort=sideways")
            shown = await carol.page.text_content("main") or ""
            assert "sort: oldest or newest" in shown, shown
            assert "Traceback" not in shown

            _, operator = await _signed_in(browser, it, "carol", shots)
            await operator.page.goto(operator.base + "/ui/inbox")
            await _no_sideways_scroll(operator, "inbox-narrow-recovery")
        finally:
            await browser.close()
