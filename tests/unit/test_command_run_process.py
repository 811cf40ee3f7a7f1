"""Running one argv for `command.run`, with real processes: no shell, a scrubbed environment,
the whole process group killed on timeout, cancellation or exit, bounded and digested output,
a redacted stderr head, and a spawn failure told apart from a run."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from qinglong_dispatcher.actions import secrets
from qinglong_dispatcher.actions.command_run import commands, process


def _script(tmp_path: Path, body: str, name: str = "tool") -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def _invocation(*argv: str, **changes: Any) -> process.Invocation:
    base = process.Invocation(
        argv=argv,
        env=process.scrubbed_env((), {}, {}),
        cwd="/",
        timeout_s=5.0,
        output_cap_bytes=65536,
        keep_stdout=True,
    )
    return dataclasses.replace(base, **changes)


def _dead(pid: int) -> bool:
    """Gone, or a zombie that only waits for its new parent to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def _eventually_dead(pid: int) -> bool:
    deadline = time.monotonic() + 1.0
    while not _dead(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


async def test_no_shell_interprets_an_argument(tmp_path: Path) -> None:
    hostile = f"$(touch {tmp_path}/x); touch {tmp_path}/y `touch {tmp_path}/z` *"
    outcome = await process.run(_invocation("/bin/echo", hostile))
    assert outcome.exit_code == 0
    assert outcome.stdout == hostile.encode() + b"\n"
    for name in ("x", "y", "z"):
        assert not (tmp_path / name).exists()


async def test_the_environment_is_scrubbed_to_path_lang_the_allowed_and_the_secrets() -> None:
    daemon = {"DAEMON_ONLY": "leak", "ALLOWED": "yes", "QL_TOKEN": "s3cr3t", "PATH": "/evil"}
    command = commands.Command(
        name="env",
        executable="/usr/bin/env",
        env=("ALLOWED", "ABSENT"),
        env_secrets=(("TOKEN", secrets.SecretRef("env", "QL_TOKEN")),),
    )
    invocation = process.prepare(command, ["/usr/bin/env"], [], timeout_s=5, environ=daemon)
    outcome = await process.run(dataclasses.replace(invocation, keep_stdout=True))
    lines = sorted(outcome.stdout.decode().splitlines())
    assert lines == [
        "ALLOWED=yes",
        "LANG=C.UTF-8",
        f"PATH={process.SAFE_PATH}",
        "TOKEN=s3cr3t",
    ]
    assert invocation.redact == (b"s3cr3t",)


async def test_a_timeout_kills_the_whole_group_grandchild_included(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    tool = _script(tmp_path, f"sleep 30 &\necho $! > {pidfile}\nwait\n")
    started = time.monotonic()
    outcome = await process.run(_invocation(tool, timeout_s=0.3))
    assert time.monotonic() - started < 1.5
    assert (outcome.timed_out, outcome.exit_code) == (True, None)
    assert _eventually_dead(int(pidfile.read_text()))


async def test_a_cancelled_run_kills_the_group_before_it_lets_go(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    tool = _script(tmp_path, f"sleep 30 &\necho $! > {pidfile}\nwait\n")
    with anyio.move_on_after(0.3) as scope:
        await process.run(_invocation(tool, timeout_s=30))
    assert scope.cancelled_caught
    assert _eventually_dead(int(pidfile.read_text()))


async def test_what_a_command_leaves_in_its_group_dies_when_it_exits(tmp_path: Path) -> None:
    # The background child still holds the pipes: without the kill the run would wait for it.
    pidfile = tmp_path / "pid"
    tool = _script(tmp_path, f"sleep 30 &\necho $! > {pidfile}\nexit 0\n")
    started = time.monotonic()
    outcome = await process.run(_invocation(tool, timeout_s=10))
    assert time.monotonic() - started < 1.5
    assert (outcome.timed_out, outcome.exit_code) == (False, 0)
    assert _eventually_dead(int(pidfile.read_text()))


async def test_output_over_the_cap_is_counted_digested_up_to_the_cap_and_flagged(
    tmp_path: Path,
) -> None:
    tool = _script(tmp_path, "head -c 300000 /dev/zero\nhead -c 5000 /dev/zero >&2\nexit 4\n")
    outcome = await process.run(_invocation(tool, output_cap_bytes=1000))
    assert outcome.exit_code == 4
    assert (outcome.stdout_bytes, outcome.stdout_truncated) == (300000, True)
    assert outcome.stdout_sha256 == hashlib.sha256(b"\0" * 1000).hexdigest()
    assert outcome.stdout == b"\0" * 1000
    assert (outcome.stderr_bytes, outcome.stderr_truncated) == (5000, True)
    assert outcome.stderr_sha256 == hashlib.sha256(b"\0" * 1000).hexdigest()
    assert outcome.stderr_head == b"\0" * process.STDERR_HEAD_BYTES


async def test_output_within_the_cap_is_digested_whole(tmp_path: Path) -> None:
    tool = _script(tmp_path, "printf out\nprintf err >&2\n")
    outcome = await process.run(_invocation(tool, keep_stdout=False))
    assert (outcome.stdout_sha256, outcome.stdout_bytes) == (hashlib.sha256(b"out").hexdigest(), 3)
    assert (outcome.stderr_head, outcome.stdout) == (b"err", b"")
    assert not outcome.stdout_truncated
    assert not outcome.stderr_truncated


async def test_the_stderr_head_redacts_values_even_across_its_end(tmp_path: Path) -> None:
    secret = "S" * 40
    tool = _script(tmp_path, f'printf "%250s{secret} and hidden-arg" x >&2\n')
    outcome = await process.run(_invocation(tool, redact=(secret.encode(), b"hidden-arg")))
    assert len(outcome.stderr_head) == process.STDERR_HEAD_BYTES
    assert outcome.stderr_head == b" " * 249 + b"x[redac"  # the secret began at byte 250
    # The head is never more than the cap.
    shorter = await process.run(_invocation(tool, output_cap_bytes=100))
    assert shorter.stderr_head == b" " * 100


async def test_a_command_that_cannot_start_is_a_spawn_failure_not_a_run(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("#!/bin/sh\n")
    for argv, cwd, reason in [
        ((str(tmp_path / "absent"),), "/", "ENOENT"),
        ((str(plain),), "/", "EACCES"),
        (("/bin/true",), str(tmp_path / "gone"), "ENOENT"),
    ]:
        with pytest.raises(process.SpawnFailed) as info:
            await process.run(_invocation(*argv, cwd=cwd))
        assert str(info.value) == f"command could not be started ({reason})"
        assert (info.value.code, info.value.reason) == ("command_spawn_failed", reason)
        assert str(tmp_path) not in str(info.value)


async def test_a_signal_that_ends_the_command_leaves_no_exit_code(tmp_path: Path) -> None:
    tool = _script(tmp_path, "kill -KILL $$\n")
    outcome = await process.run(_invocation(tool))
    assert (outcome.exit_code, outcome.timed_out) == (None, False)


def test_a_secret_holding_nul_is_refused_naming_only_its_reference(tmp_path: Path) -> None:
    (tmp_path / "token").write_bytes(b"hunter2\x00more")
    command = commands.Command(
        name="x",
        executable="/bin/true",
        env_secrets=(("TOKEN", secrets.SecretRef("file", str(tmp_path / "token"))),),
    )
    with pytest.raises(process.SecretInvalid) as info:
        process.prepare(command, ["/bin/true"], [], timeout_s=1, environ={})
    assert str(info.value) == f"secret file:{tmp_path / 'token'} holds a NUL byte"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root switches users")
async def test_a_root_daemon_runs_the_command_as_its_user_and_groups_only() -> None:
    table = {"executable": "/usr/bin/id", "user": "nobody"}
    command = commands.parse({"commands": {"id": table}}, source="t").get("id")
    assert command is not None
    assert command.run_as is not None
    invocation = process.prepare(command, ["/usr/bin/id"], [], timeout_s=5, environ={})
    outcome = await process.run(dataclasses.replace(invocation, keep_stdout=True))
    printed = outcome.stdout.decode()
    assert printed.startswith(f"uid={command.run_as.uid}(nobody) gid={command.run_as.gid}")
    assert "(root)" not in printed
