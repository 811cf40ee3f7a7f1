"""The OpenAPI operation and schemas of the inbox (web/inbox.py)."""

from __future__ import annotations

from typing import Any

from qinglong_dispatcher.domain import inbox, notes
from qinglong_dispatcher.web import inbox as inbox_reads
from qinglong_dispatcher.web import openapi_writes, schemas


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema,
    }


def paths(errors: dict[str, Any]) -> dict[str, Any]:
    """The route's path item (`errors`: the reads' error responses)."""
    return {
        "/inbox": {
            "get": {
                "operationId": "showInbox",
                "summary": "What waits on the token's principal: requests it may vote on (an "
                "approver); recovery_required dispatches with their evidence's verdict, the "
                "held targets others wait on, the dispatches a freeze holds and the "
                "notifications given up (an operator); a viewer's is empty (role viewer)",
                "security": [{"bearer": []}],
                "parameters": [
                    _query("action", "only this action type", schemas.ID),
                    _query("project", "only this project", schemas.ID),
                    _query(
                        "target",
                        "only rows whose target begins with this prefix (a row without a "
                        "target is left out)",
                        {"type": "string", "minLength": 1, "maxLength": 128},
                    ),
                    _query(
                        "older_than",
                        "only rows that have waited at least this long: a whole number of "
                        "seconds, minutes, hours or days (90s, 30m, 4h, 2d; 1 second to 365 days)",
                        {"type": "string", "pattern": "^[0-9]+[smhd]$"},
                    ),
                    _query(
                        "q",
                        "only rows whose id, action, project, kind, summary or target holds "
                        "this text (case-insensitive)",
                        {"type": "string", "maxLength": inbox_reads.TEXT_MAX},
                    ),
                    _query(
                        "sort",
                        "by the time each row waits since: oldest (default) or newest first",
                        {"enum": list(inbox_reads.SORTS)},
                    ),
                ],
                "responses": {
                    "200": {
                        "description": "The inbox",
                        "content": {"application/json": {"schema": schemas.ref("Inbox")}},
                    },
                    **errors,
                },
            }
        },
        "/inbox/notes": {
            "post": openapi_writes.write_operation(
                "writeNote",
                "Write a note on a request or a dispatch that waits on people, as the token's "
                "principal (the database names it and refuses any other)",
                "approver",
                path_id=None,
                body="NoteBody",
                answer="NoteAnswer",
                status="201",
            )
        },
    }


def all_schemas() -> dict[str, Any]:
    """The schemas the operation names."""
    item = openapi_writes.object_schema(
        [
            "kind",
            "id",
            "action",
            "project",
            "since_ms",
            "age_ms",
            "summary",
            "target",
            "waiting",
            "freeze",
            "notes",
        ],
        {
            "kind": {"enum": [k.value for k in inbox.Kind]},
            "id": {
                **schemas.ID,
                "description": "the approval request's or the dispatch's id (a held target's: "
                "its holder's)",
            },
            "action": {"type": "string"},
            "project": {"type": "string"},
            "since_ms": {
                **schemas.MS,
                "description": "since when it waits: the request's creation, the lease's expiry "
                "(a held target's: its holder's), the later of a freeze's start and the "
                "dispatch's creation",
            },
            "age_ms": {"type": "integer", "minimum": 0},
            "summary": {
                "type": "string",
                "description": "who asked and under which policy, or the evidence's verdict",
            },
            "target": {
                **schemas.NULLABLE_STR,
                "description": "the target a recovery_required dispatch holds: nothing else "
                "starts on it until it is settled; a held target's; a frozen dispatch's",
            },
            "waiting": {
                "type": ["integer", "null"],
                "minimum": 1,
                "description": "a held target's: how many dispatches wait on it",
            },
            "freeze": {
                "oneOf": [schemas.ref("InboxFreeze"), {"type": "null"}],
                "description": "a frozen dispatch's: the freeze that holds it (the least id "
                "of those that do, as frozen_by names it)",
            },
            "notes": {
                "type": "array",
                "items": schemas.ref("Note"),
                "description": "the notes people wrote on this row, oldest first",
            },
        },
    )
    note = openapi_writes.object_schema(
        ["note_id", "subject", "id", "principal", "note", "written_at_ms"],
        {
            "note_id": {"type": "integer"},
            "subject": {"enum": [s.value for s in notes.Subject]},
            "id": schemas.ID,
            "principal": {"type": "string", "description": "who wrote it (never a caller's word)"},
            "note": {"type": "string", "maxLength": notes.MAX_CHARS},
            "written_at_ms": {**schemas.MS, "description": "the database's clock"},
        },
    )
    body = openapi_writes.object_schema(
        ["subject", "id", "note"],
        {
            "subject": {"enum": [s.value for s in notes.Subject]},
            "id": schemas.ID,
            "note": {
                "type": "string",
                "maxLength": notes.MAX_CHARS,
                "description": "one printable line",
            },
        },
    )
    answer = openapi_writes.object_schema(
        ["items", "complete"],
        {
            "items": {"type": "array", "items": schemas.ref("InboxItem")},
            "complete": {
                "type": "boolean",
                "description": "false: more rows wait than one inbox reads; narrow the filters",
            },
        },
    )
    freeze = openapi_writes.object_schema(
        ["id", "reason", "until_ms"],
        {
            "id": {"type": "integer", "description": "the freeze's id (GET /freezes)"},
            "reason": {"type": "string"},
            "until_ms": {**schemas.MS, "description": "when it ends, unless ended sooner"},
        },
    )
    return {
        "InboxItem": item,
        "InboxFreeze": freeze,
        "Inbox": answer,
        "Note": note,
        "NoteBody": body,
        "NoteAnswer": openapi_writes.object_schema(["note"], {"note": schemas.ref("Note")}),
    }
