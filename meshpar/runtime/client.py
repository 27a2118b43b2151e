"""The training process as a member of a TensorFlow gRPC cluster.

Workers (``meshpar worker`` or :class:`~meshpar.runtime.local_cluster.LocalCluster`)
hold the mesh's slices. The training process starts its own in-process
server and joins them as job ``client`` through TensorFlow's ClusterSpec
propagation (the session's ``ConfigProto.cluster_def``). So the input
pipeline, Python functions included (the NIfTI reader runs in
``tf.numpy_function``), the master variables and the checkpoints stay in this
process, while every slice computes on its worker.

>>> client = ClusterClient(["10.0.0.1:2222", "10.0.0.2:2222"])    # doctest: +SKIP
>>> client.devices                                                 # doctest: +SKIP
['/job:worker/task:0/device:CPU:0', '/job:worker/task:1/device:CPU:0']
"""
from __future__ import annotations

import _thread
import contextlib
import functools
import re
import socket
import threading
from typing import Optional, Sequence

from meshpar.core.splits import true_or_false

CLIENT_JOB = "client"


def determinism_requested() -> bool:
    """Whether TensorFlow's op determinism is on in this process
    (``TF_DETERMINISTIC_OPS=1``/``true`` or ``enable_op_determinism()``)."""
    import os

    if os.environ.get("TF_DETERMINISTIC_OPS", "").lower() in ("1", "true"):
        return True
    from tensorflow.python.framework import config  # no public getter in TF 2.15

    return bool(config.is_op_determinism_enabled())


def training_determinism() -> bool:
    """Whether ``meshpar train`` runs its steps with op determinism, and so without
    Grappler's arithmetic optimizer (:meth:`ClusterClient.session_config`): on,
    unless ``TF_DETERMINISTIC_OPS`` is set in the environment (train sets it to 1
    where it is unset). A profile times its steps the same way, so that the
    planner's speeds are those of the steps it plans."""
    import os

    if "TF_DETERMINISTIC_OPS" not in os.environ:
        return True
    return determinism_requested()


class ClusterFailure(RuntimeError):
    """A worker of the cluster is unreachable or died during a run."""


def unreachable_reason(address: str, timeout: float = 2.0) -> Optional[str]:
    """Why ``host:port`` does not accept a TCP connection within ``timeout``
    seconds (a malformed address, a refusal, no answer), or None if it does."""
    host, sep, port = str(address).rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return "not a 'host:port' address"
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return None
    except socket.timeout:
        return f"no answer within {timeout:g} s"
    except OSError as err:
        return err.strerror or type(err).__name__


def check_address_reachable(address: str, timeout: float = 5.0, what: str = "worker") -> None:
    """ValueError naming ``address`` if it does not accept a TCP connection
    within ``timeout`` seconds (see :func:`meshpar.runtime.client.unreachable_reason`)."""
    reason = unreachable_reason(address, timeout)
    if reason == "not a 'host:port' address":
        raise ValueError(f"{what} address {address!r} is not 'host:port'")
    if reason is not None:
        raise ValueError(f"{what} at {address} is unreachable: {reason} "
                         f"(is `meshpar worker` running there?)")


#: HTTP/2's client preface and an empty SETTINGS frame: a gRPC server answers with its own
_HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def check_grpc_server(address: str, timeout: float = 5.0, what: str = "worker") -> None:
    """ValueError naming ``address`` unless what listens there answers as a gRPC (HTTP/2)
    server within ``timeout`` seconds: a TF session on anything else waits forever."""
    host, _, port = str(address).rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as conn:
            conn.sendall(_HTTP2_HELLO)
            head = b""
            while len(head) < 4:  # a frame header may arrive in pieces
                chunk = conn.recv(9 - len(head))
                if not chunk:
                    break
                head += chunk
    except (OSError, ValueError):  # no answer in time (socket.timeout), a reset
        head = b""
    if len(head) < 4 or head[3] != 4:  # frame type 4: SETTINGS
        raise ValueError(f"{what} at {address} answers but not as a TensorFlow gRPC server "
                         f"within {timeout:g} s (is `meshpar worker` running there?)")


_WORKER_DEVICE = re.compile(
    r"^/job:worker(?:/replica:0)?/task:(\d+)(?:/device:([A-Za-z]+:\d+))?$")


def parse_worker_device(name: str) -> tuple:
    """``"/job:worker/task:1/device:GPU:0"`` -> ``(1, "GPU:0")``; ``(1, None)``
    without a device part; ``(None, None)`` for anything that is not a worker task."""
    match = _WORKER_DEVICE.match(str(name).strip())
    if not match:
        return None, None
    return int(match.group(1)), match.group(2)


