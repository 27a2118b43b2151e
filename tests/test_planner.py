import subprocess
import sys

import numpy as np
import pytest

from meshpar.planning.cluster import ClusterSpec, DeviceSpec
from meshpar.planning.cost_model import CostModel
from meshpar.planning.description import Layer, ModelDescription
from meshpar.models import describe_model
from meshpar.planning.plan import Plan
from meshpar.planning.planners import METHODS, plan


def two_conv_model(f1=12, f2=10):
    return ModelDescription("tiny", (
        Layer("c1", "conv3d", 2e8, 2000, 4000, f1 * 4000, "c1_filters", f1, "allconcat"),
        Layer("c2", "conv3d", 3e8, 3000, f1 * 4000, f2 * 2000, "c2_filters", f2, "allconcat"),
        Layer("fc", "dense", 1e6, 500, f2 * 2000, 10)), input_elems=4000)


def size_dependent_cluster(speeds, seed):
    """Devices that run small kernels slower (speed a function of size)."""
    rng = np.random.default_rng(seed)
    devices = tuple(
        DeviceSpec(f"d{i}", f"/job:worker/task:{i}/device:CPU:0",
                   ((1e7, s * 2e10 * rng.uniform(0.3, 0.7)), (1e9, s * 5e10)), 2**33)
        for i, s in enumerate(speeds))
    return ClusterSpec(devices, bandwidth=2e9, latency=5e-5)


SMALL_CASES = [(0, [1.0, 0.6, 0.3, 0.25], 6), (2, [1.0, 0.7, 0.5, 0.2], 4),
               (3, [1.0, 1.0, 0.2, 0.2], 8)]


def test_design_example_proportional_split_is_28_18_11_7():
    model = ModelDescription("one", (Layer("c", "conv3d", 1e9, 100, 1000, 64000,
                                           "conv_filters", 64, "allconcat"),))
    cluster = ClusterSpec.from_speeds([0.8, 0.5, 0.3, 0.2])
    result = plan(model, cluster, 1, method="proportional", shapes=[(1, 4)])
    assert result.split_sizes["conv_filters"] == [28, 18, 11, 7]


def test_every_planner_returns_a_plan_with_the_same_fields():
    model = two_conv_model()
    cluster = ClusterSpec.from_speeds([1.0, 0.5, 0.3])
    plans = [plan(model, cluster, 6, method=m, **({"generations": 20} if m == "ga" else {}))
             for m in METHODS]
    for p in plans:
        assert isinstance(p, Plan) and p.feasible and p.predicted_step_seconds > 0
        assert p.lower_bound_seconds <= p.predicted_step_seconds
    assert [p.method for p in plans] == list(METHODS)


@pytest.mark.parametrize("case_seed,speeds,batch", SMALL_CASES)
def test_ga_is_within_one_percent_of_exact_on_small_cases(case_seed, speeds, batch):
    model, cluster = two_conv_model(), size_dependent_cluster(speeds, case_seed)
    exact = plan(model, cluster, batch, method="exact")
    ga = plan(model, cluster, batch, method="ga", seed=0)
    assert ga.predicted_step_seconds <= 1.01 * exact.predicted_step_seconds
    assert exact.predicted_step_seconds <= ga.predicted_step_seconds * (1 + 1e-9)


@pytest.mark.parametrize("seed,speeds,batch", [(0, [1.0, 0.6, 0.3], 6),
                                                (1, [1.0, 0.7, 0.5, 0.2], 5),
                                                (2, [1.0, 1.0, 0.2, 0.2], 8)])
def test_ga_search_alone_reaches_the_optimum_from_a_random_start(seed, speeds, batch):
    """No proportional seed and no fallback: the GA's own operators find the plan
    the exact planner proves optimal (constant speeds: the MILP)."""
    model, cluster = two_conv_model(), ClusterSpec.from_speeds(speeds, bandwidth=2e9,
                                                               latency=5e-5)
    exact = plan(model, cluster, batch, method="exact")
    ga = plan(model, cluster, batch, method="ga", seed=seed, init="random", generations=120)
    assert ga.extra["init"] == "random"
    assert ga.predicted_step_seconds <= exact.predicted_step_seconds * (1 + 1e-9)


