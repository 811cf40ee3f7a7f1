"""Whether this process traces: the standard `OTEL_*` variables decide, never a setting of ours.

Tracing is on when `OTEL_TRACES_EXPORTER=otlp`, or when an OTLP endpoint is named
(`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) and the exporter is
not `none`; `OTEL_SDK_DISABLED=true` turns it off whatever else is set. Only OTLP over
HTTP with protobuf is exported: another exporter or protocol is a configuration error, one
line naming the variable (docs/traces.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from qinglong_dispatcher.domain import errors

EXPORTERS: Final = frozenset({"otlp", "none"})
PROTOCOLS: Final = frozenset({"http/protobuf"})
_ENDPOINTS: Final = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def tracing_on(environ: Mapping[str, str]) -> bool:
    """Whether `environ` turns tracing on; `ConfigurationError` for what we cannot export."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter and exporter not in EXPORTERS:
        raise errors.ConfigurationError(
            "OTEL_TRACES_EXPORTER: only otlp (or none) is supported, by OTLP/HTTP"
        )
    if exporter == "none":
        return False
    on = exporter == "otlp" or any(environ.get(name, "").strip() for name in _ENDPOINTS)
    if on:
        for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
            protocol = environ.get(name, "").strip().lower()
            if protocol and protocol not in PROTOCOLS:
                raise errors.ConfigurationError(f"{name}: only http/protobuf is supported")
    return on
