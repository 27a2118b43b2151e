"""Measured speed-up of the planned hybrid step from 1 to N emulated devices,
next to the cost model's predicted curve.

For n = 1..N a LocalCluster of the first n speeds is started, each worker is
profiled alone, the GA plans the workload, and the plan's step is measured.
Speed-up is relative to the first device alone. With more workers than cores
the workers share cores (labelled in the output): a separate case from the
one-worker-per-core default (docs/measuring.md).

    python benchmarks/scaling.py [--speeds 0.45,0.45,0.45,0.45] [--quick] [--out scaling.json]
"""
import argparse
import json
import os
import sys

from meshpar.bench import hetero as bench_hetero


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--speeds", default="0.45,0.45,0.45,0.45")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    speeds = [float(s) for s in args.speeds.split(",")]
    rows = []
    for n in range(1, len(speeds) + 1):
        result = bench_hetero.run_benchmark(speeds[:n], quick=args.quick, steps=args.steps,
                                            only_ga=True, log=lambda *a: None)
        ga = result["strategies"]["ga"]
        rows.append({"devices": n, "speeds": speeds[:n],
                     "workers_per_core": n / (os.cpu_count() or 1),
                     "mesh": ga["mesh_shape"], "samples_per_second": ga["samples_per_second"],
                     "predicted_step_seconds": ga["predicted_step_seconds"],
                     "measured_step_seconds": ga["median_step_seconds"],
                     "ideal_samples_per_second": result["ideal_samples_per_second"]})
        print(f"n={n}: {ga['mesh_shape']}, {ga['samples_per_second']:.2f} samples/s", flush=True)
    base, base_pred = rows[0]["samples_per_second"], rows[0]["predicted_step_seconds"]
    print(f"\n{'n':>2s} {'mesh':18s} {'measured':>9s} {'predicted':>9s} {'of ideal':>8s}  cores")
    for r in rows:
        r["speedup"] = r["samples_per_second"] / base
        r["predicted_speedup"] = base_pred / r["predicted_step_seconds"]
        shared = " (workers share cores)" if r["workers_per_core"] > 1 else ""
        print(f"{r['devices']:2d} {r['mesh']:18s} {r['speedup']:8.2f}x {r['predicted_speedup']:8.2f}x"
              f" {r['samples_per_second'] / r['ideal_samples_per_second']:8.2f}{shared}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
