"""qinglong-dispatcher: executes approved actions durably, never twice by accident."""

from __future__ import annotations

__version__ = "0.1.0"