def test_ga_finds_the_placement_that_pairs_unlike_devices():
    """resattnet3d-small on 8 devices of 3 kinds: the optimum (MILP) pairs a fast
    and a middling device in each of three rows; the GA's lattice search alone
    stayed 11.6% above it on the speed-sorted rows, its placement search
    reaches it."""
    model = describe_model("resattnet3d-small")
    cluster = ClusterSpec.from_speeds([1.0, 0.6, 0.25, 1.0, 0.6, 0.25, 1.0, 0.6])
    exact = plan(model, cluster, 16, method="exact")
    ga = plan(model, cluster, 16, method="ga", seed=0)
    assert ga.predicted_step_seconds <= 1.01 * exact.predicted_step_seconds


def test_ga_is_reproducible_with_a_seed():
    model = describe_model("vgg-cifar-small")
    cluster = ClusterSpec.from_speeds([1.0, 0.7, 0.5, 0.5, 0.3, 0.2])
    a = plan(model, cluster, 16, method="ga", seed=7, generations=30)
    b = plan(model, cluster, 16, method="ga", seed=7, generations=30)
    assert a.to_dict() | {"planning_seconds": 0} == b.to_dict() | {"planning_seconds": 0}
    assert len(a.history) == 31 and a.history[-1] <= a.history[0]


def test_exact_refuses_what_it_cannot_search():
    big = ClusterSpec.from_speeds([1.0] * 9)
    with pytest.raises(ValueError, match="at most 8 devices"):
        plan(describe_model("vgg-cifar"), big, 8, method="exact")
    # speeds that depend on the work size are searched exhaustively, small spaces only
    with pytest.raises(ValueError, match="depend on the work size.*enumeration limit"):
        plan(describe_model("vgg-cifar"), size_dependent_cluster([1.0, 0.5, 0.3], 0), 32,
             method="exact")


def test_unknown_method_is_a_value_error():
    with pytest.raises(ValueError, match="unknown planning method"):
        plan(two_conv_model(), ClusterSpec.from_speeds([1.0]), 2, method="magic")


def test_ga_plan_json_round_trip(tmp_path):
    result = plan(two_conv_model(), ClusterSpec.from_speeds([1.0, 0.4]), 4, method="ga",
                  generations=10)
    path = tmp_path / "plan.json"
    result.save(path)
    assert Plan.load(path) == result


