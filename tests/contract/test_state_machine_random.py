"""Random sequences of every execution operation from two owners, checked against a model."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import itertools
import os
import time
from collections.abc import Awaitable, Iterator
from typing import Any, ClassVar, TypeVar

import hypothesis
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from qinglong_dispatcher import api
from qinglong_dispatcher.domain import errors, fencing, records, recovery, states
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import ExecutionStatus
from qinglong_dispatcher.recovery import reconciler
from tests.support import direct_sql, random_machine, stores
from tests.support.actions import submit_runs
from tests.support.clock import START_MS, ManualClock
from tests.support.random_machine import LEASE_MS, Expected, Row

T = TypeVar("T")

# CI runs a bounded search (≈10–20 s a dialect); QINGLONG_STATEFUL_EXAMPLES and
# QINGLONG_STATEFUL_STEPS ask for a longer one.
EXAMPLES = int(os.environ.get("QINGLONG_STATEFUL_EXAMPLES") or 60)
STEPS = int(os.environ.get("QINGLONG_STATEFUL_STEPS") or 60)
LONG_RUN = "QINGLONG_STATEFUL_EXAMPLES" in os.environ

WINDOW_MS = 10_000_000
"""Each example lives in its own slice of time, below the previous example's (see `Session`)."""
ADVANCES = (1, 999, 1_000, 15_000, 29_999, 30_000, 30_001, 60_000)
WALL_SLACK_MS = 2_000
"""Ledger times come from the database clock: the wall clock, within the skew guard's default."""

OWNER = st.sampled_from(random_machine.OWNERS)
INDEX = st.integers(0, random_machine.DISPATCHES - 1)
ANSWER = st.sampled_from(random_machine.EVIDENCE_ANSWERS)
# A blocked release ends a row's life: give the kinds that keep it going more weight.
RELEASE_KIND = st.sampled_from(
    [states.ReleaseKind.YIELD, states.ReleaseKind.RETRY] * 2 + [states.ReleaseKind.BLOCKED]
)


def wall_ms() -> int:
    """The system wall clock (never the manual clock the store is driven with)."""
    return time.time_ns() // 1_000_000


@dataclasses.dataclass
class Session:
    """One database per test; every example gets fresh dispatches in a fresh slice of time.

    Opening a PostgreSQL database per example costs a template clone and two pools, so the
    examples share one. They cannot see each other: example n runs its clock in
    [START_MS - n·WINDOW, START_MS - (n-1)·WINDOW), and every time a row of an earlier example
    can be due at, or expire at, lies above that, so no claim page and no recovery page of a
    later example reaches it (the due scan is `eligible_at_ms <= now`, recovery
    `lease_expires_at_ms <= now`).
    """

    runner: asyncio.Runner
    harness: stores.Harness
    sql: direct_sql.DirectSql
    """Reads and tries writes past the store."""
    examples: Iterator[int] = dataclasses.field(default_factory=lambda: itertools.count(1))

    def run(self, awaitable: Awaitable[T]) -> T:
        """Drive one store call to its end on the session's event loop."""

        async def wrapped() -> T:
            return await awaitable

        return self.runner.run(wrapped())


