"""Our dispatch rates beside two peers' (huey, pgqueuer), each peer run by its own harness in a
venv of its own (docs/performance.md, "Beside the peers"). Outside the wheel: the peers are
installed from PyPI, which a deployed dispatcher never needs; run it from a checkout with
`python -m bench.peers` (`make bench-peers`)."""

from __future__ import annotations
