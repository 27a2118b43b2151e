"""One task of a TensorFlow gRPC cluster: a server that runs the slices sent to it."""
from __future__ import annotations

import os
import re
import time
from typing import Optional

#: what a worker prints once it serves (LocalCluster waits for it)
SERVING = "serving at"
#: set by LocalCluster to its own pid: the worker exits when that process is gone
PARENT_ENV = "MESHPAR_WORKER_PARENT"
#: set by LocalCluster to its scratch directory (cluster file, worker logs): removed
#: by the workers when that process is gone without removing it
SCRATCH_ENV = "MESHPAR_WORKER_SCRATCH"
#: the prefix of that directory's name: nothing else is ever removed for it
SCRATCH_PREFIX = "meshpar-cluster-"


def serve(cluster: dict, job: str, index: int, threads: int = 0,
          announce: Optional[callable] = print, index_name: str = "--task") -> None:
    """Start the TF gRPC server of task ``index`` of ``job`` and block until killed.

    ``threads`` sets intra/inter-op threads (0: TensorFlow's default); the kernels run
    with op determinism (``TF_DETERMINISTIC_OPS=1``) unless the environment sets it;
    ``index_name``: where ``index`` came from, as an out-of-range error names it.
    """
    if job not in cluster:
        raise ValueError(f"job {job!r} is not in the cluster (jobs: {sorted(cluster)})")
    if index is None:
        raise ValueError("which task to serve: give --task, or a TF_CONFIG with "
                         "\"task\": {\"type\": ..., \"index\": ...}")
    # ASCII digits: int() read a full-width '\uff10' as task 0 and died on a superscript
    # ('invalid literal for int()'), which str.isdigit let through
    if isinstance(index, bool) or not re.fullmatch(r"-?[0-9]+", str(index).strip()):
        raise ValueError(f"the task index must be a whole number, got {index!r}")
    index = int(str(index).strip())
    if not 0 <= index < len(cluster[job]):
        raise ValueError(f"{index_name} must be in 0..{len(cluster[job]) - 1} for job {job!r}, "
                         f"got {index}")
    address = cluster[job][int(index)]
    refuse_port_in_use(address)
    exit_with_parent(os.environ.get(PARENT_ENV))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # the slices' kernels run here, not in the client that set it (README, "Determinism")
    os.environ.setdefault("TF_DETERMINISTIC_OPS", "1")
    import tensorflow.compat.v1 as tf

    config = tf.ConfigProto()
    if threads:
        config.intra_op_parallelism_threads = threads
        config.inter_op_parallelism_threads = threads
    server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=job,
                                  task_index=int(index), config=config, start=True)
    if announce is not None:
        host = address.rsplit(":", 1)[0]
        if not is_local_host(host):
            announce(f"meshpar worker: note: {host} is not an address of this machine: the "
                     f"others look for {job}:{index} there (a wrong --task or cluster file?)",
                     flush=True)
        announce(f"meshpar worker {job}:{index} {SERVING} {address}", flush=True)  # last
    server.join()


def is_local_host(host: str) -> bool:
    """Whether ``host`` (a name or an IPv4 address) names this machine: some address it
    resolves to can be bound here. A name that does not resolve is not local."""
    import socket

    try:
        ips = {info[4][0] for info in socket.getaddrinfo(host, None, socket.AF_INET)}
    except (OSError, UnicodeError):
        return False
    for ip in ips:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((ip, 0))
                return True
            except OSError:
                continue
    return False


def refuse_port_in_use(address: str) -> None:
    """ValueError when ``address``'s port cannot be bound on this machine (another
    worker or program holds it): said in one line, before gRPC prints its own
    dump and TensorFlow raises."""
    import socket

    port = int(address.rsplit(":", 1)[1])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds
        try:
            probe.bind(("0.0.0.0", port))
        except OSError as err:
            raise ValueError(f"{address}: port {port} is already in use on this machine "
                             f"({err.strerror}); stop what holds it or list another port") from None


def exit_with_parent(parent, interval: float = 0.5) -> None:
    """When ``parent`` (a pid, as a string; None or "": nothing) is set, a daemon thread
    ends this process once its parent is no longer that process. A LocalCluster sets it
    so that its workers go with it when it is killed (SIGTERM or SIGKILL run no cleanup
    code), instead of serving forever as orphans, and takes its CPU-quota and memory
    cgroups and the cluster's scratch directory with it; a worker started by hand is
    left be."""
    if not parent or not str(parent).isdigit() or int(parent) != os.getppid():
        return  # unset, or inherited from further up: not this worker's parent
    import threading

    expected = int(parent)
    _continue_when_parent_dies()

    def watch():
        while os.getppid() == expected:
            time.sleep(interval)
        from meshpar.runtime.cgroups import leave_own_groups

        leave_own_groups()  # the parent that would have removed them is gone
        _remove_cluster_scratch(os.environ.get(SCRATCH_ENV))
        os._exit(0)

    threading.Thread(target=watch, name="meshpar-exit-with-parent", daemon=True).start()


def _continue_when_parent_dies() -> None:
    """Have Linux send this process SIGCONT when its parent dies (prctl
    PR_SET_PDEATHSIG). A worker that a LocalCluster's signal throttle had just stopped
    (SIGSTOP) when the holder was killed ran no watcher: it stayed stopped for good,
    an orphan. Resumed, its watcher sees the parent gone and ends it. A spurious
    SIGCONT (the thread that started it ending early) only lengthens one duty cycle."""
    import signal

    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGCONT), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: no parent-death signal to ask for
        pass


def _remove_cluster_scratch(scratch) -> None:
    """Remove a LocalCluster's scratch directory ``scratch`` (named ``meshpar-cluster-*``;
    anything else, or None, is left): its killed holder left one in the temporary
    directory per run. Each worker tries; the others' open logs do not stop it."""
    import shutil

    if scratch and os.path.basename(os.path.normpath(scratch)).startswith(SCRATCH_PREFIX):
        shutil.rmtree(scratch, ignore_errors=True)
