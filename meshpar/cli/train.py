"""``meshpar train``: train a model through tf.estimator on an (uneven) mesh.

Data: ``--data DIR`` (NIfTI files + ``labels.csv``, see :mod:`meshpar.data`) or
``--synthetic`` (brain phantoms written to a temporary directory; random
two-class images for the 2-D VGG net). Mesh: ``--plan plan.json`` (from
``meshpar plan``), or ``--speeds`` (split weights in proportion to the speeds,
mesh ``model:N`` unless ``--mesh`` says otherwise), or neither (one device).
Devices are emulated on this machine (``""`` device strings) unless
``--devices`` lists real ones.

Example::

    meshpar train --synthetic --model resattnet3d-small --speeds 0.9,0.3 --steps 50
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time

from meshpar.cli.parsing import parse_speeds

OPTIMIZER_DEFAULT_LR = {"adam": 1e-3, "momentum": 0.01, "sgd": 0.05}


EPILOG = """examples:
  meshpar train --synthetic --model resattnet3d-small --speeds 0.9,0.3 --steps 50
  meshpar train --data phantoms --plan plan.json --steps 500 --model-dir runs/ad
  meshpar train --synthetic --speeds 0.9,0.3,0.6,0.2 --mesh 'batch:2;model:2' --batch 8
