"""Planners: every one returns a :class:`meshpar.planning.plan.Plan`.

>>> from meshpar.planning.cluster import ClusterSpec
>>> from meshpar.models import describe_model
>>> model = describe_model("vgg-cifar")
>>> cluster = ClusterSpec.from_speeds([1.0, 0.5, 0.3, 0.2])
>>> plans = {m: plan(model, cluster, 32, method=m) for m in METHODS}
>>> plans["exact"].extra["gap"] <= 2e-4   # proven by HiGHS
True
>>> plans["ga"].predicted_step_seconds <= 1.01 * plans["exact"].predicted_step_seconds
True
"""
from __future__ import annotations

import dataclasses
import inspect
import time
from typing import Optional, Sequence, Union

import numpy as np

from meshpar.core.splits import integer_at_least
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.cost_model import CostModel
from meshpar.planning.description import ModelDescription
from meshpar.planning.memory import MEASURED, MemoryTerms
from meshpar.planning.plan import Plan
from meshpar.planning.planners.common import (better, check_options, representative_speeds,
                                              subset_cost)
from meshpar.planning.planners.even import plan_even
from meshpar.planning.planners.exact import ExactTimeLimit, plan_exact
from meshpar.planning.planners.ga import plan_ga
from meshpar.planning.planners.proportional import plan_proportional

PLANNERS = {
    "even": plan_even,
    "proportional": plan_proportional,
    "exact": plan_exact,
    "ga": plan_ga,
}
METHODS = tuple(PLANNERS)

__all__ = ["plan", "plan_subsets", "SubsetPlans", "fastest_subsets", "roomiest_subsets",
           "memory_ratios", "METHODS", "plan_even", "plan_proportional", "plan_exact",
           "plan_ga", "ExactTimeLimit"]


def plan(model: Union[ModelDescription, object], cluster: Union[ClusterSpec, Sequence[float]],
         batch: int, method: str = "ga", seed: int = 0,
         shapes: Optional[Sequence[tuple]] = None, subsets: bool = False,
         memory_terms: MemoryTerms = MEASURED, **options) -> Plan:
    """Plan ``model`` on ``cluster`` for a global ``batch`` with ``method``.

    ``model``: a :class:`ModelDescription` (of a model name:
    ``meshpar.models.describe_model(name)``) or a :class:`~meshpar.models.ModelSpec`
    (its ``describe()``: a network of one's own, ``meshpar.models.from_module``); ``cluster``: a :class:`ClusterSpec`
    or the devices' relative speeds (:meth:`ClusterSpec.from_speeds`);
    ``batch``: an integer >= 1; ``seed``: an integer >= 0.
    ``method`` is one of ``even``, ``proportional``, ``exact``, ``ga``;
    ``shapes`` restricts the mesh shapes ``(R, M)`` searched; other keyword
    options go to the planner (e.g. ``population``, ``generations`` for ga); an
    option the planner does not take is a ValueError, never silently ignored
    (``population`` at most :data:`~meshpar.planning.planners.common.MAX_POPULATION`).
    The devices are planned in :func:`canonical_order` (fastest, then roomiest), so
    one cluster listed in any order gets one plan, up to which device is called what.
    ``seed`` matters to the planners that draw random numbers (ga).
    ``memory_terms``: how memory is counted (default the measured
    :data:`~meshpar.planning.memory.MEASURED`; e.g. another headroom).

    With ``subsets`` the planner also plans for the fastest ``k`` devices
    alone, ``k = 1 .. n-1`` (at speed-class boundaries when ``n > 16``), and
    returns the best of all: a slow device whose share costs more in
    synchronisation than it computes is left idle, rather than slowing the
    whole step; when none of those fits in memory, the ``k`` devices with the
    most memory are planned too (``shapes`` then applies to the whole cluster
    only; every subset is planned with the same options; a ``time_limit`` bounds
    the whole call:
    the exact planner's proven gap is then to the least lower bound over all
    the subsets, and the GA gives half the limit to the whole cluster and
    shares the rest equally among the subsets, each taking what the runs
    before it left unused).
    """
    if not isinstance(subsets, (bool, np.bool_)) or not subsets:
        model, cluster, batch, _ = _checked(model, cluster, batch, method, seed,
                                            memory_terms, options, subsets)
        cost = CostModel(model, cluster, batch, memory_terms=memory_terms)
        best = PLANNERS[method](model, cluster, batch, shapes=shapes, cost=cost, **options)
        return with_worker_addresses(best, cluster)
    return plan_subsets(model, cluster, batch, method, seed, shapes=shapes,
                        memory_terms=memory_terms, **options).best


