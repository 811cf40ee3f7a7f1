"""Random sequences of every execution operation from two owners, checked against a model.

The rules here drive claims, starts, renewals, releases, completions, clock moves and direct
SQL; recovery's rules are `random_recovery.RecoveryRules`; the state, the invariant and the
session are `random_session`'s; the model that predicts each outcome is `random_machine`'s.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import hypothesis
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    consumes,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from qinglong_dispatcher.domain import cancels, fencing, records, states
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import ExecutionStatus
from tests.support import direct_sql, random_machine, random_recovery, random_session, stores
from tests.support.random_machine import LEASE_MS, Expected, Row
from tests.support.random_session import INDEX

ADVANCES = (1, 999, 1_000, 15_000, 29_999, 30_000, 30_001, 60_000)

OWNER = st.sampled_from(random_machine.OWNERS)
# A blocked release ends a row's life: give the kinds that keep it going more weight.
RELEASE_KIND = st.sampled_from(
    [states.ReleaseKind.YIELD, states.ReleaseKind.RETRY] * 2
    + [states.ReleaseKind.WAIT, states.ReleaseKind.BLOCKED]
)


class ExecutionMachine(random_recovery.RecoveryRules):
    """Claims, starts, renews, releases, completions, clock moves, reconciles and resolutions."""

    claims = random_session.CLAIMS
    started = random_session.STARTED

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
        observed = len(due)
        # A lease taken over before is claimed in a page of its own (a suspected poison pill).
        suspect = [
            i for i, r in enumerate(due) if r.status is ExecutionStatus.LEASED and r.takeovers
        ]
        due = due[: max(suspect[0], 1)] if suspect else due
        predicted = [r.predict_claim(now_ms=now, owner=owner, token=None) for r in due]
        batch = self.run(
            self.h.store.claim_due(now_ms=now, owner=owner, limit=limit, lease_ms=LEASE_MS)
        )
        assert batch.observed == observed
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

    # -- operators -------------------------------------------------------------------------

    @rule(index=INDEX)
    def operator_cancels(self, index: int) -> None:
        # Only a wait is cancelled; anything else is refused with its status, writing nothing.
        row = self.rows[index]
        request = cancels.Cancel(
            dispatch_id=row.dispatch_id, operator="oncall-1", reason_code="random"
        )
        done = self.run(self.h.operator_store.cancel_dispatch(request, now_ms=self.now()))
        hypothesis.event(f"cancel {row.status.value}: {done.outcome.value}")
        if row.status in states.CANCELLABLE:
            assert (done.outcome, done.status, done.version) == (
                Outcome.COMPLETED,
                ExecutionStatus.CANCELLED,
                row.version + 1,
            )
            row.apply_terminal(
                ExecutionStatus.CANCELLED, cancels.mutation_id(row.dispatch_id), "random"
            )
        else:
            assert (done.outcome, done.reason) == (Outcome.CONFLICT, row.status.value)

    # -- the database's own guard ---------------------------------------------------------

    @rule(index=INDEX, to=st.sampled_from(ExecutionStatus))
    def direct_sql_update(self, index: int, to: ExecutionStatus) -> None:
        # Past the store: migration 0006's triggers alone must allow exactly the domain's row
        # updates (`states.ROW_UPDATES`), and refuse the rest for that reason.
        row = self.run(self.h.store.get_execution(self.rows[index].dispatch_id))
        assert row is not None
        sql = direct_sql.transition_sql(self.h.dialect, row, to, now_ms=self.now())
        refused = self.run(self.session.sql.try_update(sql))
        expected = direct_sql.expected_refusal(row, to, self.h.dialect, now_ms=self.now())
        hypothesis.event(f"direct sql {row.status.value} -> {to.value}: {expected or 'accepted'}")
        assert direct_sql.refusal_rule(refused) == expected, (row.status, to, refused)


@pytest.mark.slow
# A pass takes well under a minute; the bound leaves room for hypothesis to shrink a failure
# (it stops shrinking after 300 s by itself), so a failing run reports its minimal sequence.
@pytest.mark.timeout(0 if random_session.LONG_RUN else 420)
@pytest.mark.parametrize("dialect", stores.DIALECTS)
def test_random_operation_sequences_keep_the_state_machine(
    dialect: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # A plain def: hypothesis drives the machine synchronously; each rule runs its coroutines
    # on the machine's own event loop (pytest-asyncio has none running here).
    with random_session.machine_for(ExecutionMachine, dialect, tmp_path_factory) as machine:
        run_state_machine_as_test(machine, settings=random_session.SETTINGS)