@functools.lru_cache(maxsize=256)
def canonical_address(address: str) -> str:
    """``host:port`` with the host resolved to its IPv4 address when it resolves
    (``localhost:2222`` -> ``127.0.0.1:2222``), else as written in lower case: how
    two files that spell one worker differently are matched."""
    host, _, port = str(address).rpartition(":")
    try:
        host = socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0]
    except (OSError, UnicodeError):
        host = host.lower()
    return f"{host}:{port}"


def describe_down(down) -> str:
    """``[(task, address)]`` of down workers as text, e.g. ``"worker 1 at h1:2222"``."""
    return ", ".join(f"worker {i} at {address}" for i, address in down)


#: The longest worker timeout ``ClusterClient`` takes: about 290 million years in ms,
#: TF's int64.
MAX_TIMEOUT_S = (2**63 - 1) // 1000


class ClusterClient:
    """Join workers at ``addresses`` as job ``client``; see the module docstring.

    Parameters
    ----------
    addresses : list of "host:port"
        The ``worker`` job, task i at ``addresses[i]``.
    device_type : "CPU" or "GPU"
        Device of each worker that holds its slice.
    check : bool
        Probe every worker first and raise :class:`ClusterFailure` naming the
        unreachable ones (instead of hanging in session creation).
    timeout_s : float
        Longest an operation may wait (``operation_timeout_in_ms``): a step
        blocked on a dead worker fails after it instead of hanging.
    """

    def __init__(self, addresses: Sequence[str], device_type: str = "CPU", check: bool = True,
                 timeout_s: float = 300.0):
        # TF counts whole milliseconds, 0 for none (1e-9 s waited forever), in an int64
        # (inf was an OverflowError traceback)
        if isinstance(timeout_s, (str, bytes, bool)) or not 0.001 <= timeout_s <= MAX_TIMEOUT_S:
            raise ValueError(f"worker timeout must be > 0 seconds, from 0.001 (TF counts "
                             f"milliseconds) to {MAX_TIMEOUT_S:g}, got {timeout_s!r}")
        self.timeout_ms = int(round(timeout_s * 1000))
        check = true_or_false(check, "check")  # check="no" asked every worker
        # one address string was a cluster of its characters ('1', '2', '7', '.', ...)
        self.addresses = [] if isinstance(addresses, (str, bytes)) else list(addresses)
        if isinstance(addresses, (str, bytes)) or not all(
                isinstance(a, str) and a for a in self.addresses):
            raise ValueError(f"addresses must be a list of worker addresses (host:port), got "
                             f"{addresses!r}")
        import tensorflow.compat.v1 as tf

        if not self.addresses:
            raise ValueError("the cluster has no workers")
        self.tasks = list(range(len(self.addresses)))  # the workers used: see use_only
        if check:
            self.check_reachable()
        self.server = tf.distribute.Server.create_local_server()
        own = self.server.target.replace("grpc://", "")
        self.cluster_spec = tf.train.ClusterSpec({CLIENT_JOB: [own], "worker": self.addresses})
        self.devices = [f"/job:worker/task:{i}/device:{device_type}:0"
                        for i in range(len(self.addresses))]
        self.client_device = f"/job:{CLIENT_JOB}/task:0/device:CPU:0"

    def use_only(self, tasks: Sequence[int]) -> None:
        """From now on this client's sessions, probes and checks involve worker
        ``tasks`` only: a plan that leaves workers out runs while those are down
        (a session otherwise waits for every worker of the cluster file)."""
        self.tasks = self._checked_tasks(tasks)

    def _checked_tasks(self, tasks: Sequence[int]) -> list:
        bad = [t for t in tasks if not 0 <= int(t) < len(self.addresses)]
        if bad or not tasks:
            raise ValueError(f"worker tasks {list(tasks)} are not a non-empty subset of "
                             f"0..{len(self.addresses) - 1}")
        return sorted({int(t) for t in tasks})

    def _down(self, timeout: float = 2.0) -> list:
        """``[(task, address)]`` of the used workers that refuse a TCP connection."""
        return [(t, self.addresses[t]) for t in self.tasks
                if unreachable_reason(self.addresses[t], timeout) is not None]

    def check_reachable(self) -> None:
        """ClusterFailure naming every used worker that does not accept a connection now."""
        down = self._down()
        if down:
            raise ClusterFailure(f"cannot reach {describe_down(down)}")

    @property
    def target(self) -> str:
        """Session target: this process's own server, the master of the session."""
        return self.server.target

    def session_config(self, base=None, timeout_ms: Optional[int] = None,
                       deterministic: Optional[bool] = None):
        """``base`` (a ConfigProto) plus this cluster's ``cluster_def`` and the
        operation timeout.

        ``deterministic`` (default: op determinism is on, i.e.
        ``TF_DETERMINISTIC_OPS=1`` or ``tf.config.experimental.enable_op_determinism``)
        also turns Grappler's arithmetic optimizer off. On a graph that spans
        several tasks it does not rewrite the same way from one run to the
        next: two runs of one command drifted by ~1e-7 per step (1.3e-6 after
        30 steps of resattnet3d-tiny on three workers). Without it runs and resumed runs are bit-identical; its
        cost on a two-worker batch split of resattnet3d-small was within the
        noise (docs/measuring.md). It is off only when determinism is asked for.
        """
        import tensorflow.compat.v1 as tf
        from tensorflow.core.protobuf import rewriter_config_pb2

        config = tf.ConfigProto()
        if base is not None:
            config.CopyFrom(base)
        config.cluster_def.CopyFrom(self.cluster_spec.as_cluster_def())
        config.operation_timeout_in_ms = self.timeout_ms if timeout_ms is None else timeout_ms
        if determinism_requested() if deterministic is None else deterministic:
            config.graph_options.rewrite_options.arithmetic_optimization = (
                rewriter_config_pb2.RewriterConfig.OFF)
        if len(self.tasks) < len(self.addresses):
            self.restrict(config, self.tasks)
        return config

    def restrict(self, config, tasks: Sequence[int]):
        """Make the sessions of ``config`` (a ConfigProto, changed in place and
        returned) use only worker ``tasks`` and this process: the others may be
        down (a session otherwise waits for every worker of the cluster)."""
        del config.device_filters[:]
        config.device_filters.extend([f"/job:{CLIENT_JOB}"] + [
            f"/job:worker/task:{t}" for t in self._checked_tasks(tasks)])
        return config

    def down_workers(self, timeout: float = 2.0) -> list:
        """``[(task, address)]`` of the used workers that do not accept a TCP connection now."""
        return self._down(timeout)

    @contextlib.contextmanager
    def watch(self, interval: float = 2.0, on_stuck=None, grace: float = 10.0):
        """Within: a thread probes the workers every ``interval`` seconds and,
        when one stops answering, interrupts the main thread, which raises
        :class:`ClusterFailure` naming it.

        TF cannot always be interrupted: after a worker dies, the monitored
        session retries it and ``Session.close`` can block in C for good. If
        the main thread has not come back ``grace`` seconds after the
        interrupt, ``on_stuck(failure)`` is called from the watching thread
        (a command line tool reports and exits there)."""
        stop = threading.Event()
        self.lost = []

        def probe_loop():
            while not stop.wait(interval):
                down = self.down_workers(timeout=interval)
                if down and not stop.is_set():
                    self.lost = down
                    _thread.interrupt_main()
                    if on_stuck is not None and not stop.wait(grace):
                        on_stuck(ClusterFailure(f"{describe_down(down)} stopped answering"))
                    return

        thread = threading.Thread(target=probe_loop, name="meshpar-watch", daemon=True)
        thread.start()
        try:
            yield self
        except KeyboardInterrupt:
            if self.lost:
                raise ClusterFailure(f"{describe_down(self.lost)} stopped answering") from None
            raise
        finally:
            stop.set()
            thread.join(timeout=interval + 3)

    def place(self, plan_devices: Sequence[str], keep_device_type: bool = True,
              plan_addresses: Optional[Sequence[str]] = None, log=None) -> list:
        """The worker device of each of a plan's devices, in the plan's (pnum) order.

        A plan names its devices ``/job:worker/task:i[/device:TYPE:k]`` (as
        ``meshpar profile --cluster`` and ``ClusterSpec.from_speeds`` write
        them); each is matched to task ``i`` of this cluster by name, so a plan
        that puts task 1 first puts pnum 0 on task 1. The device part, when
        the plan gives one and ``keep_device_type``, is kept; else this
        client's device type is used.

        ``plan_addresses`` (a plan made from a profile of a TF cluster records
        them, ``extra["worker_addresses"]``): where each of the plan's devices
        was profiled. When this cluster lists all of them, each device goes to
        the task at its address, so a cluster file that lists the same workers
        in another order still gets every slice where the plan meant it (a
        task number alone would hand the big share to another machine); when
        it lists none of them (new workers, e.g. restarted on other ports),
        the task numbers decide and ``log`` is told.
        ValueError (one line) for a device that is not a task of this cluster,
        a plan that names a task twice, or a cluster that lists some of the
        plan's workers but not all.
        """
        parsed = [parse_worker_device(name) for name in plan_devices]  # (task, device)
        for pnum, (name, (task, _)) in enumerate(zip(plan_devices, parsed)):
            if task is None or not 0 <= task < len(self.addresses):
                raise ValueError(
                    f"the plan places pnum {pnum} on {name!r}, which is not a worker of this "
                    f"cluster (tasks /job:worker/task:0..{len(self.addresses) - 1}); plan for "
                    f"this cluster (meshpar profile --cluster, then meshpar plan --profile)")
        tasks = [task for task, _ in parsed]
        if plan_addresses:
            tasks = self._tasks_by_address(plan_devices, tasks, plan_addresses, log)
        placed, seen = [], {}
        for pnum, (task, (_, device)) in enumerate(zip(tasks, parsed)):
            if task in seen:
                raise ValueError(f"the plan places pnum {seen[task]} and {pnum} on the same "
                                 f"worker task {task}")
            seen[task] = pnum
            placed.append(f"/job:worker/task:{task}/device:{device}"
                          if device and keep_device_type else self.devices[task])
        return placed

    def _tasks_by_address(self, plan_devices, tasks, plan_addresses, log,
                          what: str = "the plan") -> list:
        """The task of each of ``what``'s devices, found by the address it was
        profiled at."""
        plan_addresses = [str(a) for a in plan_addresses]
        if len(plan_addresses) != len(plan_devices):
            raise ValueError(f"{what} records {len(plan_addresses)} worker addresses for "
                             f"{len(plan_devices)} devices")
        # one worker under two spellings (localhost / 127.0.0.1) is one worker
        ours = [canonical_address(a) for a in self.addresses]
        missing = [a for a in plan_addresses if canonical_address(a) not in ours]
        if not missing:
            return [ours.index(canonical_address(a)) for a in plan_addresses]
        if len(missing) < len(plan_addresses):
            raise ValueError(
                f"{what} was made for workers at {', '.join(plan_addresses)}; this cluster "
                f"lists {', '.join(self.addresses)}, without {', '.join(missing)}: profile "
                f"this cluster (meshpar profile --cluster, then meshpar plan --profile)")
        if log is not None:
            log(f"{what} was profiled on workers at {', '.join(plan_addresses)}, none of "
                f"which this cluster lists: its devices go to the tasks they name")
        return tasks

    def follow_addresses(self, profile, log=None):
        """``profile`` (a ClusterSpec from ``meshpar profile --cluster``) with its devices
        renamed to the tasks at their profiled addresses in this cluster (the rules
        of :meth:`place`): a cluster file that lists the workers in another order
        keeps each worker's measured speeds on that worker."""
        import dataclasses

        addresses = (profile.extra or {}).get("addresses")
        if not addresses or len(addresses) != len(profile.devices):
            return profile
        names = [d.device for d in profile.devices]
        parsed = [parse_worker_device(n) for n in names]  # (task, device)
        tasks = [task for task, _ in parsed]
        if any(t is None for t in tasks):
            return profile
        moved = self._tasks_by_address(names, tasks, addresses, log, what="the profile")
        if moved == tasks:
            return profile
        devices = tuple(
            dataclasses.replace(d, device=f"/job:worker/task:{t}/device:{kind or 'CPU:0'}")
            for d, t, (_, kind) in zip(profile.devices, moved, parsed))
        extra = dict(profile.extra)
        if extra.get("alone_profile"):  # keyed by device: renamed with the devices
            extra["alone_profile"] = {new.device: points
                                      for old, new in zip(profile.devices, devices)
                                      if (points := profile.alone_points(old.device))}
        return dataclasses.replace(profile, devices=devices, extra=extra)

    def check_devices(self, devices: Sequence[str]) -> None:
        """ValueError (one line) unless every one of ``devices`` (``/job:worker/task:i/
        device:TYPE:k``) exists on its worker: the sessions place softly, so a slice
        asked of a GPU that a worker lacks would run on its CPU without a word."""
        import tensorflow.compat.v1 as tf

        config = self.session_config(tf.ConfigProto(), timeout_ms=30_000)
        with tf.Session(self.target, config=config) as session:
            have = {}
            for d in session.list_devices():
                task, device = parse_worker_device(d.name)
                if task is not None and device:
                    have.setdefault(task, set()).add(device.upper())
        for name in devices:
            task, device = parse_worker_device(name)
            if task is None or device is None or device.upper() in have.get(task, set()):
                continue
            raise ValueError(f"worker {task} at {self.addresses[task]} has no {device} "
                             f"(it has {', '.join(sorted(have.get(task, ()))) or 'no devices'})"
                             f"; {name} cannot hold a slice")

    def failure(self, error: Optional[BaseException] = None) -> ClusterFailure:
        """A ClusterFailure naming the dead workers (or the error, if all answer)."""
        down = self.down_workers()
        if down:
            return ClusterFailure(f"{describe_down(down)} stopped answering")
        first = str(error).strip().splitlines()[0] if error is not None else "unknown error"
        return ClusterFailure(f"the cluster failed: {first}")
