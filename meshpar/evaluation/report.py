"""Score the protocol's runs and summarise them: metrics, ceilings, paired comparison, plot.

Every run is scored from its ``predictions.csv`` (one row per held-out
subject). Before scoring, the held-out subjects are checked against the
fold the protocol asked for, recomputed here from ``labels.csv`` with
:func:`meshpar.data.fold_split`: the same subjects, and no person on both
sides. On phantom data the ceilings (:mod:`meshpar.evaluation.ceiling`) are
fitted on that fold's other subjects and scored on the same held-out ones.
"""
from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np

from meshpar.evaluation.ceiling import CEILINGS, ceiling_metrics, load_truth
from meshpar.evaluation.metrics import (METRICS, binary_metrics, mean_std, paired_comparison,
                                        prediction_agreement)
from meshpar.evaluation.protocol import Run, cross_predictions

__all__ = ["read_predictions", "check_fold", "score_run", "summarize", "format_table",
           "plot_summary"]


def _key(path, data_dir, known=None) -> str:
    """A subject's file relative to its dataset directory (as ``labels.csv`` names it).
    With ``known`` (the dataset's keys), a path that does not lead into ``data_dir``
    from here (written by ``meshpar predict`` relative to where it ran, before the
    output folder moved) is the known key it ends with, the longest."""
    key = os.path.normpath(os.path.relpath(os.path.realpath(path), os.path.realpath(data_dir)))
    if known is None or key in known:
        return key
    parts = os.path.normpath(path).split(os.sep)
    tails = (os.path.join(*parts[i:]) for i in range(len(parts)) if parts[i:] != [""])
    return next((t for t in tails if t in known), key)


def read_predictions(path, data_dir, positive_label: str, known=None) -> Dict[str, dict]:
    """``predictions.csv`` of ``meshpar predict`` -> subject key -> ``{"y", "p", "person"}``
    (``y``: 1 for ``positive_label``; ``p``: its probability). ``known``: the dataset's
    subject keys, to find a moved prediction's subject by (:func:`_key`)."""
    out = {}
    with open(path, newline="", encoding="utf-8", errors="surrogateescape") as f:
        reader = csv.DictReader(f)  # paths of non-UTF-8 bytes: as write_predictions wrote
        column = f"p_{positive_label}"
        if column not in (reader.fieldnames or []):
            raise ValueError(f"{path}: no column {column} (columns: {reader.fieldnames})")
        for row in reader:
            out[_key(row["path"], data_dir, known)] = {
                "y": int(row["label"] == positive_label), "p": float(row[column]),
                "person": row["subject_id"] or row["path"]}
    if not out:
        raise ValueError(f"{path}: no predictions")
    return out


def check_fold(run: Run, predicted_keys: Sequence[str]) -> List[str]:
    """The keys of the training side of ``run``'s fold, after checking the held-out side.

    ValueError when the predicted subjects are not exactly the requested
    fold, or when a person has scans on both sides.
    """
    from meshpar.data import fold_split, person_id, read_labels

    subjects = read_labels(run.data_dir, run.labels)
    rest, held = fold_split(subjects, run.folds, run.fold, seed=run.seed)
    held_keys = {_key(s.path, run.data_dir) for s in held}
    if held_keys != set(predicted_keys):
        raise ValueError(f"{run.predictions}: predicted subjects differ from fold {run.fold} of "
                         f"{run.folds} (seed {run.seed}): {len(set(predicted_keys) ^ held_keys)} "
                         "differ")
    both = {person_id(s) for s in rest} & {person_id(s) for s in held}
    if both:
        raise ValueError(f"{run.key}: person {sorted(both)[0]} is in training and test")
    return [_key(s.path, run.data_dir) for s in rest]


