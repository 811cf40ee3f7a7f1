"""`run`'s composition: `bootstrap.open_daemon` holds the file's authority while the daemon
lives, and a start that fails part-way gives back everything it had taken."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from qinglong_dispatcher import bootstrap
from qinglong_dispatcher.config.settings import Settings, load_settings
from qinglong_dispatcher.domain import errors
from tests.support import stores
from tests.support.clock import START_MS


async def _edge(tmp_path: Path, metrics_port: int) -> Settings:
    path = tmp_path / "edge.db"
    store = await stores.open_sqlite(path)
    try:
        await store.migrate(now_ms=START_MS)
    finally:
        await store.close()
    return load_settings(
        environ={
            "QINGLONG_DATABASE_URL": f"sqlite:///{path}",
            "QINGLONG_METRICS_PORT": str(metrics_port),
        }
    )


async def test_the_daemon_holds_the_files_authority_until_it_is_closed(tmp_path: Path) -> None:
    settings = await _edge(tmp_path, 0)
    async with bootstrap.open_daemon(settings):
        with pytest.raises(errors.StoreInUse), bootstrap.sole_daemon(settings):
            pass
    with bootstrap.sole_daemon(settings):
        pass


async def test_a_start_that_cannot_listen_gives_back_the_authority(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        settings = await _edge(tmp_path, taken.getsockname()[1])
        with pytest.raises(errors.ConfigurationError, match="QINGLONG_METRICS_PORT"):
            async with bootstrap.open_daemon(settings):
                pytest.fail("the daemon was built without its listener")
    with bootstrap.sole_daemon(settings):
        pass
