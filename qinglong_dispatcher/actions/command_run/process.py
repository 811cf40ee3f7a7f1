"""Running one argv for `command.run`: no shell, a scrubbed environment, its own process group,
bounded output, and a kill of the whole group on timeout or cancellation.

Output past the cap is read and discarded, not a reason to kill: how chatty a command is says
nothing about its effect, and killing it for that would turn a run that may well succeed into
an uncertain one. Reading on keeps the pipes drained, so the command never blocks on a full
pipe; the timeout bounds how long that may last. The digest covers the bytes kept (the first
`output_cap_bytes`), the byte count everything the command wrote.

A run owns its process group: when the command exits, anything it left behind in the group is
killed too, so an effect never outlives the run that the receipt describes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from typing import Final

import anyio
import anyio.abc

from qinglong_dispatcher.actions.command_run import commands
from qinglong_dispatcher.domain import errors

SAFE_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STDERR_HEAD_BYTES: Final = 256
REDACTED: Final = b"[redacted]"
_CHUNK: Final = 64 * 1024


class SpawnFailed(errors.QinglongError):
    """The command could not be started (not found, not executable, no such folder or user):
    nothing ran."""

    code = "command_spawn_failed"
    reason = "unknown"
    """The errno name (`ENOENT`, `EACCES`, …): low-sensitivity, no path."""


class SecretInvalid(errors.QinglongError):
    """A secret cannot be put into an environment variable (it holds a NUL byte)."""

    code = "secret_invalid"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Invocation:
    """Everything one run needs; `redact` lists the values no output excerpt may show."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    timeout_s: float
    output_cap_bytes: int
    redact: tuple[bytes, ...] = ()
    run_as: commands.RunAs | None = None
    keep_stdout: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Outcome:
    """How a run ended and what it wrote (digests and counts; only a redacted stderr head)."""

    exit_code: int | None
    """The exit status, or None when a signal ended the process."""
    timed_out: bool
    stdout_sha256: str
    stdout_bytes: int
    stdout_truncated: bool
    stderr_sha256: str
    stderr_bytes: int
    stderr_truncated: bool
    stderr_head: bytes
    """The first bytes of stderr, every redacted value replaced by `[redacted]`."""
    stdout: bytes = b""
    """The kept stdout, only when the invocation asked for it (a check reads it)."""
    signal: int | None = None
    """The signal that ended the process, if one did (a timeout's kill is SIGKILL)."""
    duration_ms: int | None = None
    """From the spawn to the reaping, on the monotonic clock."""


def scrubbed_env(
    allowed: Sequence[str], extra: Mapping[str, str], environ: Mapping[str, str]
) -> dict[str, str]:
    """A fixed PATH and LANG, the `allowed` daemon variables that are set, then `extra`."""
    env = {"PATH": SAFE_PATH, "LANG": "C.UTF-8"}
    env.update({name: environ[name] for name in allowed if name in environ})
    env.update(extra)
    return env


def prepare(
    command: commands.Command,
    argv: Sequence[str],
    plan_args: Sequence[str],
    *,
    timeout_s: float,
    keep_stdout: bool = False,
    environ: Mapping[str, str] | None = None,
) -> Invocation:
    """The invocation of `argv` under `command`'s rules; secrets are read now.

    Raises `secrets.SecretUnavailable` or `SecretInvalid` (naming the reference only).
    """
    daemon_env = os.environ if environ is None else environ
    secret_env: dict[str, str] = {}
    hidden = [value.encode("utf-8") for value in command.sensitive_values(plan_args)]
    for name, ref in command.env_secrets:
        value = ref.read(daemon_env)
        if b"\x00" in value:
            raise SecretInvalid(f"secret {ref} holds a NUL byte")
        secret_env[name] = os.fsdecode(value)
        hidden.append(value)
    return Invocation(
        argv=tuple(argv),
        env=scrubbed_env(command.env, secret_env, daemon_env),
        cwd=command.cwd,
        timeout_s=timeout_s,
        output_cap_bytes=command.output_cap_bytes,
        # Longest first, so a value containing another is replaced whole; empty ones never.
        redact=tuple(sorted({v for v in hidden if v}, key=len, reverse=True)),
        run_as=command.run_as,
        keep_stdout=keep_stdout,
    )


