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
    (["--rebalance", "--cluster", "c.json", "--rebalance-patience", "-1"],
     "--rebalance-patience"),
    (["--rebalance", "--cluster", "c.json", "--rebalance-method", "fastest"],
     "--rebalance-method must be one of"),
    (["--rebalance-every", "5"], "go(es) with --rebalance"),
])
def test_bad_rebalance_flags_exit_2_with_one_line(capsys, argv, words):
    assert main(["train", "--synthetic"] + argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err


def _weights(model_dir):
    import tensorflow.compat.v1 as tf

    reader = tf.train.load_checkpoint(str(model_dir))
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}


def test_drift_measured_on_real_workers_replans_and_a_replay_gives_the_same_weights(
        tmp_path, capsys):
    """A split that gives worker 1 one filter in 50 while both workers run at the
    same speed: the traced steps measure it, the run re-plans (one log line, one
    JSON record), ends at the requested step; replaying its plans at the same
    steps without measuring gives bit-identical weights."""
    steps = 12
    with LocalCluster([1.0, 1.0], throttle="none", pin=False) as cluster:
        cluster_file = tmp_path / "cluster.json"
        cluster_file.write_text(json.dumps({"worker": cluster.addresses}))
        common = TINY + ["--cluster", str(cluster_file), "--speeds", "1,0.02",
                         "--steps", str(steps), "--json"]
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
    assert 3 < first["step"] < steps and first["new"]["split_weights"]["model"] != [1, 0.02]
    lines = [l for l in out.splitlines() if l.startswith("re-plan at step")]
    assert len(lines) == len(summary["replans"])
    assert f"re-plan at step {first['step']} (drift)" in lines[0]
    assert [r["step"] for r in replay["replans"]] == [r["step"] for r in summary["replans"]]
    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    assert int(a["global_step"]) == int(b["global_step"]) == steps
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def _latest_step(model_dir):
    steps = [int(re.search(r"ckpt-(\d+)\.index$", p).group(1))
             for p in glob.glob(os.path.join(model_dir, "model.ckpt-*.index"))]
    return max(steps) if steps else 0


def test_elastic_run_survives_a_killed_worker_and_reaches_the_final_step(tmp_path):
    steps = 14
    model_dir = tmp_path / "model"
    with LocalCluster([1.0, 1.0], throttle="none", pin=False) as cluster:
        cluster_file = tmp_path / "cluster.json"
        cluster_file.write_text(json.dumps({"worker": cluster.addresses}))
        argv = [sys.executable, "-m", "meshpar"] + TINY + [
            "--cluster", str(cluster_file), "--speeds", "0.5,0.5", "--steps", str(steps),
            "--checkpoint-every", "4", "--elastic", "--json", "--model-dir", str(model_dir)]
        proc = subprocess.Popen(argv, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 240
        while _latest_step(model_dir) < 4:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail("no first checkpoint:\n" + proc.communicate()[1][-2000:])
            time.sleep(0.05)
        cluster.kill_worker(1)
        out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-2000:]
    summary = json.loads(out.strip().splitlines()[-1])
    lost = [r for r in summary["replans"] if r["reason"] == "lost worker"]
    assert len(lost) == 1 and lost[0]["lost_workers"] == [1]
    assert 4 <= lost[0]["step"] < steps and lost[0]["step"] % 4 == 0  # from a checkpoint
    assert all("task:1/" not in d for d in lost[0]["new"]["devices"])
    assert _latest_step(model_dir) == steps


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
        with pytest.raises(ValueError, match="in \\(0, 1\\]"):
            cluster.set_speed(0, 1.5)
