"""Following a time-ordered list with an overlap: each item announced once, late commits caught,
bursts passed."""

from __future__ import annotations

from qinglong_dispatcher.domain import activity, ids


def test_each_item_is_announced_once_across_overlapping_reads() -> None:
    window = activity.Window(start_ms=10_000, overlap_ms=1_000)
    assert window.since_ms == 9_000
    assert window.fresh([("a", 10_100), ("b", 10_200)], full=False) == ["a", "b"]
    assert window.since_ms == 9_200
    # The next read sees both again (overlap) and one new.
    assert window.fresh([("a", 10_100), ("b", 10_200), ("c", 10_300)], full=False) == ["c"]


def test_a_row_committed_late_inside_the_overlap_is_still_announced() -> None:
    window = activity.Window(start_ms=0, overlap_ms=1_000)
    window.fresh([("a", 5_000), ("c", 5_500)], full=False)
    # "b" committed after "c" was read, with an earlier time: inside the overlap, caught.
    assert window.fresh([("a", 5_000), ("b", 5_200), ("c", 5_500)], full=False) == ["b"]


def test_a_burst_longer_than_a_read_moves_on_instead_of_reading_it_again() -> None:
    window = activity.Window(start_ms=0, overlap_ms=1_000)
    page = [(f"k{i}", 2_000 + i) for i in range(5)]
    assert window.fresh(page, full=True) == [key for key, _ in page]
    assert window.since_ms == 2_004  # the next read starts at the burst's newest row


def test_old_keys_are_forgotten_past_twice_the_overlap() -> None:
    window = activity.Window(start_ms=0, overlap_ms=100)
    window.fresh([("a", 1_000)], full=False)
    window.fresh([("b", 5_000)], full=False)
    assert window.fresh([("a", 1_000)], full=False) == ["a"]  # long gone: not in any read


def test_the_id_floor_sorts_below_every_later_id_and_above_every_earlier_one() -> None:
    floor = activity.approval_id_floor(1_700_000_000_000)
    assert ids.new_approval_request_id(1_700_000_000_000) >= floor
    assert ids.new_approval_request_id(1_700_000_000_001) > floor
    assert ids.new_approval_request_id(1_699_999_999_999) < floor
