"""`qinglong-dispatcher bench`: throughput, latency, cost per dispatch and idle footprint."""

from __future__ import annotations
