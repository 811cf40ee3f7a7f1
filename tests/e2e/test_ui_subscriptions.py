"""Subscriptions shown read-only over a real listener, real tokens and both databases: a viewer
lists them by API and in a real browser (Debian's Chromium through Playwright), each URL cut to
its origin and no secret reference anywhere; the page and the answer name the command that
changes them, and the API has no route that writes one (the database would refuse its logins
on PostgreSQL: tests/security/test_hostile_notification_outbox.py)."""

from __future__ import annotations

from pathlib import Path

from playwright.async_api import async_playwright

from qinglong_dispatcher.domain import notifications as n
from tests.e2e.test_ui_browser import VIEWPORT, Ui, served, shots
from tests.support import system_tools
from tests.support.api_writes import Served

__all__ = ["served", "shots"]

SLACK = "https://hooks.slack.example/services/T000/B000/do-not-show"


async def _subscribe(it: Served) -> None:
    await it.admin.add_subscription(
        n.Subscription(
            name="chat",
            url=SLACK,
            secret_ref="env:QL_CHAT_SECRET_REF",
            kinds=("approval.requested", "approval.expiring"),
            project_id="proj-1",
            target_prefix="edge-",
            format="slack",
        )
    )
    await it.admin.add_subscription(
        n.Subscription(name="pager", url="http://127.0.0.1:8123/hook", secret_ref="env:QL_P")
    )


async def test_a_viewer_sees_the_subscriptions_read_only(served: Served, shots: Path) -> None:
    it = served
    await _subscribe(it)
    status, _, body = await it.call("GET", "/subscriptions", "vic")
    assert status == 200, body
    assert body["read_only"] is True
    assert "notify add" in body["changed_by"]
    assert body["subscriptions"] == [
        {
            "name": "chat",
            "destination": "https://hooks.slack.example",
            "kinds": ["approval.requested", "approval.expiring"],
            "action_type": None,
            "project_id": "proj-1",
            "target_prefix": "edge-",
            "format": "slack",
        },
        {
            "name": "pager",
            "destination": "http://127.0.0.1:8123",
            "kinds": list(n.DEFAULT_KINDS),
            "action_type": None,
            "project_id": None,
            "target_prefix": None,
            "format": "raw",
        },
    ]
    text = str(body)
    assert "do-not-show" not in text
    assert "QL_CHAT_SECRET_REF" not in text
    assert (await it.call("GET", "/subscriptions", None))[0] == 401
    for method in ("POST", "DELETE"):
        assert (await it.call(method, "/subscriptions", "carol", {}))[0] == 405

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=system_tools.chromium(), headless=True
        )
        try:
            context = await browser.new_context(viewport=VIEWPORT)
            page = await context.new_page()
            page.set_default_timeout(15_000)
            vic = Ui(page, it, shots)
            await vic.sign_in("vic")
            await page.click("nav a:has-text('Notifications')")
            assert page.url == vic.base + "/ui/subscriptions"
            assert await page.text_content("h1") == "Notifications"
            rows = await page.locator("table tbody tr").all_text_contents()
            assert len(rows) == 2, rows
            for shown in ("chat", "https://hooks.slack.example", "edge-", "slack"):
                assert shown in rows[0], rows
            assert "every kind but dispatch.succeeded" in rows[1], rows
            note = await page.text_content("#read-only") or ""
            assert "notify add|remove|test" in note, note
            html = await page.content()
            assert "do-not-show" not in html
            assert "QL_CHAT_SECRET_REF" not in html
            assert await page.locator("form").count() == 1  # sign out only: nothing to submit
            await vic.shot("subscriptions")
        finally:
            await browser.close()
