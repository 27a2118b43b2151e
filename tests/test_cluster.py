import json
import math

import pytest

from meshpar.planning.cluster import ClusterSpec, DeviceSpec


def test_from_speeds_scales_a_reference_flop_rate():
    cluster = ClusterSpec.from_speeds([1.0, 0.5], reference_flops=1e10)
    assert [d.speed_at(123.0) for d in cluster.devices] == pytest.approx([1e10, 5e9])
    assert cluster.device_strings == ["/job:worker/task:0/device:CPU:0",
                                      "/job:worker/task:1/device:CPU:0"]


@pytest.mark.parametrize("speeds", [[], [1.0, 0.0], [1.0, -2], [float("nan")], [math.inf]])
def test_from_speeds_rejects_empty_nonpositive_and_nan(speeds):
    with pytest.raises(ValueError):
        ClusterSpec.from_speeds(speeds)


def test_speed_interpolates_in_log_space_and_holds_outside():
    d = DeviceSpec("a", "/cpu:0", ((1e6, 1e9), (1e8, 1e11)))
    assert d.speed_at(1e7) == pytest.approx(1e10)  # geometric midpoint
    assert d.speed_at(1.0) == pytest.approx(1e9)
    assert d.speed_at(1e12) == pytest.approx(1e11)


def test_cluster_json_round_trip(tmp_path):
    cluster = ClusterSpec((DeviceSpec("a", "/gpu:0", ((1e6, 1e9), (1e8, 2e9)), 2**30),
                           DeviceSpec("b", "/cpu:0", ((1e6, 5e8),), 2**31)),
                          bandwidth=1e9, latency=1e-4)
    path = tmp_path / "cluster.json"
    cluster.save(path)
    assert ClusterSpec.load(path) == cluster


def test_cluster_file_missing_field_names_file_and_field(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"devices": [{"name": "a", "device": "/cpu:0",
                                             "profile": [[1, 1e9]]}],
                                "bandwidth": 1e9, "latency": 0}))
    with pytest.raises(ValueError, match=r"bad\.json.*memory_bytes"):
        ClusterSpec.load(path)


def test_cluster_file_bad_speed_is_a_value_error(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"devices": [{"name": "a", "device": "/cpu:0",
                                             "profile": [[1, -5]], "memory_bytes": 10}],
                                "bandwidth": 1e9, "latency": 0}))
    with pytest.raises(ValueError, match="profile speed"):
        ClusterSpec.load(path)


def test_missing_cluster_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        ClusterSpec.load(tmp_path / "nope.json")


def test_profile_local_devices_measures_a_tiny_conv():
    from meshpar.runtime.profiling import profile_local_devices

    cluster = profile_local_devices(sizes=[(1, 4, 2, 4)], repeats=1)
    cpu = cluster.devices[0]
    assert cpu.device == "/device:CPU:0"
    assert len(cpu.profile) == 1 and cpu.profile[0][1] > 0


def test_slice_efficiency_round_trips_and_bad_points_name_the_field(tmp_path):
    slices = ((0.5, 0.8), (0.25, 0.55))
    cluster = ClusterSpec((DeviceSpec("a", "/cpu:0", ((1e6, 1e9),), 2**30,
                                      slice_efficiency=slices),
                           DeviceSpec("b", "/cpu:1", ((1e6, 5e8),), 2**30)),
                          bandwidth=1e9, latency=0)
    assert cluster.devices[0].slice_efficiency == ((0.25, 0.55), (0.5, 0.8))  # sorted
    assert "slice_efficiency" not in cluster.devices[1].to_dict()
    cluster.save(tmp_path / "c.json")
    loaded = ClusterSpec.load(tmp_path / "c.json")
    assert loaded == cluster and loaded.devices[0].slice_efficiency == ((0.25, 0.55), (0.5, 0.8))
    for bad, match in (([[1.0, 0.9]], r"fraction 0 must be in \(0, 1\)"),
                       ([[0.5, 0.0]], "efficiency 0"), ([[0.5, 0.9], [0.5, 0.8]], "distinct"),
                       ([0.5], r"point 0 must be \[fraction, efficiency\]")):
        with pytest.raises(ValueError, match=match):
            DeviceSpec("a", "/cpu:0", ((1e6, 1e9),), slice_efficiency=bad)


def test_a_worker_device_listed_twice_is_refused_local_ones_may_share_a_cpu():
    profile = ((1.0, 1e9),)
    twice = "/job:worker/task:0/device:CPU:0"
    with pytest.raises(ValueError, match=f"cluster device {twice} is listed twice"):
        ClusterSpec((DeviceSpec("a", twice, profile), DeviceSpec("b", twice, profile)))
    shared = ClusterSpec((DeviceSpec("a", "/cpu:0", profile), DeviceSpec("b", "/cpu:0", profile)))
    assert len(shared) == 2


