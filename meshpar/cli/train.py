"""``meshpar train``: train a model through tf.estimator on an (uneven) mesh.

Data: ``--data DIR`` (NIfTI files + ``labels.csv``, see :mod:`meshpar.data`) or
``--synthetic`` (brain phantoms written to a temporary directory; random
two-class images for the 2-D VGG net). Mesh: ``--plan plan.json`` (from
``meshpar plan``), or ``--speeds`` (split weights in proportion to the speeds,
mesh ``model:N`` unless ``--mesh`` says otherwise), or neither (one device).
Devices are emulated on this machine (``""`` device strings) unless
``--devices`` lists real ones or ``--cluster`` names the workers (``meshpar
worker``) that hold the slices.

Subjects: ``--folds K --fold I`` (or ``--test-fraction F``) holds out a test
set by person that is never trained on; ``--val-fraction`` of the rest
validates. The recipe (loss, learning-rate schedule, weight decay, clipping)
goes to the estimator's ``params`` (see :mod:`meshpar.training.recipe`).
The model directory gets ``meshpar_run.json``, which ``meshpar predict``
reads.

Example::

    meshpar train --synthetic --model resattnet3d-small --speeds 0.9,0.3 --steps 50
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time

from meshpar.cli.parsing import (label_names, path_text, positive_int, seed_int,
                                 refuse_file_as_directory, refuse_missing_directories,
                                 refuse_non_utf8_path,
                                 refuse_overwriting_inputs, refuse_replacing_another_kind,
                                 refuse_writing_over_run, thread_count)
from meshpar.cli.train_options import (  # noqa: F401  (mesh_from_speeds: re-exported)
    add_mesh_options, add_rebalance_options, add_recipe_options, add_split_options,
    check_batch_fits_mesh, check_mesh_args, cluster_client, mesh_arguments, mesh_from_speeds,
    read_replans, rebalance_options, recipe_params, refuse_unused_recipe_flags)
from meshpar.cli.run_guard import (Terminated, exit_now, guard, no_divergence_log, progress_hook,
                                   terminated_as_an_exception)
from meshpar.cli.train_data import check_augment, on_device, prepare_data, resolve_fold_seed
from meshpar.cli.train_report import (evaluate, format_weights, print_table, report_best,
                                      report_rebalancing, report_trace, run_summary)
from meshpar.cli.train_resume import (batch_change_note, recipe_change_note,
                                      recorded_identity, resumed_run_info, save_run)
from meshpar.models import names_for_help
from meshpar.models.reference import REFERENCE_SYNTAX
from meshpar.planning.jsonio import dumps_strict

OPTIMIZER_DEFAULT_LR = {"adam": 1e-3, "momentum": 0.01, "sgd": 0.05}
#: ``--checkpoint-every`` when --keep-best is on and no cadence is given
KEEP_BEST_EVERY = 50
DEFAULT_BATCH = 8  # --batch without a --plan
DEFAULT_MODEL = "resattnet3d-small"  # --model without a --plan


EPILOG = """examples:
  meshpar train --synthetic --model resattnet3d-small --speeds 0.9,0.3 --steps 50
  meshpar train --data phantoms --plan plan.json --steps 500 --model-dir runs/ad
  meshpar train --synthetic --speeds 0.9,0.3,0.6,0.2 --mesh 'batch:2;model:2' --batch 8
  meshpar train --data adni --folds 5 --fold 0 --keep-best --checkpoint-every 50 \\
      --lr-schedule cosine --lr-warmup-steps 20 --weight-decay 1e-4 --augment --model-dir f0