@dataclasses.dataclass(frozen=True)
class SubsetPlans:
    """What :func:`plan_subsets` planned: ``whole``, the plan of every device (of the
    ``shapes`` asked for); ``subsets``, the plan of each device subset weighed for
    speed (the fastest device alone, the fastest ``k``; :func:`fastest_subsets`), in
    the order planned; ``roomiest``, the plan of each subset of the devices with the
    most memory, planned only when none of those fits; ``best``, the pick of all of
    them (what ``plan(..., subsets=True)`` returns). Each plan records its workers'
    addresses where the cluster is a profile of a TF cluster."""
    whole: Plan
    subsets: tuple = ()
    roomiest: tuple = ()
    best: Optional[Plan] = None


def plan_subsets(model: Union[ModelDescription, object],
                 cluster: Union[ClusterSpec, Sequence[float]], batch: int, method: str = "ga",
                 seed: int = 0, shapes: Optional[Sequence[tuple]] = None,
                 memory_terms: MemoryTerms = MEASURED, **options) -> SubsetPlans:
    """The plans :func:`plan` weighs with ``subsets=True``, each planned once: the
    whole cluster's, each device subset's and the pick of them all
    (:class:`SubsetPlans`). Arguments as for :func:`plan` (``shapes`` applies to the
    whole cluster only; a ``time_limit`` bounds the whole call, shared as
    :func:`plan` says)."""
    model, cluster, batch, _ = _checked(model, cluster, batch, method, seed, memory_terms,
                                        options)
    planner = PLANNERS[method]
    cost = CostModel(model, cluster, batch, memory_terms=memory_terms)
    t0 = time.perf_counter()
    budget = options.get("time_limit")
    groups = fastest_subsets(cost, cluster)
    if budget is not None and method == "ga" and groups:
        options["time_limit"] = budget / 2
    whole = planner(model, cluster, batch, shapes=shapes, cost=cost, **options)
    found = [whole]

    def each(subsets_: list, best: Plan) -> tuple:
        planned = []
        for i, devices in enumerate(subsets_):
            sub_cost = subset_cost(cost, devices)
            if budget is not None:  # the limit is for the whole call
                left = budget - (time.perf_counter() - t0)
                share = left if method == "exact" else left / (len(subsets_) - i)
                options["time_limit"] = max(share, 1e-3)
            candidate = planner(model, sub_cost.cluster, batch, cost=sub_cost, **options)
            found.append(candidate)
            planned.append(candidate)
            if better(candidate, best) if candidate.feasible or best.feasible else \
                    max(memory_ratios(candidate, cluster)) < max(memory_ratios(best, cluster)):
                best = candidate  # when nothing fits: the plan that overflows least
        return best, planned

    best, by_speed = each(groups, whole)
    by_memory = []
    if not best.feasible:  # memory, not speed, may be what leaves a device out
        best, by_memory = each(roomiest_subsets(cost, cluster, groups), best)
    if method == "exact":
        best = _proven_over_subsets(best, found, time.perf_counter() - t0)
    else:  # the whole call's time, every subset's planning included, as for exact
        best = dataclasses.replace(best, planning_seconds=time.perf_counter() - t0)
    # the bound of the cluster planned, not of the devices the plan keeps busy: a plan
    # on the fastest device alone was its own bound (ratio 1.000), above the cluster's
    best = dataclasses.replace(best, lower_bound_seconds=cost.lower_bound())
    return SubsetPlans(whole=with_worker_addresses(whole, cluster),
                       subsets=tuple(with_worker_addresses(p, cluster) for p in by_speed),
                       roomiest=tuple(with_worker_addresses(p, cluster) for p in by_memory),
                       best=with_worker_addresses(best, cluster))


