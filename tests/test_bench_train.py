"""Remote profiling of real workers, and the whole-network benchmark end to end through
`meshpar train --cluster` (tiny model, few steps: structure, not speed)."""
import json
import math
from types import SimpleNamespace

import pytest

from meshpar.bench import train as bench_train
from meshpar.cli import main
from meshpar.planning.cluster import ClusterSpec
from meshpar.runtime.local_cluster import LocalCluster
from meshpar.runtime.profiling import profile_cluster_workers


def test_remote_profile_names_the_worker_tasks_and_measures_them(tmp_path):
    with LocalCluster([1.0, 1.0], throttle="none") as cluster:
        profile = profile_cluster_workers(cluster.addresses, sizes=[(1, 4, 2, 4), (1, 8, 4, 4)],
                                          repeats=1, transfer_bytes=4096)
    assert [d.device for d in profile.devices] == ["/job:worker/task:0/device:CPU:0",
                                                   "/job:worker/task:1/device:CPU:0"]
    for d in profile.devices:
        assert len(d.profile) == 2 and all(speed > 0 for _, speed in d.profile)
        assert len(profile.extra["alone_profile"][d.device]) == 2
    assert profile.bandwidth > 0 and profile.latency > 0
    path = tmp_path / "profile.json"
    profile.save(path)
    assert ClusterSpec.load(path).devices == profile.devices  # the planner reads it back


def test_strategy_plans_are_the_named_splits_with_predictions():
    profile = ClusterSpec.from_speeds([0.9, 0.3])
    plans = bench_train.strategy_plans("vgg-cifar-small", profile, 4, standalone=[3.0, 1.0])
    assert plans["mtf-even-filter"][1] and plans["mtf-even-batch"][1]  # Mesh-TF's own impl
    assert plans["mtf-even-filter"][0].split_sizes["conv1_filters"] == [3, 3]
    assert plans["proportional-filter"][0].split_sizes["conv1_filters"] == [5, 1]  # 4.5/1.5: tie to 0
    assert plans["proportional-batch"][0].split_sizes["batch"] == [3, 1]
    assert plans["mtf-even-batch"][0].mesh_shape_string() == "batch:2;model:1"
    assert all(p.predicted_step_seconds > 0 for p, _ in plans.values())
    alone = bench_train.alone_plan("vgg-cifar-small", profile, 4, task=1)
    assert alone.devices == ("/job:worker/task:1/device:CPU:0",)


