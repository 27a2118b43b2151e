"""TensorFlow's cluster description: a JSON file or the ``TF_CONFIG`` variable.

The file is TF's own format, either ``{"worker": ["host:port", ...]}`` (job
name -> task addresses) or the ``TF_CONFIG`` layout
``{"cluster": {...}, "task": {"type": "worker", "index": 0}}``. This is the file
``meshpar worker`` serves and ``meshpar train --cluster`` joins; the planner's
device file (speeds, memory, links) is a different thing,
:class:`meshpar.planning.cluster.ClusterSpec`. Each task needs a server of its
own: an address listed twice, under any spelling of one server (``localhost``,
``127.0.0.1``, ``::1`` and this machine's host name alike, a host name in any
case, a port with a leading zero), is refused; a port is ASCII digits. The mesh runs
on the ``worker`` job alone (:func:`worker_addresses`): a file that lists another job
besides it (a ``chief``, a ``ps``) is refused, as nothing would run there.
"""
from __future__ import annotations

import json
import os
from typing import Optional

from meshpar.runtime.client import check_address_reachable, check_grpc_server

#: The value of a ``--cluster`` flag that means "read the TF_CONFIG environment variable".
TF_CONFIG = "TF_CONFIG"


def load_cluster(path: Optional[str] = None) -> tuple:
    """Return (cluster dict job -> addresses, task dict or None) from a file or TF_CONFIG."""
    if path and path != TF_CONFIG:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON ({err})") from None
        except UnicodeDecodeError as err:
            raise ValueError(f"cluster file {path}: not UTF-8 text ({err})") from None
        except (FileNotFoundError, NotADirectoryError):  # NotADirectory: a file above it
            raise FileNotFoundError(f"cluster file {path} not found") from None
        except IsADirectoryError:
            raise IsADirectoryError(f"cluster file {path} is a directory") from None
        source = path
    else:
        if not os.environ.get("TF_CONFIG"):
            raise ValueError("--cluster TF_CONFIG reads the TF_CONFIG environment variable, "
                             "which is not set (or empty)" if path else
                             "no --cluster given and TF_CONFIG is not set (or empty)")
        try:
            data = json.loads(os.environ["TF_CONFIG"])
        except json.JSONDecodeError as err:
            raise ValueError(f"TF_CONFIG is not valid JSON ({err})") from None
        source = "TF_CONFIG"
    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected a JSON object")
    for keys, what in ((("method", "mesh_shape", "layout"), "a plan (`meshpar plan --out`)"),
                       (("devices", "bandwidth"), "a device profile (`meshpar profile --out`)")):
        if all(k in data for k in keys):  # was "job 'method' must list 'host:port' addresses"
            raise ValueError(f"{source} is {what}, not a TF cluster file (job name -> "
                             "'host:port' addresses, e.g. {\"worker\": [\"localhost:2222\"]})")
    cluster = data.get("cluster", data)
    task = data.get("task")
    if not isinstance(cluster, dict) or not cluster:
        raise ValueError(f"{source}: no cluster jobs found")
    if task is not None and not isinstance(task, dict):
        raise ValueError(f"{source}: \"task\" must be an object such as "
                         f"{{\"type\": \"worker\", \"index\": 0}}, got {task!r}")
    seen = {}  # address -> "job task i"
    for job, addresses in cluster.items():
        if not isinstance(addresses, list) or not all(
                isinstance(a, str) and ":" in a for a in addresses):
            raise ValueError(f"{source}: job {job!r} must list 'host:port' addresses")
        if not addresses:
            raise ValueError(f"{source}: job {job!r} lists no tasks")
        for index, address in enumerate(addresses):
            host, _, port = address.rpartition(":")
            # ASCII digits: '２２' (full-width) was taken for 22 and '²' was int()'s traceback
            if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
                raise ValueError(f"{source}: job {job!r}: {address!r} needs a port in 1..65535")
            if "/" in host:  # a scheme or path: 'http://h:1' was dialled, 'cannot reach'
                bare = host.rpartition("://")[2].partition("/")[0]
                raise ValueError(f"{source}: job {job!r}: {address!r} is not 'host:port' (no "
                                 f"scheme or path: {bare or 'HOST'}:{port})")
            if not host or any(c.isspace() for c in host):
                raise ValueError(f"{source}: job {job!r}: {address!r} needs a host (a name or "
                                 "IP address, no spaces) before the ':port'")
            same = _server_key(host, port)  # one server per address, across jobs too:
            if same in seen:  # localhost:2222 and 127.0.0.1:02222 are one server
                first, where = seen[same]
                also = "" if first == address else f" (as {first})"
                raise ValueError(f"{source}: {address} is listed twice{also} ({where} and "
                                 f"{job} task {index}); each task needs its own address")
            seen[same] = (address, f"{job} task {index}")
    return cluster, task


