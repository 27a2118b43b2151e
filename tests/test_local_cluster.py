"""LocalCluster: real TF gRPC workers on loopback, throttled, always cleaned up;
and an uneven mesh over them computes the one-device result."""
import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from meshpar.runtime.local_cluster import LocalCluster, WorkerError, detect_cgroup
from meshpar.runtime.memory_limit import detect_memory_cgroup


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_speeds_are_validated():
    with pytest.raises(ValueError, match="positive"):
        LocalCluster([0.5, 0.0])
    with pytest.raises(ValueError, match="\\[0.001, 1\\]"):
        LocalCluster([1.5])
    with pytest.raises(ValueError, match="\\[0.001, 1\\]"):  # under a 1 ms quota per second
        LocalCluster([1e-4, 1.0])
    with pytest.raises(ValueError, match="throttle"):
        LocalCluster([0.5], throttle="turbo")


def test_uneven_mesh_over_grpc_workers_matches_one_device_and_cleans_up():
    from mtf_helpers import HeterogeneousMeshImpl, mtf, tf

    def loss_on(impl, target=""):
        graph_tf = tf.Graph()
        with graph_tf.as_default():
            tf.set_random_seed(0)
            graph = mtf.Graph()
            mesh = mtf.Mesh(graph, "mesh")
            rng = np.random.RandomState(0)
            dims = [mtf.Dimension(n, s) for n, s in (("batch", 5), ("h", 6), ("w", 6), ("c", 3))]
            x = mtf.import_tf_tensor(mesh, tf.constant(rng.randn(5, 6, 6, 3).astype(np.float32)),
                                     mtf.Shape(dims))
            y = mtf.layers.conv2d(x, mtf.Dimension("filters", 7), name="conv",
                                  filter_initializer=tf.constant_initializer(
                                      rng.randn(3, 3, 3, 7).astype(np.float32)))
            loss = mtf.reduce_sum(mtf.square(y))
            lowering = mtf.Lowering(graph, {mesh: impl})
            out = lowering.export_to_tf_tensor(loss)
            init = tf.global_variables_initializer()
            with tf.Session(target, graph=graph_tf) as sess:
                sess.run(init)
                sess.run(lowering.copy_masters_to_slices())
                return sess.run(out)

    expected = loss_on(HeterogeneousMeshImpl("all:1", "", [""]))
    cluster = LocalCluster([1.0, 0.5])
    with cluster:
        pids = [p.pid for p in cluster.processes]
        assert all(_alive(p) for p in pids)
        impl = HeterogeneousMeshImpl("model:2", "filters:model", cluster.devices,
                                     split_weights={"model": [0.7, 0.3]})
        got = loss_on(impl, cluster.target)
        if cluster.throttle == "cgroup":
            assert len(cluster._cgroups) == 1  # the 1.0 worker is not throttled
            paths = [g.path for g in cluster._cgroups]
            assert all(os.path.isdir(p) for p in paths)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert not any(_alive(p) for p in pids)
    if cluster.throttle == "cgroup":
        assert not any(os.path.exists(p) for p in paths)


def test_signal_throttle_stops_and_resumes_and_cleans_up():
    cluster = LocalCluster([0.5], throttle="signal", pin=False)
    with pytest.raises(RuntimeError, match="boom"):
        with cluster:
            pid = cluster.processes[0].pid
            assert cluster.throttle == "signal" and len(cluster._cycles) == 1
            assert cluster._cycles[0].is_alive()
            raise RuntimeError("boom")
    assert not _alive(pid)
    assert cluster._cycles == []


def test_dead_worker_is_reported_with_its_address():
    with LocalCluster([1.0, 1.0], throttle="none") as cluster:
        cluster.kill_worker(1)
        with pytest.raises(WorkerError, match=f"worker 1 at {cluster.addresses[1]}"):
            cluster.check_alive()


