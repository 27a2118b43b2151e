"""``meshpar profile``: measure the local devices (CPU, GPUs) with conv3d kernels.

Writes a cluster JSON for ``meshpar plan --cluster``. Imports TensorFlow when run.
"""
from __future__ import annotations

import argparse
import json

EPILOG = """examples:
  meshpar profile --out cluster.json             profile this machine's devices
  meshpar profile --quick --json                 two small sizes, print the cluster JSON
  meshpar plan --cluster cluster.json --model resattnet3d-small --batch 8
"""


def register(subparsers) -> None:
    """Add ``meshpar profile`` to ``subparsers``."""
    parser = subparsers.add_parser(
        "profile", help="measure local device speeds (conv3d) into a cluster JSON",
        description="Time conv3d training kernels at several sizes on each local device.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="write the cluster JSON here")
    parser.add_argument("--json", action="store_true", help="print the cluster as JSON")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per size (median)")
    parser.add_argument("--quick", action="store_true", help="two small sizes only")
    parser.set_defaults(func=run)


def run(args) -> int:
    """Profile the local devices; print the cluster and optionally write its JSON; returns 0."""
    from meshpar.cluster import DEFAULT_PROFILE_SIZES, profile_local_devices

    if args.repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {args.repeats}")
    sizes = DEFAULT_PROFILE_SIZES[:2] if args.quick else DEFAULT_PROFILE_SIZES
    cluster = profile_local_devices(sizes=sizes, repeats=args.repeats)
    if args.out:
        cluster.save(args.out)
    if args.json:
        print(json.dumps(cluster.to_dict()))
    else:
        for d in cluster.devices:
            points = ", ".join(f"{s:.3g} FLOP @ {f / 1e9:.2f} GFLOP/s" for s, f in d.profile)
            print(f"{d.name:<6} {d.device:<16} {points}")
        if args.out:
            print(f"wrote {args.out}")
    return 0
