"""Completions of concurrent items committed together: the items a page's workers execute at
the same time and that finish within a few milliseconds of each other write their completions
in one transaction (docs/actions.md).

Each completion is still fenced alone (`ExecutionStore.complete_many` runs each item's own
`complete` in the transaction). If the shared transaction fails, nothing of it is kept and
each item writes its completion alone, as it would have without the group (a replay of a
completion whose transaction did commit finds its mutation and writes nothing). A lone item
never waits: with one worker (`concurrency` 1) every completion commits alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from qinglong_dispatcher import ports
from qinglong_dispatcher.dispatching import gathering
from qinglong_dispatcher.domain import errors, records

MAX_WAIT_S = 0.005
"""Longest a completion waits for the items still executing beside it."""

Answer = records.Transition | errors.StoreError


class Ticket:
    """One executing item's place in the group: `complete` once, or not at all."""

    def __init__(self, completions: GroupedCompletions) -> None:
        self._completions = completions
        self.asked = False

    async def complete(self, request: ports.CompletionRequest) -> records.Transition:
        """Write this item's completion with those finishing beside it; raises the store's
        error for this item alone."""
        self.asked = True
        answer = await self._completions.gathering.submit(request)
        if isinstance(answer, errors.StoreError):
            raise answer
        return answer


class GroupedCompletions:
    """Gathers the completions of items executing together into one transaction."""

    def __init__(
        self, store: ports.ExecutionStore, clock: ports.Clock, *, max_wait_s: float = MAX_WAIT_S
    ) -> None:
        self._store = store
        self._clock = clock
        self.gathering: gathering.Gathering[ports.CompletionRequest, Answer] = gathering.Gathering(
            self._commit, max_wait_s=max_wait_s
        )

    @contextlib.contextmanager
    def executing(self) -> Iterator[Ticket]:
        """Held while an item executes: the group waits for it (boundedly) until it completes
        or leaves without a completion."""
        ticket = Ticket(self)
        self.gathering.arrive()
        try:
            yield ticket
        finally:
            if not ticket.asked:
                self.gathering.leave()

    async def _commit(self, requests: Sequence[ports.CompletionRequest]) -> list[Answer]:
        now_ms = self._clock.now_ms()
        if len(requests) > 1:
            try:
                return list(await self._store.complete_many(requests, now_ms=now_ms))
            except errors.StoreError:
                pass  # nothing of it is kept: each one alone, as without the group
        return [await self._alone(request, now_ms=now_ms) for request in requests]

    async def _alone(self, request: ports.CompletionRequest, *, now_ms: int) -> Answer:
        try:
            return await self._store.complete(
                request.identity,
                mutation_id=request.mutation_id,
                completion=request.completion,
                result_code=request.result_code,
                now_ms=now_ms,
                receipt=request.receipt,
            )
        except errors.StoreError as exc:
            return exc
