"""The flags ``meshpar train`` and ``meshpar predict`` share, and what they turn into:
the mesh (plan, speeds or one device), the held-out test split, and the recipe
(loss, learning-rate schedule, weight decay, clipping) as estimator ``params``.
"""
from __future__ import annotations

import json
import math
import sys

from meshpar.cli.parsing import (device_strings, float_text, non_negative_int, parse_speeds,
                                 path_text)
from meshpar.training.defaults import DEFAULT_WEIGHT_DECAY  # no TensorFlow: every parser

#: seconds an operation may wait on a worker (``--worker-timeout``)
DEFAULT_WORKER_TIMEOUT_S = 300.0


def add_mesh_options(parser) -> None:
    """The mesh flags ``train`` and ``predict`` share: --plan/--speeds/--mesh, --mesh-impl,
    --devices, --cluster and its options."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--plan", type=path_text, help="plan JSON file from `meshpar plan`")
    where.add_argument("--speeds", help="relative device speeds, e.g. 0.9,0.3: split weights "
                                        "in proportion to them")
    parser.add_argument("--mesh", help="mesh shape for --speeds, e.g. 'batch:1;model:2' "
                                       "(axes batch and model, or all:N for model:N; "
                                       "default: model:<number of speeds>)")
    parser.add_argument("--mesh-impl", choices=["meshpar", "mtf"], default="meshpar",
                        help="mtf: lower with Mesh-TensorFlow's own PlacementMeshImpl (even "
                             "splits only), the baseline (default: %(default)s)")
    parser.add_argument("--devices", type=device_strings,
                        help="comma-separated device strings of this machine, one per mesh "
                             "processor in pnum order, none empty (e.g. /gpu:0,/gpu:1; /cpu:0 "
                             "repeated to emulate) (default: every processor on this "
                             "process's default device, emulated; a worker's device: "
                             "--cluster)")
    parser.add_argument("--cluster", type=path_text,
                        help="run on TF gRPC workers (`meshpar worker`) listed in "
                             "this cluster JSON; 'TF_CONFIG' reads the environment")
    parser.add_argument("--device-type", choices=["CPU", "GPU"],
                        help="worker device holding each slice with --cluster (default: the "
                             "device a --plan names, else CPU)")
    parser.add_argument("--worker-timeout", type=float, default=None,
                        help="with --cluster: seconds an operation may wait on a worker before "
                             f"the run is declared failed (default: {DEFAULT_WORKER_TIMEOUT_S})")


def add_split_options(parser) -> None:
    """The held-out test set flags ``train`` and ``predict`` share."""
    parser.add_argument("--folds", type=int, default=None,
                        help="k-fold by person: with --fold I, fold I of K is the test set, "
                             "never trained on")
    parser.add_argument("--fold", type=int, default=None, help="the test fold, 0 <= I < K")
    parser.add_argument("--fold-seed", type=non_negative_int, default=0,
                        help="seed of the test split (--folds or --test-fraction), independent "
                             "of train's --seed; predict takes the training's to predict its "
                             "test set (default: 0)")
    parser.add_argument("--test-fraction", type=float, default=None,
                        help="hold out this share of the people as the test set instead of a "
                             "fold")


def add_recipe_options(parser) -> None:
    """Loss, learning-rate schedule, weight decay and clipping flags."""
    from meshpar.training.losses import LOSSES
    from meshpar.training.schedules import SCHEDULES

    parser.add_argument("--loss", choices=sorted(LOSSES), default="cross_entropy",
                        help="training loss (default: %(default)s)")
    parser.add_argument("--class-weights", default=None,
                        help="with --loss weighted_cross_entropy: 'balanced' (inverse class "
                             "frequency in the training set) or one weight per class, e.g. 1,2")
    parser.add_argument("--focal-gamma", type=float, default=None,
                        help="focusing exponent of --loss focal (default: 2)")
    parser.add_argument("--lr-schedule", choices=sorted(SCHEDULES), default="cosine",
                        help="learning rate over the steps: constant, cosine (to --lr-min at "
                             "--steps) or step (times --lr-decay-rate every --lr-decay-steps); "
                             "all after --lr-warmup-steps of linear warm-up (default: cosine)")
    parser.add_argument("--lr-warmup-steps", type=int, default=None,
                        help="linear learning-rate warm-up over the first N steps, ending "
                             "within --steps (cosine: before it) (default: 10%% of --steps)")
    parser.add_argument("--lr-decay-steps", type=int, default=None,
                        help="step schedule: decay every N steps after the warm-up, the "
                             "first decay before --steps")
    parser.add_argument("--lr-decay-rate", type=float, default=None,
                        help="step schedule: factor per decay (default: 0.1)")
    parser.add_argument("--lr-min", type=float, default=None,
                        help="cosine schedule: final learning rate (default: 0)")
    parser.add_argument("--weight-decay", type=float, default=DEFAULT_WEIGHT_DECAY,
                        help="decoupled weight decay (AdamW-style) of kernels, not biases or "
                             "batch-norm parameters (default: %(default)g)")
    parser.add_argument("--clip-norm", type=float, default=None,
                        help="clip gradients to this global norm (default: no clipping)")


def lr_warmup_steps(args) -> int:
    """``--lr-warmup-steps``, by default a tenth of ``--steps`` (30 of the default 300:
    the recipe docs/accuracy.md measured)."""
    return args.steps // 10 if args.lr_warmup_steps is None else args.lr_warmup_steps


def recipe_params(args, class_counts=None, classes=None) -> dict:
    """The estimator ``params`` of the recipe flags (see :mod:`meshpar.training.estimator`).

    ``--class-weights balanced`` weighs class c by ``n / (classes * n_c)`` over
    the training subjects' ``class_counts``; explicit weights are one per class
    of the model (``classes``, default: one per counted class, else 2).
    """
    params = {"loss": args.loss, "lr_schedule": args.lr_schedule,
              "warmup_steps": lr_warmup_steps(args), "total_steps": args.steps,
              "decay_rate": 0.1 if args.lr_decay_rate is None else args.lr_decay_rate,
              "min_lr": 0.0 if args.lr_min is None else args.lr_min,
              "weight_decay": args.weight_decay, "clip_norm": args.clip_norm}
    if args.lr_decay_steps is not None:
        params["decay_steps"] = args.lr_decay_steps
    if args.loss == "focal":
        params["focal_gamma"] = 2.0 if args.focal_gamma is None else args.focal_gamma
    weights = args.class_weights
    if weights is not None and args.loss != "weighted_cross_entropy":
        raise ValueError("--class-weights goes with --loss weighted_cross_entropy")
    if args.loss == "weighted_cross_entropy":
        if weights is None or weights == "balanced":
            if not class_counts or min(class_counts) < 1:
                held = (f" (training samples per class: {', '.join(map(str, class_counts))})"
                        if class_counts else "")
                raise ValueError("--class-weights balanced needs every class in the training "
                                 f"set{held}; give one weight per class instead")
            n, k = sum(class_counts), len(class_counts)
            params["class_weights"] = [n / (k * c) for c in class_counts]
        else:
            if classes is None:
                classes = len(class_counts or [0, 0])
            params["class_weights"] = _class_weights(weights, int(classes))
    return params


def refuse_unused_recipe_flags(args) -> None:
    """ValueError for a recipe flag that the chosen loss or schedule would ignore, or a
    step count of the schedule out of range."""
    uses = [("--focal-gamma", args.focal_gamma, args.loss == "focal", "--loss focal"),
            ("--lr-decay-steps", args.lr_decay_steps, args.lr_schedule == "step",
             "--lr-schedule step"),
            ("--lr-decay-rate", args.lr_decay_rate, args.lr_schedule == "step",
             "--lr-schedule step"),
            ("--lr-min", args.lr_min, args.lr_schedule == "cosine", "--lr-schedule cosine")]
    for flag, value, used, needs in uses:
        if value is not None and not used:
            raise ValueError(f"{flag} goes with {needs}; this run would ignore it")
    # named by the flag: the recipe's own check said "params['warmup_steps'] must be ..."
    for flag, value, least in (("--lr-warmup-steps", args.lr_warmup_steps, 0),
                               ("--lr-decay-steps", args.lr_decay_steps, 1)):
        if value is not None and value < least:
            raise ValueError(f"{flag} must be >= {least}, got {value}")


def _class_weights(text: str, classes: int) -> list:
    """``"1,2"`` -> ``[1.0, 2.0]``: one finite weight > 0 per class (ValueError)."""
    try:
        weights = [float_text(w) for w in text.split(",")]
    except ValueError:
        raise ValueError(f"--class-weights: expected 'balanced' or numbers, got {text!r}") from None
    if len(weights) != classes or not all(math.isfinite(w) and w > 0 for w in weights):
        raise ValueError(f"--class-weights: need {classes} finite weights > 0, got {text!r}")
    return weights


def mesh_from_speeds(speeds, mesh_shape=None):
    """``(mesh_shape, split_weights)`` for devices of ``speeds`` in pnum order.

    The planner's proportional rule
    (:func:`meshpar.planning.planners.common.proportional_weights`): on a
    one-axis mesh the weights are the speeds; on ``batch:R;model:M`` each
    column's share follows its slowest device and each row's share the rate
    at which the row finishes, whichever order the mesh lists the two axes in
    (``model:M;batch:R`` gives each axis the same rule).
    """
    import numpy as np

    from meshpar.cli.parsing import cli_mesh_axes
    from meshpar.planning.planners.common import proportional_weights

    n = len(speeds)
    # as plan --mesh reads it: batch and model, or all:N alone (model:N)
    axes = cli_mesh_axes(f"model:{n}" if mesh_shape is None else mesh_shape)
    if math.prod(size for _, size in axes) != n:
        raise ValueError(f"--mesh {mesh_shape} has {math.prod(s for _, s in axes)} processors "
                         f"but --speeds lists {n} devices")
    mesh_shape = ";".join(f"{name}:{size}" for name, size in axes)
    if len(axes) == 1:  # the rule's weights are the speeds (up to scale)
        return mesh_shape, {axes[0][0]: list(speeds)}
    (first, rows), (second, cols) = axes
    grid = np.asarray(speeds, float).reshape(rows, cols)  # pnum = row * cols + col
    if second == "batch":  # the rule is by axis name: lay the batch axis along the rows
        (first, rows), (second, cols), grid = (second, cols), (first, rows), grid.T
    row_w, col_w = proportional_weights(grid.reshape(-1), np.arange(n), rows, cols)
    return mesh_shape, {first: [float(w) for w in row_w], second: [float(w) for w in col_w]}


def check_mesh_args(args) -> None:
    """The mesh flags' own consistency (ValueError)."""
    if args.mesh is not None and args.speeds is None:
        raise ValueError("--mesh goes with --speeds (a plan has its own mesh)")
    if args.cluster and args.devices:
        raise ValueError("--devices and --cluster exclude each other")
    if args.device_type and not args.cluster:  # emulated devices are this process's CPU
        raise ValueError("--device-type goes with --cluster; this run would ignore it")
    if args.worker_timeout is not None and not args.cluster:
        raise ValueError("--worker-timeout goes with --cluster; this run would ignore it")


