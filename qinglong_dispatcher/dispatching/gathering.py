"""Requests of concurrent items gathered into one commit: what start barriers and completions
that happen together share (`start_barriers`, `grouped_completions`).

Each item announces itself (`arrive`) and later either asks (`submit`) or says it will not
(`leave`). The first request of a group waits until every announced item has done one or the
other, or at most `max_wait_s`, then commits all waiting requests with one call. A lone item
never waits. A failed call raises its error to every request of the group.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

import anyio

R = TypeVar("R")
T = TypeVar("T")


@dataclasses.dataclass(eq=False, kw_only=True, slots=True)
class _Waiting(Generic[R, T]):
    request: R
    done: anyio.Event = dataclasses.field(default_factory=anyio.Event)
    result: T | None = None
    error: BaseException | None = None


class Gathering(Generic[R, T]):
    """Commits the requests of items that ask at about the same time with one call."""

    def __init__(
        self, commit: Callable[[Sequence[R]], Awaitable[list[T]]], *, max_wait_s: float
    ) -> None:
        self._commit = commit
        self._max_wait_s = max_wait_s
        self._announced = 0
        self._waiting: list[_Waiting[R, T]] = []
        self._all_in = anyio.Event()

    def arrive(self) -> None:
        """An item may ask soon."""
        self._announced += 1

    def leave(self) -> None:
        """The item will not ask."""
        self._announced -= 1
        self._check()

    def _check(self) -> None:
        if self._waiting and len(self._waiting) >= self._announced:
            self._all_in.set()

    async def submit(self, request: R) -> T:
        """Commit this request with those asking at about the same time (the caller has
        arrived; this counts as its leaving). Raises what the commit raised."""
        mine: _Waiting[R, T] = _Waiting(request=request)
        self._waiting.append(mine)
        self._check()
        if len(self._waiting) == 1:
            # The first request leads: shielded, since the others' answers depend on it (the
            # wait is bounded by `max_wait_s`).
            with anyio.CancelScope(shield=True):
                await self._commit_group()
        try:
            await mine.done.wait()
        except BaseException:
            # Cancelled while its group waits for the rest: out of the group, so nothing is
            # committed for a task that will not go on. (Once the group is taken, its commit is
            # on its way, as a lone request in flight would be.)
            if mine in self._waiting:
                self._waiting.remove(mine)
                self._announced -= 1
                self._check()
            raise
        if mine.error is not None:
            raise mine.error
        assert mine.result is not None
        return mine.result

    async def _commit_group(self) -> None:
        with anyio.move_on_after(self._max_wait_s):
            await self._all_in.wait()
        group, self._waiting = self._waiting, []
        self._all_in = anyio.Event()
        self._announced -= len(group)
        self._check()
        try:
            results = await self._commit([w.request for w in group])
        except Exception as exc:  # every request of the group sees the failure
            for waiting in group:
                waiting.error = exc
        else:
            for waiting, result in zip(group, results, strict=True):
                waiting.result = result
        finally:
            for waiting in group:
                waiting.done.set()
