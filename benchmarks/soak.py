"""Soak: train on the emulated uneven cluster with periodic checkpoints and one
injected worker kill; compare the final weights with an uninterrupted run.

    python benchmarks/soak.py [--steps 300] [--kill-at 120] [--model resattnet3d-small]

Both runs are `meshpar train --cluster` processes on a LocalCluster (CPU
shares 0.9/0.3, cgroup or signal throttle), deterministic (TF_DETERMINISTIC_OPS=1,
one thread, fixed seed). The interrupted run loses worker 1 (SIGKILL) once the
checkpoint at --kill-at exists, fails naming it, and is rerun on a fresh
cluster with the same model dir until it reaches --steps. Prints steps done,
restarts, and the largest difference between the two final checkpoints.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

from meshpar.runtime.local_cluster import LocalCluster


def latest_step(model_dir):
    steps = [int(re.search(r"ckpt-(\d+)\.index$", p).group(1))
             for p in glob.glob(os.path.join(model_dir, "model.ckpt-*.index"))]
    return max(steps) if steps else 0


def train_argv(args, cluster_file, model_dir):
    return [sys.executable, "-m", "meshpar", "train", "--synthetic", "--model", args.model,
            "--cluster", cluster_file, "--speeds", "0.9,0.3", "--steps", str(args.steps),
            "--batch", str(args.batch), "--n-synthetic", str(args.subjects), "--seed", "0",
            "--threads", "1", "--no-progress", "--model-dir", model_dir,
            "--checkpoint-every", str(args.checkpoint_every), "--worker-timeout", "60"]


def run(args, model_dir, work, kill_at=None):
    """Train to args.steps, killing worker 1 once after checkpoint ``kill_at``."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_DETERMINISTIC_OPS="1")
    restarts, killed, started = 0, False, time.time()
    while latest_step(model_dir) < args.steps:
        with LocalCluster([0.9, 0.3]) as cluster:
            cluster_file = os.path.join(work, "cluster.json")
            with open(cluster_file, "w", encoding="utf-8") as f:
                json.dump({"worker": cluster.addresses}, f)
            proc = subprocess.Popen(train_argv(args, cluster_file, model_dir), env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            while kill_at and not killed and proc.poll() is None:
                if latest_step(model_dir) >= kill_at:
                    cluster.kill_worker(1)
                    killed = True
                    break
                time.sleep(0.05)
            out, err = proc.communicate()
        if proc.returncode != 0:
            print(f"  run ended with code {proc.returncode}: {err.strip().splitlines()[-1]}")
            restarts += 1
            if restarts > 3:
                raise SystemExit("too many restarts")
        else:
            print("  " + " | ".join(line.strip() for line in out.splitlines()
                                    if line.startswith(("steps", "last loss"))))
    return restarts, time.time() - started


def final_weights(model_dir):
    import tensorflow.compat.v1 as tf

    reader = tf.train.load_checkpoint(model_dir)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name != "global_step"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resattnet3d-small")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--kill-at", type=int, default=120)
    parser.add_argument("--checkpoint-every", type=int, default=40)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--subjects", type=int, default=48)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="meshpar-soak-") as work:
        print(f"uninterrupted run: {args.steps} steps of {args.model}")
        _, plain_seconds = run(args, os.path.join(work, "plain"), work)
        print(f"interrupted run: worker 1 killed after checkpoint {args.kill_at}")
        restarts, seconds = run(args, os.path.join(work, "killed"), work, kill_at=args.kill_at)
        a, b = final_weights(os.path.join(work, "plain")), final_weights(os.path.join(work, "killed"))
        diff = max(float(np.max(np.abs(a[k].astype(np.float64) - b[k]))) for k in a)
        print(f"\nsteps done {latest_step(os.path.join(work, 'killed'))} of {args.steps},"
              f" restarts {restarts}, {len(a)} variables,"
              f" max |final weights difference| {diff:.2e}"
              f" ({'match' if diff <= 1e-5 else 'DIFFER'} to 1e-5);"
              f" {plain_seconds:.0f} s uninterrupted, {seconds:.0f} s with the kill")
    return 0 if diff <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