"""


def register(subparsers) -> None:
    """Add ``meshpar train`` to ``subparsers``."""
    parser = subparsers.add_parser(
        "train", help="train a model on an uneven mesh (tf.estimator)",
        description="Train and evaluate a model with uneven model + data parallelism.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", type=path_text, help="NIfTI dataset directory (with labels.csv)")
    source.add_argument("--synthetic", action="store_true",
                        help="train on synthetic data: phantoms written to a temporary "
                             "directory (3-D models) or random images (2-D models)")
    parser.add_argument("--model", default=None,
                        help="built-in model: " + names_for_help() + f"; {REFERENCE_SYNTAX}"
                             + f" (default: a --plan's model, else {DEFAULT_MODEL})")
    add_mesh_options(parser)
    parser.add_argument("--skip-bad", action="store_true",
                        help="skip (and count) unreadable, NaN or mislabelled subjects instead "
                             "of stopping at the first one")
    parser.add_argument("--checkpoint-every", type=int, default=None,
                        help="checkpoint every N steps, N <= --steps (default: %d when "
                             "keep-best is on by "
                             "default, else at the end only)" % KEEP_BEST_EVERY)
    parser.add_argument("--keep-best", action=argparse.BooleanOptionalAction, default=None,
                        help="score every --checkpoint-every checkpoint on the validation set and "
                             "keep the lowest-loss one in MODEL_DIR/best (the test set and "
                             "`meshpar predict --checkpoint best` use it). Default: on when "
                             "there are validation subjects and more than one checkpoint to "
                             "choose from, off with --rebalance, --elastic, --replay-replans")
    parser.add_argument("--steps", type=int, default=300,
                        help="train until this global step (default: %(default)s); rerunning "
                             "with the same --model-dir resumes from its last checkpoint")
    parser.add_argument("--batch", type=int, default=None,
                        help="global batch size (default: the --plan's batch, else "
                             f"{DEFAULT_BATCH}); a plan is refused at another batch; a "
                             "resumed run may change it (the data stream goes on from the "
                             "example the old batch reached)")
    parser.add_argument("--model-dir", type=path_text,
                        help="checkpoint directory (default: a temporary one, removed when train "
                             "ends)")
    parser.add_argument("--optimizer", choices=sorted(OPTIMIZER_DEFAULT_LR), default="adam",
                        help="optimizer of the race-free step (default: adam)")
    parser.add_argument("--lr", type=float, default=None,
                        help="learning rate (default: adam 1e-3, momentum 0.01, sgd 0.05); "
                             "the peak of --lr-schedule")
    add_recipe_options(parser)
    parser.add_argument("--labels", type=label_names, default=None,
                        help="class names in labels.csv, class 0 first (default: NC,AD); "
                             "NIfTI data only")
    parser.add_argument("--channels", type=int, default=None,
                        help="input channels; C > 1 reads 4-D NIfTI files holding C co-registered "
                             "volumes, channels last (default: the model's, 1 for MRI)")
    parser.add_argument("--augment", nargs="?", const="flip,affine", default=None,
                        help="augment the training volumes, seeded by --seed: a comma list "
                             "of flip (left-right), shift (whole voxels, up to 2), affine "
                             "(rotation, scale, shift; interpolated); flip,affine (the flag "
                             "alone) or none (default: flip; docs/accuracy.md measured affine "
                             "hurting). NIfTI data only")
    parser.add_argument("--n-synthetic", type=positive_int, default=None,
                        help="phantoms or images --synthetic draws (default: 400); a "
                             "resumed run needs the same")
    parser.add_argument("--val-fraction", type=float, default=0.25,
                        help="share of the non-test subjects held out for validation "
                             "(default: 0.25)")
    add_split_options(parser)
    parser.set_defaults(fold_seed=None)  # None: not given (resolve_fold_seed: then 0)
    add_rebalance_options(parser)
    parser.add_argument("--seed", type=seed_int, default=0,
                        help="data and graph seed (default: 0)")
    parser.add_argument("--threads", type=thread_count, default=1,
                        help="TF intra/inter-op threads (default 1: deterministic)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--warmup-steps", type=int, default=None,
                        help="steps left out of the throughput (default: 10%% of the steps "
                             "run, at least 3, fewer in a run too short to leave 2 steady "
                             "steps); not the learning-rate warm-up")
    parser.add_argument("--trace-step", type=int, default=None,
                        help="trace this step (counted in this run, from 1) and show per worker "
                             "where its time went: compute, communication, idle (left out "
                             "of samples/s: tracing slows it)")
    parser.add_argument("--trace-out", type=path_text,
                        help="with --trace-step: write the traced step's timeline "
                             "here (Chrome trace JSON, for Perfetto)")
    parser.add_argument("--worker-times-every", type=int, default=0,
                        help="trace every N-th step, N <= --steps, and write each worker's "
                             "step time to TensorBoard (default 0: off; the traced steps "
                             "count in samples/s)")
    parser.add_argument("--json", action="store_true",
                        help="also print the summary as one JSON object, the last line of stdout")
    parser.set_defaults(func=run, command="train")  # its notes' prefix, as main names it


class _RefusingParser(argparse.ArgumentParser):
    """A parser whose errors are ValueErrors (for :func:`check_argv`)."""

    def error(self, message):
        """Raise ValueError(``message``) instead of exiting."""
        raise ValueError(f"meshpar train: {message}")


def check_argv(argv) -> argparse.Namespace:
    """The checks ``meshpar train <argv>`` makes on its arguments before any work, for a
    caller that launches it later (``meshpar evaluate``, before it writes its
    phantoms): ValueError with train's own message. Data and clusters are not
    opened here. Returns the parsed arguments."""
    sub = _RefusingParser(prog="meshpar").add_subparsers()
    register(sub)
    args = sub.choices["train"].parse_args(list(argv))
    _check_args(args)
    spec = _model_spec(args)
    from meshpar.training.recipe import Recipe

    from meshpar.models import num_classes

    Recipe.from_params(recipe_params(args, classes=num_classes(spec))).check_learning_rate(
        _learning_rate(args))
    if not args.cluster:
        mesh_kwargs = mesh_arguments(args, spec)
        check_batch_fits_mesh(args.batch, mesh_kwargs)
        _check_even_splits(args, spec, mesh_kwargs)
    return args


def _check_even_splits(args, spec, mesh_kwargs) -> None:
    """``--mesh-impl mtf``: ValueError before anything is printed or written when a
    dimension of the model at ``--batch`` does not divide by its mesh axis (Mesh-TF
    splits evenly only); it was refused at the first step, after train's header."""
    if args.mesh_impl != "mtf":
        return
    from meshpar.training.estimator import check_even_splits

    check_even_splits(spec, args.batch, **mesh_kwargs)