"""


def register(subparsers) -> None:
    """Add ``meshpar train`` to ``subparsers``."""
    parser = subparsers.add_parser(
        "train", help="train a model on an uneven mesh (tf.estimator)",
        description="Train and evaluate a model with uneven model + data parallelism.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", help="NIfTI dataset directory (with labels.csv)")
    source.add_argument("--synthetic", action="store_true",
                        help="train on synthetic phantoms written to a temporary directory")
    parser.add_argument("--model", default="resattnet3d-small",
                        help="resattnet3d-small, resattnet3d-tiny, resattnet3d-full, vgg-cifar, "
                             "vgg-cifar-small (default: %(default)s)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--plan", help="plan JSON file from `meshpar plan`")
    where.add_argument("--speeds", help="relative device speeds, e.g. 0.9,0.3: split weights "
                                        "in proportion to them")
    parser.add_argument("--mesh", help="mesh shape for --speeds, e.g. 'batch:1;model:2' "
                                       "(default: model:<number of speeds>)")
    parser.add_argument("--mesh-impl", choices=["meshpar", "mtf"], default="meshpar",
                        help="mtf: lower with Mesh-TensorFlow's own PlacementMeshImpl (even "
                             "splits only), the baseline (default: %(default)s)")
    parser.add_argument("--devices", help="comma-separated device strings, pnum order "
                                          "(default: emulated local devices)")
    parser.add_argument("--cluster", help="train on TF gRPC workers (`meshpar worker`) listed in "
                                          "this cluster JSON; 'TF_CONFIG' reads the environment")
    parser.add_argument("--device-type", choices=["CPU", "GPU"],
                        help="worker device holding each slice with --cluster (default: the "
                             "device a --plan names, else CPU)")
    parser.add_argument("--worker-timeout", type=float, default=300.0,
                        help="with --cluster: seconds an operation may wait on a worker before "
                             "the run is declared failed (default: %(default)s)")
    parser.add_argument("--skip-bad", action="store_true",
                        help="skip (and count) unreadable, NaN or mislabelled subjects instead "
                             "of stopping at the first one")
    parser.add_argument("--checkpoint-every", type=int, default=None,
                        help="checkpoint every N steps (default: at the end only)")
    parser.add_argument("--steps", type=int, default=50,
                        help="train until this global step (default: 50); rerunning with the "
                             "same --model-dir resumes from its last checkpoint")
    parser.add_argument("--batch", type=int, default=4, help="global batch size (default: 4)")
    parser.add_argument("--model-dir", help="checkpoint directory (default: a new temporary one)")
    parser.add_argument("--optimizer", choices=sorted(OPTIMIZER_DEFAULT_LR), default="adam")
    parser.add_argument("--lr", type=float, default=None,
                        help="learning rate (default: adam 1e-3, momentum 0.01, sgd 0.05)")
    parser.add_argument("--labels", default="NC,AD",
                        help="class names in labels.csv, class 0 first (default: NC,AD)")
    parser.add_argument("--n-synthetic", type=int, default=64,
                        help="subjects written by --synthetic (default: 64)")
    parser.add_argument("--val-fraction", type=float, default=0.25,
                        help="share of subjects held out for evaluation (default: 0.25)")
    parser.add_argument("--seed", type=int, default=0, help="data and graph seed (default: 0)")
    parser.add_argument("--threads", type=int, default=1,
                        help="TF intra/inter-op threads (default 1: deterministic)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--warmup-steps", type=int, default=None,
                        help="steps left out of the throughput (default: 10%% of the steps "
                             "run, at least 3)")
    parser.add_argument("--trace-step", type=int, default=None,
                        help="trace this step (counted in this run, from 1) and show per worker "
                             "where its time went: compute, communication, idle")
    parser.add_argument("--trace-out", help="with --trace-step: write the traced step's timeline "
                                            "here (Chrome trace JSON, for Perfetto)")
    parser.add_argument("--json", action="store_true",
                        help="also print the summary as one JSON object, the last line of stdout")
    parser.set_defaults(func=run)


def mesh_from_speeds(speeds, mesh_shape=None):
    """``(mesh_shape, split_weights)`` for devices of ``speeds`` in pnum order.

    The planner's proportional rule
    (:func:`meshpar.planning.planners.common.proportional_weights`): on a
    one-axis mesh the weights are the speeds; on ``batch:R;model:M`` each
    column's share follows its slowest device and each row's share the rate
    at which the row finishes.
    """
    import numpy as np

    from meshpar.planning.plan import parse_mesh_shape
    from meshpar.planning.planners.common import proportional_weights

    n = len(speeds)
    mesh_shape = f"model:{n}" if mesh_shape is None else mesh_shape
    axes = parse_mesh_shape(mesh_shape, "--mesh")
    if math.prod(size for _, size in axes) != n:
        raise ValueError(f"--mesh {mesh_shape} has {math.prod(s for _, s in axes)} processors "
                         f"but --speeds lists {n} devices")
    if len(axes) > 2:
        raise ValueError("--mesh: use one or two axes (e.g. batch:2;model:2)")
    if len(axes) == 1:  # the rule's weights are the speeds (up to scale)
        return mesh_shape, {axes[0][0]: list(speeds)}
    (_, rows), (_, cols) = axes
    row_w, col_w = proportional_weights(np.asarray(speeds, float), np.arange(n), rows, cols)
    return mesh_shape, {axes[0][0]: [float(w) for w in row_w],
                        axes[1][0]: [float(w) for w in col_w]}


def run(args) -> int:
    """Train (and evaluate on the held-out share) as the arguments say; print a summary
    of losses, timing and eval metrics. Returns the exit code.
    """
    if args.steps < 1 or args.batch < 1:
        raise ValueError("--steps and --batch must be >= 1")
    if args.trace_step is not None and args.trace_step < 1:
        raise ValueError(f"--trace-step must be >= 1, got {args.trace_step}")
    if args.trace_out and args.trace_step is None:
        raise ValueError("--trace-out goes with --trace-step")
    if args.warmup_steps is not None and args.warmup_steps < 0:
        raise ValueError(f"--warmup-steps must be >= 0, got {args.warmup_steps}")
    if not 0.0 <= args.val_fraction < 1.0:
        raise ValueError("--val-fraction must be in [0, 1)")
    if args.mesh is not None and args.speeds is None:
        raise ValueError("--mesh goes with --speeds (a plan has its own mesh)")
    from meshpar import models

    spec = models.get(args.model)
    lr = args.lr if args.lr is not None else OPTIMIZER_DEFAULT_LR[args.optimizer]
    client = None
    if args.cluster:
        if args.devices:
            raise ValueError("--devices and --cluster exclude each other")
        from meshpar.runtime.client import ClusterClient
        from meshpar.runtime.cluster_files import worker_addresses

        client = ClusterClient(worker_addresses(args.cluster), args.device_type or "CPU",
                               timeout_s=args.worker_timeout)
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        raise ValueError("--checkpoint-every must be >= 1")
    mesh_kwargs = _mesh_arguments(args, spec, client)
    mesh_kwargs["upstream"] = args.mesh_impl == "mtf"

    os.environ.setdefault("TF_DETERMINISTIC_OPS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with tempfile.TemporaryDirectory(prefix="meshpar-train-") as scratch:
        model_dir = args.model_dir or os.path.join(scratch, "model")
        train_fn, eval_fn, data_note = _input_fns(args, spec, scratch)
        if client is not None:
            train_fn, eval_fn = (_on_device(fn, client.client_device) for fn in (train_fn, eval_fn))
        return _train(args, spec, lr, mesh_kwargs, model_dir, train_fn, eval_fn, data_note,
                      client, scratch)


def _on_device(input_fn, device):
    """The input pipeline runs in this process (job ``client``), next to its
    Python readers; the mesh's slices run on the workers."""
    if input_fn is None:
        return None

    def placed():
        import tensorflow.compat.v1 as tf

        with tf.device(device):
            return input_fn()

    return placed


