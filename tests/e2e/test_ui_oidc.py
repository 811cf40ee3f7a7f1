"""OIDC sign-in of the operator UI against a real provider on loopback (`oidc-provider-mock`
behind a front that can misbehave, tests/support/oidc_provider.py), over a real listener and a
real database of each dialect: an enrolled person signs in and acts as their token's principal;
every hostile or broken answer is refused with a page naming why, an `api.auth_failed` audit
row with that reason, and no session."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from urllib import parse

import pytest

from qinglong_dispatcher.web.oidc import flow, mapping
from tests.support import oidc_provider, stores
from tests.support.api_writes import Served, serving
from tests.support.ui_client import UiClient, origin

MAPPING = """
principal_claim = "sub"
groups_claim = "groups"
[roles]
"requesters" = "submitter"
"approvers" = "approver"
"ops" = "operator"
"readers" = "viewer"
[approver_groups]
"release-managers" = ["release_oidc"]
"""


@pytest.fixture(params=stores.DIALECTS)
async def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> AsyncIterator[Served]:
    async with serving(request.param, tmp_path_factory, tmp_path) as it:
        yield it


@pytest.fixture
async def front(served: Served) -> AsyncIterator[oidc_provider.Front]:
    async with oidc_provider.running() as found:
        served.ctx.oidc = flow.Oidc(configured(found, served))
        yield found


def configured(front: oidc_provider.Front, it: Served) -> mapping.OidcFile:
    return mapping.parse_file(
        f'issuer = "{front.base}"\nclient_id = "qinglong-ui"\n'
        f'redirect_url = "{origin(it)}/ui/oidc/callback"\n' + MAPPING,
        secret="a-client-secret",
    )


async def to_provider_and_back(ui: UiClient, sub: str, *, deny: bool = False) -> str:
    """Begin a sign-in, sign in at the provider as `sub` (or deny it there): the callback's
    path and query."""
    status, headers, _ = await ui.get("/ui/oidc/start?next=/ui/approvals")
    assert status == 303
    authorize = headers["Location"]
    assert "code_challenge_method=S256" in authorize
    assert "nonce=" in authorize
    sent = {"action": "deny"} if deny else {"sub": sub}
    async with ui.session.post(authorize, data=sent, allow_redirects=False) as answer:
        assert answer.status == 302, await answer.text()
        back = parse.urlsplit(answer.headers["Location"])
    assert back.path == "/ui/oidc/callback"
    return f"{back.path}?{back.query}"


async def refusals(it: Served) -> list[str]:
    rows = await it.harness.raw(
        f"SELECT detail_code FROM {it.table('security_audit_events')} "
        "WHERE kind = 'api.auth_failed' ORDER BY event_id"
    )
    return [str(r["detail_code"]) for r in rows]


async def sessions(it: Served) -> int:
    return int(await it.harness.scalar(f"SELECT count(*) FROM {it.table('ui_sessions')}"))


async def refused(it: Served, ui: UiClient, callback: str, reason: str) -> None:
    before, was = await sessions(it), (await ui.get("/ui"))[0]
    status, _, page = await ui.get(callback)
    assert status == 403, page[:400]
    assert "Sign-in refused" in page, page[:600]
    assert f"<code>{reason}</code>" in page
    assert "Traceback" not in page
    assert (await refusals(it))[-1] == reason
    assert await sessions(it) == before
    assert (await ui.get("/ui"))[0] == was  # signed out still (or in, as before)


async def test_an_enrolled_person_signs_in_and_acts_as_the_tokens_principal(
    served: Served, front: oidc_provider.Front
) -> None:
    sam = served.names["sam"]
    await oidc_provider.set_user(front, sam, ["requesters", "unrelated"])
    async with UiClient(served) as ui:
        status, _, page = await ui.get(await to_provider_and_back(ui, sam))
        assert status == 200
        assert 'url=/ui/approvals"' in page
        status, _, page = await ui.get("/ui/session")
        assert status == 200
        assert sam in page
        assert served.token_ids["sam"] in page
        assert "submitter" in page
        # The principal writes as itself: the API's audit row names it and its token.
        status, _headers, page = await ui.post(
            "/ui/signout", {}, headers={"Sec-Fetch-Site": "same-origin"}
        )
        assert status == 200
        assert "/oauth2/end_session" in page
        assert (await ui.get("/ui"))[0] == 303


async def test_forged_audience_expired_and_nonce_are_refused(
    served: Served, front: oidc_provider.Front
) -> None:
    alice = served.names["alice"]
    await oidc_provider.set_user(front, alice, ["approvers"])
    async with UiClient(served) as ui:
        for mode, reason in (
            ("forged", "oidc_bad_signature"),
            ("audience", "oidc_wrong_audience"),
            ("expired", "oidc_expired"),
            ("no_nonce", "oidc_nonce_mismatch"),
            ("other_nonce", "oidc_nonce_mismatch"),
        ):
            front.mode = mode
            await refused(served, ui, await to_provider_and_back(ui, alice), reason)
        front.mode = "honest"
        assert (await ui.get(await to_provider_and_back(ui, alice)))[0] == 200


def _code_under(callback: str, fresh: str) -> str:
    """`callback`'s code under `fresh`'s state: a code carried into another sign-in."""
    code = parse.parse_qs(parse.urlsplit(callback).query)["code"][0]
    state = parse.parse_qs(parse.urlsplit(fresh).query)["state"][0]
    return "/ui/oidc/callback?" + parse.urlencode({"code": code, "state": state})


async def test_a_replayed_state_and_a_replayed_code_are_refused(
    served: Served, front: oidc_provider.Front
) -> None:
    alice = served.names["alice"]
    await oidc_provider.set_user(front, alice, ["approvers"])
    async with UiClient(served) as ui, UiClient(served) as thief:
        # Another browser brings this browser's callback: refused, and its state is spent.
        stolen = await to_provider_and_back(ui, alice)
        await to_provider_and_back(thief, alice)  # the thief has a pending sign-in of its own
        await refused(served, thief, stolen, "oidc_state_foreign")
        await refused(served, ui, stolen, "oidc_state_unknown")
        # The unspent code carried into a fresh sign-in: not that sign-in's nonce.
        await refused(
            served, ui, _code_under(stolen, await to_provider_and_back(ui, alice)),
            "oidc_nonce_mismatch",
        )  # fmt: skip
        # A code already redeemed, under a fresh state: the provider refuses it.
        used = await to_provider_and_back(ui, alice)
        assert (await ui.get(used))[0] == 200
        redeemed = front.tokens_redeemed
        replay = _code_under(used, await to_provider_and_back(ui, alice))
        await refused(served, ui, replay, "oidc_code_refused")
        assert front.tokens_redeemed == redeemed


async def test_no_mapped_group_no_enrolment_and_other_role_or_groups_are_refused(
    served: Served, front: oidc_provider.Front
) -> None:
    alice, vic = served.names["alice"], served.names["vic"]
    async with UiClient(served) as ui:
        await refused(
            served, ui, await to_provider_and_back(ui, alice, deny=True), "oidc_provider_error"
        )
        await oidc_provider.set_user(front, alice, ["unrelated"])
        await refused(served, ui, await to_provider_and_back(ui, alice), "oidc_no_mapped_group")
        await oidc_provider.set_user(front, "stranger", ["ops"])
        await refused(served, ui, await to_provider_and_back(ui, "stranger"), "oidc_not_enrolled")
        await oidc_provider.set_user(front, vic, ["ops"])  # enrolled as a viewer
        await refused(served, ui, await to_provider_and_back(ui, vic), "oidc_role_mismatch")
        await oidc_provider.set_user(front, alice, ["approvers", "release-managers"])
        await refused(served, ui, await to_provider_and_back(ui, alice), "oidc_groups_mismatch")
        await oidc_provider.set_user(front, "Not A Name", ["ops"])
        await refused(
            served, ui, await to_provider_and_back(ui, "Not A Name"), "oidc_bad_principal"
        )


async def test_revoking_the_token_ends_the_oidc_session(
    served: Served, front: oidc_provider.Front
) -> None:
    bob = served.names["bob"]
    await oidc_provider.set_user(front, bob, ["approvers"])
    async with UiClient(served) as ui:
        assert (await ui.get(await to_provider_and_back(ui, bob)))[0] == 200
        assert (await ui.get("/ui"))[0] == 200
        await served.admin.revoke_token(served.token_ids["bob"])
        assert (await ui.get("/ui"))[0] == 303


async def test_an_address_that_keeps_failing_is_slowed_like_a_token_sign_in(
    served: Served, front: oidc_provider.Front
) -> None:
    async with UiClient(served) as ui:
        for _ in range(10):
            assert (await ui.get("/ui/oidc/callback?state=guess&code=guess"))[0] == 403
        assert await refusals(served) == ["oidc_state_unknown"] * 10
        for path in ("/ui/oidc/start", "/ui/oidc/callback?state=guess&code=guess"):
            status, headers, page = await ui.get(path)
            assert status == 429, page[:300]
            assert int(headers["Retry-After"]) > 0
        assert len(await refusals(served)) == 10