def _model_overrides(args) -> dict:
    """The model config overrides the run file records."""
    return {} if args.channels is None else {"in_channels": args.channels}


def _learning_rate(args) -> float:
    """``--lr``, else the optimizer's default."""
    return args.lr if args.lr is not None else OPTIMIZER_DEFAULT_LR[args.optimizer]


def _model_spec(args):
    """The ``--model`` spec, with ``--channels`` as its input channels when given."""
    from meshpar import models

    overrides = {} if args.channels is None else {"in_channels": int(args.channels)}
    return models.resolve(args.model, **overrides)


def _resolve_batch(args) -> None:
    """``--batch``: a ``--plan``'s own batch unless given, else :data:`DEFAULT_BATCH`. A plan's
    splits were chosen for its batch: at another one it is refused, not rescaled.
    ``--model``: the plan's model unless given (a network of one's own: the reference
    the plan records), else :data:`DEFAULT_MODEL`."""
    planned = None
    if args.plan:
        from meshpar.planning.plan import Plan

        plan = Plan.load(args.plan)
        planned = plan.batch
        if args.model is None:
            args.model = plan.extra.get("model_ref") or plan.model
    if args.model is None:
        args.model = DEFAULT_MODEL
    if args.batch is None:
        args.batch = planned or DEFAULT_BATCH
    elif planned is not None and args.batch != planned:
        raise ValueError(f"{args.plan} was planned for batch {planned}, not --batch "
                         f"{args.batch}: plan again with `meshpar plan --batch {args.batch}` "
                         f"or leave --batch out")


