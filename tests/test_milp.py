"""The exact planner's MILP: its objective is the cost model's step time, its
optimum is the exhaustive search's, it honours memory, and it says when it ran
out of time."""
import time

import numpy as np
import pytest

from meshpar.cli import main
from meshpar.models import describe_model
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.cost_model import CostModel
from meshpar.planning.description import Layer, ModelDescription
from meshpar.planning.memory import MEASURED
from meshpar.planning.planners import ExactTimeLimit, plan
from meshpar.planning.planners.exact import _plan_enumerated, placements
from meshpar.planning.planners.milp import constant_speeds, formulate


def tiny_model():
    """Two filter-split convolutions (one ends in an all-concat), one unsplit layer."""
    return ModelDescription("tiny", (
        Layer("c1", "conv3d", 2e8, 2000, 4000, 12 * 4000, "c1_filters", 12, "allconcat"),
        Layer("c2", "conv3d", 3e8, 3000, 12 * 4000, 10 * 2000, "c2_filters", 10, None),
        Layer("fc", "dense", 1e6, 500, 10 * 2000, 10, "fc_units", 10, "allreduce")),
        input_elems=4000)


def tight(tensor_bytes):
    """A device memory leaving ``tensor_bytes`` for a plan's tensors (their
    copies included) over the runtime base, after the count's headroom."""
    return (MEASURED.base_bytes + tensor_bytes) / (1.0 - MEASURED.headroom)


def random_cluster(rng, n):
    return ClusterSpec.from_speeds(list(rng.choice([1.0, 0.6, 0.3, 0.2], size=n)),
                                   memory_bytes=float(rng.choice([16 * 2**30, tight(4e6)])),
                                   bandwidth=float(rng.choice([1e8, 1e10])),
                                   latency=float(rng.choice([0.0, 1e-3])))


def test_the_programs_optimum_is_the_cost_models_time_of_its_plan():
    rng = np.random.default_rng(1)
    model = tiny_model()
    checked = 0
    for _ in range(4):
        cluster, batch = random_cluster(rng, 4), int(rng.integers(4, 9))
        cost = CostModel(model, cluster, batch)
        speeds = constant_speeds(cost)
        for rows, cols in cost.shapes():
            for perm in placements(cost.device_type, rows, cols)[:3]:
                fixed = None if rows == 1 or cols == 1 else \
                    [batch - rows + 1] + [1] * (rows - 1)
                form = formulate(cost, speeds, rows, cols, perm, fixed)
                res = form.solve(None, None, 0.0)
                if res.x is None:
                    assert res.status == 2  # nothing fits in memory
                    continue
                batch_sizes, dims = form.decode(res.x, cost)
                ev = cost.evaluate_sizes(rows, cols, perm, batch_sizes, dims)
                assert ev.feasible[0]
                assert form.seconds(res.fun) == pytest.approx(ev.seconds[0], rel=1e-7)
                checked += 1
    assert checked >= 16  # the rest: nothing fits the tight memory (status 2)


@pytest.mark.parametrize("seed", [0, 1])
def test_exact_equals_the_exhaustive_search(seed):
    rng = np.random.default_rng(seed)
    model = tiny_model()
    for _ in range(3):
        n = int(rng.integers(2, 5))
        cluster, batch = random_cluster(rng, n), int(rng.integers(n, 7))
        cost = CostModel(model, cluster, batch)
        milp = plan(model, cluster, batch, method="exact")
        enumerated = _plan_enumerated(cost, None, 10**7, time.perf_counter())
        assert milp.feasible == enumerated.feasible
        assert milp.predicted_step_seconds == pytest.approx(
            enumerated.predicted_step_seconds, rel=1e-6)
        assert milp.extra["gap"] is None or milp.extra["gap"] <= 2e-4


def test_a_fast_device_with_little_memory_gets_what_fits():
    model = tiny_model()
    free = ClusterSpec.from_speeds([1.0, 0.5, 0.3])
    unconstrained = plan(model, free, 6, method="exact")
    need = max(unconstrained.memory_per_device)
    fast = free.devices[0]
    small = ClusterSpec((type(fast)(fast.name, fast.device, fast.profile,
                                    int(tight(0.6 * (need - MEASURED.base_bytes)))),)
                        + free.devices[1:])
    result = plan(model, small, 6, method="exact")
    cost = CostModel(model, small, 6)
    ev = cost.evaluate_plan(result)
    assert result.feasible and ev.feasible[0]
    assert result.predicted_step_seconds > unconstrained.predicted_step_seconds
    assert ev.seconds[0] == pytest.approx(result.predicted_step_seconds, rel=1e-12)
    enumerated = _plan_enumerated(cost, None, 10**7, time.perf_counter())
    assert result.predicted_step_seconds == pytest.approx(enumerated.predicted_step_seconds,
                                                          rel=1e-6)


