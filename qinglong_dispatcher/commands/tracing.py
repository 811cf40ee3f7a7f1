"""The command line's tracer: the composition root's OpenTelemetry one only when the standard
`OTEL_*` variables turn tracing on; otherwise `ports.NOOP`, and nothing more is imported."""

from __future__ import annotations

import os

from qinglong_dispatcher import ports, tracing
from qinglong_dispatcher.config import tracing as tracing_config


def start() -> ports.Tracer:
    """The process's tracer, started once before the command runs."""
    if not tracing_config.tracing_on(os.environ):
        return tracing.current()
    from qinglong_dispatcher.bootstrap import tracing as started

    return started.start()