def _read_chrome_trace(path) -> None:
    """ValueError unless ``path`` holds a Chrome trace (an earlier ``--trace-out``)."""
    import json

    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict) or "traceEvents" not in data:
        raise ValueError(f"{path} is not a Chrome trace")


def _check_args(args) -> None:
    _resolve_batch(args)
    if args.steps < 1 or args.batch < 1:
        raise ValueError("--steps and --batch must be >= 1")
    if args.trace_step is not None and not 1 <= args.trace_step <= args.steps:
        raise ValueError(f"--trace-step must be in 1..--steps ({args.steps}), "
                         f"got {args.trace_step}")
    if args.trace_out and args.trace_step is None:
        raise ValueError("--trace-out goes with --trace-step")
    trace_dir = os.path.dirname(os.path.abspath(args.trace_out)) if args.trace_out else None
    if not (args.model_dir and trace_dir == os.path.abspath(args.model_dir)):
        refuse_missing_directories(args.trace_out)  # before training (train makes --model-dir)
    refuse_overwriting_inputs(args, ["trace_out"], ["plan", "cluster", "replay_replans",
                                                    "rebalance_profile"])
    refuse_writing_over_run("--trace-out", args.trace_out, getattr(args, "data", None),
                            args.model_dir)
    # an earlier trace is replaced; any other file was written over after the training
    refuse_replacing_another_kind(args.trace_out, _read_chrome_trace, "Chrome trace",
                                  "--trace-out")
    _check_model_dir(args)
    refuse_unused_recipe_flags(args)  # before any data is read or written
    resolve_fold_seed(args)
    if args.augment is not None:
        check_augment(args.augment)
    if args.n_synthetic is not None and not args.synthetic:
        raise ValueError("--n-synthetic goes with --synthetic; --data reads its subjects")
    if args.n_synthetic is None:
        args.n_synthetic = 400
    if args.lr_schedule == "step" and args.lr_decay_steps is None:
        raise ValueError("--lr-schedule step needs --lr-decay-steps N (decay every N steps)")
    if args.warmup_steps is not None and args.warmup_steps < 0:
        raise ValueError(f"--warmup-steps must be >= 0, got {args.warmup_steps}")
    if not 0.0 <= args.val_fraction < 1.0:
        raise ValueError("--val-fraction must be in [0, 1)")
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        raise ValueError("--checkpoint-every must be >= 1")
    if args.worker_times_every < 0:
        raise ValueError("--worker-times-every must be >= 0")
    _refuse_cadence_past_the_steps(args)
    check_mesh_args(args)
    args.rebalance_options = rebalance_options(args)
    _resolve_keep_best(args)


def _refuse_an_incomplete_last_checkpoint(model_dir: str) -> None:
    """ValueError when the checkpoint a resumed run starts from lacks a file."""
    import tensorflow.compat.v1 as tf

    from meshpar.training.run import refuse_incomplete_checkpoint

    refuse_incomplete_checkpoint(tf.train.latest_checkpoint(model_dir),
                                 "a resumed run starts from it: copy its files back whole, "
                                 "or give another --model-dir")


def _refuse_cadence_past_the_steps(args) -> None:
    """``--checkpoint-every N`` or ``--worker-times-every N`` with N past ``--steps`` (a
    global step: a resumed run ends there too) could never take effect: the run's only
    checkpoint is its last one, written anyway, and no step is traced. Refused, as a
    ``--trace-step`` past the last step is (both were accepted in silence)."""
    for flag, every, what in (
            ("--checkpoint-every", args.checkpoint_every,
             f"the only checkpoint is the last one (step {args.steps}), which every run "
             "writes"),
            ("--worker-times-every", args.worker_times_every or None,
             "no step would be traced")):
        if every is not None and every > args.steps:
            raise ValueError(f"{flag} {every} is past --steps {args.steps}: {what}, so this "
                             f"run would ignore it (give N <= {args.steps} or leave it out)")


