"""A subscription tested from the API and the operator UI over a real listener, real tokens and
both databases, against the real receiver that verifies every signature with the
`standardwebhooks` package: an operator's test posts one signed sample, exactly as `notify
test` does, and reports the answer; it writes nothing (every notification table and the audit
log keep their rows); a destination down or a secret this process cannot read is a result, not
an error; an unknown name is 404, a viewer 403; the answer never carries the secret, its
reference or the URL's path. In Debian's Chromium (Playwright) the "Send a test" button asks
first, then shows what the destination answered; a form without the session's CSRF token sends
nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import async_playwright

from qinglong_dispatcher.domain import notifications as n
from tests.e2e.test_ui_browser import VIEWPORT, Ui, served, shots
from tests.support import system_tools, webhook_receiver
from tests.support.api_writes import Served, assert_problem
from tests.support.ui_client import UiClient

__all__ = ["served", "shots"]

NOTIFICATION_TABLES = (
    "notification_events",
    "notification_subscriptions",
    "notification_fanouts",
    "notification_deliveries",
    "notification_attempts",
    "notification_deliverer",
)


@pytest.fixture
async def receiver(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[webhook_receiver.Receiver]:
    async with webhook_receiver.serving() as r:
        monkeypatch.setenv("QL_TEST_WHSEC", r.secret)
        monkeypatch.delenv("QL_NOBODY_SET_THIS", raising=False)
        yield r


async def _subscribe(it: Served, r: webhook_receiver.Receiver) -> None:
    for name, url, ref in (
        ("ops", r.url, "env:QL_TEST_WHSEC"),
        ("down", "http://127.0.0.1:9/nobody-listens", "env:QL_TEST_WHSEC"),
        ("unsigned", r.url, "env:QL_NOBODY_SET_THIS"),
    ):
        await it.admin.add_subscription(n.Subscription(name=name, url=url, secret_ref=ref))


async def _rows(it: Served) -> dict[str, int]:
    """The row count of every notification table."""
    counts: dict[str, int] = {}
    for table in NOTIFICATION_TABLES:
        found = await it.harness.raw(f"SELECT count(*) AS n FROM {it.table(table)}")
        counts[table] = int(found[0]["n"])
    return counts


async def test_an_operator_tests_a_subscription_and_nothing_is_written(
    served: Served, receiver: webhook_receiver.Receiver
) -> None:
    it = served
    await _subscribe(it, receiver)
    before, others = await _rows(it), await it.everything()

    status, _, body = await it.call("POST", "/subscriptions/ops/test", "carol")
    assert status == 200, body
    assert body["delivered"] is True
    assert (body["status"], body["error"]) == (204, None)
    assert body["name"] == "ops"
    assert body["destination"] == receiver.url.removesuffix("/hook")
    assert isinstance(body["latency_ms"], int)
    assert body["latency_ms"] >= 0
    # The receiver verified the signature (standardwebhooks) before accepting it.
    assert receiver.refused == []
    assert receiver.ids == [body["webhook_id"]]
    document = receiver.accepted[0]["body"]
    assert document["type"] == "approval.requested"
    assert document["data"]["sample"] is True
    assert document["data"]["subscription"] == "ops"
    text = str(body)
    for secret in ("/hook", receiver.secret, "QL_TEST_WHSEC", "env:"):
        assert secret not in text

    down = await it.call("POST", "/subscriptions/down/test", "carol")
    assert down[0] == 200, down[2]
    assert (down[2]["delivered"], down[2]["status"]) == (False, None)
    assert down[2]["error"] == "connect_failed"
    assert "nobody-listens" not in str(down[2])
    unsigned = await it.call("POST", "/subscriptions/unsigned/test", "carol")
    assert unsigned[0] == 200, unsigned[2]
    assert (unsigned[2]["delivered"], unsigned[2]["error"]) == (False, "secret_unavailable")
    assert "QL_NOBODY_SET_THIS" not in str(unsigned[2])

    assert_problem(await it.call("POST", "/subscriptions/nobody/test", "carol"), 404,
                   "subscription_not_found")  # fmt: skip
    assert_problem(await it.call("POST", "/subscriptions/Not%20a%20name/test", "carol"), 404,
                   "subscription_not_found")  # fmt: skip
    for who in ("vic", "sam", "alice"):
        assert_problem(await it.call("POST", "/subscriptions/ops/test", who), 403, "forbidden")
    assert (await it.call("POST", "/subscriptions/ops/test", None))[0] == 401
    assert_problem(
        await it.call("POST", "/subscriptions/ops/test", "carol", {"url": "http://x/"}),
        400,
        "invalid_input",
    )
    assert len(receiver.accepted) == 1
    assert await _rows(it) == before
    assert await it.everything() == others  # no audit row either


async def test_the_send_a_test_button_asks_then_shows_the_answer(
    served: Served, receiver: webhook_receiver.Receiver, shots: Path
) -> None:
    it = served
    await _subscribe(it, receiver)
    before = await _rows(it)
    async with UiClient(it) as forged:
        await forged.sign_in("carol")
        refused = await forged.post("/ui/subscriptions/ops/test", {"confirmed": "yes"}, csrf=False)
        assert refused[0] == 403
        assert "csrf_refused" in refused[2]
    async with UiClient(it) as viewer:
        await viewer.sign_in("vic")
        assert "Send a test" not in (await viewer.get("/ui/subscriptions"))[2]
        status, _, page_text = await viewer.post("/ui/subscriptions/ops/test", {"confirmed": "yes"})
        assert status == 403
        assert "forbidden" in page_text
    assert receiver.answered == 0

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=system_tools.chromium(), headless=True
        )
        try:
            context = await browser.new_context(viewport=VIEWPORT)
            page = await context.new_page()
            page.set_default_timeout(15_000)
            carol = Ui(page, it, shots)
            await carol.sign_in("carol")
            await page.click("nav a:has-text('Notifications')")
            row = page.locator("table tbody tr", has_text="ops")
            await row.locator("button", has_text="Send a test").click()
            assert await page.text_content("h1") == "Confirm"
            question = await page.text_content("main") or ""
            assert "Send a signed sample to subscription ops" in question, question
            assert receiver.answered == 0  # nothing is sent before it is confirmed
            await page.click("button:has-text('Send the test')")
            assert await page.text_content("h1") == "Test sent"
            shown = await page.text_content("main") or ""
            assert "Delivered: ops's destination answered 204." in shown, shown
            assert len(receiver.accepted) == 1
            assert receiver.ids[0] in shown
            await carol.shot("subscription-test")
            await page.click("a:has-text('Back to notifications')")
            down = page.locator("table tbody tr", has_text="down")
            await down.locator("button", has_text="Send a test").click()
            await page.click("button:has-text('Send the test')")
            shown = await page.text_content("main") or ""
            assert "Not delivered: connect_failed" in shown, shown
            html = await page.content()
            assert "nobody-listens" not in html
            assert receiver.secret not in html
        finally:
            await browser.close()
    assert receiver.refused == []
    assert await _rows(it) == before
