"""The implementations of the CLI commands, one module per area."""

from __future__ import annotations
