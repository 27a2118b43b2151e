"""The split rule and slice arithmetic (Python and numpy, no TensorFlow).

Every uneven split in meshpar goes through :func:`split_sizes`, so a
dimension laid out on a mesh axis is cut the same way everywhere: in slice
shapes, variable slices, collectives and the planner's cost model. Its
checks of weights and numbers (:func:`validate_weights`, :func:`number_above`,
:func:`integer_at_least`) are the ones the planners and the estimator use on
their arguments.
"""
from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Mapping, Set
from typing import Sequence

import numpy as np


def validate_weights(weights: Sequence[float], what: str = "weights") -> list[float]:
    """Return ``weights`` as floats, or raise ValueError naming ``what``.

    Weights must be a non-empty sequence (not a string, mapping or set: their
    order would be meaningless) of finite, strictly positive real numbers
    (numpy numbers too; not strings or bools).
    """
    bad = f"{what}: weights must be a sequence of numbers, got {weights!r}"
    if isinstance(weights, (str, bytes, Mapping, Set)):
        raise ValueError(bad)
    try:
        items = list(weights)
    except TypeError as err:
        raise ValueError(bad) from err
    values = [_real(w, f"{what}: weight {i}") for i, w in enumerate(items)]
    if not values:
        raise ValueError(f"{what}: weights must not be empty")
    for i, w in enumerate(values):
        if math.isnan(w) or math.isinf(w):
            raise ValueError(f"{what}: weight {i} is {w}; weights must be finite")
        if w <= 0:
            raise ValueError(f"{what}: weight {i} is {w}; weights must be positive")
    return values


def _real(value, what: str) -> float:
    """``value`` as a float if it is a real number (a string that reads as one,
    or a bool, is refused: those are mistakes, not weights)."""
    if isinstance(value, (str, bytes, bool)):
        raise ValueError(f"{what} is {value!r}; weights must be numbers")
    try:
        return float(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what} is {value!r}; weights must be numbers") from err


#: The largest size :func:`split_sizes` splits: every integer up to it is a float.
_LARGEST_SIZE = 2 ** 53
#: Remainders of quotas are compared on a grid of this many steps per unit: quotas
#: that differ by float rounding only are ties (speeds 0.3/0.1 and 3/1 are one ratio).
TIE_STEPS = 2 ** 30


def settled(remainder: float) -> float:
    """``remainder`` (a quota's distance from its integer part) on the
    :data:`TIE_STEPS` grid, where the split rule compares it: 6 items over
    weights 0.3/0.1 have quotas 4.499999999999999 and 1.5 in floats, over 3/1
    4.5 and 1.5; both are the tie the rule gives to the lower index."""
    return math.floor(remainder * TIE_STEPS + 0.5)


def _as_size(total, what: str) -> int:
    """``total`` as an int: Python or numpy integers (0-d integer arrays too), or
    integral floats."""
    if isinstance(total, numbers.Integral) and not isinstance(total, bool):
        return int(total)
    if not isinstance(total, (bool, float)) and hasattr(total, "__index__"):
        try:
            return operator.index(total)
        except TypeError:
            pass  # e.g. a 0-d float array: checked as a real number below
    if isinstance(total, numbers.Real) and not isinstance(total, bool) \
            and math.isfinite(total) and float(total).is_integer():
        return int(total)
    raise ValueError(f"{what}: size must be an integer, got {total!r}")


