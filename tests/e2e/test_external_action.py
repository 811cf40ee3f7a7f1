"""The example action package, really installed (pip, offline) and dispatched by the real
console script through its entry point, on SQLite and on PostgreSQL: approval steps, tick,
the effect on disk; after a SIGKILL, its evidence provider settles what happened and leaves
what did not to an operator. A broken installed action stops the CLI in one line, exit 78.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest

from tests.support import stores
from tests.support.cli import json_out, run_cli
from tests.support.installed_actions import write_distribution

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "qinglong-action-note"
NOTE = "example.note.write"


@pytest.fixture(scope="module")
def note_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example installed with pip into a folder of its own (offline, no build isolation)."""
    root = tmp_path_factory.mktemp("note-action")
    source = root / "source"  # a copy: building leaves build/ and egg-info/ behind
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    site = root / "site"
    installed = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation"),
            *("--no-index", "--quiet", "--target", str(site), str(source)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    (entry_points,) = site.glob("qinglong_action_note-*.dist-info/entry_points.txt")
    assert f"{NOTE} = qinglong_action_note:ACTION" in entry_points.read_text()
    return site


@dataclasses.dataclass
class Target:
    """One dialect's logins as the CLI takes them (all the same file on SQLite)."""

    admin: list[str]
    runtime: list[str]
    approver: list[str]
    env: dict[str, str]
    notes: Path
    cwd: Path

    def run(self, login: list[str], *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, *login, cwd=self.cwd, env={**self.env, **extra})


@pytest.fixture(params=stores.DIALECTS)
async def target(
    request: pytest.FixtureRequest, tmp_path: Path, note_site: Path
) -> AsyncIterator[Target]:
    notes = tmp_path / "notes"
    notes.mkdir()
    env = {
        "PYTHONPATH": os.pathsep.join([str(note_site), str(REPO)]),
        "QINGLONG_ACTION_NOTE_DIR": str(notes),
    }
    if request.param == "sqlite":
        login = ["--database", f"sqlite:///{tmp_path / 'q.db'}"]
        yield Target(login, login, login, env, notes, tmp_path)
        return
    async with stores.fresh_database(migrated=False) as name:

        def cluster(url: str) -> list[str]:
            return ["--profile", "cluster", "--database", url]

        yield Target(
            admin=cluster(stores.pg_url(name)),
            runtime=cluster(stores.runtime_url(name)),
            # Approving is a qinglong_approver's, and not the requester's (docs/security.md).
            approver=cluster(stores.strict_approver_url(name)),
            # A new database of the suite is of its installation, whose roles the logins hold.
            env={**env, "QINGLONG_INSTALLATION": stores.INSTALLATION},
            notes=notes,
            cwd=tmp_path,
        )


def _approved_dispatch(t: Target, ref: str, text: str) -> str:
    plan = t.cwd / f"{ref}.json"
    plan.write_text(
        json.dumps({"schemaVersion": 1, "actionRef": ref, "projectId": "p1", "text": text}),
        encoding="utf-8",
    )
    create = ("approval", "create", "--action", NOTE, "--plan", str(plan))
    created = json_out(t.run(t.runtime, *create, "--requested-by", "alice", "--json"))
    approval_id = created["approval_request_id"]
    approved = json_out(
        t.run(t.approver, "approval", "approve", approval_id, "--by", "bob", "--json")
    )
    assert approved["status"] == "approved"
    consumed = json_out(t.run(t.runtime, "approval", "consume", approval_id, "--json"))
    return str(consumed["dispatch_id"])


def _dispatches(t: Target) -> dict[str, dict[str, Any]]:
    listed = json_out(t.run(t.runtime, "dispatch", "list", "--action", NOTE, "--json"))
    return {row["dispatch_id"]: row for row in listed["dispatches"]}


def _note(t: Target, dispatch_id: str) -> dict[str, Any] | None:
    path = t.notes / f"{dispatch_id}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _end_to_end(t: Target) -> None:
    assert t.run(t.admin, "migrate").returncode == 0
    unknown = t.run(
        t.runtime,
        "approval",
        "create",
        "--action",
        "example.nope",
        "--plan",
        "x",
        "--requested-by",
        "alice",
    )
    assert unknown.returncode == 2
    (line,) = unknown.stderr.splitlines()
    assert line.endswith("unknown action type: example.nope")
    dispatch_id = _approved_dispatch(t, "note-1", "hello, 世界")
    assert _note(t, dispatch_id) is None  # approving and consuming ran no effect

    ticked = json_out(t.run(t.runtime, "tick", "--once", "--json"))
    assert ticked["outcomes"] == {"succeeded": 1}
    row = _dispatches(t)[dispatch_id]
    assert (row["status"], row["result_code"]) == ("succeeded", "note_written")
    note = _note(t, dispatch_id)
    assert note is not None
    assert (note["dispatchId"], note["text"]) == (dispatch_id, "hello, 世界")
    assert len(note["actionDigest"]) == 64

    again = json_out(t.run(t.runtime, "tick", "--once", "--json"))
    assert again["outcomes"] == {}  # nothing is ever executed twice
    assert sorted(p.name for p in t.notes.iterdir()) == [f"{dispatch_id}.json"]


@pytest.mark.slow
async def test_the_example_action_is_installed_and_dispatched_end_to_end(target: Target) -> None:
    await anyio.to_thread.run_sync(_end_to_end, target)


def _crash(t: Target, point: str) -> None:
    url = t.runtime[t.runtime.index("--database") + 1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("QINGLONG_")}
    env.update(t.env)
    env.update(
        QINGLONG_DATABASE_URL=url,
        QINGLONG_PROFILE="cluster" if "--profile" in t.runtime else "edge",
        # A short lease, so that the killed execution needs recovery soon.
        QINGLONG_LEASE_SECONDS="1",
        QINGLONG_OWNER_ID=f"killed-{point}",
    )
    killed = subprocess.run(
        [sys.executable, "-m", "tests.support.external_crash", NOTE, point],
        cwd=t.cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert killed.returncode == -9, killed.stderr


def _crash_and_recover(t: Target) -> None:
    assert t.run(t.admin, "migrate").returncode == 0
    effect_done = _approved_dispatch(t, "note-2", "written, then killed")
    _crash(t, "after_execute")
    no_effect = _approved_dispatch(t, "note-3", "killed before writing")
    _crash(t, "before_execute")
    assert _note(t, effect_done) is not None
    assert _note(t, no_effect) is None

    deadline = time.monotonic() + 20
    while len(json_out(t.run(t.runtime, "recovery", "list", "--json"))) < 2:
        assert time.monotonic() < deadline, "the killed leases never expired"
        time.sleep(0.2)
    ticked = json_out(t.run(t.runtime, "tick", "--once", "--json"))
    assert ticked["outcomes"] == {}  # neither is due: only evidence or an operator settles them
    assert ticked["reconcile"]["outcomes"] == {"resolved_succeeded": 1, "missing": 1}

    rows = _dispatches(t)
    assert rows[effect_done]["status"] == "succeeded"
    (left,) = json_out(t.run(t.runtime, "recovery", "list", "--json"))
    assert left["dispatch_id"] == no_effect
    assert (left["action_type"], left["last_observation"]["outcome"]) == (NOTE, "missing")
    assert left["last_observation"]["reason"] == "note_missing"
    assert _note(t, no_effect) is None  # recovery never executes


@pytest.mark.slow
async def test_after_a_kill_the_evidence_settles_the_effect_and_leaves_the_rest(
    target: Target,
) -> None:
    await anyio.to_thread.run_sync(_crash_and_recover, target)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("entries", "text"),
    [
        ({"a": "qinglong_action_note:ACTION", "b": "qinglong_action_note:ACTION"}, "also declared"),
        ({"run.create": "tests.support.installed_actions:CLASHING"}, "run.create is built in"),
        ({"silent": "tests.support.installed_actions:SILENT"}, "MANUAL_ONLY"),
        ({"gone": "qa_module_that_is_not_there:ACTION"}, "ModuleNotFoundError"),
    ],
)
def test_a_broken_installed_action_stops_the_cli_in_one_line(
    tmp_path: Path, note_site: Path, entries: dict[str, str], text: str
) -> None:
    broken = tmp_path / "broken"
    write_distribution(broken, "qa-broken", entries)
    database = ["--database", f"sqlite:///{tmp_path / 'q.db'}"]
    env = {"PYTHONPATH": os.pathsep.join([str(broken), str(note_site), str(REPO)])}
    assert run_cli("migrate", *database, cwd=tmp_path, env=env).returncode == 0
    for args in (
        ["tick", "--once"],
        ["approval", "create", "--action", "x.y", "--plan", "p", "--requested-by", "a"],
    ):
        result = run_cli(*args, *database, cwd=tmp_path, env=env)
        assert result.returncode == 78, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("qinglong-dispatcher: error: action entry point ")
        assert text in lines[0]
        assert result.stdout == ""
