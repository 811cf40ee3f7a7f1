"""The peers' harnesses: scripts the peers' venv's Python runs, never imported by the package.

Each imports its peer library, which lives only in that venv (mypy sees the libraries as
untyped); each prints one JSON line: the enqueue rate and (seconds, completed jobs) samples.
"""

from __future__ import annotations
