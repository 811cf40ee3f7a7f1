"""The OpenAPI operations and schemas of an approval request with its policy and votes, of a
vote, and of the policies in force (web/votes.py)."""

from __future__ import annotations

from typing import Any, Final

from qinglong_dispatcher.domain import approvals, policies
from qinglong_dispatcher.web import openapi_writes, problems, schemas

_ID: Final = schemas.ID
_MS: Final = schemas.MS
_STR: Final = schemas.NULLABLE_STR
_AGAIN: Final = schemas.REQUESTED_AGAIN
_ref = schemas.ref
_object = openapi_writes.object_schema
_GROUPS: Final = {"type": "array", "items": {"type": "string"}}


def _problem(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {problems.CONTENT_TYPE: {"schema": _ref("Problem")}},
    }


def _read(operation_id: str, summary: str, answer: str) -> dict[str, Any]:
    return {
        "operationId": operation_id,
        "summary": f"{summary} (role viewer)",
        "security": [{"bearer": []}],
        "responses": {
            "200": {
                "description": "Found",
                "content": {"application/json": {"schema": _ref(answer)}},
            },
            "400": _problem("A query parameter was given (none is known)"),
            "401": _problem("No valid bearer token"),
            "404": _problem("No such approval request"),
            "500": _problem("Server fault (no detail)"),
            "503": _problem("The store is saturated: retry after `Retry-After`"),
        },
    }


def paths() -> dict[str, Any]:
    """The path items (merged into the document's by method)."""
    show = _read(
        "showApproval",
        "One approval request with its policy, its votes, who else may vote and its time to expiry",
        "ApprovalDetailAnswer",
    )
    show["parameters"] = [
        {"name": "approval_request_id", "in": "path", "required": True, "schema": _ID}
    ]
    vote = openapi_writes.write_operation(
        "voteOnApproval",
        "Cast the principal's one vote; the database applies the request's policy and decides "
        "it once the votes reach its numbers (an approved request is consumed at once)",
        "approver",
        path_id="approval_request_id",
        body="VoteBody",
        answer="VoteAnswer",
        extra={
            "403": _problem(
                "The database refused the principal: not an approver or in none of the "
                "policy's groups (`approval_not_permitted`), the requester "
                "(`self_approval_refused`)"
            ),
            "409": _problem(
                "This principal voted already (`already_voted`), the request is decided or "
                "a policy rule refused it (`approval_state_conflict`, "
                "`approval_transition_refused`), it expired (`approval_expired`), or the "
                "Idempotency-Key is in flight"
            ),
            "422": _problem("The Idempotency-Key was used with another body"),
        },
    )
    vote["parameters"].append(openapi_writes.idempotency_parameter("200"))
    return {
        "/approvals/{approval_request_id}": {"get": show},
        "/approvals/{approval_request_id}/votes": {"post": vote},
        "/policies": {
            "get": _read(
                "listPolicies",
                "The policies in force: the newest version of each, unless it retired it",
                "PolicyList",
            )
        },
    }


def all_schemas() -> dict[str, Any]:
    """The schemas the operations above name."""
    policy = {
        "name": {"type": "string"},
        "version": {"type": "integer"},
        "approvals_required": {"type": "integer", "minimum": 1},
        "denials_to_reject": {"type": "integer", "minimum": 1},
        "approver_groups": {**_GROUPS, "description": "empty: any approver"},
        "reason_required": {"type": "boolean"},
        "target_prefix": {
            **_STR,
            "description": "the policy matches the targets beginning with it (null: any target)",
        },
    }
    vote = {
        "principal": {"type": "string"},
        "vote": {"type": "string", "enum": [v.value for v in approvals.Vote]},
        "reason": _STR,
        "voted_at_ms": {**_MS, "description": "the database's time"},
    }
    detail = {
        **openapi_writes.approval_properties(),
        "expires_at_ms": {**_MS, "description": "by the database's clock"},
        "expires_in_ms": {"type": "integer", "minimum": 0},
        "policy": {"oneOf": [_ref("RequestPolicy"), {"type": "null"}]},
        "votes": {"type": "array", "items": _ref("Vote")},
        "approvals": {"type": "integer"},
        "denials": {"type": "integer"},
        "may_vote": {
            "type": ["array", "null"],
            "items": {"type": "string"},
            "description": "the group members who may still vote (null: the policy names no "
            "group, or there is no policy: any approver but the requester)",
        },
        "requested_again": _AGAIN,
    }
    in_force = {
        **policy,
        "action_type": _ID,
        "project_id": {**_STR, "description": "null: every project"},
        "written_by": {"type": "string"},
        "written_at_ms": _MS,
    }
    return {
        "RequestPolicy": _object(sorted(policy), policy),
        "Vote": _object(sorted(vote), vote),
        "ApprovalDetail": _object(sorted(detail), detail),
        "ApprovalDetailAnswer": _object(["approval"], {"approval": _ref("ApprovalDetail")}),
        "VoteBody": _object(
            ["vote"],
            {
                "vote": {"type": "string", "enum": [v.value for v in approvals.Vote]},
                "reason": {
                    "type": ["string", "null"],
                    "maxLength": policies.REASON_MAX,
                    "description": "one line of text (required when the policy asks for one)",
                },
            },
        ),
        "VoteAnswer": _object(
            ["approval"],
            {
                "approval": _ref("ApprovalDetail"),
                "dispatch_id": {**_ID, "description": "when the vote approved it"},
            },
        ),
        "PolicyInForce": _object(sorted(in_force), in_force),
        "PolicyList": _object(
            ["policies"], {"policies": {"type": "array", "items": _ref("PolicyInForce")}}
        ),
    }
