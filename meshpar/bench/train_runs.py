"""One ``meshpar train --cluster --plan`` run of a benchmark: its command, its
process, and the median of a strategy's repeated runs."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Optional


def file_stem(model: str) -> str:
    """``model`` (a ``--models`` entry) as part of a file name in the work directory: a
    registered name as it is, a network of one's own (an absolute path or a module
    with ``:ATTR``) with each run of characters other than letters, digits, ``-``,
    ``.`` and ``_`` as one ``_``."""
    return re.sub(r"[^\w.-]+", "_", model).strip("_")


def train_argv(model: str, cluster_file: str, plan_file: str, steps: int, batch: int,
               trace_step: Optional[int], model_dir: str, upstream: bool, seed: int) -> list:
    """The ``meshpar train --cluster --plan`` command a benchmark runs (synthetic data,
    ``upstream``: Mesh-TF's own ``PlacementMeshImpl``)."""
    return [sys.executable, "-m", "meshpar", "train", "--synthetic", "--model", model,
            "--cluster", cluster_file, "--plan", plan_file, "--steps", str(steps),
            "--batch", str(batch), "--n-synthetic", str(max(4 * batch, 32)),
            "--val-fraction", "0", "--no-progress", "--json",
            "--model-dir", model_dir, "--seed", str(seed)] + (
                ["--mesh-impl", "mtf"] if upstream else []) + (
                [] if trace_step is None else ["--trace-step", str(trace_step)])


def run_train_command(argv: list, what: str) -> str:
    """Run a :func:`train_argv` command; its stdout, or RuntimeError naming ``what``
    with the last line it wrote to stderr."""
    proc = subprocess.run(argv, capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"meshpar train failed for {what}: {tail}")
    return proc.stdout


def median_run(runs: list) -> dict:
    """The run of median samples/s (the lower middle one of an even count), with
    every run's rate and their spread: its trace and step statistics stay those of
    one real run."""
    ordered = sorted(runs, key=lambda r: r["samples_per_second"])
    row = dict(ordered[(len(ordered) - 1) // 2])
    rates = [r["samples_per_second"] for r in runs]
    row.update(samples_per_second_runs=rates, runs=len(runs),
               samples_per_second_min_max=[min(rates), max(rates)])
    return row