def score_run(run: Run, summary: dict) -> dict:
    """Metrics of one run's held-out predictions, its ceilings (phantoms only) and
    what its training reported."""
    from meshpar.data import read_labels

    known = {_key(s.path, run.data_dir) for s in read_labels(run.data_dir, run.labels)}
    preds = read_predictions(run.predictions, run.data_dir, run.labels[1], known)
    keys = sorted(preds)
    rest = check_fold(run, keys)
    y = [preds[k]["y"] for k in keys]
    p = [preds[k]["p"] for k in keys]
    scored = {"key": run.key, "seed": run.seed, "fold": run.fold, "config": run.config.name,
              "metrics": binary_metrics(y, p), "p": {k: preds[k]["p"] for k in keys},
              "train": {k: summary.get(k) for k in ("steps", "last_loss", "best", "seconds",
                                                    "train_seconds", "test") if k in summary}}
    cross = cross_predictions(run)
    if cross.is_file():  # the first configuration's model, predicted on this run's mesh
        scored["p_first_model"] = {k: v["p"] for k, v in
                                   read_predictions(cross, run.data_dir, run.labels[1],
                                                    known).items()}
    if (run.data_dir / "phantoms.json").is_file():
        scored["ceilings"] = ceiling_metrics(load_truth(run.data_dir), rest, keys, run.labels[1])
    return scored


def _spread(rows: Sequence[dict], metric: str) -> dict:
    values = [r[metric] for r in rows if not math.isnan(r[metric])]
    return mean_std(values) if values else {"mean": float("nan"), "std": float("nan"), "n": 0}


def summarize(scored: Sequence[dict], tasks: Dict[str, Sequence[str]],
              configs: Sequence[str]) -> dict:
    """Per task: each configuration's runs and mean +/- std of every metric, the
    ceilings, and each configuration paired with the first (same keys)."""
    out = {}
    for task in tasks:
        rows = [r for r in scored if r["key"].startswith(task + "-")]
        if not rows:
            continue
        by_config = {c: sorted((r for r in rows if r["config"] == c), key=lambda r: r["key"])
                     for c in configs}
        entry = {"labels": list(tasks[task]), "configs": {}}
        for c, runs in by_config.items():
            entry["configs"][c] = {
                "runs": [{k: r[k] for k in ("key", "seed", "fold", "metrics", "train")}
                         for r in runs],
                "summary": {m: _spread([r["metrics"] for r in runs], m) for m in METRICS}}
        first = by_config[configs[0]]
        if first and "ceilings" in first[0]:
            entry["ceilings"] = {name: {m: _spread([r["ceilings"][name] for r in first], m)
                                        for m in METRICS} for name in CEILINGS}
        entry["paired"] = {c: _paired(first, by_config[c]) for c in configs[1:]}
        out[task] = entry
    return out


def _paired(base: Sequence[dict], other: Sequence[dict]) -> dict:
    """``other`` against ``base`` over the keys both ran: each metric and the predictions."""
    b = {r["key"]: r for r in base}
    o = {r["key"]: r for r in other}
    keys = sorted(set(b) & set(o))
    if not keys:
        return {}
    result = {m: paired_comparison([b[k]["metrics"][m] for k in keys],
                                   [o[k]["metrics"][m] for k in keys])
              for m in ("accuracy", "balanced_accuracy", "auc")}
    agree = [prediction_agreement(b[k]["p"], o[k]["p"]) for k in keys]
    n = sum(a["subjects"] for a in agree)
    result["predictions"] = {
        "subjects": n,
        "max_abs_p_difference": max(a["max_abs_p_difference"] for a in agree),
        "mean_abs_p_difference": sum(a["mean_abs_p_difference"] * a["subjects"]
                                     for a in agree) / n,
        "label_agreement": sum(a["label_agreement"] * a["subjects"] for a in agree) / n}
    same = [prediction_agreement(b[k]["p"], o[k]["p_first_model"]) for k in keys
            if "p_first_model" in o[k]]
    if same:  # inference alone: one set of weights, predicted on both meshes
        result["same_weights"] = {
            "subjects": sum(a["subjects"] for a in same),
            "max_abs_p_difference": max(a["max_abs_p_difference"] for a in same),
            "label_agreement": sum(a["label_agreement"] * a["subjects"] for a in same)
            / sum(a["subjects"] for a in same)}
    return result


