"""``meshpar evaluate``: the accuracy protocol, one device and an uneven mesh side by side.

For each task (NC/AD, sMCI/pMCI phantoms, or your ``--data``), each seed and
each test fold: ``meshpar train`` (its defaults unless ``--train-args`` says
otherwise) then ``meshpar predict``, once on one device and once on an uneven
mesh, each in its own process. Reports mean +/- std of accuracy, balanced
accuracy, AUC, sensitivity and specificity, the data's learnability ceilings
(phantoms), and the mesh paired with one device: metric differences and
per-subject prediction agreement. Writes ``accuracy.json`` and
``accuracy.png`` to ``--out``; rerunning resumes (finished runs are kept).

Example::

    meshpar evaluate --out results/acc --seeds 0,1,2,3,4 --jobs 2
"""
from __future__ import annotations

import argparse
import math
import os
import shlex
import sys
import time
from pathlib import Path

from meshpar.cli.parsing import (MAX_SEED, int_text, label_names, path_text,
                                 refuse_file_as_directory, seed_too_large, thread_count)
from meshpar.planning.jsonio import dumps_strict, write_text_atomic

EPILOG = """examples:
  meshpar evaluate --out acc                      both tasks, 5 seeds, fold 0 of 5 each
  meshpar evaluate --out acc --tasks smci-pmci --seeds 0 --test-folds all
  meshpar evaluate --out acc --data mydata --labels sMCI,pMCI --seeds 0,1,2
  meshpar evaluate --out acc --train-args "--steps 400 --lr 3e-4"
"""


#: defaults of the options that only phantom tasks (``tasks``, ``n``, ``phantoms``) or
#: the uneven mesh (``speeds``, ``mesh``) use: None until then, so that one given where
#: it would be ignored (with --data, with --only one-device) is refused, not dropped
DEFAULTS = {"tasks": "ad-nc,smci-pmci", "n": 400, "phantoms": "geometric",
            "speeds": "0.9,0.3,0.6", "mesh": "batch:1;model:3"}


