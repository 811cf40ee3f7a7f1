"""The `mcp.call` handler: inspect lists the server's tools and refuses what may not run;
execute calls the tool once, after the start barrier.

`inspect` connects, initializes and lists the server's tools (no `tools/call`): an unknown
server or a tool the configuration does not allow, a tool the server does not list, a schema
that changed since approval and arguments the tool's input schema refuses are `blocked`; a
server that cannot be reached now is `transient`. It logs what it saw (`mcp_call.inspected`:
the schema's digest and the tool's behaviour hints), which the receipt keeps too.

`execute` re-reads the approved plan, connects again and checks the tool again; up to the
moment the `tools/call` request is handed to the transport nothing was sent, and a failure is
tried again while a whole attempt fits before the deadline, then `failed`. After it only the
answer proves anything: `isError: false` is `succeeded`, `isError: true` is `failed` (the
tool said it did not do it), a refusal of the request itself (unknown method, invalid params)
is `failed`; a timeout, a crash, a closed stream or an unreadable answer is `uncertain`, and
recovery settles it by the configured check tool or an operator — never by calling again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import anyio
import structlog

from qinglong_dispatcher import ports
from qinglong_dispatcher.actions import contract, secrets
from qinglong_dispatcher.actions.mcp_call import client, plan, servers, tools
from qinglong_dispatcher.domain import errors, records

log = structlog.get_logger("qinglong_dispatcher.actions.mcp_call.handler")

ACTION_TYPE = plan.ACTION_TYPE
EXCERPT_CHARS: Final = 2048
"""The most of an answer's text a receipt keeps (receipts are at most 16 KiB)."""
REDACTED: Final = "[redacted]"
MIN_REDACTED_CHARS: Final = 4
"""Shorter argument values are not redacted from an excerpt: they would blank out words."""
RETRY_PAUSE_S: Final = 0.2

Kind = ports.ExecuteKind


