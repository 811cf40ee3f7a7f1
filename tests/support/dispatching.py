"""Building a real dispatcher over a test store."""

from __future__ import annotations

from collections.abc import Mapping

from qinglong_dispatcher import bootstrap, ports
from qinglong_dispatcher.dispatching import dispatcher

LEASE_MS = 30_000


def make_dispatcher(
    store: ports.Store,
    clock: ports.Clock,
    *,
    owner: str = "w1",
    handlers: Mapping[str, ports.ApprovedActionHandler] | None = None,
    page_size: int = 16,
    passage_page_size: int | None = None,
    concurrency: int = 1,
    lease_ms: int = LEASE_MS,
    execute_timeout_ms: int | None = None,
    fault_hook: dispatcher.FaultHook | None = None,
    group_wait_s: float | None = None,
) -> dispatcher.Dispatcher:
    """A dispatcher with the built-in actions unless `handlers` replaces them; `group_wait_s`
    replaces how long a start barrier or a completion waits for the items beside it (a test
    that counts grouped commits sets it long, so a slow machine cannot split a group). A
    passage takes `page_size` rows unless `passage_page_size` says otherwise, so that a test's
    page is one page whichever path its rows take."""
    waits = (
        {}
        if group_wait_s is None
        else {"barrier_wait_s": group_wait_s, "completion_wait_s": group_wait_s}
    )
    return dispatcher.Dispatcher(
        store,
        handlers if handlers is not None else bootstrap.handlers(store, clock),
        clock,
        dispatcher.DispatchConfig(
            owner=owner,
            page_size=page_size,
            passage_page_size=passage_page_size or page_size,
            lease_ms=lease_ms,
            concurrency=concurrency,
            retry_backoff_ms=1000,
            execute_timeout_ms=execute_timeout_ms or lease_ms // 2,
            **waits,
        ),
        fault_hook=fault_hook,
    )
