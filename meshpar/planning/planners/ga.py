"""GABRA: a genetic algorithm for mesh shape, device placement and split weights.

Chromosome (one row per individual of the population arrays):

==========  ===============  ===================================================
gene        array            meaning
==========  ===============  ===================================================
shape       ``shape[P]``     index into the allowed mesh shapes ``(R, M)``
placement   ``perm[P, n]``   device index at each pnum (row-major over R x M)
batch w.    ``bw[P, n]``     weights of the R rows (first R entries used)
model w.    ``mw[P, K, n]``  weights of the M columns; ``K`` = one per split dim
                             (``per_layer=True``) or one shared by all dims
layout      ``lay[P, D]``    per split dim: laid out on ``model`` (True) or
                             replicated on every column (the layout gene)
==========  ===============  ===================================================

Operators: tournament selection; order crossover (OX) and swap mutation for
the placement; blend crossover (BLX-alpha, in log space so weights stay
positive) and Gaussian mutation for the weights; uniform crossover and bit
flips for the layout gene; a unit move (one filter or
sample from one coordinate to another, on the integer lattice); a rebalancing mutation that
scales each weight by (mean time / its coordinate's time) from the parent's
evaluation (a memetic step toward equal finish times); a shape mutation that
re-seeds from the proportional chromosome of another mesh shape; elitism;
a local search (every ``polish_every`` generations and at the end, the best
individual takes the best lattice move while one helps; the moves and their
composites are in :mod:`meshpar.planning.planners.lattice`, with every flip
of one dimension's layout tried between climbs), at the end a
placement search and, where memory binds, a memory-priced search.
The population starts from the proportional plan of every mesh shape (so with
elitism the result is never worse than proportional), or from random
chromosomes (``init="random"``: the search alone). The whole population is
evaluated by the vectorised cost model, one call per mesh shape present.
Reproducible: all randomness comes from ``numpy.random.default_rng(seed)``
(a ``time_limit`` that cuts the run short is the one source of variation).
"""
from __future__ import annotations

import dataclasses
import sys
import time
from typing import Optional, Sequence

import numpy as np

from meshpar.core.splits import split_sizes_batch
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.cost_model import CostModel, penalised
from meshpar.planning.description import ModelDescription
from meshpar.planning.plan import Plan
from meshpar.planning.planners.common import (allowed_shapes, build_plan, device_kinds,
                                              proportional_weights, representative_speeds,
                                              sorted_placement)
from meshpar.planning.planners.lattice import composites, layout_flips, unit_moves
from meshpar.planning.planners.operators import (distinct, flip_layout, layout_crossover,
                                                 mutate_weights, order_crossover,
                                                 swap_mutation, tournament_select)


#: Most devices for the placement local search (all pairs are tried).
SWAP_DEVICES = 16
#: Above this many devices the local search polishes only the overall best.
LARGE = 64


@dataclasses.dataclass
class _Population:
    shape: np.ndarray   # [P]
    perm: np.ndarray    # [P, n]
    bw: np.ndarray      # [P, n] log weights
    mw: np.ndarray      # [P, K, n] log weights
    lay: np.ndarray     # [P, D] bool: dim laid out on the model axis

    def take(self, idx) -> "_Population":
        return _Population(self.shape[idx].copy(), self.perm[idx].copy(),
                           self.bw[idx].copy(), self.mw[idx].copy(), self.lay[idx].copy())

    @staticmethod
    def concat(parts) -> "_Population":
        return _Population(*(np.concatenate([getattr(p, f) for p in parts])
                             for f in ("shape", "perm", "bw", "mw", "lay")))

    def copy_from(self, c: int, other: "_Population", t: int) -> None:
        """Individual ``c`` becomes ``other``'s individual ``t``."""
        for f in ("shape", "perm", "bw", "mw", "lay"):
            getattr(self, f)[c] = getattr(other, f)[t]


