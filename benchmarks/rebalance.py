"""Re-balancing and elastic training on a LocalCluster of real worker processes.

Two TF gRPC workers, pinned one per core, throttled by cgroup CPU quota
(signal duty cycle without root). ``meshpar train --cluster`` runs as a
separate process, as a user would run it.

(a) Worker 0's CPU share drops from 0.9 to 0.3 at step ``--drop-at``:
    ``--rebalance`` next to the static plan (the same run replaying no
    re-plans) under the same change; samples/s (batch / median step) before
    the drop, between the drop and the re-plan, and after it, against the new
    ideal: the sum of each worker's samples/s alone (the whole model on one
    worker) at its new share.
(b) Worker 1 is killed after the checkpoint at ``--kill-after``, with
    ``--elastic --rebalance``: the run re-plans on worker 0 and reaches the
    final step.
(c) ``--steady-steps N``: what measuring costs when nothing changes. Both
    workers stay at 0.9; ``--rebalance`` runs and static runs of N steps
    alternate (``--steady-rounds`` each, on one cluster). The cost is the
    monitor's own account (``rebalance_monitor.overhead_fraction``: the
    probes' wall time and traced steps' excess over all the steps' time); the
    median step rates of both kinds of run are compared too (the probes run
    between steps, so that shows only what sampling does to the steps), and
    any re-plan the monitor made without cause is listed.

In both, the steps each run executed are listed from its step times: every
step once, except in (b) the steps after the last checkpoint before the kill,
which run again. Equality: each run's plans are replayed (``--replay-replans``:
the same meshes at the same steps, no measuring) on fresh workers and the
final checkpoints are compared variable by variable, bit for bit.

    .venv/bin/python benchmarks/rebalance.py            # ~10 min on 2 cores
"""
from __future__ import annotations

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

OUT = os.path.join(os.path.dirname(__file__), "results", "rebalance")


def _latest(model_dir) -> int:
    steps = [int(re.search(r"ckpt-(\d+)\.index$", p).group(1))
             for p in glob.glob(os.path.join(model_dir, "model.ckpt-*.index"))]
    return max(steps) if steps else 0


def _subjects(args) -> str:
    """Synthetic subjects of a run: 16, or two batches when that is more."""
    return str(max(16, 2 * args.batch))


def train(cluster, model_dir, args, extra, when=None, action=None) -> dict:
    """Run ``meshpar train`` on ``cluster``; call ``action()`` once the checkpoint
    of step ``when`` exists. Returns the JSON summary (+ wall seconds)."""
    path = os.path.join(model_dir + ".cluster.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"worker": cluster.addresses}, f)
    argv = [sys.executable, "-m", "meshpar", "train", "--synthetic", "--model", args.model,
            "--n-synthetic", _subjects(args), "--val-fraction", "0", "--no-progress", "--batch",
            str(args.batch), "--seed", "3", "--cluster", path, "--speeds", "0.9,0.9", "--mesh", args.mesh,
            "--steps", str(args.steps), "--checkpoint-every", str(args.checkpoint_every),
            "--json", "--model-dir", model_dir, "--worker-timeout", "60"] + extra
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    while when is not None and _latest(model_dir) < when and proc.poll() is None:
        time.sleep(0.05)
    if when is not None and proc.poll() is None:
        action()
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"meshpar train failed ({proc.returncode}):\n{err[-3000:]}")
    summary = json.loads(out.strip().splitlines()[-1])
    summary["wall_seconds"] = time.perf_counter() - started
    summary["log"] = [line for line in out.splitlines() if line.startswith("re-plan at")]
    return summary


def rate(summary, batch, first, last) -> float | None:
    """Samples/s of the median step among steps ``first..last`` (global steps)."""
    secs = [s for step, s in summary["step_times"] if first <= step <= last]
    return float(batch / np.median(secs)) if len(secs) >= 3 else None