def _checked(model, cluster, batch, method, seed, memory_terms, options: dict,
             subsets=True) -> tuple:
    """``(model, cluster, batch, seed)`` checked for :func:`plan` (the cluster in
    :func:`canonical_order`), ``subsets`` and ``memory_terms`` checked, ``options``
    checked for ``method``'s planner and given the ``seed`` where it takes one
    (changed in place); TypeError or ValueError for the first bad one."""
    model, cluster = _as_model(model), _as_cluster(cluster)
    _refuse_unlike_devices_sharing_a_string(cluster)
    batch, seed = integer_at_least(batch, "batch"), integer_at_least(seed, "seed", 0)
    cluster = canonical_order(cluster, model, batch)
    if not isinstance(method, str) or method not in PLANNERS:
        raise ValueError(f"unknown planning method {method!r}; choose from "
                         f"{', '.join(METHODS)}")
    if not isinstance(subsets, (bool, np.bool_)):
        raise TypeError(f"subsets must be True or False, got {subsets!r}")
    if not isinstance(memory_terms, MemoryTerms):
        raise TypeError(f"memory_terms must be a MemoryTerms, got {memory_terms!r}")
    accepted = inspect.signature(PLANNERS[method]).parameters
    unknown = sorted(set(options) - set(accepted) | ({"cost"} & set(options)))
    if unknown:
        raise ValueError(f"planning method {method!r} takes no option(s) {', '.join(unknown)}")
    check_options(options)
    if "seed" in accepted:
        options["seed"] = seed
    return model, cluster, batch, seed


def canonical_order(cluster: ClusterSpec, model: ModelDescription, batch: int) -> ClusterSpec:
    """``cluster`` with its devices in an order that depends on what they are, not
    on how the cluster lists them: fastest first (at an even share of a
    ``batch`` step of ``model``), then the roomiest, then by profile, slice
    efficiencies and alone profile; devices alike in all of these keep their
    listing order (they are interchangeable). The planners index devices by
    position (the GA's chromosome, the exact planner's programs, the placement
    of ties), so planning on this order gives the same plan, up to which
    device is called what, for every listing of one cluster."""
    size = max(3.0 * model.flops * batch / len(cluster.devices), 1.0)
    keys = [(-float(d.speed_at(size)), -d.memory_bytes, d.profile, d.slice_efficiency,
             cluster.alone_points(d.device), i) for i, d in enumerate(cluster.devices)]
    order = [key[-1] for key in sorted(keys)]
    return cluster if order == list(range(len(order))) else cluster.reordered(order)


def _as_model(model) -> ModelDescription:
    """``model`` if it is a :class:`ModelDescription`, the description of a
    :class:`~meshpar.models.ModelSpec` (anything whose ``describe()`` gives one:
    a registered model's or one's own, named as the spec where it names itself
    otherwise, so that the plan trains that spec), else a TypeError (planning
    imports no models, so a model name is not described here)."""
    if isinstance(model, ModelDescription):
        return model
    describe = getattr(model, "describe", None)
    if callable(describe) and not isinstance(model, type):
        description = describe()
        if not isinstance(description, ModelDescription):
            raise TypeError(f"model {getattr(model, 'name', model)!r}: describe() must "
                            f"return a ModelDescription, got {description!r}")
        name = getattr(model, "name", None)  # the plan's model: one the spec answers to
        known = {name, getattr(getattr(model, "config", None), "name", None)}
        if isinstance(name, str) and description.name not in known:
            description = dataclasses.replace(description, name=name)
        return description
    hint = f"; for a model name, pass meshpar.models.describe_model({model!r})" \
        if isinstance(model, str) else ""
    raise TypeError(f"model must be a ModelDescription or a ModelSpec, got {model!r}{hint}")


def _refuse_unlike_devices_sharing_a_string(cluster: ClusterSpec) -> None:
    """ValueError for two devices of ``cluster`` that share a device string (local
    emulated ones may) but differ in profile, memory or slice efficiencies: a plan
    names each device by its string, so it could not say which of them takes which
    share. Listed 1.0 and 0.3 on one ``/device:CPU:0``, the 6/2 batch split was
    reported at 37 us a step, and the plan re-priced at 89 us (the cost model, the
    memory table and ``train --plan`` find a device by its string)."""
    seen = {}
    for d in cluster.devices:
        other = seen.setdefault(d.device, d)
        if (other.profile, other.memory_bytes, other.slice_efficiency) != (
                d.profile, d.memory_bytes, d.slice_efficiency):
            raise ValueError(
                f"devices {other.name!r} and {d.name!r} share the device string "
                f"{d.device!r} but differ in speed profile, memory or slice efficiency: a "
                "plan names each device by its string, so it could not say which of them "
                "takes which share; give each device its own device string")


