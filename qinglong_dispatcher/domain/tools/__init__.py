"""The pure part of tool steps: registry, StepRuns, start command, barrier (docs/decisions/0019)."""
