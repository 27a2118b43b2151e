"""The same two workers listed both ways, side by side: does the planner's plan train
as fast whichever worker a cluster file lists first?

Two LocalClusters throttled to the same shares in the two orders (``--speeds
0.9,0.3`` and ``0.3,0.9``: task 0 is pinned to core 0, so the listing also decides
which core the fast worker gets). Each is profiled and planned as a user does
(``meshpar profile --cluster --model``, ``meshpar plan --profile``); then the two
plans train through ``meshpar train --cluster --plan`` in interleaved rounds
(synthetic data, fresh model directories, the JSON summary's steady-state
samples/s), the order within a round alternating.

    python benchmarks/listing_orders.py --model resattnet3d-small --batch 32 \\
        --steps 30 --rounds 4 --out orders.json

Prints each plan and each run; ``--out`` writes the plans, the runs, their medians
and the ratio of the medians (second listing over first) as JSON.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile

from meshpar.bench.train_runs import run_train_command, train_argv
from meshpar.runtime.local_cluster import LocalCluster


def _meshpar(*args) -> None:
    subprocess.run([sys.executable, "-m", "meshpar", *args], check=True, capture_output=True,
                   env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resattnet3d-small")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--speeds", default="0.9,0.3",
                        help="the first listing; the second is its reverse")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    first = [float(s) for s in args.speeds.split(",")]
    listings = {",".join(map(str, s)): s for s in (first, first[::-1])}
    result = {"model": args.model, "batch": args.batch, "steps": args.steps,
              "rounds": args.rounds, "orders": {}}
    with contextlib.ExitStack() as stack:
        work = stack.enter_context(tempfile.TemporaryDirectory())
        setup = {}
        for name, speeds in listings.items():
            cluster = stack.enter_context(LocalCluster(speeds))
            cluster_file = os.path.join(work, f"cluster-{name}.json")
            profile, plan = (os.path.join(work, f"{what}-{name}.json")
                             for what in ("profile", "plan"))
            with open(cluster_file, "w", encoding="utf-8") as f:
                json.dump({"worker": list(cluster.addresses)}, f)
            _meshpar("profile", "--cluster", cluster_file, "--model", args.model,
                     "--batch", str(args.batch), "--out", profile)
            _meshpar("plan", "--profile", profile, "--batch", str(args.batch),
                     "--out", plan)
            with open(plan, encoding="utf-8") as f:
                p = json.load(f)
            setup[name] = (cluster_file, plan)
            result["orders"][name] = {
                "devices": p["devices"], "split_sizes": p["split_sizes"],
                "mesh_shape": p["mesh_shape"],
                "predicted_step_seconds": p["predicted_step_seconds"], "runs": []}
            print(f"listed {name}: plan {p['split_sizes']} on {p['devices']}", flush=True)
        names = list(listings)
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                cluster_file, plan = setup[name]
                out = run_train_command(train_argv(
                    args.model, cluster_file, plan, args.steps, args.batch, None,
                    os.path.join(work, f"run-{name}-{r}"), False, 0), name)
                rate = json.loads(out.strip().splitlines()[-1])["samples_per_second"]
                result["orders"][name]["runs"].append(rate)
                print(f"round {r} listed {name}: {rate:.1f} samples/s", flush=True)
    for entry in result["orders"].values():
        entry["median"] = statistics.median(entry["runs"])
    a, b = (result["orders"][n]["median"] for n in listings)
    result["second_over_first"] = b / a
    print(f"medians {a:.1f} and {b:.1f} samples/s: second listing / first = {b / a:.3f}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