def redact(data: bytes, values: Sequence[bytes]) -> bytes:
    """`data` with every occurrence of each value replaced by `[redacted]`."""
    for value in values:
        if value:
            data = data.replace(value, REDACTED)
    return data


class _Capture:
    """One output stream: counted whole, digested and kept up to the cap, then discarded."""

    def __init__(self, cap: int, keep: int) -> None:
        self.cap, self.keep = cap, keep
        self.total = 0
        self.kept = bytearray()
        self.sha256 = hashlib.sha256()

    def feed(self, chunk: bytes) -> None:
        room = self.cap - self.total
        if room > 0:
            self.sha256.update(chunk[:room])
        room = self.keep - len(self.kept)
        if room > 0:
            self.kept += chunk[:room]
        self.total += len(chunk)

    async def drain(self, stream: anyio.abc.ByteReceiveStream) -> None:
        with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError):
            while True:
                self.feed(await stream.receive(_CHUNK))


def _kill_group(pid: int) -> None:
    # The group id is the leader's pid (start_new_session); after the leader is reaped the id
    # stays reserved while any member lives, and an empty group is simply not there.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _spawn(invocation: Invocation) -> anyio.abc.Process:
    run_as = invocation.run_as
    try:
        return await anyio.open_process(
            list(invocation.argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=invocation.cwd,
            env=dict(invocation.env),
            start_new_session=True,
            user=None if run_as is None else run_as.uid,
            group=None if run_as is None else run_as.gid,
            extra_groups=None if run_as is None else list(run_as.groups),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        # Raised before exec: the command never ran. The reason is an errno name, no path.
        failed = SpawnFailed(f"command could not be started ({errno_name(exc)})")
        failed.reason = errno_name(exc)
        raise failed from None


def errno_name(exc: BaseException) -> str:
    """`ENOENT`, `EACCES`, … for an OSError; the class name otherwise."""
    number = getattr(exc, "errno", None)
    if isinstance(number, int) and number in errno.errorcode:
        return errno.errorcode[number]
    return type(exc).__name__


async def run(invocation: Invocation) -> Outcome:
    """Run once and wait (at most `timeout_s`); raises `SpawnFailed` if nothing started.

    On timeout or cancellation the whole process group is killed with SIGKILL and reaped
    before this returns or re-raises.
    """
    cap = invocation.output_cap_bytes
    head = min(STDERR_HEAD_BYTES, cap)
    # Enough stderr to redact a value that starts inside the head but ends past it.
    window = head + max((len(v) for v in invocation.redact), default=0)
    out = _Capture(cap, cap if invocation.keep_stdout else 0)
    err = _Capture(cap, window)
    process = await _spawn(invocation)
    began = anyio.current_time()
    exit_status: int | None = None
    try:
        with anyio.move_on_after(invocation.timeout_s):
            async with anyio.create_task_group() as group:
                assert process.stdout is not None  # both are pipes: see _spawn
                assert process.stderr is not None
                group.start_soon(out.drain, process.stdout)
                group.start_soon(err.drain, process.stderr)
                exit_status = await process.wait()
                _kill_group(process.pid)  # what it left behind; the pipes then close
    finally:
        _kill_group(process.pid)
        with anyio.CancelScope(shield=True):
            await process.aclose()
    return Outcome(
        exit_code=None if exit_status is None or exit_status < 0 else exit_status,
        timed_out=exit_status is None,
        stdout_sha256=out.sha256.hexdigest(),
        stdout_bytes=out.total,
        stdout_truncated=out.total > cap,
        stderr_sha256=err.sha256.hexdigest(),
        stderr_bytes=err.total,
        stderr_truncated=err.total > cap,
        stderr_head=redact(bytes(err.kept), invocation.redact)[:head],
        stdout=bytes(out.kept),
        signal=-exit_status if exit_status is not None and exit_status < 0 else None,
        duration_ms=round((anyio.current_time() - began) * 1000),
    )
