"""Steady-state throughput of a training run, from the wall-clock end of each step.

Graph building, session start, the first steps (lazy allocation, autotuning)
and the final checkpoint and evaluation are not training speed: the summary
uses the steps after a warm-up, and reports the median step with its
inter-quartile spread (robust to a step that also wrote a checkpoint).

>>> s = steady_state([0.0, 5.0, 5.1, 5.2, 5.3, 5.4, 5.5], batch=8, warmup=2)
>>> round(s["samples_per_second"]), s["steady_steps"]
(80, 5)
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np


def default_warmup(steps: int) -> int:
    """Steps left out at the start: 10% of the run, at least 3 (fewer in a short run)."""
    return min(max(3, steps // 10), max(steps - 2, 0))


def steady_state(step_ends: Sequence[float], batch: int, warmup: Optional[int] = None,
                 leave_out: Sequence[int] = ()) -> dict:
    """Throughput of the steps after ``warmup`` from their end times (seconds).

    ``step_ends[i]`` is when step ``i`` finished, so step ``i``'s time is
    ``step_ends[i] - step_ends[i - 1]``; the first step has no start and is
    always part of the warm-up. Returns ``samples_per_second`` (batch /
    median step), ``samples_per_second_p25_p75`` (from the 75th and 25th
    percentile steps), ``samples_per_second_mean`` (steps / total time),
    ``step_seconds_median``, ``warmup_steps``, ``steady_steps`` and
    ``steady_window`` (when the first steady step started and the last one
    ended, on ``step_ends``' clock); the rates and the window are None when
    fewer than two steps remain. ``leave_out``: numbers of steps (from 1, as
    ``step_ends`` counts them) whose time is not the training's own, such as
    a traced step (``FULL_TRACE`` collects every op's stats: 1.5-2x a step),
    left out of the rates and of ``steady_steps``.
    """
    ends = np.asarray(step_ends, dtype=float)
    warmup = default_warmup(len(ends)) if warmup is None else int(warmup)
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    first = max(warmup, 1)  # step first + 1 (from 1) is the first steady one
    durations = np.diff(ends)[first - 1:]
    steady = np.arange(first + 1, len(ends) + 1)
    durations = durations[~np.isin(steady, np.asarray(list(leave_out), dtype=int))]
    out = {"batch": int(batch), "warmup_steps": max(warmup, 1), "steady_steps": int(len(durations)),
           "samples_per_second": None, "samples_per_second_p25_p75": None,
           "samples_per_second_mean": None, "step_seconds_median": None, "steady_window": None}
    if len(durations) < 2:
        return out
    p25, median, p75 = np.percentile(durations, [25, 50, 75])
    out.update(samples_per_second=float(batch / median),
               samples_per_second_p25_p75=[float(batch / p75), float(batch / p25)],
               samples_per_second_mean=float(batch * len(durations) / durations.sum()),
               step_seconds_median=float(median),
               steady_window=[float(ends[first - 1]), float(ends[-1])])
    return out
