"""A PostgreSQL primary with a synchronous standby, built on this machine for failover tests.

Two clusters in one temporary directory (`initdb`, then `pg_basebackup -R`), each on its own
port, `synchronous_commit=remote_apply` and the standby named in `synchronous_standby_names`:
a commit is acknowledged only once the standby has applied it. `failover()` stops the primary
with `pg_ctl stop -m immediate` and promotes the standby; `rewind_and_rejoin()` rewinds the
old primary with `pg_rewind` and starts it as the new primary's synchronous standby. Leaving
the context always kills both servers and removes the directory.

The servers run as the `postgres` OS user when the tests run as root (initdb refuses root).
Without the binaries the test is skipped, except under `CI=true`, where `.ci/run` installs
the postgresql package and absence is a failure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import pytest

from tests.support import stores
from tests.support.daemon import free_port

TOOLS = ("initdb", "pg_ctl", "pg_basebackup", "pg_rewind", "postgres")
DATABASE = "qinglong"
RUNTIME_LOGIN = "qinglong_ha_runtime"
APPROVER_LOGIN = "qinglong_ha_approver"
SYNC_NAMES = "'*'"
"""Any connected standby is the synchronous one: there is only ever one."""

_CONF = """
listen_addresses = '127.0.0.1'
unix_socket_directories = '{sockets}'
wal_level = replica
wal_log_hints = on
full_page_writes = on
max_wal_senders = 4
hot_standby = on
wal_keep_size = '512MB'
synchronous_commit = remote_apply
max_connections = 80
shared_buffers = '32MB'
# A killed postmaster (not a lost machine) keeps its page cache: fsync buys nothing here.
fsync = off
"""


def bin_dir() -> Path:
    """The newest PostgreSQL bin directory holding every tool; skip (fail under CI) without."""
    found = sorted(
        (Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin")),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    for candidate in reversed(found):
        if all((candidate / tool).is_file() for tool in TOOLS):
            return candidate
    on_path = shutil.which("pg_rewind")
    if on_path is not None and all(shutil.which(tool) for tool in TOOLS):
        return Path(on_path).parent
    reason = f"PostgreSQL server binaries ({', '.join(TOOLS)}) are not installed"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; under CI=true they are required (.ci/run installs postgresql)")
    pytest.skip(f"{reason} (Debian: apt-get install postgresql)")


@dataclasses.dataclass
class Node:
    """One cluster: its data directory and port."""

    name: str
    data: Path
    port: int

    @property
    def admin_dsn(self) -> str:
        """The superuser (trust authentication) on this node's `postgres` database."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"


