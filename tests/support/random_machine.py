"""The model behind the randomized state-machine test: it predicts every store outcome itself.

The predictions follow docs/state-machine.md and docs/operations.md as written, not
`domain.fencing`: a mutation of the fencing code must make the store and this model disagree.
Versions grow by one per write; the ledger gets one event per status change and none for a
renew.
"""

from __future__ import annotations

import dataclasses
import hashlib

from qinglong_dispatcher.domain import fencing, records, recovery, states
from qinglong_dispatcher.domain.records import Outcome
from qinglong_dispatcher.domain.states import ExecutionStatus

OWNERS = ("w1", "w2")
LEASE_MS = 30_000
RETRY_BACKOFF_MS = 1_000
MAX_ATTEMPTS = 3
DISPATCHES = 3

RELEASE_CODES = {
    states.ReleaseKind.RETRY: "transient",
    states.ReleaseKind.BLOCKED: "drift",
    states.ReleaseKind.YIELD: "shutdown",
    states.ReleaseKind.WAIT: "handler_missing",
}
COMPLETE_CODES = {
    states.Completion.SUCCEEDED: "ok",
    states.Completion.FAILED: "failed",
    states.Completion.BLOCKED: "indeterminate",
}
EVIDENCE_ANSWERS = ("verified", "missing", "conflict", "unavailable")


@dataclasses.dataclass(frozen=True)
class Expected:
    """A predicted typed result; `status`/`version` only where the store reports them."""

    outcome: Outcome
    reason: str | None = None
    status: ExecutionStatus | None = None
    version: int | None = None


@dataclasses.dataclass(frozen=True)
class Mutation:
    """What a ledger event written under a mutation id recorded."""

    to_status: ExecutionStatus
    result_code: str
    owner: str | None
    token: str | None
    version: int


