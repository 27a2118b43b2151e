"""Re-balancing and elastic training with real TF gRPC worker processes
(``meshpar train --cluster --rebalance / --elastic / --replay-replans``)."""
import glob
import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from meshpar.cli import main
from meshpar.runtime.local_cluster import LocalCluster, detect_cgroup

TINY = ["train", "--synthetic", "--model", "resattnet3d-tiny", "--n-synthetic", "16",
        "--val-fraction", "0", "--no-progress", "--batch", "4", "--seed", "3"]


@pytest.mark.parametrize("argv, words", [
    (["--rebalance"], "--rebalance needs --cluster"),
    (["--elastic"], "--elastic needs --cluster"),
    (["--replay-replans", "x.json"], "--replay-replans needs --cluster"),
    (["--rebalance", "--cluster", "c.json", "--rebalance-threshold", "0"],
     "--rebalance-threshold must be in (0, 1]"),
    (["--rebalance", "--cluster", "c.json", "--rebalance-threshold", "nan"],
     "--rebalance-threshold must be in (0, 1]"),
    (["--rebalance", "--cluster", "c.json", "--rebalance-every", "0"], "--rebalance-every"),
    (["--rebalance", "--cluster", "c.json", "--rebalance-budget", "0"], "--rebalance-budget"),
    (["--rebalance", "--cluster", "c.json", "--rebalance-budget", "1.5"], "--rebalance-budget"),
    (["--rebalance", "--cluster", "c.json", "--rebalance-patience", "-1"],
     "--rebalance-patience"),
    (["--rebalance", "--cluster", "c.json", "--rebalance-method", "fastest"],
     "--rebalance-method must be one of"),
    (["--rebalance", "--cluster", "c.json", "--rebalance-measure", "guess"],
     "--rebalance-measure must be one of"),
    (["--rebalance-every", "5"], "--rebalance-every goes with --rebalance or --elastic"),
    (["--rebalance-profile", "p.json"], "--rebalance-profile goes with --rebalance or --elastic"),
    (["--rebalance-every", "5", "--rebalance-budget", "0.1"],
     "--rebalance-every and --rebalance-budget go with --rebalance or --elastic"),
    (["--rebalance", "--cluster", "c.json", "--rebalance-profile", "no-such-profile.json"],
     "no-such-profile.json"),
])
def test_bad_rebalance_flags_exit_2_with_one_line(capsys, argv, words):
    assert main(["train", "--synthetic"] + argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err


def _weights(model_dir):
    import tensorflow.compat.v1 as tf

    reader = tf.train.load_checkpoint(str(model_dir))
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}


def test_a_slowed_worker_is_measured_replanned_around_and_a_replay_gives_the_same_weights(
        tmp_path, capsys):
    """Worker 1's CPU share is cut to 0.15 (LocalCluster.set_speed) under an even
    data-parallel plan: the traced steps measure it, the run re-plans (one log line, one JSON
    record) and ends at the requested step; replaying its plans at the same
    steps without measuring gives bit-identical weights."""
    steps = 12
    with LocalCluster([1.0, 1.0], pin=False) as cluster:
        # 0.15, not 0.3: a worker whose step needs less CPU than its quota is
        # not slowed at all (the tiny model's 2-sample share often fits in a
        # 0.3 share), and the run must see a slowdown to re-plan.
        cluster.set_speed(1, 0.15)
        cluster_file = tmp_path / "cluster.json"
        cluster_file.write_text(json.dumps({"worker": cluster.addresses}))
        common = TINY + ["--batch", "8", "--cluster", str(cluster_file), "--speeds", "1,1",
                         "--mesh", "batch:2", "--steps", str(steps), "--json"]
        assert main(common + ["--model-dir", str(tmp_path / "a"), "--rebalance",
                              "--rebalance-every", "2", "--rebalance-patience", "1"]) == 0
        out = capsys.readouterr().out
        (tmp_path / "a.json").write_text(out)
        assert main(common + ["--model-dir", str(tmp_path / "b"),
                              "--replay-replans", str(tmp_path / "a.json")]) == 0
        replay = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["rebalance_samples"], "no traced step measured the workers"
    first = summary["replans"][0]
    assert first["reason"] == "drift" and first["predicted_gain"] >= 0.1
    assert 3 < first["step"] < steps
    assert first["measured_speeds"]["1"] < first["measured_speeds"]["0"]
    new = dict(zip(first["new"]["devices"], first["new"]["split_weights"]["batch"]))
    assert new["/job:worker/task:1/device:CPU:0"] < new["/job:worker/task:0/device:CPU:0"]
    lines = [l for l in out.splitlines() if l.startswith("re-plan at step")]
    assert len(lines) == len(summary["replans"])
    assert f"re-plan at step {first['step']} (drift)" in lines[0]
    assert [r["step"] for r in replay["replans"]] == [r["step"] for r in summary["replans"]]
    # the top-level mesh is the one the run started on; final_mesh the one it ended on
    assert summary["split_weights"]["batch"] == [1.0, 1.0]
    assert summary["final_mesh"] == summary["replans"][-1]["new"]
    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    assert int(a["global_step"]) == int(b["global_step"]) == steps
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def _latest_step(model_dir):
    steps = [int(re.search(r"ckpt-(\d+)\.index$", p).group(1))
             for p in glob.glob(os.path.join(model_dir, "model.ckpt-*.index"))]
    return max(steps) if steps else 0