def split_sizes(total: int, weights: Sequence[float], what: str = "dimension") -> list[int]:
    """Split ``total`` items into ``len(weights)`` integer parts.

    The parts sum to ``total``, each part is at least 1, and each is as near
    as possible to its quota ``total * w_i / sum(w)``: floors of the quotas
    first, then the remaining units go to the largest remainders (ties to the
    lower index; remainders within float rounding of each other are ties, so
    weights of one ratio written differently, 0.3/0.1 or 3/1, split alike).
    Parts whose quota is below 1 are raised to 1 and the units are taken back
    from the parts furthest above their quota.

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
    total = _as_size(total, what)
    n = len(values)
    if total < n:
        raise ValueError(
            f"{what}: size {total} cannot be split into {n} parts of at least 1")
    if total > _LARGEST_SIZE:  # float quotas lose whole units: the loops below would not end
        raise ValueError(f"{what}: size {total} is too large to split (at most 2**53)")
    peak = max(values)
    if not math.isfinite(peak * total):
        # Huge finite weights would overflow the quotas (and their sum): only
        # their ratios matter, so scale them down. Only then, so that sizes
        # of ordinary weights stay bit-for-bit what they always were.
        values = [w / peak for w in values]
    weight_sum = math.fsum(values)
    quotas = [total * w / weight_sum for w in values]
    sizes = [max(1, int(math.floor(q))) for q in quotas]
    # Each loop runs at most n times: floors lose < n units, clamping adds < n.
    while sum(sizes) < total:
        i = max(range(n), key=lambda k: (settled(quotas[k] - sizes[k]), -k))
        sizes[i] += 1
    while sum(sizes) > total:
        candidates = [k for k in range(n) if sizes[k] > 1]
        i = max(candidates, key=lambda k: (settled(sizes[k] - quotas[k]), -k))
        sizes[i] -= 1
    return sizes


def split_sizes_batch(total: int, weights: np.ndarray) -> np.ndarray:
    """:func:`split_sizes` for many weight vectors at once (the planners' populations).

    ``weights`` has shape ``[P, k]``; returns int64 sizes ``[P, k]``, each row
    equal to ``split_sizes(total, weights[p])`` (largest remainder, every part
    >= 1, ties to the lower index).
    """
    w = np.asarray(weights, dtype=float)
    if w.ndim != 2:
        raise ValueError(f"weights must have shape [P, k], got {w.shape}")
    n_rows, k = w.shape
    if total < k:
        raise ValueError(f"size {total} cannot be split into {k} parts of at least 1")
    quotas = total * w / w.sum(axis=1, keepdims=True)
    sizes = np.maximum(1, np.floor(quotas)).astype(np.int64)
    deficit = total - sizes.sum(axis=1)
    # Too few: give one more to the `deficit` largest remainders (on settled's
    # grid, stable sort: ties to the lower index). Entries never need a second unit.
    if np.any(deficit > 0):
        order = np.argsort(-np.floor((quotas - sizes) * TIE_STEPS + 0.5), axis=1, kind="stable")
        rank = np.empty_like(order)
        np.put_along_axis(rank, order, np.arange(k)[None, :].repeat(n_rows, 0), axis=1)
        sizes += (rank < np.maximum(deficit, 0)[:, None]).astype(np.int64)
    # Too many (parts raised to 1): take back one at a time, as split_sizes does.
    rows = np.nonzero(deficit < 0)[0]
    while rows.size:
        sub = sizes[rows]
        excess = np.where(sub > 1, np.floor((sub - quotas[rows]) * TIE_STEPS + 0.5), -np.inf)
        pick = np.argmax(excess, axis=1)  # first maximum: ties to the lower index
        sizes[rows, pick] -= 1
        left = total - sizes[rows].sum(axis=1)
        rows = rows[left < 0]
    return sizes


def even_sizes(total: int, parts: int, what: str = "dimension") -> list[int]:
    """:func:`split_sizes` with equal weights (no divisibility needed)."""
    if isinstance(parts, bool) or not isinstance(parts, numbers.Integral) or parts < 1:
        raise ValueError(f"{what}: number of parts must be an integer >= 1, got {parts!r}")
    return split_sizes(total, [1.0] * int(parts), what)


def offsets(sizes: Sequence[int]) -> list[int]:
    """Begin offsets of consecutive parts: ``[0, s0, s0+s1, ...]`` (len(sizes) items)."""
    out, acc = [], 0
    for s in sizes:
        out.append(acc)
        acc += s
    return out


# Argument checks shared by the public API (planners, estimator): pure Python like
# the rest of this module, so the planners import no TensorFlow to use them.


def number_above(value, what: str, low: float = 0.0) -> float:
    """``value`` as a float if it is a finite real number > ``low`` (numpy numbers
    too; ``low=-math.inf``: any finite number); TypeError for a non-number (a
    string or bool is one), else ValueError, both naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a number, got {value!r}")
    if not (math.isfinite(value) and value > low):
        bound = f" and > {low:g}" if low > -math.inf else ""
        raise ValueError(f"{what} must be finite{bound}, got {value!r}")
    return float(value)


def integer_at_least(value, what: str, least: int = 1, none_ok: bool = False):
    """``value`` as an int if it is an integer >= ``least`` (numpy integers too),
    or None if it is None and ``none_ok``; TypeError for a non-integer (a bool or
    float is one), else ValueError, both naming ``what``."""
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{what} must be an integer >= {least}, got {value!r}")
    if value < least:
        raise ValueError(f"{what} must be an integer >= {least}, got {value!r}")
    return int(value)


def integers_at_least(values, what: str, least: int = 1) -> tuple:
    """``values`` (a sequence, not a string) as a tuple of ints, each an integer >=
    ``least`` (:func:`integer_at_least`, naming ``what[i]``)."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{what} must be a sequence of integers, got {values!r}")
    return tuple(integer_at_least(v, f"{what}[{i}]", least) for i, v in enumerate(values))


def true_or_false(value, what: str) -> bool:
    """``value`` as a bool if it is one (numpy's too); TypeError naming ``what`` for
    anything else: ``bool("false")`` is True, so a string (or 0/1) read as a switch
    turned it on in silence."""
    if not isinstance(value, bool) and type(value).__name__ not in ("bool_", "bool"):
        raise TypeError(f"{what} must be True or False, got {value!r}")
    return bool(value)