def _int_list(text: str) -> list:
    try:
        values = [int_text(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


def register(subparsers) -> None:
    """Add ``meshpar evaluate`` to ``subparsers``."""
    parser = subparsers.add_parser(
        "evaluate", help="accuracy over seeds and folds: one device vs an uneven mesh",
        description=__doc__.split("\n\n")[1], epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=path_text, required=True,
                        help="results directory (created; reused to resume)")
    parser.add_argument("--tasks", default=None,
                        help="phantom tasks: ad-nc, smci-pmci (default: both)")
    parser.add_argument("--data", type=path_text,
                        help="evaluate on this dataset instead of phantoms "
                             "(the seeds then only reshuffle the folds)")
    parser.add_argument("--labels", type=label_names,
                        help="with --data: the two classes, class 0 first")
    parser.add_argument("--phantoms", choices=["geometric", "template"], default=None,
                        help="template: built on the MNI152 template (needs nilearn, "
                             "`pip install meshpar[template]`) (default: geometric)")
    parser.add_argument("--n", type=int, default=None, help="phantoms per task and seed "
                                                           f"(default: {DEFAULTS['n']})")
    parser.add_argument("--seeds", type=_int_list, default=[0, 1, 2, 3, 4],
                        help="data, fold and training seeds (default: 0,1,2,3,4)")
    parser.add_argument("--folds", type=int, default=5, help="folds by person (default: 5)")
    parser.add_argument("--test-folds", default="0",
                        help="held-out folds run per seed: comma list or 'all' (default: 0)")
    parser.add_argument("--model", default="resattnet3d-wide-48",
                        help="built-in model, or a network of one's own taking 3-D "
                             "volumes (PATH.py[:ATTR] or MODULE[:ATTR], as train --model); "
                             "its input grid is the phantoms' grid (default: %(default)s)")
    parser.add_argument("--speeds", default=None,
                        help=f"emulated device speeds of the uneven mesh (default: "
                             f"{DEFAULTS['speeds']})")
    parser.add_argument("--mesh", default=None,
                        help=f"uneven mesh shape (default: {DEFAULTS['mesh']} for the default "
                             "speeds, batch:1;model:N for N given --speeds)")
    parser.add_argument("--only", choices=["one-device", "uneven-mesh"],
                        help="run one configuration instead of both")
    parser.add_argument("--train-args", default="",
                        help="extra `meshpar train` options for every run, one quoted string "
                             "(not those evaluate sets for every run, --cluster or --trace-out)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs (and phantom cohorts) at a time, at most the cores this "
                             "process may use (more are run that many at a time; default: 1)")
    parser.add_argument("--threads", type=thread_count, default=1,
                        help="TensorFlow threads per run (default 1: deterministic)")
    parser.add_argument("--json", action="store_true",
                        help="also print the summary as one JSON line, last on stdout")
    parser.set_defaults(func=run)


def _refuse_ignored(args) -> None:
    """ValueError for an option this run would ignore; then the defaults filled in."""
    unused = []
    if args.data:
        unused += [(name, "phantom tasks; --data evaluates its own dataset")
                   for name in ("tasks", "n", "phantoms")]
    if args.only == "one-device":
        unused += [(name, "the uneven mesh; --only one-device runs without it")
                   for name in ("speeds", "mesh")]
    for name, why in unused:
        if getattr(args, name) is not None:
            raise ValueError(f"--{name} goes with {why}, so this run would ignore it")
    if args.speeds is not None and args.mesh is None:  # the default mesh fits 3 devices:
        from meshpar.cli.parsing import parse_speeds  # one model column per given speed

        args.mesh = f"batch:1;model:{len(parse_speeds(args.speeds))}"
    for name, value in DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)


def _tasks(args) -> dict:
    """Task name -> its two labels."""
    from meshpar.evaluation.protocol import TASKS

    if args.data:
        labels = tuple(args.labels or ())
        if len(labels) != 2:
            raise ValueError("--data needs --labels with two classes, e.g. --labels sMCI,pMCI")
        _note_patients_first(labels)
        return {"data": labels}
    if args.labels:
        raise ValueError("--labels goes with --data (phantom tasks have their own labels)")
    names = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in names if t not in TASKS]
    if unknown or not names:
        raise ValueError(f"--tasks: unknown task(s) {unknown or names}; choose from "
                         f"{', '.join(TASKS)}")
    if len(set(names)) != len(names):  # was run once in silence, as --seeds and
        raise ValueError(f"--tasks repeats a task: {args.tasks!r}")  # --test-folds refuse
    return {t: TASKS[t] for t in names}


def _note_patients_first(labels) -> None:
    """A note on stderr when ``labels`` name the patient group first (AD,NC; pMCI,sMCI):
    class 1 is the positive class, so the report's sensitivity was the controls' recall
    and its specificity the patients', under those names, without a word."""
    from meshpar.data.phantoms import GROUP_SEVERITY

    first, second = (GROUP_SEVERITY.get(name) for name in labels)
    if first is not None and second is not None and first > second:
        print(f"meshpar evaluate: note: --labels {','.join(labels)} makes {labels[1]} class 1, "
              f"the positive class: sensitivity is the recall of {labels[1]} and specificity "
              f"of {labels[0]} (--labels {labels[1]},{labels[0]} for the patients' "
              "sensitivity)", file=sys.stderr)


