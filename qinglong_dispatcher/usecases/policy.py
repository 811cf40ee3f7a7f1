"""What the use cases need from the settings."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Policy:
    """What the API needs from the settings."""

    approval_ttl_ms: int
    max_attempts: int
