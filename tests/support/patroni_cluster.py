"""Two PostgreSQL nodes managed by Patroni over one etcd, built on this machine for failover
tests.

One etcd (its own client and peer ports, its own data directory) is the DCS. Each node gets a
Patroni YAML of its own (REST API port, PostgreSQL port, data directory) in one temporary
directory; the bootstrap DCS turns `synchronous_mode` on (`synchronous_mode_strict` off) with a
short `ttl`, `loop_wait` and `retry_timeout`, so that a failover takes seconds, and
`primary_start_timeout: 0`, so that a leader whose PostgreSQL crashed fails over to its
synchronous standby instead of restarting it. `pg_hba` trusts 127.0.0.1; Patroni creates the
superuser and the replication user.

Patroni runs as the `postgres` OS user when the tests run as root, each in a process group of
its own; the postmaster it starts sits in a session of its own (Patroni calls `setsid`), so it
outlives a killed Patroni, as in production. Leaving the context kills every process group
(both Patronis, both postmasters with their backends, etcd), pass or fail, and removes the
directory.

Without `patroni` or `etcd` the test is skipped with the reason, except under `CI=true`,
where `.ci/run` installs them and absence is a failure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import pytest
import yaml

from tests.support import pg_ha
from tests.support.daemon import free_port

SCOPE = "qinglong-test"
TTL_S = 8
LOOP_WAIT_S = 1
RETRY_TIMEOUT_S = 3
"""Patroni requires `loop_wait + 2 * retry_timeout <= ttl`. A leader whose Patroni is gone
keeps its key for up to `ttl`; a crashed postmaster is noticed within `loop_wait`."""

_SERVER_PARAMETERS = {
    "wal_level": "replica",
    "wal_log_hints": "on",
    "hot_standby": "on",
    "max_wal_senders": 5,
    "max_replication_slots": 5,
    "wal_keep_size": "512MB",
    "max_connections": 80,
    "shared_buffers": "32MB",
    "synchronous_commit": "on",
    # A killed postmaster (not a lost machine) keeps its page cache: fsync buys nothing here.
    "fsync": "off",
}


def tools() -> tuple[str, str]:
    """The paths of `patroni` and `etcd`; skip without them (fail under `CI=true`)."""
    found = [shutil.which(name) for name in ("patroni", "etcd")]
    patroni, etcd = found
    if patroni is not None and etcd is not None:
        return patroni, etcd
    missing = " and ".join(n for n, f in zip(("patroni", "etcd"), found, strict=True) if f is None)
    if os.environ.get("CI") == "true":
        pytest.fail(
            f"{missing} is required under CI=true (.ci/run installs Debian's patroni and "
            "etcd-server)"
        )
    pytest.skip(f"{missing} is not installed (Debian: apt-get install patroni etcd-server)")


@dataclasses.dataclass
class Node:
    """One Patroni member: its name, ports, directory and the Patroni process (if running)."""

    name: str
    home: Path
    port: int
    rest_port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def data(self) -> Path:
        return self.home / "data"

    @property
    def config(self) -> Path:
        return self.home / "patroni.yml"

    @property
    def admin_dsn(self) -> str:
        """The superuser (trust authentication) on this node's `postgres` database."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def postmaster_pid(self) -> int | None:
        """The pid in `postmaster.pid`, if that process is alive and is this node's postmaster
        (a killed one leaves its file behind, and its pid may be reused by anything)."""
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int((self.data / "postmaster.pid").read_text().splitlines()[0])
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if str(self.data).encode() in argv:
                return pid
        return None


