"""CPU time and resident memory of a process, read from /proc (Linux)."""

from __future__ import annotations

import dataclasses
import os
import resource
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Usage:
    """CPU seconds (user + system) so far and resident set size now."""

    cpu_s: float
    rss_mib: float


def of_pid(pid: int) -> Usage:
    """Usage of another process (fields 14 and 15 of /proc/PID/stat; VmRSS)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    cpu = (int(fields[11]) + int(fields[12])) / _TICKS
    rss_kib = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss_kib = int(line.split()[1])
    return Usage(cpu_s=cpu, rss_mib=rss_kib / 1024)


def of_self() -> Usage:
    """This process: CPU so far and its peak RSS (ru_maxrss is KiB on Linux)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return Usage(cpu_s=usage.ru_utime + usage.ru_stime, rss_mib=usage.ru_maxrss / 1024)


def bytes_written_by_self() -> int:
    """Bytes this process has passed to write calls so far (`wchar` of /proc/self/io): on
    SQLite the WAL frames, the checkpoints' pages and the log."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    return 0
