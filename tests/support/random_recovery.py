"""The recovery rules of the randomized state-machine test: reconciles, listings, resolutions.

Once a row executes, its lease can expire; then only evidence (the real reconciler, with a
scripted provider) or an operator holding its exact fence may settle it (docs/operations.md). Each
rule drives the real store and checks its result against the model (`random_machine.Row`).
"""

from __future__ import annotations

import collections
from typing import Any

import hypothesis
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import multiple, precondition, rule

from qinglong_dispatcher import api
from qinglong_dispatcher.domain import errors, records, recovery, states
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import ExecutionStatus
from qinglong_dispatcher.recovery import reconciler
from tests.support import random_machine, random_session
from tests.support.random_session import INDEX

ANSWER = st.sampled_from(random_machine.EVIDENCE_ANSWERS)


class RecoveryRules(random_session.MachineBase):
    """Reconciles, operator listings and resolutions, live fences refused."""

    started = random_session.STARTED
    snapshots = random_session.SNAPSHOTS

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