def test_planning_imports_no_tensorflow():
    code = ("import sys; from meshpar.cli import main; "
            "rc = main(['plan', '--speeds', '1,0.5', '--model', 'resattnet3d-small', "
            "'--generations', '3', '--json']); "
            "assert rc == 0 and 'tensorflow' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_ga_on_256_devices_gives_a_plan_the_cost_model_agrees_with():
    model = describe_model("resattnet3d-small")
    cluster = ClusterSpec.from_speeds([1.0, 0.5, 0.3, 0.2] * 64)
    ga = plan(model, cluster, 256, method="ga", generations=20, population=16)
    ev = CostModel(model, cluster, 256).evaluate_plan(ga)
    assert ga.feasible and ev.seconds[0] == ga.predicted_step_seconds
    assert ga.lower_bound_seconds <= ga.predicted_step_seconds
    assert sorted(ga.devices) == sorted(cluster.device_strings)


def test_ga_init_must_be_known():
    with pytest.raises(ValueError, match="init must be"):
        plan(two_conv_model(), ClusterSpec.from_speeds([1.0, 0.5]), 4, method="ga",
             init="warm")


def test_an_option_the_planner_does_not_take_is_refused():
    model = describe_model("vgg-cifar-small")
    cluster = ClusterSpec.from_speeds([1.0, 0.5])
    with pytest.raises(ValueError, match="'proportional' takes no option.*generations"):
        plan(model, cluster, 4, method="proportional", generations=5)
    with pytest.raises(ValueError, match="'ga' takes no option.*populaton"):
        plan(model, cluster, 4, method="ga", populaton=8)


def test_with_subsets_a_device_that_only_slows_the_step_is_left_idle():
    from dataclasses import replace

    model = describe_model("vgg-cifar-small")
    # A device 100x slower behind a 1 s link: any split costs more than it saves.
    cluster = replace(ClusterSpec.from_speeds([1.0, 0.01]), latency=1.0)
    everyone = plan(model, cluster, 4, method="proportional")
    best = plan(model, cluster, 4, method="proportional", subsets=True)
    assert len(everyone.devices) == 2
    assert best.devices == ("/job:worker/task:0/device:CPU:0",)
    assert best.predicted_step_seconds < everyone.predicted_step_seconds
    # and where every device pays (a real network on near-equal devices), nothing changes
    big, fair = describe_model("vgg-cifar"), ClusterSpec.from_speeds([1.0, 0.9])
    assert len(plan(big, fair, 8, method="proportional", subsets=True).devices) == 2


def _contended(alone):
    """Two workers whose all-at-once profile says 1.0 and 1.1 (x 1e11 FLOP/s, at
    three work sizes) and whose profiles alone say ``alone`` (within 1%), behind a
    1 s link (no split pays)."""
    sizes = (1e6, 1e9, 1e12)
    devices = tuple(DeviceSpec(f"w{i}", f"/job:worker/task:{i}/device:CPU:0",
                               tuple((x, s * 1e11) for x in sizes))
                    for i, s in enumerate([1.0, 1.1]))
    table = {d.device: [[x, a * 1e11 * f] for x, f in zip(sizes, (0.99, 1.0, 1.01))]
             for d, a in zip(devices, alone)}
    return ClusterSpec(devices, latency=1.0, extra={"alone_profile": table})


def test_a_plan_on_one_device_takes_the_device_fastest_alone():
    # Three workers on two cores, say: all at once the second looks faster,
    # alone the first is three times faster. Priced all at once (ClusterSpec.subset).
    model = describe_model("vgg-cifar-small")
    best = plan(model, _contended([3.0, 1.2]), 4, method="proportional", subsets=True)
    assert best.devices == ("/job:worker/task:0/device:CPU:0",)
    work = 3.0 * model.flops * 4
    assert best.predicted_step_seconds == pytest.approx(work / 1e11, rel=0.03)
    # the same speeds all at once as alone: the second, at 1.1
    same = plan(model, _contended([1.0, 1.1]), 4, method="proportional", subsets=True)
    assert same.devices == ("/job:worker/task:1/device:CPU:0",)
    assert same.predicted_step_seconds == pytest.approx(work / 1.1e11, rel=0.03)



def _polished(model, cluster, batch, rows, cols, even=False, pairs=True):
    """The GA's local search alone on the placement ``arange(n)`` of ``rows x
    cols``, from its proportional split (or the even one): predicted seconds."""
    from meshpar.planning.planners import ga

    problem = ga._Problem(CostModel(model, cluster, batch), [(rows, cols)], per_layer=True)
    perm = np.arange(rows * cols)
    bw, mw = problem.proportional_genes(perm, rows, cols)
    if even:
        bw, mw = np.zeros_like(bw), np.zeros_like(mw)
    pop = ga._Population(np.zeros(1, np.int64), perm[None], bw[None], mw[None],
                         np.ones((1, problem.D), bool))
    return problem.polish(pop, 0, pairs=pairs)[1]


def test_local_search_shifts_work_off_columns_that_finish_last_together():
    """One split layer, three slow devices and a fast one, an even start: moving
    a filter between two slow columns or to the fast one leaves the slowest
    time as it is; the gather move (one from each) gets to the optimum."""
    model = ModelDescription("one", (Layer("c", "conv3d", 1e9, 100, 1000, 64000,
                                           "conv_filters", 64, "allconcat"),))
    cluster = ClusterSpec.from_speeds([0.4, 0.4, 0.4, 1.0])
    exact = plan(model, cluster, 1, method="exact", shapes=[(1, 4)])
    seconds = _polished(model, cluster, 1, 1, 4, even=True, pairs=False)
    assert seconds <= exact.predicted_step_seconds * (1 + 1e-9)


def test_local_search_moves_a_sample_and_re_splits_every_dimension_with_it():
    """Rows [1, 1, 1, .25] and [.6, .6, .6, .25] (resattnet3d, 8 samples): the
    proportional start gives both rows 4 (the slow column limits both); no
    single move helps. The optimum moves a sample to the fast row and, with
    it, all 21 dimensions off the slow column. Judged against the least time
    any batch split can have (each row at its own optimum per sample)."""
    from meshpar.planning.planners.milp import constant_speeds, row_optimum

    model = describe_model("resattnet3d")
    cluster = ClusterSpec.from_speeds([1.0, 1.0, 1.0, 0.25, 0.6, 0.6, 0.6, 0.25])
    cost = CostModel(model, cluster, 8)
    fast, slow = (row_optimum(cost, constant_speeds(cost), line)
                  for line in (range(4), range(4, 8)))
    bound = min(max(b * fast.lower, (8 - b) * slow.lower) for b in range(1, 8)) + fast.latency
    assert _polished(model, cluster, 8, 2, 4) <= bound * (1 + 1e-3)


@pytest.mark.parametrize("method", ["ga", "exact"])
def test_listing_the_devices_in_another_order_gives_the_same_plan_on_them(method):
    """The plan is a property of the devices, not of the order they are listed in:
    every order of three uneven devices gets the same predicted step and gives
    each device (known by its speed) the same share of the batch."""
    import itertools

    description = describe_model("resattnet3d-small")
    speeds = [1.0, 0.6, 0.3]
    seen = []
    for order in itertools.permutations(range(3)):
        listed = [speeds[i] for i in order]
        p = plan(description, ClusterSpec.from_speeds(listed), 32, method=method, seed=0,
                 subsets=True)
        speed_of = {f"/job:worker/task:{t}/device:CPU:0": s for t, s in enumerate(listed)}
        share = dict(zip((speed_of[d] for d in p.devices), p.split_sizes["batch"]))
        seen.append((p.predicted_step_seconds, p.mesh_shape_string(), share))
    first = seen[0]
    for got in seen[1:]:
        assert got[0] == pytest.approx(first[0], rel=1e-9)
        assert got[1:] == first[1:]


@pytest.mark.parametrize("method", ["even", "proportional"])
def test_the_baselines_do_not_depend_on_the_listing_order_either(method):
    """3 samples over two rows of a 4-device mesh: the row with the extra sample
    holds the fastest devices in every order (the even split used to give it to
    the first-listed row, and then lost to a subset when the slow ones came
    first)."""
    description = describe_model("vgg-cifar")
    speeds = [0.8, 0.5, 0.3, 0.2]
    seen = []
    for order in ([0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]):
        listed = [speeds[i] for i in order]
        p = plan(description, ClusterSpec.from_speeds(listed), 3, method=method, seed=0)
        speed_of = {f"/job:worker/task:{t}/device:CPU:0": s for t, s in enumerate(listed)}
        cols = dict(p.mesh_shape).get("model", 1)
        rows = [sorted((speed_of[d] for d in p.devices[r * cols:(r + 1) * cols]), reverse=True)
                for r in range(len(p.devices) // cols)]
        seen.append((p.predicted_step_seconds, p.mesh_shape_string(),
                     sorted(zip(p.split_sizes["batch"], rows), reverse=True)))
    for got in seen[1:]:
        assert got[0] == pytest.approx(seen[0][0], rel=1e-9)
        assert got[1:] == seen[0][1:]
    assert 0.8 in seen[0][2][0][1]  # the largest share's row has the fastest device


def test_a_measured_profile_listed_in_reverse_gives_the_same_plan():
    """The same with a measured whole-step profile (size scan, slice speeds and the
    calibrated split timings, whose speed weights follow the devices' order)."""
    import copy
    import json
    import pathlib

    stored = pathlib.Path(__file__).resolve().parents[1] / (
        "benchmarks/results/train-0.9-0.3-batch32-verify2/train.json")
    measured = json.loads(stored.read_text())["profiles"]["resattnet3d-small"]
    reverse = copy.deepcopy(measured)
    reverse["devices"].reverse()
    reverse["extra"]["split_seconds"]["balanced"]["weights"].reverse()
    description = describe_model("resattnet3d-small")
    a, b = (plan(description, ClusterSpec.from_dict(p), 32, method="ga", seed=0, subsets=True)
            for p in (measured, reverse))
    assert b.predicted_step_seconds == pytest.approx(a.predicted_step_seconds, rel=1e-9)
    assert (b.devices, b.split_sizes) == (a.devices, a.split_sizes)