def _wait_for_checkpoint(proc, model_dir, step):
    deadline = time.monotonic() + 240
    while _latest_step(model_dir) < step:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no checkpoint {step}:\n" + proc.communicate()[1][-2000:])
        time.sleep(0.05)


def test_elastic_run_survives_a_killed_worker_takes_it_back_and_ends_at_the_final_step(
        tmp_path):
    """Worker 1 is killed after checkpoint 4: the run re-plans on worker 0 from
    that checkpoint (one line); worker 1 is started again (worker 0 slowed
    meanwhile, so the run is still going) and taken back."""
    steps = 24
    model_dir = tmp_path / "model"
    with LocalCluster([1.0, 1.0], pin=False) as cluster:
        cluster_file = tmp_path / "cluster.json"
        cluster_file.write_text(json.dumps({"worker": cluster.addresses}))
        argv = [sys.executable, "-m", "meshpar"] + TINY + [
            "--cluster", str(cluster_file), "--speeds", "0.5,0.5", "--steps", str(steps),
            "--checkpoint-every", "4", "--elastic", "--rebalance-every", "2", "--json",
            "--model-dir", str(model_dir)]
        with open(tmp_path / "err.txt", "w") as err_file:
            proc = subprocess.Popen(argv, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
                                    stdout=subprocess.PIPE, stderr=err_file, text=True)
            _wait_for_checkpoint(proc, model_dir, 4)
            cluster.kill_worker(1)
            cluster.set_speed(0, 0.05)  # keep the run going while worker 1 restarts
            lines = [proc.stdout.readline()]
            while "(lost worker)" not in lines[-1] and lines[-1]:
                lines.append(proc.stdout.readline())
            cluster.restart_worker(1)
            cluster.set_speed(0, 1.0)
            out = "".join(lines) + proc.communicate(timeout=240)[0]
    assert proc.returncode == 0, (tmp_path / "err.txt").read_text()[-2000:]
    summary = json.loads(out.strip().splitlines()[-1])
    reasons = [r["reason"] for r in summary["replans"]]
    assert reasons == ["lost worker", "worker back"], summary["replans"]
    lost, back = summary["replans"]
    assert lost["lost_workers"] == [1] and lost["step"] in (4, 8)  # from the last checkpoint
    assert all("task:1/" not in d for d in lost["new"]["devices"])
    assert back["workers_back"] == [1] and back["step"] < steps
    assert any("task:1/" in d for d in back["new"]["devices"])
    assert _latest_step(model_dir) == steps
    # the global steps advanced; the step runs include any that ran again after the loss
    assert summary["steps"] == steps
    assert summary.get("step_runs", steps) >= steps


@pytest.mark.skipif(detect_cgroup() is None, reason="needs a writable cgroup cpu controller")
def test_set_speed_rewrites_a_running_workers_quota():
    with LocalCluster([1.0, 0.9], throttle="cgroup", pin=False) as cluster:
        cluster.set_speed(1, 0.3)
        cluster.set_speed(0, 0.5)  # a worker started unthrottled gets a group now
        groups = {g.path: g for g in cluster._cgroups}
        assert len(groups) == 2
        for group, speed in zip(cluster._cgroups, (0.3, 0.5)):
            assert group.quota_us / group.period_us == pytest.approx(speed, abs=0.01)
            name = "cpu.cfs_quota_us" if group.version == "v1" else "cpu.max"
            with open(os.path.join(group.path, name), encoding="utf-8") as f:
                assert str(group.quota_us) in f.read()
        assert cluster.speeds == [0.5, 0.3]
        with pytest.raises(ValueError, match="in \\[0.001, 1\\], got 1.5"):
            cluster.set_speed(0, 1.5)
        with pytest.raises(ValueError, match="in \\[0.001, 1\\], got 0.0001"):
            cluster.set_speed(0, 0.0001)  # under a 1 ms quota in the kernel's longest period


