"""Stored whole-network runs re-predicted by the current cost model (no training).

For every ``meshpar bench train`` result given (``train.json``), each row's
plan is priced again from that run's own stored profile, once by the cost
model as it is and once with the step's fixed part priced by FLOPs (as before
it went with the parameters, docs/cost_model.md), and set against the row's
measured median step: predicted / measured, before -> now.

    python benchmarks/repredict.py benchmarks/results/train-*/train.json
"""
from __future__ import annotations

import argparse
import json

from meshpar.models import describe_model
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.cost_model import CostModel


def cost_model(model: str, profile: ClusterSpec, batch: int, fixed_by_params: bool) -> CostModel:
    """The cost model of ``profile``; without ``fixed_by_params`` the step's fixed
    part is priced by FLOPs (and the split calibration refitted that way)."""
    cost = CostModel(describe_model(model), profile, batch)
    if not fixed_by_params:
        cost.fixed_seconds[:] = 0.0
        measured = (profile.extra or {}).get("split_seconds")
        if measured and cost.step_profile and "split_overhead_flops" not in profile.extra:
            cost.split_overhead, cost.sync_jitter = cost._calibrate(measured)
    return cost


def predicted_seconds(result: dict, row: dict, profile: ClusterSpec,
                      fixed_by_params: bool) -> float:
    """The predicted step of one row's plan (a worker alone: on that worker only)."""
    names = [d.device for d in profile.devices]
    perm = [names.index(d) for d in row["plan_devices"]]
    rows, cols = (int(part.split(":")[1]) for part in row["mesh"].split(";"))
    if len(perm) != len(names):
        profile = profile.subset([profile.devices[i] for i in perm])
        perm = list(range(len(perm)))
    cost = cost_model(result["model"], profile, result["batch"], fixed_by_params)
    dims = {k: v for k, v in row["split_sizes"].items() if k != "batch"}
    return float(cost.evaluate_sizes(rows, cols, perm, row["split_sizes"]["batch"],
                                     dims).seconds[0])


def repredict(path: str) -> list:
    """``[(model, strategy, before, now)]`` predicted / measured of every row that ran."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    out = []
    for result in data["models"]:
        profile = ClusterSpec.from_dict(data["profiles"][result["model"]])
        for name, row in result["strategies"].items():
            if "step_seconds_median" not in row:
                continue
            measured = row["step_seconds_median"]
            out.append((result["model"], name,
                        predicted_seconds(result, row, profile, False) / measured,
                        predicted_seconds(result, row, profile, True) / measured))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", help="train.json files of `meshpar bench train`")
    args = parser.parse_args(argv)
    for path in args.results:
        for model, name, before, now in repredict(path):
            mark = "" if abs(now - before) < 0.005 else "  *"
            print(f"{path:<72} {model:<18} {name:<20} {before:5.2f} -> {now:5.2f}{mark}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
