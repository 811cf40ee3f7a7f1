"""The pure part of tool steps (ADR-0156/0158): registry, StepRuns, start command and barrier."""
