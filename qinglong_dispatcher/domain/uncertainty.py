"""Evidence of an uncertain outcome: what the daemon knew when it lost track of an effect, and
what recovery says about it, in words an operator can act on.

An execute that answers `uncertain` leaves its row to recovery (`ports.ExecuteKind`). What it
knew then (a command's exit code, signal, duration and redacted stderr head; an HTTP status or
transport error and how far the request got) is kept in the store beside the row, redacted by
the action itself, as canonical JSON within `MAX_EVIDENCE_BYTES`. The verdicts below turn a
recovery observation or resolution into a sentence: `missing` with `manual_only` means no
automatic evidence exists, never that the effect did not happen.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
from collections.abc import Mapping
from typing import Final

from qinglong_dispatcher.domain import canonical, errors, records, recovery

MAX_EVIDENCE_BYTES: Final = 16 * 1024
"""The cap of one evidence object as canonical JSON (the database checks it too)."""

TRUNCATED: Final = {"evidence": "too_large"}
"""What is kept when the action's evidence does not fit: its result code still says why."""

_LABELS: Final = {
    "exitCode": "exit code",
    "signal": "signal",
    "durationMs": "duration (ms)",
    "timedOut": "timed out",
    "stderrHead": "stderr (redacted head)",
    "stderrBytes": "stderr bytes",
    "stdoutBytes": "stdout bytes",
    "stderrDigest": "stderr digest",
    "stdoutDigest": "stdout digest",
    "truncated": "output truncated",
    "commandName": "command",
    "receiver": "receiver",
    "status": "HTTP status",
    "error": "transport error",
    "reached": "how far it got",
    "sends": "sends",
    "lastStep": "tool's last step",
}
"""How each member actions write reads for an operator; others are shown by their name."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class LostTrack:
    """What the lease holder writes when its execute answered `uncertain`."""

    identity: records.ExecutionIdentity
    result_code: str
    evidence: Mapping[str, object]

    def evidence_json(self) -> str:
        """The evidence as canonical JSON; `TRUNCATED` when it is not canonical or too large."""
        try:
            data = canonical.dumps(dict(self.evidence), max_bytes=MAX_EVIDENCE_BYTES)
        except errors.CanonicalJsonError:
            data = canonical.dumps(TRUNCATED)
        return data.decode("utf-8")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class UncertainOutcome:
    """A stored `uncertain_outcomes` row: what the daemon knew when it lost track."""

    attempt: int
    lease_owner: str
    result_code: str
    evidence: Mapping[str, object]
    recorded_at_ms: int

    @classmethod
    def from_row(cls, row: records.RowLike) -> UncertainOutcome:
        """A `select_uncertain_outcome` row (evidence that does not parse shows as empty)."""
        try:
            value = json.loads(row["evidence_json"])
        except ValueError:
            value = {}
        return cls(
            attempt=row["execution_attempt"],
            lease_owner=row["lease_owner"],
            result_code=row["result_code"],
            evidence=value if isinstance(value, dict) else {},
            recorded_at_ms=row["recorded_at_ms"],
        )

    def lines(self) -> tuple[tuple[str, str], ...]:
        """The evidence as (label, value) pairs, in the order the action wrote them."""
        return tuple((label(key), _text(value)) for key, value in self.evidence.items())

    def as_dict(self) -> dict[str, object]:
        """JSON members."""
        return {
            "attempt": self.attempt,
            "lease_owner": self.lease_owner,
            "result_code": self.result_code,
            "evidence": dict(self.evidence),
            "recorded_at_ms": self.recorded_at_ms,
        }


def label(key: str) -> str:
    """An evidence member's label for an operator."""
    return _LABELS.get(key, key)


def _text(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _utc(ms: int) -> str:
    at = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return at.strftime("%Y-%m-%d %H:%M:%SZ")


_OBSERVED: Final = {
    recovery.MANUAL_ONLY: "no automatic evidence for this action: check the target",
    "lookup_missing": "receiver says: it has no record of this key; check the target",
    "lookup_in_flight": "receiver says: still in progress; ask again before settling",
    "key_reused": "receiver says: this key was used for another request; check the target",
    "check_not_matched": "the command's check did not find the effect; check the target",
    "barrier_missing": "no start barrier: the tool never began; check the target",
    "file_missing": "the tool's file is not there; check the target",
    "receipt_missing": "no receipt: the Run was not created; check the target",
}


def observation_verdict(observation: recovery.Observation) -> str:
    """What the last recovery observation means, in an operator's words."""
    reason = observation.reason_code
    seen = f" (seen {observation.count}×, last {_utc(observation.last_seen_at_ms)})"
    if observation.outcome is recovery.ObservationOutcome.UNAVAILABLE:
        return f"could not ask for evidence ({reason}); the next pass asks again" + seen
    known = _OBSERVED.get(reason)
    if known is not None:
        return known + seen
    if observation.outcome is recovery.ObservationOutcome.CONFLICT:
        return f"the evidence contradicts this dispatch ({reason}); check the target" + seen
    return f"no evidence of the effect ({reason}); check the target" + seen


def resolution_verdict(resolution: recovery.StoredResolution, action_type: str) -> str:
    """How the row was settled, in an operator's words."""
    at = _utc(resolution.committed_at_ms)
    if resolution.source is recovery.Source.EVIDENCE:
        if action_type == "http.request":
            return f"receiver says: completed (verified at {at})"
        return f"evidence verified the effect: settled succeeded at {at}"
    return (
        f"settled {resolution.resolution.value} by {resolution.resolved_by} "
        f"(principal {resolution.principal}) at {at}: {resolution.reason_code}"
    )
