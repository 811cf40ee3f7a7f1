"""A dispatch waiting for its target, in a real browser (Debian's Chromium, headless, driven by
Playwright), on both dialects: a change whose effect's outcome is unknown (`recovery_required`)
holds its router, and the next change of that router shows, on its page and in the dispatch
list, the target and `waiting for target (held by D)` with a link to D's page."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import async_playwright

from tests.e2e.test_ui_browser import VIEWPORT, Ui, served, shots
from tests.support import system_tools
from tests.support.api_writes import Served
from tests.support.clock import ManualClock
from tests.support.targets import claim_and_start, submit_change

__all__ = ["served", "shots"]  # the fixtures of the browser test, shared

LEASE_MS = 60_000


async def _held(it: Served) -> tuple[str, str]:
    """Two changes of router-1: the first started an hour ago and its lease ran out (held),
    the second pending behind it. Their dispatch ids."""
    past = ManualClock(it.clock.now_ms() - 3_600_000)
    first = await submit_change(it.harness.approver_store, past, "ui-target-1", "router-1")
    dispatch, _ = await claim_and_start(it.harness.store, past, lease_ms=LEASE_MS)
    assert dispatch.dispatch_id == first
    second = await submit_change(it.harness.approver_store, it.clock, "ui-target-2", "router-1")
    return first, second


async def test_a_held_targets_waiting_dispatch_shows_held_by_with_a_link(
    served: Served, shots: Path
) -> None:
    chromium = system_tools.chromium()
    it = served
    holder, waiting = await _held(it)
    status, _, body = await it.call("GET", f"/dispatches/{waiting}", "vic")
    assert status == 200, body
    assert body["execution"]["waiting_for_target"] == {"target": "router-1", "held_by": holder}

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = await browser.new_page(viewport=VIEWPORT)
            page.set_default_timeout(15_000)
            ui = Ui(page, it, shots)
            await ui.sign_in("vic")
            await page.goto(f"{ui.base}/ui/dispatches/{waiting}")
            wait = page.locator("span.waiting-for-target")
            assert await wait.text_content() == f"waiting for target (held by {holder})"
            facts = await page.locator("main").text_content() or ""
            assert f"router-1 · waiting for target (held by {holder})" in facts
            await ui.shot("dispatch-waiting-for-target")
            await wait.locator("a").click()
            assert page.url == f"{ui.base}/ui/dispatches/{holder}"
            assert await page.locator("span.waiting-for-target").count() == 0

            # The list shows the target of both, and the wait of the second only.
            await page.goto(f"{ui.base}/ui/dispatches")
            row = page.locator("tr", has_text=waiting)
            assert "router-1" in (await row.text_content() or "")
            await row.locator("span.waiting-for-target a").click()
            assert page.url == f"{ui.base}/ui/dispatches/{holder}"
            await page.goto(f"{ui.base}/ui/dispatches")
            # The waiting row names the holder too: the holder's row is the one it heads.
            held = page.locator("tr", has=page.locator(f"td:first-child a:text-is('{holder}')"))
            assert "router-1" in (await held.text_content() or "")
            assert await held.locator("span.waiting-for-target").count() == 0
        finally:
            await browser.close()
