"""Emulated uneven devices: throttled TensorFlow gRPC workers on one machine.

:class:`LocalCluster` starts one real ``tf.distribute.Server`` process per
device on 127.0.0.1 (free ports), single-threaded, pinned to its own core when
there are enough cores, and limits each one's CPU share to its speed:

* ``cgroup``: a CPU quota with a short period (10 ms; with the default 100 ms
  a short step runs at burst speed and the quota never bites), cgroup v1
  ``cpu.cfs_quota_us`` or v2 ``cpu.max``, when the cgroup filesystem is
  writable (root);
* ``signal``: otherwise a SIGSTOP/SIGCONT duty cycle driven from this process.

With ``memory_bytes`` each worker may also grow by at most its budget once it
is ready (an emulated device memory, :mod:`meshpar.runtime.memory_limit`): a
worker that needs more is killed by the kernel, as a device out of memory.

It is a context manager that always stops its processes and removes its
cgroups, also on Ctrl-C and on failure. Devices are TF device strings
``/job:worker/task:i/device:CPU:0``; the session target is worker 0.

Example
-------
>>> with LocalCluster(speeds=[0.9, 0.3]) as cluster:     # doctest: +SKIP
...     impl = HeterogeneousMeshImpl("model:2", "filters:model", cluster.devices,
...                                  split_weights={"model": [0.9, 0.3]})
...     with tf.Session(cluster.target) as sess: ...
"""
from __future__ import annotations

import atexit
import json
import numbers
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Optional, Sequence

from meshpar.runtime.cgroups import CGROUP_ROOT, GROUP_PREFIX, remove_group, writable
from meshpar.runtime.client import ClusterFailure, unreachable_reason
from meshpar.runtime.memory_limit import (MemoryLimit, detect_memory_cgroup, mapped_files,
                                          warm_page_cache)
from meshpar.runtime.worker import PARENT_ENV, SCRATCH_ENV, SCRATCH_PREFIX, SERVING
from meshpar.core.splits import number_above, true_or_false, validate_weights

CGROUP_V1_CPU = "/sys/fs/cgroup/cpu"
CGROUP_V2 = CGROUP_ROOT  # the unified hierarchy
DEFAULT_PERIOD_US = 10_000
DEFAULT_SIGNAL_PERIOD_US = 20_000
MIN_QUOTA_US = 1_000  # the kernel refuses smaller quotas
MIN_PERIOD_US, MAX_PERIOD_US = 1_000, 1_000_000  # the kernel's range for a CFS period
#: the smallest CPU share a worker may have: a 1 ms quota in the longest period
MIN_SHARE = MIN_QUOTA_US / MAX_PERIOD_US
_KEEP = object()  # renew_workers: keep the cluster's memory budgets


class WorkerError(ClusterFailure):
    """A worker process failed to start or died."""


def free_ports(n: int, host: str = "127.0.0.1") -> list:
    """``n`` distinct TCP ports that are free right now on ``host``."""
    sockets, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            sockets.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in sockets:
            s.close()
    return ports


def detect_cgroup() -> Optional[str]:
    """'v1' or 'v2' if this process may create CPU-quota cgroups, else None."""
    if writable(CGROUP_V1_CPU) and os.path.exists(os.path.join(CGROUP_V1_CPU, "cpu.cfs_quota_us")):
        return "v1"
    controllers = os.path.join(CGROUP_V2, "cgroup.controllers")
    if os.path.exists(controllers) and writable(CGROUP_V2):
        with open(controllers, encoding="utf-8") as f:
            if "cpu" in f.read().split():
                return "v2"
    return None


def quota_period_us(speed: float, period_us: int) -> tuple:
    """``(quota, period)`` in microseconds of a cgroup holding ``speed`` of a core with
    the period ``period_us``, lengthened where the quota would be under 1 ms."""
    period = min(MAX_PERIOD_US, max(period_us, int(MIN_QUOTA_US / speed) + 1))  # MIN_SHARE: 1 s
    return max(MIN_QUOTA_US, int(round(speed * period))), period


