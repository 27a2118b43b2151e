"""Filter splits of one model at several ratios: measured through ``meshpar train``
and predicted by the cost model from a profile of the same workers.

Starts a LocalCluster at ``--speeds`` (pinned, cgroup-throttled as in
``meshpar bench train``), profiles it (``meshpar profile --cluster --model``,
or reads ``--profile``), then trains the model on a ``model:2`` mesh with
its filters split in each ``--ratios`` proportion (first worker : second),
``--rounds`` times in turns, ``--steps`` steps each. Per ratio: the median
steady step (and the runs' spread) against the cost model's prediction. The
profile itself times the even split and the split weighted by the workers'
speeds, so those two ratios are nearly in-sample; the others test how the
model prices a share of the filters it did not see.

    python benchmarks/filter_ratios.py --model resattnet3d-small --batch 32 \
        --ratios 7:1,3:1,5:3,1:1 --out filter-ratios.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from meshpar.bench.train import run_strategy  # noqa: E402
from meshpar.models import describe_model  # noqa: E402
from meshpar.planning.cluster import ClusterSpec  # noqa: E402
from meshpar.planning.cost_model import CostModel  # noqa: E402
from meshpar.planning.planners.common import build_plan  # noqa: E402
from meshpar.runtime.local_cluster import LocalCluster  # noqa: E402


def ratio(text: str) -> tuple:
    """``"7:1"`` -> ``(7.0, 1.0)``."""
    parts = [float(p) for p in text.split(":")]
    if len(parts) != 2 or min(parts) <= 0:
        raise argparse.ArgumentTypeError(f"a ratio is two positive numbers 'a:b', got {text!r}")
    return tuple(parts)


def main(argv=None) -> dict:
    """Run the measurement; print a table; return (and with --out write) the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resattnet3d-small")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--speeds", default="0.9,0.3")
    parser.add_argument("--ratios", default="7:1,3:1,5:3,1:1",
                        type=lambda s: [ratio(r) for r in s.split(",")])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--profile", help="a profile of these workers (default: profile them)")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    speeds = [float(s) for s in args.speeds.split(",")]
    if len(speeds) != 2:
        parser.error("--speeds: two workers")
    work = tempfile.mkdtemp(prefix="filter-ratios-")
    with LocalCluster(speeds=speeds) as cluster:
        described = cluster.describe()
        cluster_file = os.path.join(work, "cluster.json")
        with open(cluster_file, "w") as f:
            json.dump({"worker": list(cluster.addresses)}, f)
        profile_file = args.profile or os.path.join(work, "profile.json")
        if not args.profile:
            subprocess.run([sys.executable, "-m", "meshpar", "profile", "--cluster",
                            cluster_file, "--model", args.model, "--batch", str(args.batch),
                            "--out", profile_file], check=True, capture_output=True)
        profile = ClusterSpec.load(profile_file)
        cost = CostModel(describe_model(args.model), profile, args.batch)
        plans = {f"{a:g}:{b:g}": build_plan(f"filter-{a:g}-{b:g}", cost, 1, 2, [0, 1], [1.0],
                                            [a, b]) for a, b in args.ratios}
        steps = {name: [] for name in plans}
        for run in range(args.rounds):
            for name, plan in plans.items():
                summary = run_strategy(args.model, plan, cluster_file, work,
                                       "filter-" + name.replace(":", "-"), args.steps,
                                       args.batch, run=run, cluster=cluster,
                                       log=lambda *a: None)
                steps[name].append(summary["step_seconds_median"])
                print(f"round {run}  {name:>7}  {summary['step_seconds_median'] * 1e3:7.1f} ms",
                      flush=True)
    rows = []
    for name, plan in plans.items():
        measured = statistics.median(steps[name])
        predicted = float(cost.evaluate_plan(plan).seconds[0])
        rows.append({"ratio": name, "split_sizes": plan.split_sizes,
                     "step_seconds": steps[name], "measured_seconds": measured,
                     "predicted_seconds": predicted, "predicted_over_measured":
                     predicted / measured})
    print(f"{'ratio':>7} {'measured ms':>12} {'spread':>15} {'predicted':>10} {'pred/meas':>9}")
    for r in rows:
        lo, hi = min(r["step_seconds"]) * 1e3, max(r["step_seconds"]) * 1e3
        print(f"{r['ratio']:>7} {r['measured_seconds'] * 1e3:12.1f} {lo:7.1f}-{hi:<7.1f}"
              f" {r['predicted_seconds'] * 1e3:10.1f} {r['predicted_over_measured']:9.2f}")
    result = {"model": args.model, "batch": args.batch, "speeds": speeds,
              "rounds": args.rounds, "steps": args.steps, "cluster": described,
              "profile": profile.to_dict(), "overhead_flops": cost.split_overhead,
              "sync_jitter": cost.sync_jitter, "rows": rows,
              "spread_max_over_min": float(np.max([max(r["step_seconds"]) / min(r["step_seconds"])
                                                   for r in rows]))}
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
