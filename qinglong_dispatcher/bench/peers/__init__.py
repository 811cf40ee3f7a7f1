"""`bench --compare-peers`: our dispatch rates beside two peers' (huey, pgqueuer), each peer run
by its own harness in a venv of its own (docs/performance.md, "Beside the peers")."""

from __future__ import annotations