def _checked_period(period_us, throttle: str) -> Optional[int]:
    """``period_us`` as an int in the kernel's range, or None (the throttle's default)."""
    if period_us is None:
        return None
    if isinstance(period_us, bool) or not isinstance(period_us, numbers.Real) or not (
            MIN_PERIOD_US <= period_us <= MAX_PERIOD_US):  # numpy's numbers too
        raise ValueError(f"LocalCluster period_us must be {MIN_PERIOD_US} to {MAX_PERIOD_US} "
                         f"microseconds (1 ms to 1 s), got {period_us!r}")
    if throttle == "none":
        raise ValueError("LocalCluster period_us needs a throttle (cgroup or signal), not 'none'")
    return int(period_us)


class _CgroupQuota:
    """One cgroup holding one worker at ``speed`` of a core."""

    def __init__(self, version: str, name: str, speed: float, period_us: int):
        self.version = version
        root = CGROUP_V1_CPU if version == "v1" else CGROUP_V2
        self.path = os.path.join(root, name)
        self.base_period_us = period_us
        os.mkdir(self.path)
        try:
            self.set_speed(speed)
        except OSError:
            self.remove()
            raise

    def set_speed(self, speed: float):
        """Limit the group to ``speed`` of a core (1.0: no limit), at once."""
        quota, period = quota_period_us(speed, self.base_period_us)
        if self.version == "v1":
            self._write("cpu.cfs_quota_us", "-1")  # lift first: a new period may be < quota
            self._write("cpu.cfs_period_us", str(period))
            if speed < 1.0:
                self._write("cpu.cfs_quota_us", str(quota))
        else:
            self._write("cpu.max", f"{quota if speed < 1.0 else 'max'} {period}")
        self.period_us, self.quota_us = period, quota

    def _write(self, name, value):
        with open(os.path.join(self.path, name), "w", encoding="utf-8") as f:
            f.write(value)

    def add(self, pid: int):
        self._write("cgroup.procs", str(pid))

    def remove(self):
        remove_group(self.path)


