"""structlog to stderr: JSON lines in production, key-value in a terminal."""

from __future__ import annotations

import datetime
import json
import logging
import sys

import structlog

from qinglong_dispatcher import ports

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING}


class _JsonLines(logging.Formatter):
    """Records of the standard library's loggers (asyncpg, asyncio) as one JSON line each, like
    structlog's: the message and the error's class and message, never a traceback (which
    could carry values out of the frames), so stderr stays parseable during an outage."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "event": "python.log",
            "logger": record.name,
            "level": record.levelname.lower(),
            "message": record.getMessage(),
            "timestamp": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(),
        }
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            line["error"] = error.__class__.__name__
            line["error_message"] = str(error)
        return json.dumps(line, ensure_ascii=False, default=str)


def _route_stdlib_logging(level: int) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonLines())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(max(level, logging.WARNING))


class _TraceIds:
    """Adds `trace_id` and `span_id` of the span open where the event is logged, if any."""

    def __init__(self, tracer: ports.Tracer) -> None:
        self._tracer = tracer

    def __call__(
        self, logger: object, method: str, event: structlog.types.EventDict
    ) -> structlog.types.EventDict:
        ids = self._tracer.current_ids()
        if ids is not None:
            event.setdefault("trace_id", ids[0])
            event.setdefault("span_id", ids[1])
        return event


def configure(*, log_format: str, level: str, tracer: ports.Tracer = ports.NOOP) -> None:
    """Configure structlog once per process; events carry stable names, never plan contents.

    In JSON mode the standard library's loggers (what asyncpg and asyncio report) are routed
    to stderr as JSON lines too. With tracing on (`tracer.enabled`) an event logged inside a
    span carries its `trace_id` and `span_id`."""
    if log_format != "console":
        _route_stdlib_logging(_LEVELS.get(level, logging.ERROR))
    renderer: structlog.types.Processor
    if log_format == "console":
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    else:
        renderer = structlog.processors.JSONRenderer()
    traced: list[structlog.types.Processor] = [_TraceIds(tracer)] if tracer.enabled else []
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            *traced,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.ERROR)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
