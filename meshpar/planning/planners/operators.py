"""Genetic operators of the GA (:mod:`meshpar.planning.planners.ga`) on its
population arrays: selection, placement crossover and swaps, weight
mutation, layout-gene crossover and flips."""
from __future__ import annotations

import numpy as np


def distinct(kinds: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """Indices of the first of every set of placements (kinds of devices per
    pnum, [P, n]) equal up to the order of the rows."""
    seen, out = set(), []
    for p, grid in enumerate(kinds.reshape(-1, rows, cols)):
        key = tuple(sorted(map(tuple, grid)))
        if key not in seen:
            seen.add(key)
            out.append(p)
    return np.array(out, dtype=np.int64)


def order_crossover(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """OX: keep a random slice of ``a``, fill the rest in ``b``'s order from the cut."""
    n = a.size
    i, j = np.sort(rng.choice(n + 1, size=2, replace=False))
    child = np.empty_like(a)
    child[i:j] = a[i:j]
    taken = np.zeros(n, dtype=bool)
    taken[a[i:j]] = True
    rest = np.roll(b, -j)
    rest = rest[~taken[rest]]
    positions = np.roll(np.arange(n), -j)
    positions = positions[(positions < i) | (positions >= j)]
    child[positions] = rest
    return child


def tournament_select(fitness: np.ndarray, count: int, size: int, rng) -> np.ndarray:
    """Indices of ``count`` winners of tournaments of ``size`` random entrants (lowest fitness)."""
    entrants = rng.integers(0, fitness.size, size=(count, max(1, size)))
    return entrants[np.arange(count), np.argmin(fitness[entrants], axis=1)]


def mutate_weights(pop, rng, sigma: float, rate: float, used, skip=None) -> None:
    """Gaussian steps on a ``rate`` share of the weights in use (the first R
    batch and M model weights of each individual's shape ``used = (R, M)``)."""
    rows, cols = (np.asarray(u)[pop.shape] for u in used)
    n = pop.bw.shape[1]
    mask_b = (rng.random(pop.bw.shape) < rate) & (np.arange(n)[None, :] < rows[:, None])
    mask_m = (rng.random(pop.mw.shape) < rate) & (np.arange(n)[None, None, :]
                                                 < cols[:, None, None])
    if skip is not None:
        mask_b[skip] = False
        mask_m[skip] = False
    pop.bw[mask_b] += rng.normal(0.0, sigma, size=int(mask_b.sum()))
    pop.mw[mask_m] += rng.normal(0.0, sigma, size=int(mask_m.sum()))


def swap_mutation(pop, rng, which: np.ndarray) -> None:
    """Swap mutation: 1 + Poisson(1) random position swaps in each selected individual."""
    rows = np.nonzero(which)[0]
    if rows.size == 0:
        return
    n = pop.perm.shape[1]
    if n < 2:
        return
    swaps = 1 + rng.poisson(1.0, size=rows.size)
    for k in range(int(swaps.max())):
        r = rows[swaps > k]
        i = rng.integers(0, n, size=r.size)
        j = rng.integers(0, n, size=r.size)
        pi, pj = pop.perm[r, i].copy(), pop.perm[r, j].copy()
        pop.perm[r, i], pop.perm[r, j] = pj, pi


def layout_crossover(a: np.ndarray, b: np.ndarray, rng) -> np.ndarray:
    """Uniform crossover of layout genes (bool [K, D]): each dim from either parent."""
    return np.where(rng.random(a.shape) < 0.5, a, b)


def flip_layout(lay: np.ndarray, rng, rate: float) -> None:
    """Flip each layout gene (laid out on ``model`` or replicated) with probability
    ``rate``, in place."""
    lay ^= rng.random(lay.shape) < rate
