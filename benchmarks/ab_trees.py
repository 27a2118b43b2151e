"""Two (or more) source trees of meshpar, interleaved on one LocalCluster: does a change
make the training step a user runs faster?

Each round trains every tree on every plan, one ``meshpar train --cluster --plan``
process each (synthetic data, fresh model directory, the JSON summary's steady-state
samples/s), round after round on the same throttled workers, so the host's drift
hits every tree alike. A tree is a checkout (e.g. ``git worktree add /tmp/old
HEAD~3``); its ``meshpar train`` runs from inside it (``python -m`` puts the working
directory first), while the workers are this checkout's (they only run the graphs
the trees send them).

    python benchmarks/ab_trees.py --trees /tmp/old,. --model resattnet3d-small \\
        --batch 32 --splits 32/0,25/7,26/6 --rounds 3 --steps 30 --out ab.json

``--splits``: batch splits over the two workers, fast worker first; ``B/0`` is the
first worker alone. Prints each run and, per tree and split, the median and the
runs; ``--out`` writes them as JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from meshpar.bench.train_runs import train_argv
from meshpar.models import describe_model
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.cost_model import CostModel
from meshpar.planning.planners.common import build_plan
from meshpar.runtime.local_cluster import LocalCluster


def split_plan(model: str, batch: int, speeds, split):
    """A plan splitting ``batch`` as ``split`` over the workers (``(B, 0)``: worker 0 alone)."""
    spec = ClusterSpec.from_speeds(speeds)
    if not all(split[1:]):
        spec = ClusterSpec(spec.devices[:1], bandwidth=spec.bandwidth, latency=spec.latency)
        return build_plan("alone", CostModel(describe_model(model), spec, batch), 1, 1, [0],
                          [1.0], [1.0])
    n = len(split)
    return build_plan("split", CostModel(describe_model(model), spec, batch), n, 1,
                      list(range(n)), [float(s) for s in split], [1.0])


def main(argv=None) -> int:
    """Run the interleaved rounds; print and optionally write the result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", required=True, help="comma-separated checkout directories")
    parser.add_argument("--model", default="resattnet3d-small")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--splits", default="32/0,25/7", help="e.g. 32/0,25/7 (fast worker first)")
    parser.add_argument("--speeds", default="0.9,0.3")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--out", help="write the result as JSON")
    args = parser.parse_args(argv)
    trees = [os.path.abspath(t) for t in args.trees.split(",")]
    speeds = [float(s) for s in args.speeds.split(",")]
    splits = [tuple(int(x) for x in s.split("/")) for s in args.splits.split(",")]
    for split in splits:
        if sum(split) != args.batch or len(split) != len(speeds):
            raise SystemExit(f"split {split} must cover batch {args.batch} over {len(speeds)} "
                             f"workers")
    runs = {}
    started = time.time()
    with LocalCluster(speeds) as cluster, tempfile.TemporaryDirectory() as work:
        cluster_file = os.path.join(work, "cluster.json")
        with open(cluster_file, "w", encoding="utf-8") as f:
            json.dump({"worker": list(cluster.addresses)}, f)
        print(cluster.describe(), flush=True)
        for rnd in range(args.rounds):
            for t, tree in enumerate(trees):
                for split in splits:
                    name = "/".join(map(str, split))
                    plan_file = os.path.join(work, f"plan-{name.replace('/', '-')}.json")
                    split_plan(args.model, args.batch, speeds, split).save(plan_file)
                    model_dir = os.path.join(work, "model")
                    shutil.rmtree(model_dir, ignore_errors=True)  # every run from scratch
                    cmd = train_argv(args.model, cluster_file, plan_file, args.steps, args.batch,
                                     trace_step=None, model_dir=model_dir, upstream=False, seed=0)
                    proc = subprocess.run(cmd, cwd=tree, capture_output=True, text=True,
                                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
                    if proc.returncode:
                        sys.stderr.write(proc.stderr[-2000:])
                        return 1
                    summary = json.loads(proc.stdout.strip().splitlines()[-1])
                    rate = summary["samples_per_second"]
                    runs.setdefault(f"{t}:{name}", []).append(rate)
                    print(f"round {rnd} tree {t} ({tree}) split {name}: {rate:.1f} samples/s, "
                          f"last loss {summary['last_loss']:.4f}", flush=True)
    result = {"trees": trees, "model": args.model, "batch": args.batch, "speeds": speeds,
              "steps": args.steps, "rounds": args.rounds, "describe": cluster.describe(),
              "seconds": time.time() - started,
              "samples_per_second": {k: {"median": statistics.median(v), "runs": v}
                                     for k, v in runs.items()}}
    for key, row in result["samples_per_second"].items():
        print(f"tree {key}: median {row['median']:.1f} samples/s, runs "
              + " / ".join(f"{r:.1f}" for r in row["runs"]))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
