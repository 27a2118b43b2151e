"""The wait for the slowest device (Clark's expected maximum) and the fit of a
profile's timed splits to overhead work and jitter."""
import dataclasses

import numpy as np
import pytest

from meshpar.core.splits import split_sizes_batch
from meshpar.models import describe_model
from meshpar.planning.calibration import MAX_JITTER, expected_max, fit_axis
from meshpar.planning.cluster import ClusterSpec, DeviceSpec
from meshpar.planning.cost_model import CostModel
from meshpar.planning.planners.milp import constant_speeds


def test_expected_max_without_jitter_is_the_maximum():
    t = np.array([[1.0, 3.0, 2.0], [5.0, 4.0, 0.5]])
    assert expected_max(t, 0.0) == pytest.approx([3.0, 5.0])
    assert expected_max(t, 0.3, axis=0) == pytest.approx(expected_max(t.T, 0.3))
    assert expected_max(t[:, :1], 0.7) == pytest.approx([1.0, 5.0])  # one device waits for none


def test_expected_max_of_two_devices_is_clarks_closed_form_and_matches_sampling():
    # two equal means m with spread c m: m + c m sqrt(2) / sqrt(2 pi) = m (1 + c / sqrt(pi))
    assert expected_max(np.array([2.0, 2.0]), 0.5) == pytest.approx(2.0 * (1 + 0.5 / np.sqrt(np.pi)))
    rng = np.random.default_rng(0)
    for times, c in (([1.0, 1.3], 0.4), ([0.9, 1.0, 1.1], 0.2), ([1.0, 3.0], 0.3)):
        t = np.array(times)
        sampled = (t * (1 + c * rng.standard_normal((400_000, t.size)))).max(axis=1).mean()
        # exact for two devices; Clark's fold is an approximation for three
        assert float(expected_max(t, c)) == pytest.approx(sampled, rel=0.01 if t.size == 2 else 0.02)


def test_the_wait_is_largest_where_the_devices_are_balanced():
    """What an even split on uneven devices does not show: one device much
    slower than the others sets the pace whatever the jitter."""
    c = 0.5
    balanced = float(expected_max(np.array([1.0, 1.0]), c)) / 1.0
    uneven = float(expected_max(np.array([1.0, 4.0]), c)) / 4.0
    assert balanced > 1.25 and uneven < 1.06


def test_fit_axis_recovers_the_work_and_jitter_that_made_the_times():
    def predict(work, c, which):
        compute = [1.0, 3.0] if which == "even" else [1.5, 1.5]
        return float(expected_max(np.array(compute), c)) + work / 2.0

    even, balanced = predict(0.4, 0.6, "even"), predict(0.4, 0.6, "balanced")
    work, c = fit_axis(predict, even, balanced, work_high=10.0)
    assert (work, c) == pytest.approx((0.4, 0.6), rel=1e-6)
    # no balanced split measured: the jitter stays 0 and the work covers the even split
    work, c = fit_axis(predict, even, None, work_high=10.0)
    assert c == 0.0 and predict(work, 0.0, "even") == pytest.approx(even)
    # measured faster than the compute: nothing to add, never negative
    assert fit_axis(predict, 2.0, 1.0, work_high=10.0) == (0.0, 0.0)
    # the balanced split faster than the even split's work allows: no jitter, and
    # the work is the balanced split's (less than the even split's 0.4)
    work, c = fit_axis(predict, predict(0.4, 0.0, "even"), 1.6, work_high=10.0)
    assert c == 0.0 and work == pytest.approx(0.2)
    # a balanced split slower than any wait explains: the jitter stops at its cap
    assert fit_axis(predict, even, 100.0, work_high=10.0)[1] == MAX_JITTER
    with pytest.raises(ValueError, match="even split"):
        fit_axis(predict, 0.0, 1.0, work_high=10.0)


def test_when_no_work_and_jitter_take_both_splits_the_error_is_shared_out():
    """The even split measured faster than its compute (no work fits it) and the
    balanced split slower: the scan's jitter would take the balanced split
    exactly with the even one far over. Instead the larger of the two errors
    is as small as the model allows, and no larger jitter than that needs."""
    def predict(work, c, which):
        compute = [1.0, 3.0] if which == "even" else [1.5, 1.5]
        return float(expected_max(np.array(compute), c)) + work / 2.0

    even, balanced = 2.5, 2.0
    work, c = fit_axis(predict, even, balanced, work_high=10.0)
    over = np.log(predict(work, c, "even") / even)
    under = np.log(balanced / predict(work, c, "balanced"))
    assert over > 0 and under > 0 and over == pytest.approx(under, rel=0.05)
    # the scan's answer: the jitter at which the balanced split is exact, the work 0
    scan_c = (balanced / 1.5 - 1.0) * np.sqrt(np.pi)
    scan_over = np.log(predict(0.0, scan_c, "even") / even)
    assert predict(0.0, scan_c, "balanced") == pytest.approx(balanced)
    assert max(over, under) < scan_over and c < scan_c
    # of the scan grid, no jitter with a smaller larger error
    for grid_c in np.linspace(0.0, MAX_JITTER, 21):
        for w in np.linspace(0.0, 2.0, 201):
            assert max(np.log(predict(w, grid_c, "even") / even),
                       np.log(balanced / predict(w, grid_c, "balanced"))) >= max(over, under) - 1e-3


