"""Whether a plan's predicted lead over another is more than its profile can measure
(numpy-free arithmetic on a profile's records, no TensorFlow).

A model-step profile fits the cost of splitting to the medians of a few timed
splits (``split_seconds``); how far apart those splits' runs fell is recorded
beside them (``split_seconds["spread"]``: each one's interquartile range over its
median). Where the planner's pick is predicted faster than the best plan on other
devices by less than that spread, the profile could not have told the two apart:
at resattnet3d-small's batch 8 on 0.9/0.3 of a core, a 7/1 split predicted 2.5%
faster than the fast worker alone ran at 0.78x it (docs/benchmarks.rst, stop 56),
and two profiles of it (stop 57) recorded spreads of 4-34% (docs/planner.md). Such
a pick is worth timing on the workers (``meshpar plan --verify K``).

>>> from meshpar.planning.cluster import ClusterSpec
>>> c = ClusterSpec.from_speeds([3.0, 1.0])
>>> timing_spread(c) is None  # no timed splits: nothing to compare with
True
"""
from __future__ import annotations

from typing import Iterable, Optional

from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.plan import Plan


def timing_spread(cluster: ClusterSpec) -> Optional[float]:
    """The largest relative spread of the profile's timed splits
    (``extra["split_seconds"]["spread"]``, their runs' interquartile range over their
    median), None for a profile that recorded none (older profiles, ``--speeds``)."""
    split = (cluster.extra or {}).get("split_seconds") or {}
    spread = split.get("spread")
    if not isinstance(spread, dict):
        return None
    values = [float(v) for kind in spread.values() if isinstance(kind, dict)
              for v in kind.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return max(values) if values else None


def _devices_text(plan: Plan) -> str:
    if len(plan.devices) == 1:
        return f"{plan.devices[0]} alone"
    return f"mesh {plan.mesh_shape_string()} on {len(plan.devices)} devices"


def close_call(pick: Plan, others: Iterable[Plan], cluster: ClusterSpec) -> Optional[str]:
    """One line when ``pick`` is predicted faster than the fastest of ``others`` that
    runs on another set of devices and fits in memory by less than the profile's
    :func:`timing_spread` (the two then cannot be told apart by the cost model),
    else None (no such plan, no spread recorded, or a lead beyond it)."""
    spread = timing_spread(cluster)
    if spread is None or not pick.feasible:
        return None
    rivals = [p for p in others if p.feasible and set(p.devices) != set(pick.devices)]
    if not rivals:
        return None
    rival = min(rivals, key=lambda p: p.predicted_step_seconds)
    lead = rival.predicted_step_seconds / pick.predicted_step_seconds - 1.0
    if lead >= spread:
        return None
    return (f"the pick is predicted {lead:.1%} faster than the best plan on other devices "
            f"({_devices_text(rival)}), less than its profile's timed splits spread "
            f"({spread:.0%}, interquartile range over median): the cost model cannot tell "
            "the two apart; `meshpar plan --verify K` times the best candidates on the "
            "workers and keeps the fastest")