def _pm(s: dict, runs: int) -> str:
    """``mean +/- std`` over the runs; one run has no spread to show (its std is 0). A
    metric undefined in some of the ``runs`` (the AUC, sensitivity or specificity of a
    test fold holding one class) says over how many it is taken: the table's 'runs'
    column stood for all of them."""
    if s["n"] == 0:
        return "-"
    text = f"{s['mean']:.3f}" if s["n"] == 1 else f"{s['mean']:.3f} +/- {s['std']:.3f}"
    return text if s["n"] == runs else f"{text} ({s['n']} of {runs} runs)"


def format_table(summary: dict) -> str:
    """A plain-text table: one row per task and configuration (and ceiling),
    mean +/- std of every metric over the runs."""
    head = ["task", "model / ceiling", "runs"] + list(METRICS)
    lines = []
    for task, entry in summary.items():
        for c, data in entry["configs"].items():
            s = data["summary"]
            runs = s["accuracy"]["n"]  # defined in every run
            lines.append([task, c, str(runs)] + [_pm(s[m], runs) for m in METRICS])
        for name, s in entry.get("ceilings", {}).items():
            runs = s["accuracy"]["n"]
            lines.append([task, f"ceiling: {name}", str(runs)]
                         + [_pm(s[m], runs) for m in METRICS])
    widths = [max(len(r[i]) for r in lines + [head]) for i in range(len(head))]
    fmt = "  ".join(f"{{:{w}s}}" for w in widths)
    out = [fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*r) for r in lines]
    for task, entry in summary.items():
        for c, p in entry["paired"].items():
            if not p:
                continue
            a, pr = p["accuracy"], p["predictions"]
            interval = ("one paired run: no confidence interval" if a["ci95"] is None else
                        f"95% CI {a['ci95'][0]:+.3f}..{a['ci95'][1]:+.3f}, {a['n']} paired runs")
            out.append(f"{task}: {c} - {next(iter(entry['configs']))}: accuracy "
                       f"{a['mean_difference']:+.3f} ({interval}); predictions: max |dp| "
                       f"{pr['max_abs_p_difference']:.2e}, labels agree "
                       f"{pr['label_agreement']:.3f} of {pr['subjects']} subjects")
            if "same_weights" in p:
                sw = p["same_weights"]
                out.append(f"{task}: one-device weights predicted on {c}: max |dp| "
                           f"{sw['max_abs_p_difference']:.2e}, labels agree "
                           f"{sw['label_agreement']:.3f} of {sw['subjects']} subjects")
    return "\n".join(out)


def plot_summary(summary: dict, path) -> str:
    """One panel per task: mean +/- std of each metric per configuration, each
    run as a dot, the ceilings' accuracy as dashed lines. Returns the PNG path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from meshpar.viz import save_figure

    tasks = list(summary)
    fig, axes = plt.subplots(1, len(tasks), figsize=(6.5 * len(tasks), 4.2), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        entry = summary[task]
        configs = list(entry["configs"])
        width = 0.8 / len(configs)
        x = np.arange(len(METRICS))
        for j, c in enumerate(configs):
            s = entry["configs"][c]["summary"]
            pos = x + (j - (len(configs) - 1) / 2) * width
            ax.bar(pos, [s[m]["mean"] for m in METRICS], width,
                   yerr=[s[m]["std"] for m in METRICS], capsize=3, label=c, alpha=0.8)
            for i, m in enumerate(METRICS):
                vals = [r["metrics"][m] for r in entry["configs"][c]["runs"]]
                ax.plot([pos[i]] * len(vals), vals, "k.", markersize=3)
        styles = {"disease_stage": ":", "anatomy": "--"}
        for name, s in entry.get("ceilings", {}).items():
            ax.axhline(s["accuracy"]["mean"], color="grey", linestyle=styles.get(name, "-."),
                       label=f"ceiling ({name}) acc {s['accuracy']['mean']:.2f}")
        ax.set_xticks(x)
        ax.set_xticklabels([m.replace("_", "\n") for m in METRICS])
        ax.set_ylim(0, 1.05)
        ax.set_title(f"{task} ({' vs '.join(reversed(entry['labels']))}), "
                     f"{entry['configs'][configs[0]]['summary']['accuracy']['n']} runs")
        ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return str(path)
