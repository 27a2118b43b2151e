"""``meshpar plan``: choose mesh shape, device order and split weights for a model.

Imports no TensorFlow for a registered model (a network of one's own is
imported, and built once to read its layer table where its module has no
``describe``): the devices come from ``--speeds`` (synthetic, relative: 1.0 =
1e11 FLOP/s, so predicted times are relative, not seconds) or from a
``--profile`` JSON file written by ``meshpar profile`` (measured: predicted
times are seconds on those devices). Only ``--verify``, which runs the
candidates' steps on the profiled workers (meshpar.runtime.plan_trials), does.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys

from meshpar.cli.parsing import (MEMORY_HEADROOM_HELP, memory_terms, non_negative_int,
                                 parse_memory_mib, parse_speeds, path_text,
                                 refuse_missing_directories,
                                 refuse_overwriting_inputs, refuse_replacing_another_kind,
                                 replaced_note)
from meshpar.models import names_for_help
from meshpar.models.reference import REFERENCE_SYNTAX
from meshpar.runtime.plan_trials import VERIFY_REPEATS, VERIFY_ROUNDS

METHODS = ("ga", "exact", "proportional", "even")

EPILOG = """examples:
  meshpar plan --speeds 1.0,0.5,0.3,0.2 --model resattnet3d-small --batch 8 --method ga
  meshpar plan --profile profile.json --batch 8 --out plan.json --plot plan.png
  meshpar plan --speeds 1.0,0.25 --model vgg-cifar-small --batch 4 --method exact --json
  meshpar plan --speeds 1.0,0.5,0.3,0.2 --model vgg-cifar --batch 32 --method exact --time-limit 60
