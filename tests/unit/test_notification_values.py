"""The notification values (domain/notifications.py): matching, the envelope, the signature a
Standard Webhooks verifier accepts, the Slack message and the backoff's bounds."""

from __future__ import annotations

import dataclasses
import json
import re
import time

import pytest
from standardwebhooks import Webhook

from qinglong_dispatcher.domain import notifications as n

EVENT = n.Event(
    id=42,
    kind="dispatch.failed",
    subject_id="d-1",
    project_id="p1",
    action_type="run.create",
    at_ms=1_765_029_768_123,
    payload={"dispatchId": "d-1", "resultCode": "boom"},
)


def _sub(**kwargs: object) -> n.Subscription:
    fields: dict[str, object] = {"name": "ops", "url": "https://h/x", "secret_ref": "env:S"}
    return n.Subscription(**{**fields, **kwargs}).check()  # type: ignore[arg-type]


def test_a_subscription_matches_by_kind_action_and_project() -> None:
    assert _sub().matches(EVENT)
    assert _sub(action_type="run.create", project_id="p1").matches(EVENT)
    assert not _sub(action_type="tool.invoke").matches(EVENT)
    assert not _sub(project_id="p2").matches(EVENT)
    assert not _sub(kinds=("approval.requested",)).matches(EVENT)
    assert "dispatch.succeeded" not in n.DEFAULT_KINDS
    assert set(n.DEFAULT_KINDS) | {"dispatch.succeeded"} == set(n.KINDS)
    # What waits on a person is heard without asking.
    assert {"dispatch.recovery_required", "target.held"} <= set(n.DEFAULT_KINDS)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "Ops"}, "a name"),
        ({"url": "ftp://h"}, "http:// or https://"),
        ({"secret_ref": "whsec_x"}, "secret reference"),
        ({"kinds": ("approval.nope",)}, "unknown kind approval.nope"),
        ({"kinds": ()}, "unknown kind (none)"),
    ],
)
def test_a_subscription_out_of_shape_is_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(n.SubscriptionInvalid, match=re.escape(message)):
        _sub(**fields)


def test_the_body_is_a_cloudevents_envelope_a_verifier_accepts() -> None:
    secret = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = n.body(EVENT, "raw")
    key = n.webhook_key(secret.encode())
    headers = n.signed_headers(key, EVENT.message_id, 1_765_029_768, body)
    document = json.loads(body)
    assert document == {
        "specversion": "1.0",
        "id": "qle_42",
        "source": "qinglong-dispatcher",
        "type": "dispatch.failed",
        "subject": "d-1",
        "time": "2025-12-06T14:02:48.123Z",
        "datacontenttype": "application/json",
        "data": {
            "projectId": "p1",
            "actionType": "run.create",
            "dispatchId": "d-1",
            "resultCode": "boom",
        },
    }
    assert headers["webhook-id"] == "qle_42"
    hook = Webhook(secret)
    # The verifier's tolerance is five minutes of its own clock: sign with the current time.
    now = int(time.time())
    fresh = n.signed_headers(key, "qle_42", now, body)
    assert hook.verify(body, fresh) == document


def test_a_secret_not_whsec_is_refused_naming_no_value() -> None:
    for bad in (b"abc", b"whsec_", b"whsec_!!!"):
        with pytest.raises(n.SubscriptionInvalid) as refused:
            n.webhook_key(bad)
        assert "!!!" not in str(refused.value)


def test_the_slack_message_links_the_page_when_the_ui_is_known() -> None:
    assert json.loads(n.body(EVENT, "slack", "https://ql.example/")) == {
        "text": "dispatch.failed: run.create in p1 (d-1) <https://ql.example/ui/dispatches/d-1|open>"
    }
    assert "<" not in json.loads(n.body(EVENT, "slack"))["text"]
    held = dataclasses.replace(EVENT, kind="target.held")
    assert "/ui/dispatches/d-1|" in json.loads(n.body(held, "slack", "https://ql.example"))["text"]


@pytest.mark.parametrize("kind", ["approval.requested", "approval.expiring"])
def test_a_request_waiting_on_a_vote_carries_the_approve_link(kind: str) -> None:
    waiting = dataclasses.replace(EVENT, kind=kind, subject_id="a-1/x")
    text = json.loads(n.body(waiting, "slack", "https://ql.example/ops"))["text"]
    assert text.endswith(" <https://ql.example/ops/ui/approvals/a-1%2Fx|approve or reject>")
    decided = dataclasses.replace(waiting, kind="approval.approved")
    assert "|open>" in json.loads(n.body(decided, "slack", "https://ql.example"))["text"]
    # The raw format is unchanged by the address: the envelope carries no link.
    assert n.body(waiting, "raw", "https://ql.example") == n.body(waiting, "raw")


def test_the_backoff_doubles_up_to_its_cap_and_jitter_only_shortens_it() -> None:
    waits = [n.backoff_ms(a, base_ms=1000, cap_ms=300_000, jitter=1.0) for a in range(1, 12)]
    assert waits[:4] == [1000, 2000, 4000, 8000]
    assert waits[-1] == 300_000
    assert n.backoff_ms(3, base_ms=1000, cap_ms=300_000, jitter=0.0) == 2000  # at least half
    assert n.backoff_ms(10_000, base_ms=1000, cap_ms=300_000, jitter=2.0) == 300_000