class Cluster:
    """etcd and two Patroni nodes; see the module docstring."""

    def __init__(self, base: Path, bindir: Path) -> None:
        self.base = base
        self.bindir = bindir
        self.patroni, self.etcd_bin = tools()
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.etcd: subprocess.Popen[bytes] | None = None
        self.nodes = (
            Node("a", base / "a", free_port(), free_port()),
            Node("b", base / "b", free_port(), free_port()),
        )
        """Both nodes in a fixed order (a, b), whichever leads now."""

    def _log(self, name: str) -> Path:
        return self.base / f"{name}.log"

    def start_etcd(self) -> None:
        """Start the single-member etcd on its own ports and data directory."""
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        client = f"http://127.0.0.1:{self.etcd_port}"
        with self._log("etcd").open("ab") as log:
            self.etcd = subprocess.Popen(
                [
                    self.etcd_bin, "--name", "dcs", "--data-dir", str(self.base / "etcd"),
                    "--listen-client-urls", client, "--advertise-client-urls", client,
                    "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                    "--initial-cluster", f"dcs={peer}", "--initial-cluster-state", "new",
                    "--initial-cluster-token", self.base.name,
                ],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{client}/health", timeout=2) as response,
            ):
                if json.loads(response.read()).get("health") == "true":
                    return
            time.sleep(0.1)
        raise AssertionError(f"etcd did not become healthy\n{self.log_tail()}")

    def _write_config(self, node: Node) -> None:
        config: dict[str, Any] = {
            "scope": SCOPE,
            "namespace": f"/{self.base.name}/",
            "name": node.name,
            "log": {"level": "INFO"},
            "restapi": {
                "listen": f"127.0.0.1:{node.rest_port}",
                "connect_address": f"127.0.0.1:{node.rest_port}",
            },
            "etcd3": {"hosts": [f"127.0.0.1:{self.etcd_port}"], "protocol": "http"},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL_S,
                    "loop_wait": LOOP_WAIT_S,
                    "retry_timeout": RETRY_TIMEOUT_S,
                    "maximum_lag_on_failover": 16 * 1024 * 1024,
                    "primary_start_timeout": 0,
                    "synchronous_mode": True,
                    "synchronous_mode_strict": False,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": _SERVER_PARAMETERS,
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C"}, "no-sync"],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node.port}",
                "connect_address": f"127.0.0.1:{node.port}",
                "data_dir": str(node.data),
                "bin_dir": str(self.bindir),
                "pgpass": str(node.home / "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": "postgres"},
                    "replication": {"username": "replicator", "password": "replicator"},
                    "rewind": {"username": "postgres", "password": "postgres"},
                },
                "parameters": {"unix_socket_directories": str(node.home)},
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 trust",
                    "host replication all 127.0.0.1/32 trust",
                ],
            },
        }
        node.home.mkdir(exist_ok=True)
        node.config.write_text(yaml.safe_dump(config))
        if os.geteuid() == 0:
            shutil.chown(node.home, "postgres", "postgres")

    def start_patroni(self, node: Node) -> None:
        """Start (or start again) the node's Patroni, in a process group of its own."""
        if not node.config.exists():
            self._write_config(node)
        as_postgres: dict[str, Any] = {}
        if os.geteuid() == 0:
            as_postgres = {"user": "postgres", "group": "postgres"}
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(node.home)}
        with self._log(f"patroni-{node.name}").open("ab") as log:
            node.process = subprocess.Popen(
                [self.patroni, str(node.config)],
                cwd=node.home,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **as_postgres,
            )

    def kill_patroni(self, node: Node) -> None:
        """SIGKILL the node's Patroni (its process group); its PostgreSQL runs on."""
        assert node.process is not None, node
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.process.pid, signal.SIGKILL)
        node.process.wait(timeout=10)
        node.process = None

    def kill_postmaster(self, node: Node) -> None:
        """SIGKILL the node's postmaster alone (its backends notice and exit by themselves)."""
        pid = node.postmaster_pid()
        assert pid is not None, f"no postmaster.pid on {node.name}"
        os.kill(pid, signal.SIGKILL)

    def kill_all(self) -> None:
        """SIGKILL every process group: the Patronis, the postmasters with their backends,
        etcd (teardown; never raises)."""
        for node in self.nodes:
            if node.process is not None:
                with contextlib.suppress(OSError):
                    os.killpg(node.process.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.SubprocessError):
                    node.process.wait(timeout=10)
        for node in self.nodes:
            pid = node.postmaster_pid()
            if pid is None:
                continue
            with contextlib.suppress(OSError):
                os.killpg(os.getpgid(pid), signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if self.etcd is not None:
            with contextlib.suppress(OSError):
                os.killpg(self.etcd.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.SubprocessError):
                self.etcd.wait(timeout=10)
        time.sleep(0.2)  # orphaned backends notice their postmaster is gone

    def log_tail(self, lines: int = 25) -> str:
        """The last lines of etcd's and both Patronis' logs, for an assertion message."""
        out = []
        for name in ("etcd", "patroni-a", "patroni-b"):
            path = self._log(name)
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {name} ---\n" + "\n".join(tail))
        return "\n".join(out)

    def members(self) -> list[dict[str, Any]]:
        """`GET /cluster` from the first Patroni that answers; [] if none does."""
        for node in self.nodes:
            if node.process is None:
                continue
            url = f"http://127.0.0.1:{node.rest_port}/cluster"
            with (
                contextlib.suppress(OSError, ValueError),
                urllib.request.urlopen(url, timeout=2) as response,
            ):
                members: list[dict[str, Any]] = json.loads(response.read())["members"]
                return members
        return []

    def node(self, name: str) -> Node:
        return next(node for node in self.nodes if node.name == name)

    def leader(self) -> Node | None:
        """The node the DCS names leader and reports running, if any."""
        for member in self.members():
            if member.get("role") in ("leader", "master") and member.get("state") == "running":
                return self.node(str(member["name"]))
        return None

    def replica(self) -> Node:
        """The node that is not the leader (there must be a leader)."""
        leader = self.leader()
        assert leader is not None, "no leader"
        return next(node for node in self.nodes if node is not leader)

    async def wait_leader(self, *, other_than: Node | None = None, seconds: float = 60) -> Node:
        """Until a leader (other than `other_than`) is running and accepts writes; it."""
        with anyio.move_on_after(seconds):
            while True:
                leader = self.leader()
                if leader is not None and leader is not other_than:
                    with contextlib.suppress(OSError, asyncpg.PostgresError):
                        rows = await self.admin(leader, "SELECT pg_is_in_recovery() AS r")
                        if not rows[0]["r"]:
                            return leader
                await anyio.sleep(0.1)
        raise AssertionError(f"no new leader in {seconds:g}s\n{self.log_tail()}")

    def sync_standby(self) -> Node | None:
        """The node the DCS names synchronous standby (`/sync`), if any: the only one Patroni
        promotes in synchronous mode."""
        for member in self.members():
            if member.get("role") == "sync_standby":
                return self.node(str(member["name"]))
        return None

    async def wait_synchronous(self, seconds: float = 90) -> None:
        """Until the leader reports a synchronous standby that has caught up and the DCS names
        it synchronous standby (Patroni writes `/sync` only after the server shows it `sync`)."""
        sql = (
            "SELECT count(*) AS n FROM pg_stat_replication WHERE sync_state = 'sync' "
            "AND state = 'streaming' AND replay_lsn >= pg_current_wal_lsn()"
        )
        with anyio.move_on_after(seconds):
            while True:
                leader = self.leader()
                if leader is not None and self.sync_standby() is not None:
                    with contextlib.suppress(OSError, asyncpg.PostgresError):
                        if (await self.admin(leader, sql))[0]["n"] >= 1:
                            return
                await anyio.sleep(0.2)
        raise AssertionError(f"no synchronous standby in {seconds:g}s\n{self.log_tail()}")

    async def synchronous_names(self, node: Node) -> str:
        """The node's `synchronous_standby_names` (what Patroni set)."""
        rows = await self.admin(node, "SHOW synchronous_standby_names")
        return str(rows[0]["synchronous_standby_names"])

    async def admin(
        self, node: Node, sql: str, *, database: str = "postgres"
    ) -> list[dict[str, Any]]:
        """Run SQL as the superuser on `node`; driver errors reach the caller."""
        dsn = node.admin_dsn.rpartition("/")[0] + f"/{database}"
        conn = await asyncpg.connect(dsn, timeout=5)
        try:
            return [dict(row.items()) for row in await conn.fetch(sql)]
        finally:
            await conn.close()

    def url(self, login: str) -> str:
        """The multi-host URL the replicas use: both nodes in a fixed order, the writable one
        chosen by `target_session_attrs`."""
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)
        return f"postgresql://{login}@{hosts}/{pg_ha.DATABASE}?target_session_attrs=read-write"


@contextlib.asynccontextmanager
async def patroni_pair(*, logs_to: Path | None = None) -> AsyncIterator[Cluster]:
    """etcd, node a bootstrapped as the leader, node b cloned as its synchronous standby, the
    database migrated with the test logins; always torn down, the etcd and Patroni logs
    (with PostgreSQL's) first copied to `logs_to`."""
    bindir = pg_ha.bin_dir()
    tools()
    base = pg_ha.owned_tempdir("qinglong-patroni-")
    cluster = Cluster(base, bindir)
    try:
        cluster.start_etcd()
        first, second = cluster.nodes
        cluster.start_patroni(first)
        leader = await cluster.wait_leader(seconds=90)
        assert leader is first, leader
        cluster.start_patroni(second)
        await cluster.wait_synchronous()
        await pg_ha.prepare(first.admin_dsn)
        yield cluster
    finally:
        cluster.kill_all()
        if logs_to is not None:
            for log in base.glob("*.log"):
                with contextlib.suppress(OSError):
                    shutil.copy(log, logs_to / log.name)
        shutil.rmtree(base, ignore_errors=True)
