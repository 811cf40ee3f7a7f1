"""The JSON schemas of the OpenAPI document: the shapes the read endpoints answer with."""

from __future__ import annotations

from typing import Any, Final

from qinglong_dispatcher.domain import states
from qinglong_dispatcher.web import problems

ID: Final = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"}
MS: Final = {"type": "integer", "description": "Unix time in milliseconds"}
NULLABLE_STR: Final = {"type": ["string", "null"]}
NULLABLE_ID: Final = {**ID, "type": ["string", "null"]}
REQUESTED_AGAIN: Final = {
    "type": "array",
    "items": ID,
    "description": "the requests made again from it, oldest first (decision 0048)",
}
TARGET_WAIT: Final = {
    "description": "`waiting_for_target`: why a pending dispatch is not claimed (the one "
    "dispatch past its claim on the target: `held_by` one whose effect's outcome is unknown, "
    "recovery_required; `busy_by` one still live); null when it does not wait for its target",
    "oneOf": [
        {"type": "null"},
        {
            "type": "object",
            "required": ["target", "held_by"],
            "properties": {"target": ID, "held_by": ID},
            "additionalProperties": False,
        },
        {
            "type": "object",
            "required": ["target", "busy_by"],
            "properties": {"target": ID, "busy_by": ID},
            "additionalProperties": False,
        },
    ],
}
WAIT: Final = {
    "description": "why a pending dispatch is not claimed besides its target: `frozen_by` a "
    "freeze (`freeze_id`), or `not_before` its execution window's start; null when neither",
    "oneOf": [
        {"type": "null"},
        {
            "type": "object",
            "required": ["reason", "freeze_id", "not_before_ms"],
            "properties": {
                "reason": {"type": "string", "enum": ["frozen_by", "not_before"]},
                "freeze_id": {"type": ["integer", "null"]},
                "not_before_ms": {"type": ["integer", "null"]},
            },
            "additionalProperties": False,
        },
    ],
}
WINDOW: Final = {
    "description": "the execution window its policy gave it (Unix ms; null: open on that "
    "side); null without one",
    "oneOf": [
        {"type": "null"},
        {
            "type": "object",
            "required": ["not_before_ms", "not_after_ms"],
            "properties": {
                "not_before_ms": {"type": ["integer", "null"]},
                "not_after_ms": {"type": ["integer", "null"]},
            },
            "additionalProperties": False,
        },
    ],
}


def ref(name: str) -> dict[str, str]:
    """A reference to the schema `name`."""
    return {"$ref": f"#/components/schemas/{name}"}