def arguments_sent(
    server: servers.Server, call: plan.McpCallPlan, key: str
) -> dict[str, Any] | str:
    """The call's arguments as sent: the plan's, and the dispatch id in the argument the
    tool's check names (`call_key_argument`); a code if the plan already uses that name."""
    check = server.checks.get(call.tool)
    if check is None or check.call_key_argument is None:
        return dict(call.arguments)
    if check.call_key_argument in call.arguments:
        return "mcp_key_argument_taken"
    return {**call.arguments, check.call_key_argument: key}


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def receipt(
    server: servers.Server,
    listed: tools.ListedTool,
    answer: client.Answer,
    hidden: Sequence[str],
) -> dict[str, object]:
    """What the server answered, as canonical-JSON values: the digest and size of the whole
    answer (content and structured content), the first bytes of it redacted of every secret
    and argument value, the tool's schema digest and hints. Never an argument or a secret."""
    whole = json.dumps(
        {"content": answer.content, "structuredContent": answer.structured},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode("utf-8")
    kept = whole[: server.max_output_bytes]
    text = kept.decode("utf-8", errors="replace")
    for value in sorted({h for h in hidden if len(h) >= MIN_REDACTED_CHARS}, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return {
        "server": server.name,
        "tool": listed.name,
        "isError": answer.is_error,
        "answerBytes": len(whole),
        "answerDigest": hashlib.sha256(kept).hexdigest(),
        "truncated": len(whole) > len(kept),
        "excerpt": text[:EXCERPT_CHARS],
        "inputSchemaDigest": listed.digest,
        "hints": dict(listed.hints),
    }


def _failed(code: str) -> ports.ExecuteResult:
    return ports.ExecuteResult(kind=Kind.FAILED, code=code)


class McpCallHandler:
    """Calls a configured MCP server's tool with a plan's arguments, once per dispatch."""

    action_type = ACTION_TYPE

    def __init__(
        self,
        plans: contract.PlanReader,
        configured: servers.ServerSet,
        clock: ports.Clock,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._plans = plans
        self._servers = configured
        self._clock = clock
        self._environ = environ
        """The daemon's environment (None: `os.environ`, read at each use)."""

    def _configured(self, call: plan.McpCallPlan) -> servers.Server | str:
        server = self._servers.get(call.server)
        if server is None:
            return "mcp_server_unknown"
        if not server.allows(call.tool):
            return "mcp_tool_not_allowed"
        return server

    async def prefetch(self, dispatches: Sequence[records.Dispatch]) -> None:
        """A page's plans in one read (`ports.PrefetchingHandler`)."""
        await self._plans.prefetch(dispatches)

    async def inspect(self, dispatch: records.Dispatch) -> ports.InspectResult:
        """The digest of a plan the configuration and the server's tool admit."""
        blocked, transient = ports.InspectKind.BLOCKED, ports.InspectKind.TRANSIENT
        try:
            call, digest = await self._plans.resolve(dispatch, plan.McpCallPlan)
        except errors.PlanInvalid as exc:
            return ports.InspectResult(kind=blocked, code=exc.code)
        server = self._configured(call)
        if isinstance(server, str):
            return ports.InspectResult(kind=blocked, code=server)
        sent = arguments_sent(server, call, dispatch.dispatch_id)
        if isinstance(sent, str):
            return ports.InspectResult(kind=blocked, code=sent)
        try:
            async with client.connect(server, self._environ) as session:
                listed = session.tools.get(call.tool)
        except client.SecretInvalid as exc:
            return ports.InspectResult(kind=blocked, code=exc.code)
        except (client.NotSent, client.Lost, secrets.SecretUnavailable) as exc:
            log.info("mcp_call.unavailable", dispatch_id=dispatch.dispatch_id, code=exc.code)
            return ports.InspectResult(kind=transient, code="mcp_unavailable")
        if listed is None:
            return ports.InspectResult(kind=blocked, code="mcp_tool_unknown")
        refusal = listed.refusal(sent, call.input_schema_digest)
        log.info(
            "mcp_call.inspected",
            dispatch_id=dispatch.dispatch_id,
            server=server.name,
            tool=listed.name,
            refusal=refusal,
            **listed.evidence(),
        )
        if refusal is not None:
            return ports.InspectResult(kind=blocked, code=refusal)
        return ports.InspectResult(kind=ports.InspectKind.READY, action_digest=digest)

    async def execute(self, ctx: ports.ExecutionContext) -> ports.ExecuteResult:
        """Call the approved tool once; before the call left, try again within the deadline."""
        dispatch = ctx.dispatch
        try:
            call = await self._plans.approved(dispatch, plan.McpCallPlan)
        except errors.QinglongError as exc:  # nothing sent: an explicit failure
            return _failed(exc.code)
        server = self._configured(call)
        if isinstance(server, str):
            return _failed(server)
        sent = arguments_sent(server, call, ctx.idempotency_key)
        if isinstance(sent, str):
            return _failed(sent)
        code = "mcp_deadline_passed"
        attempt = 0
        while self._fits(server, ctx.deadline_ms):
            attempt += 1
            try:
                return await self._attempt(ctx, server, call, sent)
            except client.NotSent as exc:
                code = exc.code
                log.info(
                    "mcp_call.not_sent",
                    dispatch_id=dispatch.dispatch_id,
                    code=code,
                    attempt=attempt,
                )
            except (client.SecretInvalid, secrets.SecretUnavailable) as exc:
                return _failed(exc.code)
            except client.Lost as exc:  # the session failed under the call
                log.warning("mcp_call.uncertain", dispatch_id=dispatch.dispatch_id, code=exc.code)
                return ports.ExecuteResult(kind=Kind.UNCERTAIN, code=exc.code)
            await anyio.sleep(RETRY_PAUSE_S * attempt)
        return _failed(code)

    def _fits(self, server: servers.Server, deadline_ms: int) -> bool:
        needed_s = server.setup_seconds() + server.call_timeout_seconds + servers.CLOSE_ALLOWANCE_S
        return self._clock.now_ms() + needed_s * 1000 < deadline_ms

    async def _attempt(
        self,
        ctx: ports.ExecutionContext,
        server: servers.Server,
        call: plan.McpCallPlan,
        sent: dict[str, Any],
    ) -> ports.ExecuteResult:
        key = ctx.idempotency_key
        hidden = [*_strings(sent), *client.read_secrets(server, self._environ).values()]
        async with client.connect(server, self._environ) as session:
            listed = session.tools.get(call.tool)
            if listed is None:
                return _failed("mcp_tool_unknown")
            refusal = listed.refusal(sent, call.input_schema_digest)
            if refusal is not None:  # the server changed since inspect: nothing sent
                return _failed(refusal)
            try:
                answer = await session.call(call.tool, sent, key, server.call_timeout_seconds)
            except client.Lost as exc:
                log.warning(
                    "mcp_call.uncertain", dispatch_id=key, server=server.name, code=exc.code
                )
                return ports.ExecuteResult(kind=Kind.UNCERTAIN, code=exc.code)
            except errors.QinglongError as exc:  # the server refused the request itself
                return _failed(exc.code)
        kind, code = (
            (Kind.FAILED, "mcp_tool_error")
            if answer.is_error
            else (Kind.SUCCEEDED, "mcp_succeeded")
        )
        log.info("mcp_call.executed", dispatch_id=key, server=server.name, code=code)
        return ports.ExecuteResult(
            kind=kind, code=code, receipt=receipt(server, listed, answer, hidden)
        )
