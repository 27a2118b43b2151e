"""A worker killed mid-training: a clear failure naming it, then a resumed run
reaches the same final step from the last checkpoint (real processes on
loopback)."""
import glob
import json
import os
import re
import subprocess
import sys
import time

import pytest

from meshpar.runtime.local_cluster import LocalCluster

STEPS = 8  # two chunks of --checkpoint-every 4: the kill lands in the second


def _train_argv(cluster_file, model_dir):
    return [sys.executable, "-m", "meshpar", "train", "--synthetic", "--model",
            "resattnet3d-tiny", "--cluster", str(cluster_file), "--speeds", "0.7,0.3",
            "--steps", str(STEPS), "--batch", "4", "--n-synthetic", "16", "--no-progress",
            "--model-dir", str(model_dir), "--checkpoint-every", "4", "--worker-timeout", "30"]


def _latest_step(model_dir):
    steps = [int(re.search(r"ckpt-(\d+)\.index$", p).group(1))
             for p in glob.glob(os.path.join(model_dir, "model.ckpt-*.index"))]
    return max(steps) if steps else 0


def test_killed_worker_is_named_and_training_resumes_to_the_same_final_step(tmp_path):
    model_dir = tmp_path / "model"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    with LocalCluster([1.0, 1.0], throttle="none") as cluster:
        cluster_file = tmp_path / "cluster.json"
        cluster_file.write_text(json.dumps({"worker": cluster.addresses}))
        proc = subprocess.Popen(_train_argv(cluster_file, model_dir), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 240
        while _latest_step(model_dir) < 4:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail("training ended or stalled before its first checkpoint:\n"
                            + proc.communicate()[1][-2000:])
            time.sleep(0.05)
        cluster.kill_worker(1)
        _, err = proc.communicate(timeout=180)
        dead = cluster.addresses[1]
    assert proc.returncode == 1, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert f"worker 1 at {dead}" in last and last.startswith("meshpar train: failed:")
    checkpoint = _latest_step(model_dir)
    assert 4 <= checkpoint < STEPS

    with LocalCluster([1.0, 1.0], throttle="none") as cluster:
        cluster_file.write_text(json.dumps({"worker": cluster.addresses}))
        done = subprocess.run(_train_argv(cluster_file, model_dir), env=env,
                              capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    steps_run = int(re.search(r"^steps\s+(\d+)", done.stdout, re.M).group(1))
    assert steps_run == STEPS - checkpoint  # nothing lost or repeated past the checkpoint
    assert _latest_step(model_dir) == STEPS
