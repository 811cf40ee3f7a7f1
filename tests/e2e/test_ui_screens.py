"""The operator UI on every screen and for every person, in a real browser (Debian's Chromium,
headless, driven by Playwright) over a real listener, real tokens and a real database.

- "Request again": a submitter requests a cancelled dispatch again from its page, after the
  confirm page, and lands on the new pending request; a viewer sees no button, and the form
  posted by a viewer is refused and writes nothing (both dialects).
- Any screen: every page at 390, 1,280 and 1,920 px, screenshot each, and no page scrolls
  sideways (`document.documentElement.scrollWidth <= innerWidth`); at 390 px every link of the
  navigation is visible, inside the screen.
- Accessibility: axe-core (bundled by the `axe-playwright-python` package of the `test` extra,
  never downloaded at test time) finds no violation on any page, at 1,280 and at 390 px.

The layout is a property of the markup and the style sheet, not of the dialect: the screen and
axe tests run on SQLite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import pytest
from axe_playwright_python.async_playwright import Axe
from playwright.async_api import Browser, Page, ViewportSize, async_playwright

from tests.e2e.test_api_inbox_waits import held_and_frozen
from tests.e2e.test_ui_browser import Ui, served, shots
from tests.support import system_tools
from tests.support.actions import submit_runs
from tests.support.api_writes import Served
from tests.support.api_writes import submit as api_submit
from tests.support.clock import ManualClock
from tests.support.recovery import started_execution

__all__ = ["served", "shots"]  # the fixtures of the browser test, shared

WIDTHS: Final = (390, 1280, 1920)
HEIGHT: Final = 900
DOC_SHOTS: Final = frozenset(
    {(390, name) for name in ("dispatches", "dispatch", "audit", "inbox", "approvals")}
    | {(width, name) for width in (1280, 1920) for name in ("dispatches", "audit")}
)
"""The (width, page) screenshots that also go to docs/ui/ (`screen-<width>-<page>.png`) when
UI_SCREENSHOTS_DIR names it; the test's own folder gets every page at every width."""


def _viewport(width: int) -> ViewportSize:
    return {"width": width, "height": HEIGHT}


async def _cancelled(it: Served, clock: ManualClock) -> str:
    (consumed,) = await submit_runs(it.harness.approver_store, clock, 1, project="shop")
    status, _, body = await it.call(
        "POST", f"/dispatches/{consumed.dispatch_id}/cancel", "carol", {"reason": "wrong_time"}
    )
    assert status == 200, body
    return consumed.dispatch_id


async def _browser_page(browser: Browser, it: Served, shots: Path, width: int = 1280) -> Ui:
    context = await browser.new_context(viewport=_viewport(width))
    page = await context.new_page()
    page.set_default_timeout(15_000)
    return Ui(page, it, shots)


async def test_a_submitter_requests_a_cancelled_dispatch_again_in_a_browser(
    served: Served, shots: Path
) -> None:
    chromium = system_tools.chromium()
    it = served
    dispatch_id = await _cancelled(it, it.clock)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, headless=True)
        try:
            # A viewer sees the dispatch but no "Request again"; its post is refused.
            viewer = await _browser_page(browser, it, shots)
            await viewer.sign_in("vic")
            await viewer.page.goto(f"{viewer.base}/ui/dispatches/{dispatch_id}")
            assert "cancelled" in (await viewer.page.text_content("main") or "")
            assert await viewer.page.locator("button:has-text('Request again')").count() == 0
            csrf = await viewer.page.locator("input[name=csrf]").first.get_attribute("value")
            before = await it.everything()
            refused = await viewer.page.request.post(
                f"{viewer.base}/ui/dispatches/{dispatch_id}/resubmit",
                form={"csrf": csrf or "", "confirmed": "yes"},
                headers={"Origin": viewer.base},
            )
            assert refused.status == 403, await refused.text()
            assert "forbidden" in await refused.text()
            assert await it.everything() == before

            # A submitter asks, sees the confirm page, confirms, and lands on the new request.
            ui = await _browser_page(browser, it, shots)
            await ui.sign_in("sam")
            await ui.page.goto(f"{ui.base}/ui/dispatches/{dispatch_id}")
            await ui.page.click("main button:has-text('Request again…')")
            assert await ui.page.text_content("h1") == "Confirm"
            assert await it.everything() == before  # nothing written before the confirmation
            await ui.shot("resubmit-confirm")
            await ui.page.click("main button:has-text('Request again')")
            assert "/ui/approvals/a-" in ui.page.url, ui.page.url
            new_id = ui.page.url.rsplit("/", 1)[1]
            main = await ui.page.text_content("main") or ""
            assert "pending" in main, main
            assert it.names["sam"] in main
            rows = await it.harness.raw(
                f"SELECT status, requested_principal FROM {it.table('approval_requests')} "
                f"WHERE approval_request_id = '{new_id}'"
            )
            assert rows == [{"status": "pending", "requested_principal": it.names["sam"]}]
            # The old dispatch is as it was, and still offers to be requested again.
            _, _, shown = await it.call("GET", f"/dispatches/{dispatch_id}", "vic")
            assert shown["execution"]["status"] == "cancelled"
        finally:
            await browser.close()


