"""Planner benchmark: the GA judged against the exact optimum (MILP, HiGHS).

Three parts, every number from the cost model (constant-speed devices,
1.0 = 1e11 FLOP/s, 10 GB/s links unless said):

1. ``optimum``: vgg-cifar (batch 32), resattnet3d-small (16) and resattnet3d (8)
   on 3 to 8 devices of 2 to 4 kinds: even, proportional, GA and exact step
   times, the GA's ratio to the optimum, HiGHS's proven gap, planning times.
   The exact planner fixes the layout (every split dim of size >= M on
   ``model``): ``ga-fixed`` is the GA in that same space (``layout_gene=False``),
   judged against the optimum; ``ga`` is the GA with its layout gene, which
   may replicate dimensions and so go below that optimum (ratio < 1).
2. ``coupled``: instances where the choices couple (a fast device with little
   memory; a slow network): GA and exact against the proportional plan.
3. ``large``: 64 to 1024 devices (four kinds), where the MILP's placements are
   too many: the GA's plan against the lower bound (total work / total peak
   speed) and the proportional plan; GA planning time, median of ``--repeat``.

    python benchmarks/planner.py [--quick] [--out benchmarks/results/planner.json]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time

from meshpar.models import describe_model
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.planners import ExactTimeLimit, plan

TYPES = {2: [1.0, 0.4], 3: [1.0, 0.6, 0.25], 4: [1.0, 0.7, 0.4, 0.2]}
MODELS = (("vgg-cifar", 32), ("resattnet3d-small", 16), ("resattnet3d", 8))


def cluster_of(n: int, kinds: int, **options) -> ClusterSpec:
    """n devices cycling through ``kinds`` speed classes."""
    speeds = TYPES[kinds]
    return ClusterSpec.from_speeds([speeds[i % kinds] for i in range(n)], **options)


def compare(model, cluster, batch, time_limit: float) -> dict:
    """Every planner on one instance (all devices used: the instance as given)."""
    row = {"model": model.name, "devices": len(cluster.devices), "batch": batch, "plans": {}}
    for method in ("even", "proportional", "ga-fixed", "ga", "exact"):
        options = {"time_limit": time_limit} if method == "exact" else {}
        if method == "ga-fixed":
            options = {"layout_gene": False}
        t0 = time.perf_counter()
        try:
            p = plan(model, cluster, batch, method=method.replace("-fixed", ""), seed=0,
                     **options)
        except ExactTimeLimit as err:  # not proven in the limit: its best and gap
            p = dataclasses.replace(err.plan, planning_seconds=time.perf_counter() - t0)
            row["unproven"] = str(err)
        except ValueError as err:
            row["plans"][method] = {"error": str(err), "planning_seconds":
                                    time.perf_counter() - t0}
            continue
        row["plans"][method] = {"seconds": p.predicted_step_seconds, "feasible": p.feasible,
                                "planning_seconds": p.planning_seconds,
                                "mesh": p.mesh_shape_string(),
                                "replicated": p.extra.get("replicated", [])}
        if method == "exact":
            row["gap"] = p.extra.get("gap")
            row["bound"] = p.extra.get("lower_bound_seconds")
    exact = row["plans"]["exact"].get("seconds")
    for entry in row["plans"].values():
        if exact and "seconds" in entry:
            entry["ratio_to_exact"] = entry["seconds"] / exact
    return row


def optimum_cases(quick: bool) -> list:
    sizes = (3, 5, 8) if quick else range(3, 9)
    return [(name, batch, n, kinds) for name, batch in MODELS for n in sizes
            for kinds in range(2, min(4, n) + 1)]


def coupled_cases() -> list:
    """(label, model, cluster, batch): choices that interact. A fast device with
    little memory: its share, the mesh shape and the per-layer splits must
    change together (memory grows with both batch share and filter share)."""
    net = describe_model("resattnet3d")
    out = []
    for gib in (0.6, 1.0, 1.5, 2.0):
        devices = ClusterSpec.from_speeds([1.0, 0.4, 0.4, 0.4]).devices
        small = dataclasses.replace(devices[0], memory_bytes=int(gib * 2**30))
        out.append((f"fast device {gib} GiB", net, ClusterSpec((small,) + devices[1:]), 8))
    out.append(("1 GB/s, 1 ms links", describe_model("vgg-cifar"),
                cluster_of(6, 3, bandwidth=1e9, latency=1e-3), 32))
    return out


def large(n: int, repeat: int) -> dict:
    """GA on n devices of four kinds (resattnet3d-small, batch n): plan and timings."""
    model, cluster = describe_model("resattnet3d-small"), cluster_of(n, 4)
    prop = plan(model, cluster, n, method="proportional")
    times, result = [], None
    for _ in range(repeat):
        result = plan(model, cluster, n, method="ga", seed=0)
        times.append(result.planning_seconds)
    return {"devices": n, "batch": n, "ga_seconds": result.predicted_step_seconds,
            "proportional_seconds": prop.predicted_step_seconds,
            "bound": result.lower_bound_seconds, "mesh": result.mesh_shape_string(),
            "ga_planning_seconds_median": statistics.median(times),
            "ga_planning_seconds": times}


def _print_row(label: str, row: dict) -> None:
    p = row["plans"]

    def cell(method, key="seconds", fmt="{:.5g}"):
        return fmt.format(p[method][key]) if key in p[method] else "-"

    print(f"{label:<30}{cell('proportional'):>10}{cell('ga-fixed'):>10}{cell('exact'):>10}"
          f"{cell('ga-fixed', 'ratio_to_exact', '{:.4f}'):>9}"
          f"{cell('ga', 'ratio_to_exact', '{:.4f}'):>9}{len(p['ga'].get('replicated', [])):>4}"
          f"{cell('proportional', 'ratio_to_exact', '{:.4f}'):>9}"
          f"{'{:.1e}'.format(row['gap']) if row.get('gap') is not None else '-':>9}"
          f"{cell('ga', 'planning_seconds', '{:.2f}'):>8}"
          f"{cell('exact', 'planning_seconds', '{:.2f}'):>8}  {p['exact'].get('mesh', '-')}")
    sys.stdout.flush()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer instances")
    parser.add_argument("--time-limit", type=float, default=60.0,
                        help="exact planner's limit per instance (s)")
    parser.add_argument("--repeat", type=int, default=3, help="GA runs per large cluster")
    parser.add_argument("--out", default="planner_benchmark.json")
    args = parser.parse_args(argv)
    header = (f"{'instance':<30}{'prop':>10}{'ga-fixed':>10}{'exact':>10}{'gaF/opt':>9}"
              f"{'ga/opt':>9}{'rep':>4}"
              f"{'prop/opt':>9}{'gap':>9}{'ga s':>8}{'milp s':>8}  mesh (exact)")
    print(header + "\n" + "-" * len(header))
    optimum = []
    for name, batch, n, kinds in optimum_cases(args.quick):
        row = compare(describe_model(name), cluster_of(n, kinds), batch, args.time_limit)
        row["kinds"] = kinds
        optimum.append(row)
        _print_row(f"{name} n={n} kinds={kinds}", row)
    print("\ncoupled choices\n" + header + "\n" + "-" * len(header))
    coupled = []
    for label, model, cluster, batch in coupled_cases():
        row = compare(model, cluster, batch, args.time_limit)
        row["label"] = label
        coupled.append(row)
        _print_row(f"{model.name}: {label}", row)
    sizes = (64, 256) if args.quick else (64, 256, 1024)
    print(f"\nlarge clusters (resattnet3d-small, batch = devices, GA median of {args.repeat})")
    print(f"{'devices':>8}{'ga s':>11}{'prop s':>11}{'bound s':>11}{'ga/bound':>9}"
          f"{'prop/ga':>9}{'plan s':>8}  mesh")
    big = []
    for n in sizes:
        r = large(n, args.repeat)
        big.append(r)
        print(f"{n:>8}{r['ga_seconds']:>11.5g}{r['proportional_seconds']:>11.5g}"
              f"{r['bound']:>11.5g}{r['ga_seconds'] / r['bound']:>9.3f}"
              f"{r['proportional_seconds'] / r['ga_seconds']:>9.3f}"
              f"{r['ga_planning_seconds_median']:>8.2f}  {r['mesh']}")
        sys.stdout.flush()
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"optimum": optimum, "coupled": coupled, "large": big}, f, indent=2)
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