def cluster_client(args):
    """The :class:`~meshpar.runtime.client.ClusterClient` of ``--cluster``, or None."""
    if not args.cluster:
        return None
    from meshpar.runtime.client import ClusterClient
    from meshpar.runtime.cluster_files import worker_addresses

    # reached in mesh_arguments, once a plan's placement has been checked: a plan
    # for other workers is refused as such, not as an unreachable address
    return ClusterClient(worker_addresses(args.cluster), args.device_type or "CPU",
                         check=False, timeout_s=DEFAULT_WORKER_TIMEOUT_S
                         if args.worker_timeout is None else args.worker_timeout)


def mesh_batch_rows(mesh_kwargs: dict) -> int:
    """The size of the ``batch`` axis of the mesh :func:`mesh_arguments` describes (a
    plan's or ``mesh_shape``'s; 1 without one): each row takes a share of every batch."""
    from meshpar.planning.plan import parse_mesh_shape

    plan = mesh_kwargs.get("plan")
    axes = dict(plan.mesh_shape if plan is not None
                else parse_mesh_shape(mesh_kwargs.get("mesh_shape") or "all:1"))
    return int(axes.get("batch", 1))


def check_batch_fits_mesh(batch: int, mesh_kwargs: dict, what: "str | None" = None) -> None:
    """Refuse a ``--batch`` below the mesh's ``batch`` axis (a plan's or ``--mesh``'s): each
    row of that axis takes at least one sample of every batch (``what`` names where the
    batch came from, default ``--batch N``). Mesh-TF's own error came
    late and named an op ('mtf op 'import' ...: size 1 cannot be split into 2 parts')."""
    rows = mesh_batch_rows(mesh_kwargs)
    if batch < rows:
        raise ValueError(f"{what or f'--batch {batch}'} is smaller than the mesh's batch axis "
                         f"(batch:{rows}): "
                         f"each of its {rows} rows takes at least one sample; use --batch "
                         f"{rows} or more, or a mesh with fewer rows")


