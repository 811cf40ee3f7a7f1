"""The inbox's pure parts: who may decide a request, the filters (a target prefix and a least
age among them), `older_than`'s parsing and the order by age."""

from __future__ import annotations

import pytest

from qinglong_dispatcher.domain import approvals, errors, inbox, policies


def _state(may_vote: tuple[str, ...] | None, voted: tuple[str, ...] = ()) -> policies.VoteState:
    votes = tuple(
        policies.CastVote(principal=p, vote=approvals.Vote.APPROVE, reason=None, voted_at_ms=1)
        for p in voted
    )
    return policies.VoteState(policy=None, votes=votes, may_vote=may_vote, expires_at_ms=9)


def test_who_may_decide() -> None:
    assert inbox.may_decide("bob", "sam", _state(None))  # no groups: any approver
    assert not inbox.may_decide("sam", "sam", _state(None))  # never one's own
    assert not inbox.may_decide("bob", "sam", _state(None, voted=("bob",)))  # one vote
    assert inbox.may_decide("bob", "sam", _state(("bob", "dan")))
    assert not inbox.may_decide("alice", "sam", _state(("bob", "dan")))  # not in the group


def _item(
    subject: str, since: int, *, project: str = "shop", target: str | None = None
) -> inbox.Item:
    return inbox.Item(
        kind=inbox.Kind.APPROVAL if target is None else inbox.Kind.FROZEN_DISPATCH,
        subject_id=subject,
        action_type="run.create",
        project_id=project,
        since_ms=since,
        summary=f"requested by sam-{subject}",
        target=target,
    )


def test_filters_and_order() -> None:
    items = [_item("b", 20), _item("a", 10, project="other"), _item("c", 20)]
    assert [i.subject_id for i in inbox.Filter().apply(items, now_ms=30)] == ["a", "b", "c"]
    newest = inbox.Filter(newest_first=True).apply(items, now_ms=30)
    assert [i.subject_id for i in newest] == ["c", "b", "a"]
    shop = inbox.Filter(project_id="shop").apply(items, now_ms=30)
    assert [i.subject_id for i in shop] == ["b", "c"]
    assert [i.subject_id for i in inbox.Filter(text="SAM-C").apply(items, now_ms=30)] == ["c"]
    assert inbox.Filter(action_type="http.request").apply(items, now_ms=30) == []
    assert _item("a", 10).as_dict(now_ms=5)["age_ms"] == 0


def test_the_target_prefix_and_the_least_age() -> None:
    items = [
        _item("r1", 10, target="router-1"),
        _item("r2", 40, target="router-2"),
        _item("h1", 20, target="host-1"),
        _item("none", 5),
    ]
    routers = inbox.Filter(target_prefix="router-").apply(items, now_ms=50)
    assert [i.subject_id for i in routers] == ["r1", "r2"]  # a row without a target: left out
    assert inbox.Filter(target_prefix="router-1x").apply(items, now_ms=50) == []
    older = inbox.Filter(older_than_ms=30).apply(items, now_ms=50)
    assert [i.subject_id for i in older] == ["none", "r1", "h1"]  # 30 old is old enough
    both = inbox.Filter(target_prefix="router", older_than_ms=30).apply(items, now_ms=50)
    assert [i.subject_id for i in both] == ["r1"]


def test_older_than_is_a_bounded_duration() -> None:
    assert inbox.parse_older_than("90s") == 90_000
    assert inbox.parse_older_than("30m") == 1_800_000
    assert inbox.parse_older_than("2d") == 172_800_000
    for bad in ("", "0s", "5", "1w", "-1h", "366d", "1.5h"):
        with pytest.raises(errors.InvalidInput):
            inbox.parse_older_than(bad)
