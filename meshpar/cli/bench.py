"""``meshpar bench``: benchmarks that run real TF processes.

``hetero``: one layer's even, proportional and GA splits on emulated uneven
devices (throttled TF gRPC workers; ``meshpar.bench.hetero``); ``train``: whole
networks through ``meshpar train --cluster``, every strategy side by side;
``memory``: the cost model's memory count against fresh workers' measured peak.
"""
from __future__ import annotations

import argparse
import sys

from meshpar.cli.parsing import (MEMORY_HEADROOM_HELP, memory_terms, non_negative_int, seed_int,
                                 parse_memory_mib, parse_speeds, path_text, positive_int,
                                 refuse_file_as_directory)
from meshpar.planning.jsonio import dumps_strict

EPILOG = """examples:
  meshpar bench hetero --quick                   a short run: two workers at 0.9 and 0.3 of a core
  meshpar bench hetero --speeds 0.8,0.5,0.3,0.2 --quick
  meshpar bench hetero --out benchmarks/results/hetero-0.9-0.3
  meshpar bench train --out benchmarks/results/train-0.9-0.3    whole networks, meshpar train path
  meshpar bench train --models vgg-cifar-pairs --rounds 3        vgg with its convolutions split in pairs
  meshpar bench memory --models vgg-cifar-pairs --batch 8         predicted vs measured memory per worker
  meshpar bench memory --memory-mib 160 --enforce                 ... with 160 MiB of emulated memory each
"""


#: the LocalCluster's CPU shares when --speeds is not given
LOCAL_SPEEDS = "0.9,0.3"


