"""The OpenAPI operations and schemas of the writes and of the approvals queue."""

from __future__ import annotations

from typing import Any, Final

from qinglong_dispatcher.domain import approval_views, principals, states
from qinglong_dispatcher.web import context, idempotency, openapi_submits, problems, schemas

_ID: Final = schemas.ID
_MS: Final = schemas.MS
_STR: Final = schemas.NULLABLE_STR
COMMENT: Final = {
    "type": "string",
    "maxLength": principals.COMMENT_MAX_CHARS,
    "description": "one printable line, kept in the write's audit row (blank: none)",
}
_ref = schemas.ref


def _problem(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {problems.CONTENT_TYPE: {"schema": _ref("Problem")}},
    }


_REQUEST_ID: Final = {
    context.REQUEST_ID_HEADER: {
        "description": "the request id its audit row records",
        "schema": {"type": "string"},
    }
}

_WRITE_ERRORS: Final = {
    "400": _problem(
        "A body member or the path is not valid (`field` names it); a member "
        "that is not the operation's (one naming a principal) is refused"
    ),
    "401": _problem("No valid bearer token"),
    "403": _problem(
        "The token's role is below the endpoint's (`forbidden`), or the database refused the "
        "principal (`approval_not_permitted`, `self_approval_refused`, `permission_denied`)"
    ),
    "404": _problem("No such approval request or dispatch"),
    "408": _problem("The body did not arrive in time"),
    "409": _problem("The store refused the step in the state it found"),
    "413": _problem("The body exceeds the cap"),
    "429": {
        **_problem("Too many writes by this principal"),
        "headers": {"Retry-After": {"schema": {"type": "integer"}}},
    },
    "500": _problem("Server fault (no detail)"),
    "503": _problem("The store is saturated: retry after `Retry-After`"),
}


READ_ERRORS: Final = {k: v for k, v in _WRITE_ERRORS.items() if k in ("400", "401", "403")}
"""The error answers of a list the writes' pages share."""

OPTIONAL_BODIES: Final = frozenset({"CommentBody"})
"""Bodies a write may leave out (none at all is `{}`)."""


def write_operation(
    operation_id: str,
    summary: str,
    role: str,
    *,
    path_id: str | None,
    body: str | None,
    answer: str,
    status: str = "200",
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": operation_id,
        "summary": f"{summary} (role {role})",
        "security": [{"bearer": []}],
        "responses": {
            status: {
                "description": "Done, as the token's principal",
                "headers": _REQUEST_ID,
                "content": {"application/json": {"schema": _ref(answer)}},
            },
            **_WRITE_ERRORS,
            **(extra or {}),
        },
    }
    if path_id is not None:
        op["parameters"] = [{"name": path_id, "in": "path", "required": True, "schema": _ID}]
    if body is not None:
        op["requestBody"] = {
            "required": body not in OPTIONAL_BODIES,
            "content": {"application/json": {"schema": _ref(body)}},
        }
    return op


def paths() -> dict[str, Any]:
    """The path items (merged into the document's by method)."""
    submit = write_operation(
        "submitDispatch",
        "Create a plan and its pending approval request, requested by the principal",
        "submitter",
        path_id=None,
        body="SubmitBody",
        answer="ApprovalAnswer",
        status="201",
        extra={
            "409": _problem(
                "The action ref has a plan already, or the Idempotency-Key is in "
                "flight (`idempotency_key_in_flight`)"
            ),
            "422": _problem(
                "The Idempotency-Key was used with another body, or the requested window "
                "ends before it can start (`window_empty`)"
            ),
        },
    )
    submit["parameters"] = [idempotency_parameter("201"), openapi_submits.TRACEPARENT_PARAMETER]
    return {
        "/dispatches": {"post": submit},
        "/approvals/{approval_request_id}/approve": {
            "post": write_operation(
                "approveApproval",
                "Approve as the principal (not the requester), then consume into the dispatch",
                "approver",
                path_id="approval_request_id",
                body="CommentBody",
                answer="ApprovedAnswer",
            )
        },
        "/approvals/{approval_request_id}/reject": {
            "post": write_operation(
                "rejectApproval",
                "Reject: it can never be approved",
                "approver",
                path_id="approval_request_id",
                body="RejectBody",
                answer="ApprovalAnswer",
            )
        },
        "/approvals/{approval_request_id}/consume": {
            "post": write_operation(
                "consumeApproval",
                "Consume an approved request into its dispatch (after an approve whose "
                "dispatch did not commit)",
                "approver",
                path_id="approval_request_id",
                body=None,
                answer="ConsumedAnswer",
            )
        },
        "/dispatches/{dispatch_id}/cancel": {
            "post": write_operation(
                "cancelDispatch",
                "Cancel a pending or retry_wait dispatch",
                "operator",
                path_id="dispatch_id",
                body="ReasonBody",
                answer="TransitionAnswer",
            )
        },
        "/recovery/settle": {
            "post": write_operation(
                "settleRecovery",
                "Settle several recovery_required executions, each alone under its own fence "
                "and audit; every row's outcome (one refused row undoes nothing of the others)",
                "operator",
                path_id=None,
                body="SettleBody",
                answer="SettleAnswer",
            )
        },
        "/recovery/{dispatch_id}/resolve": {
            "post": write_operation(
                "resolveRecovery",
                "Settle a recovery_required execution by hand; refused while its lease is live",
                "operator",
                path_id="dispatch_id",
                body="ResolveBody",
                answer="TransitionAnswer",
            )
        },
    }


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


