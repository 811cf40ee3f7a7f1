"""The OpenTelemetry adapter reads a stored `traceparent` by position: for every form, the
same span context as the SDK's own W3C propagator (or none where it finds none)."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from qinglong_dispatcher.adapters import otel_traces

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"


def _propagators(traceparent: str) -> trace.SpanContext | None:
    ctx = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    found = trace.get_current_span(ctx).get_span_context()
    return found if found.is_valid else None


@pytest.mark.parametrize(
    "traceparent",
    [
        f"00-{TRACE}-{SPAN}-01",
        f"00-{TRACE}-{SPAN}-00",
        f"00-{TRACE}-{SPAN}-03",
        f"00-{'0' * 32}-{SPAN}-01",
        f"00-{TRACE}-{'0' * 16}-01",
        f"00-{TRACE.upper()}-{SPAN}-01",
        f"00-{TRACE[:-1]}g-{SPAN}-01",
        f"00-{TRACE}-{SPAN}-0x",
        f"00-{TRACE}-{SPAN}-01-extra",
        f"01-{TRACE}-{SPAN}-01",
        f"ff-{TRACE}-{SPAN}-01",
        f"00-{TRACE}+{SPAN}-01",
        "",
    ],
)
def test_a_traceparent_reads_as_the_propagator_reads_it(traceparent: str) -> None:
    assert otel_traces._context_of(traceparent) == _propagators(traceparent)