def test_worker_command_rejects_bad_cluster_files(tmp_path):
    from meshpar.cli import main

    bad = tmp_path / "c.json"
    bad.write_text(json.dumps({"worker": ["nohostport"]}))
    proc = subprocess.run([sys.executable, "-m", "meshpar", "worker", "--cluster", str(bad),
                           "--task", "0"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "host:port" in proc.stderr and "Traceback" not in proc.stderr
    bad.write_text(json.dumps({"worker": ["127.0.0.1:1"]}))
    assert main(["worker", "--cluster", str(bad), "--task", "3"]) == 2


@pytest.mark.skipif(detect_cgroup() is None, reason="needs a writable cgroup cpu controller")
def test_cgroup_quota_uses_a_short_period():
    from meshpar.runtime.local_cluster import _CgroupQuota

    group = _CgroupQuota(detect_cgroup(), "meshpar-test-quota", 0.3, 10_000)
    try:
        assert (group.period_us, group.quota_us) == (10_000, 3_000)
    finally:
        group.remove()
    slow = _CgroupQuota(detect_cgroup(), "meshpar-test-quota2", 0.05, 10_000)
    try:
        assert slow.quota_us >= 1000 and abs(slow.quota_us / slow.period_us - 0.05) < 0.01
    finally:
        slow.remove()


def test_throttle_period_is_chosen_checked_and_described():
    from meshpar.runtime.local_cluster import quota_period_us

    assert quota_period_us(0.3, 10_000) == (3_000, 10_000)
    # under 1 ms of quota the period grows: 0.3 of 3.334 ms is the kernel's 1 ms minimum
    assert quota_period_us(0.3, 1_000) == (1_000, 3_334)
    assert quota_period_us(0.9, 1_000) == (1_001, 1_112)
    # the smallest share gets the kernel's longest period, not one past it (EINVAL)
    assert quota_period_us(0.001, 10_000) == (1_000, 1_000_000)
    assert LocalCluster([0.9, 0.3], throttle="signal").period_us == 20_000
    cycle = LocalCluster([0.9, 0.3], throttle="signal", period_us=4_000)
    assert "duty cycle, period 4 ms" in cycle.describe()
    assert "pinned one per core" in cycle.describe()
    # more workers than cores is labelled as the separate case it is
    crowd = LocalCluster([0.5] * ((os.cpu_count() or 1) + 1), throttle="signal")
    assert f"not pinned ({len(crowd.speeds)} workers on {os.cpu_count() or 1} cores share them" \
        in crowd.describe()
    for bad in (999, 1_000_001, "2000", True, float("nan")):
        with pytest.raises(ValueError, match="period_us must be 1000 to 1000000"):
            LocalCluster([0.5], throttle="signal", period_us=bad)
    with pytest.raises(ValueError, match="needs a throttle"):
        LocalCluster([0.5], throttle="none", period_us=2_000)


@pytest.mark.skipif(detect_cgroup() is None, reason="needs a writable cgroup cpu controller")
def test_cgroup_cluster_describes_each_period():
    cluster = LocalCluster([0.9, 0.3], throttle="cgroup", period_us=1_000)
    assert cluster.period_us == 1_000
    assert "period 1 ms (1.11 ms at 0.9) (3.33 ms at 0.3)" in cluster.describe()
    assert "period 10 ms" in LocalCluster([0.9, 0.3], throttle="cgroup").describe()


def test_memory_budgets_are_validated():
    with pytest.raises(ValueError, match="2 values for 1 workers"):
        LocalCluster([1.0], memory_bytes=[1e8, 1e8])
    with pytest.raises(ValueError, match="finite and > 0"):
        LocalCluster([1.0], memory_bytes=[0])


def _allocate_on_worker(cluster, nbytes):
    """Run one op on worker 0 that holds ``nbytes`` of float32 at once."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default(), tf.device(cluster.devices[0]):
        x = tf.random.uniform([int(nbytes) // 4], seed=1)
        total = tf.reduce_sum(x * 2.0)
    # a killed worker never answers: the op times out instead of waiting forever
    # (twice: the run and the close; an allocation that fits takes ~0.1 s)
    config = tf.compat.v1.ConfigProto(operation_timeout_in_ms=6_000)
    sess = tf.compat.v1.Session(cluster.target, graph=graph, config=config)
    try:
        return sess.run(total)
    finally:
        try:
            sess.close()
        except tf.errors.OpError:  # closing needs the dead worker too
            pass


@pytest.mark.skipif(detect_memory_cgroup() is None,
                    reason="needs a writable cgroup memory controller")
def test_a_worker_that_outgrows_its_emulated_memory_is_killed_and_says_so():
    """The budget limits what a worker allocates once ready (not the ~450 MiB
    runtime it started with): 16 MiB of tensors fit in 96 MiB, 256 MiB do not,
    and the worker that went over is reported as out of memory. Then the
    workers are renewed (:func:`_renew_the_workers`)."""
    import tensorflow as tf

    with LocalCluster([1.0, 1.0], throttle="none", pin=False,
                      memory_bytes=[96 * 2**20, 96 * 2**20]) as cluster:
        # the workers' libraries were read into the page cache before their budgets
        assert any("libtensorflow" in os.path.basename(f) for f in cluster._warmed)
        assert np.isfinite(_allocate_on_worker(cluster, 16 * 2**20))
        assert not cluster.out_of_memory(0)
        with pytest.raises(tf.errors.OpError):
            _allocate_on_worker(cluster, 256 * 2**20)
        cluster.processes[0].wait(timeout=30)
        assert cluster.processes[0].returncode == -9
        assert cluster.out_of_memory(0) and not cluster.out_of_memory(1)
        assert cluster.workers_out_of_memory() == [0]
        paths = [g.path for g in cluster._memory_limits.values()]
        _renew_the_workers(cluster)
        paths += [g.path for g in cluster._memory_limits.values()]
    assert not any(os.path.exists(p) for p in paths)  # groups removed on stop


def _renew_the_workers(cluster):
    """renew_workers replaces every worker (new pids, same addresses) in new
    memory groups, so the worker killed for going over answers again and is no
    longer reported out of memory; with None the fresh workers have no budget
    (256 MiB fit); a budget given again holds them to it."""
    budget, addresses = list(cluster.memory_bytes), list(cluster.addresses)
    old = [p.pid for p in cluster.processes]
    cluster.renew_workers()
    assert cluster.addresses == addresses and cluster.memory_bytes == budget
    assert all(p.pid not in old and p.poll() is None for p in cluster.processes)
    assert not cluster.out_of_memory(0) and cluster.memory_peak(0) is not None
    cluster.renew_workers(None)
    assert cluster.memory_bytes is None and cluster.memory_peak(0) is None
    assert np.isfinite(_allocate_on_worker(cluster, 256 * 2**20))
    cluster.renew_workers(budget)
    assert cluster.memory_bytes == budget and cluster.memory_peak(1) is not None
    assert np.isfinite(_allocate_on_worker(cluster, 16 * 2**20))
    assert cluster.memory_peak(0) < 96 * 2**20



def test_a_worker_is_ready_once_it_says_it_serves_not_when_its_port_opens(tmp_path):
    """The port opens before the server's threads start; a memory budget set at
    "ready" must not charge that start-up, so ready waits for the worker's line (of
    this life: a respawned worker appends to its predecessor's log)."""
    import socket
    import types

    from meshpar.runtime.worker import SERVING

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    cluster = LocalCluster([1.0])
    cluster.addresses = [f"127.0.0.1:{listener.getsockname()[1]}"]
    log = open(tmp_path / "worker0.log", "a+b")
    log.write(f"meshpar worker worker:0 {SERVING} (an earlier life)\n".encode())
    log.flush()
    cluster.processes = [types.SimpleNamespace(meshpar_log=log, meshpar_log_start=log.tell())]
    try:
        assert not cluster._serving(0)  # port open, nothing said in this life
        log.write(f"meshpar worker worker:0 {SERVING} {cluster.addresses[0]}\n".encode())
        assert cluster._serving(0)
        listener.close()
        assert not cluster._serving(0)  # said, but the port is closed
    finally:
        log.close()
        listener.close()


def test_a_processes_mapped_files_are_read_into_the_page_cache_once(tmp_path):
    """What a worker maps (its libraries) is read through before its memory budget
    starts, once per file; a process that is gone maps nothing."""
    from meshpar.runtime.memory_limit import mapped_files, warm_page_cache

    mine = mapped_files(os.getpid())
    assert mine and all(os.path.isabs(p) and os.path.isfile(p) for p in mine)
    assert len(mine) == len(set(mine))
    assert any(".so" in os.path.basename(p) for p in mine)  # numpy's, the interpreter's
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert mapped_files(proc.pid) == []
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(b"x" * 3000)
    b.write_bytes(b"y" * 10)
    done = set()
    assert warm_page_cache([str(a), str(tmp_path / "gone"), str(b)], done, chunk=1024) == [
        str(a), str(b)]
    assert done == {str(a), str(b)}
    assert warm_page_cache([str(a), str(b)], done) == []  # read once


def test_workers_go_when_the_process_holding_the_cluster_is_killed(tmp_path):
    """SIGTERM or SIGKILL run no cleanup code in the process that started a LocalCluster
    (`timeout 15 meshpar bench hetero ...`): its workers used to serve on forever,
    orphaned. Each now watches for its parent's end, and removes the cluster's scratch
    directory, left in the temporary directory by each killed holder before."""
    import signal
    import textwrap

    pids = tmp_path / "pids"
    script = textwrap.dedent(f"""
        import time
        from meshpar.runtime.local_cluster import LocalCluster
        cluster = LocalCluster(speeds=[1.0, 1.0], throttle="none").start()
        open({str(pids)!r} + ".tmp", "w").write(" ".join(
            [cluster._tmp.name] + [str(p.pid) for p in cluster.processes]))
        import os; os.replace({str(pids)!r} + ".tmp", {str(pids)!r})
        time.sleep(600)
    """)
    holder = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 120
        while not (pids.exists() and pids.read_text()) and time.monotonic() < deadline:
            time.sleep(0.2)
        scratch, *workers = pids.read_text().split()
        workers = [int(p) for p in workers]
        assert all(_alive(p) for p in workers) and os.path.isdir(scratch)
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        deadline = time.monotonic() + 20
        while (any(_alive(p) for p in workers) or os.path.exists(scratch)) \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(p) for p in workers), "orphaned workers still serve"
        # its scratch directory (cluster file, worker logs) goes too: one was left per kill
        assert not os.path.exists(scratch)
    finally:
        holder.kill()


@pytest.mark.skipif(detect_cgroup() is None or detect_memory_cgroup() is None,
                    reason="needs writable cgroup cpu and memory controllers")
def test_a_killed_clusters_cgroups_go_with_its_workers(tmp_path):
    """SIGKILL of the process holding a LocalCluster (a killed meshpar bench or train
    --speeds) ran no stop(): its workers went, but their CPU-quota and memory cgroups
    stayed in /sys/fs/cgroup, one pair per killed command. A worker whose parent is
    gone now leaves and removes its own groups on the way out."""
    import signal
    import textwrap

    state = tmp_path / "state"
    script = textwrap.dedent(f"""
        import json, time
        from meshpar.runtime.local_cluster import LocalCluster
        cluster = LocalCluster(speeds=[0.5], throttle="cgroup", pin=False,
                               memory_bytes=[2 * 2**30]).start()
        groups = [g.path for g in cluster._cgroups + list(cluster._memory_limits.values())]
        open({str(state)!r} + ".tmp", "w").write(json.dumps(
            {{"pids": [p.pid for p in cluster.processes], "groups": groups}}))
        import os; os.replace({str(state)!r} + ".tmp", {str(state)!r})
        time.sleep(600)
    """)
    holder = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 120
        while not state.exists() and holder.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        made = json.loads(state.read_text())
        assert len(made["groups"]) == 2 and all(os.path.isdir(g) for g in made["groups"])
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        deadline = time.monotonic() + 20
        while (any(_alive(p) for p in made["pids"]) or any(map(os.path.exists, made["groups"]))
               ) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(p) for p in made["pids"]), "orphaned workers still serve"
        assert not [g for g in made["groups"] if os.path.exists(g)], "cgroups left behind"
    finally:
        holder.kill()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's parent-death signal")