@dataclasses.dataclass(kw_only=True)
class Row:
    """What the database must hold for one dispatch, and what its ledger must say."""

    dispatch: records.Dispatch
    status: ExecutionStatus = ExecutionStatus.PENDING
    version: int = 0
    attempt: int = 0
    takeovers: int = 0
    max_attempts: int = MAX_ATTEMPTS
    eligible_at_ms: int | None = None
    owner: str | None = None
    token: str | None = None
    expires_at_ms: int | None = None
    started_at_ms: int | None = None
    events: int = 1
    """Ledger events expected: the insert (`None → pending`) and one per status change."""
    renews_since_event: int = 0
    mutations: dict[str, Mutation] = dataclasses.field(default_factory=dict)
    starters: set[tuple[str, str, int, int]] = dataclasses.field(default_factory=set)
    """Every (owner, token, attempt, started_at) a start handed out: at most one, ever."""

    @property
    def dispatch_id(self) -> str:
        """The row's key."""
        return self.dispatch.dispatch_id

    def holds(self, owner: str, token: str, attempt: int) -> bool:
        """The fence without its version."""
        return (self.owner, self.token, self.attempt) == (owner, token, attempt)

    def lease(self) -> records.Lease:
        """The lease the row carries now."""
        assert self.owner is not None
        assert self.token is not None
        assert self.expires_at_ms is not None
        return records.Lease(
            dispatch_id=self.dispatch_id,
            attempt=self.attempt,
            owner=self.owner,
            token=self.token,
            version=self.version,
            expires_at_ms=self.expires_at_ms,
        )

    def identity(self) -> records.ExecutionIdentity:
        """The execution identity the row carries now."""
        lease = self.lease()
        assert self.started_at_ms is not None
        return records.ExecutionIdentity(
            dispatch_id=self.dispatch_id,
            attempt=lease.attempt,
            owner=lease.owner,
            token=lease.token,
            started_at_ms=self.started_at_ms,
            version=self.version,
            lease_expires_at_ms=lease.expires_at_ms,
        )

    def recovery_required(self, now_ms: int) -> bool:
        """Executing with an expired lease (the manual clock is behind the database's)."""
        return (
            self.status is ExecutionStatus.EXECUTING
            and self.expires_at_ms is not None
            and self.expires_at_ms <= now_ms
        )

    def _change(self, to: ExecutionStatus, *, eligible_at_ms: int | None) -> None:
        self.status = to
        self.version += 1
        self.events += 1
        self.renews_since_event = 0
        self.eligible_at_ms = eligible_at_ms

    # -- claim ---------------------------------------------------------------------------

    def predict_claim(self, *, now_ms: int, owner: str, token: str | None) -> Expected:
        """A claim by `owner`; `token` is the caller's (None for a due page: never a replay)."""
        if self.status not in states.DUE_STATES:
            started = self.status is ExecutionStatus.EXECUTING
            return Expected(Outcome.NOT_CLAIMABLE, "started" if started else "terminal")
        if (
            self.status is ExecutionStatus.LEASED
            and token is not None
            and (self.owner, self.token) == (owner, token)
            and self.expires_at_ms is not None
            and self.expires_at_ms > now_ms
        ):
            return Expected(Outcome.REPLAYED)
        assert self.eligible_at_ms is not None
        if self.eligible_at_ms > now_ms:
            live = self.status is ExecutionStatus.LEASED
            return Expected(Outcome.LIVE_LEASE if live else Outcome.NOT_DUE)
        if self.status is ExecutionStatus.LEASED:  # a takeover refunds the dead claim
            if self.takeovers >= states.max_takeovers(self.max_attempts):
                return Expected(Outcome.EXHAUSTED, "takeovers_exhausted")
            return Expected(Outcome.CLAIMED)
        if self.attempt >= self.max_attempts:
            return Expected(Outcome.EXHAUSTED, "attempts_exhausted")
        return Expected(Outcome.CLAIMED)

    def apply_claim(self, outcome: Outcome, *, now_ms: int, owner: str, token: str) -> None:
        """The row after a claim the store agreed on."""
        if outcome is Outcome.CLAIMED:
            expires = now_ms + LEASE_MS
            if self.status is ExecutionStatus.LEASED:
                self.takeovers += 1
            else:
                self.attempt += 1
            self._change(ExecutionStatus.LEASED, eligible_at_ms=expires)
            self.owner, self.token, self.expires_at_ms = owner, token, expires
            self.started_at_ms = None
        elif outcome is Outcome.EXHAUSTED:
            self._change(ExecutionStatus.BLOCKED, eligible_at_ms=None)

    # -- start and renew -----------------------------------------------------------------

    def predict_start(self, lease: records.Lease, *, now_ms: int) -> Expected:
        """The start barrier for `lease` (binding already checked by the caller)."""
        holds = self.holds(lease.owner, lease.token, lease.attempt)
        if self.status is ExecutionStatus.EXECUTING and holds and self.version > lease.version:
            return Expected(Outcome.REPLAYED)
        if self.status is not ExecutionStatus.LEASED:
            return Expected(Outcome.CONFLICT, "not_leased")
        if not holds:
            return Expected(Outcome.CONFLICT, "lease_lost")
        if self.version != lease.version:
            return Expected(Outcome.CONFLICT, "stale_version")
        assert self.expires_at_ms is not None
        if self.expires_at_ms <= now_ms:
            return Expected(Outcome.EXPIRED, "lease_expired")
        return Expected(Outcome.STARTED)

    def apply_start(self, *, now_ms: int) -> None:
        """The barrier committed: executing, with a whole fresh lease ahead (never shorter)."""
        assert self.expires_at_ms is not None
        self._change(ExecutionStatus.EXECUTING, eligible_at_ms=None)
        self.started_at_ms = now_ms
        self.expires_at_ms = max(self.expires_at_ms, now_ms + LEASE_MS)

    def predict_renew(self, lease: records.Lease, *, now_ms: int) -> Expected:
        """A renew of `lease` (leased or started)."""
        if self.status not in (ExecutionStatus.LEASED, ExecutionStatus.EXECUTING):
            return Expected(Outcome.CONFLICT, "not_leased")
        if not self.holds(lease.owner, lease.token, lease.attempt):
            return Expected(Outcome.CONFLICT, "lease_lost")
        if self.version != lease.version:
            return Expected(Outcome.CONFLICT, "stale_version")
        assert self.expires_at_ms is not None
        if self.expires_at_ms <= now_ms:
            return Expected(Outcome.EXPIRED, "lease_expired")
        return Expected(Outcome.RENEWED)

    def apply_renew(self, *, now_ms: int) -> None:
        """A renew writes no ledger event: only the version and the lease move."""
        self.version += 1
        self.renews_since_event += 1
        self.expires_at_ms = now_ms + LEASE_MS
        if self.status is ExecutionStatus.LEASED:
            self.eligible_at_ms = self.expires_at_ms

    # -- release, complete, resolve ------------------------------------------------------

    def _replay(self, mutation_id: str, mutation: Mutation) -> Expected | None:
        seen = self.mutations.get(mutation_id)
        if seen is None:
            return None
        same = dataclasses.replace(mutation, version=seen.version) == seen
        return Expected(
            Outcome.EXISTING if same else Outcome.CONFLICT,
            None if same else "mutation_reused",
            seen.to_status,
            seen.version,
        )

    def release_target(self, kind: states.ReleaseKind, lease: records.Lease) -> ExecutionStatus:
        """Yield and wait go back to pending; a retry with budget left waits; the rest is
        blocked."""
        if kind is states.ReleaseKind.YIELD or kind is states.ReleaseKind.WAIT:
            return ExecutionStatus.PENDING
        if kind is states.ReleaseKind.RETRY and lease.attempt < self.max_attempts:
            return ExecutionStatus.RETRY_WAIT
        return ExecutionStatus.BLOCKED

    def predict_release(
        self, lease: records.Lease, kind: states.ReleaseKind, mutation_id: str
    ) -> Expected:
        """A pre-barrier release; a mutation id seen before replays (or conflicts) first."""
        target = self.release_target(kind, lease)
        mutation = Mutation(target, RELEASE_CODES[kind], lease.owner, lease.token, 0)
        replay = self._replay(mutation_id, mutation)
        if replay is not None:
            return replay
        if self.status is not ExecutionStatus.LEASED:
            return Expected(Outcome.CONFLICT, "not_leased")
        if not self.holds(lease.owner, lease.token, lease.attempt):
            return Expected(Outcome.CONFLICT, "lease_lost")
        if self.version != lease.version:
            return Expected(Outcome.CONFLICT, "stale_version")
        return Expected(Outcome.RELEASED, None, target, self.version + 1)

    def apply_release(
        self, lease: records.Lease, kind: states.ReleaseKind, mutation_id: str, *, now_ms: int
    ) -> None:
        """Released: yield and wait refund the attempt; a retry and a wait wait for the
        backoff."""
        target = self.release_target(kind, lease)
        wait = RETRY_BACKOFF_MS if kind is states.ReleaseKind.WAIT else 0
        eligible = {
            ExecutionStatus.PENDING: now_ms + wait,
            ExecutionStatus.RETRY_WAIT: now_ms + RETRY_BACKOFF_MS,
        }.get(target)
        self._change(target, eligible_at_ms=eligible)
        if target is ExecutionStatus.PENDING:
            self.attempt -= 1
        self.mutations[mutation_id] = Mutation(
            target, RELEASE_CODES[kind], lease.owner, lease.token, self.version
        )

    def predict_complete(
        self, identity: records.ExecutionIdentity, completion: states.Completion
    ) -> Expected:
        """A completion under `identity`: a grown version (a renew) is fine, nothing else is."""
        mutation_id = complete_mutation_id(identity)
        target = ExecutionStatus(completion.value)
        mutation = Mutation(target, COMPLETE_CODES[completion], identity.owner, identity.token, 0)
        replay = self._replay(mutation_id, mutation)
        if replay is not None:
            return replay
        if self.status is not ExecutionStatus.EXECUTING:
            return Expected(Outcome.CONFLICT, "not_executing")
        if (self.attempt, self.owner, self.token, self.started_at_ms) != (
            identity.attempt,
            identity.owner,
            identity.token,
            identity.started_at_ms,
        ):
            return Expected(Outcome.CONFLICT, "identity_mismatch")
        if self.version < identity.version:
            return Expected(Outcome.CONFLICT, "version_regressed")
        return Expected(Outcome.COMPLETED, None, target, self.version + 1)

    def apply_terminal(self, target: ExecutionStatus, mutation_id: str, result_code: str) -> None:
        """A completion or a resolution committed."""
        self._change(target, eligible_at_ms=None)
        self.mutations[mutation_id] = Mutation(
            target, result_code, self.owner, self.token, self.version
        )

    def resolve_refusal(self, fence: records.ExecutionIdentity, *, now_ms: int) -> str | None:
        """Why a resolution under `fence` may not commit (docs/operations.md), or None."""
        if self.status is not ExecutionStatus.EXECUTING:
            return "not_recovery_required"
        if not self.recovery_required(now_ms):
            return "lease_live"
        # The fence is (attempt, owner, token, started_at, version); the expiry is not in it.
        if (
            dataclasses.replace(self.identity(), lease_expires_at_ms=fence.lease_expires_at_ms)
            != fence
        ):
            return "fence_changed"
        return None


