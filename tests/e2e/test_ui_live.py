"""Live refresh in a real browser (Debian's Chromium through Playwright) over a real listener,
real tokens and both databases: the approvals list and the inbox show a request made
elsewhere (through the API) without a reload, from the event stream; a page whose form is
being edited keeps the edit and only says that news waits; the stream needs a session."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import async_playwright

from qinglong_dispatcher.web import feed
from tests.e2e.test_ui_browser import VIEWPORT, Ui, served, shots
from tests.support import system_tools
from tests.support.api_writes import Served
from tests.support.api_writes import submit as api_submit
from tests.support.ui_client import UiClient

__all__ = ["served", "shots"]  # the fixtures of the browser test, shared


@contextlib.asynccontextmanager
async def _feeding(it: Served) -> AsyncIterator[None]:
    """The feed the daemon runs beside its listener (`ApiServer.serve`): it reads new activity
    from the database while anyone listens and publishes it to the hub."""
    task = asyncio.create_task(feed.Feed(it.ctx.store, it.ctx.clock, it.ctx.hub).run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.mark.slow
async def test_a_list_page_shows_new_requests_without_a_reload(served: Served, shots: Path) -> None:
    chromium = system_tools.chromium()
    it = served
    first = (await api_submit(it, "sam", "live-1"))["approval_request_id"]
    async with _feeding(it), async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium, headless=True)
        try:
            context = await browser.new_context(viewport=VIEWPORT)
            page = await context.new_page()
            page.set_default_timeout(15_000)
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            ui = Ui(page, it, shots)
            await ui.sign_in("alice")
            await page.goto(ui.base + "/ui/approvals")
            assert first in (await page.text_content("main") or "")
            await page.wait_for_timeout(500)  # the stream connects
            second = (await api_submit(it, "sam", "live-2"))["approval_request_id"]
            await page.wait_for_selector(f"text={second}")  # no reload: the page refreshed
            assert page.url == ui.base + "/ui/approvals"

            # An edit in progress is kept: the page only says that news waits.
            await page.goto(ui.base + "/ui/inbox")
            await page.fill("input[name=q]", "typing")
            await page.wait_for_timeout(500)
            third = (await api_submit(it, "sam", "live-3"))["approval_request_id"]
            await page.wait_for_selector("#live:not([hidden])")
            assert "New activity" in (await page.text_content("#live") or "")
            assert await page.input_value("input[name=q]") == "typing"
            assert third not in (await page.text_content("main") or "")
            assert errors == []  # the policy lets the one script and its stream run
            await context.close()
        finally:
            await browser.close()


async def test_the_stream_needs_a_session(served: Served) -> None:
    async with UiClient(served) as ui:
        status, headers, _ = await ui.get("/ui/events")
        assert status in (302, 303)
        assert headers["Location"].startswith("/ui/signin")
