"""Measured speed profiles as the cost model reads them (numpy, no TensorFlow):
step profiles made non-decreasing in work, slice efficiencies in the share,
and log-log interpolation on a common grid."""
from __future__ import annotations

import numpy as np


def nondecreasing_profile(profile) -> tuple:
    """``profile`` ((work, FLOP/s) points) with its speeds made non-decreasing
    in work: each run of points where the speed falls is replaced by the
    geometric mean of its speeds (pool-adjacent-violators on log speed, the
    least-squares non-decreasing fit).

    For model-step profiles: a training step's speed grows with its batch as
    fixed per-step costs are shared out, and where a measured point breaks
    that, it is noise the planner would otherwise chase (measured: a slow
    worker's 8-sample step profiled at 8.46 GFLOP/s between 6.97 at 4 and
    7.76 at 16 made the planner give it 8 of 32 samples, which ran 10% over
    the prediction while 7 of 32 ran as predicted; docs/cost_model.md)."""
    points = sorted(profile)
    blocks = []  # [mean log speed, count]
    for _, f in points:
        blocks.append([float(np.log(f)), 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            v, n = blocks.pop()
            blocks[-1] = [(blocks[-1][0] * blocks[-1][1] + v * n) / (blocks[-1][1] + n),
                          blocks[-1][1] + n]
    speeds = [float(np.exp(v)) for v, n in blocks for _ in range(n)]
    return tuple((w, f) for (w, _), f in zip(points, speeds))


def lookup(grid: np.ndarray, table: np.ndarray, row: np.ndarray, x: np.ndarray) -> np.ndarray:
    """exp of ``table[row]`` interpolated linearly at ``x`` on ``grid`` (held constant
    outside it); broadcast over ``row`` and ``x``."""
    if grid.size == 1:
        return np.exp(table[row, 0] + np.zeros(np.shape(x)))
    x = np.clip(x, grid[0], grid[-1])
    i = np.clip(np.searchsorted(grid, x, side="right") - 1, 0, grid.size - 2)
    t = (x - grid[i]) / (grid[i + 1] - grid[i])
    return np.exp(table[row, i] * (1 - t) + table[row, i + 1] * t)


def slice_table(slices) -> tuple:
    """``(grid, table)``: log efficiency of each device type's slices on one grid of
    log fractions, 1 at the whole layer, capped at 1 (a slice never counts as
    faster than the whole layer, so the work/peak lower bound stays a bound)
    and non-decreasing in the fraction (:func:`nondecreasing_profile`: a
    narrower slice measured faster than a wider one is noise; seen: 0.88 at
    1/4 against 0.67 at 1/2 on one worker of a vgg-cifar profile);
    ``(None, None)`` when no device has a measured slice profile."""
    if not any(slices):
        return None, None
    grid = np.array(sorted({float(np.log(f)) for s in slices for f, _ in s} | {0.0}))
    fits = [nondecreasing_profile([(f, min(e, 1.0)) for f, e in s] + [(1.0, 1.0)])
            for s in slices]
    table = np.array([np.interp(grid, np.log([f for f, _ in fit]), np.log([e for _, e in fit]))
                      for fit in fits])
    return grid, table


def fixed_step_seconds(profile) -> float:
    """The part of a training step that does not grow with its batch, from a
    model-step profile ((work, FLOP/s) points at several batch sizes; work is
    proportional to the batch): the intercept of a least-squares line through
    the step times, held within [0, the shortest step]; 0 from fewer than two
    points.

    Measured on this repository's workers it grows with the model's
    parameters (the optimizer update and the weight gradients' handling):
    17-35 ms of a 0.9-core worker's step for vgg-cifar's 4.6M parameters,
    2-7 ms for resattnet3d-small's 60k (docs/cost_model.md)."""
    points = sorted(profile)
    if len(points) < 2:
        return 0.0
    work = np.array([w for w, _ in points], dtype=float)
    seconds = work / np.array([f for _, f in points], dtype=float)
    slope, intercept = np.polyfit(work, seconds, 1)
    return float(np.clip(intercept, 0.0, seconds.min()))
