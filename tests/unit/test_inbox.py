"""The inbox's pure parts: who may decide a request, the filters and the order by age."""

from __future__ import annotations

from qinglong_dispatcher.domain import approvals, inbox, policies


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


def _item(subject: str, since: int, *, project: str = "shop") -> inbox.Item:
    return inbox.Item(
        kind=inbox.Kind.APPROVAL,
        subject_id=subject,
        action_type="run.create",
        project_id=project,
        since_ms=since,
        summary=f"requested by sam-{subject}",
    )


def test_filters_and_order() -> None:
    items = [_item("b", 20), _item("a", 10, project="other"), _item("c", 20)]
    assert [i.subject_id for i in inbox.Filter().apply(items)] == ["a", "b", "c"]
    newest = inbox.Filter(newest_first=True).apply(items)
    assert [i.subject_id for i in newest] == ["c", "b", "a"]
    assert [i.subject_id for i in inbox.Filter(project_id="shop").apply(items)] == ["b", "c"]
    assert [i.subject_id for i in inbox.Filter(text="SAM-C").apply(items)] == ["c"]
    assert inbox.Filter(action_type="http.request").apply(items) == []
    assert _item("a", 10).as_dict(now_ms=5)["age_ms"] == 0
