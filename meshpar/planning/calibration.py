"""What synchronising costs, learned from a profile's timed splits (numpy, no TensorFlow).

The cost model (docs/cost_model.md) adds two measured terms per mesh axis to
a split's compute:

* **overhead work** ``W``: FLOPs each device spends per step on splitting
  over the axis (statistics, gathers, the gradient all-reduce, the barrier),
  paid by a row at its slowest device's speed;
* **synchronisation jitter** ``c``: devices that meet at a collective wait
  for the slower one, and each device's time to the meeting varies (from op
  to op, with scheduling; on a worker held to a CPU quota, with the quota's
  period). With times ``t_i (1 + c z_i)``, ``z_i`` independent standard
  normals, the step pays the expected maximum of the devices' times, taken
  with Clark's formulas (C. E. Clark, "The greatest of a finite set of random
  variables", Operations Research 9(2), 1961). The wait vanishes where one
  device is much slower than the others (it sets the pace whatever the
  others do) and is largest where the split is balanced: the reason a
  speed-proportional split runs slower than its slowest share's compute,
  while an even split on uneven devices does not.

``W`` is fitted to the profile's even split and ``c`` to its speed-
proportional (balanced) split of the same axis (:func:`fit_axis`); a profile
without a balanced split keeps ``c = 0``, the model as it was. Where the
profile also timed the split that fit predicted fastest (``checked``), the
pair is kept only if it prices that one as well as a pair fitted to all three
(smallest worst error).
"""
from __future__ import annotations

import math
import numbers
from typing import Callable, Optional

import numpy as np
from scipy.optimize import brentq
from scipy.special import ndtr

from meshpar.planning.plan import Plan

#: Largest jitter the fit may return: a relative spread of 2 already makes a
#: balanced pair of devices take 2.1x its mean; a measurement asking for more
#: is not a wait for the slowest device.
MAX_JITTER = 2.0
#: Points of the scan for the smallest jitter that explains a balanced split.
JITTER_GRID = 21
#: Relative excess of the even split's prediction over its time still counted
#: as taking it (the work is solved to this precision).
EXACT = 1e-6
#: Of jitters whose larger log error is within this of the best, the smallest
#: is kept: a jitter the measurements do not ask for distorts every other plan.
TIE = 1e-3
_INV_SQRT_2PI = 1.0 / np.sqrt(2.0 * np.pi)


def expected_max(times, jitter: float, axis: int = -1) -> np.ndarray:
    """Expected maximum over ``axis`` of the times ``times (1 + jitter z)``, ``z``
    independent standard normals: Clark's moments, folded in one device at a
    time (exact for two devices, Clark's approximation beyond). ``jitter = 0``
    is the plain maximum."""
    t = np.moveaxis(np.asarray(times, dtype=float), axis, -1)
    if jitter <= 0.0 or t.shape[-1] == 1:
        return t.max(axis=-1)
    mean, var = t[..., 0], (jitter * t[..., 0]) ** 2
    for k in range(1, t.shape[-1]):
        mean2, var2 = t[..., k], (jitter * t[..., k]) ** 2
        theta = np.sqrt(var + var2)
        safe = np.where(theta > 0, theta, 1.0)
        a = (mean - mean2) / safe
        p, dens = ndtr(a), np.exp(-0.5 * a * a) * _INV_SQRT_2PI
        first = mean * p + mean2 * (1.0 - p) + theta * dens
        second = ((mean ** 2 + var) * p + (mean2 ** 2 + var2) * (1.0 - p)
                  + (mean + mean2) * theta * dens)
        var = np.where(theta > 0, np.maximum(second - first ** 2, 0.0), 0.0)
        mean = np.where(theta > 0, first, np.maximum(mean, mean2))
    return mean


def _solve(f: Callable[[float], float], target: float, lo: float, hi: float) -> float:
    """The ``x`` in ``[lo, hi]`` where ``f`` (non-decreasing) reaches ``target``:
    ``lo`` when ``f(lo)`` is already there, ``hi`` when never (Brent's method)."""
    if f(lo) >= target:
        return lo
    if f(hi) <= target:
        return hi
    return float(brentq(lambda x: f(x) - target, lo, hi, xtol=1e-12 * max(hi, 1.0),
                        rtol=1e-12))


