"""The tracing port: spans around the steps of a dispatch, named and joined by W3C text.

The core speaks only W3C `traceparent` strings (`domain.traces`); an adapter turns them into
its own contexts. `NOOP` is the default: a process whose `OTEL_*` variables turn tracing off
gets it, and imports nothing of OpenTelemetry (docs/traces.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Final, Protocol

AttributeValue = str | int | bool
"""What a span attribute may hold: ids, names, counts and outcomes, never a plan's member."""


class Span(Protocol):
    """One open span."""

    def set(self, key: str, value: AttributeValue | None) -> None:
        """Add an attribute (None: nothing is added)."""
        ...

    @property
    def traceparent(self) -> str | None:
        """This span's W3C context, to store or hand to an effect; None for a span that is
        not recorded."""
        ...


class Tracer(Protocol):
    """Opens spans; `enabled` says whether any of them is exported."""

    @property
    def enabled(self) -> bool:
        """Whether spans are recorded and exported."""
        ...

    def span(
        self,
        name: str,
        *,
        parent: str | None = None,
        new_trace: bool = False,
        links: Sequence[str] = (),
        attributes: Mapping[str, AttributeValue | None] | None = None,
    ) -> contextlib.AbstractContextManager[Span]:
        """A span named `name` (a stable event-like name), the current task's span for the
        `with` block. Its parent: `parent` (a stored traceparent) if given; else none at all
        with `new_trace` (a retry or a takeover: a new trace, `links` naming the original);
        else the span open in this task, if any. `links` are traceparents it follows from."""
        ...

    def mark(
        self,
        name: str,
        *,
        parent: str | None = None,
        new_trace: bool = False,
        links: Sequence[str] = (),
        attributes: Mapping[str, AttributeValue | None] | None = None,
    ) -> None:
        """A span for a step that has already happened (a committed vote, a page's item):
        recorded and ended at once, never the task's current span; its parent as `span`'s."""
        ...

    def current_ids(self) -> tuple[str, str] | None:
        """The hex trace id and span id of the span open in this task (for log lines)."""
        ...

    def shutdown(self) -> None:
        """Export what is buffered and stop; called once, at the process's end."""
        ...


class _NoopSpan:
    """Records nothing."""

    def set(self, key: str, value: AttributeValue | None) -> None:
        """Nothing to add."""

    @property
    def traceparent(self) -> str | None:
        """No context: nothing is recorded."""
        return None


_NOOP_SPAN: Final = _NoopSpan()


class NoopTracer:
    """Tracing off: every span is the same inert object, and nothing is imported."""

    @property
    def enabled(self) -> bool:
        """Never."""
        return False

    @contextlib.contextmanager
    def span(
        self,
        name: str,
        *,
        parent: str | None = None,
        new_trace: bool = False,
        links: Sequence[str] = (),
        attributes: Mapping[str, AttributeValue | None] | None = None,
    ) -> Iterator[Span]:
        """The inert span."""
        yield _NOOP_SPAN

    def mark(
        self,
        name: str,
        *,
        parent: str | None = None,
        new_trace: bool = False,
        links: Sequence[str] = (),
        attributes: Mapping[str, AttributeValue | None] | None = None,
    ) -> None:
        """Nothing is recorded."""

    def current_ids(self) -> tuple[str, str] | None:
        """None: no span is open."""
        return None

    def shutdown(self) -> None:
        """Nothing to export."""


NOOP: Final[Tracer] = NoopTracer()
"""The tracer of a process without tracing."""