class Cluster:
    """A primary and its synchronous standby; see the module docstring."""

    def __init__(self, base: Path, bindir: Path) -> None:
        self.base = base
        self.bindir = bindir
        self.primary = Node("a", base / "a", free_port())
        self.standby = Node("b", base / "b", free_port())
        self.nodes = (self.primary, self.standby)
        """Both nodes in a fixed order (a, b), whichever is the primary now."""
        self.generation = 0
        """Failovers so far."""

    # -- processes -------------------------------------------------------------------------

    def _run(self, tool: str, *args: str, timeout: float = 120) -> str:
        command = [str(self.bindir / tool), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(
            command,
            cwd=self.base,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(f"{tool} {' '.join(args)} failed: {done.stdout}{done.stderr}")
        return done.stdout

    def _start(self, node: Node) -> None:
        log = self.base / f"{node.name}.log"
        self._run(
            "pg_ctl", "start", "-w", "-t", "60", "-D", str(node.data), "-l", str(log),
            "-o", f"-p {node.port}",
        )  # fmt: skip

    def _stop(self, node: Node, mode: str) -> None:
        self._run("pg_ctl", "stop", "-w", "-t", "60", "-m", mode, "-D", str(node.data))

    def kill_all(self) -> None:
        """Stop both servers whatever state they are in (teardown; never raises): an
        immediate stop, then SIGKILL for a postmaster that is still there."""
        for node in self.nodes:
            pid_file = node.data / "postmaster.pid"
            if not pid_file.exists():
                continue
            with contextlib.suppress(AssertionError, OSError, subprocess.SubprocessError):
                self._run(
                    "pg_ctl", "stop", "-w", "-t", "15", "-m", "immediate", "-D", str(node.data)
                )
            with contextlib.suppress(OSError, ValueError, IndexError):
                pid = int(pid_file.read_text().splitlines()[0])
                os.kill(pid, signal.SIGKILL)
                # Its children notice the postmaster is gone and exit on their own.
                time.sleep(0.2)

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of both server logs, for an assertion message."""
        out = []
        for node in self.nodes:
            path = self.base / f"{node.name}.log"
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {node.name} ({node.port}) ---\n" + "\n".join(tail))
        return "\n".join(out)

    # -- building --------------------------------------------------------------------------

    def build(self) -> None:
        """initdb the primary, start it, clone the standby with pg_basebackup, start it."""
        primary, standby = self.primary, self.standby
        self._run(
            "initdb", "-D", str(primary.data), "-U", "postgres", "--auth=trust",
            "--no-sync", "--encoding=UTF8", "--locale=C",
        )  # fmt: skip
        with (primary.data / "postgresql.conf").open("a") as conf:
            conf.write(_CONF.format(sockets=self.base))
            conf.write(f"synchronous_standby_names = {SYNC_NAMES}\n")
        self._start(primary)
        self._run(
            "pg_basebackup", "-D", str(standby.data), "-R", "-X", "stream", "-c", "fast",
            "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres", "--no-sync",
        )  # fmt: skip
        self._start(standby)

    # -- role changes ----------------------------------------------------------------------

    async def failover(self, *, stall_standby_s: float = 0.0) -> None:
        """Kill the primary (`pg_ctl stop -m immediate`), promote the standby, and let the new
        primary commit alone until a standby rejoins (as an HA manager does: a synchronous
        standby list naming nobody would hold every commit).

        `stall_standby_s` first stops the primary's WAL sender (SIGSTOP) for that long and
        stops the primary while the sender is still stopped (the postmaster SIGKILLs it after
        its grace of a few seconds): the standby never gets the WAL of the stall, so with
        asynchronous replication acknowledged commits would be lost; with a synchronous
        standby those commits wait, unacknowledged, and die with the primary."""
        old, new = self.primary, self.standby
        sender = 0
        if stall_standby_s > 0:
            (row,) = await self.admin(old, "SELECT pid FROM pg_stat_replication")
            sender = int(row["pid"])
            os.kill(sender, signal.SIGSTOP)
            await anyio.sleep(stall_standby_s)
        try:
            self._stop(old, "immediate")
        finally:
            if sender:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(sender, signal.SIGCONT)
        self._run("pg_ctl", "promote", "-w", "-t", "60", "-D", str(new.data))
        self.primary, self.standby = new, old
        self.generation += 1
        await self.admin(new, "ALTER SYSTEM SET synchronous_standby_names = ''")
        await self.admin(new, "SELECT pg_reload_conf()")
        # Promotion does not wait for a checkpoint, and until one runs the control file still
        # names the old timeline: pg_rewind would then see one timeline and rewind nothing.
        await self.admin(new, "CHECKPOINT")

    async def rewind_and_rejoin(self) -> None:
        """`pg_rewind` the stopped old primary against the new one (it runs the single-user
        crash recovery first, since the old primary was not shut down cleanly), start it as a
        standby (`-R` writes `standby.signal` and `primary_conninfo`), and make it the new
        primary's synchronous standby again."""
        old, new = self.standby, self.primary
        self._run(
            "pg_rewind", f"--target-pgdata={old.data}", "-R",
            f"--source-server=host=127.0.0.1 port={new.port} user=postgres dbname=postgres",
        )  # fmt: skip
        self._start(old)
        await self.admin(new, f"ALTER SYSTEM SET synchronous_standby_names = {SYNC_NAMES}")
        await self.admin(new, "SELECT pg_reload_conf()")
        await self.wait_synchronous()

    def stop_standby(self) -> None:
        """Stop the standby cleanly (the primary keeps naming it synchronous)."""
        self._stop(self.standby, "fast")

    async def start_standby(self) -> None:
        """Start the stopped standby again and wait until it is synchronous."""
        self._start(self.standby)
        await self.wait_synchronous()

    async def wait_synchronous(self) -> None:
        """Until the primary reports a synchronous standby that has caught up (60 s at most)."""
        # A walsender can report `sync` for a standby that cannot follow the timeline; only
        # one that replays up to the primary's current position counts.
        sql = (
            "SELECT count(*) AS n FROM pg_stat_replication WHERE sync_state = 'sync' "
            "AND state = 'streaming' AND replay_lsn >= pg_current_wal_lsn()"
        )
        with anyio.move_on_after(60):
            while True:
                if (await self.admin(self.primary, sql))[0]["n"] >= 1:
                    return
                await anyio.sleep(0.1)
        raise AssertionError(f"no synchronous standby\n{self.log_tail()}")

    # -- SQL -------------------------------------------------------------------------------

    async def admin(
        self, node: Node, sql: str, *, database: str = "postgres"
    ) -> list[dict[str, Any]]:
        """Run SQL as the superuser on `node`; driver errors reach the caller."""
        dsn = node.admin_dsn.rpartition("/")[0] + f"/{database}"
        conn = await asyncpg.connect(dsn, timeout=10)
        try:
            return [dict(row.items()) for row in await conn.fetch(sql)]
        finally:
            await conn.close()

    def url(self, login: str) -> str:
        """The multi-host URL the replicas use: both nodes in a fixed order (so that after a
        failover the first host is dead, and after the second one it is a standby), the
        writable one chosen by `target_session_attrs`."""
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)
        return f"postgresql://{login}@{hosts}/{DATABASE}?target_session_attrs=read-write"

    def single_url(self, node: Node, login: str) -> str:
        """One node only, as `login`."""
        return f"postgresql://{login}@127.0.0.1:{node.port}/{DATABASE}"

    async def prepare_database(self) -> None:
        """Create the database, migrate it and create the test logins (`prepare`)."""
        await prepare(self.primary.admin_dsn)


async def prepare(admin_dsn: str) -> None:
    """Create the database on the primary whose superuser DSN is `admin_dsn`, migrate it as
    the superuser, and create the test logins (roles are cluster-wide and replicate to the
    standby like everything else)."""
    from tests.support.clock import START_MS

    async def admin(sql: str) -> None:
        conn = await asyncpg.connect(admin_dsn, timeout=10)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    await admin(f"CREATE DATABASE {DATABASE}")
    store = await stores.open_postgres(
        admin_dsn.rpartition("/")[0] + f"/{DATABASE}", max_size=1, installation="qinglong"
    )
    try:
        await store.migrate(now_ms=START_MS)
    finally:
        await store.close()
    for login, roles in (
        (RUNTIME_LOGIN, ("qinglong_runtime",)),
        (APPROVER_LOGIN, ("qinglong_approver", "qinglong_self_approver")),
    ):
        await admin(f"CREATE ROLE {login} LOGIN")
        for role in roles:
            await admin(f"GRANT {role} TO {login}")


def owned_tempdir(prefix: str = "qinglong-ha-") -> Path:
    """A new temporary directory, owned by the `postgres` OS user when the tests run as root
    (the servers run as that user then)."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(base, user.pw_uid, user.pw_gid)
    return base


@contextlib.asynccontextmanager
async def synchronous_pair(*, with_database: bool = True) -> AsyncIterator[Cluster]:
    """Build and start a primary with a synchronous standby; always torn down."""
    bindir = bin_dir()
    base = owned_tempdir()
    cluster = Cluster(base, bindir)
    try:
        cluster.build()
        await cluster.wait_synchronous()
        if with_database:
            await cluster.prepare_database()
        yield cluster
    finally:
        cluster.kill_all()
        shutil.rmtree(base, ignore_errors=True)
