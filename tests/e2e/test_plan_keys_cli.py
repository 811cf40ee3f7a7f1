"""`keys generate|rotate|check` through the real console script, on SQLite and PostgreSQL: a
store whose plans were written in clear is sealed by `keys rotate`, a rotation to a new key
resumes in batches, `keys check` proves every plan opens, and a daemon whose ring is missing
or wrong stops at startup in one line (exit 78), while one plan that does not open blocks
itself alone."""

from __future__ import annotations

import stat
from collections.abc import AsyncIterator
from pathlib import Path

import anyio.to_thread
import pytest

from tests.support import cli_target, stores
from tests.support.cli import error_lines, json_out
from tests.support.cli_target import Target


@pytest.fixture(params=stores.DIALECTS)
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Target]:
    async with cli_target.target(request.param, tmp_path, {}) as made:
        yield made


def _submit(t: Target, n: int, **env: str) -> None:
    jsonl = t.cwd / "plans.jsonl"
    jsonl.write_text(
        "".join(f'{{"projectId":"p","taskId":"t{i}","taskRevision":{i}}}\n' for i in range(n)),
        encoding="utf-8",
    )
    done = t.run(
        t.self_approver, "submit", "run-create", "--from-jsonl", str(jsonl), "--json", **env
    )
    assert done.returncode == 0, done.stderr


def _life_of_a_ring(t: Target) -> None:
    ring = t.cwd / "plan-keys"
    made = json_out(t.run([], "keys", "generate", "--out", str(ring), "--json"))
    assert stat.S_IMODE(ring.stat().st_mode) == 0o600
    assert made["keys"] == 1
    again = t.run([], "keys", "generate", "--out", str(ring))
    assert again.returncode == 78
    assert len(error_lines(again.stderr)) == 1

    assert t.run(t.admin, "migrate").returncode == 0
    _submit(t, 3)  # written in clear: no ring configured yet
    sealed_env = {"QINGLONG_PLAN_KEYRING_FILE": str(ring)}
    check = json_out(t.run(t.runtime, "keys", "check", "--json", **sealed_env))
    assert (check["ok"], check["clear"], check["checked"]) == (True, 3, 3)
    # Not registered yet: the daemon and a rotation refuse the ring in one line.
    for login, step in ((t.runtime, ("tick", "--once")), (t.admin, ("keys", "rotate"))):
        unregistered = t.run(login, *step, **sealed_env)
        assert unregistered.returncode == 78, unregistered.stderr
        (line,) = error_lines(unregistered.stderr)
        assert "not registered" in line
    # The owner registers the ring's keys (`migrate` with the ring) and reseals.
    registered = json_out(t.run(t.admin, "migrate", "--json", **sealed_env))
    assert registered["plan_keys_registered"] == [made["active"]]
    rotated = json_out(t.run(t.admin, "keys", "rotate", "--json", **sealed_env))
    assert rotated == {"resealed": 3, "unreadable": 0, "remaining": 0}
    _submit(t, 2, **sealed_env)

    added = json_out(t.run([], "keys", "generate", "--out", str(ring), "--add", "--json"))
    assert added["keys"] == 2
    assert t.run(t.admin, "migrate", **sealed_env).returncode == 0
    partial = t.run(
        t.admin, "keys", "rotate", "--batch", "2", "--max-batches", "1", "--json", **sealed_env
    )
    assert json_out(partial)["remaining"] == 3  # stopped after one batch: resumable
    rest = json_out(t.run(t.admin, "keys", "rotate", "--json", **sealed_env))
    assert rest == {"resealed": 3, "unreadable": 0, "remaining": 0}
    check = json_out(t.run(t.runtime, "keys", "check", "--json", **sealed_env))
    assert check["by_key"] == {added["active"]: 5}

    # Without the ring, or with another one, the daemon's commands stop at startup.
    for env in ({}, {"QINGLONG_PLAN_KEYRING_FILE": str(_other_ring(t))}):
        refused = t.run(t.runtime, "tick", "--once", **env)
        assert refused.returncode == 78, refused.stderr
        (line,) = error_lines(refused.stderr)
        assert "QINGLONG_PLAN_KEYRING_FILE" in line
    # One plan sealed under a key this ring lacks (the owner registered another ring's key)
    # is the newest: the daemon starts, says so, blocks that plan alone and runs the rest.
    other_env = {"QINGLONG_PLAN_KEYRING_FILE": str(_other_ring(t))}
    assert t.run(t.admin, "migrate", **other_env).returncode == 0
    _submit(t, 1, **other_env)
    ticked = t.run(t.runtime, "tick", "--drain", "--json", **sealed_env)
    assert ticked.returncode == 0, ticked.stderr
    assert json_out(ticked)["outcomes"] == {"succeeded": 5, "blocked": 1}
    assert "plan_keys.not_in_ring" in ticked.stderr
    assert "plan_keys.newest_unreadable" in ticked.stderr


def _other_ring(t: Target) -> Path:
    other = t.cwd / "other-keys"
    if not other.exists():
        assert t.run([], "keys", "generate", "--out", str(other)).returncode == 0
    return other


@pytest.mark.slow
async def test_a_ring_is_made_rotated_checked_and_required_by_the_daemon(target: Target) -> None:
    await anyio.to_thread.run_sync(_life_of_a_ring, target)


def _group_readable_ring(t: Target) -> None:
    ring = t.cwd / "plan-keys"
    assert t.run([], "keys", "generate", "--out", str(ring)).returncode == 0
    ring.chmod(0o440)  # what a Kubernetes Secret volume under fsGroup presents
    sealed_env = {"QINGLONG_PLAN_KEYRING_FILE": str(ring)}
    allowed = {**sealed_env, "QINGLONG_PLAN_KEYRING_GROUP_READABLE": "true"}
    assert t.run(t.admin, "migrate", **allowed).returncode == 0
    refused = t.run(t.runtime, "keys", "check", **sealed_env)
    assert refused.returncode == 78, refused.stderr
    (line,) = error_lines(refused.stderr)
    assert "0o440" in line
    _submit(t, 2, **allowed)
    check = json_out(t.run(t.runtime, "keys", "check", "--json", **allowed))
    assert (check["ok"], check["clear"], check["checked"]) == (True, 0, 2)
    ring.chmod(0o460)  # group write is never accepted
    still = t.run(t.runtime, "keys", "check", **allowed)
    assert still.returncode == 78, still.stderr


@pytest.mark.slow
async def test_a_group_readable_ring_is_accepted_only_when_the_setting_says_so(
    target: Target,
) -> None:
    await anyio.to_thread.run_sync(_group_readable_ring, target)
