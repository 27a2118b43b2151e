"""Planner benchmark: even / proportional / exact / ga on simulated clusters.

Clusters of 4 to 1024 devices mixing 2-4 device types (constant speed
profiles, 10 GB/s links). For each: predicted step time of every planner, its
ratio to the exact optimum where the exhaustive search is small enough, else
to the lower bound (total work / total speed), and planning time. Then the
1..64-device scaling of resattnet3d by the cost model (speed-up over one
device), showing where communication bends the curve.

    python benchmarks/planner.py [--quick] [--out planner.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.description import Layer, ModelDescription
from meshpar.models import describe_model
from meshpar.planning.planners import plan

TYPES = {2: [1.0, 0.4], 3: [1.0, 0.6, 0.25], 4: [1.0, 0.7, 0.4, 0.2]}


def tiny_model() -> ModelDescription:
    """Small enough for the exhaustive search on 4 devices."""
    return ModelDescription("tiny-2conv", (
        Layer("c1", "conv3d", 2e8, 2000, 4000, 12 * 4000, "c1_filters", 12, "allconcat"),
        Layer("c2", "conv3d", 3e8, 3000, 12 * 4000, 10 * 2000, "c2_filters", 10, "allconcat"),
        Layer("fc", "dense", 1e6, 500, 10 * 2000, 10)), input_elems=4000)


def cluster_of(n: int, kinds: int) -> ClusterSpec:
    speeds = TYPES[kinds]
    return ClusterSpec.from_speeds([speeds[i % kinds] for i in range(n)])


def run_case(model, n, kinds, batch, ga_options):
    cluster = cluster_of(n, kinds)
    row = {"model": model.name, "devices": n, "types": kinds, "batch": batch, "plans": {}}
    for method in ("even", "proportional", "exact", "ga"):
        try:
            options = ga_options if method == "ga" else {}
            p = plan(model, cluster, batch, method=method, seed=0, **options)
        except ValueError as err:
            row["plans"][method] = {"error": str(err).splitlines()[0]}
            continue
        row["plans"][method] = {"seconds": p.predicted_step_seconds,
                                "planning_seconds": p.planning_seconds,
                                "mesh": p.mesh_shape_string(), "feasible": p.feasible}
        row["lower_bound"] = p.lower_bound_seconds
    exact = row["plans"]["exact"].get("seconds")
    row["reference"] = "exact" if exact else "lower bound"
    ref = exact or row["lower_bound"]
    for entry in row["plans"].values():
        if "seconds" in entry:
            entry["ratio"] = entry["seconds"] / ref
    return row


def scaling(model_name: str, batch: int, sizes, ga_options) -> list:
    model = describe_model(model_name)
    base = plan(model, ClusterSpec.from_speeds([1.0]), batch, method="proportional")
    out = []
    for n in sizes:
        p = plan(model, ClusterSpec.from_speeds([1.0] * n), batch, method="ga", **ga_options)
        out.append({"devices": n, "seconds": p.predicted_step_seconds,
                    "speedup": base.predicted_step_seconds / p.predicted_step_seconds,
                    "mesh": p.mesh_shape_string()})
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, smaller cases")
    parser.add_argument("--out", default="planner_benchmark.json")
    args = parser.parse_args(argv)
    ga = {"generations": 60, "population": 24} if args.quick else {}
    cases = [(tiny_model(), 4, 2, 8), (tiny_model(), 4, 4, 6),
             (describe_model("vgg-cifar"), 8, 2, 32),
             (describe_model("resattnet3d-small"), 16, 3, 32),
             (describe_model("resattnet3d-small"), 64, 4, 128),
             (describe_model("resattnet3d-small"), 256, 4, 256)]
    if not args.quick:
        cases += [(describe_model("resattnet3d-small"), 1024, 4, 1024),
                  (describe_model("resattnet3d"), 64, 4, 64)]
    rows = []
    header = (f"{'model':<18}{'n':>5}{'types':>6}{'batch':>6}  {'method':<13}"
              f"{'step s':>11}{'ratio':>8}  {'vs':<12}{'plan s':>8}  mesh")
    print(header)
    print("-" * len(header))
    for model, n, kinds, batch in cases:
        row = run_case(model, n, kinds, batch, ga)
        rows.append(row)
        for method, entry in row["plans"].items():
            if "error" in entry:
                print(f"{row['model']:<18}{n:>5}{kinds:>6}{batch:>6}  {method:<13}"
                      f"{'-':>11}{'-':>8}  {'(too large)':<12}")
                continue
            print(f"{row['model']:<18}{n:>5}{kinds:>6}{batch:>6}  {method:<13}"
                  f"{entry['seconds']:>11.5f}{entry['ratio']:>8.3f}  {row['reference']:<12}"
                  f"{entry['planning_seconds']:>8.3f}  {entry['mesh']}")
        sys.stdout.flush()
    sizes = [1, 2, 4, 8, 16, 32, 64]
    model_name = "resattnet3d-small" if args.quick else "resattnet3d"
    print(f"\nscaling of {model_name} (batch 64, identical devices, cost model):")
    print(f"{'devices':>8}{'step s':>11}{'speed-up':>10}  mesh")
    curve = scaling(model_name, 64, sizes, ga)
    for point in curve:
        print(f"{point['devices']:>8}{point['seconds']:>11.5f}{point['speedup']:>10.2f}  "
              f"{point['mesh']}")
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"cases": rows, "scaling": {"model": model_name, "batch": 64,
                                              "points": curve}}, f, indent=2)
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
