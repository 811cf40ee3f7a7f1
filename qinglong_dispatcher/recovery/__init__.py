"""Evidence-only recovery of `recovery_required` executions.

The `tool.invoke` evidence provider lives with its feature (`tools/evidence.py`).
"""

from __future__ import annotations