def _step_profile(speeds, model="resattnet3d-small", batch=8, split=0.2):
    """A model-step profile whose task t runs one step of ``batch`` alone in
    1/speeds[t] seconds; the even splits measured 0.5 s + ``split`` (two
    equal workers: splitting costs ``split`` seconds per step)."""
    from meshpar.models import describe_model
    from meshpar.planning.cluster import ClusterSpec, DeviceSpec

    flops = 3.0 * sum(layer.flops for layer in describe_model(model).layers) * batch
    devices = tuple(DeviceSpec(name=f"w{t}", device=f"/job:worker/task:{t}/device:CPU:0",
                               profile=((1.0, flops * s),)) for t, s in enumerate(speeds))
    return ClusterSpec(devices, extra={"work": "model-step", "model": model, "split_seconds": {
        "batch": 0.5 + split, "model": 0.5 + split, "batch_size": batch}})


def test_a_profile_is_scaled_to_the_live_speeds_the_least_slowed_worker_keeping_its_own():
    from meshpar.training.rebalance import scaled_profile

    profile = _step_profile([1.0, 0.5, 0.8])
    profile.extra["alone_profile"] = {d.device: [[1.0, 1.5 * d.profile[0][1]]]
                                      for d in profile.devices}
    scaled = scaled_profile(profile, {0: 0.25, 2: 1.0})
    top = {d.device: d.profile[0][1] for d in scaled.devices}
    fast = "/job:worker/task:2/device:CPU:0"
    assert len(scaled.devices) == 2 and top[fast] == profile.devices[2].profile[0][1]
    assert top["/job:worker/task:0/device:CPU:0"] / top[fast] == pytest.approx(0.25)
    assert scaled.extra["split_seconds"] == profile.extra["split_seconds"]
    # the speeds alone scale with each device's (a one-device re-plan is priced at them)
    for device in scaled.devices:
        (size, speed), = scaled.alone_points(device.device)
        assert size == 1.0 and speed == pytest.approx(1.5 * device.profile[0][1])
    assert len(scaled.extra["alone_profile"]) == 2
    with pytest.raises(ValueError, match="no device of worker task"):
        scaled_profile(profile, {0: 1.0, 7: 1.0})


@pytest.mark.parametrize("method", ["proportional", "ga"])
def test_a_replan_with_a_profile_drops_a_worker_that_no_longer_pays_for_its_split(method):
    """Alone a step takes 1 s, a split costs 0.2 s more: two equal workers
    halve the compute (0.7 s); at 0.2 of the other, the slow one's share saves
    less than the split costs, and the re-plan leaves it out."""
    from meshpar.models import describe_model
    from meshpar.training.rebalance import replan

    description, profile = describe_model("resattnet3d-small"), _step_profile([1.0, 1.0])
    both = replan(description, {0: 1.0, 1: 1.0}, 8, method, profile=profile)
    assert len(both.devices) == 2
    assert both.predicted_step_seconds == pytest.approx(0.7, rel=0.02)
    one = replan(description, {0: 0.2, 1: 1.0}, 8, method, profile=profile)
    assert one.devices == ("/job:worker/task:1/device:CPU:0",)
    assert one.predicted_step_seconds == pytest.approx(1.0, rel=0.02)


def test_replans_use_the_ga_with_a_profile_and_proportional_shares_without():
    from meshpar.planning.cluster import ClusterSpec
    from meshpar.training.rebalance import RebalanceOptions

    profile = ClusterSpec.from_speeds([1.0, 1.0])
    assert RebalanceOptions().planner == "proportional"
    assert RebalanceOptions(profile=profile).planner == "ga"
    assert RebalanceOptions(profile=profile, method="exact").planner == "exact"
    assert RebalanceOptions(method="even").planner == "even"


def test_probe_seconds_spans_each_workers_probe_ops_and_ignores_the_rest():
    from types import SimpleNamespace as NS

    from meshpar.training.live_speeds import probe_seconds

    def node(name, start_us, length_us):
        return NS(node_name=name, all_start_micros=start_us, all_end_rel_micros=length_us)

    stats = NS(dev_stats=[
        NS(device="/job:worker/replica:0/task:0/device:CPU:0", node_stats=[
            node("meshpar_speed_probe_0/MatMul", 1000, 3000),
            node("meshpar_speed_probe_0/MatMul_1", 4000, 5000),
            node("resattnet3d_small/conv/Conv3D", 0, 20000)]),
        NS(device="/job:worker/replica:0/task:1/device:CPU:0", node_stats=[
            node("meshpar_speed_probe_1/MatMul", 2000, 1000)])])
    assert probe_seconds(stats) == pytest.approx({0: 0.008, 1: 0.001})


