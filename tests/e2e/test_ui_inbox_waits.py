"""Held targets and frozen dispatches in the operator UI's inbox, over a real listener, real
tokens and both databases, without a browser (the inbox's browser test covers its layout):
an operator's inbox shows the held target (its holder, how many wait) and the frozen dispatch
(`frozen_by F` until when, its reason) with a lift link, as its dispatch page does; the
filter form keeps a target prefix and a least age beside the other filters, and a bad value
is the page's 400. The lift page names the freeze and asks a reason, then a confirmation;
only then is the freeze lifted for that dispatch, under the operator's name. An approver and
a viewer get no lift link, and a viewer's lift is refused and writes nothing."""

from __future__ import annotations

import html

from tests.e2e.test_api_inbox_waits import held_and_frozen
from tests.e2e.test_ui_browser import served
from tests.support.api_writes import Served
from tests.support.ui_client import UiClient

__all__ = ["served"]


async def _lifts(it: Served) -> list[dict[str, object]]:
    return await it.harness.raw(f"SELECT dispatch_id, freeze_id FROM {it.table('freeze_lifts')}")


async def test_an_operator_sees_the_waits_and_lifts_a_freeze_after_confirming(
    served: Served,
) -> None:
    it = served
    holder, _waiting, frozen, freeze_id = await held_and_frozen(it)
    lift = f"/ui/dispatches/{frozen}/lift-freeze"
    async with UiClient(it) as ui:
        await ui.sign_in("carol")
        status, _, text = await ui.get("/ui/inbox")
        assert status == 200, text
        shown = html.unescape(text)
        assert "target held" in shown
        assert f"target router-1 held by {holder} (recovery_required); 1 waiting" in shown
        assert "1 waiting on it" in shown
        assert f"frozen_by {freeze_id}: network change window closed" in shown
        assert f"frozen_by {freeze_id} until" in shown
        assert f'href="{lift}"' in text
        assert 'name="target"' in text
        assert 'name="older_than"' in text

        _, _, text = await ui.get("/ui/inbox?target=switch-&older_than=90m&sort=newest")
        assert 'name="target" value="switch-"' in text
        assert 'name="older_than" value="90m"' in text
        assert "Nothing waits on you." in text  # the freeze began a minute ago
        _, _, text = await ui.get("/ui/inbox?target=switch-")
        assert frozen in text
        assert holder not in text
        _, _, text = await ui.get("/ui/inbox?older_than=30m")
        assert holder in text
        assert frozen not in text
        status, _, text = await ui.get("/ui/inbox?older_than=soon")
        assert status == 400
        assert "older_than" in text
        assert "Traceback" not in text

        _, _, text = await ui.get(f"/ui/dispatches/{frozen}")  # the dispatch page links it too
        assert f'href="{lift}"' in text
        status, _, text = await ui.get(lift)
        assert status == 200, text
        assert "network change window closed" in html.unescape(text)
        assert 'name="reason"' in text
        before = await _lifts(it)
        status, _, text = await ui.post(lift, {"reason": "the fix for the outage"})
        assert (status, "<h1>Confirm</h1>" in text) == (200, True), text
        assert await _lifts(it) == before  # nothing before the confirmation
        status, _, text = await ui.post(
            lift, {"reason": "", "confirmed": "yes"}
        )  # an empty reason: refused, nothing written
        assert status == 400, text
        assert await _lifts(it) == before
        status, _, text = await ui.post(
            lift, {"reason": "the fix for the outage", "confirmed": "yes"}
        )
        assert status == 200, text
        assert f"Lifted freeze {freeze_id} for {frozen}." in text
        assert await _lifts(it) == [{"dispatch_id": frozen, "freeze_id": freeze_id}]
        audit = [(r["kind"], r["principal"]) for r in await it.audit(frozen)]
        assert ("approval.freeze_lifted", it.names["carol"]) in audit
        _, _, text = await ui.get("/ui/inbox")
        assert lift not in text
        assert frozen not in text

    for who in ("bob", "vic"):
        async with UiClient(it) as ui:
            await ui.sign_in(who)
            for page in ("/ui/inbox", f"/ui/dispatches/{frozen}"):
                _, _, text = await ui.get(page)
                assert "lift-freeze" not in text
            status, _, _ = await ui.get(lift)
            assert status == 403
            before = await _lifts(it)
            status, _, text = await ui.post(lift, {"reason": "r", "confirmed": "yes"})
            assert status == 403, text
            assert await _lifts(it) == before
