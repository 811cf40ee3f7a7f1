"""The tracing port over the OpenTelemetry SDK, exporting by OTLP/HTTP (the `[otel]` extra).

Imported only by the composition root, and only when the `OTEL_*` variables turn tracing on
(`config.tracing`): the SDK reads its usual variables itself (endpoint, headers, sampler,
batch sizes, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`). Exceptions are never recorded
on a span (their messages could carry values); a failed step says so by its status and its
`qinglong.outcome`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from qinglong_dispatcher import ports

DEFAULT_SERVICE_NAME = "qinglong-dispatcher"
_PROPAGATOR = TraceContextTextMapPropagator()


def _context_of(traceparent: str) -> trace.SpanContext | None:
    ctx = _PROPAGATOR.extract({"traceparent": traceparent})
    found = trace.get_current_span(ctx).get_span_context()
    return found if found.is_valid else None


def _w3c(span_context: trace.SpanContext) -> str | None:
    if not span_context.is_valid:
        return None
    return (
        f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}"
        f"-{int(span_context.trace_flags):02x}"
    )


class _Span:
    """An SDK span behind the port."""

    __slots__ = ("_span",)

    def __init__(self, span: trace.Span) -> None:
        self._span = span

    def set(self, key: str, value: ports.tracing.AttributeValue | None) -> None:
        """Add an attribute (None: nothing)."""
        if value is not None:
            self._span.set_attribute(key, value)

    @property
    def traceparent(self) -> str | None:
        """This span's W3C context (sampled or not: a downstream joins the same trace)."""
        return _w3c(self._span.get_span_context())


class OtelTracer:
    """`ports.Tracer` over one SDK tracer provider."""

    def __init__(self, provider: TracerProvider) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer("qinglong_dispatcher")

    @property
    def enabled(self) -> bool:
        """Spans are recorded (as the sampler decides) and exported."""
        return True

    @contextlib.contextmanager
    def span(
        self,
        name: str,
        *,
        parent: str | None = None,
        new_trace: bool = False,
        links: Sequence[str] = (),
        attributes: Mapping[str, ports.tracing.AttributeValue | None] | None = None,
    ) -> Iterator[ports.Span]:
        """An SDK span, current in this task for the block."""
        context: otel_context.Context | None = None
        if parent is not None:
            context = _PROPAGATOR.extract({"traceparent": parent})
        elif new_trace:
            context = otel_context.Context()
        linked = [trace.Link(c) for c in map(_context_of, links) if c is not None]
        kept = {k: v for k, v in (attributes or {}).items() if v is not None}
        with self._tracer.start_as_current_span(
            name,
            context=context,
            links=linked,
            attributes=kept,
            record_exception=False,
        ) as span:
            yield _Span(span)

    def current_ids(self) -> tuple[str, str] | None:
        """The ids of the span open in this task, if it is recorded."""
        found = trace.get_current_span().get_span_context()
        if not found.is_valid:
            return None
        return f"{found.trace_id:032x}", f"{found.span_id:016x}"

    def shutdown(self) -> None:
        """Flush the batch and stop exporting."""
        self._provider.shutdown()


def open_tracer(environ: Mapping[str, str] | None = None) -> OtelTracer:
    """A tracer exporting by OTLP/HTTP as the `OTEL_*` variables say, batched in the SDK's
    own thread (`OTEL_BSP_*`); the sampler is the SDK's (`OTEL_TRACES_SAMPLER`, by default
    parent-based always-on)."""
    env = os.environ if environ is None else environ
    resource = Resource.create({SERVICE_NAME: env.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE_NAME})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return OtelTracer(provider)