class _Problem:
    """The cost model seen through chromosomes."""

    def __init__(self, cost: CostModel, shapes: list, per_layer: bool,
                 layout_gene: bool = True):
        self.cost = cost
        self.layout_gene = layout_gene
        self.deadline = None  # time.perf_counter() past which local searches stop
        self.shapes = shapes
        self.n = cost.n
        self.D = cost.dim_sizes.size
        self.K = max(self.D, 1) if per_layer else 1
        self.per_layer = per_layer
        self.speeds = representative_speeds(cost)
        self.kinds = device_kinds(cost)
        self.used = (np.array([r for r, _ in shapes]), np.array([m for _, m in shapes]))
        # Seeds: per shape, the proportional chromosome (devices sorted into
        # columns) and the row-sorted variant; index 2*s and 2*s + 1.
        self.seed_shape, self.seed_perm, self.seed_bw, self.seed_mw = [], [], [], []
        for s, (rows, cols) in enumerate(shapes):
            for by_rows in (False, True):
                perm = sorted_placement(self.speeds, rows, cols, by_rows=by_rows)
                bw, mw = self.proportional_genes(perm, rows, cols)
                self.seed_shape.append(s)
                self.seed_perm.append(perm)
                self.seed_bw.append(bw)
                self.seed_mw.append(mw)

    def out_of_time(self) -> bool:
        """Whether the run's ``time_limit`` has passed (local searches then stop
        where they are, keeping what they improved so far)."""
        return self.deadline is not None and time.perf_counter() > self.deadline

    def proportional_genes(self, perm: np.ndarray, rows: int, cols: int):
        """Log weights of the proportional split for placement ``perm``."""
        b, m = proportional_weights(self.speeds, perm, rows, cols)
        bw = np.zeros(self.n)
        bw[:rows] = np.log(b)
        mw = np.zeros((self.K, self.n))
        mw[:, :cols] = np.log(m)[None, :]
        return bw, mw

    def seeds(self, idx) -> _Population:
        """Seed chromosomes ``idx`` (see ``__init__``)."""
        idx = np.asarray(idx, dtype=np.int64)
        return _Population(np.array([self.seed_shape[i] for i in idx], dtype=np.int64),
                           np.stack([self.seed_perm[i] for i in idx]),
                           np.stack([self.seed_bw[i] for i in idx]),
                           np.stack([self.seed_mw[i] for i in idx]),
                           np.ones((idx.size, self.D), dtype=bool))

    def random(self, count: int, rng) -> _Population:
        """``count`` random chromosomes: any shape, any placement, log weights N(0, 1)."""
        return _Population(rng.integers(0, len(self.shapes), size=count),
                           np.stack([rng.permutation(self.n) for _ in range(count)]),
                           rng.normal(0.0, 1.0, size=(count, self.n)),
                           rng.normal(0.0, 1.0, size=(count, self.K, self.n)),
                           rng.random((count, self.D)) < 0.5 if self.layout_gene
                           else np.ones((count, self.D), dtype=bool))

    def laid_out(self, pop: _Population, idx, cols: int) -> np.ndarray:
        """Bool [len(idx), D]: dims of individuals ``idx`` laid out on a ``cols``-column mesh."""
        return pop.lay[idx] & self.cost.active_dims(cols)[None, :]

    def polish(self, pop: _Population, c: int, max_steps: int = 200, pairs: bool = True,
               price: float = 0.0):
        """Hill-climb individual ``c`` on the integer lattice: evaluate every
        move of the batch split and of each dimension's split (and their
        composites) at once, take the best while it improves; when stuck (and
        ``pairs``), two steps at once: a kick (a move that costs little time or
        frees memory), then the best step from it. A ``price`` (seconds per unit
        of the fullest device's memory share) is added to the fitness of the
        plans that fit, see :meth:`price_search`. Returns (fitness, seconds)."""
        rows, cols = self.shapes[pop.shape[c]]
        bsz, csz = (x[0] for x in self.sizes(pop, np.array([c]), rows, cols))
        perm = pop.perm[c]
        grid = self.speeds[perm].reshape(rows, cols)
        lay = self.laid_out(pop, [c], cols)[0]
        active = np.nonzero(lay)[0] if self.per_layer else []

        def evaluate(b, c, layout=None):
            ev = self.cost.evaluate(rows, cols, np.repeat(perm[None, :], len(b), 0), b, c,
                                    lay if layout is None else layout)
            fit = penalised(ev)
            return np.where(ev.feasible, fit + price * ev.overflow, fit), ev.seconds, ev.overflow

        def step(b, c, current):
            """Every move and composite from (b, c): sizes, fitness, seconds, overflow."""
            cand_b, cand_c, gene = unit_moves(b, c, active, grid, self.cost.dim_sizes)
            if not len(cand_b):
                return cand_b, cand_c, np.zeros(0), np.zeros(0), np.zeros(0)
            fit, sec, over = evaluate(cand_b, cand_c)
            comp_b, comp_c = composites(b, c, cand_b, cand_c, gene, fit, current)
            if len(comp_b):
                more = evaluate(comp_b, comp_c)
                cand_b, cand_c = np.concatenate([cand_b, comp_b]), np.concatenate([cand_c, comp_c])
                fit, sec, over = (np.concatenate(x) for x in zip((fit, sec, over), more))
            return cand_b, cand_c, fit, sec, over

        def climb(b, c, fit, steps):
            for _ in range(steps):
                if self.out_of_time():
                    break
                cand_b, cand_c, f, sec, over = step(b, c, fit[0])
                k = int(np.argmin(f)) if f.size else 0
                if not f.size or f[k] >= fit[0] * (1 - 1e-12):
                    break
                b, c, fit = cand_b[k], cand_c[k], (f[k], sec[k], over[k])
            return b, c, fit

        now = tuple(x[0] for x in evaluate(bsz[None, :], csz[None, :]))
        for _ in range(max_steps):
            bsz, csz, now = climb(bsz, csz, now, max_steps)
            if self.layout_gene and self.per_layer:
                # Layout moves: every dim laid out or replicated in turn, at these sizes.
                flips = layout_flips(lay, self.cost.active_dims(cols))
                if len(flips):
                    f, sec, over = evaluate(np.repeat(bsz[None], len(flips), 0),
                                            np.repeat(csz[None], len(flips), 0), flips)
                    k = int(np.argmin(f))
                    if f[k] < now[0] * (1 - 1e-12):
                        lay, now = flips[k], (f[k], sec[k], over[k])
                        active = np.nonzero(lay)[0]
                        continue
            if not pairs or self.out_of_time():
                break
            # Stuck: a kick, then a climb. Kicks: the moves that cost the least
            # time, free the most memory, or free the most memory per second
            # (a split that makes room for others).
            cand_b, cand_c, fit, sec, over = step(bsz, csz, now[0])
            if not fit.size:
                break
            freed = (now[2] - over) / np.maximum(sec - now[1], 1e-12 * now[1])
            kicks = np.unique(np.concatenate([np.argsort(fit)[:4], np.argsort(over)[:4],
                                              np.argsort(-np.where(over < now[2], freed,
                                                                   -np.inf))[:4]]))
            ends = [climb(cand_b[k], cand_c[k], (fit[k], sec[k], over[k]), 1)
                    for k in kicks]
            k = int(np.argmin([e[2][0] for e in ends]))
            if not ends[k][2][0] < now[0] * (1 - 1e-12):
                break
            bsz, csz, now = ends[k]
        pop.bw[c, :rows] = np.log(bsz)
        pop.lay[c] = lay | ~self.cost.active_dims(cols)  # genes of unsplittable dims kept
        for d in active:
            pop.mw[c, d, :cols] = np.log(csz[d])
        if price:
            price = 0.0
            now = tuple(x[0] for x in evaluate(bsz[None, :], csz[None, :]))
        return float(now[0]), float(now[1])

    def price_search(self, pop: _Population, c: int, fit: float, sec: float,
                     prices=(0.01, 0.1)):
        """Memory-priced local search on individual ``c`` when memory binds: a
        device with little memory must give up its share of the layers that
        need the most memory per second of work, to take more of the others
        (a knapsack; the plain climb stops at its first full packing). Climb
        with memory priced at ``prices`` x the step time per unit of the
        fullest device's share, then without; keep the best. Returns (fitness,
        seconds)."""
        rows, cols = self.shapes[pop.shape[c]]
        bsz, csz = self.sizes(pop, np.array([c]), rows, cols)
        if self.cost.evaluate(rows, cols, pop.perm[c][None, :], bsz, csz,
                              self.laid_out(pop, [c], cols)).overflow[0] < 0.9:
            return fit, sec
        for p in prices:
            if self.out_of_time():
                break
            trial = pop.take([c])
            self.polish(trial, 0, price=p * sec)
            f, s = self.polish(trial, 0)
            if f < fit * (1 - 1e-12):
                fit, sec = f, s
                pop.copy_from(c, trial, 0)
        return fit, sec

    def swap_search(self, pop: _Population, c: int, fit: float, sec: float,
                    rounds: int = 2, top: int = 4):
        """Placement local search on individual ``c`` (after :meth:`polish`):
        every swap of two devices of different kinds, as it is and with its
        rows sorted, split in proportion and climbed a few lattice steps (all
        at once); the ``top`` best are polished (a new placement needs its own
        split before it can be judged) and the best taken while it improves.
        Returns (fitness, seconds)."""
        for _ in range(rounds):
            if self.out_of_time():
                break
            kinds = self.kinds[pop.perm[c]]
            i, j = np.triu_indices(self.n, 1)
            pick = kinds[i] != kinds[j]
            i, j = i[pick], j[pick]
            if not i.size:
                break
            trial = pop.take(np.full(2 * i.size, c))
            k = np.arange(i.size)
            for part in (k, k + i.size):
                trial.perm[part, i] = pop.perm[c, j]
                trial.perm[part, j] = pop.perm[c, i]
            # The second copy also sorts every row fastest first, so that each
            # column holds alike devices (one split suits the whole column).
            rows, cols = self.shapes[pop.shape[c]]
            grid = trial.perm[k + i.size].reshape(-1, rows, cols)
            order = np.argsort(-self.speeds[grid], axis=2, kind="stable")
            trial.perm[k + i.size] = np.take_along_axis(grid, order, 2).reshape(-1, self.n)
            self.rebalance_placement(trial, np.arange(2 * i.size))
            trial = trial.take(distinct(self.kinds[trial.perm], rows, cols))
            cand = trial.take(np.argsort(self.climb(trial, 4), kind="stable")[:top])
            results = [self.polish(cand, t) for t in range(cand.shape.size)
                       if t == 0 or not self.out_of_time()]
            t = int(np.argmin([r[0] for r in results]))
            if not results[t][0] < fit * (1 - 1e-12):
                break
            fit, sec = results[t]
            pop.copy_from(c, cand, t)
        return fit, sec

    def climb(self, pop: _Population, steps: int) -> np.ndarray:
        """``steps`` steps of best-improvement hill climbing on the integer lattice
        (the moves of :func:`lattice.unit_moves` and their composites) for every
        individual of ``pop`` (all of one shape), all evaluated together;
        returns their fitness."""
        rows, cols = self.shapes[pop.shape[0]]
        idx = np.arange(pop.shape.size)
        bsz, csz = self.sizes(pop, idx, rows, cols)
        lay = self.laid_out(pop, idx, cols)
        active = [np.nonzero(lay[q])[0] if self.per_layer else [] for q in idx]
        fit = penalised(self.cost.evaluate(rows, cols, pop.perm, bsz, csz, lay))
        for _ in range(steps):
            if self.out_of_time():
                break
            moves = [unit_moves(bsz[q], csz[q], active[q], self.speeds[pop.perm[q]]
                                .reshape(rows, cols), self.cost.dim_sizes) for q in idx]
            f = self._fitness_of(rows, cols, pop.perm, lay, moves)
            comps = [composites(bsz[q], csz[q], *moves[q], f[q], fit[q]) for q in idx]
            f2 = self._fitness_of(rows, cols, pop.perm, lay, comps)
            improved = False
            for q in idx:
                for (cand_b, cand_c), fq in ((moves[q][:2], f[q]), (comps[q], f2[q])):
                    if fq.size and fq.min() < fit[q] * (1 - 1e-12):
                        k = int(np.argmin(fq))
                        fit[q], improved = fq[k], True
                        bsz[q], csz[q] = cand_b[k], cand_c[k]
            if not improved:
                break
        pop.bw[:, :rows] = np.log(bsz)
        for d in np.nonzero(self.cost.active_dims(cols))[0] if self.per_layer else []:
            pop.mw[:, d, :cols] = np.log(csz[:, d])
        return fit

    def _fitness_of(self, rows: int, cols: int, perm: np.ndarray, lay: np.ndarray,
                    cands: list) -> list:
        """Fitness of candidates ``cands[q] = (batch sizes, dim sizes, ...)`` of
        individual q (placement ``perm[q]``, layout ``lay[q]``), in one call; a
        list of arrays."""
        counts = np.array([len(c[0]) for c in cands])
        if not counts.sum():
            return [np.zeros(0) for _ in cands]
        owner = np.repeat(np.arange(len(cands)), counts)
        f = penalised(self.cost.evaluate(rows, cols, perm[owner],
                                         np.concatenate([c[0] for c in cands if len(c[0])]),
                                         np.concatenate([c[1] for c in cands if len(c[0])]),
                                         lay[owner]))
        return np.split(f, np.cumsum(counts)[:-1])

    def rebalance_placement(self, pop: _Population, which) -> None:
        """Reset the weights of individuals ``which`` to proportional for their placement."""
        for c in which:
            rows, cols = self.shapes[pop.shape[c]]
            pop.bw[c], pop.mw[c] = self.proportional_genes(pop.perm[c], rows, cols)

    def sizes(self, pop: _Population, idx: np.ndarray, rows: int, cols: int):
        bsz = split_sizes_batch(self.cost.batch, np.exp(pop.bw[idx, :rows]))
        csz = np.ones((idx.size, self.D, cols), dtype=np.int64)
        for d, on in enumerate(self.cost.active_dims(cols)):
            if on:
                k = d if self.per_layer else 0
                csz[:, d, :] = split_sizes_batch(int(self.cost.dim_sizes[d]),
                                                 np.exp(pop.mw[idx, k, :cols]))
        return bsz, csz

    def unit_move(self, pop: _Population, which: np.ndarray, rng) -> None:
        """Move one unit of one split (batch or a dim) between two coordinates.

        The weights become the new integer sizes, which ``split_sizes`` maps
        back to exactly those sizes: a step on the integer lattice.
        """
        for c in which:
            rows, cols = self.shapes[pop.shape[c]]
            genes = ([("b", rows)] if rows > 1 else [])
            active = np.nonzero(self.laid_out(pop, [c], cols)[0])[0] if cols > 1 else []
            genes += [("m", d) for d in (active if self.per_layer else active[:1])]
            if not genes:
                continue
            kind, g = genes[rng.integers(len(genes))]
            if kind == "b":
                logw, total, k = pop.bw[c, :rows], self.cost.batch, rows
            else:
                logw, total, k = pop.mw[c, g if self.per_layer else 0, :cols], \
                    int(self.cost.dim_sizes[g]), cols
            sizes = split_sizes_batch(total, np.exp(logw)[None, :])[0]
            i, j = rng.choice(k, size=2, replace=False)
            if sizes[j] <= 1:
                continue
            sizes[i] += 1
            sizes[j] -= 1
            logw[:] = np.log(sizes)

    def evaluate(self, pop: _Population):
        """Fitness [P], seconds [P], and rebalanced log weights (bw, mw) per individual."""
        P = pop.shape.size
        fitness = np.empty(P)
        seconds = np.empty(P)
        new_bw, new_mw = pop.bw.copy(), pop.mw.copy()
        for s in np.unique(pop.shape):
            idx = np.nonzero(pop.shape == s)[0]
            rows, cols = self.shapes[s]
            bsz, csz = self.sizes(pop, idx, rows, cols)
            ev = self.cost.evaluate(rows, cols, pop.perm[idx], bsz, csz,
                                    self.laid_out(pop, idx, cols))
            fitness[idx] = penalised(ev)
            seconds[idx] = ev.seconds
            # Rebalancing proposal: weight *= mean time / own time.
            t = np.maximum(ev.row_seconds, 1e-30)
            new_bw[idx, :rows] += np.log(t.mean(axis=1, keepdims=True) / t)
            active = self.cost.active_dims(cols)
            if active.any():
                tc = np.maximum(ev.dim_column_seconds, 1e-30)  # [p, D, M]
                step = np.log(tc.mean(axis=2, keepdims=True) / tc)
                if self.per_layer:
                    new_mw[idx, :, :cols] += np.where(active[None, :, None], step, 0.0)
                else:
                    new_mw[idx, 0, :cols] += step[:, active, :].mean(axis=1)
        return fitness, seconds, new_bw, new_mw