def all_schemas() -> dict[str, Any]:
    statuses = [s.value for s in states.EffectiveStatus]
    summary = {
        "type": "object",
        "required": [
            "dispatch_id",
            "project_id",
            "action_type",
            "action_ref",
            "status",
            "attempt",
            "max_attempts",
            "created_at_ms",
            "updated_at_ms",
            "result_code",
            "target",
            "waiting_for_target",
            "wait",
        ],
        "properties": {
            "dispatch_id": ID,
            "project_id": ID,
            "action_type": ID,
            "action_ref": ID,
            "status": {"type": "string", "enum": statuses},
            "attempt": {"type": "integer"},
            "max_attempts": {"type": "integer"},
            "created_at_ms": MS,
            "updated_at_ms": MS,
            "result_code": NULLABLE_STR,
            "target": {**NULLABLE_ID, "description": "what the plan changes (its target)"},
            "waiting_for_target": TARGET_WAIT,
            "wait": WAIT,
        },
        "additionalProperties": False,
    }
    stored = [s.value for s in states.ExecutionStatus]
    count = {"type": "integer", "minimum": 0}
    nullable_ms = {"type": ["integer", "null"], "description": "Unix time in milliseconds"}
    execution: dict[str, Any] = {
        "status": {"type": "string", "enum": stored},
        "effective_status": {"type": "string", "enum": statuses},
        "version": {"type": "integer"},
        "attempt": {"type": "integer"},
        "max_attempts": {"type": "integer"},
        "takeovers": {
            **count,
            "description": "expired leases taken over before the start barrier "
            "(refunded claims, not failures)",
        },
        "max_takeovers": {
            **count,
            "description": f"the takeover budget ({states.TAKEOVERS_PER_ATTEMPT} * "
            "max_attempts); past it the dispatch is blocked `takeovers_exhausted`",
        },
        "eligible_at_ms": nullable_ms,
        "retry_at_ms": nullable_ms,
        "lease_owner": NULLABLE_STR,
        "lease_expires_at_ms": nullable_ms,
        "started_at_ms": nullable_ms,
        "completed_at_ms": nullable_ms,
        "result_code": NULLABLE_STR,
        "result_mutation_id": NULLABLE_STR,
        "receipt": {"type": ["object", "null"]},
        "receipt_digest": NULLABLE_STR,
        "created_at_ms": MS,
        "updated_at_ms": MS,
        "waiting_for_target": TARGET_WAIT,
        "on_unknown": {
            "type": "string",
            "enum": ["hold", "proceed"],
            "description": "its policy's rule should its effect's outcome be unknown: hold its "
            "target until it is settled, or let the next dispatch on it proceed",
        },
        "window": WINDOW,
        "wait": WAIT,
    }
    return {
        "Problem": {
            "type": "object",
            "description": "RFC 9457; `type` is /problems/<code>, stable per refusal",
            "required": ["type", "title", "status", "code"],
            "properties": {
                "type": {"type": "string", "format": "uri-reference"},
                "title": {"type": "string"},
                "status": {"type": "integer"},
                "code": {"type": "string", "enum": sorted(problems.KINDS)},
                "detail": {"type": "string"},
                "field": {"type": "string", "description": "the request field at fault"},
            },
        },
        "DispatchSummary": summary,
        "DispatchPage": {
            "type": "object",
            "required": ["dispatches", "next"],
            "properties": {
                "dispatches": {"type": "array", "items": ref("DispatchSummary")},
                "next": NULLABLE_STR,
            },
        },
        "DispatchDetail": {
            "type": "object",
            "description": "The dispatch, its plan's non-sensitive members, execution (no lease "
            "token), ledger, receipt, Run, recovery, audit and StepRun",
            "required": [
                "dispatch_id",
                "approval_request_id",
                "project_id",
                "action_type",
                "action_ref",
                "action_digest",
                "approved_by",
                "created_at_ms",
                "target",
                "plan",
                "execution",
                "events",
                "receipt",
                "run_id",
                "observation",
                "resolution",
                "audit",
                "step_run",
                "uncertain",
                "verdicts",
                "resubmitted_from",
                "requested_again",
            ],
            "properties": {
                "dispatch_id": ID,
                "approval_request_id": ID,
                "project_id": ID,
                "action_type": ID,
                "action_ref": ID,
                "action_digest": {"type": "string"},
                "approved_by": {"type": "string"},
                "created_at_ms": MS,
                "target": {**NULLABLE_ID, "description": "what the plan changes (its target)"},
                "plan": {"type": ["object", "null"]},
                "execution": ref("Execution"),
                "events": {"type": "array", "items": ref("LedgerLine")},
                "receipt": {"type": ["object", "null"]},
                "run_id": NULLABLE_STR,
                "observation": {"type": ["object", "null"]},
                "resolution": {"type": ["object", "null"]},
                "audit": {"type": "array", "items": ref("AuditRecord")},
                "step_run": {"type": ["object", "null"]},
                "uncertain": {
                    "oneOf": [ref("UncertainOutcome"), {"type": "null"}],
                    "description": "What the daemon knew when its execute answered uncertain",
                },
                "verdicts": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "What recovery says of an uncertain effect, in words "
                    "(`missing` with `manual_only` reads: no automatic evidence for this "
                    "action: check the target)",
                },
                "resubmitted_from": {
                    **NULLABLE_ID,
                    "description": "what its request was requested again from",
                },
                "requested_again": REQUESTED_AGAIN,
            },
        },
        "LedgerLine": {
            "type": "object",
            "description": "One ledger line (no lease token). `to_status` recovery_required is "
            "the line of the database's mark: when a recovery pass first observed the expired "
            "lease, or a resolution settled it first (`noticed_by`). A line that settled a "
            "started row names its settler and the principal the database authenticated.",
            "required": ["version", "from_status", "to_status", "attempt", "committed_at_ms"],
            "properties": {
                "version": {"type": "integer"},
                "from_status": NULLABLE_STR,
                "to_status": {"type": "string", "enum": statuses},
                "attempt": {"type": "integer"},
                "lease_owner": NULLABLE_STR,
                "mutation_id": NULLABLE_STR,
                "result_code": NULLABLE_STR,
                "committed_at_ms": MS,
                "settled_by": NULLABLE_STR,
                "settled_principal": NULLABLE_STR,
                "noticed_by": {
                    "type": ["string", "null"],
                    "enum": ["recovery_pass", "resolution", None],
                },
            },
        },
        "UncertainOutcome": {
            "type": "object",
            "description": "What the lease holder knew when it lost track of the effect, "
            "redacted by the action: a command's exitCode, signal, durationMs and stderrHead; "
            "an HTTP status or transport error and how far the request got (reached)",
            "required": ["attempt", "lease_owner", "result_code", "evidence", "recorded_at_ms"],
            "properties": {
                "attempt": {"type": "integer"},
                "lease_owner": {"type": "string"},
                "result_code": {"type": "string"},
                "evidence": {"type": "object"},
                "recorded_at_ms": MS,
            },
        },
        "Execution": {
            "type": "object",
            "description": "The execution row without its lease token",
            "required": list(execution),
            "properties": execution,
            "additionalProperties": False,
        },
        "RecoveryPage": {
            "type": "object",
            "required": ["recovery_required", "next"],
            "properties": {
                "recovery_required": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": [
                            "dispatch_id",
                            "project_id",
                            "action_type",
                            "since_ms",
                            "last_observation",
                        ],
                        "properties": {
                            "dispatch_id": ID,
                            "project_id": ID,
                            "action_type": ID,
                            "since_ms": MS,
                            "last_observation": {
                                "type": ["object", "null"],
                                "required": ["outcome", "reason", "count", "at_ms", "verdict"],
                                "properties": {
                                    "outcome": {"type": "string"},
                                    "reason": {"type": "string"},
                                    "count": {"type": "integer", "minimum": 1},
                                    "at_ms": MS,
                                    "verdict": {
                                        "type": "string",
                                        "description": "what the observation means, in words",
                                    },
                                },
                            },
                        },
                    },
                },
                "next": NULLABLE_STR,
            },
        },
        "AuditRecord": {
            "type": "object",
            "required": [
                "event_id",
                "kind",
                "actor",
                "principal",
                "project_id",
                "subject_id",
                "detail_code",
                "committed_at_ms",
            ],
            "properties": {
                "event_id": {"type": "integer"},
                "kind": {"type": "string"},
                "actor": {"type": "string"},
                "principal": {"type": "string"},
                "project_id": {"type": "string"},
                "subject_id": {"type": "string"},
                "detail_code": {"type": "string"},
                "committed_at_ms": MS,
                "token_id": NULLABLE_STR,
                "client_address": NULLABLE_STR,
                "request_id": NULLABLE_STR,
                "comment": {
                    **NULLABLE_STR,
                    "description": "the person's comment on an approve, reject or settle",
                },
            },
        },
        "AuditPage": {
            "type": "object",
            "required": ["audit", "next"],
            "properties": {
                "audit": {"type": "array", "items": ref("AuditRecord")},
                "next": NULLABLE_STR,
            },
        },
        "Status": {
            "type": "object",
            "required": [
                "profile",
                "executions",
                "due",
                "oldest_due_age_seconds",
                "runs",
                "step_runs",
            ],
            "properties": {
                "profile": {"type": "string", "enum": ["edge", "cluster"]},
                "executions": {"type": "object", "additionalProperties": {"type": "integer"}},
                "due": {"type": "integer"},
                "oldest_due_age_seconds": {"type": "number"},
                "runs": {"type": "integer"},
                "step_runs": {"type": "object", "additionalProperties": {"type": "integer"}},
            },
        },
        "Check": {
            "type": "object",
            "required": ["ok", "reason"],
            "properties": {"ok": {"type": "boolean"}, "reason": {"type": "string"}},
        },
    }