class _DutyCycle(threading.Thread):
    """SIGCONT for ``speed * period``, SIGSTOP for the rest, until stopped."""

    def __init__(self, pid: int, speed: float, period_s: float = 0.02):
        super().__init__(daemon=True, name=f"meshpar-throttle-{pid}")
        self.pid, self.speed, self.period = pid, speed, period_s
        self._halt = threading.Event()

    def run(self):
        try:
            while not self._halt.is_set():
                os.kill(self.pid, signal.SIGCONT)
                if self._halt.wait(self.speed * self.period):
                    break
                os.kill(self.pid, signal.SIGSTOP)
                self._halt.wait((1.0 - self.speed) * self.period)
        except ProcessLookupError:
            return
        finally:
            try:
                os.kill(self.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def stop(self):
        self._halt.set()
        self.join(timeout=2)


class LocalCluster:
    """Throttled single-threaded TF gRPC workers on 127.0.0.1, one per speed.

    Parameters
    ----------
    speeds : sequence of float
        CPU share of each worker, in [MIN_SHARE, 1] (0.001 to 1). 1.0 means unthrottled.
    throttle : {"auto", "cgroup", "signal", "none"}
        How to limit a worker to its share; "auto" takes cgroups when
        writable, else the signal duty cycle.
    pin : bool or None
        Pin worker i to core i (CPU affinity). None: pin when there are at
        least as many cores as workers.
    period_us : int, optional
        Throttle period in microseconds, 1 ms to 1 s (default: 10 ms for the cgroup
        quota, 20 ms for the signal duty cycle). A worker whose quota would be under
        the kernel's 1 ms minimum gets a longer period (``speed * period`` = 1 ms).
        A shorter period throttles more evenly within a step: a worker at 0.3 of a
        core with a 10 ms period computes 3 ms, then stalls 7 ms, which a step that
        synchronises its workers every few ms pays as waiting.
    start_timeout : float
        Seconds to wait for every worker's port to accept connections.
    memory_bytes : sequence of float, optional
        Emulated device memory: what each worker may allocate once it is
        ready (one value per worker; needs a writable cgroup memory
        controller, else ValueError).
    """

    def __init__(self, speeds: Sequence[float], throttle: str = "auto", pin: Optional[bool] = None,
                 period_us: Optional[int] = None, start_timeout: float = 180.0,
                 host: str = "127.0.0.1", memory_bytes: Optional[Sequence[float]] = None):
        self.speeds = validate_weights(speeds, "LocalCluster speeds")
        self.memory_bytes = self._checked_memory(memory_bytes)
        self._memory_limits: dict = {}  # worker -> its MemoryLimit
        self._warmed: set = set()  # files read into the page cache before a budget
        self._renewals = 0  # in the groups' names: a renewed worker never meets an old one
        if any(not MIN_SHARE <= s <= 1.0 for s in self.speeds):  # below: cpu.max refused it
            raise ValueError(f"LocalCluster speeds are CPU shares in [{MIN_SHARE:g}, 1], "
                             f"got {self.speeds}")
        if throttle not in ("auto", "cgroup", "signal", "none"):
            raise ValueError(f"throttle must be auto, cgroup, signal or none, got {throttle!r}")
        self.host = host
        self.period_us = _checked_period(period_us, throttle)
        # a NaN timeout never passed (a worker that never served hung start() for good)
        self.start_timeout = number_above(start_timeout, "LocalCluster start_timeout")
        cores = os.cpu_count() or 1
        self.pin = (len(self.speeds) <= cores) if pin is None else true_or_false(
            pin, "LocalCluster pin")  # pin="no" pinned
        if throttle == "auto":
            throttle = "cgroup" if detect_cgroup() else "signal"
        if self.period_us is None:
            self.period_us = (DEFAULT_SIGNAL_PERIOD_US if throttle == "signal"
                              else DEFAULT_PERIOD_US)
        if throttle == "cgroup" and not detect_cgroup():
            raise ValueError("throttle='cgroup' needs a writable cgroup cpu controller (run as root)")
        self.throttle = throttle
        self.addresses: list = []
        self.processes: list = []
        self._cgroups: list = []
        self._cycles: list = []
        self._throttle_of: dict = {}  # worker -> its _CgroupQuota or _DutyCycle
        self._tmp = None
        self._started = False

    def _checked_memory(self, memory_bytes) -> Optional[list]:
        """``memory_bytes`` as floats, one per worker, or None; TypeError or ValueError naming
        it otherwise."""
        if memory_bytes is None:
            return None
        if isinstance(memory_bytes, (str, bytes)) or not hasattr(memory_bytes, "__iter__"):
            raise TypeError(f"LocalCluster memory_bytes must be one number per worker, got "
                            f"{memory_bytes!r}")
        memory_bytes = [number_above(m, f"LocalCluster memory_bytes[{i}]")  # "1e9" was read
                        for i, m in enumerate(memory_bytes)]
        if len(memory_bytes) != len(self.speeds):
            raise ValueError(f"LocalCluster memory_bytes has {len(memory_bytes)} values for "
                             f"{len(self.speeds)} workers")
        if detect_memory_cgroup() is None:
            raise ValueError("LocalCluster memory_bytes needs a writable cgroup memory "
                             "controller (Linux, as root)")
        return memory_bytes

    # ------------------------------------------------------------ properties
    @property
    def devices(self) -> list:
        """Device string of each worker's CPU, in task order (one per speed)."""
        return [f"/job:worker/task:{i}/device:CPU:0" for i in range(len(self.speeds))]

    @property
    def target(self) -> str:
        """Session target: ``grpc://`` address of worker 0."""
        return f"grpc://{self.addresses[0]}"

    @property
    def cluster_def(self) -> dict:
        """The cluster in TF's format, ``{"worker": ["host:port", ...]}``."""
        return {"worker": list(self.addresses)}

    def describe(self) -> str:
        """One line: number of workers, CPU shares, pinning and throttle method."""
        cores = os.cpu_count() or 1
        pin = "pinned one per core" if self.pin else "not pinned" + (
            f" ({len(self.speeds)} workers on {cores} cores share them: a separate case from "
            "one worker per core)" if len(self.speeds) > cores else "")
        how = {"cgroup": f"cgroup CPU quota, period {self._periods_ms()}",
               "signal": f"SIGSTOP/SIGCONT duty cycle, period {self.period_us / 1000:g} ms",
               "none": "no throttle"}[self.throttle]
        return (f"{len(self.speeds)} TF gRPC workers on {self.host} at CPU shares"
                f" {self.speeds}, single-threaded, {pin}, throttled by {how}")

    def _periods_ms(self) -> str:
        """The cgroup period, with the longer one a slow worker gets (quota >= 1 ms)."""
        periods = {s: quota_period_us(s, self.period_us)[1] for s in self.speeds}
        return f"{self.period_us / 1000:g} ms" + "".join(
            f" ({p / 1000:.2f} ms at {s:g})" for s, p in periods.items() if p != self.period_us)

    # -------------------------------------------------------------- lifecycle
    def __enter__(self) -> "LocalCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "LocalCluster":
        """Start the workers and wait until each answers (idempotent); returns ``self``.

        On any failure the workers already started are stopped again.
        """
        if self._started:
            return self
        self._started = True
        atexit.register(self.stop)
        try:
            self._start_workers()
            self._wait_ready()
            for i in range(len(self.speeds)):
                self._limit_memory(i)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_workers(self):
        self.addresses = [f"{self.host}:{p}" for p in free_ports(len(self.speeds), self.host)]
        self._tmp = tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX)
        spec_path = os.path.join(self._tmp.name, "cluster.json")
        with open(spec_path, "w", encoding="utf-8") as f:
            json.dump({"cluster": self.cluster_def}, f)
        self._spec_path = spec_path
        self._tag = uuid.uuid4().hex[:8]
        for i, speed in enumerate(self.speeds):
            self.processes.append(self._spawn(i))
            if speed < 1.0 and self.throttle != "none":
                self._throttle(i, speed)

    def _spawn(self, i: int):
        """Start worker process ``i`` (pinned when the cluster pins)."""
        # PARENT_ENV: the worker exits when this process is gone, however it ended (and
        # removes SCRATCH_ENV, this cluster's scratch directory, that it left)
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="",
                   **{PARENT_ENV: str(os.getpid()), SCRATCH_ENV: self._tmp.name})
        log = open(os.path.join(self._tmp.name, f"worker{i}.log"), "a+b")
        log.seek(0, os.SEEK_END)
        log_start = log.tell()  # a respawned worker appends to its predecessor's log
        proc = subprocess.Popen(
            [sys.executable, "-m", "meshpar", "worker", "--cluster", self._spec_path,
             "--task", str(i), "--threads", "1"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True)
        proc.meshpar_log, proc.meshpar_log_start = log, log_start
        if self.pin:
            os.sched_setaffinity(proc.pid, {i % (os.cpu_count() or 1)})
        return proc

    def _log_tail(self, i: int, lines: int = 5) -> str:
        log = self.processes[i].meshpar_log
        log.flush()
        log.seek(0)
        text = log.read().decode("utf-8", "replace").strip().splitlines()
        return " | ".join(text[-lines:])

    def _serving(self, i: int) -> bool:
        """Whether worker ``i`` is ready: it accepts connections and has said it serves.
        The port opens before the server's threads start; those threads' first pages
        must not count against a memory budget set at ready."""
        if unreachable_reason(self.addresses[i], 0.5) is not None:
            return False
        proc = self.processes[i]
        proc.meshpar_log.flush()
        with open(proc.meshpar_log.name, "rb") as log:
            log.seek(proc.meshpar_log_start)
            return SERVING.encode() in log.read()

    def _wait_ready(self):
        deadline = time.monotonic() + self.start_timeout
        pending = set(range(len(self.speeds)))
        while pending:
            for i in sorted(pending):
                if self.processes[i].poll() is not None:
                    raise WorkerError(
                        f"worker {i} at {self.addresses[i]} exited with code"
                        f" {self.processes[i].returncode}: {self._log_tail(i)}")
                if self._serving(i):
                    pending.discard(i)
            if pending and time.monotonic() > deadline:
                names = ", ".join(f"worker {i} at {self.addresses[i]}" for i in sorted(pending))
                raise WorkerError(f"timed out after {self.start_timeout:.0f} s waiting for {names}")
            if pending:
                time.sleep(0.2)

    def _limit_memory(self, i: int):
        """Put ready worker ``i`` under its memory budget (if the cluster has budgets)."""
        if self.memory_bytes is None:
            return
        group = self._memory_limits.get(i)
        if group is None:
            group = MemoryLimit(f"{GROUP_PREFIX}{self._tag}-mem{i}-{self._renewals}",
                                self.memory_bytes[i])
            self._memory_limits[i] = group
        pid = self.processes[i].pid
        # its libraries' pages into the cache first, charged here, not to its budget
        warm_page_cache(mapped_files(pid), self._warmed)
        group.add(pid)

    def out_of_memory(self, i: int) -> bool:
        """True if worker ``i`` went over its emulated memory and was killed for it."""
        group = self._memory_limits.get(i)
        return group is not None and group.out_of_memory()

    def workers_out_of_memory(self) -> list:
        """The workers (task numbers) killed for going over their emulated memory."""
        return [i for i in range(len(self.speeds)) if self.out_of_memory(i)]

    def memory_peak(self, i: int):
        """The most worker ``i`` has held under its budget since it was ready
        (bytes; None without budgets or where the kernel does not keep it)."""
        group = self._memory_limits.get(i)
        return None if group is None else group.peak_bytes()

    def check_alive(self):
        """Raise :class:`WorkerError` naming the first worker that has died."""
        for i, proc in enumerate(self.processes):
            if proc.poll() is not None:
                raise WorkerError(
                    f"worker {i} at {self.addresses[i]} died (exit code {proc.returncode})")

    def _throttle(self, i: int, speed: float):
        """Start limiting worker ``i`` to ``speed`` (cgroup or duty cycle)."""
        pid = self.processes[i].pid
        if self.throttle == "cgroup":
            group = _CgroupQuota(detect_cgroup(), f"{GROUP_PREFIX}{self._tag}-w{i}", speed,
                                 self.period_us)
            self._cgroups.append(group)
            group.add(pid)
            self._throttle_of[i] = group
        else:
            cycle = _DutyCycle(pid, speed, self.period_us / 1e6)
            cycle.start()
            self._cycles.append(cycle)
            self._throttle_of[i] = cycle

    def set_speed(self, i: int, speed: float):
        """Change worker ``i``'s CPU share to ``speed`` in [MIN_SHARE, 1] while it runs
        (a machine slowed down by another job): its cgroup quota is rewritten,
        or its duty cycle changed. ValueError with ``throttle="none"``."""
        if self.throttle == "none":
            raise ValueError("set_speed needs a throttle (cgroup or signal), not 'none'")
        if not 0 <= i < len(self.processes):
            raise ValueError(f"no worker {i}: the cluster has {len(self.processes)}")
        speed = float(speed)
        if not MIN_SHARE <= speed <= 1.0:
            raise ValueError(f"a worker's speed is a CPU share in [{MIN_SHARE:g}, 1], got {speed}")
        current = self._throttle_of.get(i)
        if current is None:
            if speed < 1.0:
                self._throttle(i, speed)
        elif self.throttle == "cgroup":
            current.set_speed(speed)
        else:
            current.speed = speed  # the cycle reads it every period
        self.speeds[i] = speed

    def kill_worker(self, i: int):
        """Kill worker ``i`` (SIGKILL), as a failing machine would."""
        os.kill(self.processes[i].pid, signal.SIGKILL)
        self.processes[i].wait(timeout=10)

    def restart_worker(self, i: int, timeout: float = 120.0):
        """Start a killed worker ``i`` again at the same address and CPU share (a
        machine that comes back); returns when it accepts connections."""
        if self.processes[i].poll() is None:
            raise ValueError(f"worker {i} is still running")
        self._respawn(i)
        self._await_back(i, time.monotonic() + timeout)
        self._limit_memory(i)

    def renew_workers(self, memory_bytes=_KEEP, timeout: float = 120.0):
        """Replace every worker by a fresh process at the same address, CPU share
        and core: nothing a plan left in a worker's memory carries over to the
        next. ``memory_bytes``: the emulated memory the fresh workers run under
        (one value per worker; None: none; default: the cluster's), each in a
        new group, so that its peak and out-of-memory record are this life's
        alone. Returns when every worker answers."""
        if memory_bytes is not _KEEP:
            memory_bytes = self._checked_memory(memory_bytes)
        for i in range(len(self.processes)):
            if self.processes[i].poll() is None:
                self.kill_worker(i)
        for group in self._memory_limits.values():
            group.remove()
        self._memory_limits = {}
        self._renewals += 1
        if memory_bytes is not _KEEP:
            self.memory_bytes = memory_bytes
        deadline = time.monotonic() + timeout
        for i in range(len(self.processes)):
            self._respawn(i)
        for i in range(len(self.processes)):
            self._await_back(i, deadline)
            self._limit_memory(i)

    def _respawn(self, i: int):
        """Start a new process for stopped worker ``i``, under its CPU share."""
        old = self.processes[i].meshpar_log
        if not old.closed:
            old.close()
        self.processes[i] = self._spawn(i)
        group = self._throttle_of.pop(i, None)
        if isinstance(group, _DutyCycle):
            group.stop()
            self._cycles.remove(group)
        if self.speeds[i] < 1.0 and self.throttle != "none":
            if isinstance(group, _CgroupQuota):
                group.add(self.processes[i].pid)
                self._throttle_of[i] = group
            else:
                self._throttle(i, self.speeds[i])

    def _await_back(self, i: int, deadline: float):
        """Return once respawned worker ``i`` is ready (WorkerError if it exits or
        ``deadline``, a ``time.monotonic()``, passes first)."""
        while not self._serving(i):
            if self.processes[i].poll() is not None or time.monotonic() > deadline:
                raise WorkerError(f"worker {i} at {self.addresses[i]} did not come back: "
                                  f"{self._log_tail(i)}")
            time.sleep(0.2)

    def stop(self):
        """Stop every worker, end throttling, remove cgroups (idempotent)."""
        for cycle in self._cycles:
            try:
                cycle.stop()
            except Exception:  # keep going: the processes must die regardless
                pass
        self._cycles = []
        self._throttle_of = {}
        for proc in self.processes:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGCONT)
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for proc in self.processes:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=10)
            log = getattr(proc, "meshpar_log", None)
            if log and not log.closed:
                log.close()
        for group in list(self._cgroups) + list(self._memory_limits.values()):
            group.remove()
        self._cgroups = []
        self._memory_limits = {}
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        try:
            atexit.unregister(self.stop)
        except Exception:  # pragma: no cover  (interpreter shutting down)
            pass
