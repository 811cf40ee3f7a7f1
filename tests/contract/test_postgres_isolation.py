"""Edge never imports asyncpg or the PostgreSQL adapter (docs/decisions/0003)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_EDGE_RUN = """
import sys, anyio
from qinglong_dispatcher import bootstrap, cli
from qinglong_dispatcher.config.settings import load_settings

async def main():
    settings = load_settings(profile="edge", database_url="sqlite:///{path}")
    store = await bootstrap.open_store(settings)
    await store.migrate(now_ms=1)
    await store.counts(now_ms=1)
    await store.close()

anyio.run(main)
loaded = sorted(m for m in sys.modules if m == "asyncpg" or m.startswith(("asyncpg.",
    "qinglong_dispatcher.adapters.postgres")))
assert not loaded, loaded
"""


def test_the_edge_profile_never_imports_the_postgres_leg(tmp_path: Path) -> None:
    code = _EDGE_RUN.format(path=tmp_path / "edge.db")
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