def _profiled(model, speeds, split_seconds):
    step = 3.0 * model.flops
    devices = tuple(DeviceSpec(name=f"w{i}", device=f"/job:worker/task:{i}/device:CPU:0",
                               profile=((step, s),), memory_bytes=1e12)
                    for i, s in enumerate(speeds))
    return ClusterSpec(devices, bandwidth=1e12, latency=0.0, extra={
        "work": "model-step", "model": model.name, "split_seconds": split_seconds})


@pytest.mark.parametrize("axis", ["batch", "model"])
def test_a_profiles_even_and_balanced_splits_calibrate_the_cost_model(axis):
    """Times made by the cost model with known work and jitter are read back
    as that work and jitter; the balanced split is then predicted as
    measured, and a very uneven split barely pays for the jitter."""
    model, speeds, batch = describe_model("vgg-cifar-small"), [1e9, 0.4e9], 8
    truth = CostModel(model, _profiled(model, speeds, None), batch)
    truth.split_overhead = {"batch": 0.0, "model": 0.0, axis: 0.002 * 0.4e9}
    truth.sync_jitter = {"batch": 0.0, "model": 0.0, axis: 0.5}

    def seconds(cost, weights):
        w = np.asarray(weights, float)[None, :]
        if axis == "batch":
            return float(cost.evaluate_sizes(2, 1, [0, 1], split_sizes_batch(batch, w)[0],
                                              {}).seconds[0])
        dims = {d: split_sizes_batch(int(s), w)[0] for d, s in zip(cost.dim_names, cost.dim_sizes)}
        return float(cost.evaluate_sizes(1, 2, [0, 1], [batch], dims).seconds[0])

    measured = {axis: seconds(truth, [1, 1]), "batch_size": batch,
                "balanced": {"weights": speeds, axis: seconds(truth, speeds)}}
    cost = CostModel(model, _profiled(model, speeds, measured), batch)
    assert cost.sync_jitter[axis] == pytest.approx(0.5, rel=1e-3)
    assert cost.split_overhead[axis] == pytest.approx(0.002 * 0.4e9, rel=1e-3)
    assert seconds(cost, speeds) == pytest.approx(measured["balanced"][axis], rel=1e-6)
    assert seconds(cost, [1, 1]) == pytest.approx(measured[axis], rel=1e-6)
    # without the balanced split the profile keeps the plain maximum
    plain = CostModel(model, _profiled(model, speeds, {k: v for k, v in measured.items()
                                                       if k != "balanced"}), batch)
    assert plain.sync_jitter == {"batch": 0.0, "model": 0.0}
    assert seconds(plain, speeds) < seconds(cost, speeds)
    # the MILP prices no jitter: the exact planner enumerates instead
    assert constant_speeds(cost) is None
    # one worker of the profile (a benchmark's alone row): nothing split, nothing fitted
    alone = dataclasses.replace(cost.cluster, devices=cost.cluster.devices[:1])
    single = CostModel(model, alone, batch)
    assert single.sync_jitter == {"batch": 0.0, "model": 0.0}
    assert single.evaluate_sizes(1, 1, [0], [batch], {}).seconds[0] == pytest.approx(
        3.0 * model.flops * batch / speeds[0])


def test_a_profile_rescaled_to_live_speeds_keeps_its_jitter():
    from meshpar.training.rebalance import scaled_profile

    model, speeds, batch = describe_model("vgg-cifar-small"), [1e9, 0.4e9], 8
    measured = {"batch": 0.05, "model": 0.08, "batch_size": batch,
                "balanced": {"weights": speeds, "batch": 0.04, "model": 0.07}}
    profile = _profiled(model, speeds, measured)
    cost = CostModel(model, profile, batch)
    scaled = scaled_profile(profile, {0: 1.0, 1: 0.2}, model, batch)
    rescaled = CostModel(model, scaled, batch)
    assert rescaled.sync_jitter == pytest.approx(cost.sync_jitter)
    assert rescaled.split_overhead == pytest.approx(cost.split_overhead)
    assert dataclasses.asdict(scaled.devices[1])["profile"] != \
        dataclasses.asdict(profile.devices[1])["profile"]