"""


def register(subparsers) -> None:
    """Add ``meshpar plan`` to ``subparsers``."""
    parser = subparsers.add_parser(
        "plan", help="plan uneven model + data parallelism for a cluster",
        description="Plan mesh shape, device placement and split weights with the cost model.\n"
                    "The devices are ordered fastest first, then roomiest, before planning:\n"
                    "one cluster listed in any order gets one plan (docs/planner.md).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--speeds", help="relative device speeds, e.g. 1.0,0.5,0.3,0.2 "
                                         "(synthetic cluster, 1.0 = 1e11 FLOP/s)")
    parser.add_argument("--profile", type=path_text,
                        help="device profile JSON (from `meshpar profile`)")
    # The old name of --profile; "cluster file" now always means TF's cluster file.
    parser.add_argument("--cluster", dest="profile_alias", type=path_text,
                        help=argparse.SUPPRESS)
    parser.add_argument("--model", default=None,
                        help="built-in model: " + names_for_help() + f"; {REFERENCE_SYNTAX}"
                             + " (default: the model a --profile of whole training steps "
                               "was measured on, else resattnet3d-small)")
    parser.add_argument("--batch", type=int, default=8, help="global batch size (default: 8)")
    parser.add_argument("--memory-mib", help="memory budget per device in MiB, one value for "
                        "every device or one per device in order (replaces the profile's "
                        "memory): what a worker may grow by while it trains, against the "
                        "cost model's count of its peak (measured: `meshpar bench memory`, "
                        "docs/cost_model.md)")
    parser.add_argument("--memory-headroom", type=float, default=None,
                        help=MEMORY_HEADROOM_HELP)
    parser.add_argument("--method", choices=METHODS, default="ga",
                        help="planner: ga (genetic algorithm), exact (proven optimum by MILP), "
                             "proportional (split by speed), even (Mesh-TF's equal split) "
                             "(default: ga; docs/planner.md)")
    parser.add_argument("--seed", type=non_negative_int, default=None,
                        help="--method ga only (the other methods draw nothing and refuse it): the "
                             "GA's seed (default: 0)")
    parser.add_argument("--generations", type=int, default=None,
                        help="--method ga only: GA generations at most (default: 200; it also "
                             "stops after 60 without a better plan)")
    parser.add_argument("--population", type=int, default=None,
                        help="--method ga only: GA population size (at least 3 per mesh shape "
                             "+ 2, at most 100000; the plan's extra.population says what ran) "
                             "(default: 32)")
    parser.add_argument("--time-limit", type=float, default=None,
                        help="ga: return within about this many seconds (device subsets "
                             "included); exact: give up (exit 2) "
                             "unless the optimum is proven within this many seconds")
    parser.add_argument("--progress", action="store_true",
                        help="--method ga only: show the GA progress bar even when stderr is not a "
                             "terminal")
    parser.add_argument("--mesh", help="plan this mesh shape only, e.g. 'batch:2;model:2' (axes "
                                       "batch and model, or all:N for model:N; every device "
                                       "of the cluster; as "
                                       "train --mesh); default: the best shape")
    parser.add_argument("--all-devices", action="store_true",
                        help="use every device even where leaving the slowest ones idle is "
                             "predicted faster (default: the best of all and of the fastest k)")
    parser.add_argument("--verify", type=non_negative_int, default=None, metavar="K",
                        help="time the planner's K best candidates (its pick, each mesh "
                             "shape's and device subset's best, their neighbouring batch "
                             "splits) on the workers "
                             "the --profile was measured on, whole training steps in turns, "
                             "and keep the fastest measured (needs a profile from `meshpar "
                             "profile --cluster`; recorded as the plan's extra.verified)")
    parser.add_argument("--verify-rounds", type=non_negative_int, default=None, metavar="R",
                        help="--verify: rounds in which every candidate runs "
                             f"{VERIFY_REPEATS} steps (default: {VERIFY_ROUNDS})")
    parser.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    parser.add_argument("--out", type=path_text, help="also write the plan to this JSON file")
    parser.add_argument("--plot", type=path_text,
                        help="write a PNG: split diagram, GA convergence and the "
                             "predicted per-device timeline")
    parser.set_defaults(func=run)


def _refuse_ignored_options(args) -> None:
    """ValueError for a GA option given to a planner that would silently ignore it."""
    given = [("--seed", "ga", args.seed is not None),
             ("--generations", "ga", args.generations is not None),
             ("--population", "ga", args.population is not None),
             ("--progress", "ga", args.progress),
             ("--time-limit", "ga or exact", args.time_limit is not None)]
    for flag, methods, present in given:
        if present and args.method not in methods.split(" or "):
            raise ValueError(f"{flag} goes with --method {methods}; --method {args.method} "
                             "would ignore it")
    if args.verify_rounds is not None and args.verify is None:
        raise ValueError("--verify-rounds goes with --verify K; without it nothing is timed")
    if args.verify is None:
        return
    if args.verify < 1 or (args.verify_rounds is not None and args.verify_rounds < 1):
        raise ValueError(f"--verify and --verify-rounds must be >= 1, got --verify {args.verify}"
                         + ("" if args.verify_rounds is None
                            else f" --verify-rounds {args.verify_rounds}"))
    for flag, present in (("--speeds", args.speeds is not None), ("--mesh", args.mesh),
                          ("--all-devices", args.all_devices)):
        if present:
            raise ValueError(f"--verify times candidates of every mesh shape and device subset "
                             f"on the workers a --profile was measured on; {flag} does not go "
                             "with it")


def _refuse_unknown_image_format(path) -> None:
    """ValueError for a ``--plot`` name whose extension matplotlib writes no image as
    (it said so once the plan was made: "Format 'xyz' is not supported")."""
    extension = os.path.splitext(path or "")[1][1:]
    if not extension:  # no extension: a PNG
        return
    from matplotlib.backend_bases import FigureCanvasBase

    known = FigureCanvasBase.get_supported_filetypes()
    if extension.lower() not in known:
        raise ValueError(f"--plot {path}: matplotlib writes no '{extension}' image; give a "
                         "name ending in .png")


def _read_png(path) -> None:
    """ValueError unless ``path`` starts with the PNG signature (an earlier --plot)."""
    with open(path, "rb") as f:
        if f.read(8) != b"\x89PNG\r\n\x1a\n":
            raise ValueError(f"{path} is not a PNG image")


def run(args) -> int:
    """Plan for the given cluster and model; print the plan, optionally save and plot it.

    ValueError (exit code 2) for bad arguments or when no plan fits in memory.
    """
    from meshpar.planning.cluster import ClusterSpec, per_device
    from meshpar.models import resolve
    from meshpar.planning.margins import close_call
    from meshpar.planning.planners import memory_ratios, plan, plan_subsets

    if args.profile_alias is not None:
        if args.profile is not None:
            raise ValueError("give --profile once (--cluster is its old name)")
        args.profile = args.profile_alias
    if (args.speeds is None) == (args.profile is None):
        raise ValueError("give exactly one of --speeds or --profile")
    if args.batch < 1:
        raise ValueError(f"--batch must be >= 1, got {args.batch}")
    _refuse_ignored_options(args)
    refuse_overwriting_inputs(args, ["out", "plot"], ["profile"])
    if args.out and args.plot and os.path.abspath(args.out) == os.path.abspath(args.plot):
        raise ValueError(f"--out and --plot both name {args.out}: the plan and its PNG need "
                         "two files")
    refuse_missing_directories(args.out, args.plot)  # before planning, which may take minutes
    from meshpar.planning.plan import Plan

    refuse_replacing_another_kind(args.out, Plan.load, "plan")
    refuse_replacing_another_kind(args.plot, _read_png, "PNG image", "--plot")
    _refuse_unknown_image_format(args.plot)
    cluster = (ClusterSpec.from_speeds(parse_speeds(args.speeds)) if args.speeds is not None
               else ClusterSpec.load(args.profile))
    if args.model is None:  # a network of one's own: the reference the profile records
        extra = cluster.extra or {}
        args.model = extra.get("model_ref") or extra.get("model") or "resattnet3d-small"
    if args.memory_mib is not None:
        cluster = cluster.with_memory(
            per_device(parse_memory_mib(args.memory_mib), len(cluster), "--memory-mib"))
    spec = resolve(args.model)
    model = spec.describe()
    options = {}
    if args.method == "ga":
        for name in ("generations", "population", "time_limit"):
            value = getattr(args, name)
            if value is not None:
                if not 0 < value < math.inf:  # NaN too; inf was the planner's 'time_limit'
                    raise ValueError(f"--{name.replace('_', '-')} must be > 0 and finite, "
                                     f"got {value}")
                from meshpar.planning.planners.common import (MAX_POPULATION,
                                                              population_too_large)

                if name == "population" and value > MAX_POPULATION:  # minutes, then OOM
                    raise ValueError(population_too_large(value, "--population"))
                options[name] = value
        options["progress"] = bool(args.progress or sys.stderr.isatty())
    elif args.method == "exact" and args.time_limit is not None:
        if not 0 < args.time_limit < math.inf:
            raise ValueError(f"--time-limit must be > 0 and finite, got {args.time_limit}")
        options["time_limit"] = args.time_limit
    terms = memory_terms(args.memory_headroom)
    shapes = None if args.mesh is None else [_mesh_rows_cols(args.mesh, len(cluster),
                                                             args.batch)]
    close = None
    if args.verify:
        result = _verified(args, spec, cluster, terms, options)
    elif args.all_devices or shapes:
        result = plan(model, cluster, args.batch, method=args.method,
                      seed=0 if args.seed is None else args.seed, shapes=shapes,
                      memory_terms=terms, **options)
    else:  # plan(subsets=True)'s pick, with the plans it weighed against it
        weighed = plan_subsets(model, cluster, args.batch, method=args.method,
                               seed=0 if args.seed is None else args.seed,
                               memory_terms=terms, **options)
        result = weighed.best
        close = close_call(result, [weighed.whole, *weighed.subsets, *weighed.roomiest],
                           cluster)
    if spec.reference:  # the next command (train --plan) finds the network by it
        result = dataclasses.replace(result, extra={**result.extra,
                                                    "model_ref": spec.reference})
    if not result.feasible:
        ratios = memory_ratios(result, cluster)
        worst = ratios.index(max(ratios))
        has = _capacity(cluster, result.devices[worst])
        # even and proportional do not split by memory: that none of their plans fits
        # is not that none does (speeds 1000,1,1 at batch 10**6: even's fits)
        searched = args.method in ("ga", "exact")
        raise ValueError(
            f"no {'' if searched else args.method + ' '}plan fits in memory: "
            f"{result.devices[worst]} needs "
            f"{_size(result.memory_per_device[worst])}, over the "
            f"{_size(float(terms.usable(has)))} a plan may count on of its {_size(has)} "
            f"({terms.headroom:.0%} kept for the count's error; model {model.name}, "
            f"batch {args.batch})" + ("" if searched else
                                      f"; --method {args.method} does not move shares to "
                                      "where they fit, --method exact and ga do"))
    if args.plot:  # before --out: a command that fails writes nothing
        from meshpar.viz import plot_plan

        plot_plan(result, args.plot, model=model, cluster=cluster)
    if args.out:
        note = replaced_note(args.out, "plan")
        result.save(args.out)
        if note:
            print(note, file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        print(format_plan(result, cluster))
    if close:  # the pick is within what the profile could measure: worth --verify
        print(f"note: {close}", file=sys.stderr)
    return 0


def _verified(args, spec, cluster, terms, options):
    """The planner's ``--verify`` best candidates, timed on the profile's workers: the
    fastest measured (its ``extra["verified"]`` says what each took); the first
    candidate, untimed, when none fits in memory (refused next)."""
    from meshpar.planning.planners.candidates import candidate_plans
    from meshpar.runtime.plan_trials import pick_measured, time_plans

    addresses = (cluster.extra or {}).get("addresses")
    if not addresses:
        raise ValueError(f"--verify times the candidates on the workers the profile was "
                         f"measured on, and --profile {args.profile} records none (a profile "
                         f"of `meshpar profile --cluster` does)")
    options = {k: v for k, v in options.items() if k != "progress"}
    candidates = candidate_plans(spec.describe(), cluster, args.batch, args.verify,
                                 method=args.method, seed=0 if args.seed is None else args.seed,
                                 memory_terms=terms, **options)
    fitting = [p for p in candidates if p.feasible]
    if not fitting:
        return candidates[0]
    rounds = VERIFY_ROUNDS if args.verify_rounds is None else args.verify_rounds
    seconds = time_plans(addresses, spec, args.batch, fitting, rounds=rounds,
                         log=lambda *a: print(*a, file=sys.stderr))
    chosen, record = pick_measured(fitting, seconds, rounds)
    for i, row in enumerate(record["candidates"]):
        print(f"{'picked' if i == record['picked'] else '':>6} candidate {i}: {row['mesh']} "
              f"{row['split_sizes']} predicted {row['predicted_step_seconds']:.4g} s, "
              f"measured {row['measured_step_seconds']:.4g} s", file=sys.stderr)
    return chosen


def _mesh_rows_cols(text: str, devices: int, batch: int) -> tuple:
    """``--mesh`` as the planner's ``(rows, cols)``: ``batch:R;model:M`` in either order,
    one axis alone, or ``all:N`` (``model:N``; ValueError for other axes, another
    device count, or more batch rows than ``batch`` has samples, naming --mesh and
    --batch: the planner's own refusal named neither)."""
    from meshpar.cli.parsing import cli_mesh_axes

    axes = cli_mesh_axes(text)
    sizes = dict(axes)
    rows, cols = sizes.get("batch", 1), sizes.get("model", 1)
    if rows * cols != devices:
        raise ValueError(f"--mesh {text} has {rows * cols} processors but the cluster has "
                         f"{devices} devices: a plan for a mesh uses every device")
    if rows > batch:
        raise ValueError(f"--mesh {text} has {rows} batch rows but --batch is {batch}: each "
                         "row needs at least one sample (a larger --batch, or fewer rows)")
    return rows, cols


def _size(nbytes: float) -> str:
    """Bytes as GiB, or as MiB below 1 GiB (budgets given with --memory-mib), with
    three significant digits below 1 MiB (0.001 MiB is not "0.0 MiB")."""
    if nbytes >= 2**30:
        return f"{nbytes / 2**30:.2f} GiB"
    return f"{nbytes / 2**20:.1f} MiB" if nbytes >= 2**20 else f"{nbytes / 2**20:.3g} MiB"


def _capacity(cluster, device: str) -> float:
    for d in cluster.devices:
        if d.device == device:
            return float(d.memory_bytes)
    return math.inf


def format_plan(result, cluster=None, max_rows: int = 16) -> str:
    """A readable summary: headline, split sizes, and the devices (first rows).

    Times are seconds when ``cluster`` was measured (``meshpar profile``) and
    labelled relative when it is synthetic (``--speeds``) or unknown."""
    calibrated = cluster is not None and "profiled_at" in (cluster.extra or {})
    lines = [
        f"method            {result.method}",
        f"model             {result.model} (batch {result.batch})",
        f"mesh              {result.mesh_shape_string()}",
        f"predicted step    {result.predicted_step_seconds:.6g} s"
        f"{'' if calibrated else ' (relative: --speeds devices run at speed x 1e11 FLOP/s)'}",
        f"lower bound       {result.lower_bound_seconds:.6g} s "
        f"(ratio {result.predicted_step_seconds / result.lower_bound_seconds:.3f})",
        f"planning time     {result.planning_seconds:.3f} s",
    ]
    if result.extra.get("gap") is not None and "lower_bound_seconds" in result.extra:
        lines.append(f"proven optimum    gap {100 * result.extra['gap']:.4g}% to the bound "
                     f"{result.extra['lower_bound_seconds']:.6g} s "
                     f"({result.extra.get('solver', 'exact')})")
        if "layout" in result.extra:
            lines.append(f"layout            {result.extra['layout']}")
    if len(result.history) > 1:
        lines.append(f"GA history        {result.history[0]:.6g} -> {result.history[-1]:.6g} s "
                     f"over {len(result.history) - 1} generations")
    lines.append("split sizes:")
    for dim, sizes in result.split_sizes.items():
        shown = ",".join(str(s) for s in sizes[:max_rows])
        more = f",... ({len(sizes)} parts)" if len(sizes) > max_rows else ""
        lines.append(f"  {dim:<28} {shown}{more}")
    for dim in result.extra.get("replicated", []):  # the layout gene's choice
        lines.append(f"  {dim:<28} replicated (not laid out)")
    used = {axis for _, axis in result.layout}
    for axis, size in result.mesh_shape:  # e.g. --all-devices on a model too small to split
        if size > 1 and axis not in used:
            lines.append(f"note: nothing is split on mesh axis {axis}: its {size} devices each "
                         "compute the same work, no faster than one")
    cols = dict(result.mesh_shape).get("model", 1)
    # what the cost model counts each device needs for its part, and (with the cluster)
    # the memory it has: the profile's, or --memory-mib's budget
    lines.append(f"{'pnum':>5} {'(batch,model)':>14}  {'needs':>10}  {'has':>10}  device")
    for p, device in enumerate(result.devices[:max_rows]):
        needs = _size(result.memory_per_device[p]) if result.memory_per_device else "-"
        has = _capacity(cluster, device) if cluster is not None else math.inf
        has = _size(has) if math.isfinite(has) else "-"
        lines.append(f"{p:>5} {str((p // cols, p % cols)):>14}  {needs:>10}  {has:>10}  {device}")
    if len(result.devices) > max_rows:
        lines.append(f"  ... {len(result.devices) - max_rows} more devices")
    return "\n".join(lines)
