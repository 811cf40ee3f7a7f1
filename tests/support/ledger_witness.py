"""Reading an edge file's ledger as it is written, so that its checks survive retention.

The daemon prunes finished dispatch trees (their execution events and receipts with them) once
they are older than the retention. A check made at the end would see only the last minutes;
`Witness` instead reads every new ledger line and receipt on a cadence shorter than the
retention, so each line is read at least once before it can be pruned, and keeps per dispatch
what the strict checks need: the chain of status changes, the starts, the receipt.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path

from qinglong_dispatcher.domain.states import ExecutionStatus

EXECUTING = ExecutionStatus.EXECUTING.value
SUCCEEDED = ExecutionStatus.SUCCEEDED.value
PENDING = ExecutionStatus.PENDING.value
LEASED = ExecutionStatus.LEASED.value


@dataclasses.dataclass(slots=True)
class Chain:
    """One dispatch's ledger as read so far."""

    last: str
    events: int = 1
    starts: int = 0
    claims: int = 0
    start_attempt: int | None = None
    broken: str | None = None
    """The first line that did not follow the previous one (a line was missed or is wrong)."""


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What the whole ledger, the Runs and the receipts say about the submitted dispatches."""

    succeeded: int
    taken_over: int
    """Dispatches claimed more than once: a killed daemon's lease, taken over after it expired."""
    problems: list[str]


class Witness:
    """Reads of `execution_events` and `approved_run_action_receipts`, each line taken once.

    Lines are known by their unique keys ((dispatch, version) and the dispatch), not by rowid:
    once pruning has removed every finished tree, including the one holding the highest
    rowid, SQLite hands out rowids below ones already read (a page stranded by a kill and
    taken over after the rest was pruned did exactly that). The tables hold one retention's
    worth of rows, so each poll reads them whole. A line missed anyway shows as a broken chain
    or a missing dispatch: the check fails, it cannot pass by accident.
    """

    def __init__(self, path: Path) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA busy_timeout = 5000")
        self._seen_events: set[tuple[str, int]] = set()
        self.chains: dict[str, Chain] = {}
        self.receipts: dict[str, tuple[str, int]] = {}
        """dispatch id → (resource id, execution attempt)."""
        self._last_poll: float | None = None
        self.max_gap_s = 0.0
        """The longest time between two reads: below the retention, nothing went unread."""

    def close(self) -> None:
        self._conn.close()

    def poll(self) -> None:
        """Read every line and receipt committed since the last poll, from one snapshot."""
        started = time.monotonic()
        if self._last_poll is not None:
            self.max_gap_s = max(self.max_gap_s, started - self._last_poll)
        self._last_poll = started
        conn = self._conn
        conn.execute("BEGIN")
        try:
            events = conn.execute(
                "SELECT version, dispatch_id, from_status, to_status, attempt "
                "FROM execution_events ORDER BY dispatch_id, version"
            ).fetchall()
            receipts = conn.execute(
                "SELECT rowid, dispatch_id, resource_id, execution_attempt "
                "FROM approved_run_action_receipts"
            ).fetchall()
        finally:
            conn.execute("COMMIT")
        self._take_events(
            event for event in events if (event[1], event[0]) not in self._seen_events
        )
        for _, dispatch_id, resource_id, attempt in receipts:
            seen = self.receipts.get(dispatch_id)
            if seen is None:
                self.receipts[dispatch_id] = (resource_id, attempt)
            elif seen != (resource_id, attempt):
                self.receipts[dispatch_id] = ("<two receipts>", -1)

    def _take_events(self, events: Iterable[tuple[int, str, str | None, str, int]]) -> None:
        for version, dispatch_id, before, after, attempt in events:
            self._seen_events.add((dispatch_id, version))
            chain = self.chains.get(dispatch_id)
            if chain is None:
                chain = self.chains[dispatch_id] = Chain(last=after)
                if (before, after) != (None, PENDING):
                    chain.broken = f"first line {before} → {after}"
            else:
                chain.events += 1
                if before != chain.last and chain.broken is None:
                    chain.broken = f"{before} → {after} after {chain.last}"
                chain.last = after
            # A passage (`pending → succeeded`) is a claim and a start at once.
            passage = (before, after) == (PENDING, SUCCEEDED)
            if after == LEASED or passage:
                chain.claims += 1
            if after == EXECUTING or passage:
                chain.starts += 1
                chain.start_attempt = attempt

    def verdict(self, submitted: Iterable[str], runs: dict[str, list[str]]) -> Verdict:
        """The strict checks of the SIGKILL tests, over everything read.

        0 duplicates: one `→ executing` (or passage) line per dispatch, one Run per dispatch,
        one receipt naming that Run and the started attempt. 0 lost: every submitted
        dispatch's ledger is whole and ends `succeeded`, and nothing else is in the file.
        """
        problems: list[str] = []
        wanted = set(submitted)
        for dispatch_id in sorted(wanted):
            chain = self.chains.get(dispatch_id)
            if chain is None:
                problems.append(f"{dispatch_id}: no ledger line read")
                continue
            if chain.broken is not None:
                problems.append(f"{dispatch_id}: ledger broken: {chain.broken}")
            if chain.starts != 1:
                problems.append(f"{dispatch_id}: started {chain.starts} times")
            if chain.last != SUCCEEDED:
                problems.append(f"{dispatch_id}: ends {chain.last}")
            its_runs = runs.get(dispatch_id, [])
            if len(its_runs) != 1:
                problems.append(f"{dispatch_id}: {len(its_runs)} Runs")
            elif self.receipts.get(dispatch_id) != (its_runs[0], chain.start_attempt):
                problems.append(
                    f"{dispatch_id}: receipt {self.receipts.get(dispatch_id)} for Run "
                    f"{its_runs[0]} started at attempt {chain.start_attempt}"
                )
        strangers = (set(self.chains) | set(runs)) - wanted
        problems.extend(f"{d}: in the file but never submitted" for d in sorted(strangers))
        succeeded = sum(1 for d in wanted if d in self.chains and self.chains[d].last == SUCCEEDED)
        taken_over = sum(1 for chain in self.chains.values() if chain.claims > 1)
        return Verdict(succeeded=succeeded, taken_over=taken_over, problems=problems)


