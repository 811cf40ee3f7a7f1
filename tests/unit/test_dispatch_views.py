"""The pure part of `dispatch list|show`: cursors, the effective-status filter, plan fields."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qinglong_dispatcher.domain import dispatch_views, errors, plans
from qinglong_dispatcher.domain.states import EffectiveStatus, ExecutionStatus

_IDS = st.from_regex(plans.IDENTIFIER_PATTERN[1:-1], fullmatch=True)


@given(ms=st.integers(min_value=0, max_value=10**18 - 1), dispatch_id=_IDS)
def test_a_cursor_round_trips_through_its_printed_form(ms: int, dispatch_id: str) -> None:
    cursor = dispatch_views.Cursor(created_at_ms=ms, dispatch_id=dispatch_id)
    assert dispatch_views.Cursor.parse(str(cursor)) == cursor


@pytest.mark.parametrize(
    "text",
    ["", "123", "123:", ":d-1", "-5:d-1", "1.5:d-1", "x:d-1", "١٢:d-1", "12:d 1", "12:d-1\n"],
)
def test_a_malformed_cursor_is_invalid_input(text: str) -> None:
    with pytest.raises(errors.InvalidInput, match="after: must be a cursor"):
        dispatch_views.Cursor.parse(text)


def test_each_effective_status_is_one_stored_status_and_lease_condition() -> None:
    conditions = {s: dispatch_views.stored_condition(s) for s in EffectiveStatus}
    assert conditions[EffectiveStatus.RECOVERY_REQUIRED] == (ExecutionStatus.EXECUTING, True)
    assert conditions[EffectiveStatus.EXECUTING] == (ExecutionStatus.EXECUTING, False)
    for status, (stored, expired) in conditions.items():
        if status not in (EffectiveStatus.RECOVERY_REQUIRED, EffectiveStatus.EXECUTING):
            assert (stored.value, expired) == (status.value, None)


def test_filters_are_identifiers() -> None:
    with pytest.raises(errors.InvalidInput, match="project"):
        dispatch_views.ListQuery(project_id="../x")
    with pytest.raises(errors.InvalidInput, match="action"):
        dispatch_views.ListQuery(action_type="run create")