def fit_axis(predict: Callable[[float, float, str], float], even_seconds: float,
             balanced_seconds: Optional[float], work_high: float,
             checked: Optional[dict] = None) -> tuple:
    """``(W, c)`` of one mesh axis from its measured even and balanced splits,
    and from ``checked`` (``{key: seconds}``, optional): further splits of the
    axis timed with them (the profile's: the split the cost model fitted to the
    first two predicted fastest), which ``predict`` prices by their keys.

    ``predict(W, c, which)``: the cost model's step time of the ``"even"`` or
    ``"balanced"`` split with overhead work ``W`` and jitter ``c`` on this
    axis, non-decreasing in both. For any ``c``, ``W(c)`` is the largest work
    that keeps the even split within its measured time (never negative, at
    most ``work_high``); ``c`` is the jitter at which the balanced split, with
    ``W(c)``, takes its measured time (the smallest such ``c``, at most
    :data:`MAX_JITTER`, the closest on the scan when none reaches it). When
    the balanced split ran faster than ``W(0)`` predicts, ``c = 0`` and ``W``
    is fitted to the balanced split instead (never above ``W(0)``). When no
    ``(W, c)`` takes both times (at the jitter found ``W(c)`` is 0 and the
    even split is still over its time), the pair with the smallest larger
    relative error of the two (:func:`_minimax`), if that beats the scan's.
    A balanced split slower than any jitter explains keeps the scan's closest
    jitter, the even split fitted: a wait cannot be told from noise there.

    With ``checked``: of that pair and the :func:`_minimax` pair over all the
    timed splits, the one whose worst error over them all is the smaller
    (:func:`_fit_checked`)."""
    for key, seconds in {"even": even_seconds, **(checked or {})}.items():
        if seconds is None or not np.isfinite(seconds) or seconds <= 0:
            raise ValueError(f"measured {key} split time must be positive, got {seconds!r}")
    fit = _fit_pair(predict, even_seconds, balanced_seconds, work_high)
    if not checked:
        return fit
    points = {"even": even_seconds, **({"balanced": balanced_seconds} if balanced_seconds
                                       else {}), **checked}
    return _fit_checked(predict, fit, points, work_high)


def _fit_pair(predict, even_seconds: float, balanced_seconds: Optional[float],
              work_high: float) -> tuple:
    """:func:`fit_axis` from the even and the balanced split alone."""
    def work(c):
        return _solve(lambda w: predict(w, c, "even"), even_seconds, 0.0, work_high)

    if not balanced_seconds:
        return work(0.0), 0.0

    def excess(c):
        return predict(work(c), c, "balanced") - balanced_seconds

    # The smallest jitter that explains the balanced split: scanned on a grid,
    # then refined, since W(c) can fall faster than the balanced time rises
    # at large c (there the even split's own wait uses up its measured time).
    grid = np.linspace(0.0, MAX_JITTER, JITTER_GRID)
    values = [excess(grid[0])]
    if values[0] >= 0:
        # The balanced split ran faster than the even split's work allows: the
        # two disagree beyond any wait (the even split's time is the noisier
        # one: seen 12% over the same split's benchmark runs). The balanced
        # split is the nearer to any plan worth picking, so it sets the work.
        return _solve(lambda w: predict(w, 0.0, "balanced"), balanced_seconds,
                      0.0, work_high), 0.0
    fit = None
    for i in range(1, grid.size):
        values.append(excess(grid[i]))
        if values[-1] >= 0:
            jitter = float(brentq(excess, grid[i - 1], grid[i], xtol=1e-9, rtol=1e-12))
            fit = (work(jitter), jitter)
            break
    if fit is None:  # nothing reaches it: the closest
        jitter = float(grid[int(np.argmax(values))])
        fit = (work(jitter), jitter)
    if predict(*fit, "even") <= even_seconds * (1.0 + EXACT):
        return fit
    # The jitter that reaches the balanced split left no work and the even
    # split still over its time: no work and jitter take both. Share the error
    # out instead of putting it all on the even split: seen 1.30x on
    # resattnet3d-small's even filter split, with a jitter of 1.5 that also
    # priced every balanced filter split at 1.86x its compute (docs/cost_model.md).
    points = {"even": even_seconds, "balanced": balanced_seconds}
    shared = _minimax(predict, points, work_high)
    return shared if _worst_error(predict, *shared, points) < _worst_error(
        predict, *fit, points) else fit


