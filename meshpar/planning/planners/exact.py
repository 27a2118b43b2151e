"""The optimum of the cost model: a MILP per mesh shape and placement.

The search space is the GA's: every allowed mesh shape ``batch:R;model:M``,
every placement of devices on the grid up to symmetry (permuting rows or
columns, or swapping devices with the same profile and memory, changes
nothing since shares are chosen per coordinate), every integer batch split
over rows, and every integer split of each laid-out dimension over columns
(independently per dimension). For devices of constant speed each (shape,
placement, batch split) is a mixed-integer program
(:mod:`meshpar.planning.planners.milp`), bounded below by each row's own
optimum (solved per independent group of dimensions) and solved best bound
first against the incumbent. Speeds that depend on the work size are not
linear: those instances are searched exhaustively, small spaces only
(``max_candidates``), and refused otherwise with a ValueError.

The layout is fixed, not searched: every split dimension of size >= M is
laid out on ``model`` (the layout of every plan before the layout gene). The
optimum is over that layout only; the GA's layout gene (replicating some
dimensions) can find faster plans outside it. Plans say so in
``extra["layout"]``.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import time
from typing import Optional, Sequence

import numpy as np

from meshpar.core.splits import split_sizes_batch
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.cost_model import CostModel
from meshpar.planning.description import ModelDescription
from meshpar.planning.plan import Plan

#: What the exact planner's optimum is over (``Plan.extra["layout"]``).
FIXED_LAYOUT = "fixed: every split dim of size >= M on model (the layout gene is not searched)"
from meshpar.planning.planners.common import (allowed_shapes, better, build_plan,
                                              device_kinds, proportional_weights)
from meshpar.planning.planners.milp import (allreduce_bound, constant_speeds, formulate,
                                            identical_neighbours, not_linear, row_optimum,
                                            row_overheads)

#: Largest number of candidate plans the exhaustive search will evaluate.
MAX_CANDIDATES = 3_000_000
#: Largest device count (placements are enumerated from n! permutations).
MAX_DEVICES = 8
CHUNK = 16384
#: Most programs (batch splits x placements) the MILP search will set up.
MAX_PROGRAMS = 200_000


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
        total += count * len(placements(device_kinds(cost), rows, cols))
    return total


class ExactTimeLimit(ValueError):
    """The exact planner did not prove its plan optimal within ``time_limit``.

    ``plan`` is the best plan found (None if none), ``gap`` the proven relative
    gap of its step time to the best lower bound.
    """

    def __init__(self, message: str, plan: Optional[Plan], gap: float):
        super().__init__(message)
        self.plan = plan
        self.gap = gap


def plan_exact(model: ModelDescription, cluster: ClusterSpec, batch: int,
               shapes: Optional[Sequence[tuple]] = None, cost: Optional[CostModel] = None,
               time_limit: Optional[float] = None, mip_rel_gap: float = 1e-4,
               max_candidates: int = MAX_CANDIDATES) -> Plan:
    """Optimum of the cost model: a MILP per mesh shape and placement (devices of
    constant speed), else exhaustive search of small spaces.

    ``time_limit`` (seconds, whole search) makes an unproven result an
    :class:`ExactTimeLimit` (a ValueError naming the limit and the gap reached).
    The plan's ``extra`` holds ``solver``, ``gap`` (proven relative gap),
    ``lower_bound_seconds`` (proven) and ``programs`` (MILPs solved, pruned),
    and ``layout``: the optimum is over the fixed layout (every split dim of
    size >= M on ``model``), not over the GA's layout gene.
    """
    t0 = time.perf_counter()
    cost = cost or CostModel(model, cluster, batch)
    if time_limit is not None and not time_limit > 0:
        raise ValueError(f"time_limit must be > 0 seconds, got {time_limit!r}")
    if not 0 <= mip_rel_gap < 1:
        raise ValueError(f"mip_rel_gap must be in [0, 1), got {mip_rel_gap!r}")
    speeds = constant_speeds(cost)
    if speeds is None:
        return _plan_enumerated(cost, shapes, max_candidates, t0)
    if cost.n > MAX_DEVICES:
        raise ValueError(f"exact planner handles at most {MAX_DEVICES} devices "
                         f"(placements are enumerated), got {cost.n}; use --method ga")
    search = _MilpSearch(cost, speeds, shapes, time_limit, mip_rel_gap, t0)
    return search.run()


class _MilpSearch:
    """Branch over (shape, placement): each a MILP, pruned by the incumbent."""

    def __init__(self, cost, speeds, shapes, time_limit, gap, t0):
        self.cost, self.speeds, self.t0 = cost, speeds, t0
        self.time_limit, self.gap = time_limit, gap
        kinds = device_kinds(cost)
        self.jobs = [(r, c, perm) for r, c in allowed_shapes(cost, shapes)
                     for perm in placements(kinds, r, c)]
        self._rows = {}

    def _row(self, line: np.ndarray):
        """:func:`row_optimum` of a row, cached by its devices' speeds (the columns
        of a row are interchangeable), its split returned in ``line``'s order."""
        types = self.cost.device_type[line]
        order = np.argsort(types, kind="stable")
        key = tuple(types[order])
        if key not in self._rows:
            self._rows[key] = row_optimum(self.cost, self.speeds, line[order])
        opt = self._rows[key]
        back = np.argsort(order)
        return dataclasses.replace(opt, dims={d: list(np.asarray(v)[back])
                                              for d, v in opt.dims.items()})

    def _heuristic(self):
        """Proportional split of every job: its step time (1e300 x its memory
        overflow if it does not fit); the sizes go to ``self._sizes``."""
        dev_speed = self.speeds[self.cost.device_type]
        times = []
        for rows, cols, perm in self.jobs:
            b, m = proportional_weights(dev_speed, perm, rows, cols)
            bsz = split_sizes_batch(self.cost.batch, b[None, :])
            csz = np.stack([split_sizes_batch(int(s), m[None, :]) if on
                            else np.ones((1, cols), np.int64)
                            for s, on in zip(self.cost.dim_sizes,
                                             self.cost.active_dims(cols))], axis=1) \
                if self.cost.dim_sizes.size else np.ones((1, 0, cols))
            ev = self.cost.evaluate(rows, cols, perm, bsz, csz)
            # Feasible plans by time; if none fits, the least memory overflow.
            times.append(float(ev.seconds[0]) if ev.feasible[0] else 1e300 * ev.overflow[0])
            self._sizes.append((bsz[0], csz[0]))
        return np.array(times)

    def _plan(self, job: int, batch_sizes, dims: dict) -> Plan:
        rows, cols, perm = self.jobs[job]
        return build_plan("exact", self.cost, rows, cols, perm,
                          [float(x) for x in batch_sizes], [1.0] * cols,
                          {k: [float(x) for x in v] for k, v in dims.items()})

    def _items(self, cutoff: float) -> list:
        """(lower bound, job, batch sizes, row optima) of every program worth
        solving: one per job with one row or one column, else one per batch
        split whose bound (each row at its least per-sample time) is below
        ``cutoff``. The rows' optima are MILPs too (on resattnet3d over 6 devices,
        7 s of them): past the time limit the jobs left get the cost model's
        lower bound instead, so the search stops with a gap to it, on time."""
        cost, items = self.cost, []
        for j, (rows, cols, perm) in enumerate(self.jobs):
            if cols == 1 or self._out_of_time():
                items.append((cost.lower_bound(), j, None, None))
                continue
            opts = [self._row(line) for line in perm.reshape(rows, cols)]
            per_sample = np.array([o.lower for o in opts])
            const = opts[0].latency + allreduce_bound(cost, rows, cols)
            extra = row_overheads(cost, self.speeds, rows, cols, perm)  # per row
            if rows == 1:
                items.append((cost.batch * per_sample[0] + extra[0] + const, j, [cost.batch],
                              opts))
                continue
            grid = self.speeds[cost.device_type[perm]].reshape(rows, cols)
            same = identical_neighbours(grid, cost.memory_capacity[perm].reshape(rows, cols))
            for b in batch_splits(cost.batch, per_sample, cutoff - const - extra, same):
                items.append((float(np.max(b * per_sample + extra)) + const, j, b, opts))
                if len(items) > MAX_PROGRAMS:
                    raise ValueError(f"exact planner: more than {MAX_PROGRAMS:,} batch "
                                     f"splits cannot be ruled out; use --method ga")
        items.sort(key=lambda item: item[0])
        return items

    def _out_of_time(self) -> bool:
        return self.time_limit is not None and \
            time.perf_counter() - self.t0 >= self.time_limit

    def _assembled(self, j: int, batch_sizes, opts) -> Plan:
        """The split of the row that bounds the program (the most samples times
        per-sample time), for every row: optimal when that row is the slowest
        and the plan fits, and a good incumbent otherwise."""
        worst = int(np.argmax(np.asarray(batch_sizes) * [o.lower for o in opts]))
        dims = {self.cost.dim_names[d]: v for d, v in opts[worst].dims.items()}
        return self._plan(j, batch_sizes, dims)

    def run(self) -> Plan:
        self._sizes = []
        times = self._heuristic()
        j = int(np.argmin(times))
        bsz, csz = self._sizes[j]
        start = self._plan(j, bsz, {n: csz[d] for d, n in enumerate(self.cost.dim_names)
                                    if self.cost.active_dims(self.jobs[j][1])[d]})
        best, best_sec = (start, start.predicted_step_seconds) if start.feasible \
            else (None, np.inf)
        origin = (j, [int(b) for b in bsz])  # the program the best plan belongs to
        self._fallback = start  # the least memory overflow when nothing fits
        items = self._items(best_sec)
        lower, solved, pruned, objective = np.inf, 0, 0, None
        for bound, j, batch_sizes, opts in items:
            left = None if self.time_limit is None else \
                self.time_limit - (time.perf_counter() - self.t0)
            if bound >= best_sec * (1.0 - self.gap) or (left is not None and left <= 0):
                lower = min(lower, bound)  # items are sorted: no later one is lower
                break
            if opts is not None:
                candidate = self._assembled(j, batch_sizes, opts)
                if candidate.feasible and candidate.predicted_step_seconds < best_sec:
                    best, best_sec, objective = candidate, candidate.predicted_step_seconds, None
                    origin = (j, batch_sizes)
                if bound >= best_sec * (1.0 - self.gap):  # proven by the row optima
                    solved += 1
                    lower = min(lower, bound)
                    continue
            rows, cols, perm = self.jobs[j]
            form = formulate(self.cost, self.speeds, rows, cols, perm, batch_sizes)
            if opts is not None:  # the rows' optima bound the slowest row (units)
                floor = max(b * o.lower for b, o in zip(batch_sizes, opts)) / form.unit
                form.program.lb[form.tau] = floor * (1 - 1e-9)
            res = form.solve(best_sec if np.isfinite(best_sec) else None, left, self.gap)
            if res.x is None:
                if res.status == 2:  # nothing below the incumbent
                    pruned += 1
                    if not np.isfinite(best_sec):
                        continue  # nothing fits in memory
                lower = min(lower, best_sec if res.status == 2 else bound)
                continue
            solved += 1
            candidate = self._plan(j, *form.decode(res.x, self.cost))
            proven = bound if res.mip_dual_bound is None else \
                max(bound, form.seconds(res.mip_dual_bound))
            lower = min(lower, proven)
            if best is None or not better(best, candidate):  # ties: keep the MILP's
                best, best_sec = candidate, candidate.predicted_step_seconds
                objective = form.seconds(res.fun)
                origin = (j, batch_sizes)
        if best is not None:
            best = self._settle(best, *origin)
        return self._finish(best, best_sec, lower, len(items), solved, pruned, objective)

    def _settle(self, best: Plan, j: int, batch_sizes) -> Plan:
        """Ties: of the plans of ``best``'s program (its shape, placement and,
        with several rows and columns, batch split) as fast as ``best``, the one
        with the least total of the rows' times (:meth:`Formulation.least_row_time`),
        so that, when the slowest device sets the step, the others do not take
        less than their share for no reason; ``best`` if none is found in time.
        Deterministic (HiGHS is)."""
        rows, cols, perm = self.jobs[j]
        left = None if self.time_limit is None else \
            self.time_limit - (time.perf_counter() - self.t0)
        if left is not None and left <= 0:
            return best
        fixed = batch_sizes if cols > 1 or rows == 1 else None
        form = formulate(self.cost, self.speeds, rows, cols, perm, fixed)
        res = form.least_row_time(best.predicted_step_seconds, left, self.gap)
        if res.x is None:
            return best
        tied = self._plan(j, *form.decode(res.x, self.cost))
        if tied.feasible and tied.predicted_step_seconds <= \
                best.predicted_step_seconds * (1 + 1e-12):
            return tied
        return best

    def _finish(self, best, best_sec, lower, programs, solved, pruned, objective) -> Plan:
        if best is None:  # no plan fits: the proportional one that overflows least
            return dataclasses.replace(
                self._fallback, planning_seconds=time.perf_counter() - self.t0,
                extra={"solver": "milp (scipy.optimize.milp, HiGHS)", "layout": FIXED_LAYOUT, "gap": None,
                       "placements": len(self.jobs), "programs": programs})
        lower = min(lower, best_sec)
        gap = max(0.0, (best_sec - lower) / best_sec)
        elapsed = time.perf_counter() - self.t0
        extra = {"solver": "milp (scipy.optimize.milp, HiGHS)", "layout": FIXED_LAYOUT, "gap": gap,
                 "lower_bound_seconds": lower, "placements": len(self.jobs),
                 "programs": programs, "programs_solved": solved,
                 "programs_pruned": pruned, "milp_objective_seconds": objective}
        best = dataclasses.replace(best, planning_seconds=elapsed, extra=extra)
        # Proven: within HiGHS's relative gap (twice: per program and the bound
        # cut) plus its absolute gap of 1e-6 objective units (about 1e-6 relative).
        if gap > 2 * self.gap + 2e-6 and self.time_limit is not None:
            raise ExactTimeLimit(
                f"exact planner: not proven optimal within the time limit of "
                f"{self.time_limit:g} s (best {best_sec:.6g} s/step, proven gap "
                f"{100 * gap:.2f}%); raise --time-limit or use --method ga", best, gap)
        return best