def test_the_probe_is_sized_to_last_its_target_on_the_fastest_worker():
    from meshpar.training.live_speeds import probe_rounds

    assert probe_rounds({0: 0.0035, 1: 0.0105}, 16, target=0.02) == 92  # ceil(16 * 20 / 3.5)
    assert probe_rounds({0: 0.05, 1: 0.15}, 16, target=0.02) == 16  # never below the first count
    assert probe_rounds({0: 1e-6}, 16, target=0.02, limit=1000) == 1000
    assert probe_rounds({}, 16) == 16


def test_probe_ops_run_the_fed_number_of_rounds():
    """The round count is a tensor fed at run time: the result is x^(k+1) (2/size)^k;
    the longest chain the sizing allows neither overflows nor flushes to zero."""
    import tensorflow.compat.v1 as tf

    from meshpar.training.live_speeds import PROBE_MAX_ROUNDS, probe_ops, probe_seconds

    with tf.Graph().as_default():
        rounds = tf.placeholder_with_default(2, [])
        ops = probe_ops({0: "/device:CPU:0"}, size=4, rounds=rounds)
        x = tf.get_default_graph().get_tensor_by_name(
            "meshpar_speed_probe_0/random_uniform/RandomUniform:0")
        with tf.Session() as session:
            for k in (0, 1, 3):
                meta = tf.RunMetadata()
                got, xv = session.run([ops[0], x], feed_dict={rounds: k}, run_metadata=meta,
                                      options=tf.RunOptions(
                                          trace_level=tf.RunOptions.FULL_TRACE))
                want = xv.copy()
                for _ in range(k):
                    want = want @ xv * 0.5
                assert got == pytest.approx(want.sum(), rel=1e-5)
                assert set(probe_seconds(meta.step_stats)) == {0}
        longest = probe_ops({1: "/device:CPU:0"}, size=64, rounds=rounds)[1]
        with tf.Session() as session:
            got = session.run(longest, feed_dict={rounds: PROBE_MAX_ROUNDS})
        assert np.isfinite(got) and got > 0


def test_the_probe_count_reaches_each_worker_once_not_every_round():
    """The fed count (on the client's device) is read only by one copy per
    worker, outside the loop: read inside it, a worker received it every round."""
    import tensorflow.compat.v1 as tf

    from meshpar.training.live_speeds import probe_ops

    devices = {t: f"/job:worker/task:{t}/device:CPU:0" for t in range(2)}
    with tf.Graph().as_default():
        rounds = tf.placeholder_with_default(16, [])
        probe_ops(devices, rounds=rounds)
        readers = rounds.consumers()
        assert sorted(op.type for op in readers) == ["Identity", "Identity"]
        assert sorted(op.device for op in readers) == sorted(devices.values())


@pytest.mark.parametrize("measure, devices, probes", [
    ("auto", ["/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"], True),
    ("auto", ["/job:worker/task:0/device:GPU:0", "/job:worker/task:1/device:CPU:0"], False),
    ("trace", ["/job:worker/task:0/device:CPU:0"], False),
    ("probe", ["/job:worker/task:0/device:GPU:0", "/job:worker/task:1/device:CPU:0"], True),
])
def test_auto_measures_by_probe_only_on_devices_of_one_type(measure, devices, probes):
    from types import SimpleNamespace as NS

    from meshpar.training.rebalance import _probes

    assert _probes(measure, NS(devices=devices)) is probes


def test_a_monitor_samples_a_burst_of_steps_when_the_step_time_moves(monkeypatch):
    """Regular samples one in ``every``; when the step time doubles, the next
    ``burst`` steps are sampled too."""
    from types import SimpleNamespace as NS

    from meshpar.training import live_speeds
    from meshpar.training.live_speeds import SpeedMonitor, StepTimeTrigger

    sampled = []
    monitor = SpeedMonitor(every=20, on_sample=lambda step, busy: sampled.append(step) and False,
                           warmup=0, trigger=StepTimeTrigger(window=3, confirm=2, settle=5),
                           burst=2)
    monitor._first, clock = 0, [0.0]
    monkeypatch.setattr(live_speeds.time, "perf_counter", lambda: clock[0])
    metadata = NS(step_stats=NS(dev_stats=[]))
    for step in range(1, 61):
        monitor.before_run(None)
        clock[0] += 0.1 if step <= 30 else 0.2
        monitor.after_run(NS(request_stop=lambda: None), NS(run_metadata=metadata))
    assert monitor.triggers == [33]  # level out at 32 and 33 (confirm=2)
    assert sampled == [20, 34, 35, 40, 60]


