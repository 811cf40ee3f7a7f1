"""Evidence-only recovery of `recovery_required` executions."""

from __future__ import annotations