async def _pages(it: Served) -> dict[str, str]:
    """Every page of the UI, with rows on it: name → path."""
    # First: its claim takes the next due row, which must be its own router change.
    _holder, _waiting, frozen, _freeze = await held_and_frozen(it)
    past = ManualClock(it.clock.now_ms() - 3_600_000)
    await submit_runs(it.harness.approver_store, past, 2, project="shop-with-a-long-project-name")
    stuck, _ = await started_execution(it.harness, past)
    cancelled = await _cancelled(it, past)
    pending = await api_submit(it, "sam", "a-task-with-a-rather-long-name-to-wrap")
    return {
        "overview": "/ui",
        "inbox": "/ui/inbox",
        "lift-freeze": f"/ui/dispatches/{frozen}/lift-freeze",
        "dispatches": "/ui/dispatches",
        "dispatch": f"/ui/dispatches/{stuck.dispatch_id}",
        "dispatch-cancelled": f"/ui/dispatches/{cancelled}",
        "approvals": "/ui/approvals",
        "approval": f"/ui/approvals/{pending['approval_request_id']}",
        "approval-new": "/ui/approvals/new",
        "policies": "/ui/policies",
        "recovery": "/ui/recovery",
        "audit": "/ui/audit",
        "session": "/ui/session",
        "not-found": "/ui/no-such-page",
    }


async def _fits(page: Page, width: int, name: str) -> None:
    sizes: dict[str, Any] = await page.evaluate(
        "({scroll: document.documentElement.scrollWidth, inner: window.innerWidth})"
    )
    assert sizes["inner"] == width, sizes
    assert sizes["scroll"] <= sizes["inner"], (name, width, sizes)


async def _navigation_visible(page: Page, width: int) -> None:
    links = page.locator("header nav a")
    assert await links.count() >= 8
    for index in range(await links.count()):
        link = links.nth(index)
        assert await link.is_visible(), await link.text_content()
        box = await link.bounding_box()
        assert box is not None
        assert box["x"] >= 0, box
        assert box["x"] + box["width"] <= width, (await link.text_content(), box)
    assert await page.locator("header button:has-text('Sign out')").is_visible()


@pytest.mark.slow
@pytest.mark.parametrize("served", ["sqlite"], indirect=True)
async def test_every_page_fits_every_screen_without_scrolling_sideways(
    served: Served, shots: Path, tmp_path: Path
) -> None:
    chromium = system_tools.chromium()
    it = served
    pages = await _pages(it)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, headless=True)
        try:
            for width in WIDTHS:
                ui = await _browser_page(browser, it, shots, width)
                await ui.page.goto(ui.base + "/ui/signin")
                await _fits(ui.page, width, "signin")
                await ui.sign_in("alice" if width == 1280 else "carol")
                for name, path in pages.items():
                    await ui.page.goto(ui.base + path)
                    await _fits(ui.page, width, name)
                    if width == WIDTHS[0]:
                        await _navigation_visible(ui.page, width)
                    if (width, name) in DOC_SHOTS:
                        await ui.shot(f"screen-{width}-{name}")
                    else:
                        # The rest only into the test's own folder, never into docs/ui.
                        await ui.page.screenshot(path=str(tmp_path / f"{width}-{name}.png"))
                await ui.page.context.close()
        finally:
            await browser.close()


def _violations(results: Any) -> list[str]:
    found = results.response.get("violations", [])
    return [
        f"{v['id']} ({v['impact']}): "
        + json.dumps([n["target"] for n in v["nodes"]][:5], ensure_ascii=False)
        for v in found
    ]


@pytest.mark.slow
@pytest.mark.parametrize("served", ["sqlite"], indirect=True)
async def test_axe_finds_no_violation_on_any_page(served: Served, shots: Path) -> None:
    chromium = system_tools.chromium()
    it = served
    pages = await _pages(it)
    axe = Axe()
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, headless=True)
        try:
            found: dict[str, list[str]] = {}
            for width, who in ((1280, "alice"), (390, "carol")):
                ui = await _browser_page(browser, it, shots, width)
                await ui.page.goto(ui.base + "/ui/signin")
                found[f"signin@{width}"] = _violations(await axe.run(ui.page))
                await ui.sign_in(who)
                for name, path in pages.items():
                    await ui.page.goto(ui.base + path)
                    found[f"{name}@{width}"] = _violations(await axe.run(ui.page))
                await ui.page.context.close()
            bad = [f"{page}: {violation}" for page, seen in found.items() for violation in seen]
            assert not bad, "\n".join(bad)
        finally:
            await browser.close()
