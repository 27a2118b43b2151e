"""The split rule and slice arithmetic (pure Python, no TensorFlow).

Every uneven split in meshpar goes through :func:`split_sizes`, so a
dimension laid out on a mesh axis is cut the same way everywhere: in slice
shapes, variable slices, collectives and the planner's cost model.
"""
from __future__ import annotations

import math
from typing import Sequence


def validate_weights(weights: Sequence[float], what: str = "weights") -> list[float]:
    """Return ``weights`` as floats, or raise ValueError naming ``what``.

    Weights must be a non-empty sequence of finite, strictly positive numbers.
    """
    try:
        values = [float(w) for w in weights]
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what}: weights must be numbers, got {weights!r}") from err
    if not values:
        raise ValueError(f"{what}: weights must not be empty")
    for i, w in enumerate(values):
        if math.isnan(w) or math.isinf(w):
            raise ValueError(f"{what}: weight {i} is {w}; weights must be finite")
        if w <= 0:
            raise ValueError(f"{what}: weight {i} is {w}; weights must be positive")
    return values


def split_sizes(total: int, weights: Sequence[float], what: str = "dimension") -> list[int]:
    """Split ``total`` items into ``len(weights)`` integer parts.

    The parts sum to ``total``, each part is at least 1, and each is as near
    as possible to its quota ``total * w_i / sum(w)``: floors of the quotas
    first, then the remaining units go to the largest remainders (ties to the
    lower index). Parts whose quota is below 1 are raised to 1 and the units
    are taken back from the parts furthest above their quota.

    Parameters
    ----------
    total : int
        Size of the dimension to split.
    weights : sequence of float
        Relative shares, e.g. device speeds. Finite and positive.
    what : str
        Name of the dimension or mesh axis, used in error messages.

    Examples
    --------
    >>> split_sizes(64, [0.8, 0.5, 0.3, 0.2])
    [28, 18, 11, 7]
    >>> split_sizes(13, [1, 1, 1])
    [5, 4, 4]
    """
    values = validate_weights(weights, what)
    if isinstance(total, bool) or not isinstance(total, int):
        if isinstance(total, float) and total.is_integer():
            total = int(total)
        else:
            raise ValueError(f"{what}: size must be an integer, got {total!r}")
    n = len(values)
    if total < n:
        raise ValueError(
            f"{what}: size {total} cannot be split into {n} parts of at least 1")
    weight_sum = math.fsum(values)
    quotas = [total * w / weight_sum for w in values]
    sizes = [max(1, int(math.floor(q))) for q in quotas]
    # Each loop runs at most n times: floors lose < n units, clamping adds < n.
    while sum(sizes) < total:
        i = max(range(n), key=lambda k: (quotas[k] - sizes[k], -k))
        sizes[i] += 1
    while sum(sizes) > total:
        candidates = [k for k in range(n) if sizes[k] > 1]
        i = max(candidates, key=lambda k: (sizes[k] - quotas[k], -k))
        sizes[i] -= 1
    return sizes


def even_sizes(total: int, parts: int, what: str = "dimension") -> list[int]:
    """:func:`split_sizes` with equal weights (no divisibility needed)."""
    if parts < 1:
        raise ValueError(f"{what}: number of parts must be >= 1, got {parts}")
    return split_sizes(total, [1.0] * parts, what)


def offsets(sizes: Sequence[int]) -> list[int]:
    """Begin offsets of consecutive parts: ``[0, s0, s0+s1, ...]`` (len(sizes) items)."""
    out, acc = [], 0
    for s in sizes:
        out.append(acc)
        acc += s
    return out