#: names of this machine's loopback interface: one server answers at each of them
_LOOPBACK = ("localhost", "127.0.0.1", "::1")


def _server_key(host: str, port: str) -> tuple:
    """``(host, port)`` of the server an address reaches: the host in lower case (names
    are case-insensitive), the loopback names and this machine's own name as one (a TF
    server listens on all of them), the port as a number."""
    import socket

    host = host.strip("[]").lower()
    here = host in _LOOPBACK or host == socket.gethostname().lower()
    return ("localhost" if here else host, int(port))


def worker_addresses(cluster_file: Optional[str]) -> list:
    """Worker addresses from a TF cluster JSON file, or ``TF_CONFIG`` when None or
    ``"TF_CONFIG"``: the tasks of its ``worker`` job, each of which holds a slice.
    ValueError for a cluster without that job, or with another job besides it
    (``chief``, ``ps``, ...): meshpar places no slice there, and the process that
    runs the mesh coordinates it, so such a job's machines sat idle in silence
    (TF's convention makes a chief a worker that also coordinates)."""
    jobs, _ = load_cluster(cluster_file)
    source = cluster_file if cluster_file and cluster_file != TF_CONFIG else "TF_CONFIG"
    if "worker" not in jobs:
        raise ValueError(f"the cluster has no 'worker' job (jobs: {sorted(jobs)})")
    others = sorted(set(jobs) - {"worker"}, key=str)
    if others:
        job = others[0]
        chief = (", and the process that runs the mesh coordinates it (no chief)"
                 if job in ("chief", "master") else "")
        raise ValueError(f"{source}: job {job!r} ({', '.join(jobs[job])}) would sit idle: "
                         f"meshpar places every slice, variables too, on a 'worker' task"
                         f"{chief}; list those machines under 'worker' to train on them, or "
                         "leave the job out")
    return list(jobs["worker"])


class ExistingCluster:
    """Workers already running elsewhere (``meshpar worker``), from a TF
    cluster file or ``TF_CONFIG``: the benchmark runs on them as they are."""

    throttle = "none"
    pin = False

    def __init__(self, cluster_file: Optional[str] = None, device_type: str = "CPU",
                 connect_timeout: float = 5.0):
        self.addresses = worker_addresses(cluster_file)
        self.devices = [f"/job:worker/task:{i}/device:{device_type}:0"
                        for i in range(len(self.addresses))]
        self.speeds = [1.0] * len(self.addresses)
        self.connect_timeout = float(connect_timeout)

    def check_reachable(self) -> None:
        """Raise ValueError naming the first worker that does not accept a TCP
        connection within ``connect_timeout`` seconds, then the first that does not
        answer as a gRPC server. A TF session on a dead worker (or on something else
        listening there) waits for it forever; this turns that hang into an error."""
        for task, address in enumerate(self.addresses):
            check_address_reachable(address, self.connect_timeout, f"worker task {task}")
        for task, address in enumerate(self.addresses):  # then each must speak gRPC
            check_grpc_server(address, self.connect_timeout, f"worker task {task}")

    @property
    def target(self) -> str:
        """Session target: ``grpc://`` address of the first worker."""
        return f"grpc://{self.addresses[0]}"

    def describe(self) -> str:
        """One line naming the workers, for the benchmark log."""
        return f"existing cluster of {len(self.addresses)} workers: {', '.join(self.addresses)}"

    def __enter__(self):
        self.check_reachable()
        return self

    def __exit__(self, *exc):
        return None