def test_a_worker_stopped_by_the_signal_throttle_goes_when_its_holder_is_killed(tmp_path):
    """The signal throttle stops a slow worker (SIGSTOP) for most of each period; when
    the process holding the cluster was killed in that part, the worker stayed stopped
    for good (state T), an orphan no watcher could end. It now asks for a SIGCONT on
    its parent's death. The test stops the worker itself just before the kill, so that
    the old code fails every time rather than by chance (and so a share of 0.5 serves:
    the throttle holds the worker from its start, and at 0.1 its start took 20 s)."""
    import signal
    import textwrap

    pids = tmp_path / "pids"
    script = textwrap.dedent(f"""
        import os, time
        from meshpar.runtime.local_cluster import LocalCluster
        cluster = LocalCluster(speeds=[0.5], throttle="signal", pin=False).start()
        open({str(pids)!r} + ".tmp", "w").write(str(cluster.processes[0].pid))
        os.replace({str(pids)!r} + ".tmp", {str(pids)!r})
        time.sleep(600)
    """)
    holder = subprocess.Popen([sys.executable, "-c", script])
    worker = None
    try:
        deadline = time.monotonic() + 120
        while not pids.exists() and holder.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        worker = int(pids.read_text())
        os.kill(worker, signal.SIGSTOP)
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        deadline = time.monotonic() + 20
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(worker), "a stopped worker outlived its killed holder"
    finally:
        holder.kill()
        if worker is not None and _alive(worker):
            os.kill(worker, signal.SIGKILL)