def object_schema(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    """A closed object schema: these members, no others."""
    return {
        "type": "object",
        "required": required,
        "properties": properties,
        "additionalProperties": False,
    }


NARROWING: dict[str, Any] = {
    "not_before_ms": {
        "type": ["integer", "null"],
        "description": "the requester's narrowing: start no earlier than this (null: none)",
    },
    "window_for_ms": {
        "type": ["integer", "null"],
        "description": "the requester's narrowing: start within this long of `not_before_ms` "
        "(of the dispatch's writing without one; null: none)",
    },
}
"""The requester's narrowing of the window, which the approvers approve with the request."""


def approval_properties() -> dict[str, Any]:
    """The members of an approval request (`Approval`, and the detail's first ones)."""
    return {
        "approval_request_id": _ID,
        "project_id": _ID,
        "action_type": _ID,
        "action_ref": _ID,
        "action_digest": {"type": "string"},
        "status": {"type": "string"},
        "version": {"type": "integer"},
        "requested_by": {"type": "string"},
        "requested_principal": {"type": "string"},
        "decided_by": _STR,
        "decided_principal": _STR,
        "consumed_principal": _STR,
        "created_at_ms": _MS,
        "expires_at_ms": _MS,
        **NARROWING,
        "resubmitted_from": {
            **_STR,
            "description": "what it was requested again from: a dispatch, or an expired request",
        },
    }


def idempotency_parameter(status: str) -> dict[str, Any]:
    """The `Idempotency-Key` header of a write that answers `status`."""
    return {
        "name": idempotency.HEADER,
        "in": "header",
        "required": False,
        "description": f"the same key and body answer the first {status} again, with "
        f"`{idempotency.REPLAYED}: true` (kept in this process for a day)",
        "schema": {"type": "string", "maxLength": 257},
    }


def all_schemas() -> dict[str, Any]:
    """The schemas the operations above name."""
    approval = approval_properties()
    waiting = {
        "approval_request_id": _ID,
        "project_id": _ID,
        "action_type": _ID,
        "action_ref": _ID,
        "action_digest": {"type": "string"},
        "requested_by": {"type": "string"},
        "requested_principal": {"type": "string"},
        "created_at_ms": _MS,
        "expires_at_ms": _MS,
        **NARROWING,
        "plan": {"type": ["object", "null"], "description": "the redacted preview"},
        "plan_code": _STR,
        "status": {"type": "string", "enum": list(approval_views.STATUSES[:-1])},
        "decided_by": {**_STR, "description": "the decider's label"},
        "decided_principal": {**_STR, "description": "the decider's principal"},
        "decision_code": {
            "type": ["string", "null"],
            "enum": ["by_requester", "by_other", "db_clock", None],
            "description": "how it was decided (the audit row's code)",
        },
        "decided_at_ms": {
            "type": ["integer", "null"],
            "description": "when it was approved, rejected or expired",
        },
        "consumed_at_ms": {"type": ["integer", "null"]},
        "reasons": {
            "type": "array",
            "description": "why it was decided so: deny votes and the API's decision",
            "items": object_schema(
                ["decision", "principal", "reason", "comment"],
                {
                    "decision": {"type": "string", "enum": ["deny", "approve", "reject"]},
                    "principal": {"type": "string"},
                    "reason": _STR,
                    "comment": _STR,
                },
            ),
        },
    }
    consumed = {"approval_request_id": _ID, "dispatch_id": _ID, "action_ref": _ID}
    reason = {"type": "string", "pattern": _ID["pattern"], "description": "a reason code"}
    return {
        "Approval": object_schema(sorted(approval), approval),
        "WaitingApproval": object_schema(sorted(waiting), waiting),
        "ApprovalPage": object_schema(
            ["approvals", "next"],
            {"approvals": {"type": "array", "items": _ref("WaitingApproval")}, "next": _STR},
        ),
        "ApprovalAnswer": object_schema(["approval"], {"approval": _ref("Approval")}),
        "ApprovedAnswer": object_schema(
            ["approval", *sorted(consumed)], {"approval": _ref("Approval"), **consumed}
        ),
        "ConsumedAnswer": object_schema(sorted(consumed), consumed),
        "TransitionAnswer": object_schema(
            ["dispatch_id", "status", "version"],
            {
                "dispatch_id": _ID,
                "status": {"type": ["string", "null"]},
                "version": {"type": ["integer", "null"]},
            },
        ),
        "SubmitBody": openapi_submits.SUBMIT_BODY,
        "ReasonBody": object_schema(["reason"], {"reason": reason}),
        "CommentBody": object_schema([], {"comment": COMMENT}),
        "SettleBody": object_schema(
            ["dispatch_ids", "as", "reason"],
            {
                "dispatch_ids": {
                    "type": "array",
                    "items": _ID,
                    "minItems": 1,
                    "maxItems": 50,
                    "uniqueItems": True,
                },
                "as": {"type": "string", "enum": [c.value for c in states.Completion]},
                "reason": reason,
                "comment": COMMENT,
            },
        ),
        "SettleAnswer": object_schema(
            ["results"],
            {
                "results": {
                    "type": "array",
                    "items": object_schema(
                        ["dispatch_id", "status", "version", "problem", "detail"],
                        {
                            "dispatch_id": _ID,
                            "status": _STR,
                            "version": {"type": ["integer", "null"]},
                            "problem": {**_STR, "description": "the refusal's problem code"},
                            "detail": _STR,
                        },
                    ),
                }
            },
        ),
        "RejectBody": object_schema(["reason"], {"reason": reason, "comment": COMMENT}),
        "ResolveBody": object_schema(
            ["as", "reason"],
            {
                "as": {"type": "string", "enum": [c.value for c in states.Completion]},
                "reason": reason,
                "comment": COMMENT,
            },
        ),
    }
