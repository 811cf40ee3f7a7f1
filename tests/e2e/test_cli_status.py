"""`status` as an operator reads it: expired leases by owner, and aligned text columns."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from qinglong_dispatcher import clock as clocks
from tests.support import stores
from tests.support.actions import submit_runs
from tests.support.cli import json_out, run_cli


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    result = run_cli("migrate", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    return tmp_path


async def _stall(path: Path, owners: list[str]) -> None:
    """Submit one run per owner, each claimed by it with a lease that is over at once."""
    the_clock = clocks.SystemClock()
    store = await stores.open_sqlite(path)
    try:
        consumed = await submit_runs(store, the_clock, len(owners))
        for owner, row in zip(owners, consumed, strict=True):
            claimed = await store.claim(
                row.dispatch_id,
                now_ms=the_clock.now_ms(),
                owner=owner,
                token=f"t-{row.dispatch_id}",
                lease_ms=1,
            )
            assert claimed.lease is not None
    finally:
        await store.close()
    await anyio.sleep(0.01)


async def test_status_names_the_owners_of_expired_leases(workdir: Path) -> None:
    await _stall(workdir / "var" / "qinglong.db", ["w1", "w1", "w2"])
    status = json_out(run_cli("status", "--json", cwd=workdir))
    assert status["expired_leases"] == {"count": 3, "by_owner": {"w1": 2, "w2": 1}}
    assert status["executions"]["leased"] == 3
    text = run_cli("status", cwd=workdir)
    assert text.returncode == 0, text.stderr
    (line,) = [s for s in text.stdout.splitlines() if s.startswith("expired leases")]
    assert line.split(None, 2)[2] == "3 (w1: 2, w2: 1)"


async def test_status_text_is_in_aligned_columns(workdir: Path) -> None:
    # 12 expired leases and 3 of 1 digit: values of different widths.
    await _stall(workdir / "var" / "qinglong.db", ["w1"] * 12)
    text = run_cli("status", cwd=workdir)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert len(lines) >= 10
    # Every value ends in the same column (right-aligned numbers), after at least two spaces.
    ends = set()
    for line in lines:
        label_and_value = line.split(" (")[0]
        ends.add(len(label_and_value))
        assert "  " in label_and_value, line
    assert len(ends) == 1, text.stdout
    starts = {len(line) - len(line.lstrip()) for line in lines}
    assert starts == {0}
    assert any(line.startswith("expired leases") and line.endswith("(w1: 12)") for line in lines)