def _fit_checked(predict, fit: tuple, points: dict, work_high: float) -> tuple:
    """Of ``fit`` (from the even and balanced splits alone) and the
    :func:`_minimax` pair over every timed split of the axis (``points``), the
    one whose worst relative error over them all is the smaller (``fit`` on a
    tie within :data:`TIE`). Two parameters from two splits fit those exactly
    and may miss the split a plan would use by 30% (resattnet3d-small, batch 8,
    0.9/0.3: the 7/1 split predicted 2.5% faster than the fast worker alone
    ran at 0.78x it); a miss the two cannot share is shared out."""
    shared = _minimax(predict, points, work_high)
    return shared if _worst_error(predict, *shared, points) + TIE < _worst_error(
        predict, *fit, points) else fit


def _worst_error(predict, work: float, jitter: float, points: dict) -> float:
    """The largest ``|log(predicted / measured)|`` over the timed splits ``points``
    (``{key: seconds}``)."""
    return max(abs(np.log(predict(work, jitter, key) / seconds))
               for key, seconds in points.items())


def _minimax(predict, points: dict, work_high: float) -> tuple:
    """``(W, c)`` with the smallest worst error over the timed splits ``points``
    (``{key: seconds}``), on the jitter scan's grid: for each ``c`` the work
    where the split most over its time is over by the factor the split most
    under is under (every prediction grows with the work), and of ``c`` within
    :data:`TIE` of the best, the smallest."""
    def balance(w, c):
        errors = [np.log(predict(w, c, key) / seconds) for key, seconds in points.items()]
        return max(errors) + min(errors)

    best = []
    for c in np.linspace(0.0, MAX_JITTER, JITTER_GRID):
        w = _solve(lambda w, c=c: balance(w, c), 0.0, 0.0, work_high)
        best.append((_worst_error(predict, w, c, points), w, c))
    smallest = min(e for e, _, _ in best)
    _, w, c = next(b for b in best if b[0] <= smallest + TIE)
    return float(w), float(c)


def timed_order(names, mine: list) -> np.ndarray:
    """The device (index into ``mine``, a cluster's device names) at each share of a
    profile's timed splits: the devices ``names`` lists, in its order (their order
    when timed); the cluster's order for a profile that does not say (``names``
    None). ValueError when ``names`` are other devices than these (a profile edited
    by hand, or :meth:`ClusterSpec.subset` of one): fitted as this cluster's split,
    N devices' times priced a subset's splits at ~150x their work."""
    if names is None:
        return np.arange(len(mine))
    if sorted(names) == sorted(mine):
        return np.array([mine.index(name) for name in names])
    raise ValueError(
        f"the profile's splits were timed on {', '.join(map(str, names))} (extra "
        f"'split_seconds' 'device_names'), this cluster lists {', '.join(mine)}: the "
        "cost of splitting cannot be fitted to other devices. Plan the whole profile "
        "(planners.plan(..., subsets=True), meshpar plan's default, leaves devices "
        "idle itself) or price a subset with planners.common.subset_cost; in a profile "
        "edited by hand, rename the devices in 'device_names' too")


def checked_splits(checked: dict, batch: int, n: int) -> dict:
    """``{axis: (plan, seconds)}`` of a profile's ``split_seconds["checked"]``: per
    mesh axis, the split over all the workers that the cost model fitted to the
    even and balanced splits predicted fastest, as a plan, and its time
    (``meshpar.runtime.profiling``). ValueError for one not of the profile's
    batch, axis and device count (a profile edited by hand)."""
    out = {}
    for axis, entry in checked.items():
        where = f"the profile's checked {axis} split (extra 'split_seconds' 'checked')"
        if axis not in ("batch", "model") or not isinstance(entry, dict):
            raise ValueError(f"{where}: expected {{'plan': ..., 'seconds': ...}} "
                             "under 'batch' or 'model'")
        plan = Plan.from_dict(entry.get("plan"), source=where)
        shape = dict(plan.mesh_shape)
        if plan.batch != batch or shape.get(axis, 1) != n or len(plan.devices) != n:
            raise ValueError(f"{where} is a plan of batch {plan.batch} on "
                             f"{plan.mesh_shape_string()} ({len(plan.devices)} devices), "
                             f"not a {axis} split of batch {batch} over the cluster's "
                             f"{n} devices")
        seconds = entry.get("seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real) or not (
                0 < seconds < math.inf):
            raise ValueError(f"{where}: 'seconds' must be a positive number, got "
                             f"{seconds!r}")
        out[axis] = (plan, float(seconds))
    return out
