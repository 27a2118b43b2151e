"""Split in proportion to device speed (largest remainder), the usual baseline.

Devices are placed speed-sorted column by column (see
:func:`meshpar.planning.planners.common.sorted_placement`), model-axis weights are the
columns' speeds and batch-axis weights the rows' resulting rates; speeds are
read from each device's profile at the size of an even share of the step.
Every allowed mesh shape is tried and the fastest by the cost model kept. On a
``1 x n`` mesh this is the classic split: 64 filters over speeds
0.8/0.5/0.3/0.2 give 28/18/11/7.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Optional, Sequence

from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.cost_model import CostModel
from meshpar.planning.description import ModelDescription
from meshpar.planning.plan import Plan
from meshpar.planning.planners.common import (best_over_shapes, build_plan, proportional_weights,
                                    representative_speeds, sorted_placement)


def plan_proportional(model: ModelDescription, cluster: ClusterSpec, batch: int,
                      shapes: Optional[Sequence[tuple]] = None,
                      cost: Optional[CostModel] = None) -> Plan:
    """Speed-proportional weights and speed-sorted placement; best mesh shape."""
    t0 = time.perf_counter()
    cost = cost or CostModel(model, cluster, batch)
    speeds = representative_speeds(cost)

    def make(rows, cols):
        perm = sorted_placement(speeds, rows, cols)
        batch_w, model_w = proportional_weights(speeds, perm, rows, cols)
        return build_plan("proportional", cost, rows, cols, perm, batch_w, model_w)

    best = best_over_shapes("proportional", cost, make, shapes)
    return dataclasses.replace(best, planning_seconds=time.perf_counter() - t0)
