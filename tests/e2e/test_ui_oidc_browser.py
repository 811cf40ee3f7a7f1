"""OIDC sign-in in a real browser (Debian's Chromium, headless, driven by Playwright) against a
real provider on loopback, over a real listener and both databases: under a policy of 2
approvals from a group of 3, people who sign in with the provider request and vote as their
principals, the database refuses the requester's own vote, two others approve it, and signing
out ends the session here and at the provider."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright

from qinglong_dispatcher.web.oidc import flow, mapping
from tests.e2e.test_ui_browser import VIEWPORT, Ui
from tests.support import oidc_provider, stores, system_tools
from tests.support.api_writes import Served, serving
from tests.support.policies import two_of_three
from tests.support.ui_client import origin


@pytest.fixture(params=stores.DIALECTS)
async def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> AsyncIterator[Served]:
    async with serving(request.param, tmp_path_factory, tmp_path) as it:
        yield it


def _configured(front: oidc_provider.Front, it: Served, group: str) -> flow.Oidc:
    text = (
        f'issuer = "{front.base}"\nclient_id = "qinglong-ui"\n'
        f'redirect_url = "{origin(it)}/ui/oidc/callback"\n'
        'principal_claim = "sub"\n[roles]\n"approvers" = "approver"\n'
        f'[approver_groups]\n"release-managers" = ["{group}"]\n'
    )
    return flow.Oidc(mapping.parse_file(text, secret="a-client-secret"))


async def _signed_in(browser: Browser, it: Served, sub: str) -> Page:
    """A browser context of its own, signed in at the provider as `sub`."""
    page = await (await browser.new_context(viewport=VIEWPORT)).new_page()
    page.set_default_timeout(15_000)
    base = origin(it)
    await page.goto(base + "/ui/approvals")
    assert page.url.startswith(base + "/ui/signin")
    await page.click("a:has-text('Sign in with your identity provider')")
    await page.fill("input[name=sub]", sub)
    await page.click("button:has-text('Authorize')")
    await page.wait_for_url(base + "/ui/approvals")
    assert sub in (await page.text_content("header") or "")
    return page


async def _vote(page: Page, base: str, approval_id: str) -> str:
    await page.goto(f"{base}/ui/approvals/{approval_id}")
    form = page.locator("main form", has_text="Approve…")
    await form.locator("input[name=reason]").fill("read the plan")
    await form.locator("button").click()
    await page.click("main button:has-text('Approve')")
    return (await page.text_content("main") or "").strip()


@pytest.mark.slow
async def test_oidc_people_request_and_vote_and_the_database_keeps_duties_apart(
    served: Served, tmp_path: Path
) -> None:
    it = served
    chromium = system_tools.chromium()
    async with (
        two_of_three(it) as group,
        oidc_provider.running() as front,
        async_playwright() as playwright,
    ):
        it.ctx.oidc = _configured(front, it, group)
        for who in ("bob", "dan", "erin"):
            await oidc_provider.set_user(front, it.names[who], ["approvers", "release-managers"])
        browser = await playwright.chromium.launch(executable_path=chromium, headless=True)
        try:
            base = origin(it)
            bob = await _signed_in(browser, it, it.names["bob"])
            requested = await Ui(bob, it, tmp_path).request("o1", "signed in by OIDC")
            before = await it.everything()
            refused = await _vote(bob, base, requested)
            assert "self_approval_refused" in refused, refused
            assert "Traceback" not in refused
            assert await it.everything() == before

            dan = await _signed_in(browser, it, it.names["dan"])
            assert "it is pending" in await _vote(dan, base, requested)
            erin = await _signed_in(browser, it, it.names["erin"])
            assert "it is approved" in await _vote(erin, base, requested)
            voters = await it.harness.raw(
                f"SELECT principal FROM {it.table('approval_votes')} "
                f"WHERE approval_request_id = '{requested}' ORDER BY principal"
            )
            assert [v["principal"] for v in voters] == sorted([it.names["dan"], it.names["erin"]])

            # Sign-out ends the session here, then goes to the provider's logout.
            await erin.click("header button:has-text('Sign out')")
            await erin.wait_for_url(front.upstream + "/oauth2/end_session*")
            await erin.goto(base + "/ui")
            assert erin.url.startswith(base + "/ui/signin")
        finally:
            await browser.close()
