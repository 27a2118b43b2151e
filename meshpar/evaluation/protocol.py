"""The accuracy protocol: train and predict over seeds and folds, each run in its own process.

A protocol is a grid of runs: for every task (a label pair, e.g. NC/AD), every
seed and every chosen test fold, one run per configuration (one device, an
uneven mesh). Configurations of the same (task, seed, fold) share the data,
the test subjects, the training seed and every training option except where
the model runs, so they can be compared pair by pair.

Each run is ``meshpar train`` then ``meshpar predict`` in a fresh Python
process: no TensorFlow graph, session or environment leaks from one run into
the next, at most ``jobs`` run at a time, and a run is exactly what a user
gets from the command line. A run whose predictions file exists is not run
again, so an interrupted protocol resumes where it stopped.

Layout under the output directory::

    data/<task>-seed<S>/                 phantoms (or your --data, read in place)
    runs/<task>-seed<S>-fold<I>/<config>/  model/, train.log, train.json, predictions.csv
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import multiprocessing
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

__all__ = ["TASKS", "Config", "Run", "default_configs", "prepare_phantoms", "plan_runs",
           "train_command", "predict_command", "execute", "execute_all", "cross_predictions",
           "cross_predict_all"]

# Task name -> (class 0, class 1); class 1 is the patient group.
TASKS: Dict[str, Tuple[str, str]] = {"ad-nc": ("NC", "AD"), "smci-pmci": ("sMCI", "pMCI")}


@dataclass(frozen=True)
class Config:
    """A way to run training: its name and the ``meshpar train`` options that place it."""

    name: str
    train_args: Tuple[str, ...] = ()


def default_configs(speeds: str = "0.9,0.3,0.6", mesh: str = "batch:1;model:3") -> List[Config]:
    """One device, and an uneven mesh of emulated devices of ``speeds`` laid out as ``mesh``."""
    return [Config("one-device"), Config("uneven-mesh", ("--speeds", speeds, "--mesh", mesh))]


@dataclass(frozen=True)
class Run:
    """One training run of the protocol and where it keeps its files."""

    task: str
    labels: Tuple[str, str]
    seed: int
    folds: int
    fold: int
    config: Config
    data_dir: Path
    run_dir: Path = field(compare=False)

    @property
    def key(self) -> str:
        """``<task>-seed<S>-fold<I>``: the runs of all configurations with this key are paired."""
        return f"{self.task}-seed{self.seed}-fold{self.fold}"

    @property
    def model_dir(self) -> Path:
        """Checkpoints of this run."""
        return self.run_dir / "model"

    @property
    def predictions(self) -> Path:
        """Per-subject probabilities on the held-out fold (``meshpar predict``)."""
        return self.run_dir / "predictions.csv"

    @property
    def summary(self) -> Path:
        """The JSON summary ``meshpar train --json`` printed last."""
        return self.run_dir / "train.json"


def prepare_phantoms(out_dir, task: str, labels: Sequence[str], seed: int, n: int,
                     shape: Sequence[int], kind: str = "geometric") -> Path:
    """Write (or reuse) the phantom cohort of ``task`` and ``seed``; returns its directory.

    A directory from an earlier call is reused when its ``phantoms.json``
    matches (subjects, shape, seed, labels, kind); anything else there is
    refused, never overwritten.
    """
    directory = Path(out_dir) / "data" / f"{task}-seed{seed}"
    want = {"n": int(n), "shape": [int(s) for s in shape], "seed": int(seed),
            "label_set": list(labels)}
    meta_path = directory / "phantoms.json"
    if (directory / "labels.csv").is_file() and meta_path.is_file():
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        got = {k: meta.get(k) for k in want}
        if got == want and meta.get("anatomy", "geometric") == kind:
            return directory
        raise ValueError(f"{directory} holds other phantoms ({got}); use a new output directory")
    if kind == "geometric":
        from meshpar.data.phantoms import write_dataset
    elif kind == "template":
        from meshpar.data.template_phantoms import write_dataset
    else:
        raise ValueError(f"phantoms must be 'geometric' or 'template', got {kind!r}")
    # Written aside and renamed when complete: an interrupted protocol leaves a
    # ``.partial`` directory (its own scratch, redone on the next call), never
    # a half cohort under the real name that the next call would have to refuse.
    if directory.exists() and any(directory.iterdir()):
        raise ValueError(f"{directory} is not empty and holds no phantom cohort; refusing to "
                         "overwrite it: use a new output directory")
    partial = directory.with_name(directory.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    write_dataset(partial, n, shape=tuple(shape), seed=seed, label_set=tuple(labels))
    os.replace(partial, directory)
    return directory


def prepare_all_phantoms(out_dir, cohorts: Sequence[Tuple[str, Sequence[str], int]], n: int,
                         shape: Sequence[int], kind: str = "geometric",
                         jobs: int = 1) -> Dict[Tuple[str, int], Path]:
    """:func:`prepare_phantoms` for each ``(task, labels, seed)``, ``jobs`` cohorts at a
    time in worker processes (writing a cohort is numpy work under the GIL: a
    10-seed, two-task protocol at 48^3 spent ~10 minutes on it one at a time).
    Each cohort depends only on its seed, so the files are the same either way.
    Returns ``{(task, seed): directory}``; the first error is raised."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    args = [(out_dir, task, tuple(labels), seed, n, tuple(shape), kind)
            for task, labels, seed in cohorts]
    if jobs == 1 or len(args) < 2:
        dirs = [prepare_phantoms(*a) for a in args]
    else:
        # fork (works from any script, notebook or stdin) unless TensorFlow is loaded:
        # its threads do not survive a fork, so then spawn (which re-imports __main__)
        context = multiprocessing.get_context(
            "spawn" if "tensorflow" in sys.modules else "fork")
        with ProcessPoolExecutor(max_workers=min(jobs, len(args)), mp_context=context) as pool:
            dirs = list(pool.map(prepare_phantoms, *zip(*args)))
    return {(task, seed): d for (task, _, seed), d in zip(cohorts, dirs)}


