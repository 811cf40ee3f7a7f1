"""The pieces of `python -m bench.peers` that need no peer: the steady rate from a peer's
samples, the table, and where the peers' venv goes (the e2e test runs the real peers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.peers import compare, installation, steady
from qinglong_dispatcher.domain import errors


def test_the_steady_rate_leaves_out_the_first_and_last_tenths() -> None:
    # A slow start (nothing for 1 s), then 100 jobs/s, then a slow last tenth.
    samples = [[0.5, 0], [1.0, 0], [1.5, 50], [2.0, 100], [2.5, 150], [2.8, 180], [10.0, 200]]
    assert steady.steady_per_s(samples, 200) == pytest.approx(100.0)


def test_the_crossing_times_are_interpolated_between_samples() -> None:
    # 10 % (10) at 0.1 s and 90 % (90) at 0.9 s on a straight line of 100 jobs/s.
    assert steady.steady_per_s([[0.05, 5], [1.0, 100]], 100) == pytest.approx(100.0)


@pytest.mark.parametrize(
    "samples",
    [[[0.1, 5], [0.2, 50]], [[0.1, 0], [0.1, 100]]],
    ids=["never-done", "one-jump"],
)
def test_samples_that_cannot_time_the_steady_part_are_refused(
    samples: list[list[float]],
) -> None:
    with pytest.raises(ValueError):
        steady.steady_per_s(samples, 100)


def test_the_table_has_a_row_per_comparison() -> None:
    row = {"row": "a vs b", "ours_per_s": 1500.0, "peer_per_s": 1000.0, "ratio": 1.5}
    assert compare.table({"rows": [{**row, "ratios": [1.5]}]}).splitlines() == [
        "| | ours | peer | ratio |",
        "|---|---|---|---|",
        "| a vs b | 1,500.0/s | 1,000.0/s | 1.500 |",
    ]
    # Over several rounds: the medians, and each round's ratio.
    assert compare.table({"rows": [{**row, "ratios": [1.25, 1.5, 2.0]}]}).splitlines() == [
        "| | ours | peer | ratio | by round |",
        "|---|---|---|---|---|",
        "| a vs b | 1,500.0/s | 1,000.0/s | 1.500 | 1.25, 1.50, 2.00 |",
    ]


def _round(edge: float, cluster: float, peer: float) -> dict[str, Any]:
    """One round as `compare` reports it: every peer run at `peer` jobs/s."""
    names = ("huey", "pgqueuer", "pgqueuer_batch_100")
    return {
        "ours": {"edge": {"steady_per_s": edge}, "cluster": {"steady_per_s": cluster}},
        "peer_runs": {
            name + work: {"steady_per_s": peer} for name in names for work in ("", "_equal")
        },
    }


def test_a_row_shows_its_median_round() -> None:
    # The machine was a third slower in the second round, on both sides alike: each round's
    # edge ratio is 1.5. The cluster's third round is an outlier, which the median leaves out.
    rounds = [
        _round(3000.0, 4000.0, 2000.0),
        _round(2000.0, 2700.0, 1333.3),
        _round(3300.0, 1000.0, 2200.0),
    ]
    edge, cluster = compare.rows(4, rounds)[:2]
    assert edge["ratios"] == [1.5, 1.5, 1.5]
    assert (edge["ratio"], edge["round"]) == (1.5, 1)
    assert (edge["ours_per_s"], edge["peer_per_s"]) == (3000.0, 2000.0)
    assert cluster["ratios"] == [2.0, 2.025, 0.455]
    # The median round's own figures: its ratio is its rates' ratio.
    assert (cluster["ratio"], cluster["round"]) == (2.0, 1)
    assert (cluster["ours_per_s"], cluster["peer_per_s"]) == (4000.0, 2000.0)
    assert cluster["row"] == "cluster R=4 (PostgreSQL) vs pgqueuer default"
    # An even count shows the lower of the two middle rounds.
    (edge,) = compare.rows(4, [*rounds[:1], _round(1000.0, 1.0, 1000.0)])[:1]
    assert (edge["ratio"], edge["round"]) == (1.0, 2)


def test_the_venv_folder_is_the_option_then_the_variable_then_var(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(installation.VENV_VARIABLE, raising=False)
    assert installation.venv_folder(None) == Path("var/peers-venv")
    monkeypatch.setenv(installation.VENV_VARIABLE, "/cache/peers")
    assert installation.venv_folder(None) == Path("/cache/peers")
    assert installation.venv_folder(Path("mine")) == Path("mine")


def test_every_peer_is_pinned_to_one_release() -> None:
    assert set(installation.PINS) == {"pgqueuer", "asyncpg", "huey"}
    assert all(
        v.count(".") == 2 and v.replace(".", "").isdigit() for v in installation.PINS.values()
    )


def test_a_folder_that_is_not_a_venv_is_never_cleared(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine", "utf-8")
    with pytest.raises(errors.ConfigurationError, match="not a venv"):
        installation.ensure(tmp_path)
    assert (tmp_path / "notes.txt").read_text("utf-8") == "mine"


def test_our_samples_count_completions_at_each_distinct_time() -> None:
    # Three completions in the first millisecond, one at 1 ms, two at 3 ms (any order).
    samples = steady.samples_of([1003, 1000, 1000, 1001, 1000, 1003])
    assert samples == [(0.0, 3), (0.001, 4), (0.003, 6)]
    assert steady.samples_of([]) == []


def test_our_steady_rate_comes_from_the_completion_times() -> None:
    # 1,000 completions at one a millisecond after a 2 s start: 1,000/s whatever the start.
    times = [5_000] + [7_000 + i for i in range(999)]
    assert steady.steady_per_s(steady.samples_of(times), 1000) == pytest.approx(1000.0, rel=0.01)