def steps_run(summary) -> dict:
    steps = [step for step, _ in summary["step_times"]]
    repeated = sorted({s for s in steps if steps.count(s) > 1})
    return {"executed": len(steps), "distinct": len(set(steps)),
            "missing": sorted(set(range(1, max(steps) + 1)) - set(steps)), "repeated": repeated}


def weights(model_dir) -> dict:
    import tensorflow.compat.v1 as tf

    reader = tf.train.load_checkpoint(model_dir)
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}


def compare(dir_a, dir_b) -> dict:
    a, b = weights(dir_a), weights(dir_b)
    diff = max(float(np.max(np.abs(a[n].astype(np.float64) - b[n])) if a[n].size else 0.0)
               for n in a)
    same = sorted(a) == sorted(b) and all(np.array_equal(a[n], b[n]) for n in a)
    return {"variables": len(a), "bit_identical": bool(same), "max_abs_difference": diff,
            "global_step": [int(a["global_step"]), int(b["global_step"])]}


def replay(summary, model_dir, args, shares) -> dict:
    """The same plans at the same steps on fresh workers, no measuring."""
    path = model_dir + ".replans.json"
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"replans": summary["replans"]}, f)
    with LocalCluster(shares, throttle=args.throttle) as cluster:
        train(cluster, model_dir, args, ["--replay-replans", path])
    return compare(os.path.dirname(model_dir) + "/" + summary["_dir"], model_dir)


