"""Mesh-TensorFlow's even split: equal shares.

The mesh shape is chosen like the other planners do (every factorisation
``batch:R;model:M`` of the device count that the batch allows, the one the
cost model predicts fastest), so the comparison isolates the split. Unlike
Mesh-TensorFlow, a dimension need not be divisible by its mesh axis: sizes
come from :func:`meshpar.core.splits.even_sizes` (largest remainder), and
the devices are placed fastest first, row by row, so that the remainder (the
first parts' one extra) goes to the faster devices whatever order they are
listed in (equal shares make the placement matter for nothing else).
"""
from __future__ import annotations

import time
from typing import Optional, Sequence

from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.cost_model import CostModel
from meshpar.planning.description import ModelDescription
from meshpar.planning.plan import Plan
from meshpar.planning.planners.common import (best_over_shapes, build_plan,
                                              representative_speeds, sorted_placement)


def plan_even(model: ModelDescription, cluster: ClusterSpec, batch: int,
              shapes: Optional[Sequence[tuple]] = None, cost: Optional[CostModel] = None) -> Plan:
    """Equal weights on both axes; devices fastest first; best mesh shape."""
    t0 = time.perf_counter()
    cost = cost or CostModel(model, cluster, batch)
    speeds = representative_speeds(cost)

    def make(rows, cols):
        perm = sorted_placement(speeds, rows, cols, by_rows=True)
        return build_plan("even", cost, rows, cols, perm, [1.0] * rows, [1.0] * cols)

    best = best_over_shapes("even", cost, make, shapes)
    return _timed(best, t0)


def _timed(plan: Plan, t0: float) -> Plan:
    import dataclasses

    return dataclasses.replace(plan, planning_seconds=time.perf_counter() - t0)