def batch_splits(total: int, per_sample: np.ndarray, budget, same: Sequence[int]):
    """Batch splits ``b`` (sum ``total``, parts >= 1) with ``b_r * per_sample_r <
    budget`` (one number, or one per row) for every row, non-increasing over
    identical neighbour rows ``same``."""
    rows = len(per_sample)
    cap = np.full(rows, total - rows + 1, dtype=np.int64)
    if np.all(np.isfinite(budget)):
        with np.errstate(divide="ignore"):
            limit = np.floor(budget / np.maximum(per_sample, 1e-300) * (1 + 1e-9))
        cap = np.minimum(cap, np.maximum(limit, 0).astype(np.int64))
    tail = np.concatenate([np.cumsum(cap[::-1])[::-1][1:], [0]])  # most the rest can take
    same = set(same)
    out, b = [], np.zeros(rows, dtype=np.int64)

    def fill(r: int, left: int):
        if r == rows:
            if left == 0:
                out.append(b.copy())
            return
        top = min(cap[r], left - (rows - r - 1))
        if r - 1 in same:
            top = min(top, b[r - 1])
        for v in range(max(1, left - tail[r]), top + 1):
            b[r] = v
            fill(r + 1, left - v)

    fill(0, total)
    return out


def _plan_enumerated(cost: CostModel, shapes, max_candidates: int, t0: float) -> Plan:
    """Exhaustive search (step times that depend on the work size, the slice's share
    or the wait for the slowest device)."""
    n_candidates = count_candidates(cost, shapes)
    if n_candidates > max_candidates:
        why = " and ".join(not_linear(cost))
        raise ValueError(f"exact planner: step times depend on {why} (not covered by the "
                         f"MILP) and {n_candidates:,} candidate plans exceed the "
                         f"enumeration limit of {max_candidates:,}; use --method ga")
    best, evaluated = None, 0
    for rows, cols in allowed_shapes(cost, shapes):
        found, count = _best_for_shape(cost, rows, cols)
        evaluated += count
        if found is not None and (best is None or better(found, best)):
            best = found
    return dataclasses.replace(best, planning_seconds=time.perf_counter() - t0,
                               extra={"solver": "enumeration", "candidates": evaluated,
                                      "layout": FIXED_LAYOUT,
                                      "gap": 0.0,
                                      "lower_bound_seconds": best.predicted_step_seconds})


def _best_for_shape(cost: CostModel, rows: int, cols: int):
    active = cost.active_dims(cols)
    batch_comps = compositions(cost.batch, rows)
    dim_comps = [compositions(int(size), cols) if on else np.ones((1, cols), np.int64)
                 for size, on in zip(cost.dim_sizes, active)]
    places = placements(device_kinds(cost), rows, cols)
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
        # Ties: the least total of the rows' times (as the MILP's _settle).
        rows_total = ev.row_seconds.sum(axis=1)
        i = int(np.lexsort((rows_total, key))[0])
        if best_key is None or (key[i], rows_total[i]) < best_key:
            best_key, best_idx = (key[i], rows_total[i]), flat[i]
    idx = [int(v) for v in np.unravel_index(best_idx, axes)]
    perm = places[idx[0]]
    bsz = [float(x) for x in batch_comps[idx[1]]]
    dim_weights = {name: [float(x) for x in dim_comps[d][idx[2 + d]]]
                   for d, name in enumerate(cost.dim_names) if active[d]}
    model_w = next(iter(dim_weights.values())) if dim_weights else [1.0] * cols
    plan = build_plan("exact", cost, rows, cols, perm, bsz, model_w, dim_weights)
    return plan, total
