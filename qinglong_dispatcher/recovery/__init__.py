"""Evidence-only recovery of `recovery_required` executions.

The reconciler asks each action's read-only evidence provider (`actions/<name>/evidence.py`,
or an installed action's) and never reaches a handler: it cannot execute.
"""