def _mesh_arguments(args, spec, client=None) -> dict:
    devices = None
    if args.devices:
        devices = [d.strip() for d in args.devices.split(",")]
    elif client is not None:
        devices = list(client.devices)
    if args.plan:
        from meshpar.planning.plan import Plan

        plan = Plan.load(args.plan)
        try:
            plan.check_compatible((spec.name, spec.config.name))
        except ValueError as err:
            raise ValueError(f"{args.plan}: {err}") from None
        if client is not None:  # each slice on the worker the plan names
            devices = client.place(plan.devices, keep_device_type=args.device_type is None)
        elif devices is None:
            devices = [""] * len(plan.devices)  # emulated: the plan may name other machines
        return dict(plan=plan, devices=devices)
    if args.speeds is not None:  # an empty --speeds is an error, not "one device"
        mesh_shape, weights = mesh_from_speeds(parse_speeds(args.speeds), args.mesh)
        return dict(mesh_shape=mesh_shape, split_weights=weights, devices=devices)
    return dict(mesh_shape="all:1", devices=devices)


def _input_fns(args, spec, scratch):
    """``(train_input_fn, eval_input_fn or None, description)``."""
    from meshpar import models

    shape = models.input_shape(spec.config)
    if spec.module is models.vgg_cifar:
        if args.data:
            raise ValueError(f"{spec.name} trains on --synthetic images only")
        return _synthetic_images(args, shape) + (f"{args.n_synthetic} synthetic images",)
    from meshpar.data import make_tf_dataset, nifti, split_subjects, write_dataset

    label_set = tuple(name.strip() for name in args.labels.split(",") if name.strip())
    if len(label_set) != spec.config.num_classes:
        raise ValueError(f"--labels names {len(label_set)} classes but {spec.name} has "
                         f"{spec.config.num_classes}")
    directory = args.data
    if args.synthetic:
        directory = os.path.join(scratch, "phantoms")
        write_dataset(directory, args.n_synthetic, shape=shape[:3], seed=args.seed,
                      label_set=label_set)
    skipped = []  # with --skip-bad: subjects dropped before training starts
    subjects = nifti.read_labels(directory, label_set, skip_bad=args.skip_bad, skipped=skipped)
    if len(subjects) < 2:
        raise ValueError(f"{directory}: need at least 2 subjects, found {len(subjects)}")
    train_subjects, val_subjects = split_subjects(subjects, args.val_fraction,
                                                        seed=args.seed)
    if len(train_subjects) < args.batch:
        raise ValueError(f"--batch {args.batch} is larger than the {len(train_subjects)} "
                         "training subjects")

    # A resumed run continues the data stream where its checkpoint left it.
    start = _checkpoint_step(args.model_dir) * args.batch

    sources = [nifti.NiftiDataset(directory, shape[:3], label_set, skip_bad=args.skip_bad,
                                  subjects=part) if part else None
               for part in (train_subjects, val_subjects)]
    args.skipped_report = lambda: skipped + [item for src in sources if src for item in src.skipped]

    def train_fn():
        return make_tf_dataset(sources[0], shape[:3], args.batch, label_set, shuffle=True,
                               seed=args.seed, repeat=True, drop_remainder=True, start=start)

    eval_fn = None
    if len(val_subjects) >= args.batch:
        def eval_fn():
            return make_tf_dataset(sources[1], shape[:3], args.batch, label_set, shuffle=False,
                                   drop_remainder=True)
    note = (f"{len(train_subjects)} training / {len(val_subjects)} validation subjects "
            f"from {'synthetic phantoms' if args.synthetic else directory}")
    return train_fn, eval_fn, note


