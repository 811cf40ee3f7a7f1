"""The W3C `traceparent` a request takes, and the `OTEL_*` variables that turn tracing on."""

from __future__ import annotations

import pytest

from qinglong_dispatcher import ports, tracing
from qinglong_dispatcher.config import tracing as tracing_config
from qinglong_dispatcher.domain import errors, traces

GIVEN = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_version_00_context_is_kept_as_given() -> None:
    assert traces.parse_traceparent(GIVEN) == GIVEN
    assert traces.optional_traceparent(None) is None
    assert traces.optional_traceparent("") is None
    assert traces.trace_id_of(GIVEN) == "4bf92f3577b34da6a3ce929d0e0e4736"


def test_a_later_version_is_read_as_version_00_and_its_extra_fields_dropped() -> None:
    later = "cc" + GIVEN[2:] + "-what-comes-later"
    assert traces.parse_traceparent(later) == GIVEN


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "00",
        GIVEN[:-1],
        GIVEN + "-x",  # version 00 has exactly four fields
        GIVEN.upper(),
        GIVEN.replace("-", "_"),
        "ff" + GIVEN[2:],
        "0g" + GIVEN[2:],
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0z",
        "cc" + GIVEN[2:] + "x",  # a later version's next field starts with a dash
        "cc" + GIVEN[2:] + "-" + "x" * 500,  # bounded
    ],
)
def test_anything_else_is_one_typed_error(bad: str) -> None:
    with pytest.raises(traces.InvalidTraceparent) as caught:
        traces.parse_traceparent(bad)
    assert caught.value.code == "traceparent_invalid"
    assert isinstance(caught.value, errors.InvalidInput)
    assert str(caught.value).startswith("traceparent: not a W3C trace context")


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "x"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, True),
        # Only an exporting process cares which protocol it would use.
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, False),
    ],
)
def test_the_standard_variables_decide_whether_a_process_traces(
    environ: dict[str, str], on: bool
) -> None:
    assert tracing_config.tracing_on(environ) is on


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "PROTOCOL"),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"},
            "TRACES_PROTOCOL",
        ),
    ],
)
def test_what_cannot_be_exported_is_a_configuration_error(
    environ: dict[str, str], named: str
) -> None:
    with pytest.raises(errors.ConfigurationError) as caught:
        tracing_config.tracing_on(environ)
    assert named in str(caught.value)


def test_the_default_tracer_is_inert_and_hands_effects_the_stored_context() -> None:
    assert tracing.current() is ports.NOOP
    with tracing.current().span("x", parent=GIVEN, attributes={"a": 1}) as span:
        span.set("b", "c")
        assert span.traceparent is None
        assert tracing.current().current_ids() is None
        assert tracing.effect_traceparent(span, GIVEN) == GIVEN
        assert tracing.effect_traceparent(span, None) is None