def check_local_devices(devices) -> None:
    """ValueError for a ``--devices`` entry this process cannot place a slice on: a
    device of a worker task (``/job:worker/...``: that is ``--cluster``'s; it was TF's
    'Cannot assign a device' traceback), one this machine does not have (``/gpu:0`` on
    a machine without one, ``/cpu:7``: the session places softly, so the slice ran on
    the CPU without a word), or not a device at all. An empty entry is the default
    device."""
    import tensorflow as tf

    have = {"CPU:0"} | {f"GPU:{i}" for i in range(len(tf.config.list_physical_devices("GPU")))}
    for name in devices:
        if not name:
            continue
        try:
            spec = tf.DeviceSpec.from_string(name)
        except ValueError as err:
            raise ValueError(f"--devices: {name!r} is not a device ({err})") from None
        # this process's own full name (/job:localhost/replica:0/task:0/...) is local
        local = spec.job in (None, "localhost") and spec.task in (None, 0) and \
            spec.replica in (None, 0)
        if not local:
            raise ValueError(f"--devices: {name} names a worker task's device; slices go "
                             "to workers with --cluster (their cluster file), not --devices")
        if spec.device_type is None:
            continue
        device = f"{spec.device_type.upper()}:{spec.device_index or 0}"
        if device not in have:
            raise ValueError(f"--devices: {name} is not a device of this machine (it has "
                             f"{', '.join(sorted(have))}); a slice placed there would run "
                             "on another in silence")


