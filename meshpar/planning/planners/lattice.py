"""Moves on the integer lattice of split sizes, for the GA's local search.

A plan of one mesh shape and placement is its batch split ``b`` [R] and the
split ``c[d]`` [M] of every laid-out dimension ``d``: each one a *gene*. A
move shifts units of one gene between two coordinates; a *composite* takes
the best move of many genes at once. Composites matter when a new placement
leaves every dimension's split wrong (21 of them on resattnet3d): one move
per step would need as many steps as there are dimensions.
"""
from __future__ import annotations

import functools

import numpy as np

from meshpar.core.splits import split_sizes_batch

#: Gene index of the batch split in :func:`unit_moves`'s output (dims are >= 0).
BATCH = -1
#: A batch move with every dimension re-split for it (not composed further).
RESPLIT = -2


def _pairs(k: int, limit: int = 12) -> np.ndarray:
    """Ordered pairs (from, to) of k coordinates; above ``limit`` only among the
    three first and three last (the caller sorts: largest first)."""
    ids = np.arange(k) if k <= limit else np.concatenate([np.arange(3), np.arange(k - 3, k)])
    return np.array([(i, j) for i in ids for j in ids if i != j], dtype=np.int64)


def _moves(sizes: np.ndarray) -> np.ndarray:
    """:func:`_split_moves` of ``sizes`` (cached: the same splits recur)."""
    return _split_moves(tuple(int(x) for x in sizes))


@functools.lru_cache(maxsize=4096)
def _split_moves(split: tuple) -> np.ndarray:
    """Changes [K, k] of a split (parts stay >= 1): 1, 2, 4, ... units from one
    coordinate to another, and all but one (a share cut to the minimum); and,
    on three or more coordinates, u units from every other to one (gather) or
    from one to every other (scatter): where several coordinates finish last
    together, no move between two of them shortens the slowest."""
    sizes = np.array(split, dtype=np.int64)
    k = sizes.size
    order = np.argsort(-sizes, kind="stable")
    steps = 2 ** np.arange(max(1, int(np.log2(max(sizes.max(), 2)))))
    out = []
    for i, j in order[_pairs(k)]:
        for u in sorted(set(steps[steps < sizes[i]]) | {sizes[i] - 1}):
            if u >= 1:
                delta = np.zeros(k, dtype=np.int64)
                delta[i], delta[j] = -u, u
                out.append(delta)
    if k >= 3:
        for j in np.unique(order[_pairs(k)][:, 1]):
            for u in steps:
                give = np.where(sizes > u, -u, 0)
                give[j] = 0
                if give.any():
                    delta = give.copy()
                    delta[j] = -give.sum()
                    out.append(delta)
                if sizes[j] - u * (k - 1) >= 1:
                    delta = np.full(k, u, dtype=np.int64)
                    delta[j] = -u * (k - 1)
                    out.append(delta)
    out = np.array(out, dtype=np.int64).reshape(-1, k)
    out.flags.writeable = False
    return out


def unit_moves(bsz: np.ndarray, csz: np.ndarray, active, speed=None,
               dim_sizes=None) -> tuple:
    """Every plan a few units away (:func:`_moves` of the batch split or of a
    laid-out dimension's split). With the placement's ``speed`` [R, M] (and
    ``dim_sizes`` [D]), every batch move also comes with every dimension
    re-split for it (:func:`resplit`).
    Returns (batch sizes [K, R], dim sizes [K, D, M], gene [K])."""
    parts_b, parts_c, gene = [], [], []
    if bsz.size > 1:
        moved = bsz[None, :] + _moves(bsz)
        parts_b.append(moved)
        parts_c.append(np.repeat(csz[None], len(moved), axis=0))
        gene.append(np.full(len(moved), BATCH))
        if speed is not None and len(active) and len(moved):
            parts_b.append(moved)
            parts_c.append(resplit(bsz, csz, moved, active, speed, dim_sizes))
            gene.append(np.full(len(moved), RESPLIT))
    for d in active:
        delta = _moves(csz[d])
        c = np.repeat(csz[None], len(delta), axis=0)
        c[:, d] += delta
        parts_b.append(np.repeat(bsz[None], len(delta), axis=0))
        parts_c.append(c)
        gene.append(np.full(len(delta), int(d)))
    if not parts_b:
        return np.zeros((0, bsz.size)), np.zeros((0,) + csz.shape), np.zeros(0, np.int64)
    return np.concatenate(parts_b), np.concatenate(parts_c), np.concatenate(gene)


def resplit(bsz: np.ndarray, csz: np.ndarray, new_b: np.ndarray, active, speed: np.ndarray,
            dim_sizes: np.ndarray) -> np.ndarray:
    """Dimension splits [K, D, M] for batch splits ``new_b`` [K, R]: a column
    finishes a unit of any dimension at the rate of its slowest device for
    its row's batch, ``min_r speed[r, m] / b_r``, so every dimension's split
    is scaled by the change of that rate. A batch move alone is rarely
    better (the rows' columns no longer finish together); with every
    dimension re-split it can be (on 2-D meshes with few samples per row)."""
    rate = lambda b: (speed / np.maximum(b, 1)[..., :, None]).min(axis=-2)  # noqa: E731
    factor = rate(new_b) / rate(bsz)[None, :]                       # [K, M]
    out = np.repeat(csz[None], len(new_b), axis=0)
    for d in active:
        out[:, d] = split_sizes_batch(int(dim_sizes[d]), csz[d][None, :] * factor)
    return out


def composites(bsz: np.ndarray, csz: np.ndarray, cand_b: np.ndarray, cand_c: np.ndarray,
               gene: np.ndarray, fit: np.ndarray, current: float) -> tuple:
    """Plans that apply the best improving move of several genes at once: of all
    of them, of the better half and of the better quarter (ranked by their own
    gain; genes move disjoint parts, so the moves compose). Fewer parts when
    fewer than two genes improve. Returns (batch sizes [K, R], dim sizes [K, D, M])."""
    best = {}
    for k in np.nonzero((fit < current * (1 - 1e-12)) & (gene != RESPLIT))[0]:
        g = int(gene[k])
        if g not in best or fit[k] < fit[best[g]]:
            best[g] = k
    ranked = sorted(best, key=lambda g: fit[best[g]])
    out_b, out_c = [], []
    for count in sorted({len(ranked), (len(ranked) + 1) // 2, (len(ranked) + 3) // 4},
                        reverse=True):
        if count < 2:
            continue
        b, c = bsz.copy(), csz.copy()
        for g in ranked[:count]:
            if g == BATCH:
                b = cand_b[best[g]].copy()
            else:
                c[g] = cand_c[best[g]][g]
        out_b.append(b)
        out_c.append(c)
    if not out_b:
        return np.zeros((0, bsz.size)), np.zeros((0,) + csz.shape)
    return np.stack(out_b), np.stack(out_c)


def layout_flips(lay: np.ndarray, active: np.ndarray) -> np.ndarray:
    """Layouts [K, D] one flip away from ``lay`` [D]: each dim the mesh can split
    (``active``) laid out if it was replicated, replicated if it was laid out.
    Each dim's collectives depend on its own layout only (docs/cost_model.md),
    so a flip prices exactly what that dim's split costs and saves."""
    dims = np.nonzero(active)[0]
    out = np.repeat(np.asarray(lay, dtype=bool)[None, :], dims.size, axis=0)
    out[np.arange(dims.size), dims] ^= True
    return out