def test_whole_network_benchmark_runs_every_strategy_and_writes_json_and_png(tmp_path,
                                                                           monkeypatch):
    from meshpar.runtime import profiling

    # two unthrottled workers run at about one speed: time the split by speed anyway
    monkeypatch.setattr(profiling, "BALANCED_MIN_RATIO", 1.0)
    # 80 steps: the steady window must span several of /proc's 10 ms CPU ticks (8 steps
    # of batch 4 gave a 33 ms window on a fast host, where the working worker read 0.0)
    result = bench_train.run_benchmark(["vgg-cifar-small"], [1.0, 1.0], steps=80, batch=16,
                                       throttle="none", profile_repeats=1, log=lambda *a: None)
    assert result["profile_repeats"] == 1
    _check_model_step_profile(ClusterSpec.from_dict(result["profiles"]["vgg-cifar-small"]),
                              "vgg-cifar-small", batch=16)
    (model,) = result["models"]
    rows = model["strategies"]
    assert set(rows) == {"alone-0", "alone-1", "mtf-even-filter", "mtf-even-batch",
                         "proportional-batch", "proportional-filter", "planner"}
    assert model["ideal_samples_per_second"] == pytest.approx(
        rows["alone-0"]["samples_per_second"] + rows["alone-1"]["samples_per_second"])
    for name, r in rows.items():
        assert r["samples_per_second"] > 0, name
        assert r["of_ideal"] == pytest.approx(r["samples_per_second"]
                                              / model["ideal_samples_per_second"])
        assert {"worker:0", "worker:1"} & set(r["step_breakdown"]), name
        # the workers' CPU time over the steady steps, per worker, from the kernel
        assert len(r["worker_share_used"]) == 2 and min(r["worker_share_used"]) >= 0, name
    # a worker alone does the work; the other one only answers the client (a few
    # 10 ms clock ticks over a short window: compared, not sized)
    for task in (0, 1):
        used = rows[f"alone-{task}"]["worker_share_used"]
        assert used[task] > used[1 - task], used
    assert rows["mtf-even-filter"]["vs_mtf_even_filter"] == pytest.approx(1.0)
    # every worker alone, all at once: its own block, not a row; its sum is the busy
    # host's ideal, and each row is also given against it
    busy = model["together"]
    assert "alone-together" not in rows and len(busy["per_worker"]) == 2
    assert busy["samples_per_second"] == pytest.approx(sum(busy["per_worker"]))
    assert busy["of_ideal"] == pytest.approx(busy["samples_per_second"]
                                             / model["ideal_samples_per_second"])
    assert all(0.0 <= o <= 1.0 for o in busy["overlap"]) and len(busy["steps"]) == 2
    assert len(busy["worker_share_used"]) == 2
    for name, r in rows.items():
        assert r["of_ideal_together"] == pytest.approx(r["samples_per_second"]
                                                       / busy["samples_per_second"]), name
    assert rows["alone-1"]["plan_devices"] == ["/job:worker/task:1/device:CPU:0"]
    # A row that is the same plan as an earlier row says so, and only then. (The
    # proportional batch split follows the alone rates measured in this run, so
    # on unthrottled workers it is the even split only when the two rates came
    # out within 5:3 of each other; test_strategy_plans_are_the_named_splits_with_predictions
    # checks the splits for fixed rates.)
    prop, even = rows["proportional-batch"], rows["mtf-even-batch"]
    same = all(prop[k] == even[k] for k in ("mesh", "plan_devices", "split_sizes"))
    assert prop.get("same_as") == ("mtf-even-batch" if same else None)
    paths = bench_train.save(result, str(tmp_path))
    assert json.loads(open(paths[0]).read())["models"][0]["model"] == "vgg-cifar-small"
    assert open(paths[1], "rb").read(4) == b"\x89PNG"
    table = bench_train.format_table(result)
    assert "ideal" in table and "used w0 " in table and "all at once" in table


def _check_model_step_profile(profile, model, batch):
    """The benchmark's `meshpar profile --cluster --model` part: whole training steps
    per batch size, slice speeds, the even and speed-weighted splits timed."""
    from meshpar.models import describe_model
    from meshpar.planning.cost_model import CostModel
    from meshpar.runtime.profiling import model_batch_sizes

    step_flops = 3.0 * describe_model(model).flops
    assert profile.extra["work"] == "model-step" and profile.extra["model"] == model
    for d in profile.devices:
        assert [w for w, _ in d.profile] == pytest.approx(
            [b * step_flops for b in model_batch_sizes(batch)])
        # the model split 4 and 2 ways on the worker alone: a speed relative to the whole step
        assert [f for f, _ in d.slice_efficiency] == pytest.approx([0.25, 0.5])
        assert all(0 < e < 5 for _, e in d.slice_efficiency)
    # the splits weighted by the measured speeds: the weights are the profile's own
    # speeds at the batch, both axes timed; the cost model fits its jitter to them
    split = profile.extra["split_seconds"]
    assert split["batch"] > 0 and split["model"] > 0 and split["batch_size"] == batch
    # timed in turns with the size scan (whose speeds are those rounds'): no drift factor
    assert "host_drift" not in split
    # how far apart each timed split's runs fell (interquartile range over the median)
    assert set(split["spread"]) == {"even", "balanced", "checked"}
    assert all(0 <= split["spread"][k][axis] < 5 for k in ("even", "balanced", "checked")
               for axis in ("batch", "model"))
    # the split of each axis the cost model fitted to those predicted fastest, over
    # all the workers, timed with them
    from meshpar.planning.plan import Plan
    for axis, checked in split["checked"].items():
        picked = Plan.from_dict(checked["plan"])
        assert dict(picked.mesh_shape).get(axis) == len(profile.devices) == len(picked.devices)
        assert picked.batch == batch and checked["seconds"] > 0
    assert set(split["checked"]) == {"batch", "model"}
    balanced = split["balanced"]
    assert len(balanced["weights"]) == len(profile.devices) and min(balanced["weights"]) > 0
    assert balanced["batch"] > 0 and balanced["model"] > 0
    jitter = CostModel(describe_model(model), profile, 2).sync_jitter
    assert all(0.0 <= jitter[axis] <= 2.0 for axis in ("batch", "model"))