def mesh_arguments(args, spec, client=None) -> dict:
    """Keyword arguments of :func:`meshpar.training.estimator.build_model_fn` for the mesh
    the flags describe (plan, speeds or one device; devices; --mesh-impl). With a
    ``client``, its workers are reached once the plan's placement is checked."""
    devices = None
    if args.devices:
        devices = [d.strip() for d in args.devices.split(",")]
        check_local_devices(devices)
    elif client is not None:
        devices = list(client.devices)
    upstream = args.mesh_impl == "mtf"
    if args.plan:
        from meshpar.planning.plan import Plan

        from meshpar.models.reference import check_plan_model

        plan = Plan.load(args.plan)
        try:
            check_plan_model(plan, spec)
        except ValueError as err:
            raise ValueError(f"{args.plan}: {err}") from None
        if not plan.feasible:  # the planner's least overflow when nothing fits (Python API)
            print(f"meshpar {args.command}: note: {args.plan} does not fit in its devices' "
                  "memory as planned (\"feasible\": false); the run may run out of memory",
                  file=sys.stderr)
        if client is not None:  # each slice on the worker the plan names
            devices = client.place(
                plan.devices, keep_device_type=args.device_type is None,
                plan_addresses=plan.extra.get("worker_addresses"),
                log=lambda line: print(f"meshpar {args.command}: note: {args.plan}: {line}",
                                       file=sys.stderr))
            _use_only_the_mesh_workers(args, client, devices)
            client.check_reachable()
            client.check_devices(devices)
        elif devices is None:
            devices = [""] * len(plan.devices)  # emulated: the plan may name other machines
        if len(devices) != len(plan.devices):  # was the mesh's 'N processors but M devices'
            raise ValueError(f"--devices names {len(devices)} devices but --plan {args.plan} "
                             f"places its mesh {plan.mesh_shape_string()} on "
                             f"{len(plan.devices)}: one device per processor of the plan")
        if upstream:
            _refuse_uneven_for_upstream(f"--plan {args.plan}", {
                **plan.split_weights, **plan.dim_split_weights})
        return dict(plan=plan, devices=devices, upstream=upstream)
    speeds = None if args.speeds is None else parse_speeds(args.speeds)  # empty: an error
    if speeds is not None and devices is not None and len(devices) != len(speeds):
        where = "--devices names" if args.devices else f"the cluster ({args.cluster}) has"
        raise ValueError(f"--speeds gives {len(speeds)} devices' speeds but {where} "
                         f"{len(devices)}: one speed per device")
    if speeds is None and devices is not None and len(devices) > 1:
        # one device (all:1) was then given every worker and refused as 'mesh all:1 has
        # 1 processors but 2 devices were given', devices the user had not given
        where = (f"--devices names {len(devices)} devices" if args.devices else
                 f"the cluster ({args.cluster}) has {len(devices)} workers")
        raise ValueError(f"{where}: say how to split over them with --plan (`meshpar plan`) "
                         f"or --speeds, one per device (--speeds "
                         f"{','.join(['1'] * len(devices))}: an even split)")
    if client is not None:
        _use_only_the_mesh_workers(args, client, devices)
        client.check_reachable()
    if client is not None and args.device_type and not args.devices:
        client.check_devices(client.devices)
    if speeds is not None:
        mesh_shape, weights = mesh_from_speeds(speeds, args.mesh)
        if upstream:
            _refuse_uneven_for_upstream(f"--speeds {args.speeds}", weights)
        return dict(mesh_shape=mesh_shape, split_weights=weights, devices=devices,
                    upstream=upstream)
    return dict(mesh_shape="all:1", devices=devices, upstream=upstream)