@pytest.mark.parametrize("budget", [None, 0.02, 0.05])
def test_a_monitor_keeps_what_measuring_costs_within_its_budget(monkeypatch, budget):
    """A sample costs half a step more than a plain step: one in 5 is 9% of the
    time; with a budget the samples wait (never closer than 5 steps) until
    the measured share is back under it, and it ends within one sample of it."""
    from types import SimpleNamespace as NS

    from meshpar.training import live_speeds
    from meshpar.training.live_speeds import SpeedMonitor

    sampled = []
    monitor = SpeedMonitor(every=5, on_sample=lambda step, busy: sampled.append(step) and False,
                           warmup=0, budget=budget)
    monitor._first, clock = 0, [0.0]
    monkeypatch.setattr(live_speeds.time, "perf_counter", lambda: clock[0])
    metadata = NS(step_stats=NS(dev_stats=[]))
    for _ in range(400):
        monitor.before_run(None)
        clock[0] += 0.15 if monitor._traced else 0.1
        monitor.after_run(NS(request_stop=lambda: None), NS(run_metadata=metadata))
    share = monitor.overhead()["overhead_fraction"]
    gaps = np.diff(sampled)
    if budget is None:
        assert sampled == list(range(5, 401, 5)) and monitor.waited_steps == 0
        assert share == pytest.approx(80 * 0.05 / (400 * 0.1 + 80 * 0.05))
        return
    one_sample = 0.05 / (400 * 0.1)
    assert budget - one_sample <= share <= budget + one_sample
    assert gaps.min() >= 5 and monitor.waited_steps > 0
    # n samples spend n * 0.05 s of 40 s + n * 0.05 s: the budget's n
    assert len(sampled) == pytest.approx(budget * 40 / (0.05 * (1 - budget)), abs=2)


def test_a_profile_of_another_model_or_other_workers_is_refused_when_the_run_starts():
    from meshpar.models import describe_model
    from meshpar.training.rebalance import check_profile

    description = describe_model("resattnet3d-small")
    check_profile(_step_profile([1.0, 0.5]), description, 8, [0, 1])
    with pytest.raises(ValueError, match="measured on model 'vgg-cifar'"):
        check_profile(_step_profile([1.0, 0.5], model="vgg-cifar"), description, 8, [0, 1])
    with pytest.raises(ValueError, match="no device of worker task.* 2"):
        check_profile(_step_profile([1.0, 0.5]), description, 8, [0, 1, 2])


def test_a_replay_of_another_batch_or_model_is_refused_before_any_step(tmp_path):
    """Its meshes split the other run's batch: refused when the file is read, not
    when the first re-plan falls due mid-run."""
    from meshpar.cli.train_options import read_replans

    path = tmp_path / "run.json"
    path.write_text("step 1\n" + json.dumps({"model": "resattnet3d-tiny", "batch": 4,
                                             "replans": [{"step": 5}]}) + "\n")
    assert read_replans(str(path), 4, "resattnet3d-tiny") == [{"step": 5}]
    with pytest.raises(ValueError, match="comes from a run of batch 4; this run has batch 1"):
        read_replans(str(path), 1, "resattnet3d-tiny")
    with pytest.raises(ValueError, match="model resattnet3d-tiny; this run has model vgg-cifar"):
        read_replans(str(path), 4, "vgg-cifar")


def test_a_replay_record_at_a_negative_or_fractional_step_is_refused():
    from meshpar.training.rebalance import schedule_from_replans

    new = {"mesh_shape": "model:2", "layout": None, "devices": ["", ""],
           "split_weights": {"model": [2, 1]}, "dim_split_weights": {}}
    assert schedule_from_replans([{"step": 3, "new": new}])[0][0] == 3
    # infinity raised OverflowError (a traceback); NaN and 'x' int()'s own message
    for step in (-3, 2.5, float("inf"), float("nan"), "x", None):
        with pytest.raises(ValueError, match=re.escape(
                f"step must be a whole number >= 0, got {step!r}")):
            schedule_from_replans([{"step": step, "new": new}])