class ExecutionMachine(RuleBasedStateMachine):
    """Claims, starts, renews, releases, completions, clock moves, reconciles and resolutions."""

    session: ClassVar[Session]

    claims = Bundle("claims")
    started = Bundle("started")
    snapshots = Bundle("snapshots")

    def __init__(self) -> None:
        super().__init__()
        n = next(self.session.examples)
        self.h = self.session.harness
        self.clock = ManualClock(START_MS - n * WINDOW_MS)
        self.window_end = self.clock.now_ms() + WINDOW_MS
        self.evidence = random_machine.ScriptedEvidence()
        consumed = self.session.run(
            submit_runs(
                self.h.approver_store,
                self.clock,
                random_machine.DISPATCHES,
                project=f"sm-{n}",
                max_attempts=random_machine.MAX_ATTEMPTS,
            )
        )
        self.rows: list[Row] = []
        # Ordered by id, as equal due times are: rule arguments then mean the same rows in every
        # replay although the ids are random (otherwise hypothesis sees a flaky strategy).
        for each in sorted(consumed, key=lambda c: c.dispatch_id):
            dispatch = self.session.run(self.h.store.get_dispatch(each.dispatch_id))
            assert dispatch is not None
            self.rows.append(Row(dispatch=dispatch, eligible_at_ms=self.clock.now_ms()))
        self.by_id = {row.dispatch_id: row for row in self.rows}
        self.tokens: dict[tuple[str, str], str] = {}
        """The last token each (dispatch, owner) claimed with."""
        self.fresh = itertools.count()
        self.checked_events = dict.fromkeys(self.by_id, 0)
        self.wall_from = wall_ms()

    def run(self, awaitable: Awaitable[T]) -> T:
        return self.session.run(awaitable)

    def now(self) -> int:
        return self.clock.now_ms()

    # -- claims --------------------------------------------------------------------------

    def _claimed(
        self, row: Row, claim: records.Claim, expected: Expected, *, owner: str, token: str | None
    ) -> list[records.Lease]:
        """Check one claim's result against the prediction and move the model on."""
        assert (claim.dispatch_id, claim.outcome, claim.reason) == (
            row.dispatch_id,
            expected.outcome,
            expected.reason,
        )
        hypothesis.event(f"claim {row.status.value}: {claim.outcome.value}")
        if claim.outcome is Outcome.REPLAYED:
            assert claim.lease == row.lease()
            return [claim.lease]
        if claim.outcome is not Outcome.CLAIMED:
            row.apply_claim(claim.outcome, now_ms=self.now(), owner=owner, token="")
            assert claim.lease is None
            return []
        assert claim.lease is not None
        assert claim.dispatch == row.dispatch
        if token is not None:
            assert claim.lease.token == token
        else:  # the store's own tokens are never reused for a row
            assert claim.lease.token not in {
                t for (d, _), t in self.tokens.items() if d == row.dispatch_id
            }
        row.apply_claim(Outcome.CLAIMED, now_ms=self.now(), owner=owner, token=claim.lease.token)
        assert claim.lease == row.lease()
        self.tokens[(row.dispatch_id, owner)] = claim.lease.token
        return [claim.lease]

    @rule(target=claims, owner=OWNER, limit=st.integers(1, random_machine.DISPATCHES))
    def claim_due(self, owner: str, limit: int) -> Any:
        now = self.now()
        due = sorted(
            (r for r in self.rows if r.eligible_at_ms is not None and r.eligible_at_ms <= now),
            key=lambda r: (r.eligible_at_ms, r.dispatch_id),
        )[:limit]
        predicted = [r.predict_claim(now_ms=now, owner=owner, token=None) for r in due]
        batch = self.run(
            self.h.store.claim_due(now_ms=now, owner=owner, limit=limit, lease_ms=LEASE_MS)
        )
        assert batch.observed == len(due)
        assert [c.dispatch_id for c in batch.claims] == [r.dispatch_id for r in due]
        leases: list[records.Lease] = []
        for row, claim, expected in zip(due, batch.claims, predicted, strict=True):
            leases += self._claimed(row, claim, expected, owner=owner, token=None)
        return multiple(*leases)

    @rule(
        target=claims,
        owner=OWNER,
        index=INDEX,
        which=st.sampled_from(["fresh", "mine", "theirs"]),
    )
    def claim_one(self, owner: str, index: int, which: str) -> Any:
        row = self.rows[index]
        other = next(o for o in random_machine.OWNERS if o != owner)
        token = {
            "mine": self.tokens.get((row.dispatch_id, owner)),
            "theirs": self.tokens.get((row.dispatch_id, other)),
        }.get(which) or f"tok-{next(self.fresh)}-{owner}"
        expected = row.predict_claim(now_ms=self.now(), owner=owner, token=token)
        claim = self.run(
            self.h.store.claim(
                row.dispatch_id, now_ms=self.now(), owner=owner, token=token, lease_ms=LEASE_MS
            )
        )
        return multiple(*self._claimed(row, claim, expected, owner=owner, token=token))

    # -- the barrier and renewals --------------------------------------------------------

    def _start(self, requests: list[records.StartRequest]) -> list[records.ExecutionIdentity]:
        now = self.now()
        results = self.run(self.h.store.start(requests, now_ms=now, lease_ms=LEASE_MS))
        assert [r.dispatch_id for r in results] == [q.lease.dispatch_id for q in requests]
        identities = []
        # One transaction, item after item: each prediction sees the items before it.
        for request, result in zip(requests, results, strict=True):
            row = self.by_id[request.lease.dispatch_id]
            if request.approval_request_id != row.dispatch.approval_request_id:
                expected = Expected(Outcome.CONFLICT, "approval_mismatch")
            elif request.action_digest != row.dispatch.action_digest:
                expected = Expected(Outcome.CONFLICT, "digest_mismatch")
            else:
                expected = row.predict_start(request.lease, now_ms=now)
            if result.identity is not None:
                # Whoever asks and however often: one started identity per dispatch, ever.
                got = result.identity
                row.starters.add((got.owner, got.token, got.attempt, got.started_at_ms))
                assert len(row.starters) == 1, row.starters
            assert (result.outcome, result.reason) == (expected.outcome, expected.reason)
            hypothesis.event(f"start: {result.outcome.value} {result.reason or ''}")
            if result.outcome is Outcome.STARTED:
                row.apply_start(now_ms=now)
            if result.outcome in (Outcome.STARTED, Outcome.REPLAYED):
                assert result.identity == row.identity()
                identities.append(result.identity)
            else:
                assert result.identity is None
        return identities

    def _request(self, lease: records.Lease, tamper: str | None = None) -> records.StartRequest:
        dispatch = self.by_id[lease.dispatch_id].dispatch
        return records.StartRequest(
            lease=lease,
            approval_request_id="a-forged"
            if tamper == "approval"
            else dispatch.approval_request_id,
            action_digest="0" * 64 if tamper == "digest" else dispatch.action_digest,
        )

    @rule(target=started, lease=consumes(claims))
    def start(self, lease: records.Lease) -> Any:
        return multiple(*self._start([self._request(lease)]))

    @rule(
        target=started,
        first=claims,
        second=claims,
        forged=st.sampled_from([None, None, "approval", "digest"]),
    )
    def start_page(self, first: records.Lease, second: records.Lease, forged: str | None) -> Any:
        # Several items in one call take the diagnosing transaction on PostgreSQL; the leases
        # stay in the bundle, so later starts with them replay (or find them stale). A second
        # item bound to another approval or plan never starts, whatever its fence.
        requests = [self._request(first), self._request(second, forged)]
        return multiple(*self._start(requests))

    def _renew(self, lease: records.Lease) -> records.Lease | None:
        row = self.by_id[lease.dispatch_id]
        expected = row.predict_renew(lease, now_ms=self.now())
        renewal = self.run(self.h.store.renew(lease, now_ms=self.now(), lease_ms=LEASE_MS))
        assert (renewal.outcome, renewal.reason) == (expected.outcome, expected.reason)
        hypothesis.event(
            f"renew {row.status.value}: {renewal.outcome.value} {renewal.reason or ''}"
        )
        if renewal.outcome is not Outcome.RENEWED:
            assert renewal.lease is None
            return None
        row.apply_renew(now_ms=self.now())
        assert renewal.lease == row.lease()
        return renewal.lease

    @rule(target=claims, lease=claims)
    def renew_claim(self, lease: records.Lease) -> Any:
        renewed = self._renew(lease)
        return multiple() if renewed is None else renewed

    @rule(target=started, identity=started)
    def renew_started(self, identity: records.ExecutionIdentity) -> Any:
        renewed = self._renew(identity.as_lease())
        if renewed is None:
            return multiple()
        return dataclasses.replace(
            identity, version=renewed.version, lease_expires_at_ms=renewed.expires_at_ms
        )

    # -- releases and completions --------------------------------------------------------

    @rule(lease=claims, kind=RELEASE_KIND)
    def release(self, lease: records.Lease, kind: states.ReleaseKind) -> None:
        row = self.by_id[lease.dispatch_id]
        mutation_id = fencing.release_mutation_id(lease)
        expected = row.predict_release(lease, kind, mutation_id)
        done = self.run(
            self.h.store.release_preflight(
                lease,
                mutation_id=mutation_id,
                kind=kind,
                result_code=random_machine.RELEASE_CODES[kind],
                retry_at_ms=self.now() + random_machine.RETRY_BACKOFF_MS,
                now_ms=self.now(),
            )
        )
        assert (done.outcome, done.reason, done.status, done.version) == (
            expected.outcome,
            expected.reason,
            expected.status,
            expected.version,
        )
        hypothesis.event(f"release {kind.value}: {done.outcome.value} {done.reason or ''}")
        if done.outcome is Outcome.RELEASED:
            row.apply_release(lease, kind, mutation_id, now_ms=self.now())

    @rule(identity=started, completion=st.sampled_from(states.Completion))
    def complete(self, identity: records.ExecutionIdentity, completion: states.Completion) -> None:
        row = self.by_id[identity.dispatch_id]
        expected = row.predict_complete(identity, completion)
        code = random_machine.COMPLETE_CODES[completion]
        done = self.run(
            self.h.store.complete(
                identity,
                mutation_id=random_machine.complete_mutation_id(identity),
                completion=completion,
                result_code=code,
                now_ms=self.now(),
            )
        )
        assert (done.outcome, done.reason, done.status, done.version) == (
            expected.outcome,
            expected.reason,
            expected.status,
            expected.version,
        )
        hypothesis.event(f"complete: {done.outcome.value} {done.reason or ''}")
        if done.outcome is Outcome.COMPLETED:
            target = ExecutionStatus(completion.value)
            row.apply_terminal(target, random_machine.complete_mutation_id(identity), code)

    # -- time and recovery ---------------------------------------------------------------

    @precondition(lambda self: self.clock.now_ms() + max(ADVANCES) < self.window_end - LEASE_MS)
    @rule(step=st.sampled_from(["lease_edge", "past_lease_edge", *ADVANCES]))
    def advance_clock(self, step: int | str) -> None:
        if isinstance(step, int):
            self.clock.advance(ms=step)
            return
        # The boundary itself: a lease is live up to its last millisecond and expired at it.
        held = (ExecutionStatus.LEASED, ExecutionStatus.EXECUTING)
        ahead = [
            r.expires_at_ms
            for r in self.rows
            if r.status in held and r.expires_at_ms is not None and r.expires_at_ms > self.now()
        ]
        if ahead:
            edge = min(ahead)
            self.clock.ms = edge if step == "past_lease_edge" else edge - 1

    def executing(self) -> bool:
        """Recovery rules only do something once a row started: don't spend steps before."""
        return any(r.status is ExecutionStatus.EXECUTING for r in self.rows)

    @precondition(executing)
    @rule(
        answers=st.lists(
            ANSWER, min_size=random_machine.DISPATCHES, max_size=random_machine.DISPATCHES
        )
    )
    def reconcile(self, answers: list[str]) -> None:
        now = self.now()
        self.evidence.answers = {r.dispatch_id: a for r, a in zip(self.rows, answers, strict=True)}
        due = sorted(
            (r for r in self.rows if r.recovery_required(now)),
            key=lambda r: (r.expires_at_ms, r.dispatch_id),
        )
        expected: collections.Counter[str] = collections.Counter()
        for row in due:
            answer = self.evidence.answers.get(row.dispatch_id, "missing")
            expected["resolved_succeeded" if answer == "verified" else answer] += 1
        the_reconciler = reconciler.Reconciler(
            self.h.store, {self.evidence.action_type: self.evidence}, self.clock
        )
        report = self.run(the_reconciler.reconcile_pass())
        assert (report.observed, report.outcomes) == (len(due), expected)
        for outcome in report.outcomes:
            hypothesis.event(f"reconcile: {outcome}")
        for row in due:
            if self.evidence.answers.get(row.dispatch_id) == "verified":
                row.apply_terminal(
                    ExecutionStatus.SUCCEEDED,
                    random_machine.recovery_mutation_id(row),
                    "evidence_verified",
                )
                stored = self.run(self.h.store.get_resolution(row.dispatch_id))
                assert stored is not None
                assert (stored.source, stored.evidence_digest) == (
                    recovery.Source.EVIDENCE,
                    random_machine.evidence_digest(row.dispatch_id),
                )

    @precondition(executing)
    @rule(index=INDEX, resolution=st.sampled_from(states.Completion))
    def resolve_manually(self, index: int, resolution: states.Completion) -> None:
        # One of the started rows: live ones must be refused, expired ones settle.
        started = [r for r in self.rows if r.status is ExecutionStatus.EXECUTING]
        row = started[index % len(started)]
        live = not row.recovery_required(self.now())
        hypothesis.event(f"resolve manually: {'refused' if live else 'settled'}")
        if live:
            with pytest.raises(errors.RecoveryRefused):
                self.run(
                    api.resolve_manually(
                        self.h.operator_store,
                        self.clock,
                        row.dispatch_id,
                        resolution=resolution,
                        operator="oncall-1",
                        reason="checked_downstream",
                    )
                )
            return
        done = self.run(
            api.resolve_manually(
                self.h.operator_store,
                self.clock,
                row.dispatch_id,
                resolution=resolution,
                operator="oncall-1",
                reason="checked_downstream",
            )
        )
        target = ExecutionStatus(resolution.value)
        assert (done.outcome, done.status, done.version) == (
            Outcome.COMPLETED,
            target,
            row.version + 1,
        )
        row.apply_terminal(target, random_machine.recovery_mutation_id(row), "checked_downstream")

    @precondition(lambda self: any(r.recovery_required(self.now()) for r in self.rows))
    @rule(target=snapshots)
    def operator_lists_recovery(self) -> Any:
        now = self.now()
        page = self.run(self.h.operator_store.list_recovery_required(now_ms=now, limit=64))
        expected = sorted(
            (r for r in self.rows if r.recovery_required(now)),
            key=lambda r: (r.expires_at_ms, r.dispatch_id),
        )
        assert [s.dispatch.dispatch_id for s in page] == [r.dispatch_id for r in expected]
        assert [s.fence for s in page] == [r.identity() for r in expected]
        return multiple(*page)

    def _resolve_under(
        self, fence: records.ExecutionIdentity, resolution: states.Completion, label: str
    ) -> None:
        """An operator settles under `fence`; the store alone decides, on its own checks."""
        row = self.by_id[fence.dispatch_id]
        refusal = row.resolve_refusal(fence, now_ms=self.now())
        done = self.run(
            self.h.operator_store.resolve_recovery(
                recovery.Resolution(
                    fence=fence,
                    project_id=row.dispatch.project_id,
                    resolution=resolution,
                    source=recovery.Source.MANUAL,
                    evidence_digest=None,
                    resolved_by="oncall-2",
                    reason_code="fence_checked",
                ),
                now_ms=self.now(),
            )
        )
        hypothesis.event(f"resolve {label}: {done.outcome.value} {done.reason or ''}")
        if refusal is not None:
            assert (done.outcome, done.reason, done.status) == (
                Outcome.CONFLICT,
                refusal,
                row.status,
            )
            return
        target = ExecutionStatus(resolution.value)
        assert (done.outcome, done.status, done.version) == (
            Outcome.COMPLETED,
            target,
            row.version + 1,
        )
        row.apply_terminal(target, random_machine.recovery_mutation_id(row), "fence_checked")

    @rule(snapshot=snapshots, resolution=st.sampled_from(states.Completion))
    def resolve_snapshot(self, snapshot: recovery.Snapshot, resolution: states.Completion) -> None:
        # A snapshot taken earlier: a late completion or another resolution may have won since.
        self._resolve_under(snapshot.fence, resolution, "snapshot")

    @rule(identity=started, resolution=st.sampled_from(states.Completion))
    def resolve_started(
        self, identity: records.ExecutionIdentity, resolution: states.Completion
    ) -> None:
        # A fence read while the execution may still be live (or renewed since): only an
        # expired lease with the very same fence may be settled.
        self._resolve_under(identity, resolution, "started")

    # -- the database's own guard ---------------------------------------------------------

    @rule(index=INDEX, to=st.sampled_from(ExecutionStatus))
    def direct_sql_update(self, index: int, to: ExecutionStatus) -> None:
        # Past the store: migration 0006's triggers alone must allow exactly the domain's row
        # updates (`states.ROW_UPDATES`), and refuse the rest for that reason.
        row = self.run(self.h.store.get_execution(self.rows[index].dispatch_id))
        assert row is not None
        sql = direct_sql.transition_sql(self.h.dialect, row, to, now_ms=self.now())
        refused = self.run(self.session.sql.try_update(sql))
        expected = direct_sql.expected_refusal(row, to)
        hypothesis.event(f"direct sql {row.status.value} -> {to.value}: {expected or 'accepted'}")
        assert direct_sql.refusal_rule(refused) == expected, (row.status, to, refused)

    # -- invariants ----------------------------------------------------------------------

    async def _read_all(
        self,
    ) -> tuple[dict[str, records.Execution], dict[str, list[records.ExecutionEvent]]]:
        """Every row and ledger event of this example, in two queries straight from the tables."""
        sql = self.session.sql
        ids = ", ".join(f"'{row.dispatch_id}'" for row in self.rows)
        stored = await sql.fetch(
            f"SELECT * FROM {sql.table('approved_action_dispatch_executions')} "
            f"WHERE dispatch_id IN ({ids})"
        )
        ledger = await sql.fetch(
            f"SELECT * FROM {sql.table('execution_events')} WHERE dispatch_id IN ({ids}) "
            "ORDER BY dispatch_id, version"
        )
        events: dict[str, list[records.ExecutionEvent]] = {row.dispatch_id: [] for row in self.rows}
        for line in ledger:
            events[line["dispatch_id"]].append(records.ExecutionEvent.from_row(line))
        return {r["dispatch_id"]: records.Execution.from_row(r) for r in stored}, events

    def _check_row(
        self,
        row: Row,
        stored: records.Execution,
        events: list[records.ExecutionEvent],
        wall_to: int,
    ) -> None:
        # The database holds what the model predicts.
        assert (stored.status, stored.version, stored.attempt, stored.eligible_at_ms) == (
            row.status,
            row.version,
            row.attempt,
            row.eligible_at_ms,
        )
        if row.status in (ExecutionStatus.LEASED, ExecutionStatus.EXECUTING):
            assert (stored.lease_owner, stored.lease_token, stored.lease_expires_at_ms) == (
                row.owner,
                row.token,
                row.expires_at_ms,
            )
        if row.status is ExecutionStatus.EXECUTING:
            assert stored.started_at_ms == row.started_at_ms
        # Exactly one ledger event per status change, none for a renew.
        assert len(events) == row.events, [(e.from_status, e.to_status) for e in events]
        assert (events[0].from_status, events[0].to_status) == (None, ExecutionStatus.PENDING)
        for before, after in itertools.pairwise(events):
            assert after.from_status is before.to_status  # contiguous
            assert after.version > before.version
            assert before.to_status not in states.TERMINAL  # nothing leaves a terminal state
        for each in events:
            assert states.is_allowed(each.from_status, each.to_status), each
        assert events[-1].to_status is stored.status
        assert stored.version == events[-1].version + row.renews_since_event
        starts = [e for e in events if e.to_status is ExecutionStatus.EXECUTING]
        assert len(starts) <= 1, starts  # at most one started attempt ever executes
        # New events carry the database's clock (this machine's wall clock), not the test's.
        for each in events[self.checked_events[row.dispatch_id] :]:
            assert self.wall_from - WALL_SLACK_MS <= each.committed_at_ms <= wall_to, each
        self.checked_events[row.dispatch_id] = len(events)

    @invariant()
    def store_ledger_and_model_agree(self) -> None:
        wall_to = wall_ms() + WALL_SLACK_MS
        stored, events = self.run(self._read_all())
        for row in self.rows:
            self._check_row(row, stored[row.dispatch_id], events[row.dispatch_id], wall_to)
        self.wall_from = wall_ms()


SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,  # real database round trips; their latency is not the property
    print_blob=True,
)


@contextlib.contextmanager
def machine_for(dialect: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[type]:
    """The machine class bound to one fresh database of `dialect` and a private event loop."""
    with asyncio.Runner() as runner:
        stack = contextlib.AsyncExitStack()
        try:
            harness = runner.run(
                stack.enter_async_context(stores.open_harness(dialect, tmp_path_factory))
            )
            sql = runner.run(direct_sql.DirectSql.open(harness))
            stack.push_async_callback(sql.close)  # before the database goes
            session = Session(runner=runner, harness=harness, sql=sql)
            yield type(f"ExecutionMachine_{dialect}", (ExecutionMachine,), {"session": session})
        finally:
            runner.run(stack.aclose())


@pytest.mark.slow
# A pass takes well under a minute; the bound leaves room for hypothesis to shrink a failure
# (it stops shrinking after 300 s by itself), so a failing run reports its minimal sequence.
@pytest.mark.timeout(0 if LONG_RUN else 420)
@pytest.mark.parametrize("dialect", stores.DIALECTS)
def test_random_operation_sequences_keep_the_state_machine(
    dialect: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # A plain def: hypothesis drives the machine synchronously; each rule runs its coroutines
    # on the machine's own event loop (pytest-asyncio has none running here).
    with machine_for(dialect, tmp_path_factory) as machine:
        run_state_machine_as_test(machine, settings=SETTINGS)
