"""The bench's notification phase on the edge profile, small: both sides dispatch every plan,
the subscription to the failure kinds hears nothing of successes, and the ratio is on / off."""

from __future__ import annotations

from pathlib import Path

import pytest

from qinglong_dispatcher.bench import notify_path
from qinglong_dispatcher.config.settings import load_settings

KEYS = {
    "dispatches",
    "kinds",
    "per_s_off",
    "per_s_on",
    "ratio",
    "cpu_s_per_1000_off",
    "cpu_s_per_1000_on",
}


@pytest.mark.slow
async def test_edge_notification_phase_measures_both_sides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    report = await notify_path.notify_ratio(load_settings(profile="edge"), 20, 1)
    assert set(report) == KEYS
    assert report["kinds"] == list(notify_path.FAILURE_KINDS)
    assert report["per_s_off"] > 0
    assert report["per_s_on"] > 0
    assert report["cpu_s_per_1000_on"] > 0
    assert report["ratio"] == pytest.approx(report["per_s_on"] / report["per_s_off"], 0.01)