def register(subparsers) -> None:
    """Add ``meshpar bench`` and its benchmarks (``hetero``) to ``subparsers``."""
    parser = subparsers.add_parser("bench", help="benchmarks on emulated uneven devices",
                                   description=__doc__, epilog=EPILOG,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="bench", metavar="BENCHMARK")
    hetero = sub.add_parser("hetero", help="even vs proportional vs GA on a LocalCluster",
                            description="Measure even, proportional and GA plans side by side "
                                        "on throttled TF gRPC workers.",
                            epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _cluster_and_output_options(hetero, "hetero")
    hetero.add_argument("--quick", action="store_true", help="smaller workload, fewer steps")
    hetero.add_argument("--model", default=None, choices=["conv3d", "conv3d-quick"],
                        help="workload (default conv3d, conv3d-quick with --quick)")
    hetero.add_argument("--steps", type=int, default=None,
                        help="timed steps per strategy (default: 7, 3 with --quick)")
    hetero.set_defaults(func=run_hetero)
    train = sub.add_parser(
        "train", help="whole networks through `meshpar train --cluster`, strategies side by side",
        description="Profile the workers, then train each model on each strategy's plan "
                    "through `meshpar train --cluster` and compare steady-state throughput.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    train.add_argument("--models", default="resattnet3d-small,vgg-cifar",
                       help="comma-separated model names, or networks of one's own "
                            "(PATH.py[:ATTR], MODULE[:ATTR]) (default %(default)s)")
    _cluster_and_output_options(train, "train")
    train.add_argument("--steps", type=int, default=60, help="training steps per strategy "
                                                             "(default %(default)s)")
    train.add_argument("--batch", type=int, default=8,
                       help="global batch (default %(default)s); refused before the workers "
                            "start when those on this host cannot each hold a training step "
                            "of it at once")
    train.add_argument("--memory-mib", help="memory budget per worker in MiB (one value for "
                       "all or one per worker): the planner must fit it and rows over it "
                       "are marked by the cost model's count; --enforce runs them under it")
    train.add_argument("--memory-headroom", type=float, default=None, help=MEMORY_HEADROOM_HELP)
    train.add_argument("--enforce", action="store_true",
                       help="emulate the --memory-mib budget as each local worker's memory: "
                            "every run starts on fresh workers, a split's under the budget "
                            "(cgroup, as root), and a run whose worker outgrows it is "
                            "reported out of memory; workers alone run without it (the "
                            "ideal's reference)")
    train.add_argument("--profile-repeats", type=int, default=3,
                       help="timed steps behind each profile measurement, their median "
                            "(`meshpar profile --repeats`; default %(default)s)")
    train.add_argument("--rounds", type=int, default=1,
                       help="runs of every strategy, interleaved round after round; each row "
                            "is the median run, with the others' rates (default %(default)s)")
    train.add_argument("--verify", type=non_negative_int, default=0, metavar="K",
                       help="also a row 'verified': the fastest of the planner's K best "
                            "candidates, timed first in trial runs taking turns (default 0: "
                            "no row)")
    train.add_argument("--verify-rounds", type=positive_int, metavar="R",
                       default=None,  # None: not given (2, meshpar.bench.train.VERIFY_ROUNDS)
                       help="trial runs of each --verify candidate; the fastest median is "
                            "picked (default 2)")
    train.add_argument("--no-together", action="store_true",
                       help="leave out the run of every worker alone, all at once, in each "
                            "round (the ideal of a host whose workers all compute: they "
                            "share its memory bandwidth and cache)")
    train.set_defaults(func=run_train)
    memory = sub.add_parser(
        "memory", help="the cost model's memory per worker against fresh workers' measured peak",
        description="For each strategy, start fresh local workers, train a few steps through "
                    "`meshpar train --cluster` and compare each worker's peak resident memory "
                    "growth with the cost model's count (Linux).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    memory.add_argument("--models", default="vgg-cifar-pairs",
                        help="comma-separated model names, or networks of one's own "
                             "(PATH.py[:ATTR], MODULE[:ATTR]) (default %(default)s)")
    memory.add_argument("--speeds", default="0.9,0.3",
                        help="relative worker speeds the plans are made for (default "
                             "%(default)s; the workers themselves run unthrottled)")
    memory.add_argument("--batch", type=int, default=8,
                        help="global batch (default %(default)s); refused before the workers "
                             "start when one training step of it cannot fit in this host's "
                             "memory even split over them")
    memory.add_argument("--steps", type=int, default=8,
                        help="training steps per strategy (default %(default)s)")
    memory.add_argument("--memory-mib", help="the planner's memory budget per worker in MiB "
                                             "(one for all or one per worker)")
    memory.add_argument("--enforce", action="store_true",
                        help="emulate the --memory-mib budget as each worker's memory: a "
                             "worker that grows past it is killed (cgroup, as root) and its "
                             "strategy reported out of memory")
    memory.add_argument("--memory-headroom", type=float, default=None, help=MEMORY_HEADROOM_HELP)
    memory.add_argument("--seed", type=seed_int, default=0,
                        help="seed of the GA plans and of every training run "
                             "(default %(default)s)")
    memory.add_argument("--out", type=path_text, default=None, help="directory for memory.json")
    memory.add_argument("--json", action="store_true", help="print the result as JSON")
    memory.set_defaults(func=run_memory, no_plot=True)
    parser.set_defaults(func=lambda args: parser.print_help() or 2)


def _cluster_and_output_options(parser, name: str) -> None:
    """The options every benchmark takes: where it runs, and what it writes."""
    parser.add_argument("--speeds", default=None,  # None: not given (see _local_options)
                        help=f"CPU share of each LocalCluster worker, 0.001 to 1 "
                             f"(default {LOCAL_SPEEDS})")
    parser.add_argument("--cluster", type=path_text, default=None,
                        help="run on existing workers from a TF cluster JSON ('TF_CONFIG' to read"
                             " the environment) instead of starting a LocalCluster")
    parser.add_argument("--throttle", default=None, choices=["auto", "cgroup", "signal", "none"],
                        help="how LocalCluster workers are held to their --speeds "
                             "(default auto)")
    parser.add_argument("--cpu-period-ms", type=float, default=None, metavar="MS",
                        help="the LocalCluster throttle's period, 1 to 1000 ms (default: 10 "
                             "for the cgroup quota, 20 for the signal duty cycle); a worker "
                             "whose quota would be under 1 ms gets a longer one")
    parser.add_argument("--seed", type=seed_int, default=0,
                        help="seed of the GA plans" + ("" if name == "hetero" else
                                                       " and of every training run")
                             + " (default %(default)s)")
    parser.add_argument("--out", type=path_text, default=None,
                        help=f"directory for {name}.json and {name}.png")
    parser.add_argument("--no-plot", action="store_true",
                        help=f"with --out: write {name}.json only, no {name}.png")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run_hetero(args) -> int:
    """Run ``meshpar bench hetero``: measure every strategy, print the table (or JSON),
    optionally write ``hetero.json`` and ``hetero.png`` to ``--out``; returns 0.
    """
    from meshpar.bench import hetero as bench_hetero

    _check_out(args, "hetero")
    _local_options(args)
    speeds = parse_speeds(args.speeds)
    if args.steps is not None and args.steps < 1:
        raise ValueError("--steps must be >= 1")
    log = _log(args)
    result = bench_hetero.run_benchmark(speeds, quick=args.quick, workload_name=args.model,
                                        throttle=args.throttle, steps=args.steps,
                                        seed=args.seed, log=log, cluster_file=args.cluster,
                                        period_us=_period_us(args))
    return _report(args, bench_hetero, result, log)


def run_memory(args) -> int:
    """Run ``meshpar bench memory``: predicted vs measured memory per worker."""
    from meshpar.bench import memory as bench_memory

    models, speeds, budget, terms = _models_speeds_budget(args)
    log = _log(args)
    result = bench_memory.run_benchmark(models, speeds, batch=args.batch, steps=args.steps,
                                        memory_bytes=budget, seed=args.seed,
                                        enforce=args.enforce, log=log, memory_terms=terms)
    return _report(args, bench_memory, result, log)


def _models_speeds_budget(args) -> tuple:
    """``--models``, ``--speeds``, ``--memory-mib`` (bytes, or None) and
    ``--memory-headroom`` (the planner's memory terms) read and checked, ``--batch``
    checked: what ``bench train`` and ``bench memory`` share."""
    _check_out(args, args.bench)
    speeds = parse_speeds(args.speeds)
    models = [m.strip() for m in args.models.split(",")]
    if not any(models):
        raise ValueError("--models names no model")
    if not all(models):  # as --speeds: an empty entry is a typo, not "no model"
        raise ValueError(f"--models must be comma-separated model names, got {args.models!r}")
    from meshpar.models import ALIASES, resolve

    # a network of one's own by its absolute reference: the runs find it from any directory
    models = [resolve(name).reference or name for name in models]  # unknown names fail here
    seen = {}
    for name in models:  # each was benchmarked again (hours), its profile kept once
        same = ALIASES.get(name, name)
        if same in seen:
            also = "" if seen[same] == name else f" (as {seen[same]})"
            raise ValueError(f"--models names {name} twice{also}; each model is "
                             "benchmarked once")
        seen[same] = name
    if args.batch < 1:
        raise ValueError(f"--batch must be >= 1, got {args.batch}")
    budget = None if args.memory_mib is None else parse_memory_mib(args.memory_mib)
    return models, speeds, budget, memory_terms(args.memory_headroom)


def _check_out(args, name: str) -> None:
    """``--out``: a directory (or none yet) whose ``name.json`` (and plot) can be
    written, said before anything is measured."""
    from meshpar.bench.results import check_result_paths

    if args.no_plot and not args.out and name != "memory":  # memory draws no plot
        raise ValueError(f"--no-plot goes with --out (where {name}.png would be written); "
                         "without it no plot is drawn, so this run would ignore it")
    refuse_file_as_directory(args.out)
    check_result_paths(args.out, name, plot=not args.no_plot)


def _local_options(args) -> None:
    """--speeds and --throttle set up a LocalCluster: refused with --cluster (they were
    ignored), else filled in with their defaults when not given."""
    for flag, value in (("--speeds", args.speeds), ("--throttle", args.throttle)):
        if value is not None and args.cluster:
            raise ValueError(f"{flag} sets up a LocalCluster's workers; --cluster runs on "
                             "existing workers")
    args.speeds = args.speeds or LOCAL_SPEEDS
    args.throttle = args.throttle or "auto"


def _period_us(args):
    """``--cpu-period-ms`` in microseconds (None: the throttle's default), checked."""
    if args.cpu_period_ms is None:
        return None
    if args.cluster:
        raise ValueError("--cpu-period-ms sets the throttle of a LocalCluster; "
                         "--cluster runs on existing workers")
    from meshpar.runtime.local_cluster import MAX_PERIOD_US, MIN_PERIOD_US

    low, high = MIN_PERIOD_US / 1000, MAX_PERIOD_US / 1000  # LocalCluster's bounds, in ms
    if not low <= args.cpu_period_ms <= high:
        raise ValueError(f"--cpu-period-ms must be {low:g} to {high:g}, "
                         f"got {args.cpu_period_ms:g}")
    return int(round(args.cpu_period_ms * 1000))


def _log(args):
    """Progress lines: stdout, or stderr when stdout carries the JSON."""
    return (lambda *a: print(*a, file=sys.stderr, flush=True)) if args.json else (
        lambda *a: print(*a, flush=True))


def _report(args, bench, result: dict, log) -> int:
    """Save (``--out``) and print (table, or ``--json``) a benchmark's result."""
    if args.out:
        for path in bench.save(result, args.out, plot=not args.no_plot):
            log(f"wrote {path}")
    print(dumps_strict(result, indent=2) if args.json else bench.format_table(result))
    return 0


def run_train(args) -> int:
    """Run ``meshpar bench train``: profile, plan and train each model on each strategy;
    print the table (or JSON), optionally write ``train.json`` and ``train.png``."""
    from meshpar.bench import train as bench_train

    _local_options(args)
    if args.verify_rounds is not None and not args.verify:  # was ignored in silence
        raise ValueError("--verify-rounds goes with --verify K (K > 0): without it there are "
                         "no candidates to try, so this run would ignore it")
    models, speeds, memory, terms = _models_speeds_budget(args)
    verify_rounds = bench_train.VERIFY_ROUNDS if args.verify_rounds is None else \
        args.verify_rounds
    log = _log(args)
    result = bench_train.run_benchmark(models, speeds, cluster_file=args.cluster,
                                       steps=args.steps, batch=args.batch, seed=args.seed,
                                       throttle=args.throttle, rounds=args.rounds, log=log,
                                       memory_bytes=memory, memory_terms=terms,
                                       enforce=args.enforce,
                                       profile_repeats=args.profile_repeats,
                                       verify=args.verify, verify_rounds=verify_rounds,
                                       period_us=_period_us(args),
                                       together_row=not args.no_together)
    return _report(args, bench_train, result, log)