def _checkpoint_step(model_dir) -> int:
    """Global step of the latest checkpoint in ``model_dir`` (0 if none)."""
    if not model_dir or not os.path.isdir(model_dir):
        return 0
    import tensorflow.compat.v1 as tf

    latest = tf.train.latest_checkpoint(model_dir)
    return int(latest.rsplit("-", 1)[1]) if latest else 0


def _synthetic_images(args, shape):
    """Two-class random images: class 1 has a brighter centre."""
    import numpy as np
    import tensorflow.compat.v1 as tf

    rng = np.random.RandomState(args.seed)
    n = args.n_synthetic
    x = rng.randn(n, *shape).astype(np.float32)
    y = (np.arange(n) % 2).astype(np.int32)
    h, w = shape[0], shape[1]
    x[y == 1, h // 4:3 * h // 4, w // 4:3 * w // 4] += 1.0
    n_val = int(round(n * args.val_fraction))
    xt, yt, xv, yv = x[n_val:], y[n_val:], x[:n_val], y[:n_val]

    def train_fn():
        return tf.data.Dataset.from_tensor_slices((xt, yt)).shuffle(
            len(xt), seed=args.seed).batch(args.batch, drop_remainder=True).repeat()

    eval_fn = None
    if n_val >= args.batch:
        def eval_fn():
            return tf.data.Dataset.from_tensor_slices((xv, yv)).batch(args.batch,
                                                                       drop_remainder=True)
    return train_fn, eval_fn


def _train(args, spec, lr, mesh_kwargs, model_dir, train_fn, eval_fn, data_note,
           client=None, scratch=None) -> int:
    import tensorflow.compat.v1 as tf
    from tqdm import tqdm

    from meshpar.training import estimator as E
    from meshpar.training.throughput import steady_state

    tf.logging.set_verbosity(tf.logging.ERROR)
    model_fn = E.build_model_fn(spec, optimizer=args.optimizer, learning_rate=lr,
                                save_checkpoints_steps=args.checkpoint_every or max(args.steps, 1),
                                **mesh_kwargs)
    est = tf.estimator.Estimator(model_fn, model_dir=model_dir,
                                 config=E.run_config(model_dir, seed=args.seed,
                                                     threads=args.threads,
                                                     cluster_client=client))
    mesh = model_fn.mesh
    print(f"model {spec.name}: {spec.describe().params:,} parameters; {data_note}")
    print(f"mesh {mesh.mesh_shape} ({mesh.size} device(s)), "
          f"split weights {mesh.split_weights or 'even'}")
    print(f"optimizer {args.optimizer} lr {lr:g}, batch {args.batch}, checkpoints in {model_dir}")

    # A bar on a terminal; piped output gets one plain line every `every` steps.
    live = not args.no_progress and sys.stderr.isatty()
    bar = tqdm(total=args.steps, desc="train", unit="step", disable=not live,
               file=sys.stderr, dynamic_ncols=True)
    every = max(1, args.steps // 10)

    def progress(step, loss):
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.4f}")
        if not live and not args.no_progress and step % every == 0:
            print(f"train: step {step} of this run, loss {loss:.4f}", file=sys.stderr,
                  flush=True)

    history = E.LossHistoryHook(progress)
    hooks = [history]
    if args.trace_step is not None:
        hooks.append(E.StepTraceHook(args.trace_step, args.trace_out))
    started = time.perf_counter()
    try:
        _guard(client, lambda: est.train(train_fn, max_steps=args.steps, hooks=hooks),
               _exit_now(scratch))
    finally:
        bar.close()
    seconds = time.perf_counter() - started
    speed = steady_state(history.step_ends, args.batch, args.warmup_steps)
    summary = {"model": spec.name, "mesh_shape": mesh.mesh_shape, "devices": list(mesh.devices),
               "split_weights": mesh.split_weights, "steps": len(history.losses),
               "first_loss": history.losses[0] if history.losses else None,
               "last_loss": history.losses[-1] if history.losses else None,
               "train_seconds": seconds, **speed}
    rows = [("steps", f"{len(history.losses)}"),
            ("first loss", f"{history.losses[0]:.4f}" if history.losses else "-"),
            ("last loss", f"{history.losses[-1]:.4f}" if history.losses else "-"),
            ("train time", f"{seconds:.1f} s (graph build included)"),
            ("samples/s", _format_speed(speed))]
    if eval_fn is not None:
        results = _guard(client, lambda: est.evaluate(eval_fn), _exit_now(scratch))
        for key in ("loss", "accuracy", "auc", "sensitivity", "specificity"):
            if key in results:
                rows.append((f"eval {key}", f"{float(results[key]):.4f}"))
                summary[f"eval_{key}"] = float(results[key])
    else:
        rows.append(("eval", "skipped (fewer validation samples than --batch)"))
    report = getattr(args, "skipped_report", None)
    if report is not None:
        bad = report()
        rows.append(("skipped subjects", str(len(bad))))
        for item in bad:
            print(f"skipped {item.path}: {item.reason}", file=sys.stderr)
    _print_table(rows)
    if args.trace_step is not None:
        summary.update(_report_trace(hooks[-1]))
    if args.json:
        summary["skipped_subjects"] = len(bad) if report is not None else 0
        print(json.dumps(summary), flush=True)
    return 0


def _report_trace(hook) -> dict:
    """Print the traced step's breakdown; return it for the JSON summary."""
    from meshpar.runtime.step_trace import format_breakdown

    if hook.breakdown is None:
        print(f"trace: step {hook.step} was not reached in this run")
        return {}
    print(f"trace of step {hook.step}:")
    print(format_breakdown(hook.breakdown, hook.wall_seconds))
    return {"trace_step": hook.step, "trace_step_seconds": hook.wall_seconds,
            "step_breakdown": hook.breakdown}


def _format_speed(speed: dict) -> str:
    if speed["samples_per_second"] is None:
        return f"- (too few steps after {speed['warmup_steps']} warm-up steps)"
    lo, hi = speed["samples_per_second_p25_p75"]
    return (f"{speed['samples_per_second']:.2f} (median step; p25-p75 {lo:.2f}-{hi:.2f}; "
            f"steps {speed['warmup_steps'] + 1}-{speed['warmup_steps'] + speed['steady_steps']})")


def _exit_now(scratch):
    """Report a lost worker and end the process: TF is blocked in C on the dead
    worker and cannot be interrupted. Checkpoints on disk are complete (TF
    writes them atomically); rerunning the command resumes from the last one."""

    def stuck(failure):
        import shutil

        print(f"meshpar train: failed: {failure}; rerun the same command (same --model-dir)"
              " to resume from the last checkpoint", file=sys.stderr, flush=True)
        shutil.rmtree(scratch, ignore_errors=True)
        os._exit(1)

    return stuck


def _guard(client, run, on_stuck=None):
    """Run ``run()``; on a cluster, turn a runtime error into a ClusterFailure
    that names the workers that stopped answering. A bad data file met while
    streaming becomes its BadSubjectError (one line naming the file)."""
    import tensorflow.compat.v1 as tf

    from meshpar.data.types import bad_data_in

    try:
        if client is None:
            return run()
        with client.watch(on_stuck=on_stuck):
            return run()
    except tf.errors.OpError as err:
        bad = bad_data_in(err)
        if bad is not None:
            raise bad from None
        if client is None:
            raise
        raise client.failure(err) from None


def _print_table(rows) -> None:
    width = max(len(k) for k, _ in rows)
    print(f"{'metric'.ljust(width)}  value")
    print(f"{'-' * width}  {'-' * 5}")
    for key, value in rows:
        print(f"{key.ljust(width)}  {value}")
