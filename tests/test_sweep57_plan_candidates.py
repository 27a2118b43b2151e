"""candidate_plans plans each device subset once (plan_subsets, which plan(subsets=True)
picks from), and its candidates are the documented ones: the pick over subsets, the
whole cluster's best per mesh shape, each subset's best, and the batch neighbours."""
import pytest

from meshpar.models import describe_model
from meshpar.planning import planners
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.cost_model import CostModel
from meshpar.planning.planners import (canonical_order, fastest_subsets, plan, plan_subsets,
                                       with_worker_addresses)
from meshpar.planning.planners.candidates import batch_neighbours, candidate_plans, same_plan
from meshpar.planning.planners.common import allowed_shapes, subset_cost

MiB = 2 ** 20
CASES = [("resattnet3d-small", [0.9, 0.3], 32, "ga", 3),
         ("vgg-cifar-small", [0.3, 1.0, 0.6], 12, "ga", 0),
         ("vgg-cifar-small", [0.3, 1.0, 0.6, 0.2], 7, "exact", 0),
         ("vgg-cifar", [1.0, 0.5, 0.3, 0.2, 0.2], 8, "proportional", 0),
         ("resattnet3d-tiny", [1.0, 0.1, 0.5], 3, "even", 0)]


def _documented(model, cluster, batch, method, seed):
    """The candidates as candidate_plans' docstring lists them, each planned on its own."""
    ordered = canonical_order(cluster, model, batch)
    cost = CostModel(model, ordered, batch)
    found = [plan(model, cluster, batch, method, seed, subsets=True)]
    found += [plan(model, cluster, batch, method, seed, shapes=[s]) for s in allowed_shapes(cost)]
    found += [plan(model, subset_cost(cost, devices).cluster, batch, method, seed)
              for devices in fastest_subsets(cost, ordered)]
    distinct = []
    for p in found:
        if not any(same_plan(p, q) for q in distinct):
            distinct.append(p)
    for p in list(distinct):
        distinct.extend(batch_neighbours(p, model, cluster))
    out = []
    for p in sorted(distinct, key=lambda p: (not p.feasible, p.predicted_step_seconds)):
        if not any(same_plan(p, q) for q in out):
            out.append(with_worker_addresses(p, cluster))
    return out


@pytest.mark.parametrize("name,speeds,batch,method,seed", CASES)
def test_candidates_are_the_documented_plans(name, speeds, batch, method, seed):
    model = describe_model(name)
    cluster = ClusterSpec.from_speeds(speeds)
    got = candidate_plans(model, cluster, batch, 100, method=method, seed=seed)
    want = _documented(model, cluster, batch, method, seed)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert same_plan(a, b) and a.devices == b.devices
        assert a.predicted_step_seconds == b.predicted_step_seconds


def _counting(monkeypatch, method):
    calls = []
    inner = planners.PLANNERS[method]

    def counted(model, cluster, batch, *args, **kwargs):
        calls.append((tuple(d.device for d in cluster.devices), kwargs.get("shapes")))
        return inner(model, cluster, batch, *args, **kwargs)

    monkeypatch.setitem(planners.PLANNERS, method, counted)
    return calls


@pytest.mark.parametrize("method", ["ga", "exact", "proportional"])
def test_each_subset_is_planned_once(monkeypatch, method):
    model = describe_model("vgg-cifar-small")
    cluster = ClusterSpec.from_speeds([0.3, 1.0, 0.6, 0.2])
    ordered = canonical_order(cluster, model, 8)
    cost = CostModel(model, ordered, 8)
    subsets = [tuple(d.device for d in s) for s in fastest_subsets(cost, ordered)]
    shapes = allowed_shapes(cost)
    calls = _counting(monkeypatch, method)
    candidate_plans(model, cluster, 8, 10, method=method, seed=2)
    whole = tuple(d.device for d in ordered.devices)
    # the whole cluster: once for the pick, once per mesh shape; every subset once
    assert sorted((shape for devices, shape in calls if devices == whole), key=repr) == sorted(
        [None] + [[s] for s in shapes], key=repr)
    planned = [devices for devices, _ in calls if devices != whole]
    assert sorted(planned) == sorted(subsets) and len(set(planned)) == len(planned)


def test_plan_subsets_holds_what_plan_picks_from():
    model = describe_model("vgg-cifar-small")
    cluster = ClusterSpec.from_speeds([0.3, 1.0, 0.6])
    got = plan_subsets(model, cluster, 12, "ga", 4)
    pick = plan(model, cluster, 12, "ga", 4, subsets=True)
    assert same_plan(got.best, pick) and got.best.devices == pick.devices
    assert got.best.predicted_step_seconds == pick.predicted_step_seconds
    assert got.best.lower_bound_seconds == pick.lower_bound_seconds
    whole = plan(model, cluster, 12, "ga", 4)
    assert same_plan(got.whole, whole)
    assert len(got.subsets) == 2 and got.roomiest == ()  # the fastest alone, the fastest 2
    assert [len(p.devices) for p in got.subsets] == [1, 2]
    assert any(same_plan(got.best, p) for p in (got.whole,) + got.subsets)


def test_plan_subsets_plans_the_roomiest_when_nothing_else_fits():
    model = describe_model("vgg-cifar")
    cluster = ClusterSpec.from_speeds([0.9, 0.3, 0.6]).with_memory(
        [20 * MiB, 1000 * MiB, 20 * MiB])
    got = plan_subsets(model, cluster, 64, "proportional")
    assert not got.whole.feasible and not any(p.feasible for p in got.subsets)
    assert got.roomiest and got.best.feasible
    assert got.best.devices == (cluster.devices[1].device,)  # the roomy one alone
    assert same_plan(got.best, plan(model, cluster, 64, "proportional", subsets=True))


def test_plan_keeps_its_refusals_in_their_order():
    model = describe_model("vgg-cifar-small")
    with pytest.raises(ValueError, match="unknown planning method"):
        plan(model, [1.0, 0.5], 8, method="nope", subsets="yes")
    with pytest.raises(TypeError, match="subsets must be True or False"):
        plan(model, [1.0, 0.5], 8, subsets="yes", memory_terms=None)
    with pytest.raises(TypeError, match="memory_terms must be a MemoryTerms"):
        plan(model, [1.0, 0.5], 8, subsets=True, memory_terms=None, bogus=1)
    with pytest.raises(ValueError, match="takes no option"):
        plan_subsets(model, [1.0, 0.5], 8, "even", population=4)