def runs_by_key(path: Path) -> dict[str, list[str]]:
    """Every Run of the file by its idempotency key (the dispatch id); Runs are never pruned."""
    conn = sqlite3.connect(path)
    try:
        by_key: dict[str, list[str]] = {}
        for key, run_id in conn.execute("SELECT idempotency_key, run_id FROM runs"):
            by_key.setdefault(key, []).append(run_id)
        return by_key
    finally:
        conn.close()


def integrity(path: Path) -> str:
    """`PRAGMA integrity_check` of the whole file: `ok`, or what is wrong."""
    conn = sqlite3.connect(path)
    try:
        return "; ".join(str(row[0]) for row in conn.execute("PRAGMA integrity_check"))
    finally:
        conn.close()


def file_bytes(path: Path) -> tuple[int, int]:
    """The sizes of the file and of its write-ahead log."""
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size, (wal.stat().st_size if wal.exists() else 0)


def _one(path: Path, sql: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(sql).fetchone()[0])
    finally:
        conn.close()


def trees(path: Path) -> int:
    """Dispatch trees still in the file (retention prunes a finished tree whole)."""
    return _one(path, "SELECT count(*) FROM approved_action_dispatches")


def unfinished(path: Path) -> int:
    """Executions not in a terminal state (due, leased, waiting for a retry, or executing)."""
    return _one(
        path,
        "SELECT count(*) FROM approved_action_dispatch_executions "
        "WHERE status NOT IN ('succeeded', 'failed', 'blocked', 'cancelled')",
    )


def free_bytes(path: Path) -> int:
    """Pages the file holds but nothing uses (pruned and not yet given back)."""
    return _one(path, "PRAGMA freelist_count") * _one(path, "PRAGMA page_size")
