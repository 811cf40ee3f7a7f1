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
import re
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
_STORED = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_EMPTY = otel_context.Context()


def _context_of(traceparent: str) -> trace.SpanContext | None:
    """The span context of a traceparent: read by position in the one form the database and
    the submits keep (`domain.traces`, version 00), else by the SDK's propagator."""
    stored = _STORED.fullmatch(traceparent)
    if stored is not None:
        trace_id, span_id = int(stored[1], 16), int(stored[2], 16)
        if trace_id and span_id:
            flags = trace.TraceFlags(int(stored[3], 16))
            return trace.SpanContext(trace_id, span_id, is_remote=True, trace_flags=flags)
        return None
    ctx = _PROPAGATOR.extract({"traceparent": traceparent})
    found = trace.get_current_span(ctx).get_span_context()
    return found if found.is_valid else None


def _parent_context(parent: str | None, new_trace: bool) -> otel_context.Context | None:
    """The context a span starts in: `parent`'s (an invalid one: a new trace, as the
    propagator would), an empty one for `new_trace`, else None (the current task's)."""
    if parent is not None:
        found = _context_of(parent)
        if found is None:
            return otel_context.Context()
        return trace.set_span_in_context(trace.NonRecordingSpan(found), _EMPTY)
    return otel_context.Context() if new_trace else None


def _kept(
    attributes: Mapping[str, ports.tracing.AttributeValue | None] | None,
) -> dict[str, ports.tracing.AttributeValue]:
    return {k: v for k, v in (attributes or {}).items() if v is not None}


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
        linked = [trace.Link(c) for c in map(_context_of, links) if c is not None]
        with self._tracer.start_as_current_span(
            name,
            context=_parent_context(parent, new_trace),
            links=linked,
            attributes=_kept(attributes),
            record_exception=False,
        ) as span:
            yield _Span(span)

    def mark(
        self,
        name: str,
        *,
        parent: str | None = None,
        new_trace: bool = False,
        links: Sequence[str] = (),
        attributes: Mapping[str, ports.tracing.AttributeValue | None] | None = None,
    ) -> None:
        """An SDK span started and ended at once, never attached to this task's context (no
        context switch, no wrapper: what a span costs the caller, measured in
        docs/performance.md)."""
        linked = [trace.Link(c) for c in map(_context_of, links) if c is not None]
        self._tracer.start_span(
            name,
            context=_parent_context(parent, new_trace),
            links=linked,
            attributes=_kept(attributes),
            record_exception=False,
        ).end()

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