def plan_runs(out_dir, data_dirs: Dict[Tuple[str, int], Path], seeds: Sequence[int],
              folds: int, fold_ids: Sequence[int], configs: Sequence[Config],
              tasks: Dict[str, Tuple[str, str]]) -> List[Run]:
    """Every run of the grid, paired configurations next to each other.

    ``tasks``: task name -> its two labels; ``data_dirs``: (task, seed) -> dataset.
    """
    if folds < 2:
        raise ValueError(f"folds must be >= 2, got {folds}")
    bad = [i for i in fold_ids if not 0 <= i < folds]
    if bad or not fold_ids:
        raise ValueError(f"test folds must be in [0, {folds}), got {list(fold_ids)}")
    names = [c.name for c in configs]
    if len(set(names)) != len(names) or not names:
        raise ValueError(f"configuration names must be distinct, got {names}")
    runs = []
    for task, labels in tasks.items():
        for seed in seeds:
            for fold in fold_ids:
                for config in configs:
                    run_dir = Path(out_dir) / "runs" / f"{task}-seed{seed}-fold{fold}" / config.name
                    runs.append(Run(task, tuple(labels), int(seed), int(folds), int(fold), config,
                                    Path(data_dirs[(task, seed)]), run_dir))
    return runs


def _split_args(run: Run) -> List[str]:
    return ["--folds", str(run.folds), "--fold", str(run.fold), "--fold-seed", str(run.seed)]


def train_command(run: Run, model: str, train_args: Sequence[str] = (),
                  threads: int = 1) -> List[str]:
    """``meshpar train`` argv of ``run`` (the interpreter running this code)."""
    return ([sys.executable, "-m", "meshpar", "train", "--data", str(run.data_dir),
             "--labels", ",".join(run.labels), "--model", model, "--seed", str(run.seed)]
            + _split_args(run)
            + ["--model-dir", str(run.model_dir), "--threads", str(threads), "--no-progress",
               "--json"] + list(train_args) + list(run.config.train_args))


def predict_command(run: Run, threads: int = 1, model_run: Optional[Run] = None,
                    out: Optional[Path] = None) -> List[str]:
    """``meshpar predict`` argv writing ``run``'s held-out predictions, on the run's
    own mesh, from the checkpoint training kept as best (``--keep-best``) if any,
    else the latest. ``model_run``: predict that run's model instead (on
    ``run``'s mesh), to ``out``."""
    model_dir = (model_run or run).model_dir
    best = (model_dir / "best" / "best.json").is_file()
    return ([sys.executable, "-m", "meshpar", "predict", "--model-dir", str(model_dir),
             "--data", str(run.data_dir)] + _split_args(run)
            + ["--out", str(out or run.predictions), "--force", "--threads", str(threads),
               "--checkpoint", "best" if best else "latest"] + list(run.config.train_args))


def cross_predictions(run: Run) -> Path:
    """Where the first configuration's model, predicted on ``run``'s mesh, is written."""
    return run.run_dir / "predictions-first-config-model.csv"


def cross_predict_all(pairs: Sequence[Tuple[Run, Run]], jobs: int = 1,
                      threads: int = 1) -> None:
    """For each ``(base, other)``: predict ``base``'s trained model on ``other``'s
    mesh (inference parity: same weights, another mesh), unless done already."""
    def one(pair):
        base, other = pair
        if not cross_predictions(other).is_file():
            _call(predict_command(other, threads, model_run=base, out=cross_predictions(other)),
                  other.run_dir / "train.log")

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, pairs))


class CommandFailed(RuntimeError):
    """A ``meshpar train``/``predict`` process of the protocol exited non-zero; its
    ``returncode`` (2: the command refused its input)."""

    def __init__(self, message: str, returncode: int):
        super().__init__(message)
        self.returncode = returncode


