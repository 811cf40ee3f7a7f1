"""The dispatcher's budget (`DispatchConfig`), from the profile's settings."""

from __future__ import annotations

import dataclasses

from qinglong_dispatcher.dispatching import grouped_completions, start_barriers
from qinglong_dispatcher.domain import errors


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class DispatchConfig:
    """The dispatcher's budget, from the profile."""

    owner: str
    page_size: int
    lease_ms: int
    concurrency: int
    retry_backoff_ms: int
    execute_timeout_ms: int
    barrier_wait_s: float = start_barriers.MAX_WAIT_S
    """Longest a start barrier waits for the page's other carried items to reach theirs."""
    completion_wait_s: float = grouped_completions.MAX_WAIT_S
    """Longest a completion waits for the items finishing beside it."""
    passage_page_size: int = 64
    """Rows one passage of a transactional action commits at once. Apart from `page_size`:
    a passage carries no item through a worker, and its commit's sync is most of what it
    costs, so a larger page costs less per dispatch (docs/performance.md)."""

    def __post_init__(self) -> None:
        if not 1 <= self.page_size <= 64:
            raise errors.ConfigurationError("page size must be between 1 and 64")
        if not 1 <= self.passage_page_size <= 64:
            raise errors.ConfigurationError("passage page size must be between 1 and 64")
        if self.execute_timeout_ms >= self.lease_ms:
            raise errors.ConfigurationError("execute timeout must be below the lease")