def alone(args, share, work) -> float:
    """Samples/s of the whole model on one worker at CPU ``share``."""
    with LocalCluster([share], throttle=args.throttle) as cluster:
        path = os.path.join(work, f"alone-{share}.cluster.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"worker": cluster.addresses}, f)
        argv = [sys.executable, "-m", "meshpar", "train", "--synthetic", "--model", args.model,
                "--n-synthetic", _subjects(args), "--val-fraction", "0", "--no-progress",
                "--batch",
                str(args.batch), "--cluster", path, "--steps", str(args.alone_steps), "--json",
                "--model-dir", os.path.join(work, f"alone-{share}")]
        out = subprocess.run(argv, capture_output=True, text=True, check=True,
                             env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")).stdout
    return json.loads(out.strip().splitlines()[-1])["samples_per_second"]


def profile_workers(args, work) -> str:
    """``meshpar profile --cluster --model`` of two workers at 0.9 (the run's start)."""
    path = os.path.join(work, "profile.json")
    with LocalCluster([0.9, 0.9], throttle=args.throttle) as cluster:
        cluster_file = os.path.join(work, "profile-cluster.json")
        with open(cluster_file, "w", encoding="utf-8") as f:
            json.dump({"worker": cluster.addresses}, f)
        subprocess.run([sys.executable, "-m", "meshpar", "profile", "--cluster", cluster_file,
                        "--model", args.model, "--batch", str(args.batch), "--out", path],
                       check=True, stdout=subprocess.DEVNULL,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    return path


def _every(args) -> list:
    """The sampling and re-planning flags: meshpar train's defaults unless
    --every/--trigger/--method say."""
    return ((["--rebalance-every", str(args.every)] if args.every else [])
            + (["--rebalance-trigger", str(args.trigger)] if args.trigger is not None else [])
            + (["--rebalance-method", args.method] if args.method else []))


def _no_replans(work) -> str:
    """A --replay-replans file with no re-plans: the static plan, timed like the others."""
    path = os.path.join(work, "none.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"replans": []}, f)
    return path


def scenario_drop(args, work) -> dict:
    runs = {}
    variants = [("rebalance", ["--rebalance", *_every(args)]),
                ("static", ["--replay-replans", _no_replans(work)])]
    if args.profile:
        variants.append(("rebalance-profile", [
            "--rebalance", *_every(args), "--rebalance-profile", profile_workers(args, work)]))
    for name, extra in variants:
        with LocalCluster([0.9, 0.9], throttle=args.throttle) as cluster:
            runs[name] = train(cluster, os.path.join(work, f"drop-{name}"), args, extra,
                               args.drop_at, lambda: cluster.set_speed(0, 0.3))
            runs[name]["_dir"] = f"drop-{name}"
    ideal = alone(args, 0.3, work) + alone(args, 0.9, work)
    reb = runs["rebalance"]
    replan_at = {}
    for name, summary in runs.items():
        drift = [r for r in summary["replans"]
                 if r["reason"] == "drift" and r["step"] > args.drop_at]
        replan_at[name] = drift[0]["step"] if drift else None
    at = replan_at["rebalance"]
    windows = {}
    for name, summary in runs.items():
        # the static run is read over the rebalance run's windows
        mine = replan_at[name] if name != "static" else at
        windows[name] = {
            "before_drop": rate(summary, args.batch, args.drop_at - 10, args.drop_at),
            "after_drop_before_replan": rate(summary, args.batch, args.drop_at + 2,
                                             (mine or args.steps)),
            "after_replan": rate(summary, args.batch, (mine or args.steps) + 3, args.steps)}
    series = {name: [[first, rate(summary, args.batch, first, first + 4)]
                     for first in range(1, args.steps - 3, 5)] for name, summary in runs.items()}
    after = windows["rebalance"]["after_replan"]
    return {"runs": {k: _slim(v) for k, v in runs.items()}, "windows_samples_per_s": windows,
            "series_5_step_windows": series,
            "new_ideal_samples_per_s": ideal, "replan_step": at,
            "steps_from_drop_to_replan": None if at is None else at - args.drop_at,
            "after_replan_over_ideal": None if after is None else after / ideal,
            "static_after_drop_over_ideal": (windows["static"]["after_replan"] or 0) / ideal,
            "replan_steps": replan_at,
            "after_replan_over_ideal_by_run": {
                k: None if w["after_replan"] is None else w["after_replan"] / ideal
                for k, w in windows.items()},
            "steps_run": {k: steps_run(v) for k, v in runs.items()},
            "replay_equality": replay(reb, os.path.join(work, "drop-replay"), args,
                                      [0.9, 0.9]),
            "replay_equality_profile": replay(
                runs["rebalance-profile"], os.path.join(work, "drop-profile-replay"), args,
                [0.9, 0.9]) if "rebalance-profile" in runs else None}


def scenario_kill(args, work) -> dict:
    with LocalCluster([0.9, 0.9], throttle=args.throttle) as cluster:
        summary = train(cluster, os.path.join(work, "kill"), args,
                        ["--elastic", "--rebalance", *_every(args)],
                        args.kill_after, lambda: cluster.kill_worker(1))
    summary["_dir"] = "kill"
    lost = [r for r in summary["replans"] if r["reason"] == "lost worker"]
    return {"run": _slim(summary), "final_step": _latest(os.path.join(work, "kill")),
            "resumed_from_checkpoint": lost[0]["step"] if lost else None,
            "steps_run": steps_run(summary),
            "after_loss_samples_per_s": rate(summary, args.batch,
                                             (lost[0]["step"] if lost else 0) + 3, args.steps),
            "replay_equality": replay(summary, os.path.join(work, "kill-replay"), args,
                                      [0.9, 0.9])}


def scenario_steady(args, work) -> dict:
    """(c): rebalance and static runs alternating on one unchanging cluster."""
    variants = {"rebalance": ["--rebalance", *_every(args)],
                "static": ["--replay-replans", _no_replans(work)]}
    steady = argparse.Namespace(**{**vars(args), "steps": args.steady_steps})
    rates = {name: [] for name in variants}
    monitor, replans = [], []
    with LocalCluster([0.9, 0.9], throttle=args.throttle) as cluster:
        for r in range(args.steady_rounds):
            for name, extra in variants.items():
                summary = train(cluster, os.path.join(work, f"steady-{name}-{r}"), steady, extra)
                rates[name].append(rate(summary, args.batch, 10, args.steady_steps))
                if name == "rebalance":
                    monitor.append((summary.get("rebalance_monitor") or {}).get(
                        "overhead_fraction"))
                    replans.extend(r_["step"] for r_ in summary["replans"])
    medians = {name: float(np.median(v)) for name, v in rates.items()}
    return {"steps": args.steady_steps, "rates_samples_per_s": rates, "median": medians,
            "step_rate_cost_fraction": 1.0 - medians["rebalance"] / medians["static"],
            "monitor_overhead_fraction": monitor, "replans_without_cause_at": replans}


def _slim(summary) -> dict:
    keep = ("replans", "log", "rebalance_monitor", "rebalance_samples", "samples_per_second",
            "wall_seconds", "steps", "last_loss", "step_times")
    return {k: summary.get(k) for k in keep}


def plot(result, path) -> None:
    """Samples/s per 5-step window, re-balanced and static, with the ideal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    drop = result["drop"]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for name, points in drop["series_5_step_windows"].items():
        xs = [x for x, y in points if y is not None]
        ax.plot(xs, [y for _, y in points if y is not None], marker="o", label=name)
    ax.axhline(drop["new_ideal_samples_per_s"], color="gray", ls="--", label="new ideal")
    ax.axvline(result["config"]["drop_at"], color="red", ls=":", label="share 0.9 -> 0.3")
    if drop["replan_step"]:
        ax.axvline(drop["replan_step"], color="green", ls=":", label="re-plan")
    ax.set_xlabel("global step (first of 5)")
    ax.set_ylabel("samples/s (median step)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> int:
    """Run both scenarios; write results/rebalance/rebalance.json and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resattnet3d-small")
    parser.add_argument("--mesh", default="batch:2",
                        help="mesh of the two workers (default: data parallel, batch:2)")
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--every", type=int, default=None,
                        help="--rebalance-every of the runs (default: meshpar train's)")
    parser.add_argument("--trigger", type=float, default=None,
                        help="--rebalance-trigger of the runs (default: meshpar train's)")
    parser.add_argument("--method", default=None,
                        help="--rebalance-method of the runs (default: meshpar train's)")
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--drop-at", type=int, default=20)
    parser.add_argument("--kill-after", type=int, default=20)
    parser.add_argument("--alone-steps", type=int, default=25)
    parser.add_argument("--throttle", default="auto")
    parser.add_argument("--profile", action="store_true",
                        help="also run --rebalance with --rebalance-profile (the workers "
                             "profiled first with meshpar profile --cluster --model)")
    parser.add_argument("--skip-kill", action="store_true",
                        help="skip the kill scenario")
    parser.add_argument("--skip-drop", action="store_true",
                        help="skip the drop scenario")
    parser.add_argument("--steady-steps", type=int, default=0,
                        help="also measure what monitoring costs on an unchanging cluster: "
                             "runs of this many steps (0: skip)")
    parser.add_argument("--steady-rounds", type=int, default=3,
                        help="rebalance and static runs each, alternating (default 3)")
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="meshpar-rebalance-") as work:
        result = {"config": vars(args), "loadavg_at_start": load,
                  "drop": None if args.skip_drop else scenario_drop(args, work),
                  "kill": None if args.skip_kill else scenario_kill(args, work),
                  "steady": scenario_steady(args, work) if args.steady_steps else None}
    result["loadavg_at_end"] = os.getloadavg()
    with open(os.path.join(args.out, "rebalance.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    if result["drop"] is not None:
        plot(result, os.path.join(args.out, "rebalance.png"))
        print(json.dumps({k: v for k, v in result["drop"].items() if k != "runs"}, indent=1))
    if result["steady"] is not None:
        print(json.dumps(result["steady"], indent=1))
    if result["kill"] is not None:
        print(json.dumps({k: v for k, v in result["kill"].items() if k != "run"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