def _refuse_uneven_for_upstream(given: str, weights: dict) -> None:
    """ValueError when ``--mesh-impl mtf`` (Mesh-TF's even splits only) meets the uneven
    split ``weights`` of ``given`` (the flag and its value): the mesh's own refusal said
    'drop the uneven split weights', which no flag had given."""
    uneven = {axis: w for axis, w in weights.items() if len(set(w)) > 1}
    if uneven:
        axis, w = next(iter(uneven.items()))
        raise ValueError(f"--mesh-impl mtf splits evenly only, but {given} splits {axis} "
                         f"unevenly (weights {', '.join(f'{x:.4g}' for x in w)}): give equal "
                         "speeds (or a plan of even splits), or leave --mesh-impl at meshpar")


def _use_only_the_mesh_workers(args, client, devices) -> None:
    """Sessions of a run whose mesh leaves workers out (a plan's subset, ``--devices``)
    involve only the workers it uses, so the others may be down. Re-balancing may
    move work to any worker of the cluster, so it keeps them all."""
    from meshpar.runtime.client import parse_worker_device

    tasks = {parse_worker_device(d)[0] for d in devices}
    if getattr(args, "rebalance_options", None) is None and None not in tasks:
        client.use_only(sorted(tasks))


def split_request(args) -> dict:
    """The test-split keyword arguments of :func:`meshpar.training.inputs.test_split`."""
    return dict(folds=args.folds, fold=args.fold, fold_seed=args.fold_seed,
                test_fraction=args.test_fraction)