def _test_folds(text: str, folds: int) -> list:
    if text.strip() == "all":
        return list(range(folds))
    try:
        fold_ids = [int_text(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--test-folds: expected comma-separated integers or 'all', "
                         f"got {text!r}") from None
    if not fold_ids or not all(0 <= f < folds for f in fold_ids):
        raise ValueError(f"--test-folds must be in 0..{folds - 1}, got {text!r}")
    if len(set(fold_ids)) != len(fold_ids):  # a run counted twice in the mean and spread
        raise ValueError(f"--test-folds repeats a fold: {text!r}")
    return fold_ids


#: ``meshpar train`` options that evaluate sets itself for every run, and the
#: evaluate option that decides each: set again in --train-args (argparse keeps
#: the last) they would train on another split than the one evaluate predicts
#: and reports, or into another directory.
SET_BY_EVALUATE = {
    "--data": "--data", "--synthetic": "--data or its phantoms", "--labels": "--labels",
    "--model": "--model", "--seed": "--seeds", "--folds": "--folds", "--fold": "--test-folds",
    "--fold-seed": "--seeds", "--test-fraction": "--folds", "--model-dir": "--out",
    "--threads": "--threads", "--speeds": "--speeds", "--mesh": "--mesh",
    "--plan": "--speeds and --mesh",
}


def _check_train_args(train_args) -> None:
    """Refuse --train-args that set an option evaluate sets itself (an abbreviation,
    which argparse would take, included)."""
    for token in train_args:
        name = token.split("=", 1)[0]
        if not name.startswith("--") or name == "--":
            continue
        hits = [option for option in SET_BY_EVALUATE if option.startswith(name)]
        if hits:
            option = name if name in SET_BY_EVALUATE else hits[0]
            raise ValueError(f"--train-args may not set {option}: evaluate sets it for every "
                             f"run (use evaluate's {SET_BY_EVALUATE[option]})")


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask, else the machine's)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity on this platform
        return os.cpu_count() or 1


def _check(args) -> None:
    """evaluate's own options, before any phantom or directory is made (ValueError)."""
    from meshpar.training.run import refuse_pattern_path

    _refuse_ignored(args)
    if args.jobs < 1 or args.threads < 1:
        raise ValueError("--jobs and --threads must be >= 1")
    cores = usable_cores()
    if args.jobs > cores:  # every run at once would only slow each other; results are the same
        print(f"meshpar evaluate: note: --jobs {args.jobs} is more than the {cores} cores this "
              f"process may use; running {cores} at a time (each run is a TensorFlow process "
              "of its own)", file=sys.stderr)
        args.jobs = cores
    refuse_pattern_path(args.out, "--out")  # each run's model directory is under it
    if args.folds < 2:  # before any phantom is written
        raise ValueError(f"--folds must be >= 2, got {args.folds}")
    refuse_file_as_directory(args.out)
    for name, what in (("labels.csv", "a dataset"), ("meshpar_run.json", "a train run")):
        if (Path(args.out) / name).is_file():  # its phantoms and runs went in among them
            raise ValueError(f"--out {args.out} is {what} (it holds {name}); give a directory "
                             "of its own for the results")
    _refuse_replacing_results(args.out)
    if args.n < 2 * args.folds:
        raise ValueError(f"--n {args.n} is too small for {args.folds} folds of both classes")
    if any(seed < 0 for seed in args.seeds):
        raise ValueError(f"--seeds must be >= 0, got {args.seeds}")
    for seed in args.seeds:  # each is a train run's --seed
        if seed > MAX_SEED:
            raise ValueError(f"--seeds: {seed_too_large(seed)}")
    if len(set(args.seeds)) != len(args.seeds):
        raise ValueError(f"--seeds repeats a seed: {args.seeds}")
    if args.data and not Path(args.data).is_dir():
        raise FileNotFoundError(f"--data {args.data}: no such directory")


class _NotEvaluated(ValueError):
    """A --train-args option evaluate refuses for every configuration alike."""


def _read_accuracy(path) -> None:
    """ValueError unless ``path`` holds an earlier ``accuracy.json`` of evaluate."""
    import json

    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or "tasks" not in data:  # older results: no "protocol"
        raise ValueError(f"{path} is not an evaluate result")


def _refuse_replacing_results(out) -> None:
    """accuracy.json and accuracy.png in ``out``, which evaluate writes after every run
    (hours): a directory there, or a file evaluate did not write, refused now (the file
    was replaced, and the user's lost; a directory failed once the runs were done)."""
    from meshpar.cli.parsing import refuse_replacing_another_kind
    from meshpar.cli.plan import _read_png

    for name, load, what in (("accuracy.json", _read_accuracy, "`meshpar evaluate` result"),
                             ("accuracy.png", _read_png, "PNG image")):
        path = Path(out) / name
        if path.is_dir():
            raise IsADirectoryError(f"--out {out}: {path} is a directory; evaluate writes its "
                                    f"{name} there as a file")
        refuse_replacing_another_kind(str(path), load, what)


def _check_runs(args, tasks, fold_ids, configs, train_args, out):
    """Every configuration's ``meshpar train`` arguments through train's own checks,
    before any phantom is written (ValueError); returns the last one's, parsed."""
    from meshpar.cli.train import check_argv
    from meshpar.evaluation import protocol

    task, labels = next(iter(tasks.items()))
    for config in configs:
        one = protocol.Run(task, tuple(labels), args.seeds[0], args.folds, fold_ids[0], config,
                           out / "check", out / "check")
        argv = protocol.train_command(one, args.model, train_args, args.threads)
        try:
            parsed = check_argv(argv[4:])
            if parsed.cluster:  # trained on the workers, predicted here: neither configuration
                raise _NotEvaluated(  # was what it was reported as
                    "--train-args may not set --cluster: evaluate trains and predicts every "
                    "run on this machine (one device, and emulated devices of --speeds for "
                    "the uneven mesh); on a cluster, run `meshpar train --cluster` and "
                    "`meshpar predict` yourself")
            if parsed.trace_out:  # one file for every run: each wrote over the last's
                raise _NotEvaluated(
                    "--train-args may not set --trace-out: every run would write its trace "
                    f"to {parsed.trace_out}, over the one before (--trace-step alone puts "
                    "each run's step breakdown in its train.log)")
            if not args.data and parsed.channels not in (None, 1):  # failed in the first
                # train, after every phantom was written
                raise ValueError(f"--channels {parsed.channels}: the phantoms have one "
                                 "channel; more need --data")
        except _NotEvaluated:
            raise
        except ValueError as err:
            raise ValueError(f"{config.name} configuration: {err}") from None
        if not args.data:
            _check_phantom_batches(args, tasks, fold_ids, parsed)
    return parsed


def _check_phantom_batches(args, tasks, fold_ids, parsed) -> None:
    """ValueError when a run's training phantoms (``--n`` less its test fold and
    validation share, split as train splits them) are fewer than its batch: train
    refused it only after every cohort had been written."""
    from meshpar.data.phantoms import label_counts
    from meshpar.data.types import Subject
    from meshpar.training.inputs import split_three_ways

    for task, labels in tasks.items():
        counts = label_counts(args.n, labels, None)  # the phantoms' labels, as written
        names = [f"sub-{i:04d}" for i in range(1, args.n + 1)]
        subjects = [Subject(Path(name), label, subject_id=name)
                    for name, label in zip(names, [lab for lab, c in zip(labels, counts)
                                                   for _ in range(c)])]
        for seed in args.seeds:
            for fold in fold_ids:
                train, _, _ = split_three_ways(subjects, parsed.val_fraction, seed,
                                               folds=args.folds, fold=fold, fold_seed=seed)
                if len(train) < parsed.batch:
                    raise ValueError(
                        f"--n {args.n}: task {task}, seed {seed}, fold {fold} of {args.folds} "
                        f"leaves {len(train)} training phantoms, fewer than the batch "
                        f"{parsed.batch}: raise --n or give a smaller --batch in --train-args")


def _check_data_batches(args, subjects, fold_ids, parsed) -> None:
    """ValueError when a run's training subjects of ``--data`` (``subjects``: the rows of
    the two labels, less its test fold and validation share, split as train splits
    them) lack a class: each run's train refused it, after evaluate had started it,
    naming its log. (Fewer than the batch is left to train: tests/test_evaluate.py
    fakes train's failure on such a dataset.)"""
    from meshpar.training.inputs import split_three_ways

    if parsed.skip_bad:  # train leaves a missing file out before it splits
        subjects = [s for s in subjects if Path(s.path).is_file()]
    labels = tuple(args.labels)
    for seed in args.seeds:
        for fold in fold_ids:
            train, _, _ = split_three_ways(subjects, parsed.val_fraction, seed,
                                           folds=args.folds, fold=fold, fold_seed=seed)
            where = (f"--data {args.data}: seed {seed}, fold {fold} of {args.folds} leaves "
                     f"{len(train)} training subjects")
            lacking = [name for name in labels if not any(s.label == name for s in train)]
            if lacking:
                raise ValueError(f"{where}, none of them {' or '.join(lacking)}: a "
                                 "classifier learns nothing from one class (fewer --folds, "
                                 "or more subjects of it)")


def _pair_dataset(data, labels, out: Path, folds: int, skip_bad: bool = False):
    """``(directory, subjects)``: the dataset the runs of ``--data`` read, and the rows of
    the two ``labels`` it holds. The directory is ``data`` itself when every row of its
    labels.csv is of one of the two ``labels``; else ``OUT/data/labels-A-B/labels.csv``,
    the rows of the two alone (their files where they are: absolute paths), with a note
    of how many rows of which other labels are left out. A three-class labels.csv
    (NC, sMCI, pMCI) was refused by the first run's train ('label NC is not in the label
    set'), to be filtered by hand. ValueError when a label of ``labels`` has no row,
    an other label is one of them in other letters ('ad' for AD), or the rows hold
    fewer people than ``folds`` (each run's train refused it, one process each), or
    (unless ``skip_bad``: train's --skip-bad leaves it out) a row of the two names a
    file that is not there: refused here, by the line of ``data``'s labels.csv (train
    named the line of the list evaluate wrote)."""
    import csv
    import hashlib
    import io
    import re
    from collections import Counter

    from meshpar.data import fold_split, read_labels

    subjects = read_labels(data, None, check_files=False)
    others = Counter(s.label for s in subjects if s.label not in labels)
    held = Counter(s.label for s in subjects if s.label in labels)
    found = ", ".join(f"{k or '(none)'} {v}" for k, v in sorted((held + others).items()))
    for other in others:
        same = [name for name in labels if name.casefold() == other.casefold()]
        if same:  # a label in other letters is not another class: its rows would be lost
            raise ValueError(f"--data {data}: labels.csv has label {other!r} ({others[other]} "
                             f"rows) and --labels {same[0]!r}: labels match exactly; write "
                             "them alike")
    missing = [name for name in labels if not held[name]]
    if missing:
        raise ValueError(f"--data {data}: labels.csv has no {' or '.join(map(repr, missing))} "
                         f"row (its labels: {found}); check --labels")
    kept = [s for s in subjects if s.label in labels]
    gone = next((s for s in kept if not Path(s.path).is_file()), None)
    if gone is not None and not skip_bad:
        raise ValueError(f"--data {data}: {gone.path}: file named in labels.csv line "
                         f"{gone.line} does not exist or is not a file (--train-args "
                         "--skip-bad leaves such subjects out)")
    try:
        fold_split(kept, folds, 0)
    except ValueError as err:
        raise ValueError(f"--data {data}: the {len(kept)} rows of {' and '.join(labels)}: "
                         f"{err} (--folds {folds})") from None
    if not others:
        return Path(data), kept
    safe = re.sub(r"[^A-Za-z0-9_.+-]", "_", "-".join(labels))
    tag = hashlib.sha256("\n".join(labels).encode()).hexdigest()[:8]
    directory = out / "data" / f"labels-{safe}-{tag}"
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["subject", "label", "group", "subject_id"])
    for s in kept:
        # absolute, '..' kept: normalising 'link/../x' away would name another file
        where = s.path if Path(s.path).is_absolute() else Path.cwd() / s.path
        writer.writerow([str(where), s.label, s.group or "", s.subject_id])
    path = directory / "labels.csv"
    if not path.is_file() or path.read_text(encoding="utf-8") != text.getvalue():
        directory.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, text.getvalue())
    left = ", ".join(f"{k or '(none)'} {v}" for k, v in sorted(others.items()))
    print(f"meshpar evaluate: note: --data {data}: {sum(others.values())} of {len(subjects)} "
          f"labels.csv rows are of other labels than --labels {','.join(labels)} ({left}) "
          f"and are left out; the runs read the {len(kept)} others, listed in {path}",
          file=sys.stderr)
    return directory, kept