def _as_cluster(cluster) -> ClusterSpec:
    """``cluster``, or a synthetic one of the relative speeds it lists."""
    if isinstance(cluster, ClusterSpec):
        return cluster
    if isinstance(cluster, (str, bytes)) or not isinstance(cluster, (Sequence, np.ndarray)):
        raise TypeError("cluster must be a ClusterSpec or a list of relative device speeds, "
                        f"got {cluster!r}")
    return ClusterSpec.from_speeds(cluster)


def with_worker_addresses(plan_: Plan, cluster: ClusterSpec) -> Plan:
    """``plan_``, its ``extra["worker_addresses"]`` set to the address of each of its
    devices when ``cluster`` is a profile of a TF cluster (``extra["addresses"]``,
    one per device, in the profile's device order): a cluster file that lists the
    same workers in another order can then still place each slice on the worker
    that was profiled for it (``ClusterClient.place``)."""
    addresses = (cluster.extra or {}).get("addresses")
    if not addresses or len(addresses) != len(cluster.devices):
        return plan_
    where = {d.device: str(a) for d, a in zip(cluster.devices, addresses)}
    if all(d in where for d in plan_.devices):
        plan_.extra["worker_addresses"] = [where[d] for d in plan_.devices]
    return plan_


def memory_ratios(plan: Plan, cluster: ClusterSpec) -> list:
    """For each of ``plan``'s devices: its counted memory over the memory ``cluster``
    gives that device."""
    capacity = {d.device: d.memory_bytes for d in cluster.devices}
    return [m / capacity[d] for d, m in zip(plan.devices, plan.memory_per_device)]


def _proven_over_subsets(best: Plan, found: list, seconds: float) -> Plan:
    """The exact plan over all device subsets: its gap to the least of their bounds."""
    bounds = [p.extra.get("lower_bound_seconds") for p in found if p.feasible]
    extra = dict(best.extra, subsets=len(found))
    if best.feasible and None not in bounds:
        lower = min(bounds)
        extra["lower_bound_seconds"] = lower
        extra["gap"] = max(0.0, (best.predicted_step_seconds - lower)
                           / best.predicted_step_seconds)
    return dataclasses.replace(best, extra=extra, planning_seconds=seconds)


def roomiest_subsets(cost: CostModel, cluster: ClusterSpec, tried: Sequence[tuple]) -> list:
    """The k devices with the most memory for k < n (device tuples, roomiest first),
    those not in ``tried``: when none of the fastest k fits, a slower device with
    more memory may hold the model alone (speeds 0.9/0.3/0.6 with 10/100/10 MiB:
    only the 0.3 device fits, which no fastest-k subset holds without the others).
    Ties of memory go to the faster device, so that the devices tried do not
    depend on the order the cluster lists them in (:func:`_device_order`)."""
    order = _device_order(cost.memory_capacity, representative_speeds(cost))
    seen = {tuple(group) for group in tried}
    groups = [tuple(cluster.devices[i] for i in order[:k]) for k in range(1, len(order))]
    return [g for g in groups if g not in seen]


def _device_order(first, second) -> list:
    """Device indices by ``first`` descending, ties by ``second`` descending, then by
    the listing order (left only between devices alike in both)."""
    first, second = np.asarray(first, float), np.asarray(second, float)
    return [int(i) for i in np.lexsort((np.arange(len(first)), -second, -first))]


def fastest_subsets(cost: CostModel, cluster: ClusterSpec) -> list:
    """The fastest k devices for k < n (device tuples), fastest first; for more
    than 16 devices only where the speed class changes. The one device is the
    fastest on the whole batch by itself (its speed times
    :meth:`ClusterSpec.alone_factor`), not the fastest with all at once: three
    workers on two cores profiled at 4.9/5.0/3.8 GFLOP/s all at once and
    9.3/5.6/1.8 alone, and the one-device plan went to the second. Of devices
    of one speed the roomier goes first (:func:`_device_order`): which of them a
    subset takes must not depend on the order the cluster lists them in."""
    speeds = representative_speeds(cost)
    order = _device_order(speeds, cost.memory_capacity)  # of one speed, the roomier first
    n = len(order)
    ks = range(2, n)
    if n > 16:
        ks = [k for k in ks if speeds[order[k]] != speeds[order[k - 1]]]
    whole = max(3.0 * cost.model.flops * cost.batch, 1.0)
    alone = [d.speed_at(whole) * cluster.alone_factor(d) for d in cluster.devices]
    single = [(cluster.devices[_device_order(alone, cost.memory_capacity)[0]],)] \
        if n > 1 else []
    return single + [tuple(cluster.devices[i] for i in order[:k]) for k in ks]