#: ``--augment``'s default for NIfTI volumes (affine collapsed training: docs/accuracy.md)
DEFAULT_AUGMENT = "flip"


def augmentations(text) -> tuple:
    """``--augment`` value -> the augmentation names (``()`` for ``none``; None means
    :data:`DEFAULT_AUGMENT`)."""
    if text is None:
        text = DEFAULT_AUGMENT
    if text.strip().lower() == "none":
        return ()
    from meshpar.data.transforms import AUGMENTATIONS

    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in AUGMENTATIONS]
    if unknown or not names:
        raise ValueError(f"--augment: unknown augmentation {', '.join(unknown) or repr(text)}; "
                         f"choose from {', '.join(AUGMENTATIONS)}")
    return names


def add_rebalance_options(parser) -> None:
    """``--rebalance``, ``--elastic`` and their settings (with ``--cluster``)."""
    group = parser.add_argument_group("re-balancing (with --cluster; docs/rebalance.md)")
    group.add_argument("--rebalance", action="store_true",
                       help="measure each worker's speed while training (after one step in "
                            "--rebalance-every) and re-plan the split when it drifts")
    group.add_argument("--rebalance-every", type=int, default=None,
                       help="measure the workers after one step in N (probe or trace); "
                            "with --elastic, probe lost workers as often (default: 50)")
    group.add_argument("--rebalance-trigger", type=float, default=None,
                       help="also measure at once (--rebalance-patience steps in a row) when "
                            "the median of the last 15 step times stays, 4 steps in a row, "
                            "further from its settled level than this fraction and than 3.5 "
                            "standard errors of the step times' measured spread, in [0, 1); "
                            "0: only every N steps (default: 0.25)")
    group.add_argument("--rebalance-threshold", type=float, default=None,
                       help="re-plan when the plan's step at the measured speeds is this "
                            "fraction longer than a balanced one, in (0, 1] (default: 0.1)")
    group.add_argument("--rebalance-patience", type=int, default=None,
                       help="... at the median speeds of the last K samples (default: 3)")
    group.add_argument("--rebalance-method", default=None,
                       help="planner of the re-plans (drift and --elastic): even, "
                            "proportional, exact, ga (default: ga with --rebalance-profile, "
                            "else proportional)")
    group.add_argument("--rebalance-profile", type=path_text,
                       help="the workers' profile (meshpar profile --cluster --model): "
                            "re-plan with its measured cost of splitting, and leave out a "
                            "worker that no longer pays for it (default: live speeds only, "
                            "every worker kept)")
    group.add_argument("--rebalance-budget", type=float, default=None,
                       help="the largest share of the run's time that measuring may take, in "
                            "(0, 1]; a sample that falls due above it waits (default: no limit)")
    group.add_argument("--rebalance-measure", default=None,
                       help="how a worker's live speed is measured: trace (its busy time in "
                            "a traced training step; any device types), probe (a fixed "
                            "matmul chain run on every worker at once after the step; workers "
                            "of one device type; sees CPU-quota throttling) or auto (probe "
                            "when all devices are of one type, else trace; the default)")
    group.add_argument("--elastic", action="store_true",
                       help="when a worker stops answering, re-plan on the others and go on "
                            "from the last checkpoint; take it back when it answers again")
    group.add_argument("--replay-replans", type=path_text,
                       help="a JSON summary (--json) of an earlier run: switch to the meshes it "
                            "re-planned to, at the same steps, without measuring")


