"""The `mcp.call` evidence provider: the tool's configured check tool, or the operator.

A tool's effect lives in the server's world, so only the server can prove it: where the
configuration names a read-only check tool for the tool (`[servers.NAME.checks]`), recovery
connects, lists the tools, and calls the check tool with the dispatch id (the idempotency key
the call carried in `_meta`, and in `call_key_argument` where configured). Its answer, a JSON
object with a `status` (its structured content, or its first text block), settles it:
`completed` is `verified_succeeded`; `absent` is `missing`, but only once the call cannot
still be running (its start plus the server's setup and call timeouts and a margin). Anything
else — the server unreachable, the check tool not listed or not marked `readOnlyHint`, an
`isError` answer, another status — raises: the reconciler records `unavailable`, never
`missing`. A tool without a check is the operator's to settle (`missing`, `manual_only`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions import contract
from qinglong_dispatcher.actions.mcp_call import client, plan, servers
from qinglong_dispatcher.domain import digests, errors, recovery

EVIDENCE_TAG: Final = "qinglong/mcp.call/evidence@v1"
NO_BEFORE_MARGIN_MS: Final = 2_000
ACTION_TYPE = plan.ACTION_TYPE

Kind = recovery.EvidenceKind


class CheckUnavailable(errors.QinglongError):
    """The check tool could not look, or answered something that is neither yes nor no."""

    code = "check_unavailable"


def status_of(answer: client.Answer) -> str | None:
    """The `status` the check tool answered: from its structured content, else from a JSON
    object in its first text block; None when it has none."""
    found: Any = answer.structured
    if not isinstance(found, dict):
        texts = [b.get("text") for b in answer.content if b.get("type") == "text"]
        try:
            found = json.loads(texts[0]) if texts and isinstance(texts[0], str) else None
        except ValueError:
            found = None
    status = found.get("status") if isinstance(found, dict) else None
    return status if isinstance(status, str) else None


class McpCallEvidence:
    """Read-only: calls only the configured check tool, never the tool itself."""

    action_type = ACTION_TYPE

    def __init__(
        self,
        plans: contract.PlanReader,
        configured: servers.ServerSet,
        *,
        clock: ports.Clock | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._plans = plans
        self._servers = configured
        self._clock = clock
        """None: an `absent` is trusted at once (a test that starts no call of its own)."""
        self._environ = environ

    async def evidence(self, snapshot: recovery.Snapshot) -> recovery.Evidence:
        """`verified_succeeded` or `missing` from the check tool; raises when it cannot look."""
        dispatch = snapshot.dispatch
        call = await self._plans.approved(dispatch, plan.McpCallPlan)  # raise: unavailable
        server = self._servers.get(call.server)
        if server is None or not server.allows(call.tool):
            raise CheckUnavailable("the tool is no longer configured for this plan")
        check = server.checks.get(call.tool)
        if check is None:
            return recovery.Evidence(kind=Kind.MISSING, reason=recovery.MANUAL_ONLY)
        key = dispatch.dispatch_id
        try:
            async with client.connect(server, self._environ) as session:
                listed = session.tools.get(check.tool)
                if listed is None or listed.hints.get("readOnlyHint") is not True:
                    raise CheckUnavailable(
                        "the check tool is not listed as read-only", code="check_not_read_only"
                    )
                answer = await session.call(
                    check.tool, {check.key_argument: key}, key, server.call_timeout_seconds
                )
        except (client.NotSent, client.Lost) as exc:
            raise CheckUnavailable("the check could not look", code=exc.code) from None
        status = status_of(answer)
        if answer.is_error or status not in ("completed", "absent"):
            raise CheckUnavailable(
                "the check answered neither yes nor no", code="check_unrecognised"
            )
        if status == "absent":
            started = snapshot.execution.started_at_ms or 0
            spent_ms = (server.setup_seconds() + server.call_timeout_seconds) * 1000
            if (
                self._clock is not None
                and self._clock.now_ms() < started + spent_ms + NO_BEFORE_MARGIN_MS
            ):
                raise CheckUnavailable("the call may still be running", code="check_too_early")
            return recovery.Evidence(kind=Kind.MISSING, reason="check_absent")
        answered = json.dumps(
            {"content": answer.content, "structuredContent": answer.structured},
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        ).encode("utf-8")
        return recovery.Evidence(
            kind=Kind.VERIFIED_SUCCEEDED,
            evidence_digest=digests.evidence_digest(
                EVIDENCE_TAG,
                {
                    "dispatchId": key,
                    "actionDigest": dispatch.action_digest,
                    "server": server.name,
                    "checkTool": check.tool,
                    "answerDigest": hashlib.sha256(answered).hexdigest(),
                },
            ),
        )
