"""`http.request` configuration and plans: receivers parse strictly (one line naming receiver and
field), plans are exact and survive canonical JSON, and the request is built exactly."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from qinglong_dispatcher.actions.http_request import plan as plan_model
from qinglong_dispatcher.actions.http_request import receivers
from qinglong_dispatcher.actions.http_request import request as http
from qinglong_dispatcher.config.settings import load_settings
from qinglong_dispatcher.domain import digests, errors, plans
from tests.unit import test_http_request_send as served

MODELS = {plan_model.ACTION_TYPE: plan_model.HttpRequestPlan}


def parsed(base_url: str = "https://hooks.example:8443/api/", **extra: Any) -> receivers.Receiver:
    found = served.receiver_set(base_url, **extra).get("hooks")
    assert found is not None
    return found


def test_a_receiver_file_loads_with_its_defaults(tmp_path: Path) -> None:
    path = tmp_path / "receivers.toml"
    path.write_text(
        '[receivers.billing]\nbase_url = "https://billing.example"\n'
        'methods = ["POST"]\npath_prefixes = ["/v1/charges"]\n'
    )
    found = receivers.load(path).get("billing")
    assert found is not None
    assert (found.base_url, found.max_response_bytes, found.concurrency) == (
        "https://billing.example",
        1024 * 1024,
        4,
    )
    assert found.failed_statuses == {400, 401, 403, 422}
    assert found.idempotency.lookup == "none"


@pytest.mark.parametrize("profile", ["edge", "cluster"])
def test_a_receiver_that_names_no_timeouts_fits_the_profiles_execute_timeout(
    tmp_path: Path, profile: str
) -> None:
    path = tmp_path / "receivers.toml"
    path.write_text(
        '[receivers.hooks]\nbase_url = "https://hooks.example"\nmethods = ["POST"]\n'
        'path_prefixes = ["/v1"]\n'
    )
    url = "sqlite:///q.db" if profile == "edge" else "postgresql://runtime@db.example/qinglong"
    execute_timeout = load_settings(profile=profile, database_url=url, environ={}).execute_timeout
    loaded = receivers.load(path)
    loaded.require_within(execute_timeout)  # refused at start otherwise
    found = loaded.get("hooks")
    assert found is not None
    assert found.total_timeout_s < execute_timeout


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"base_url": "http://hooks.example"}, "base_url"),
        ({"base_url": "https://user:pw@hooks.example"}, "base_url"),
        ({"base_url": "https://hooks.example/?q=1"}, "base_url"),
        ({"methods": ["GET", "TRACE"]}, "methods"),
        ({"path_prefixes": ["v1"]}, "path_prefixes"),
        ({"path_prefixes": ["/v1/../admin"]}, "path_prefixes"),
        ({"read_timeout_seconds": "10"}, "read_timeout_seconds"),
        ({"concurrency": True}, "concurrency"),
        ({"keep_headers": ["Set-Cookie"]}, "keep_headers"),
        ({"keep_headers": ["set-cookie"]}, "keep_headers"),
        ({"auth": "hunter2"}, "auth"),
        ({"failed_statuses": [409]}, "failed_statuses"),
        ({"colour": "blue"}, "colour"),
        ({"idempotency": {"lookup": "replay", "key_retention_seconds": 60}}, "idempotency.lookup"),
        ({"idempotency": {"lookup": "get", "key_retention_seconds": 60}}, "lookup_path"),
        ({"idempotency": {"lookup": "get"}}, "key_retention_seconds"),
        ({"idempotency": {"retries": 3}}, "idempotency.retries"),
    ],
)
def test_a_bad_field_is_one_line_naming_receiver_and_field(
    extra: dict[str, Any], field: str
) -> None:
    with pytest.raises(errors.ConfigurationError) as caught:
        parsed(**extra)
    message = str(caught.value)
    assert "\n" not in message
    assert "receivers.hooks." in message
    assert field in message
    assert "hunter2" not in message


def test_plain_http_is_allowed_only_to_loopback_or_by_opt_in() -> None:
    assert parsed(base_url="http://127.0.0.1:8080").base_url == "http://127.0.0.1:8080"
    assert parsed(base_url="http://[::1]:8080").base_url == "http://[::1]:8080"
    opted = parsed(base_url="http://hooks.internal", allow_plain_http=True)
    assert opted.base_url == "http://hooks.internal"


def test_a_prefix_holds_whole_segments_only() -> None:
    receiver = parsed(path_prefixes=["/v1/orders", "/v2/"])
    assert receiver.allows_path("/v1/orders")
    assert receiver.allows_path("/v1/orders/7")
    assert not receiver.allows_path("/v1/ordersX")
    assert receiver.allows_path("/v2/anything")


def plan(**fields: Any) -> plan_model.HttpRequestPlan:
    parsed_plan = plans.parse_plan(
        plan_model.ACTION_TYPE, served.plan_data(**fields), models=MODELS
    )
    assert isinstance(parsed_plan, plan_model.HttpRequestPlan)
    return parsed_plan


def test_a_plan_survives_canonical_json_and_binds_every_byte() -> None:
    original = plan()
    again = plans.parse_plan(plan_model.ACTION_TYPE, plans.plan_canonical(original), models=MODELS)
    assert again == original
    seen = {
        plans.plan_action_digest(plan(**change), digests.PLAIN)
        for change in (
            {},
            {"method": "PUT"},
            {"path": "/hooks/orders2"},
            {"query": [["a", "1"], ["b", "2 3"]]},
            {"headers": [["x-trace", "t-2"]]},
            {"body": base64.b64encode(b'{"order": 43}').decode()},
            {"receiver": "hooks2"},
        )
    }
    assert len(seen) == 7
    assert plan_model.HttpRequestPlan.SENSITIVE_FIELDS == ("query", "headers", "body")


@pytest.mark.parametrize(
    "fields",
    [
        {"path": "hooks"},
        {"path": "/hooks/../admin"},
        {"path": "/hooks//x"},
        {"path": "/hooks/%2e%2e/admin"},
        {"path": "/hooks/%2Fadmin"},
        {"path": "/hooks\\admin"},
        {"path": "/hooks/x?y=1"},
        {"path": "/hooks/x#f"},
        {"path": "/hooks/\x07"},
        {"path": "/" + "a" * 2048},
        {"headers": [["Authorization", "x"]]},
        {"headers": [["authorization", "Bearer x"]]},
        {"headers": [["idempotency-key", "k"]]},
        {"headers": [["webhook-id", "k"]]},
        {"headers": [["cookie", "a=b"]]},
        {"headers": [["host", "evil.example"]]},
        {"headers": [["transfer-encoding", "chunked"]]},
        {"headers": [["x-a", "line\r\nbreak"]]},
        {"query": [["a"]]},
        {"body": "not base64!"},
        {"body": "YQ=", "contentType": None},
        {"body": base64.b64encode(b"x" * (48 * 1024 + 1)).decode()},
        {"method": "GET"},
        {"body": None},
        {"url": "https://evil.example"},
    ],
)
def test_a_plan_outside_the_rules_is_refused_naming_no_value(fields: dict[str, Any]) -> None:
    with pytest.raises(errors.PlanInvalid) as caught:
        plan(**fields)
    assert "evil" not in str(caught.value)
    assert "Bearer" not in str(caught.value)


def test_the_url_keeps_the_plans_query_order_and_encodes_it() -> None:
    receiver = parsed(path_prefixes=["/hooks"])
    built = http.build(
        receiver,
        plan(query=[["z", "ä&="], ["a", ""]]),
        idempotency_key="d-7",
        credentials=http.Credentials(),
        now_s=0,
    )
    assert built.url == "https://hooks.example:8443/api/hooks/orders?z=%C3%A4%26%3D&a="
    assert dict(built.headers)["Idempotency-Key"] == '"d-7"'
    assert built.body == b'{"order": 42}'


def test_a_prepared_request_shows_no_header_value_or_body() -> None:
    built = http.build(
        parsed(),
        plan(headers=[["x-api-hint", "h-123"]]),
        idempotency_key="d-7",
        credentials=http.Credentials(bearer=b"tok-abcdef"),
        now_s=0,
    )
    shown = repr(built)
    for hidden in ("tok-abcdef", "h-123", "42"):
        assert hidden not in shown
    assert "authorization" in built.header_names


def test_a_secret_that_is_not_a_token_is_refused_naming_only_its_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("QL_TEST_BAD_TOKEN", "tok with space")
    with pytest.raises(http.SecretInvalid) as caught:
        http.read_credentials(parsed(auth="env:QL_TEST_BAD_TOKEN"))
    assert "env:QL_TEST_BAD_TOKEN" in str(caught.value)
    assert "with space" not in str(caught.value)