def plan_ga(model: ModelDescription, cluster: ClusterSpec, batch: int, seed: int = 0,
            population: int = 32, generations: int = 200, per_layer: bool = True,
            tournament: int = 3, elite: int = 2, crossover_rate: float = 0.8,
            blend_alpha: float = 0.3, weight_sigma: float = 0.05, weight_rate: float = 0.3,
            swap_rate: float = 0.3, balance_rate: float = 0.2, unit_rate: float = 0.4,
            shape_rate: float = 0.05, layout_gene: bool = True, layout_rate: float = 0.05,
            init: str = "proportional", polish_every: int = 25,
            patience: int = 60, time_limit: Optional[float] = None, shapes: Optional[Sequence[tuple]] = None,
            cost: Optional[CostModel] = None, progress: bool = False) -> Plan:
    """Run GABRA; return the best plan found.

    Parameters
    ----------
    seed : int
        Seed of the numpy Generator; same seed, same plan.
    population, generations : int
        Population size (raised, if smaller, to three per mesh shape plus two:
        every shape's two seed plans and room for their children; the plan's
        ``extra["population"]`` is the size that ran) and most generations
        (``extra["generations"]``: how many ran; ``history`` has one more
        entry, the first population's best).
    per_layer : bool
        One weight vector per split dimension (per-layer ratios) instead of
        one per mesh axis.
    layout_gene : bool
        Search the layout too: per split dimension, laid out on ``model`` or
        replicated (False: every dimension of size >= M is laid out, the
        layout the exact planner fixes).
    layout_rate : float
        Probability of flipping each layout gene of a child.
    init : str
        ``proportional``: the population starts from the proportional plan of
        every mesh shape (so, with elitism, the result is never worse);
        ``random``: from random placements and weights (the search alone).
    polish_every : int
        Every this many generations, and at the end, the best individual
        climbs the integer lattice: the best single-unit move of a batch or
        dimension split, repeated while it helps (0: never).
    patience : int
        Stop when the best plan has not improved for this many generations
        (0: run all ``generations``).
    time_limit : float, optional
        Return within about this many seconds of the call: the generations
        stop at the limit, and the local searches (the periodic and the final
        polish) stop where they are once it has passed, keeping what they
        improved (the result then depends on timing). Overrun: at most about
        one generation or one local-search step.
    progress : bool
        Show a tqdm bar on stderr.
    """
    t0 = time.perf_counter()
    for name, value in (("population", population), ("generations", generations)):
        if int(value) < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    cost = cost or CostModel(model, cluster, batch)
    shape_list = allowed_shapes(cost, shapes)
    problem = _Problem(cost, shape_list, per_layer, layout_gene and per_layer)
    if time_limit is not None:
        problem.deadline = t0 + float(time_limit)
    rng = np.random.default_rng(seed)
    n, S = cost.n, len(shape_list)
    n_seeds = 2 * S
    P = max(int(population), n_seeds + S + 2)
    elite = min(max(int(elite), 1), P - S - 1)

    if init == "proportional":
        # The seed chromosomes of every shape, then mutants of them.
        pop = problem.seeds(np.arange(n_seeds))
        extra = problem.seeds(rng.integers(0, n_seeds, size=P - n_seeds))
        mutate_weights(extra, rng, weight_sigma * 3, 1.0, problem.used)
        swap_mutation(extra, rng, np.ones(P - n_seeds, dtype=bool))
        if problem.layout_gene:
            flip_layout(extra.lay, rng, layout_rate)
        pop = _Population.concat([pop, extra])
    elif init == "random":
        pop = problem.random(P, rng)
    else:
        raise ValueError(f"init must be 'proportional' or 'random', got {init!r}")

    history = []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=int(generations), desc="ga", unit="gen", file=sys.stderr, leave=False)
    fitness, seconds, bal_bw, bal_mw = problem.evaluate(pop)
    generation = 0
    for generation in range(int(generations)):
        order = np.argsort(fitness, kind="stable")
        history.append(float(seconds[order[0]]))
        if bar is not None:
            bar.update(1)
            bar.set_postfix(best=f"{seconds[order[0]]:.4g}s")
        if time_limit is not None and time.perf_counter() - t0 > time_limit:
            break
        if patience and len(history) > patience and \
                history[-1] >= history[-1 - int(patience)] * (1 - 1e-12):
            break
        if polish_every and generation and generation % int(polish_every) == 0:
            _polish_niches(problem, pop, fitness, seconds, order)
        # Elites: the best `elite` overall plus the best of every shape (niches,
        # so a shape that needs several coordinated changes is not lost early).
        keep = list(order[:elite])
        for s in range(S):
            members = order[pop.shape[order] == s]
            if members.size and members[0] not in keep:
                keep.append(members[0])
        keep = np.array(keep, dtype=np.int64)
        n_child = P - keep.size
        a = tournament_select(fitness, n_child, tournament, rng)
        b = tournament_select(fitness, n_child, tournament, rng)
        child = pop.take(a)
        cross = rng.random(n_child) < crossover_rate
        for c in np.nonzero(cross)[0]:
            child.perm[c] = order_crossover(pop.perm[a[c]], pop.perm[b[c]], rng)
        same = cross & (pop.shape[a] == pop.shape[b])
        if same.any():
            u = rng.uniform(-blend_alpha, 1 + blend_alpha, size=(same.sum(), n))
            child.bw[same] = pop.bw[a[same]] + u * (pop.bw[b[same]] - pop.bw[a[same]])
            u = rng.uniform(-blend_alpha, 1 + blend_alpha, size=(same.sum(), problem.K, n))
            child.mw[same] = pop.mw[a[same]] + u * (pop.mw[b[same]] - pop.mw[a[same]])
        if problem.layout_gene:
            child.lay[cross] = layout_crossover(pop.lay[a[cross]], pop.lay[b[cross]], rng)
            flip_layout(child.lay, rng, layout_rate)
        balance = rng.random(n_child) < balance_rate
        child.bw[balance] = bal_bw[a[balance]]
        child.mw[balance] = bal_mw[a[balance]]
        mutate_weights(child, rng, weight_sigma, weight_rate, problem.used, skip=balance)
        problem.unit_move(child, np.nonzero(rng.random(n_child) < unit_rate)[0], rng)
        swapped = rng.random(n_child) < swap_rate
        swap_mutation(child, rng, swapped)
        problem.rebalance_placement(child, np.nonzero(swapped & (rng.random(n_child) < 0.5))[0])
        reshape = np.nonzero(rng.random(n_child) < shape_rate)[0] if S > 1 else []
        for c in reshape:
            new = (child.shape[c] + rng.integers(1, S)) % S
            fresh = problem.seeds([2 * new + rng.integers(2)])
            child.shape[c], child.perm[c] = new, fresh.perm[0]
            child.bw[c], child.mw[c], child.lay[c] = fresh.bw[0], fresh.mw[0], fresh.lay[0]
        child_fit, child_sec, child_bbw, child_bmw = problem.evaluate(child)
        pop = _Population.concat([pop.take(keep), child])
        fitness = np.concatenate([fitness[keep], child_fit])
        seconds = np.concatenate([seconds[keep], child_sec])
        bal_bw = np.concatenate([bal_bw[keep], child_bbw])
        bal_mw = np.concatenate([bal_mw[keep], child_bmw])
    else:
        order = np.argsort(fitness, kind="stable")
        history.append(float(seconds[order[0]]))
    if bar is not None:
        bar.close()

    if polish_every:
        _polish_niches(problem, pop, fitness, seconds, np.argsort(fitness, kind="stable"),
                       final=True)
    best = int(np.argsort(fitness, kind="stable")[0])
    history[-1] = float(seconds[best])
    rows, cols = shape_list[pop.shape[best]]
    bw = np.exp(pop.bw[best, :rows])
    mw = np.exp(pop.mw[best, :, :cols])
    active = problem.laid_out(pop, [best], cols)[0]
    dim_weights = {}
    if per_layer:
        dim_weights = {name: list(mw[d]) for d, name in enumerate(cost.dim_names) if active[d]}
    axis_w = list(mw[int(np.argmax(active))]) if (per_layer and active.any()) else list(mw[0])
    elapsed = time.perf_counter() - t0
    result = build_plan("ga", cost, rows, cols, pop.perm[best], bw, axis_w, dim_weights,
                        history=history, layout=active,
                        # history: the first population's best, then one per generation
                        extra={"generations": len(history) - 1, "population": P,
                               "seed": seed, "init": init, "layout_gene": problem.layout_gene})
    return dataclasses.replace(result, planning_seconds=elapsed)


def _polish_niches(problem: _Problem, pop: _Population, fitness, seconds, order,
                   final: bool = False) -> None:
    """Local search on the best individual of every mesh shape (in place); at
    the ``final`` call also on its placement (up to SWAP_DEVICES devices; on
    one row or one column every placement is the same up to symmetry).
    Every move is evaluated on the whole grid, so above LARGE devices the
    effort shrinks with the device count: only the overall best, only at
    the end, ``4096 / n`` steps. Past the problem's deadline, nothing more is tried."""
    if problem.n > LARGE:
        if final:
            c = int(order[0])
            fitness[c], seconds[c] = problem.polish(pop, c, max(1, 4096 // problem.n),
                                                    pairs=False)
        return
    for s in np.unique(pop.shape):
        if problem.out_of_time():
            return
        c = int(order[pop.shape[order] == s][0])
        fitness[c], seconds[c] = problem.polish(pop, c)
        if final:
            fitness[c], seconds[c] = problem.price_search(pop, c, fitness[c], seconds[c])
        rows, cols = problem.shapes[s]
        if final and problem.n <= SWAP_DEVICES and rows > 1 and cols > 1:
            fitness[c], seconds[c] = problem.swap_search(pop, c, fitness[c], seconds[c])