def test_issue_instance_is_solved_with_a_proven_gap():
    model = describe_model("vgg-cifar")
    cluster = ClusterSpec.from_speeds([1.0, 0.5, 0.3, 0.2])
    result = plan(model, cluster, 32, method="exact")
    assert result.extra["gap"] <= 2e-4
    assert result.extra["lower_bound_seconds"] <= result.predicted_step_seconds
    cost = CostModel(model, cluster, 32)
    assert cost.evaluate_plan(result).seconds[0] == result.predicted_step_seconds
    ga = plan(model, cluster, 32, method="ga", seed=0)
    assert result.predicted_step_seconds <= ga.predicted_step_seconds * (1 + 2e-4)


def test_an_unproven_result_names_the_time_limit():
    model = describe_model("vgg-cifar")
    cluster = ClusterSpec.from_speeds([1.0, 0.7, 0.4, 0.2, 1.0, 0.7])
    with pytest.raises(ExactTimeLimit, match=r"time limit of 0.001 s") as info:
        plan(model, cluster, 32, method="exact", time_limit=0.001)
    assert info.value.plan is not None and info.value.gap > 0


def test_cli_exact_reports_the_gap_and_exits_2_past_its_limit(capsys):
    argv = ["plan", "--speeds", "1.0,0.5,0.3,0.2", "--model", "vgg-cifar", "--batch", "32",
            "--method", "exact", "--all-devices"]
    assert main(argv + ["--time-limit", "120"]) == 0
    assert "proven optimum    gap" in capsys.readouterr().out
    assert main(argv + ["--speeds", "1,0.7,0.4,0.2,1,0.7", "--time-limit", "0.001"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "time limit of 0.001 s" in err


def test_a_rows_optimum_solved_in_parts_is_the_whole_programs():
    """The row program split into independent groups of dimensions has the
    optimum of the row program solved whole."""
    from meshpar.planning.planners.milp import row_optimum

    for name, speeds in (("tiny", [1.0, 0.6, 0.3]), ("resattnet3d-small", [1.0, 0.7, 0.4])):
        model = tiny_model() if name == "tiny" else describe_model(name)
        cost = CostModel(model, ClusterSpec.from_speeds(speeds), 4)
        line = np.arange(len(speeds))
        opt = row_optimum(cost, constant_speeds(cost), line)
        form = formulate(cost, constant_speeds(cost), 1, len(speeds), line, [1], memory=False)
        whole = form.seconds(form.solve(None, None, 0.0).fun) - form.offset
        assert opt.lower <= whole * (1 + 1e-7) and opt.seconds >= whole * (1 - 1e-7)
        assert opt.seconds == pytest.approx(whole, rel=1e-6)
        sizes = {cost.dim_names[d]: v for d, v in opt.dims.items()}
        ev = cost.evaluate_sizes(1, len(speeds), line, [1], sizes)
        assert ev.seconds[0] == pytest.approx(opt.seconds + opt.latency, rel=1e-7)


def test_devices_alike_in_speed_but_not_in_memory_are_not_interchangeable():
    """Three fast devices, one with little memory: which row it shares matters
    (taken as interchangeable by speed alone, the search misses the optimum)."""
    from meshpar.planning.planners.exact import _best_for_shape

    model = ModelDescription("two", (
        Layer("c1", "conv3d", 2e8, 2e5, 4000, 6 * 4000, "c1_filters", 6, "allconcat"),
        Layer("c2", "conv3d", 3e8, 3e5, 6 * 4000, 6 * 2000, "c2_filters", 6, None)),
        input_elems=4000)
    free = ClusterSpec.from_speeds([1.0, 1.0, 1.0, 0.4, 0.4, 0.4], memory_bytes=16 * 2**30)
    need = max(plan(model, free, 6, method="exact", shapes=[(2, 3)]).memory_per_device)
    fast = free.devices[0]
    cluster = ClusterSpec((type(fast)(fast.name, fast.device, fast.profile,
                                      int(tight(0.6 * (need - MEASURED.base_bytes)))),)
                          + free.devices[1:])
    result = plan(model, cluster, 6, method="exact", shapes=[(2, 3)])
    enumerated, _ = _best_for_shape(CostModel(model, cluster, 6), 2, 3)
    assert result.feasible and enumerated.feasible
    assert result.predicted_step_seconds == pytest.approx(enumerated.predicted_step_seconds,
                                                          rel=1e-6)


def test_resattnet3d_on_five_devices_of_four_kinds_is_proven():
    """The instance whose single 1x5 program HiGHS could not close in 390 s."""
    model = describe_model("resattnet3d")
    cluster = ClusterSpec.from_speeds([1.0, 0.7, 0.4, 0.2, 1.0])
    result = plan(model, cluster, 8, method="exact")
    assert result.extra["gap"] <= 2e-4
    assert CostModel(model, cluster, 8).evaluate_plan(result).seconds[0] == \
        result.predicted_step_seconds


def calibrated(cluster, model, batch, rng):
    """``cluster`` as a flat model-step profile whose even splits were measured
    10-100% slower than their predicted compute (the planner's split work)."""
    import dataclasses

    extra = {"work": "model-step", "model": model.name}
    plain = CostModel(model, dataclasses.replace(cluster, extra=extra), batch)
    n, ident = plain.n, np.arange(plain.n)
    even = [batch // n + (i < batch % n) for i in range(n)]
    dims = {d: [s // n + (i < s % n) for i in range(n)]
            for d, s in zip(plain.dim_names, plain.dim_sizes) if s >= n}
    split = {"batch_size": batch}
    split["batch"] = float(plain.evaluate_sizes(n, 1, ident, even, {}).compute_seconds[0]
                           * rng.uniform(1.1, 2.0)) if batch >= n else None
    split["model"] = float(plain.evaluate_sizes(1, n, ident, [batch], dims).compute_seconds[0]
                           * rng.uniform(1.1, 2.0))
    return dataclasses.replace(cluster, extra=dict(extra, split_seconds=split))


@pytest.mark.parametrize("seed", [2, 3])
def test_with_calibrated_split_work_the_program_and_the_search_price_it_as_the_cost_model(seed):
    """Each row pays the calibrated work at its own speed: the MILP's optimum is
    the cost model's time of its plan and equals the exhaustive search."""
    rng = np.random.default_rng(seed)
    model = tiny_model()
    paid = 0
    for _ in range(3):
        n = int(rng.integers(2, 5))
        batch = int(rng.integers(n, 7))
        cluster = calibrated(random_cluster(rng, n), model, batch, rng)
        cost = CostModel(model, cluster, batch)
        paid += cost.split_overhead["batch"] > 0
        milp = plan(model, cluster, batch, method="exact")
        assert milp.extra["solver"] != "enumeration"
        enumerated = _plan_enumerated(cost, None, 10**7, time.perf_counter())
        assert milp.feasible == enumerated.feasible
        assert milp.predicted_step_seconds == pytest.approx(
            enumerated.predicted_step_seconds, rel=1e-6)
        speeds = constant_speeds(cost)
        for rows, cols in cost.shapes():
            for perm in placements(cost.device_type, rows, cols)[:3]:
                fixed = None if rows == 1 or cols == 1 else \
                    [batch - rows + 1] + [1] * (rows - 1)
                form = formulate(cost, speeds, rows, cols, perm, fixed, memory=False)
                res = form.solve(None, None, 0.0)
                batch_sizes, dims = form.decode(res.x, cost)
                ev = cost.evaluate_sizes(rows, cols, perm, batch_sizes, dims)
                assert form.seconds(res.fun) == pytest.approx(ev.seconds[0], rel=1e-7)
    assert paid >= 2


def test_slices_slower_than_whole_layers_are_searched_exhaustively_and_change_the_pick():
    """Slice speeds make the step non-linear in the split sizes: the exact planner
    enumerates, and its pick, priced with the slices, beats the slice-blind
    optimum priced the same way."""
    import dataclasses

    model = tiny_model()
    blind = ClusterSpec.from_speeds([1.0, 0.5], bandwidth=1e12, latency=0.0)
    devices = tuple(dataclasses.replace(d, slice_efficiency=((0.25, 0.3), (0.5, 0.6)))
                    for d in blind.devices)
    priced = ClusterSpec(devices, bandwidth=1e12, latency=0.0)
    cost = CostModel(model, priced, 2)
    assert constant_speeds(cost) is None and constant_speeds(CostModel(model, blind, 2)) is not None
    aware = plan(model, priced, 2, method="exact")
    naive = plan(model, blind, 2, method="exact")
    assert aware.extra["solver"] == "enumeration" and naive.extra["solver"] != "enumeration"
    naive_priced = cost.evaluate_plan(naive).seconds[0]
    assert aware.predicted_step_seconds == pytest.approx(cost.evaluate_plan(aware).seconds[0])
    assert aware.predicted_step_seconds < naive_priced * 0.99
