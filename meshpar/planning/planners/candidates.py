"""Plans worth timing: the few a planner's cost model ranks near its pick.

Where the cost model's margins between plans are within its error (on a noisy
host, a few percent), the fastest plan is found by timing a few candidates
on the cluster itself: a *verified* pick (``meshpar bench train --verify K``,
``meshpar plan --verify K``). :func:`candidate_plans` lists them, distinct and
fastest predicted first: the planner's pick over every device subset, its best
plan for each mesh shape of the whole cluster and for each device subset it
weighs (the fastest device alone, the fastest k), and the batch splits one
sample away from each of those
(integer splits of a small batch are where the cost model's ranking is least
sure: neighbouring splits of resattnet3d-small's batch 32 measured within 3.5%
of each other, docs/measuring.md).
"""
from __future__ import annotations

from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.cost_model import CostModel
from meshpar.planning.description import ModelDescription
from meshpar.planning.memory import MEASURED, MemoryTerms
from meshpar.planning.plan import Plan
from meshpar.planning.planners import plan as make_plan
from meshpar.planning.planners import plan_subsets, with_worker_addresses
from meshpar.planning.planners.common import (BATCH_AXIS, MODEL_AXIS, allowed_shapes, build_plan,
                                              subset_cost)


def candidate_plans(model: ModelDescription, cluster: ClusterSpec, batch: int, count: int,
                    method: str = "ga", seed: int = 0, memory_terms: MemoryTerms = MEASURED,
                    **options) -> list:
    """Up to ``count`` distinct plans of ``model`` on ``cluster``, those that fit the
    memory first, then by predicted step time; the first is :func:`~meshpar.planning.
    planners.plan`'s own pick (``subsets=True``) unless another candidate is
    predicted faster. ``method``, ``seed`` and ``options`` go to the planner."""
    if int(count) < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    cost = CostModel(model, cluster, batch, memory_terms=memory_terms)
    # the pick over every device subset, and each subset's best that it was picked
    # from (the fastest device alone, the fastest k), each planned once: the pick is
    # only the best of them, and at resattnet3d-small's batch 8 the fast worker alone,
    # predicted 2.5% slower than a 7/1 split, ran 1.28x as fast
    weighed = plan_subsets(model, cluster, batch, method, seed, memory_terms=memory_terms,
                           **options)
    found = [weighed.best]
    for shape in allowed_shapes(cost):
        found.append(make_plan(model, cluster, batch, method, seed, shapes=[shape],
                               memory_terms=memory_terms, **options))
    found.extend(weighed.subsets)
    found = _distinct(found)  # the pick is often one shape's best: its neighbours once
    for p in list(found):
        found.extend(batch_neighbours(p, model, cluster, memory_terms))
    # every candidate records its workers' addresses, the batch neighbours too, so that
    # each is placed on the workers its devices were profiled at (ClusterClient.place)
    return [with_worker_addresses(p, cluster) for p in _distinct(sorted(
        found, key=lambda p: (not p.feasible, p.predicted_step_seconds)))[:int(count)]]


def _distinct(plans: list) -> list:
    """``plans`` without the ones that run the same as an earlier one, in order."""
    out = []
    for p in plans:
        if not any(same_plan(p, q) for q in out):
            out.append(p)
    return out


def same_plan(a: Plan, b: Plan) -> bool:
    """Whether two plans run the same: the same mesh and layout, every device with
    the same share of every laid-out dimension, and the same devices sharing a
    batch row and a model column. Plans that list their rows or columns in
    another order (a split of 24/8 over tasks 0, 1 and one of 8/24 over tasks
    1, 0) give each device the same work and wait on the same devices: only the
    samples each row gets differ."""
    return (a.mesh_shape == b.mesh_shape and sorted(a.layout) == sorted(b.layout)
            and _placement(a) == _placement(b))


def _placement(p: Plan) -> tuple:
    """``(shares, rows, columns)``: each device's share of every split dimension, and
    the sets of devices sharing a batch row and a model column, independent of the
    order rows and columns are listed in."""
    cols = dict(p.mesh_shape).get(MODEL_AXIS, 1)
    rows = len(p.devices) // cols
    by_axis = {dim: axis for dim, axis in p.layout}
    shares = {}
    for pnum, device in enumerate(p.devices):
        position = dict(zip((BATCH_AXIS, MODEL_AXIS), divmod(pnum, cols)))  # row, column
        shares[device] = tuple(sorted(
            (dim, sizes[position[by_axis[dim]]] if by_axis.get(dim) in position
             else tuple(sizes))  # not laid out: whole on every device
            for dim, sizes in p.split_sizes.items()))
    grid = [list(p.devices[r * cols:(r + 1) * cols]) for r in range(rows)]
    row_sets = sorted(sorted(row) for row in grid)
    col_sets = sorted(sorted(grid[r][m] for r in range(rows)) for m in range(cols))
    return shares, row_sets, col_sets


def batch_neighbours(p: Plan, model: ModelDescription, cluster: ClusterSpec,
                     memory_terms: MemoryTerms = MEASURED) -> list:
    """``p`` with one sample moved from one batch row of its mesh to another (every
    row keeps at least one), priced by the same cost model; none for one row."""
    shape = dict(p.mesh_shape)
    rows, cols = shape[BATCH_AXIS], shape[MODEL_AXIS]
    if rows < 2:
        return []
    cost = subset_cost(CostModel(model, cluster, p.batch, memory_terms=memory_terms),
                       [d for d in cluster.devices if d.device in p.devices])
    names = [d.device for d in cost.cluster.devices]
    perm = [names.index(d) for d in p.devices]
    sizes = list(p.split_sizes[model.batch_dim])
    on_model = [dim for dim, axis in p.layout if axis == MODEL_AXIS]
    out = []
    for i in range(rows):
        for j in range(rows):
            if i == j or sizes[j] < 2:
                continue
            moved = list(sizes)
            moved[i] += 1
            moved[j] -= 1
            out.append(build_plan(f"{p.method}-neighbour", cost, rows, cols, perm,
                                  [float(s) for s in moved], p.split_weights[MODEL_AXIS],
                                  p.dim_split_weights, layout=on_model))
    return out
