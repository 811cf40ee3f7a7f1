"""The MCP client of `mcp.call`: one session per use, over a stdio subprocess or streamable HTTP.

The only module importing the `mcp` SDK (and `httpx2`), imported only by `build`, for a
process that has a servers file. A session is opened, initialized and its tools listed within
the server's connect and initialize timeouts; any failure up to there raises `NotSent` (no
`tools/call` request was written). From the moment the call is handed to the transport the
answer is the only proof: a timeout, a crash of the server, a closed stream or an answer that
cannot be read raise `Lost`, never `NotSent`, whichever layer of the SDK reports it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final

import anyio
import httpx2
import mcp
from mcp import types
from mcp.client import stdio, streamable_http
from mcp.shared import exceptions

from qinglong_dispatcher.actions import secrets
from qinglong_dispatcher.actions.mcp_call import servers, tools
from qinglong_dispatcher.domain import errors

SAFE_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
KEY_META: Final = "io.qinglong/idempotencyKey"
"""The `_meta` member of every call that carries the dispatch id (its idempotency key)."""
MAX_LIST_PAGES: Final = 32
REFUSED_CODES: Final = frozenset({types.METHOD_NOT_FOUND, types.INVALID_PARAMS})
"""JSON-RPC errors with which a server says it did not run the tool (unknown method or tool,
arguments it refused). Every other error may stand for a failure after the tool ran, or is
the transport's own stand-in for a lost answer (a 5xx, a closed stream)."""
_SSE_SLACK: Final = 64 * 1024


class NotSent(errors.QinglongError):
    """No `tools/call` request was written: the server could not be started, reached,
    initialized or listed, or a secret could not be read."""

    code = "mcp_not_sent"


class Lost(errors.QinglongError):
    """The call was handed to the transport and no answer can be trusted: it may have run."""

    code = "mcp_answer_lost"


class SecretInvalid(errors.QinglongError):
    """A secret cannot be put in an environment variable or a header."""

    code = "secret_invalid"


class Phase(enum.Enum):
    """How far a session got; decides what a failure means."""

    CONNECT = "mcp_connect_failed"
    INITIALIZE = "mcp_initialize_failed"
    LIST = "mcp_list_failed"
    CALL = "mcp_connection_lost"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Answer:
    """What the server answered to a call."""

    is_error: bool
    content: list[dict[str, Any]]
    structured: Any


def _text(value: bytes, ref: secrets.SecretRef, *, header: bool) -> str:
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        raise SecretInvalid(f"secret {ref} is not UTF-8") from None
    if "\x00" in text or (header and not text.isprintable()):
        raise SecretInvalid(f"secret {ref} cannot be sent as it is")
    return text


def read_secrets(server: servers.Server, environ: Mapping[str, str] | None) -> dict[str, str]:
    """Every secret the server's configuration names, by variable or header name."""
    pairs = server.env_secrets if server.url is None else server.header_secrets
    return {
        name: _text(ref.read(environ), ref, header=server.url is not None) for name, ref in pairs
    }


class Session:
    """One initialized session whose tools are listed."""

    def __init__(self, session: mcp.ClientSession, server: servers.Server) -> None:
        self._session = session
        self._server = server
        self.phase = Phase.LIST
        self.answered = False
        """Whether a call was answered: a failure of the teardown after it changes nothing."""
        self.tools: dict[str, tools.ListedTool] = {}

    async def list_tools(self) -> None:
        """Every page of the server's tools (at most `MAX_LIST_PAGES`)."""
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            listed = await self._session.list_tools(params=params)
            for tool in listed.tools:
                annotations = (
                    tool.annotations.model_dump(by_alias=True) if tool.annotations else None
                )
                self.tools[tool.name] = tools.ListedTool(
                    name=tool.name,
                    input_schema=tool.input_schema,
                    hints=tools.hints_of(annotations),
                )
            cursor = listed.next_cursor
            if not cursor:
                return
        raise NotSent("the server lists too many pages of tools", code="mcp_list_failed")

    async def call(
        self, name: str, arguments: Mapping[str, Any], key: str, timeout_s: float
    ) -> Answer:
        """Send `tools/call` once; `Lost` unless the server answered in time."""
        self.phase = Phase.CALL
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(
                name=name, arguments=dict(arguments), _meta={KEY_META: key}
            )
        )
        try:
            with anyio.fail_after(timeout_s):
                result = await self._session.send_request(request, types.CallToolResult)
        except TimeoutError:
            raise Lost("the call timed out", code="mcp_call_timeout") from None
        except exceptions.MCPError as exc:
            if exc.code in REFUSED_CODES:
                raise errors.QinglongError(
                    "the server refused the call", code="mcp_call_refused"
                ) from None
            raise Lost("the answer was an error or lost", code="mcp_connection_lost") from None
        except Exception:  # a malformed answer, a closed stream: it may have run
            raise Lost("the answer cannot be read", code="mcp_bad_answer") from None
        self.answered = True
        return Answer(
            is_error=bool(result.is_error),
            content=[block.model_dump(by_alias=True, mode="json") for block in result.content],
            structured=result.structured_content,
        )