def test_a_worker_started_by_hand_does_not_watch_a_parent_it_lacks(monkeypatch):
    from meshpar.runtime import worker

    started = []
    monkeypatch.setattr("threading.Thread.start", lambda self: started.append(self.name))
    worker.exit_with_parent(None)
    worker.exit_with_parent("")
    worker.exit_with_parent(str(os.getppid() + 12345))  # inherited from further up
    assert started == []
    worker.exit_with_parent(str(os.getppid()))
    assert started == ["meshpar-exit-with-parent"]


# ------------------------------------- bad-input sweep 18: arguments named, not misread
@pytest.mark.parametrize("kwargs, error, words", [
    (dict(pin="no"), TypeError, "LocalCluster pin must be True or False"),
    (dict(pin=0), TypeError, "LocalCluster pin must be True or False"),
    (dict(start_timeout=math.nan), ValueError, "LocalCluster start_timeout must be finite"),
    (dict(start_timeout=-1), ValueError, "LocalCluster start_timeout must be finite and > 0"),
    (dict(start_timeout="30"), TypeError, "LocalCluster start_timeout must be a number"),
    (dict(start_timeout=True), TypeError, "LocalCluster start_timeout must be a number"),
    (dict(memory_bytes=1e9), TypeError, "LocalCluster memory_bytes must be one number per "
                                        "worker"),
    (dict(memory_bytes=["1e9"]), TypeError, "LocalCluster memory_bytes[0] must be a number"),
    (dict(memory_bytes=[math.inf]), ValueError, "LocalCluster memory_bytes[0] must be finite"),
])
def test_local_cluster_names_a_wrong_argument(kwargs, error, words):
    """pin="no" pinned the workers (bool() of a string), a NaN start_timeout never
    passed (start() waited for good on a worker that never served), "30" and True were
    read as 30 and 1 s, and memory_bytes "1e9" as a number or 1e9 as
    "'float' object is not iterable"."""
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        LocalCluster([1.0], throttle="none", **kwargs)


def test_local_cluster_takes_numpy_values():
    """numpy's numbers and bools are taken (period_us=np.int64(10000) was refused as
    'must be 1000 to 1000000 microseconds, got 10000')."""
    cluster = LocalCluster(np.array([0.5, 1.0]), throttle="signal", pin=np.bool_(False),
                           period_us=np.int64(10_000), start_timeout=np.float32(30))
    assert (cluster.pin, cluster.period_us, cluster.start_timeout) == (False, 10_000, 30.0)
    assert isinstance(cluster.period_us, int) and isinstance(cluster.start_timeout, float)
