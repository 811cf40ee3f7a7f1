"""What the ledger says about one dispatch, and the assertions an action's tests make on it.

The assertions raise `AssertionError` with the whole story in one message (status, result
code, attempt, the ledger's transitions), since no test runner rewrites them here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from qinglong_dispatcher.domain import dispatch_views, recovery, states


@dataclasses.dataclass(frozen=True, slots=True)
class Dispatched:
    """One dispatch as `dispatch show` reads it, in one transaction: the execution row, its
    ledger, the action receipt, and what recovery observed or resolved."""

    detail: dispatch_views.Detail

    @property
    def dispatch_id(self) -> str:
        """The dispatch id, also the idempotency key `execute` got."""
        return self.detail.dispatch.dispatch_id

    @property
    def status(self) -> str:
        """The effective status: what an operator sees (`recovery_required` included)."""
        return self.detail.execution.effective_status.value

    @property
    def result_code(self) -> str | None:
        """The last result code written (a release's, or the completion's)."""
        return self.detail.execution.result_code

    @property
    def attempts(self) -> int:
        """Claims that counted against the budget (a takeover before the barrier refunds)."""
        return self.detail.execution.attempt

    @property
    def executions(self) -> int:
        """How many times the start barrier committed: how often `execute` may have run."""
        to = states.EffectiveStatus.EXECUTING
        return sum(1 for event in self.detail.events if event.to_status is to)

    @property
    def receipt(self) -> Mapping[str, object] | None:
        """The action receipt committed with the completion, as JSON."""
        return self.detail.execution.receipt

    @property
    def observation(self) -> recovery.Observation | None:
        """The last reconcile pass's observation, while the dispatch awaits recovery."""
        return self.detail.observation

    @property
    def resolution(self) -> recovery.StoredResolution | None:
        """How recovery settled it (evidence or an operator), if it did."""
        return self.detail.resolution

    def story(self) -> str:
        """One line: status, code, attempt and every ledger transition."""
        steps = ", ".join(
            f"{e.from_status.value if e.from_status else '∅'}→{e.to_status.value}"
            + (f"({e.result_code})" if e.result_code else "")
            for e in self.detail.events
        )
        return (
            f"dispatch {self.dispatch_id}: {self.status}, code {self.result_code}, "
            f"attempt {self.attempts}; ledger: {steps}"
        )


def _fail(dispatched: Dispatched, expected: str) -> AssertionError:
    return AssertionError(f"expected {expected}; {dispatched.story()}")


def assert_status(
    dispatched: Dispatched,
    status: str,
    *,
    code: str | None = None,
    attempts: int | None = None,
) -> None:
    """The effective status is `status` and, when given, the result code and attempt too."""
    if dispatched.status != status:
        raise _fail(dispatched, f"status {status}")
    if code is not None and dispatched.result_code != code:
        raise _fail(dispatched, f"result code {code}")
    if attempts is not None and dispatched.attempts != attempts:
        raise _fail(dispatched, f"attempt {attempts}")


def assert_succeeded(
    dispatched: Dispatched, *, code: str | None = None, attempts: int | None = None
) -> None:
    """Succeeded (with `code` and `attempts` when given), its effect started exactly once."""
    assert_status(dispatched, states.EffectiveStatus.SUCCEEDED, code=code, attempts=attempts)
    if dispatched.executions != 1:
        raise _fail(dispatched, "exactly one start barrier")


def assert_failed(
    dispatched: Dispatched, *, code: str | None = None, attempts: int | None = None
) -> None:
    """Failed explicitly (with `code` and `attempts` when given)."""
    assert_status(dispatched, states.EffectiveStatus.FAILED, code=code, attempts=attempts)


def assert_receipt(dispatched: Dispatched, expected: Mapping[str, object] | None) -> None:
    """The action receipt committed with the completion is exactly `expected`."""
    found = None if dispatched.receipt is None else dict(dispatched.receipt)
    wanted = None if expected is None else dict(expected)
    if found != wanted:
        raise _fail(dispatched, f"receipt {wanted!r}, not {found!r}")


def assert_settled_by_evidence(dispatched: Dispatched) -> None:
    """Recovery settled it as succeeded on the evidence provider's verified digest."""
    assert_status(dispatched, states.EffectiveStatus.SUCCEEDED)
    resolution = dispatched.resolution
    if (
        resolution is None
        or resolution.source is not recovery.Source.EVIDENCE
        or resolution.evidence_digest is None
    ):
        raise _fail(dispatched, f"a resolution by evidence, not {resolution!r}")


def assert_recovery_required(
    dispatched: Dispatched, *, outcome: str | None = None, reason: str | None = None
) -> None:
    """Left to an operator: `recovery_required`, and when given the last observation's
    outcome (`missing`, `conflict`, `unavailable`) and reason code."""
    assert_status(dispatched, states.EffectiveStatus.RECOVERY_REQUIRED)
    if outcome is None and reason is None:
        return
    seen = dispatched.observation
    if seen is None:
        raise _fail(dispatched, "an observation by a reconcile pass")
    if outcome is not None and seen.outcome.value != outcome:
        raise _fail(dispatched, f"observation {outcome}, not {seen.outcome.value}")
    if reason is not None and seen.reason_code != reason:
        raise _fail(dispatched, f"observation reason {reason}, not {seen.reason_code}")