def _call(cmd: List[str], log: Path) -> str:
    """Run ``cmd``, its output going to ``log`` as it comes (appended); returns
    that output, or raises RuntimeError naming the log."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONHASHSEED="0")
    with open(log, "a", encoding="utf-8") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        start = f.tell()
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, text=True, env=env)
    with open(log, encoding="utf-8") as f:
        f.seek(start)
        output = f.read()
    if proc.returncode != 0:
        last = (output.strip() or "no output").splitlines()[-1]
        raise CommandFailed(f"{' '.join(cmd[2:4])} failed (exit {proc.returncode}): {last}; "
                            f"see {log}", proc.returncode)
    return output


def execute(run: Run, model: str, train_args: Sequence[str] = (), threads: int = 1) -> dict:
    """Train and predict ``run`` unless its predictions exist; returns its train summary.

    The summary is the ``--json`` line of ``meshpar train`` (losses, timing,
    validation and test metrics) plus ``seconds``, the wall time of both steps;
    for a run kept from an earlier call, also ``kept``: True (not stored).
    """
    if run.predictions.is_file() and run.summary.is_file():
        return dict(json.loads(run.summary.read_text(encoding="utf-8")), kept=True)
    run.run_dir.mkdir(parents=True, exist_ok=True)
    log = run.run_dir / "train.log"
    if run.model_dir.exists():
        # An interrupted run (no predictions yet): train would resume from its last
        # checkpoint (the same weights in the end), but its summary would then time
        # and report only the resumed steps; the protocol's own scratch is trained anew.
        shutil.rmtree(run.model_dir)
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"# interrupted run: {run.model_dir} removed, trained from the start\n")
    start = time.perf_counter()
    out = _call(train_command(run, model, train_args, threads), log)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"meshpar train printed no JSON summary; see {log}")
    summary = json.loads(lines[-1])
    _call(predict_command(run, threads), log)
    summary["seconds"] = time.perf_counter() - start
    summary["train_command"] = _recorded(train_command(run, model, train_args, threads))
    tmp = run.summary.with_suffix(".tmp")
    tmp.write_text(json.dumps(summary, indent=1), encoding="utf-8")
    os.replace(tmp, run.summary)
    return summary


def _recorded(argv: Sequence[str]) -> List[str]:
    """A train command as a finished run records it (from ``train`` on: the
    interpreter's path may change between sessions)."""
    return list(argv[list(argv).index("train"):])


def check_finished(runs: Sequence[Run], model: str, train_args: Sequence[str] = (),
                   threads: int = 1) -> None:
    """ValueError when a finished run in the output directory was trained with another
    command than this protocol would run (other speeds, mesh, model, training
    arguments...): resuming would report its results under this protocol's name."""
    for run in runs:
        if not (run.predictions.is_file() and run.summary.is_file()):
            continue
        done = json.loads(run.summary.read_text(encoding="utf-8")).get("train_command")
        want = _recorded(train_command(run, model, train_args, threads))
        done, want = (None if done is None else _without_paths(done)), _without_paths(want)
        if done is not None and done != want:
            then, now = _options(done), _options(want)
            differ = [f"{k} {then.get(k, '(none)')} -> {now.get(k, '(none)')}"
                      for k in dict.fromkeys(list(then) + list(now)) if then.get(k) != now.get(k)]
            raise ValueError(f"{run.run_dir} was trained with another command "
                             f"({'; '.join(differ[:4]) or 'option order'}); use a new --out, "
                             "or the same options to resume")


#: Flags whose values are paths under ``--out``: the same run spelled from another
#: working directory (or a moved ``--out``) is still the same run.
_PATH_FLAGS = ("--data", "--model-dir")


def _without_paths(argv: Sequence[str]) -> List[str]:
    out, skip = [], False
    for token in argv:
        if skip:
            skip = False
        elif token in _PATH_FLAGS:
            skip = True
        else:
            out.append(token)
    return out


def _options(argv: Sequence[str]) -> dict:
    """``{flag: value}`` of an argv (a flag without a value maps to ``True``)."""
    out = {}
    for i, token in enumerate(argv):
        if token.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out[token] = nxt if nxt is not None and not nxt.startswith("--") else True
    return out


def execute_all(runs: Sequence[Run], model: str, train_args: Sequence[str] = (),
                jobs: int = 1, threads: int = 1,
                report: Optional[Callable[[Run, dict], None]] = None) -> Dict[Run, dict]:
    """:func:`execute` every run, ``jobs`` at a time; ``report(run, summary)`` after each.

    A failed run stops the protocol once the runs already started have ended
    (their results stay on disk for the next attempt).
    """
    if jobs < 1 or threads < 1:
        raise ValueError(f"jobs and threads must be >= 1, got {jobs} and {threads}")
    results: Dict[Run, dict] = {}

    def one(run):
        summary = execute(run, model, train_args, threads)
        if report is not None:
            report(run, summary)
        return run, summary

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for run, summary in pool.map(one, runs):
            results[run] = summary
    return results
