"""The bench's policy phase on both profiles: requests under a policy of N approvals beside
none, interleaved; it fails unless the policy counted the votes, and on PostgreSQL it leaves
no principal's role behind."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest

from qinglong_dispatcher.bench import policy_path
from qinglong_dispatcher.bench.dialects import postgres as bench_postgres
from qinglong_dispatcher.config.settings import load_settings
from tests.support import stores
from tests.support.cli import run_cli

KEYS = {"approvals_required", "plans", "per_s_without", "per_s_with", "ratio"}


async def test_edge_policy_phase_counts_two_approvals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    report = await policy_path.policy_ratio(load_settings(profile="edge"), 6, 2)
    assert set(report) == KEYS
    assert report["approvals_required"] == 2
    assert report["per_s_without"] > 0
    assert report["per_s_with"] > 0
    assert report["ratio"] == pytest.approx(report["per_s_with"] / report["per_s_without"], 0.01)


@pytest.mark.slow
@pytest.mark.postgres
async def test_cluster_policy_phase_drops_its_principals_roles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Only the roles this run made (`<scratch database>_p_<name>`): the server is shared, and
    # another bench may hold its own. The real `create_scratch` runs; its names are kept.
    made: list[str] = []
    create = bench_postgres.create_scratch

    async def keeping(admin_url: str) -> str:
        url = await create(admin_url)
        made.append(urlsplit(url).path.lstrip("/"))
        return url

    monkeypatch.setattr(bench_postgres, "create_scratch", keeping)
    settings = load_settings(profile="cluster", database_url=stores.pg_url("postgres"))
    report = await policy_path.policy_ratio(settings, 4, 2)
    assert report["approvals_required"] == 2
    assert len(made) == 2
    conn = await asyncpg.connect(stores.admin_dsn(), timeout=5)
    try:
        for name in made:
            left = await conn.fetch(
                "SELECT rolname FROM pg_roles WHERE rolname LIKE $1", f"{name}\\_p\\_%"
            )
            assert left == [], name
    finally:
        await conn.close()


def test_a_policy_of_more_than_a_hundred_is_refused(tmp_path: Path) -> None:
    result = run_cli("bench", "--profile", "edge", "--approval-policy", "101", cwd=tmp_path)
    assert result.returncode == 2
    assert "--approval-policy" in result.stderr
