"""The checks the `policy` command makes before the database sees a policy (the database holds
the same rules: tests/security/test_hostile_approval_policies*.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from qinglong_dispatcher.domain import approval_policies as policies
from qinglong_dispatcher.domain import errors, principals

BASE = policies.NewPolicy(name="two-for-runs", action_type="run.create")


def _new(**changes: Any) -> policies.NewPolicy:
    return dataclasses.replace(BASE, **changes)


def test_a_policy_within_the_databases_bounds_passes() -> None:
    new = _new(approvals_required=100, denials_to_reject=1, approver_groups=("ops", "sre_2"))
    assert new.check() is new
    assert _new(lifetime_ms=2_000, remind_before_ms=1_000).check().lifetime_ms == 2_000
    for prefix in ("prod-", "p", "x" * 128, "db_1:[eu]/~"):
        assert _new(target_prefix=prefix).check().target_prefix == prefix


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"name": "Two"}, "policy name"),
        ({"name": "-two"}, "policy name"),
        ({"action_type": "run create"}, "action type"),
        ({"project_id": "p 1"}, "project"),
        ({"approvals_required": 0}, "approvals must be"),
        ({"denials_to_reject": 101}, "denials must be"),
        ({"approver_groups": ("1ops",)}, "approver group"),
        ({"approver_groups": ("o" * 33,)}, "approver group"),
        ({"approver_groups": ("ops", "ops")}, "named twice"),
        ({"lifetime_ms": 2_000, "remind_before_ms": 2_000}, "before the end"),
        ({"target_prefix": ""}, "target prefix"),
        ({"target_prefix": "x" * 129}, "target prefix"),
        ({"target_prefix": "prod-*"}, "wildcard"),
        ({"target_prefix": "prod?"}, "wildcard"),
        ({"target_prefix": "prod%"}, "wildcard"),
        ({"target_prefix": "prod db"}, "target prefix"),
        ({"target_prefix": "prod\n"}, "target prefix"),
        ({"target_prefix": "prød"}, "target prefix"),
    ],
)
def test_what_the_database_would_refuse_is_invalid_input(
    changes: dict[str, Any], said: str
) -> None:
    with pytest.raises(errors.InvalidInput, match=said):
        _new(**changes).check()


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("1s", 1_000),
        ("90s", 90_000),
        ("30m", 1_800_000),
        ("4h", 14_400_000),
        ("30d", 2_592_000_000),
    ],
)
def test_a_duration_counts_seconds_to_days(text: str, ms: int) -> None:
    assert policies.parse_duration(text, "lifetime") == ms


@pytest.mark.parametrize("text", ["0s", "31d", "2w", "1.5h", "", "h"])
def test_a_duration_outside_one_second_to_thirty_days_is_refused(text: str) -> None:
    with pytest.raises(errors.InvalidInput, match="lifetime"):
        policies.parse_duration(text, "lifetime")


def test_a_tokens_expiry_still_counts_minutes_to_days_only() -> None:
    with pytest.raises(errors.InvalidInput, match="minutes, hours or days"):
        principals.parse_ttl("90s")
    assert principals.parse_ttl("90m") == 5_400_000
