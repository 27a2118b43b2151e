"""``meshpar worker``: start one TensorFlow gRPC server of a cluster.

The cluster file is TF's own format: either ``{"worker": ["host:port", ...]}``
or the ``TF_CONFIG`` layout ``{"cluster": {...}, "task": {...}}``. Without
``--cluster`` the ``TF_CONFIG`` environment variable is read. The server runs
until it is killed.
"""
from __future__ import annotations

import argparse

EPILOG = """examples:
  meshpar worker --cluster cluster.json --task 0     on host 0 of {"worker": ["h0:2222", ...]}
  TF_CONFIG='{"cluster": {"worker": ["localhost:2222"]}, "task": {"type": "worker", "index": 0}}' \\
      meshpar worker
"""

from meshpar.cli.parsing import path_text, thread_count


def register(subparsers) -> None:
    """Add ``meshpar worker`` to ``subparsers``."""
    parser = subparsers.add_parser(
        "worker", help="start one TF gRPC worker of a cluster", description=__doc__,
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cluster", type=path_text, help="cluster JSON (default: $TF_CONFIG)")
    parser.add_argument("--task", type=int, help="task index (default: from TF_CONFIG)")
    parser.add_argument("--job", default=None,
                        help="job name (default: the TF_CONFIG task's type, else worker)")
    parser.add_argument("--threads", type=thread_count, default=0,
                        help="intra/inter-op threads, 0 = TF default (default %(default)s)")
    parser.set_defaults(func=run)


def run(args) -> int:
    """Start the TF gRPC server of task ``--task`` of the cluster and block until killed."""
    from meshpar.runtime.cluster_files import load_cluster
    from meshpar.runtime.worker import serve

    cluster, task = load_cluster(args.cluster)
    index = args.task if args.task is not None else (task or {}).get("index")
    own = task.get("type", "worker") if task and args.task is None else None  # the file's
    if args.job is not None and own is not None and args.job != own:  # was ignored
        raise ValueError(f"--job {args.job} is not the task of {args.cluster or 'TF_CONFIG'} "
                         f"({own}:{index}); give --task too, or leave --job out")
    job = args.job or own or "worker"
    named = "--task" if args.task is not None else \
        f'the "task" index in {args.cluster or "TF_CONFIG"}'
    serve(cluster, job, index, threads=args.threads, index_name=named)
    return 0
