"""Turning tracing on for this process, when the standard `OTEL_*` variables ask for it.

Called once by the command line (`commands.tracing`, which imports this module only when
the variables turn tracing on) and the bench's replicas, before anything is traced: it
imports the OpenTelemetry adapter, installs it as the process's tracer and exports what is
buffered at exit. Without the variables nothing of OpenTelemetry is imported.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Mapping

from qinglong_dispatcher import ports, tracing
from qinglong_dispatcher.config import tracing as tracing_config
from qinglong_dispatcher.domain import errors


def start(environ: Mapping[str, str] | None = None) -> ports.Tracer:
    """The process's tracer: `ports.NOOP` unless the `OTEL_*` variables turn tracing on
    (`ConfigurationError` when they name what cannot be exported, or the `[otel]` extra is
    not installed)."""
    env = os.environ if environ is None else environ
    if not tracing_config.tracing_on(env):
        return tracing.current()
    try:
        from qinglong_dispatcher.adapters import otel_traces
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "opentelemetry":
            raise
        raise errors.ConfigurationError(
            "OTEL_* variables turn tracing on, but this install does not have OpenTelemetry: "
            "pip install 'qinglong-dispatcher[otel]'"
        ) from None
    tracer = otel_traces.open_tracer(env)
    tracing.install(tracer)
    atexit.register(tracer.shutdown)
    return tracer