def run(args) -> int:
    """Run (or resume) the protocol, print the table, write JSON and PNG; exit code."""
    from meshpar.dir_lock import hold_directory

    _check(args)
    # a second evaluate into it at once is refused: it took the first one's runs in
    # progress for interrupted ones and removed them, and its phantoms being written
    with hold_directory(args.out, "--out", "meshpar evaluate"):
        return _run_checked(args)


def _run_checked(args) -> int:
    """:func:`run` once the arguments are checked and ``--out`` is held."""
    from meshpar import models
    from meshpar.evaluation import protocol, report

    tasks = _tasks(args)
    fold_ids = _test_folds(args.test_folds, args.folds)
    configs = protocol.default_configs(args.speeds, args.mesh)
    if args.only:
        configs = [c for c in configs if c.name == args.only]
    train_args = shlex.split(args.train_args)
    _check_train_args(train_args)
    spec = models.resolve(args.model)
    if spec.reference:  # the runs' own `meshpar train` find it from any directory
        args.model = spec.reference
    full = spec.input_shape
    if len(full) != 4:  # (H, W, channels): an image model, not one of MRI volumes
        raise ValueError(f"--model {args.model} takes 2-D images "
                         f"({'x'.join(map(str, full))}); evaluate trains on 3-D MRI volumes: "
                         "use a resattnet3d model or a network of one's own taking "
                         "(D, H, W, C) volumes")
    shape = full[:3]
    out = Path(args.out)
    parsed = _check_runs(args, tasks, fold_ids, configs, train_args, out)
    cohorts = [(task, labels, seed) for task, labels in tasks.items() for seed in args.seeds]
    if args.data:
        pair, kept = _pair_dataset(args.data, tasks["data"], out, args.folds, parsed.skip_bad)
        _check_data_batches(args, kept, fold_ids, parsed)
        data_dirs = {(task, seed): pair for task, _, seed in cohorts}
    else:
        data_dirs = protocol.prepare_all_phantoms(out, cohorts, args.n, shape, args.phantoms,
                                                  jobs=args.jobs)
    runs = protocol.plan_runs(out, data_dirs, args.seeds, args.folds, fold_ids, configs, tasks)
    protocol.check_finished(runs, args.model, train_args, args.threads)
    print(f"{len(runs)} runs: {len(tasks)} task(s) x {len(args.seeds)} seed(s) x "
          f"{len(fold_ids)} test fold(s) of {args.folds} x {len(configs)} configuration(s); "
          f"{args.jobs} at a time", flush=True)
    started = time.perf_counter()

    def finished(one, summary):
        seconds = summary.get("seconds", math.nan)
        done = (f"kept (trained and predicted by an earlier call, {seconds:.0f} s)"
                if summary.get("kept") else f"trained and predicted ({seconds:.0f} s)")
        print(f"  {one.key} {one.config.name}: {done}", flush=True)

    try:
        results = protocol.execute_all(runs, args.model, train_args, jobs=args.jobs,
                                       threads=args.threads, report=finished)
        # Inference parity: the first configuration's weights predicted on each other mesh.
        first = {r.key: r for r in runs if r.config == configs[0]}
        protocol.cross_predict_all([(first[r.key], r) for r in runs if r.config != configs[0]],
                                   jobs=args.jobs, threads=args.threads)
    except protocol.CommandFailed as err:  # its log keeps the whole story
        if err.returncode == 2:
            raise ValueError(str(err)) from None
        print(f"meshpar evaluate: error: {err}", file=sys.stderr)
        return 1
    scored = [report.score_run(one, results[one]) for one in runs]
    summary = report.summarize(scored, tasks, [c.name for c in configs])
    result = {"protocol": {"tasks": {t: list(v) for t, v in tasks.items()}, "seeds": args.seeds,
                           "folds": args.folds, "test_folds": fold_ids, "model": args.model,
                           "n": None if args.data else args.n, "shape": list(shape),
                           "phantoms": None if args.data else args.phantoms,
                           "data": args.data, "train_args": train_args,
                           "configs": {c.name: list(c.train_args) for c in configs},
                           "threads": args.threads, "seconds": time.perf_counter() - started},
              "tasks": summary}
    out.mkdir(parents=True, exist_ok=True)
    # an earlier accuracy.json is kept until this one is whole
    write_text_atomic(out / "accuracy.json", dumps_strict(result, indent=1) + "\n")
    report.plot_summary(summary, out / "accuracy.png")
    print(report.format_table(summary))
    print(f"wrote {out / 'accuracy.json'} and {out / 'accuracy.png'}")
    if args.json:
        print(dumps_strict(result))
    return 0
