"""The two runtime locks of `make lock`: the edge's (`deploy/requirements.lock`, the package's
dependencies) and the cluster's (`deploy/requirements-cluster.lock`, with the `cluster` extra).
The cluster lock is the edge lock and asyncpg, pin for pin and hash for hash, so the two never
drift apart; the edge lock has no asyncpg."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EDGE = ROOT / "deploy" / "requirements.lock"
CLUSTER = ROOT / "deploy" / "requirements-cluster.lock"


def _pins(lock: Path) -> dict[str, tuple[str, frozenset[str]]]:
    """name → (version, hashes) of every requirement a lock pins."""
    pins: dict[str, tuple[str, frozenset[str]]] = {}
    text = lock.read_text(encoding="utf-8").replace("\\\n", " ")
    for line in text.splitlines():
        found = re.match(r"^([A-Za-z0-9._-]+)==(\S+)\s+(.*)$", line)
        if found:
            name, version, rest = found.groups()
            hashes = frozenset(re.findall(r"--hash=sha256:([0-9a-f]{64})", rest))
            assert hashes, f"{lock.name}: {name} has no hash"
            pins[name.lower()] = (version, hashes)
    return pins


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_cluster_lock_is_the_edge_lock_and_asyncpg() -> None:
    edge, cluster = _pins(EDGE), _pins(CLUSTER)
    assert "asyncpg" not in edge
    assert "asyncpg" in cluster
    assert {k: v for k, v in cluster.items() if k != "asyncpg"} == edge


def test_each_lock_pins_what_pyproject_asks_for() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    runtime = _requirement_names(project["dependencies"])
    cluster = _requirement_names(project["optional-dependencies"]["cluster"])
    assert cluster == {"asyncpg"}
    assert "asyncpg" not in runtime
    assert runtime <= set(_pins(EDGE))
    assert runtime | cluster <= set(_pins(CLUSTER))