def test_bench_train_refuses_an_unknown_model_in_one_line(capsys):
    assert main(["bench", "train", "--models", "vgg-cifar,nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown model 'nope'" in err[0]


def test_model_step_profile_sizes_and_slice_counts():
    from meshpar.models import describe_model
    from meshpar.runtime.profiling import model_batch_sizes, slice_counts

    assert model_batch_sizes(8) == [1, 2, 4, 8] and model_batch_sizes(6) == [1, 2, 4, 6]
    assert slice_counts(describe_model("vgg-cifar-small")) == [2, 4]
    # a model whose smallest split dim is 3 can be split 2 ways only; none without dims
    assert slice_counts(SimpleNamespace(split_dims={"a": 3, "b": 64})) == [2]
    assert slice_counts(SimpleNamespace(split_dims={})) == []


def test_rounds_interleave_the_strategies_and_keep_the_median_run(monkeypatch):
    """Every strategy runs once per round, round after round; a row is its median
    run (the lower middle of an even count) with every run's rate; a strategy
    that cannot run is skipped once, not retried."""
    calls, rates = [], {"a": [3.0, 9.0, 5.0], "b": [7.0, 1.0, 4.0]}

    def fake_run(model, plan, cluster_file, work, name, steps, batch, upstream=False,
                 seed=0, log=print, run=0, cluster=None):
        calls.append((name, run))
        assert cluster == "local cluster"  # passed on: its workers' CPU time is read
        if name == "c":
            raise RuntimeError("Mesh-TF cannot express it")
        return {"samples_per_second": rates[name][run], "run": run}

    monkeypatch.setattr(bench_train, "run_strategy", fake_run)
    runs = {}
    plans = {name: (None, False) for name in "abc"}
    bench_train._run_rounds("m", plans, ["a", "b", "c"], runs, 3, "f", "w", 8, 4, 0,
                            log=lambda *a: None, local_cluster="local cluster")
    assert calls == [("a", 0), ("b", 0), ("c", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2)]
    assert runs["c"] == {"skipped": "Mesh-TF cannot express it"}
    a = bench_train._median_run(runs["a"])
    assert a["samples_per_second"] == 5.0 and a["run"] == 2
    assert a["samples_per_second_runs"] == [3.0, 9.0, 5.0] and a["runs"] == 3
    assert a["samples_per_second_min_max"] == [3.0, 9.0]
    assert bench_train._median_run(runs["b"][:2])["samples_per_second"] == 1.0  # lower middle
    # a later call (the alone rows run their first round before the plans are made)
    # only adds the runs a strategy lacks
    calls.clear()
    rates["a"].append(6.0)
    rates["b"].append(2.0)
    bench_train._run_rounds("m", plans, ["a", "b", "c"], runs, 4, "f", "w", 8, 4, 0,
                            log=lambda *a: None, local_cluster="local cluster")
    assert calls == [("a", 3), ("b", 3)]


def test_bench_train_refuses_zero_rounds_in_one_line(capsys):
    assert main(["bench", "train", "--rounds", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--rounds" in err[0]
    assert main(["bench", "train", "--profile-repeats", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--profile-repeats" in err[0]


def _step_profile(model, ms_by_worker, sizes=(1, 2, 4, 8)):
    """A model-step ClusterSpec whose workers' standalone steps take ``ms`` at ``sizes``."""
    from meshpar.models import describe_model
    from meshpar.planning.cluster import DeviceSpec

    flops = 3.0 * describe_model(model).flops
    points = {f"/job:worker/task:{i}/device:CPU:0": [[b * flops, b * flops / (t / 1e3)]
                                                     for b, t in zip(sizes, ms)]
              for i, ms in enumerate(ms_by_worker)}
    devices = tuple(DeviceSpec(f"w{i}", d, tuple(map(tuple, p)))
                    for i, (d, p) in enumerate(points.items()))
    return ClusterSpec(devices, extra={"work": "model-step", "alone_profile": points})


def test_batch_split_bound_is_the_best_integer_split_of_the_standalone_steps():
    """Fast worker 12/20/38/67 ms for 1/2/4/8 samples, slow 40/63/140/215: the
    split 7/1 is best (max(fast at 7, slow at 1) = max(~60, 40) ms); 6/2 is
    worse (slow at 2 = 63 ms). Against the ideal 8/67 + 8/215 samples/ms."""
    profile = _step_profile("resattnet3d-small", [[12, 20, 38, 67], [40, 63, 140, 215]])
    bound = bench_train.batch_split_bound(profile, "resattnet3d-small", 8)
    assert bound["sizes"] == [7, 1]
    # the fast worker's speed at 7 samples, log-log between its 4- and 8-sample points
    w = math.log(7 / 4) / math.log(2)
    per_sample = math.exp((1 - w) * math.log(4 / 0.038) + w * math.log(8 / 0.067))
    assert bound["step_seconds"] == pytest.approx(7 / per_sample)  # ~0.060 s > slow's 0.040
    ideal = 8 / 0.067 + 8 / 0.215
    assert bound["ideal_samples_per_second"] == pytest.approx(ideal)
    assert bound["of_ideal"] == pytest.approx(8 / bound["step_seconds"] / ideal)
    assert bound["of_ideal"] < 0.9  # fixed per-step costs: short of the ideal before any sync
    # equal workers whose step has no fixed part split evenly and reach the ideal
    linear = _step_profile("resattnet3d-small", [[10, 20, 40, 80], [10, 20, 40, 80]])
    even = bench_train.batch_split_bound(linear, "resattnet3d-small", 8)
    assert even["sizes"] == [4, 4] and even["of_ideal"] == pytest.approx(1.0)
    # a worker too slow to help is left idle
    lopsided = _step_profile("resattnet3d-small", [[10, 20, 40, 80], [300, 600, 1200, 2400]])
    assert bench_train.batch_split_bound(lopsided, "resattnet3d-small", 8)["sizes"] == [8, 0]
    assert bench_train.batch_split_bound(ClusterSpec.from_speeds([1, 1]), "vgg-cifar", 8) is None


def test_a_memory_budget_marks_the_rows_over_it_and_the_planner_fits_it(monkeypatch):
    """vgg-cifar at batch 8 is counted 178 MiB on one device; under a 160 MiB
    budget per worker (120 MiB a plan may count on, the rest the count's
    headroom) the alone and batch-split rows are marked over it, the
    planner's plan fits it; under 20 MiB no plan fits and the planner's row is
    not run."""
    ran = []

    def fake_run(model, plan, cluster_file, work, name, steps, batch, upstream=False,
                 seed=0, log=print, run=0, cluster=None):
        ran.append(name)
        return {"samples_per_second": 10.0, "step_seconds_median": batch / 10.0,
                "samples_per_second_p25_p75": [9.0, 11.0], "trace_step_seconds": 0.8}

    monkeypatch.setattr(bench_train, "run_strategy", fake_run)
    profile = ClusterSpec.from_speeds([0.9, 0.3]).with_memory([160 * 2**20])
    rows = bench_train.bench_model("vgg-cifar", profile, "f", "w", 8, 8, 0,
                                   log=lambda *a: None, run_together=False)["strategies"]
    assert not rows["alone-0"]["fits_memory"] and not rows["proportional-batch"]["fits_memory"]
    assert rows["mtf-even-filter"]["fits_memory"]  # 108 MiB each
    assert rows["planner"]["fits_memory"]
    assert max(rows["planner"]["predicted_memory_bytes"]) <= 120 * 2**20
    assert max(rows["alone-0"]["predicted_memory_bytes"]) > 120 * 2**20
    table = bench_train.format_table({"models": [{
        "model": "vgg-cifar", "batch": 8, "ideal_samples_per_second": 20.0,
        "standalone_samples_per_second": [10.0, 10.0], "strategies": rows}],
        "memory_budget_bytes": [160 * 2**20]})
    assert "memory budget per worker (emulated): 160.0 MiB" in table
    over = [line.split()[0] for line in table.splitlines() if "OVER THE MEMORY BUDGET" in line]
    assert "alone-0" in over and "planner" not in over and "mtf-even-filter" not in over
    ran.clear()
    tight = ClusterSpec.from_speeds([0.9, 0.3]).with_memory([20 * 2**20])
    rows = bench_train.bench_model("vgg-cifar", tight, "f", "w", 8, 8, 0,
                                   log=lambda *a: None, run_together=False)["strategies"]
    assert rows["planner"]["skipped"] == "no plan fits the memory budget"
    assert "planner" not in ran and "alone-0" in ran


def test_a_lower_memory_headroom_lets_every_row_count_on_more_of_the_budget(monkeypatch):
    """Under 140 MiB the default headroom leaves 105 MiB: Mesh-TF's even filter
    split (108 MiB) is marked over it and no planner plan fits; with
    ``memory_terms`` of headroom 0 both count on the whole 140 MiB."""
    import dataclasses

    from meshpar.planning.memory import MEASURED

    monkeypatch.setattr(bench_train, "run_strategy", lambda *a, **k: {
        "samples_per_second": 10.0, "step_seconds_median": 0.8,
        "samples_per_second_p25_p75": [9.0, 11.0], "trace_step_seconds": 0.8})
    profile = ClusterSpec.from_speeds([0.9, 0.3]).with_memory([140 * 2**20])
    rows = bench_train.bench_model("vgg-cifar", profile, "f", "w", 8, 8, 0,
                                   log=lambda *a: None, run_together=False)["strategies"]
    assert not rows["mtf-even-filter"]["fits_memory"]
    assert rows["planner"]["skipped"] == "no plan fits the memory budget"
    full = dataclasses.replace(MEASURED, headroom=0.0)
    rows = bench_train.bench_model("vgg-cifar", profile, "f", "w", 8, 8, 0, log=lambda *a: None,
                                   memory_terms=full, run_together=False)["strategies"]
    assert rows["mtf-even-filter"]["fits_memory"] and rows["planner"]["fits_memory"]
    assert 105 * 2**20 < max(rows["planner"]["predicted_memory_bytes"]) <= 140 * 2**20


def test_enforced_runs_start_on_fresh_workers_and_name_the_worker_out_of_memory(monkeypatch):
    """With an enforced budget every run starts on renewed workers: each worker
    alone without the budget, every split under it; a run that fails because
    the kernel killed a worker becomes a row saying which, and ends that
    strategy's runs; a plan that ran before it ran out keeps those runs' rates
    and says in which run it ran out; the others run every round."""
    renewals, killed, runs_of = [], [], {}

    class Cluster:
        def renew_workers(self, memory_bytes):
            renewals.append(memory_bytes)
            killed.clear()

        def workers_out_of_memory(self):
            return list(killed)

    def fake_run(model, plan, cluster_file, work, name, steps, batch, upstream=False,
                 seed=0, log=print, run=0, cluster=None):
        runs_of[name] = runs_of.get(name, 0) + 1
        if name == "proportional-batch" or (name == "proportional-filter" and run == 1):
            killed.append(0)  # the fast worker outgrows the budget
            raise RuntimeError("meshpar train failed: worker 0 stopped answering")
        if name == "mtf-even-batch":
            raise RuntimeError("meshpar train failed: some other reason")
        return {"samples_per_second": 10.0, "step_seconds_median": batch / 10.0,
                "samples_per_second_p25_p75": [9.0, 11.0], "trace_step_seconds": 0.8}

    monkeypatch.setattr(bench_train, "run_strategy", fake_run)
    budget = [150 * 2**20, 150 * 2**20]
    enforced = bench_train.EnforcedMemory(Cluster(), budget)
    profile = ClusterSpec.from_speeds([0.9, 0.3]).with_memory(budget)
    rows = bench_train.bench_model("vgg-cifar-pairs", profile, "f", "w", 8, 8, 0,
                                   log=lambda *a: None, enforced=enforced,
                                   rounds=3, run_together=False)["strategies"]
    assert runs_of == {"alone-0": 3, "alone-1": 3, "mtf-even-filter": 3, "mtf-even-batch": 1,
                       "proportional-batch": 1, "proportional-filter": 2, "planner": 3}
    assert renewals.count(None) == 6 and renewals.count(budget) == 10  # one per run
    assert renewals[:2] == [None, None]  # the two workers alone, before any split
    assert rows["proportional-batch"]["out_of_memory"] == [0]
    assert rows["proportional-batch"]["skipped"] == "out of memory: worker 0 went over its " \
                                                    "150.0 MiB"
    assert "out_of_memory" not in rows["mtf-even-batch"]
    assert "some other reason" in rows["mtf-even-batch"]["skipped"]
    assert rows["planner"]["samples_per_second"] == 10.0 and rows["planner"]["runs"] == 3
    split = rows["proportional-filter"]
    assert split["runs"] == 1 and split["out_of_memory"] == [0]
    assert split["out_of_memory_in_run"] == 2
    table = bench_train.format_table({"models": [{
        "model": "vgg-cifar-pairs", "batch": 8, "ideal_samples_per_second": 20.0,
        "standalone_samples_per_second": [10.0, 10.0], "strategies": rows}],
        "memory_budget_bytes": budget, "memory_headroom": 0.25, "enforced": True})
    assert "OUT OF MEMORY in run 2: worker 0 went over its 150.0 MiB" in table
    assert "enforced: every split ran on fresh workers under it" in table


@pytest.mark.parametrize("argv,message", [
    (["--enforce"], "--enforce needs --memory-mib"),
    (["--enforce", "--memory-mib", "100", "--cluster", "c.json"],
     "--enforce emulates memory on local workers"),
])
def test_bench_train_refuses_enforce_without_a_budget_or_local_workers(capsys, argv, message):
    assert main(["bench", "train"] + argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_bench_train_refuses_a_memory_headroom_out_of_range_in_one_line(capsys):
    assert main(["bench", "train", "--memory-headroom", "-0.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["meshpar bench train: error: --memory-headroom must be in [0, 1), got -0.5"]


def test_bench_train_refuses_a_memory_budget_per_worker_of_the_wrong_count(capsys):
    assert main(["bench", "train", "--speeds", "0.9,0.3", "--memory-mib", "64,32,16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--memory-mib: 3 values for 2 workers" in err[0]


def test_an_existing_clusters_budget_of_the_wrong_count_is_refused_before_profiling(monkeypatch):
    """With --cluster the workers are counted once the cluster is reached: a --memory-mib
    of another count is refused then, not after the first model's profile (where it
    read 'memory: 3 values for 1 devices', no flag)."""
    from meshpar.runtime import cluster_files, profiling

    class OneWorker:
        addresses = ["127.0.0.1:1"]

        def __init__(self, cluster_file):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def describe(self):
            return "one worker"

    monkeypatch.setattr(cluster_files, "ExistingCluster", OneWorker)
    monkeypatch.setattr(profiling, "profile_cluster_workers",
                        lambda *a, **k: pytest.fail("profiled before the budget was checked"))
    with pytest.raises(ValueError, match="--memory-mib: 3 values for 1 worker"):
        bench_train.run_benchmark(["vgg-cifar-small"], [0.9, 0.3], cluster_file="c.json",
                                  steps=8, batch=2, memory_bytes=[2**20] * 3, log=lambda *a: None)


def test_split_timings_take_turns_so_a_slow_spell_hits_both(monkeypatch):
    """The even and the balanced splits are timed round after round: a slow spell
    of the host (here the 4th to 9th timed runs, 10x slower) lands on both, and
    each median stays the op's own time."""
    from meshpar.runtime import timed_rounds

    clock = {"t": 0.0, "timed": 0}
    seconds = {"even": 0.4, "balanced": 0.2}
    order = []

    class Session:
        def run(self, op):
            order.append(op)
            slow = 3 <= clock["timed"] < 9 and len(order) > 2  # warm-ups are not timed
            clock["timed"] += len(order) > 2
            clock["t"] += seconds[op] * (10 if slow else 1)

    monkeypatch.setattr(timed_rounds.time, "perf_counter", lambda: clock["t"])
    got = timed_rounds.interleaved_seconds(Session(), {"e": "even", "b": "balanced"}, repeats=3,
                                           rounds=3)
    assert order[:2] == ["even", "balanced"]  # one warm-up each
    assert order[2:] == (["even"] * 3 + ["balanced"] * 3) * 3
    assert got == {"e": pytest.approx(0.4), "b": pytest.approx(0.2)}


def test_slice_speeds_are_read_against_whole_steps_timed_in_the_same_rounds(monkeypatch):
    """Each worker's slices take turns with its whole step, round after round: a
    host slowed 3x from the second round on slows both, and each efficiency
    (whole step's seconds over the split step's) stays the op's own ratio.
    Read against a whole step timed minutes earlier, it would be 3x off."""
    import threading

    from meshpar.runtime import timed_rounds

    seconds = {"whole0": 0.3, "whole1": 0.9, ("s2", 0): 0.5, ("s2", 1): 1.5,
               ("s4", 0): 0.75, ("s4", 1): 2.25}
    clocks, runs, lock = {}, [], threading.Lock()

    class Session:
        def run(self, op):
            with lock:
                runs.append(op)
                slow = len(runs) > 6 + 6  # 6 warm-ups, then the first round's 6 runs
            me = threading.get_ident()
            clocks[me] = clocks.get(me, 0.0) + seconds[op] * (3 if slow else 1)

    monkeypatch.setattr(timed_rounds.time, "perf_counter",
                        lambda: clocks.get(threading.get_ident(), 0.0))
    slices = {(task, k): (f"s{k}", task) for task in range(2) for k in (2, 4)}
    got = timed_rounds.time_slices(Session(), slices, ["whole0", "whole1"], 2, repeats=3,
                                   log=lambda *a: None, rounds=3)
    assert got == {0: {0.5: pytest.approx(0.6), 0.25: pytest.approx(0.4)},
                   1: {0.5: pytest.approx(0.6), 0.25: pytest.approx(0.4)}}
    # one warm-up of each op, then each round: the whole steps, the 1/2 and 1/4 slices
    groups = [{"whole0", "whole1"}, {("s2", 0), ("s2", 1)}, {("s4", 0), ("s4", 1)}]
    assert [set(runs[i:i + 2]) for i in range(0, len(runs), 2)] == groups * 4
    assert timed_rounds.time_slices(Session(), {}, [], 2, 3, None) == {0: {}, 1: {}}


def test_the_size_scan_is_timed_again_in_the_splits_rounds(monkeypatch):
    """The scan's steps (each task alone, then both at once) take turns with the
    splits, round after round: a host slowed 2x from the second round on slows
    them all, and the speeds and split times come from the same rounds (the
    median run of each is a slow one), where splits divided by a drift read off
    a few runs of the workers' whole steps moved with those runs' noise."""
    import threading

    from meshpar.runtime import timed_rounds

    seconds = {("s", 0, 1): 0.1, ("s", 1, 1): 0.3, ("s", 0, 2): 0.15, ("s", 1, 2): 0.5,
               "even": 0.4, "balanced": 0.25}
    clocks, runs, lock = {}, [], threading.Lock()

    class Session:
        def run(self, op):
            with lock:
                runs.append(op)
                slow = len(runs) > 10 + 10  # 10 warm-up runs, then the first round's 10
            me = threading.get_ident()
            clocks[me] = clocks.get(me, 0.0) + seconds[op] * (2 if slow else 1)

    monkeypatch.setattr(timed_rounds.time, "perf_counter",
                        lambda: clocks.get(threading.get_ident(), 0.0))
    steps = {(task, (b,)): ("s", task, b) for task in range(2) for b in (1, 2)}
    alone, together, timed, spread = timed_rounds.rescan_with(
        Session(), steps, [(1,), (2,)], {(1,): 1.0, (2,): 2.0}, 2,
        {"e": "even", "b": "balanced"}, repeats=1, rounds=3)
    assert timed == {"e": pytest.approx(0.8), "b": pytest.approx(0.5)}
    # runs 0.4, 0.8, 0.8: quartiles 0.6 and 0.8 about the median 0.8
    assert spread == {"e": pytest.approx(0.25), "b": pytest.approx(0.25)}
    speeds = {0: {1.0: pytest.approx(5.0), 2.0: pytest.approx(2 / 0.3)},
              1: {1.0: pytest.approx(1 / 0.6), 2.0: pytest.approx(2.0)}}
    assert alone == speeds and together == speeds
    # after one warm-up of each op, every round: size 1 alone (task 0, task 1) and
    # together, size 2 likewise, then the splits
    groups = [[("s", 0, 1)], [("s", 1, 1)], [("s", 0, 1), ("s", 1, 1)], [("s", 0, 2)],
              [("s", 1, 2)], [("s", 0, 2), ("s", 1, 2)], ["even"], ["balanced"]]
    timed_runs, got = runs[10:], []
    for _ in range(3):
        for group in groups:
            got.append(sorted(map(str, timed_runs[:len(group)])))
            timed_runs = timed_runs[len(group):]
    assert got == [sorted(map(str, g)) for g in groups] * 3 and not timed_runs


def test_each_row_gives_its_predicted_speed_up_over_the_measured_fastest_worker_alone(
        monkeypatch):
    """Beside predicted/measured (which moves with the host's speed between the
    profile and the runs), every row gives the cost model's speed-up over the worker
    that ran fastest alone in the runs (here worker 1, measured faster than worker 0
    though profiled slower), to read against the measured one: its own row 1.00x."""
    rates = {"alone-1": 12.0}

    def fake_run(model, plan, cluster_file, work, name, steps, batch, upstream=False,
                 seed=0, log=print, run=0, cluster=None):
        rate = rates.get(name, 10.0)
        return {"samples_per_second": rate, "step_seconds_median": batch / rate,
                "samples_per_second_p25_p75": [rate, rate], "trace_step_seconds": 0.8}

    monkeypatch.setattr(bench_train, "run_strategy", fake_run)
    result = bench_train.bench_model("vgg-cifar", ClusterSpec.from_speeds([0.9, 0.3]), "f",
                                     "w", 8, 8, 0, log=lambda *a: None, run_together=False)
    rows = result["strategies"]
    alone = rows["alone-1"]["predicted_step_seconds"]
    assert alone > rows["alone-0"]["predicted_step_seconds"]  # profiled the slower one
    for name, r in rows.items():
        assert r["predicted_vs_fastest_alone"] == pytest.approx(
            alone / r["predicted_step_seconds"]), name
    assert rows["alone-1"]["predicted_vs_fastest_alone"] == pytest.approx(1.0)
    table = bench_train.format_table({"models": [result]})
    header = next(line for line in table.splitlines() if "strategy" in line)
    assert header.split().index("pred") == header.split().index("1") + 1
    row = next(line for line in table.splitlines() if line.split()[:1] == ["alone-0"])
    want = rows["alone-0"]["predicted_vs_fastest_alone"]
    assert f"{rows['alone-0']['vs_fastest_alone']:4.2f}x {want:4.2f}x" in row


def test_the_planner_rows_close_call_is_reported_with_the_model(monkeypatch):
    """The benchmark asks margins.close_call about the planner's pick against the
    plans it weighed (the whole cluster's and each subset's) on the run's profile,
    and reports its note with the model's table; without a note, no field."""
    from meshpar.planning import margins

    def fake_run(model, plan, cluster_file, work, name, steps, batch, upstream=False,
                 seed=0, log=print, run=0, cluster=None):
        return {"samples_per_second": 10.0, "step_seconds_median": batch / 10.0,
                "samples_per_second_p25_p75": [10.0, 10.0], "trace_step_seconds": 0.8}

    asked = []

    def fake_close_call(pick, others, cluster):
        asked.append((pick, list(others), cluster))
        return "the pick is a close call" if len(asked) == 1 else None

    monkeypatch.setattr(bench_train, "run_strategy", fake_run)
    monkeypatch.setattr(margins, "close_call", fake_close_call)
    profile = ClusterSpec.from_speeds([0.9, 0.3])
    result = bench_train.bench_model("vgg-cifar-small", profile, "f", "w", 8, 8, 0,
                                     log=lambda *a: None, run_together=False)
    pick, others, cluster = asked[0]
    assert cluster is profile
    planner = result["strategies"]["planner"]
    assert pick.predicted_step_seconds == planner["predicted_step_seconds"]
    assert list(pick.devices) == planner["plan_devices"]
    assert {len(p.devices) for p in others} == {1, 2}  # the whole cluster and the fast one
    assert result["planner_close_call"] == "the pick is a close call"
    assert "  planner: the pick is a close call" in bench_train.format_table({"models": [result]})
    again = bench_train.bench_model("vgg-cifar-small", profile, "f", "w", 8, 8, 0,
                                    log=lambda *a: None, run_together=False)
    assert "planner_close_call" not in again
