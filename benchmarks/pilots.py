"""Recipe pilots compared run for run: ``meshpar evaluate`` results side by side.

Each pilot is one ``meshpar evaluate --out DIR ...`` (a model, a ``--train-args``
change) over the same data seeds and folds as the baseline, the first
``NAME=DIR`` given. For one task and configuration, every directory's runs are
paired with the baseline's by (seed, fold), and the table gives each pilot's
mean +/- std of accuracy and AUC over the paired runs and the paired difference
of accuracy (mean, sample std, 95% t interval, wins/ties/losses); runs missing
from either side are named and left out.

    python benchmarks/pilots.py default=/tmp/p48 grid64=/tmp/p64 \\
        --task smci-pmci --config one-device --out pilots.json

The runs themselves are ``meshpar evaluate`` (docs/accuracy.md); this script only
reads their ``accuracy.json``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from meshpar.evaluation.metrics import mean_std, paired_comparison

METRICS = ("accuracy", "auc")


def read_runs(directory: str, task: str, config: str) -> dict:
    """``{(seed, fold): run}`` of one task and configuration of an evaluate result."""
    path = Path(directory) / "accuracy.json"
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    try:
        runs = data["tasks"][task]["configs"][config]["runs"]
    except KeyError:
        raise SystemExit(f"{path}: no runs of task {task!r}, configuration {config!r}") from None
    return {(r["seed"], r["fold"]): r for r in runs}


def compare(pilots: list, task: str, config: str) -> dict:
    """Each pilot against the first over the runs both hold."""
    names = [name for name, _ in pilots]
    if len(set(names)) != len(names):  # a second NAME= would silently replace the first
        raise SystemExit(f"pilot names must differ, got {', '.join(names)}")
    runs = {name: read_runs(d, task, config) for name, d in pilots}
    base_name = pilots[0][0]
    base = runs[base_name]
    out = {"task": task, "config": config, "baseline": base_name,
           "directories": dict(pilots), "pilots": {}}
    for name, _ in pilots:
        keys = sorted(set(base) & set(runs[name]))
        missing = sorted(set(base) ^ set(runs[name]))
        if not keys:
            raise SystemExit(f"{name}: no run shares a (seed, fold) with {base_name}")
        row = {"runs": [{"seed": s, "fold": k,
                         **{m: runs[name][s, k]["metrics"][m] for m in METRICS}}
                        for s, k in keys],
               "not_paired": [list(k) for k in missing]}
        for m in METRICS:
            row[m] = mean_std([runs[name][k]["metrics"][m] for k in keys])
        if name != base_name:
            row["paired_accuracy"] = paired_comparison(
                [base[k]["metrics"]["accuracy"] for k in keys],
                [runs[name][k]["metrics"]["accuracy"] for k in keys])
        out["pilots"][name] = row
    return out


def format_table(result: dict) -> str:
    lines = [f"{result['task']}, {result['config']}; paired with {result['baseline']}",
             f"{'pilot':16s} {'runs':>4s}  {'accuracy':16s} {'AUC':16s} paired difference"]
    for name, row in result["pilots"].items():
        acc, auc = row["accuracy"], row["auc"]
        paired = row.get("paired_accuracy")
        interval = "one run: no 95% CI" if paired is None or paired["ci95"] is None else (
            f"95% CI {paired['ci95'][0]:+.3f}..{paired['ci95'][1]:+.3f}")
        diff = "-" if paired is None else (
            f"{paired['mean_difference']:+.3f} (sd {paired['std_difference']:.3f}, {interval}; "
            f"{paired['wins']}/{paired['ties']}/{paired['losses']})")
        lines.append(f"{name:16s} {acc['n']:4d}  {acc['mean']:.3f} +/- {acc['std']:.3f}  "
                     f"{auc['mean']:.3f} +/- {auc['std']:.3f}  {diff}")
        if row["not_paired"]:
            lines.append(f"{'':16s} not paired (seed, fold): {row['not_paired']}")
    return "\n".join(lines)


def parse_pilot(text: str) -> tuple:
    name, sep, directory = text.partition("=")
    if not sep or not name or not directory:
        raise argparse.ArgumentTypeError(f"expected NAME=DIR, got {text!r}")
    return name, directory


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pilots", nargs="+", type=parse_pilot,
                        help="NAME=DIR of a meshpar evaluate result; the first is the baseline")
    parser.add_argument("--task", default="smci-pmci")
    parser.add_argument("--config", default="one-device")
    parser.add_argument("--note", default=None, help="what was run, recorded in the JSON")
    parser.add_argument("--out", help="write the comparison as JSON here")
    args = parser.parse_args(argv)
    result = compare(args.pilots, args.task, args.config)
    if args.note:
        result["note"] = args.note
    print(format_table(result))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
