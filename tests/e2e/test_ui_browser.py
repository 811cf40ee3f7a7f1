"""The operator UI in a real browser (Debian's Chromium, headless, driven by Playwright) over a
real listener, real tokens and a real database: a submitter requests an action, an approver
approves it after the confirmation page, a self-approval shows the database's refusal, an
operator settles a `recovery_required` dispatch with a reason, and a form posted from a page
of another origin is refused and writes nothing. Each page's screenshot is written (to docs/ui/ with
UI_SCREENSHOTS_DIR=docs/ui)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from playwright.async_api import Page, ViewportSize, async_playwright

from tests.support import stores, system_tools
from tests.support.actions import submit_runs
from tests.support.api_writes import Served, serving
from tests.support.clock import ManualClock
from tests.support.recovery import started_execution
from tests.support.ui_client import origin

SHOTS_ENV = "UI_SCREENSHOTS_DIR"
"""Where the screenshots go: the test's own folder, unless this names one (`UI_SCREENSHOTS_DIR=
docs/ui` renews the docs' pictures; a plain test run leaves the repository as it was)."""
VIEWPORT: ViewportSize = {"width": 1100, "height": 700}


@pytest.fixture(params=stores.DIALECTS)
async def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> AsyncIterator[Served]:
    async with serving(request.param, tmp_path_factory, tmp_path) as it:
        yield it


class Ui:
    """One browser page on the UI; screenshots only on SQLite (one set, always available)."""

    def __init__(self, page: Page, it: Served, shots: Path) -> None:
        self.page = page
        self.it = it
        self.base = origin(it)
        self.shots = shots

    async def shot(self, name: str) -> None:
        if self.it.harness.dialect == "sqlite":
            path = self.shots / f"{name}.png"
            await self.page.screenshot(path=str(path))
            assert path.stat().st_size > 1000, name

    async def sign_in(self, who: str) -> None:
        await self.page.goto(self.base + "/ui")
        assert self.page.url.startswith(self.base + "/ui/signin")
        await self.page.fill("input[name=token]", self.it.secrets[who])
        await self.page.click("button:has-text('Sign in')")
        assert self.page.url == self.base + "/ui"
        assert self.it.names[who] in (await self.page.text_content("header") or "")

    async def sign_out(self) -> None:
        await self.page.click("header button:has-text('Sign out')")
        assert self.page.url.startswith(self.base + "/ui/signin")

    async def request(self, task: str, name: str) -> str:
        """Request a run.create through the form; the new approval request's id."""
        await self.page.goto(self.base + "/ui/approvals/new")
        plan = {
            "schemaVersion": 1,
            "actionRef": f"ui-{task}",
            "projectId": "shop",
            "taskId": task,
            "taskRevision": 1,
            "executorType": "local",
            "priority": 5,
            "taskName": name,
        }
        await self.page.select_option("select[name=action]", "run.create")
        await self.page.fill("textarea[name=plan]", json.dumps(plan, indent=2))
        await self.page.click("button:has-text('Request approval')")
        text = await self.page.text_content("p.notice") or ""
        assert text.startswith("Approval request "), text
        return text.split()[2]

    async def decide(self, approval_id: str, button: str) -> None:
        await self.page.goto(self.base + "/ui/approvals")
        section = self.page.locator("section.approval", has_text=approval_id)
        await section.locator("button", has_text=f"{button}…").click()
        assert await self.page.text_content("h1") == "Confirm"


@contextlib.asynccontextmanager
async def _attacker(target: str, fields: dict[str, str]) -> AsyncIterator[str]:
    """A page on another port of the same host with a form posting to `target`."""
    inputs = "".join(f'<input type="hidden" name="{k}" value="{v}">' for k, v in fields.items())
    page = (
        f'<!DOCTYPE html><form method="post" action="{target}">{inputs}'
        "<button type=submit>Win a prize</button></form>"
    )

    async def serve(request: web.Request) -> web.Response:
        return web.Response(text=page, content_type="text/html")

    app = web.Application()
    app.router.add_get("/", serve)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        await runner.cleanup()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get(SHOTS_ENV) or tmp_path / "shots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.mark.slow
async def test_request_approve_refuse_settle_and_a_cross_site_form_in_a_browser(
    served: Served, shots: Path
) -> None:
    chromium = system_tools.chromium()
    it = served
    past = ManualClock(it.clock.now_ms() - 3_600_000)
    await submit_runs(it.harness.approver_store, past, 1)
    stuck, _ = await started_execution(it.harness, past)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = await browser.new_page(viewport=VIEWPORT)
            page.set_default_timeout(15_000)
            ui = Ui(page, it, shots)
            await page.goto(ui.base + "/ui/dispatches")
            await ui.shot("signin")

            # A submitter requests an action; its preview is escaped, never run as markup.
            await ui.sign_in("sam")
            await ui.shot("overview")
            requested = await ui.request("t1", "<script>document.title='owned'</script>")
            await page.goto(ui.base + "/ui/approvals")
            assert "owned" not in await page.title()
            assert "<script>document.title" in (await page.text_content("main") or "")
            assert await page.locator("main button", has_text="Approve").count() == 0
            await ui.sign_out()

            # An approver approves it after the confirmation page; it becomes a dispatch.
            await ui.sign_in("alice")
            await page.goto(ui.base + "/ui/approvals")
            await ui.shot("approvals")
            await ui.decide(requested, "Approve")
            await ui.shot("confirm")
            await page.click("main button:has-text('Approve')")
            assert await page.text_content("h1") == "Approved"
            await page.click("main a[href^='/ui/dispatches/']")
            assert "pending" in (await page.text_content("main") or "")
            await ui.shot("dispatch")

            # The same principal requests and approves: the database refuses, the page says so.
            own = await ui.request("t2", "own request")
            before = await it.everything()
            await ui.decide(own, "Approve")
            await page.click("main button:has-text('Approve')")
            main = await page.text_content("main") or ""
            assert "self_approval_refused" in main, main
            assert "Traceback" not in main
            await ui.shot("refused")
            assert await it.everything() == before

            # A page of another origin posts the approval form, CSRF token and all: refused.
            await page.goto(ui.base + "/ui/approvals")
            csrf = await page.locator("input[name=csrf]").first.get_attribute("value")
            assert csrf
            target = f"{ui.base}/ui/approvals/{own}/approve"
            async with _attacker(target, {"csrf": csrf, "confirmed": "yes"}) as evil:
                await page.goto(evil)
                await page.click("button")
                await page.wait_for_url(target)
                refused = await page.text_content("main") or ""
                assert "cross_site_refused" in refused, refused
            assert await it.everything() == before
            await page.goto(ui.base + "/ui")  # the refusal page knows no session: back first
            await ui.sign_out()

            # An operator settles the recovery_required dispatch with a reason.
            await ui.sign_in("carol")
            await page.goto(ui.base + "/ui/recovery")
            row = page.locator("tr", has_text=stuck.dispatch_id)
            # No outcome is chosen for the operator: the form is not sent until one is.
            outcome = row.locator("select[name=as]")
            assert await outcome.input_value() == ""
            await row.locator("input[name=reason]").fill("checked_by_hand")
            unsettled = await it.everything()
            await row.locator("button", has_text="Settle…").click()
            assert await outcome.evaluate("s => !s.form.checkValidity()")
            assert await it.everything() == unsettled
            await outcome.select_option("failed")
            await ui.shot("recovery")
            await row.locator("button", has_text="Settle…").click()
            confirm = await page.text_content("main") or ""
            assert f"Settle {stuck.dispatch_id} as failed by hand?" in confirm, confirm
            await page.click("main button:has-text('Settle')")
            assert await page.text_content("h1") == "Settled"
            rows = await it.audit(stuck.dispatch_id)
            assert [(r["kind"], r["principal"]) for r in rows] == [
                ("recovery.manual_resolution", it.names["carol"]),
                ("api.resolve", it.names["carol"]),
            ]
            await page.goto(ui.base + "/ui/dispatches")
            await ui.shot("dispatches")
            await page.goto(f"{ui.base}/ui/audit?subject={stuck.dispatch_id}")
            await ui.shot("audit")
            await page.goto(ui.base + "/ui/session")
            await ui.shot("session")
        finally:
            await browser.close()
