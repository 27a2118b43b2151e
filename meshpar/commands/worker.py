"""``meshpar worker``: start one TensorFlow gRPC server of a cluster.

The cluster file is TF's own format: either ``{"worker": ["host:port", ...]}``
or the ``TF_CONFIG`` layout ``{"cluster": {...}, "task": {...}}``. Without
``--cluster`` the ``TF_CONFIG`` environment variable is read. The server runs
until it is killed.
"""
from __future__ import annotations

import argparse
import json
import os

EPILOG = """examples:
  meshpar worker --cluster cluster.json --task 0     on host 0 of {"worker": ["h0:2222", ...]}
  TF_CONFIG='{"cluster": {"worker": ["localhost:2222"]}, "task": {"type": "worker", "index": 0}}' \\
      meshpar worker
"""


def register(subparsers) -> None:
    """Add ``meshpar worker`` to ``subparsers``."""
    parser = subparsers.add_parser(
        "worker", help="start one TF gRPC worker of a cluster", description=__doc__,
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cluster", help="cluster JSON (default: $TF_CONFIG)")
    parser.add_argument("--task", type=int, help="task index (default: from TF_CONFIG)")
    parser.add_argument("--job", default="worker", help="job name (default %(default)s)")
    parser.add_argument("--threads", type=int, default=0,
                        help="intra/inter-op threads, 0 = TF default (default %(default)s)")
    parser.set_defaults(func=run)


def load_cluster(path=None) -> tuple:
    """Return (cluster dict job -> addresses, task dict or None) from a file or TF_CONFIG."""
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON ({err})") from None
        source = path
    else:
        if not os.environ.get("TF_CONFIG"):
            raise ValueError("no --cluster given and TF_CONFIG is not set")
        try:
            data = json.loads(os.environ["TF_CONFIG"])
        except json.JSONDecodeError as err:
            raise ValueError(f"TF_CONFIG is not valid JSON ({err})") from None
        source = "TF_CONFIG"
    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected a JSON object")
    cluster = data.get("cluster", data)
    task = data.get("task")
    if not isinstance(cluster, dict) or not cluster:
        raise ValueError(f"{source}: no cluster jobs found")
    for job, addresses in cluster.items():
        if not isinstance(addresses, list) or not all(
                isinstance(a, str) and ":" in a for a in addresses):
            raise ValueError(f"{source}: job {job!r} must list 'host:port' addresses")
    return cluster, task


def run(args) -> int:
    """Start the TF gRPC server of task ``--task`` of the cluster and block until killed."""
    cluster, task = load_cluster(args.cluster)
    index = args.task if args.task is not None else (task or {}).get("index")
    job = args.job if args.task is not None or not task else task.get("type", args.job)
    if job not in cluster:
        raise ValueError(f"job {job!r} is not in the cluster (jobs: {sorted(cluster)})")
    if index is None or not 0 <= int(index) < len(cluster[job]):
        raise ValueError(f"--task must be in 0..{len(cluster[job]) - 1} for job {job!r}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow.compat.v1 as tf

    config = tf.ConfigProto()
    if args.threads:
        config.intra_op_parallelism_threads = args.threads
        config.inter_op_parallelism_threads = args.threads
    server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=job,
                                  task_index=int(index), config=config, start=True)
    print(f"meshpar worker {job}:{index} serving at {cluster[job][int(index)]}", flush=True)
    server.join()
    return 0
