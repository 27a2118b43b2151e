"""One task of a TensorFlow gRPC cluster: a server that runs the slices sent to it."""
from __future__ import annotations

import os
from typing import Optional


def serve(cluster: dict, job: str, index: int, threads: int = 0,
          announce: Optional[callable] = print) -> None:
    """Start the TF gRPC server of task ``index`` of ``job`` and block until killed.

    ``threads`` sets intra/inter-op threads (0: TensorFlow's default).
    """
    if job not in cluster:
        raise ValueError(f"job {job!r} is not in the cluster (jobs: {sorted(cluster)})")
    if index is None or not 0 <= int(index) < len(cluster[job]):
        raise ValueError(f"--task must be in 0..{len(cluster[job]) - 1} for job {job!r}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow.compat.v1 as tf

    config = tf.ConfigProto()
    if threads:
        config.intra_op_parallelism_threads = threads
        config.inter_op_parallelism_threads = threads
    server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=job,
                                  task_index=int(index), config=config, start=True)
    if announce is not None:
        announce(f"meshpar worker {job}:{index} serving at {cluster[job][int(index)]}", flush=True)
    server.join()