def _check_model_dir(args) -> None:
    """--model-dir must be a directory (new or a run's) and not the --data one: its
    checkpoints and run file would be written among the dataset's files."""
    from meshpar.training.run import refuse_pattern_path

    if not args.model_dir:
        return
    refuse_non_utf8_path(args.model_dir, "--model-dir")  # TF's error once training began
    refuse_pattern_path(args.model_dir, "--model-dir")
    if os.path.exists(args.model_dir) and not os.path.isdir(args.model_dir):
        raise ValueError(f"--model-dir {args.model_dir} is a file, not a directory")
    refuse_file_as_directory(args.model_dir, "--model-dir")  # under a file: was '[Errno 20]'
    data = getattr(args, "data", None)
    if data and os.path.isdir(args.model_dir) and os.path.isdir(data) and os.path.samefile(
            args.model_dir, data):
        raise ValueError(f"--model-dir {args.model_dir} is the --data directory; give "
                         "another one for the checkpoints")


def _resolve_keep_best(args) -> None:
    """--keep-best unset: on when there are several checkpoints to choose from (the
    --checkpoint-every cadence, default KEEP_BEST_EVERY, below --steps) and the run
    does not re-plan; whether there are validation subjects is known later
    (``args.keep_best_auto`` lets that case turn it off without a warning)."""
    args.keep_best_auto = args.keep_best is None
    if args.keep_best and args.val_fraction == 0:  # was a note on stderr, after training
        raise ValueError("--keep-best scores each checkpoint on the validation subjects; "
                         "--val-fraction 0 holds none out")
    if args.keep_best and args.checkpoint_every is None:
        raise ValueError("--keep-best scores the checkpoints of --checkpoint-every N: give N "
                         f"(without the flag, keep-best is on by default every {KEEP_BEST_EVERY})")
    if args.keep_best_auto:
        every = args.checkpoint_every or KEEP_BEST_EVERY
        args.keep_best = args.rebalance_options is None and args.steps > every
    args.checkpoint_every_auto = bool(args.keep_best and args.checkpoint_every is None)
    if args.checkpoint_every_auto:
        args.checkpoint_every = KEEP_BEST_EVERY


def run(args) -> int:
    """Train, evaluate on the validation share and score the held-out test set as the
    arguments say; print a summary of losses, timing and metrics. Returns the exit code.
    """
    _check_args(args)
    from meshpar.dir_lock import hold_directory

    try:  # SIGTERM unwinds as Ctrl-C does: the scratch directory is removed on the way
        with terminated_as_an_exception():
            # a second train in it at once is refused
            with hold_directory(args.model_dir, "--model-dir", "meshpar train"):
                return _run_checked(args)
    except Terminated:
        print("meshpar train: terminated", file=sys.stderr, flush=True)
        return 143  # 128 + SIGTERM, as a shell reports a command it ended


