"""A kernel-enforced memory limit and CPU share for a daemon under test, and its resource use.

`limited()` makes a cgroup (v1: one in the `memory` and one in the `cpu` hierarchy; v2: one
with `memory.max` and `cpu.max`) that a command enters before it `exec`s, so the whole life
of each process is inside the limits; `Sampler` follows the current process's RSS and CPU.
Both read the kernel's own figures: `/proc/<pid>/status` (VmRSS, VmHWM), `/proc/<pid>/stat`
(utime, stime) and the cgroup's peak usage and OOM-kill count.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
MIB = 2**20
TICKS = os.sysconf("SC_CLK_TCK")


class Unavailable(Exception):
    """No writable cgroup hierarchy to enforce the limits with."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Limits:
    """What the systemd unit asks for: `MemoryMax=96M` and a quarter of one core."""

    memory_bytes: int = 96 * MIB
    cpu_quota_us: int = 25_000
    cpu_period_us: int = 100_000


@dataclasses.dataclass
class Cgroup:
    """One limited group: where processes enter it and where the kernel reports on it."""

    kind: str
    """`v1` or `v2`."""
    procs: list[Path]
    """`cgroup.procs` of each hierarchy the process must join."""
    memory_dir: Path
    dirs: list[Path]
    oom_kills_at_start: int = 0

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` run by a shell that first moves itself into the group, then `exec`s."""
        joins = " && ".join(f"echo $$ > {shlex.quote(str(p))}" for p in self.procs)
        return ["/bin/sh", "-c", f'{joins} && exec "$@"', "sh", *argv]

    def _read(self, name: str) -> str:
        return (self.memory_dir / name).read_text()

    def peak_usage_bytes(self) -> int | None:
        """The group's peak memory charge (RSS and the page cache of the files it touched)."""
        name = "memory.max_usage_in_bytes" if self.kind == "v1" else "memory.peak"
        try:
            return int(self._read(name).split()[0])
        except (OSError, ValueError):
            return None

    def limit_hits(self) -> int | None:
        """v1 `memory.failcnt`: how often the charge reached the limit (reclaim, not OOM)."""
        if self.kind != "v1":
            return None
        return int(self._read("memory.failcnt"))

    def oom_kills(self) -> int:
        """Processes the kernel's OOM killer ended in this group since it was made."""
        name = "memory.oom_control" if self.kind == "v1" else "memory.events"
        for line in self._read(name).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value) - self.oom_kills_at_start
        raise Unavailable(f"{name} has no oom_kill count on this kernel")

    def describe(self) -> str:
        return f"cgroup {self.kind}: " + ", ".join(str(d) for d in self.dirs)


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _v1(name: str, limits: Limits) -> Cgroup:
    memory = ROOT / "memory" / name
    cpus = [ROOT / c for c in ("cpu", "cpu,cpuacct") if (ROOT / c / "cpu.cfs_quota_us").exists()]
    if not cpus:
        raise Unavailable(f"no cgroup v1 cpu hierarchy with CFS quotas under {ROOT}")
    cpu = cpus[0] / name
    made: list[Path] = []
    try:
        for folder in (memory, cpu):
            folder.mkdir()
            made.append(folder)
        _write(memory / "memory.limit_in_bytes", str(limits.memory_bytes))
        if (memory / "memory.memsw.limit_in_bytes").exists():
            # No swap either: the limit is on memory, not on memory plus swap.
            _write(memory / "memory.memsw.limit_in_bytes", str(limits.memory_bytes))
        _write(cpu / "cpu.cfs_period_us", str(limits.cpu_period_us))
        _write(cpu / "cpu.cfs_quota_us", str(limits.cpu_quota_us))
    except OSError:
        _remove(made)
        raise
    group = Cgroup("v1", [memory / "cgroup.procs", cpu / "cgroup.procs"], memory, made)
    group.oom_kills_at_start = group.oom_kills()
    return group


def _v2(name: str, limits: Limits) -> Cgroup:
    parent = ROOT
    enabled = (parent / "cgroup.subtree_control").read_text().split()
    wanted = [c for c in ("memory", "cpu") if c not in enabled]
    if wanted:
        _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
    folder = parent / name
    folder.mkdir()
    try:
        _write(folder / "memory.max", str(limits.memory_bytes))
        if (folder / "memory.swap.max").exists():
            _write(folder / "memory.swap.max", "0")
        _write(folder / "cpu.max", f"{limits.cpu_quota_us} {limits.cpu_period_us}")
    except OSError:
        _remove([folder])
        raise
    group = Cgroup("v2", [folder / "cgroup.procs"], folder, [folder])
    group.oom_kills_at_start = group.oom_kills()
    return group


def _remove(dirs: list[Path]) -> None:
    for folder in reversed(dirs):
        # A group empties a moment after its last process is reaped.
        for _ in range(50):
            try:
                folder.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)


@contextlib.contextmanager
def limited(limits: Limits) -> Iterator[Cgroup]:
    """A fresh cgroup with `limits`, removed afterwards; `Unavailable` says why there is none."""
    name = f"qinglong-edge-limits-{uuid.uuid4().hex[:8]}"
    try:
        if (ROOT / "cgroup.controllers").exists():
            group = _v2(name, limits)
        elif (ROOT / "memory" / "memory.limit_in_bytes").exists():
            group = _v1(name, limits)
        else:
            raise Unavailable(f"no cgroup v1 memory hierarchy nor cgroup v2 under {ROOT}")
    except OSError as exc:
        raise Unavailable(f"cannot make a limited cgroup under {ROOT}: {exc}") from exc
    try:
        yield group
    finally:
        _remove(group.dirs)


def _status_kib(pid: int) -> dict[str, int]:
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0])
    return values


def busy(pid: int) -> bool:
    """Whether any thread of `pid` is running or runnable (state R) right now."""
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # the thread just ended
        if text[text.rindex(")") + 2] == "R":
            return True
    return False


def when_busy(pid: int, *, within_s: float) -> bool:
    """Wait (polling) until `pid` is at work, at most `within_s`; whether it was."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if busy(pid):
                return True
        except OSError:
            return False
        time.sleep(0.0005)
    return False


def cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` so far."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


@dataclasses.dataclass
class Life:
    """One process's figures, as last read while it was alive."""

    pid: int
    peak_rss_bytes: int = 0
    cpu_s: float = 0.0


class Sampler:
    """A thread reading the current process's RSS high-water mark and CPU every `interval_s`."""

    def __init__(self, interval_s: float = 0.1) -> None:
        self.lives: list[Life] = []
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="edge-sampler", daemon=True)

    def follow(self, pid: int) -> None:
        with self._lock:
            self.lives.append(Life(pid))

    def sample(self) -> None:
        """Read the current life now (call it right before a signal ends the process)."""
        with self._lock:
            if not self.lives:
                return
            life = self.lives[-1]
            try:
                status = _status_kib(life.pid)
                spent = cpu_seconds(life.pid)
            except (OSError, ValueError, IndexError):
                return  # gone: its last reading stands
            high = max(status.get("VmHWM", 0), status.get("VmRSS", 0)) * 1024
            life.peak_rss_bytes = max(life.peak_rss_bytes, high)
            life.cpu_s = max(life.cpu_s, spent)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.sample()

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def peak_rss_bytes(self) -> int:
        return max((life.peak_rss_bytes for life in self.lives), default=0)

    @property
    def cpu_s(self) -> float:
        return sum(life.cpu_s for life in self.lives)