def complete_mutation_id(identity: records.ExecutionIdentity) -> str:
    """The dispatcher's completion mutation id (one per attempt)."""
    return fencing.mutation_id(identity.dispatch_id, identity.attempt, "complete")


def recovery_mutation_id(row: Row) -> str:
    """The resolution's mutation id (one per attempt)."""
    return fencing.mutation_id(row.dispatch_id, row.attempt, "recovery")


def evidence_digest(dispatch_id: str) -> str:
    """A well-formed (64 hex) evidence digest for a scripted verified answer."""
    return hashlib.sha256(dispatch_id.encode()).hexdigest()


class ScriptedEvidence:
    """The `run.create` evidence provider of the test: answers what the model scripted.

    It stands in for a receipt store, not for the database: the reconciler, its store calls
    and the resolution transaction are the real ones.
    """

    action_type = "run.create"

    def __init__(self) -> None:
        self.answers: dict[str, str] = {}

    async def evidence(self, snapshot: recovery.Snapshot) -> recovery.Evidence:
        """Verified, missing, conflict, or a failure to look (`unavailable`)."""
        dispatch_id = snapshot.dispatch.dispatch_id
        answer = self.answers.get(dispatch_id, "missing")
        if answer == "unavailable":
            raise ConnectionError("the receipt store did not answer")
        if answer == "verified":
            return recovery.Evidence(
                kind=recovery.EvidenceKind.VERIFIED_SUCCEEDED,
                evidence_digest=evidence_digest(dispatch_id),
            )
        return recovery.Evidence(kind=recovery.EvidenceKind(answer), reason=f"scripted_{answer}")
