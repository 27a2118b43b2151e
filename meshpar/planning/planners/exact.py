"""The optimum of the cost model by exhaustive search (small instances only).

The search space is the GA's: every allowed mesh shape ``batch:R;model:M``,
every placement of devices on the grid up to symmetry (permuting rows or
columns, or swapping devices with identical profiles, changes nothing since
shares are chosen per coordinate), every integer batch split over rows, and
every integer split of each laid-out dimension over columns (independently
per dimension: any integer split is reachable from weights, so this covers
per-axis and per-dimension weights). Candidates are evaluated with the
vectorised cost model in chunks. Above ``max_candidates`` it raises
ValueError rather than run for hours; use the GA there.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import time
from typing import Optional, Sequence

import numpy as np

from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.cost_model import CostModel
from meshpar.planning.description import ModelDescription
from meshpar.planning.plan import Plan
from meshpar.planning.planners.common import allowed_shapes, build_plan, better

#: Largest number of candidate plans the exhaustive search will evaluate.
MAX_CANDIDATES = 3_000_000
#: Largest device count (placements are enumerated from n! permutations).
MAX_DEVICES = 8
CHUNK = 16384


def compositions(total: int, parts: int) -> np.ndarray:
    """All ways to write ``total`` as ``parts`` ordered integers >= 1, shape [C, parts]."""
    if parts == 1:
        return np.array([[total]], dtype=np.int64)
    cuts = np.array(list(itertools.combinations(range(1, total), parts - 1)), dtype=np.int64)
    if cuts.size == 0:
        return np.zeros((0, parts), dtype=np.int64)
    edges = np.concatenate([np.zeros((len(cuts), 1), np.int64), cuts,
                            np.full((len(cuts), 1), total, np.int64)], axis=1)
    return np.diff(edges, axis=1)


@functools.lru_cache(maxsize=64)
def _placements_cached(device_type: tuple, rows: int, cols: int) -> np.ndarray:
    return _placements(device_type, rows, cols)


def placements(device_type: Sequence[int], rows: int, cols: int) -> np.ndarray:
    """Placements (device index per pnum) distinct up to row/column permutation and
    swaps of identical devices, shape [K, n]."""
    return _placements_cached(tuple(int(t) for t in device_type), rows, cols)


def _placements(device_type: Sequence[int], rows: int, cols: int) -> np.ndarray:
    """Placements (device index per pnum) distinct up to row/column permutation and
    swaps of identical devices, shape [K, n]."""
    n = rows * cols
    types = np.asarray(device_type)
    seen, out = set(), []
    # Canonical form: permute the shorter axis every way, sort the lines of the
    # other, keep the smallest.
    transpose = rows < cols
    short = rows if transpose else cols
    short_perms = [list(p) for p in itertools.permutations(range(short))]
    for perm in itertools.permutations(range(n)):
        grid = types[list(perm)].reshape(rows, cols)
        if transpose:
            grid = grid.T  # now the short axis is the columns
        key = min(tuple(sorted(tuple(line) for line in grid[:, sp])) for sp in short_perms)
        if key in seen:
            continue
        seen.add(key)
        out.append(perm)
    return np.array(out, dtype=np.int64)


def count_candidates(cost: CostModel, shapes: Optional[Sequence[tuple]] = None) -> int:
    """Number of candidate plans the exhaustive search would evaluate."""
    if cost.n > MAX_DEVICES:
        raise ValueError(f"exact planner handles at most {MAX_DEVICES} devices, "
                         f"got {cost.n}; use --method ga")
    total = 0
    for rows, cols in allowed_shapes(cost, shapes):
        count = math.comb(cost.batch - 1, rows - 1)
        for size, on in zip(cost.dim_sizes, cost.active_dims(cols)):
            if on:
                count *= math.comb(int(size) - 1, cols - 1)
        total += count * len(placements(cost.device_type, rows, cols))
    return total


def plan_exact(model: ModelDescription, cluster: ClusterSpec, batch: int,
               shapes: Optional[Sequence[tuple]] = None, cost: Optional[CostModel] = None,
               max_candidates: int = MAX_CANDIDATES) -> Plan:
    """Exhaustive optimum of the cost model; ValueError if the space is too large."""
    t0 = time.perf_counter()
    cost = cost or CostModel(model, cluster, batch)
    n_candidates = count_candidates(cost, shapes)
    if n_candidates > max_candidates:
        raise ValueError(f"exact planner: {n_candidates:,} candidate plans exceed the limit "
                         f"of {max_candidates:,}; use --method ga")
    best, evaluated = None, 0
    for rows, cols in allowed_shapes(cost, shapes):
        found, count = _best_for_shape(cost, rows, cols)
        evaluated += count
        if found is not None and (best is None or better(found, best)):
            best = found
    best = dataclasses.replace(best, planning_seconds=time.perf_counter() - t0,
                               extra={"candidates": evaluated})
    return best


def _best_for_shape(cost: CostModel, rows: int, cols: int):
    active = cost.active_dims(cols)
    batch_comps = compositions(cost.batch, rows)
    dim_comps = [compositions(int(size), cols) if on else np.ones((1, cols), np.int64)
                 for size, on in zip(cost.dim_sizes, active)]
    places = placements(cost.device_type, rows, cols)
    axes = [len(places), len(batch_comps)] + [len(c) for c in dim_comps]
    total = int(np.prod(axes))
    best_key, best_idx = None, None
    for start in range(0, total, CHUNK):
        flat = np.arange(start, min(start + CHUNK, total))
        idx = np.unravel_index(flat, axes)
        perm = places[idx[0]]
        bsz = batch_comps[idx[1]]
        if dim_comps:
            csz = np.stack([dim_comps[d][idx[2 + d]] for d in range(len(dim_comps))], axis=1)
        else:
            csz = np.ones((flat.size, 0, cols))
        ev = cost.evaluate(rows, cols, perm, bsz, csz)
        # Feasible plans by time; if none fits, the least memory overflow.
        key = np.where(ev.feasible, ev.seconds, 1e300 * ev.overflow)
        i = int(np.argmin(key))
        if best_key is None or key[i] < best_key:
            best_key, best_idx = key[i], flat[i]
    idx = [int(v) for v in np.unravel_index(best_idx, axes)]
    perm = places[idx[0]]
    bsz = [float(x) for x in batch_comps[idx[1]]]
    dim_weights = {name: [float(x) for x in dim_comps[d][idx[2 + d]]]
                   for d, name in enumerate(cost.dim_names) if active[d]}
    model_w = next(iter(dim_weights.values())) if dim_weights else [1.0] * cols
    plan = build_plan("exact", cost, rows, cols, perm, bsz, model_w, dim_weights)
    return plan, total