def _run_checked(args) -> int:
    """:func:`run` once the arguments are checked and the model directory held."""
    os.environ.setdefault("TF_DETERMINISTIC_OPS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    spec = _model_spec(args)
    if args.model_dir:  # what a resume is refused for, said before --synthetic's phantoms
        from meshpar.training.run import check_recorded_fields

        check_recorded_fields(args.model_dir,
                              recorded_identity(args, spec, _model_overrides(args)))
        from meshpar.training.run import unfound_checkpoints

        unfound = unfound_checkpoints(args.model_dir, "training there would start again at "
                                      "step 0 and write over them", "use a new --model-dir")
        if unfound:
            raise ValueError(unfound)
    args.replay_schedule = _replay_schedule(args, spec)  # before anything is written
    lr = _learning_rate(args)
    client = cluster_client(args)
    mesh_kwargs = mesh_arguments(args, spec, client)
    check_batch_fits_mesh(args.batch, mesh_kwargs)
    _check_even_splits(args, spec, mesh_kwargs)
    options = args.rebalance_options
    if client is not None and options is not None and options.profile is not None:
        # the re-plans price each worker at the speeds profiled on that machine
        args.rebalance_options = dataclasses.replace(options, profile=client.follow_addresses(
            options.profile, log=lambda line: print(
                f"meshpar train: note: {args.rebalance_profile}: {line}", file=sys.stderr)))
    with tempfile.TemporaryDirectory(prefix="meshpar-train-") as scratch:
        model_dir = args.model_dir or os.path.join(scratch, "model")
        from meshpar.training.inputs import checkpoint_step
        from meshpar.training.run import stream_segments

        first_step = checkpoint_step(model_dir)
        if first_step:  # TF's restore of a checkpoint missing a file was a traceback
            _refuse_an_incomplete_last_checkpoint(model_dir)
        resumed = resumed_run_info(model_dir, first_step)
        # where the data stream stands: a resume with another --batch goes on from there
        data = prepare_data(args, spec, scratch, model_dir,
                            stream_segments(resumed, first_step, args.batch))
        if args.keep_best and data["eval_fn"] is None:
            if not args.keep_best_auto:
                print("keep-best: no validation subjects; keeping the last checkpoint",
                      file=sys.stderr)
            args.keep_best = False
            if args.checkpoint_every_auto:
                args.checkpoint_every = None
        from meshpar.models import num_classes

        params = recipe_params(args, data.get("class_counts"), num_classes(spec))
        # refused before the run file is written: a bad flag must not change a saved run
        from meshpar.training.recipe import Recipe
        from meshpar.training.run import RUN_FILE, schedule_change_note

        Recipe.from_params(params).check_learning_rate(lr)
        # said once the resume is accepted
        note = "\n".join(n for n in (schedule_change_note(model_dir, params, first_step),
                                     batch_change_note(resumed, args.batch, first_step,
                                                       data["stream"]),
                                     recipe_change_note(resumed, params, lr,
                                                         data.get("augment", []), first_step))
                          if n)
        if client is not None:
            for key in ("train_fn", "eval_fn"):
                data[key] = on_device(data[key], client.client_device)
        # nothing to train (_train says so): the saved run keeps its record, checked only
        keep = os.path.isfile(os.path.join(model_dir, RUN_FILE)) and first_step >= args.steps
        save_run(args, spec, model_dir, data, params, _model_overrides(args), lr,
                 write=not keep)
        note = "" if keep else note
        if note:
            print(note, file=sys.stderr)
        return _train(args, spec, lr, params, mesh_kwargs, model_dir, data, client, scratch,
                      first_step)


def _replay_schedule(args, spec) -> list:
    """``[(step, MeshSpec)]`` of ``--replay-replans`` (empty without it)."""
    if not args.replay_replans:
        return []
    from meshpar.training.rebalance import schedule_from_replans

    schedule = schedule_from_replans(read_replans(args.replay_replans, args.batch, spec.name))
    late = [step for step, _ in schedule if step >= args.steps]
    if late and len(late) == len(schedule):  # was accepted in silence: nothing replayed
        raise ValueError(f"--replay-replans {args.replay_replans}: its re-plans are at steps "
                         f"{', '.join(map(str, late))}, none before --steps {args.steps}, so "
                         "this run would ignore it (train to a later --steps to replay them)")
    if late:  # a shorter replay of the first re-plans: said, not refused
        print(f"meshpar train: note: --replay-replans {args.replay_replans}: "
              f"{len(late)} of its {len(schedule)} re-plans (step(s) "
              f"{', '.join(map(str, late))}) are at or past --steps {args.steps} and are not "
              "replayed", file=sys.stderr)
    _refuse_replans_off_the_workers(args, schedule)
    return schedule


def _refuse_replans_off_the_workers(args, schedule) -> None:
    """ValueError before any step for a replayed mesh with a device that is not a
    worker task of ``--cluster``, or with one task twice: the first was refused at its
    step, once training had begun ('worker tasks [0, 5] are not a non-empty subset of
    0..1'), and the second replayed both slices on the one worker in silence."""
    from meshpar.runtime.client import parse_worker_device
    from meshpar.runtime.cluster_files import worker_addresses

    workers = len(worker_addresses(args.cluster))
    where = f"--replay-replans {args.replay_replans}: its re-plan at step"
    for step, mesh in schedule:
        seen = {}
        for pnum, name in enumerate(mesh.devices):
            task, _ = parse_worker_device(name)
            if task is None or task >= workers:
                raise ValueError(f"{where} {step} places pnum {pnum} on {name!r}, which is not "
                                 f"a worker of --cluster {args.cluster} (tasks 0..{workers - 1})")
            if task in seen:
                raise ValueError(f"{where} {step} places pnums {seen[task]} and {pnum} on "
                                 f"worker task {task}; each worker holds one slice")
            seen[task] = pnum


def _train(args, spec, lr, params, mesh_kwargs, model_dir, data, client=None,
           scratch=None, first_step: int = 0) -> int:
    """Build the estimator and train from ``first_step`` (the checkpoint's, read once by
    ``run``) to ``--steps``; evaluate and print the summary."""
    import tensorflow.compat.v1 as tf

    from meshpar.training import estimator as E
    from meshpar.training.inputs import checkpoint_step
    from meshpar.training.run import train_keeping_best
    from meshpar.training.throughput import steady_state

    tf.logging.set_verbosity(tf.logging.ERROR)
    tf.get_logger().addFilter(no_divergence_log)  # guard's one line says it
    model_fn = E.build_model_fn(spec, optimizer=args.optimizer, learning_rate=lr,
                                save_checkpoints_steps=args.checkpoint_every or max(args.steps, 1),
                                stage_input=True, **mesh_kwargs)
    est = tf.estimator.Estimator(model_fn, model_dir=model_dir, params=params,
                                 config=E.run_config(model_dir, seed=args.seed,
                                                     threads=args.threads,
                                                     cluster_client=client))
    mesh = model_fn.mesh
    print(f"model {spec.name}: {spec.describe().params:,} parameters; {data['note']}")
    print(f"mesh {mesh.mesh_shape} ({mesh.size} device(s)), "
          f"split weights {format_weights(mesh.split_weights, mesh.dim_split_weights)}")
    # without --model-dir the checkpoints go to a scratch directory removed at the end:
    # its path would send a reader (predict --model-dir) to a directory that is gone
    where = model_dir if args.model_dir else ("a temporary directory, removed when train ends "
                                              "(--model-dir keeps them)")
    print(f"optimizer {args.optimizer} lr {lr:g}, batch {args.batch}, checkpoints in {where}")
    history, bar = progress_hook(args)
    hooks = [history]
    if args.worker_times_every:
        from meshpar.training.summaries import WorkerStepTimeHook

        hooks.append(WorkerStepTimeHook(model_dir, args.worker_times_every))
    if args.trace_step is not None:
        hooks.append(E.StepTraceHook(args.trace_step, args.trace_out))
    guarded = lambda run: guard(client, run, exit_now(scratch))  # noqa: E731
    scores = []  # (step, validation loss) of each checkpoint with --keep-best
    rebalanced = None  # with --rebalance/--elastic: replans, samples, monitor overhead
    if first_step >= args.steps:
        print(f"meshpar train: note: {model_dir} is at step {first_step}, not below --steps "
              f"{args.steps}: nothing to train; its last checkpoint is evaluated",
              file=sys.stderr)
    elif first_step > 0:  # a second run on one --model-dir goes on; say so
        print(f"resuming from the checkpoint at step {first_step} in {model_dir}: "
              f"{args.steps - first_step} more step(s) to --steps {args.steps}")
    started = time.perf_counter()
    try:
        if args.keep_best:
            scores = train_keeping_best(est, data["train_fn"], data["eval_fn"], args.steps,
                                        args.checkpoint_every, hooks, guarded)
        else:
            if args.rebalance_options is not None:
                rebalanced, est = _train_rebalancing(args, spec, lr, params, model_fn,
                                                     model_dir, data, client, hooks, scratch)
            else:
                guarded(lambda: est.train(data["train_fn"], max_steps=args.steps, hooks=hooks))
    finally:
        bar.close()
    seconds = time.perf_counter() - started
    # the traced step collects every op's stats: not a training step's time
    traced = () if args.trace_step is None else (args.trace_step,)
    speed = steady_state(history.step_ends, args.batch, args.warmup_steps, leave_out=traced)
    # on the unix clock, so that another process (a benchmark reading the workers'
    # CPU time) can find the steady steps
    to_unix = time.time() - time.perf_counter()
    window = speed.pop("steady_window")
    speed["steady_window_unix"] = None if window is None else [t + to_unix for t in window]
    # the global steps this run advanced; after a lost worker the steps since the last
    # checkpoint ran again, so the step calls (the losses) may be more
    summary, rows = run_summary(spec, mesh, history.losses, checkpoint_step(model_dir)
                                - first_step, seconds, speed, on_cluster=client is not None)
    if args.keep_best:
        report_best(model_dir, scores, rows, summary)
    if rebalanced is not None:
        report_rebalancing(rebalanced, rows, summary)
    evaluate(args, est, data, guarded, rows, summary)
    report = getattr(args, "skipped_report", None)
    bad = report() if report is not None else []
    if report is not None:
        rows.append(("skipped subjects", str(len(bad))))
        for item in bad:
            print(f"skipped {item.path}: {item.reason}", file=sys.stderr)
    print_table(rows)
    if args.trace_step is not None:
        summary.update(report_trace(hooks[-1]))
    if args.json:
        summary["skipped_subjects"] = len(bad)
        print(dumps_strict(summary), flush=True)
    if rebalanced is not None and rebalanced["abandoned_threads"]:
        exit_now(scratch, code=0)(None)  # a thread is still blocked on a lost worker
    return 0


def _train_rebalancing(args, spec, lr, params, model_fn, model_dir, data, client, hooks,
                       scratch):
    """``--rebalance``/``--elastic``/``--replay-replans``: train through
    :func:`meshpar.training.rebalance.train_rebalancing`; returns its result and an
    estimator on the final mesh (what evaluation runs on). The client then watches
    only that mesh's workers: one lost to ``--elastic`` no longer stops the run's
    evaluation (it had: 'worker 1 ... stopped answering', exit 1, after every step
    had trained on worker 0)."""
    import tensorflow.compat.v1 as tf

    from meshpar.runtime.client import ClusterFailure
    from meshpar.training import estimator as E
    from meshpar.training import rebalance as R

    def build(mesh, tasks):
        fn = E.build_model_fn(spec, mesh=mesh, optimizer=args.optimizer, learning_rate=lr,
                              save_checkpoints_steps=args.checkpoint_every or max(args.steps, 1),
                              stage_input=True)
        config = E.run_config(model_dir, seed=args.seed, threads=args.threads,
                              cluster_client=client)
        client.restrict(config.session_config, tasks)
        built[0] = tf.estimator.Estimator(fn, model_dir=model_dir, params=params, config=config)
        built[1] = list(tasks)
        return built[0]

    built = [None, None]
    layout_of = lambda mesh: mesh.layout_for(spec)  # noqa: E731
    try:
        result = R.train_rebalancing(
            build, data["train_fn"], args.steps, model_fn.mesh, client, spec.describe(),
            args.batch, model_dir, args.rebalance_options, hooks, layout_of, args.replay_schedule,
            log=lambda line: print(line, flush=True))
    except ClusterFailure as failure:
        exit_now(scratch)(failure)
    est = built[0] or build(model_fn.mesh, range(len(client.addresses)))
    client.use_only(built[1])
    return result, est
