"""Planners: every one returns a :class:`meshpar.plan.Plan`.

>>> from meshpar.cluster import ClusterSpec
>>> from meshpar.models.catalog import describe_model
>>> model = describe_model("vgg-cifar")
>>> cluster = ClusterSpec.from_speeds([1.0, 0.5, 0.3, 0.2])
>>> plans = {m: plan(model, cluster, 32, method=m) for m in METHODS}
>>> plans["ga"].predicted_step_seconds <= plans["proportional"].predicted_step_seconds
True
"""
from __future__ import annotations

from typing import Optional, Sequence

from meshpar.cluster import ClusterSpec
from meshpar.cost_model import CostModel
from meshpar.description import ModelDescription
from meshpar.plan import Plan
from meshpar.planner.even import plan_even
from meshpar.planner.exact import plan_exact
from meshpar.planner.ga import plan_ga
from meshpar.planner.proportional import plan_proportional

PLANNERS = {
    "even": plan_even,
    "proportional": plan_proportional,
    "exact": plan_exact,
    "ga": plan_ga,
}
METHODS = tuple(PLANNERS)

__all__ = ["plan", "METHODS", "plan_even", "plan_proportional", "plan_exact", "plan_ga"]


def plan(model: ModelDescription, cluster: ClusterSpec, batch: int, method: str = "ga",
         seed: int = 0, shapes: Optional[Sequence[tuple]] = None, **options) -> Plan:
    """Plan ``model`` on ``cluster`` for a global ``batch`` with ``method``.

    ``method`` is one of ``even``, ``proportional``, ``exact``, ``ga``;
    ``shapes`` restricts the mesh shapes ``(R, M)`` searched; other keyword
    options go to the planner (e.g. ``population``, ``generations`` for ga).
    """
    if method not in PLANNERS:
        raise ValueError(f"unknown planning method {method!r}; choose from "
                         f"{', '.join(METHODS)}")
    cost = CostModel(model, cluster, batch)
    return PLANNERS[method](model, cluster, batch, seed=seed, shapes=shapes, cost=cost,
                            **options)