def _flags_go(flags) -> str:
    """``--a goes`` / ``--a and --b go``: the start of a 'goes with' refusal."""
    return f"{' and '.join(flags)} {'goes' if len(flags) == 1 else 'go'}"


def rebalance_options(args):
    """The :class:`~meshpar.training.rebalance.RebalanceOptions` of the flags, or None
    when neither --rebalance, --elastic nor --replay-replans is given (ValueError for
    bad values or a missing --cluster)."""
    given = [f"--rebalance-{k}"
             for k in ("every", "trigger", "threshold", "patience", "method", "profile",
                       "measure", "budget")
             if getattr(args, f"rebalance_{k}") is not None]
    misplaced = f"{_flags_go(given)} with --rebalance or --elastic"
    if not (args.rebalance or args.elastic or args.replay_replans):
        if given:
            raise ValueError(misplaced)
        return None
    flag = "--rebalance" if args.rebalance else "--elastic" if args.elastic else "--replay-replans"
    if not args.cluster:
        raise ValueError(f"{flag} needs --cluster (the workers it measures and re-plans over)")
    if given and not (args.rebalance or args.elastic):
        raise ValueError(misplaced)
    drift_only = [f"--rebalance-{k}" for k in ("trigger", "threshold", "patience", "measure",
                                                 "budget")
                  if getattr(args, f"rebalance_{k}") is not None]
    if drift_only and not args.rebalance:  # --elastic alone measures nothing: ignored
        raise ValueError(f"{_flags_go(drift_only)} with --rebalance (when "
                         "measured speeds drift); --elastic alone re-plans only when a worker "
                         "is lost or comes back, so this run would ignore "
                         f"{'it' if len(drift_only) == 1 else 'them'}")
    if args.mesh_impl != "meshpar":
        raise ValueError(f"{flag} re-plans uneven splits: use --mesh-impl meshpar")
    if getattr(args, "keep_best", None):
        raise ValueError(f"{flag} and --keep-best are not combined; drop one")
    from meshpar.training.rebalance import RebalanceOptions

    # flags not given keep RebalanceOptions' defaults (one place for them)
    tuned = {k: getattr(args, f"rebalance_{k}")
             for k in ("every", "trigger", "threshold", "patience", "method", "measure",
                       "budget")
             if getattr(args, f"rebalance_{k}") is not None}
    if args.rebalance_profile:
        from meshpar.planning.cluster import ClusterSpec

        try:
            tuned["profile"] = ClusterSpec.load(args.rebalance_profile)
        except ValueError as err:
            raise ValueError(f"--rebalance-profile {args.rebalance_profile} is not a device "
                             f"profile (`meshpar profile --cluster ... --model ...` writes "
                             f"one): {err}") from None
    try:
        return RebalanceOptions(rebalance=bool(args.rebalance), elastic=bool(args.elastic),
                                **tuned)
    except ValueError as err:
        raise ValueError(f"--{str(err).replace(' ', '-', 1)}") from None


def read_replans(path, batch: int, model: str) -> list:
    """The re-plans of the ``--json`` summary in ``path``; ValueError (before any step)
    when that run trained another model or batch: its meshes split that batch."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as err:
        raise ValueError(f"--replay-replans {path}: cannot be read ({err.strerror})") from None
    for line in reversed(text.strip().splitlines()):  # a --json summary is the last line
        try:
            summary = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(summary, dict) and isinstance(summary.get("replans"), list):
            for key, ours in (("model", model), ("batch", batch)):
                if summary.get(key, ours) != ours:
                    raise ValueError(f"--replay-replans {path} comes from a run of {key} "
                                     f"{summary[key]}; this run has {key} {ours}")
            return summary["replans"]
    raise ValueError(f"--replay-replans {path}: no JSON summary with 'replans' found")
