"""What the bench needs that the wheel does not ship: the peers' harness (`bench.peers`)."""

from __future__ import annotations
