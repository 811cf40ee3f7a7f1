"""A real OTLP/HTTP trace receiver for the tracing tests: an aiohttp server on loopback that
decodes every `POST /v1/traces` with `opentelemetry-proto`, as a collector would, and keeps
the spans it carried in arrival order.

Each span is kept as a `Received`: its name, hex ids, parent, links and attributes, and the
service that sent it. A body that does not decode is answered 400 and counted as refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from aiohttp import web
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2


@dataclasses.dataclass(frozen=True)
class Received:
    """One exported span."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    """Empty for a root span."""
    links: tuple[tuple[str, str], ...]
    """(trace id, span id) of each span link."""
    attributes: dict[str, Any]
    service: str

    @property
    def traceparent_parent(self) -> str:
        """`trace_id-parent_span_id`, to compare with what a child was given."""
        return f"{self.trace_id}-{self.parent_span_id}"


def _value(value: common_pb2.AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


@dataclasses.dataclass
class Receiver:
    """What the server saw; `endpoint` is the OTLP base URL to export to."""

    endpoint: str = ""
    spans: list[Received] = dataclasses.field(default_factory=list)
    refused: int = 0
    arrived: anyio.Event = dataclasses.field(default_factory=anyio.Event)
    """Set when an export arrives (and replaced by `wait_for` for the next)."""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        message = trace_service_pb2.ExportTraceServiceRequest()
        try:
            message.ParseFromString(body)
        except Exception:  # any undecodable body is a refusal, as a collector answers
            self.refused += 1
            return web.Response(status=400)
        for resource_spans in message.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        Received(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            links=tuple((k.trace_id.hex(), k.span_id.hex()) for k in span.links),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            service=str(resource.get("service.name", "")),
                        )
                    )
        self.arrived.set()
        answer = trace_service_pb2.ExportTraceServiceResponse()
        return web.Response(body=answer.SerializeToString(), content_type="application/x-protobuf")

    def named(self, name: str) -> list[Received]:
        """The spans called `name`, in arrival order."""
        return [s for s in self.spans if s.name == name]

    def of_dispatch(self, dispatch_id: str) -> list[Received]:
        """The spans naming `dispatch_id`."""
        return [s for s in self.spans if s.attributes.get("qinglong.dispatch_id") == dispatch_id]

    async def wait_for(self, found: Callable[[], bool], seconds: float = 30) -> None:
        """Until `found()` holds (the exporter batches: spans arrive a little later)."""
        with anyio.fail_after(seconds):
            while not found():
                self.arrived = anyio.Event()
                await self.arrived.wait()


def exporting_env(receiver: Receiver) -> dict[str, str]:
    """The standard variables that make a process export its spans to `receiver` at once."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "OTEL_SERVICE_NAME": "qinglong-test",
    }


@contextlib.asynccontextmanager
async def serving() -> AsyncIterator[Receiver]:
    """A receiver listening on 127.0.0.1 (an ephemeral port) until the block ends."""
    receiver = Receiver()
    app = web.Application(client_max_size=16 * 1024 * 1024)
    app.router.add_post("/v1/traces", receiver.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        server = site._server
        assert server is not None
        port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        receiver.endpoint = f"http://127.0.0.1:{port}"
        yield receiver
    finally:
        await runner.cleanup()
