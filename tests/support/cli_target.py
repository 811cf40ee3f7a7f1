"""One dialect's store as the real console script sees it: the logins of each role, the
environment, and everything the runs printed (so a test can look for a secret in all of it)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.support import stores
from tests.support.cli import json_out, run_cli


@dataclasses.dataclass
class Target:
    """The logins as CLI arguments (all the same file on SQLite)."""

    dialect: str
    admin: list[str]
    runtime: list[str]
    approver: list[str]
    """A login that may approve another's request (PostgreSQL: not a self-approver)."""
    self_approver: list[str]
    """A login that may approve its own request (`submit`)."""
    env: dict[str, str]
    cwd: Path
    database: str | None = None
    printed: list[str] = dataclasses.field(default_factory=list)

    def run(self, login: list[str], *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        """`qinglong-dispatcher ARGS` as `login`, its output kept in `printed`."""
        done = run_cli(*args, *login, cwd=self.cwd, env={**self.env, **extra})
        self.printed += [done.stdout, done.stderr]
        return done

    def dispatch(self, action: str, ref: str, plan: dict[str, Any]) -> str:
        """Create (as alice), approve (as bob) and consume one plan: its dispatch id."""
        path = self.cwd / f"{ref}.json"
        path.write_text(json.dumps({"schemaVersion": 1, "actionRef": ref, **plan}), "utf-8")
        create = ("approval", "create", "--action", action, "--plan", str(path))
        created = json_out(self.run(self.runtime, *create, "--requested-by", "alice", "--json"))
        approval = created["approval_request_id"]
        json_out(self.run(self.approver, "approval", "approve", approval, "--by", "bob", "--json"))
        consumed = json_out(self.run(self.runtime, "approval", "consume", approval, "--json"))
        return str(consumed["dispatch_id"])

    def show(self, dispatch_id: str) -> dict[str, Any]:
        """`dispatch show --json`."""
        shown: dict[str, Any] = json_out(
            self.run(self.runtime, "dispatch", "show", dispatch_id, "--json")
        )
        return shown

    def stored_bytes(self) -> bytes:
        """Everything the database holds: the SQLite file and its WAL, or a data-only pg_dump."""
        if self.database is None:
            return b"".join(p.read_bytes() for p in self.cwd.glob("q.db*"))
        return subprocess.run(
            ["pg_dump", "--data-only", stores.pg_url(self.database)],
            capture_output=True,
            timeout=60,
            check=True,
        ).stdout


@contextlib.asynccontextmanager
async def target(dialect: str, cwd: Path, env: dict[str, str]) -> AsyncIterator[Target]:
    """A fresh, unmigrated store of `dialect` (`q.db` in `cwd`, or a new PostgreSQL database of
    the suite's installation, dropped afterwards) with `env` for every run."""
    if dialect == "sqlite":
        login = ["--database", f"sqlite:///{cwd / 'q.db'}"]
        yield Target(dialect, login, login, login, login, env, cwd)
        return
    async with stores.fresh_database(migrated=False) as name:

        def cluster(url: str) -> list[str]:
            return ["--profile", "cluster", "--database", url]

        yield Target(
            dialect,
            admin=cluster(stores.pg_url(name)),
            runtime=cluster(stores.runtime_url(name)),
            approver=cluster(stores.strict_approver_url(name)),
            self_approver=cluster(stores.approver_url(name)),
            env={**env, "QINGLONG_INSTALLATION": stores.INSTALLATION},
            cwd=cwd,
            database=name,
        )