def test_profile_timings_warm_each_op_up_as_it_is_timed():
    """A distributed session registers a graph with the workers for each new set of
    fetches (seconds for a model's step): the warm-up must run each op alone, as the
    timed runs do, or the first timed run pays it (a 2-repeat slice profile read
    0.03 of the whole step's speed for 0.6)."""
    import threading

    from meshpar.runtime.timed_rounds import median_seconds

    class Recording:
        def __init__(self):
            self.calls, self.lock = [], threading.Lock()

        def run(self, fetches):
            with self.lock:
                self.calls.append(fetches)

    session = Recording()
    ops = ["a", "b", "c"]
    assert len(median_seconds(session, ops, repeats=2)) == 3
    assert session.calls[:3] == ops  # each alone, before any timed run
    assert sorted(session.calls[3:]) == sorted(ops * 2)  # timed: each alone, twice


def test_link_is_timed_per_hop_with_the_sessions_round_trip_divided_out():
    from meshpar.runtime.profiling import LINK_HOPS, link_from_chains

    # every run pays a 0.7 ms client round trip once; a hop 0.1 ms, plus 4 MB at
    # 2 GB/s for the big tensor. One run of one transfer (the old measurement)
    # would have called the latency 0.8 ms.
    round_trip, latency, nbytes, bandwidth = 7e-4, 1e-4, 4e6, 2e9
    seconds = {(kind, hops): round_trip + hops * (latency + (nbytes / bandwidth
                                                            if kind == "big" else 0.0))
               for kind in ("small", "big") for hops in (1, LINK_HOPS[kind])}
    got_bandwidth, got_latency = link_from_chains(seconds, nbytes)
    assert got_latency == pytest.approx(latency)
    assert got_bandwidth == pytest.approx(bandwidth)


@pytest.mark.parametrize("workers", [2, 3])
def test_link_chains_cross_between_neighbouring_workers_at_every_hop(workers):
    import tensorflow.compat.v1 as tf

    from meshpar.runtime.profiling import LINK_HOPS, _transfer_graph

    devices = [f"/job:worker/task:{i}/device:CPU:0" for i in range(workers)]
    with tf.Graph().as_default():
        pairs = _transfer_graph(tf, devices, 64)
    assert len(pairs) == (1 if workers == 2 else workers)  # 0-1; or the ring 0-1, 1-2, 2-0
    for i, chains in enumerate(pairs):
        ends = [devices[i], devices[(i + 1) % workers]]
        for (kind, hops), op in chains.items():
            assert hops in (1, LINK_HOPS[kind])
            adds, t = [], op.op.inputs[0].op.inputs[0]  # Sum <- StridedSlice <- last add
            while t.op.type == "AddV2":
                adds.append(t.op.device)
                t = t.op.inputs[0]
            assert t.op.device == ends[0]  # the chain starts on the pair's first worker
            # each hop adds on the other end: a transfer per hop, none elided
            assert adds[::-1] == [ends[(h + 1) % 2] for h in range(hops)]


def _with_alone(ratios):
    """Two devices profiled at 1.0 and 0.5 (x 1e11 FLOP/s) at four work sizes, the
    first also alone at its speed times ``ratios`` (one per size)."""
    sizes = (1.0, 1e3, 1e6, 1e9)
    devices = tuple(DeviceSpec(f"w{i}", f"/job:worker/task:{i}/device:CPU:0",
                               tuple((x, s * 1e11) for x in sizes))
                    for i, s in enumerate([1.0, 0.5]))
    alone = {devices[0].device: [[x, r * 1e11] for x, r in zip(sizes, ratios)]}
    return ClusterSpec(devices, extra={"alone_profile": alone})


def test_a_device_twice_as_fast_alone_at_every_size_has_that_factor():
    cluster = _with_alone([1.9, 2.1, 2.0, 2.0])
    assert cluster.alone_factor(cluster.devices[0]) == pytest.approx(2.0, rel=0.01)
    assert cluster.alone_factor(cluster.devices[1]) == 1.0    # no alone entry
    # a subset keeps every device's all-at-once speeds and the profile's fields
    one = cluster.subset([cluster.devices[0]])
    assert one.devices == (cluster.devices[0],) and one.extra == cluster.extra
    assert cluster.subset(cluster.devices[::-1]).devices == cluster.devices[::-1]


@pytest.mark.parametrize("ratios", [
    [0.8, 1.3, 0.9, 1.2],      # noise either way: the mean is within 3 standard errors
    [0.9, 0.92, 0.91, 0.9],    # slower alone at every size: the host drifted, not the device
    [2.0, 2.0],                # two sizes: no spread to judge by
])
def test_alone_speeds_within_their_noise_or_below_count_for_nothing(ratios):
    cluster = _with_alone(ratios)
    assert cluster.alone_factor(cluster.devices[0]) == 1.0
    plain = ClusterSpec.from_speeds([1.0, 0.5])
    assert plain.alone_factor(plain.devices[0]) == 1.0


@pytest.mark.parametrize("table, message", [
    ([[1.0, 1e11]], "'alone_profile' must be an object"),
    (5, "'alone_profile' must be an object"),
    ({"/job:worker/task:0/device:CPU:0": [[1.0, -1.0]]}, "alone_profile of .*task:0.* > 0"),
    ({"/job:worker/task:0/device:CPU:0": "fast"}, "alone_profile of .*task:0.*point 0"),
])
def test_a_hand_edited_alone_profile_is_refused_when_loaded(tmp_path, table, message):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(dict(ClusterSpec.from_speeds([1.0]).to_dict(),
                                    extra={"alone_profile": table})))
    with pytest.raises(ValueError, match=message):
        ClusterSpec.load(path)
