"""Votes in a real browser (Debian's Chromium, headless, driven by Playwright) over a real
listener, real tokens and both databases: under a policy of 2 approvals from a group of 3,
the request's page shows the policy, the votes so far, who else may vote and the time to
expiry; the first approval leaves it pending at 1 of 2, a second vote by the same approver
(sent from a page opened before the first) is refused with the database's word, and the
second approver's vote approves it into a dispatch. A denial's reason shows on its page, and
the policies page is one click from the navigation. Screenshots as test_ui_browser.py."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright

from tests.e2e.test_ui_browser import SHOTS_ENV, VIEWPORT
from tests.support import stores, system_tools
from tests.support.api_writes import Served, serving
from tests.support.api_writes import submit as api_submit
from tests.support.policies import two_of_three
from tests.support.ui_client import UiClient, origin


@pytest.fixture(params=stores.DIALECTS)
async def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> AsyncIterator[Served]:
    async with serving(request.param, tmp_path_factory, tmp_path) as it:
        yield it


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get(SHOTS_ENV) or tmp_path / "shots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class Voter:
    """One signed-in browser context (its own cookies) of one principal."""

    def __init__(self, it: Served, page: Page, shots: Path) -> None:
        self.it, self.page, self.shots = it, page, shots
        self.base = origin(it)

    async def shot(self, name: str) -> None:
        if self.it.harness.dialect == "sqlite":
            await self.page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)

    async def text(self, selector: str) -> str:
        return (await self.page.text_content(selector) or "").strip()

    async def open(self, approval_id: str) -> None:
        await self.page.goto(f"{self.base}/ui/approvals/{approval_id}")
        assert await self.text("h1") == f"Approval {approval_id}"

    async def vote(self, button: str, reason: str) -> None:
        """Fill the reason of the `button` form (Approve…, Deny…), then confirm."""
        form = self.page.locator("main form", has_text=button)
        await form.locator("input[name=reason]").fill(reason)
        await form.locator("button").click()
        assert await self.text("h1") == "Confirm"
        await self.page.click(f"main button:has-text('{button.removesuffix('…')}')")


async def _signed_in(browser: Browser, it: Served, who: str, shots: Path) -> Voter:
    context = await browser.new_context(viewport=VIEWPORT)
    page = await context.new_page()
    page.set_default_timeout(15_000)
    voter = Voter(it, page, shots)
    await page.goto(voter.base + "/ui/signin")
    await page.fill("input[name=token]", it.secrets[who])
    await page.click("button:has-text('Sign in')")
    assert page.url == voter.base + "/ui"
    return voter


@pytest.mark.slow
async def test_two_of_three_vote_in_a_browser(served: Served, shots: Path) -> None:
    it = served
    chromium = system_tools.chromium()
    async with two_of_three(it) as group, async_playwright() as playwright:
        requested = (await api_submit(it, "sam", "v1"))["approval_request_id"]
        denied = (
            await api_submit(it, "sam", "v2", not_before="2099-01-01T02:00:00Z", window_for="2h")
        )["approval_request_id"]
        browser = await playwright.chromium.launch(executable_path=chromium, headless=True)
        try:
            bob = await _signed_in(browser, it, "bob", shots)
            await bob.page.click("nav a:has-text('Approvals')")
            await bob.page.click(f"main h2 a:has-text('{requested}')")
            assert await bob.text("#tally") == "0 of 2"
            assert group in await bob.text("main")
            assert "h" in await bob.text("main dl")  # the time to expiry, in hours
            may = await bob.text("#may-vote")
            assert all(it.names[w] in may for w in ("bob", "dan", "erin")), may
            # A second page of bob's, opened before his vote: it will send a second one.
            stale = await bob.page.context.new_page()
            await stale.goto(f"{bob.base}/ui/approvals/{requested}")

            await bob.vote("Approve…", "read the plan")
            assert await bob.text("h1") == "Voted"
            assert "it is pending" in await bob.text("p.notice")
            await bob.open(requested)
            assert (await bob.text("#status"), await bob.text("#tally")) == ("pending", "1 of 2")
            votes = await bob.text("#votes")
            assert it.names["bob"] in votes, votes
            assert "read the plan" in votes, votes
            may = await bob.text("#may-vote")
            assert it.names["bob"] not in may, may
            assert it.names["dan"] in may, may
            assert it.names["erin"] in may, may
            assert await bob.page.locator("main form", has_text="Approve…").count() == 0
            await bob.shot("approval-votes")

            before = await it.everything()
            again = Voter(it, stale, shots)
            await again.vote("Approve…", "once more")
            refused = await again.text("main")
            assert "already_voted" in refused, refused
            assert "voted already" in refused, refused
            assert "Traceback" not in refused
            assert await it.everything() == before
            await again.shot("approval-vote-refused")

            dan = await _signed_in(browser, it, "dan", shots)
            await dan.open(requested)
            await dan.vote("Approve…", "second pair of eyes")
            assert "it is approved" in await dan.text("p.notice")
            await dan.page.click("main a[href^='/ui/dispatches/']")
            assert "pending" in await dan.text("main")
            await dan.open(requested)
            assert await dan.text("#status") == "consumed"
            assert await dan.text("#tally") == "2 of 2"

            erin = await _signed_in(browser, it, "erin", shots)
            await erin.open(denied)
            # The requester's narrowing is what the approvers approve with the request.
            facts = await erin.text("main dl")
            assert "not before 2099-01-01T02:00:00.000Z, within 2h" in facts, facts
            assert "window" not in await bob.text("main dl")  # the first names none
            await erin.vote("Deny…", "the change window is closed")
            assert "it is rejected" in await erin.text("p.notice")
            await erin.open(denied)
            assert await erin.text("#status") == "rejected"
            votes = await erin.text("#votes")
            assert "deny" in votes, votes
            assert "the change window is closed" in votes, votes
            await erin.shot("approval-denied")

            await erin.page.click("nav a:has-text('Policies')")
            assert await erin.text("h1") == "Policies"
            row = await erin.text("main table")
            assert "two" in row, row
            assert group in row, row
            assert "run.create" in row, row
            assert "every target" in row, row
            await erin.shot("policies")
        finally:
            await browser.close()


async def test_the_vote_form_needs_an_approver_its_csrf_token_and_a_valid_vote(
    served: Served,
) -> None:
    """Without a browser: a viewer sees the request's page but no vote form, and its post is
    refused; a post without the session's CSRF token, or with a vote that is neither approve
    nor deny, is refused before the confirmation; none writes anything."""
    it = served
    plain = (await api_submit(it, "sam", "v0"))["approval_request_id"]  # before any policy
    async with two_of_three(it):
        async with UiClient(it) as viewer:
            await viewer.sign_in("vic")
            status, _, text = await viewer.get(f"/ui/approvals/{plain}")
            assert status == 200, text[:300]
            assert "None: one approval" in text
            assert "Any approver but the requester." in text
            status, _, text = await viewer.get("/ui/approvals/not%20an%20id")
            assert (status, "approval_not_found" in text) == (404, True)
        requested = (await api_submit(it, "sam", "v3"))["approval_request_id"]
        page = f"/ui/approvals/{requested}"
        before = await it.everything()
        async with UiClient(it) as viewer:
            await viewer.sign_in("vic")
            status, _, text = await viewer.get(page)
            assert status == 200, text[:300]
            assert "0 of 2" in text
            assert 'action="/ui/approvals/' not in text
            status, _, text = await viewer.post(
                page + "/vote", {"vote": "approve", "confirmed": "yes"}
            )
            assert (status, "forbidden" in text) == (403, True)
        async with UiClient(it) as bob:
            await bob.sign_in("bob")
            status, _, text = await bob.get(page)
            assert f'action="{page}/vote"' in text
            status, _, text = await bob.post(
                page + "/vote", {"vote": "approve", "confirmed": "yes"}, csrf=False
            )
            assert (status, "csrf_refused" in text) == (403, True)
            status, _, text = await bob.post(page + "/vote", {"vote": "abstain"})
            assert (status, "invalid_input" in text) == (400, True)
            status, _, text = await bob.post(page + "/vote", {"vote": "deny", "reason": "no"})
            assert (status, "Confirm" in text) == (200, True)
        assert await it.everything() == before
        votes = await it.harness.raw(
            f"SELECT count(*) AS n FROM {it.table('approval_votes')} "
            f"WHERE approval_request_id = '{requested}'"
        )
        assert votes[0]["n"] == 0