def _stdio(
    server: servers.Server, secret: Mapping[str, str], environ: Mapping[str, str] | None
) -> Any:
    env = os.environ if environ is None else environ
    clean = {"PATH": SAFE_PATH, "LANG": "C.UTF-8"}
    clean.update({name: env[name] for name in server.env if name in env})
    clean.update(secret)
    return stdio.StdioServerParameters(
        command=server.command[0], args=list(server.command[1:]), env=clean, cwd=server.cwd
    )


@contextlib.asynccontextmanager
async def _transport(
    server: servers.Server, environ: Mapping[str, str] | None
) -> AsyncIterator[tuple[Any, Any]]:
    secret = read_secrets(server, environ)  # raises before anything starts
    if server.url is None:
        # The server's stderr goes nowhere: it may print what it was given.
        with open(os.devnull, "w", encoding="utf-8") as errlog:  # noqa: ASYNC230  # /dev/null never blocks
            async with stdio.stdio_client(_stdio(server, secret, environ), errlog=errlog) as pair:
                yield pair
        return
    timeout = httpx2.Timeout(
        server.call_timeout_seconds + server.initialize_timeout_seconds,
        connect=server.connect_timeout_seconds,
    )
    headers = {**dict(server.headers), **secret}
    async with (
        httpx2.AsyncClient(
            headers=headers, timeout=timeout, trust_env=False, follow_redirects=False
        ) as http,
        streamable_http.streamable_http_client(
            server.url,
            http_client=http,
            terminate_on_close=False,  # a DELETE to a hung server would hold the execute
            max_sse_event_size=server.max_output_bytes + _SSE_SLACK,
        ) as pair,
    ):
        yield pair[0], pair[1]


def _own(exc: BaseException) -> errors.QinglongError | None:
    """Our own typed error, also when a task group of the SDK wrapped it in a group."""
    if isinstance(exc, errors.QinglongError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _own(inner)) is not None:
                return found
    return None


@contextlib.asynccontextmanager
async def connect(
    server: servers.Server, environ: Mapping[str, str] | None = None
) -> AsyncIterator[Session]:
    """An initialized session whose tools are listed; `NotSent` if it never got there, `Lost`
    for any failure escaping once `Session.call` began."""
    progress: list[Session] = []
    phase = Phase.CONNECT
    try:
        async with _transport(server, environ) as (read, write):
            phase = Phase.INITIALIZE
            async with mcp.ClientSession(read, write) as raw:
                with anyio.fail_after(
                    server.connect_timeout_seconds + server.initialize_timeout_seconds
                ):
                    await raw.initialize()
                    session = Session(raw, server)
                    progress.append(session)
                    phase = Phase.LIST
                    await session.list_tools()
                yield session
    except Exception as exc:  # the SDK's and the transport's own, often in an exception group
        own = _own(exc)
        if own is not None:
            raise own from None
        if progress and progress[0].answered:
            return  # the answer is in; closing the transport failed, which proves nothing
        if progress and progress[0].phase is Phase.CALL:
            raise Lost("the session failed during the call", code=Phase.CALL.value) from None
        raise NotSent(f"{phase.value}: {type(exc).__name__}", code=phase.value) from None
