"""``meshpar profile``: measure device speeds into a device profile, with conv3d
kernels or (``--cluster --model``) the model's whole training steps.

Without ``--cluster`` it times conv3d kernels on this machine's devices (CPU,
GPUs). With ``--cluster`` (a TF cluster file or ``TF_CONFIG``, the file
``meshpar worker`` and ``meshpar train --cluster`` read) it times each worker on
its own device (the kernels, or with ``--model`` the model's training steps at
batch 1, 2, 4, ... ``--batch``), alone and while the others run, and measures the
links between them. The output, the planner's device profile, is what
``meshpar plan --profile`` reads; its devices are named after the worker tasks,
so ``meshpar train --cluster`` places each slice where the plan says.
"""
from __future__ import annotations

import argparse
import json
import sys

from meshpar.cli.parsing import (path_text, refuse_missing_directories, refuse_overwriting_inputs,
                                 refuse_replacing_another_kind, replaced_note)

EPILOG = """examples:
  meshpar profile --cluster cluster.json --model resattnet3d-small --batch 8 --out profile.json
  meshpar profile --cluster cluster.json --out profile.json   conv3d kernels on each worker
  meshpar plan --profile profile.json --model resattnet3d-small --batch 8 --out plan.json
  meshpar train --cluster cluster.json --plan plan.json --data phantoms   the plan's model and batch
  meshpar profile --quick --json                             this machine's devices, as JSON
"""


#: The largest batch ``--model`` times when ``--batch`` is not given.
DEFAULT_BATCH = 8


def register(subparsers) -> None:
    """Add ``meshpar profile`` to ``subparsers``."""
    parser = subparsers.add_parser(
        "profile", help="measure device speeds: conv3d kernels or --model steps",
        description=__doc__, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cluster", type=path_text,
                        help="TF cluster file of running `meshpar worker`s "
                             "('TF_CONFIG' reads the environment); default: "
                             "this machine's devices")
    parser.add_argument("--device-type", choices=["CPU", "GPU"],
                        help="with --cluster: the worker device to profile (default: CPU)")
    parser.add_argument("--model", help="with --cluster: time this model's whole training "
                                        "steps (batch 1, 2, 4, .., --batch) instead of the "
                                        "conv3d kernel; plan that model from the result (a "
                                        "registered name, or a network of one's own: "
                                        "PATH.py[:ATTR] or MODULE[:ATTR])")
    parser.add_argument("--batch", type=int,
                        help=f"with --model: the largest batch timed (default {DEFAULT_BATCH}); "
                             "refused before any worker is asked when the workers on this host "
                             "cannot each hold a training step of it at once")
    parser.add_argument("--out", type=path_text, help="write the device profile JSON here")
    parser.add_argument("--json", action="store_true", help="print the profile as JSON")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per size (median) (default: 3)")
    parser.add_argument("--quick", action="store_true", help="two small sizes only")
    parser.set_defaults(func=run)


def run(args) -> int:
    """Profile the devices; print the profile and optionally write its JSON; returns 0."""
    from meshpar.runtime.profiling import (DEFAULT_PROFILE_SIZES, profile_cluster_workers,
                                           profile_local_devices)

    if args.repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {args.repeats}")
    sizes = DEFAULT_PROFILE_SIZES[:2] if args.quick else DEFAULT_PROFILE_SIZES
    if args.model is not None and not args.cluster:
        raise ValueError("--model goes with --cluster (model steps are timed on the workers)")
    if args.device_type is not None and not args.cluster:
        raise ValueError("--device-type goes with --cluster (without it every device of this"
                         " machine is profiled)")
    if args.batch is not None and args.model is None:
        raise ValueError("--batch goes with --model (the conv3d profile has no batch)")
    if args.quick and args.model is not None:  # was ignored: the model's batches were timed
        raise ValueError("--quick picks two small conv3d sizes; --model times batches 1, 2, "
                         "4, .. --batch instead, so it would ignore it (give a smaller "
                         "--batch for a shorter profile)")
    batch = DEFAULT_BATCH if args.batch is None else args.batch
    if batch < 1:
        raise ValueError(f"--batch must be >= 1, got {batch}")
    refuse_overwriting_inputs(args, ["out"], ["cluster"])
    refuse_missing_directories(args.out)  # before the workers are timed
    from meshpar.planning.cluster import ClusterSpec

    refuse_replacing_another_kind(args.out, ClusterSpec.load, "device profile")
    if args.cluster:
        from meshpar.runtime.cluster_files import worker_addresses

        log = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
        model = None
        if args.model is not None:
            from meshpar.models import resolve

            model = resolve(args.model)  # an unknown model fails before any worker is asked
        cluster = profile_cluster_workers(worker_addresses(args.cluster),
                                          args.device_type or "CPU", sizes=sizes,
                                          repeats=args.repeats, model=model, batch=batch,
                                          log=log, batch_flag="--batch")
    else:
        cluster = profile_local_devices(sizes=sizes, repeats=args.repeats)
    if args.out:
        note = replaced_note(args.out, "profile")
        cluster.save(args.out)
        if note:
            print(note, file=sys.stderr)
    if args.json:
        print(json.dumps(cluster.to_dict()))
    else:
        for d in cluster.devices:
            points = ", ".join(f"{s:.3g} FLOP @ {f / 1e9:.2f} GFLOP/s" for s, f in d.profile)
            print(f"{d.name:<6} {d.device:<32} {points}")
            if d.slice_efficiency:
                print(f"{'':<6} {'slices (share of the dims: speed)':<32} " + ", ".join(
                    f"{f:.3g}: {e:.2f}" for f, e in d.slice_efficiency))
        if args.cluster:
            print(f"links: {cluster.bandwidth / 1e9:.3g} GB/s, latency {cluster.latency * 1e3:.3g} ms")
        if args.out:
            print(f"wrote {args.out}")
    return 0
