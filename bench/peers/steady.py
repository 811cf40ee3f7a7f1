"""A peer's steady rate from its samples: completions per second between 10 % and 90 % done.

The first and last tenths are left out so that neither the worker's start-up nor its last,
partial batch counts; each crossing time is interpolated between the two samples around it.
"""

from __future__ import annotations

from collections.abc import Sequence

LOW, HIGH = 0.10, 0.90


def _crossing(samples: Sequence[Sequence[float]], done: float) -> float:
    """The time at which the completed count reached `done` (linear between samples)."""
    before = (0.0, 0.0)
    for elapsed, completed in samples:
        if completed >= done:
            t0, c0 = before
            if completed == c0:
                return elapsed
            return t0 + (elapsed - t0) * (done - c0) / (completed - c0)
        before = (elapsed, completed)
    raise ValueError(f"the samples never reach {done:g} completions")


def steady_per_s(samples: Sequence[Sequence[float]], jobs: int) -> float:
    """Jobs per second between LOW and HIGH of `jobs` completed (samples: (s, completed))."""
    low, high = LOW * jobs, HIGH * jobs
    span = _crossing(samples, high) - _crossing(samples, low)
    if span <= 0:
        raise ValueError("the samples are too coarse to time the steady part")
    return (high - low) / span


def samples_of(completed_at_ms: Sequence[int]) -> list[tuple[float, float]]:
    """(s since the first, completed so far) at each distinct completion time: our side's
    samples, read from the store after the drain (each succeeded execution's last change)."""
    ordered = sorted(completed_at_ms)
    if not ordered:
        return []
    samples: list[tuple[float, float]] = []
    for count, at_ms in enumerate(ordered, start=1):
        elapsed = (at_ms - ordered[0]) / 1000
        if samples and samples[-1][0] == elapsed:
            samples[-1] = (elapsed, count)
        else:
            samples.append((elapsed, count))
    return samples
