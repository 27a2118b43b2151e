"""Every worker alone, all at once: the ideal when every worker computes at the same time.

The benchmark's ideal is the sum of the workers' rates, each measured alone
while the others are idle. A split makes them compute at the same time, and
workers that share a machine (a LocalCluster: two cores of one socket) then
share its memory bandwidth and last-level cache, so each computes a sample
more slowly than it did alone. That loss is the host's, not the split's:
:func:`run_together` measures it by training each worker's one-device plan in
its own ``meshpar train --cluster`` process, all of them started together, so
that their steady steps overlap. The sum of those rates is the ideal of a
busy host (``ideal_together``); the ordinary ideal stays the reference of
every target.

So that every worker's steady steps fall while the others still train, each
runs ``steps`` times its alone rate over the slowest worker's, plus a margin
(:func:`together_steps`); the summary says how much of each worker's steady
window the other windows covered (``overlap``).
"""
from __future__ import annotations

import json
import math
import os
import subprocess
from typing import Optional, Sequence

from meshpar.bench.train_runs import file_stem, median_run, train_argv

#: The name of the row in a round and of the model's ``together`` block.
TOGETHER = "alone-together"

#: The faster workers' extra steps, for their shorter start-up and warm-up.
MARGIN = 1.3


def together_steps(steps: int, alone_rates: Sequence[float], margin: float = MARGIN) -> list:
    """Steps for each worker so that all train for about as long as the slowest
    does with ``steps``: ``steps`` times its rate over the slowest rate, times
    ``margin`` for the others (the slowest runs ``steps``)."""
    rates = [float(r) for r in alone_rates]
    if not rates or min(rates) <= 0:
        raise ValueError(f"alone rates must be > 0, got {list(alone_rates)}")
    slowest = min(rates)
    return [int(steps) if r == slowest else int(math.ceil(steps * r / slowest * margin))
            for r in rates]


def overlap(windows: Sequence[Sequence[float]]) -> list:
    """For each window ``[start, end]``: the part of it that every other window covers
    (1.0 for one window alone)."""
    out = []
    for i, (start, end) in enumerate(windows):
        if not end > start:
            raise ValueError(f"window {i} must end after it starts, got {start}..{end}")
        lo = max([start] + [w[0] for j, w in enumerate(windows) if j != i])
        hi = min([end] + [w[1] for j, w in enumerate(windows) if j != i])
        out.append(max(0.0, hi - lo) / (end - start))
    return out


def run_together(model: str, plans: Sequence, cluster_file: str, work: str,
                 steps: Sequence[int], batch: int, seed: int = 0, log=print, run: int = 0,
                 cluster=None) -> dict:
    """Train one-device ``plans[i]`` for ``steps[i]`` steps, all at once, each in its
    own ``meshpar train --cluster --plan`` process; one summary: ``samples_per_second``
    (the sum of the workers' steady rates), ``per_worker`` (each one's rate),
    ``overlap`` (:func:`overlap` of their steady windows), ``steps``, and with
    ``cluster`` (a LocalCluster) ``worker_share_used`` (each worker's CPU share
    used over its own steady window). RuntimeError naming the worker whose run
    failed."""
    from meshpar.runtime.cpu_usage import CpuSampler

    if len(plans) != len(steps):
        raise ValueError(f"{len(plans)} plans for {len(steps)} step counts")
    procs, logs = [], []
    sampler = CpuSampler([p.pid for p in cluster.processes]) if cluster is not None else None
    if sampler is not None:
        sampler.start()
    try:
        for task, (plan, count) in enumerate(zip(plans, steps)):
            name = os.path.join(work, f"{file_stem(model)}-together-{task}")
            plan.save(name + ".plan.json")
            argv = train_argv(model, cluster_file, name + ".plan.json", int(count), batch,
                              trace_step=None, model_dir=f"{name}-run{run}", upstream=False,
                              seed=seed)
            # into files, not pipes: a process must never wait for its pipe to be read
            logs.append((open(f"{name}.out", "w+"), open(f"{name}.err", "w+")))
            procs.append(subprocess.Popen(argv, stdout=logs[-1][0], stderr=logs[-1][1],
                                          text=True,
                                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")))
        for p in procs:
            p.wait()
        outputs = []
        for out, err in logs:
            out.seek(0)
            err.seek(0)
            outputs.append((out.read(), err.read()))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for files in logs:
            for f in files:
                f.close()
        if sampler is not None:
            sampler.stop()
    summaries = []
    for task, (p, (out, err)) in enumerate(zip(procs, outputs)):
        if p.returncode != 0:
            tail = (err.strip().splitlines() or ["(no output)"])[-1]
            raise RuntimeError(f"meshpar train failed for {model} / worker {task} alone "
                               f"(all at once): {tail}")
        summaries.append(json.loads(out.strip().splitlines()[-1]))
    summary = _combined(summaries, steps)
    if sampler is not None:
        summary["worker_share_used"] = _shares(sampler, summaries, cluster.speeds)
    over = summary["overlap"]
    log(f"  {TOGETHER:<20} {summary['samples_per_second']:8.2f} samples/s = "
        + " + ".join(f"{r:.2f}" for r in summary["per_worker"])
        + ("" if over is None else
           "  (steady windows overlapping " + "/".join(f"{o:.2f}" for o in over) + ")"))
    return summary


def _combined(summaries: Sequence[dict], steps: Sequence[int]) -> dict:
    """The together row of the workers' ``meshpar train --json`` summaries."""
    rates = [s["samples_per_second"] for s in summaries]
    if any(r is None for r in rates):
        raise RuntimeError("a worker's run had too few steady steps to measure; raise --steps")
    windows = [s.get("steady_window_unix") for s in summaries]
    return {"samples_per_second": float(sum(rates)), "per_worker": [float(r) for r in rates],
            "steps": [int(s) for s in steps],
            "overlap": overlap(windows) if all(windows) else None,
            "steady_windows_unix": windows}


def _shares(sampler, summaries: Sequence[dict], speeds: Sequence[float]) -> Optional[list]:
    """Each worker's part of its CPU share used over its own run's steady window."""
    from meshpar.runtime.cpu_usage import share_used

    out = []
    for task, s in enumerate(summaries):
        window = s.get("steady_window_unix")
        used = sampler.cpu_seconds_between(*window) if window else None
        if used is None:
            return None
        out.append(share_used(used, window[1] - window[0], speeds)[task])
    return out


def together_block(runs, ideal: float) -> dict:
    """The model's ``together`` block from the rounds' summaries: the median run (by
    the sum), every run's sum and spread, and the sum over the ordinary ``ideal``;
    a run that failed: its ``{"skipped": why}``."""
    if isinstance(runs, dict):
        return dict(runs)
    row = median_run(list(runs))
    row["of_ideal"] = row["samples_per_second"] / ideal
    return row


def format_line(block: dict) -> str:
    """One table line: the busy host's ideal, its parts, and how the windows overlapped."""
    if "samples_per_second" not in block:
        return f"  every worker alone, all at once: skipped: {block.get('skipped', '')}"
    parts = " + ".join(f"{r:.2f}" for r in block["per_worker"])
    spread = ""
    if block.get("runs", 1) > 1:
        spread = "  runs {:.1f}-{:.1f}".format(*block["samples_per_second_min_max"])
    over = block.get("overlap")
    over = ("; steady windows overlapping " + "/".join(f"{o:.2f}" for o in over)) if over else ""
    return (f"  every worker alone, all at once (the busy host's ideal): "
            f"{block['samples_per_second']:.2f} = {parts} samples/s, "
            f"{block['of_ideal']:.2f} of the ideal{over}{spread}")
