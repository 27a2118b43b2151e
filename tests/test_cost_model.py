import dataclasses

import numpy as np
import pytest

from meshpar.core.splits import split_sizes, split_sizes_batch
from meshpar.planning.cluster import ClusterSpec, DeviceSpec
from meshpar.planning.cost_model import CostModel
from meshpar.planning.description import Layer, ModelDescription
from meshpar.planning.memory import TENSORS_ONLY, MemoryTerms


def one_conv(filters=64, comm="allconcat", out_elems=1000):
    return ModelDescription("one", (Layer("c", "conv3d", 1e9, 100, 1000, out_elems * filters,
                                          "f", filters, comm),), input_elems=1000)


def test_split_sizes_batch_matches_the_split_rule():
    rng = np.random.default_rng(0)
    for k in (1, 2, 3, 7, 16):
        for total in (k, k + 1, 13, 64, 101):
            if total < k:
                continue
            w = rng.exponential(size=(50, k)) ** 3  # includes quotas below 1
            expected = np.array([split_sizes(total, list(row)) for row in w])
            assert (split_sizes_batch(total, w) == expected).all()


def test_data_parallel_time_is_slowest_device_plus_gradient_allreduce():
    cluster = ClusterSpec.from_speeds([1.0, 0.5], bandwidth=1e9, latency=1e-3)
    cost = CostModel(one_conv(), cluster, batch=3)
    ev = cost.evaluate_sizes(2, 1, [0, 1], [2, 1], {})
    compute = max(3 * 1e9 * 2 / 1e11, 3 * 1e9 * 1 / 0.5e11)
    allreduce = 2 * (2 - 1) / 2 * (100 + 1) * 4 / 1e9 + 1e-3  # gradients and the mean loss
    assert ev.seconds[0] == pytest.approx(compute + allreduce)


def test_filter_split_time_is_slowest_slice_plus_one_allconcat():
    # The gather's backward is a local slice; the first layer's input needs no
    # gradient, so no backward all-reduce either.
    cluster = ClusterSpec.from_speeds([0.8, 0.5, 0.3, 0.2], bandwidth=1e9, latency=0.0)
    cost = CostModel(one_conv(), cluster, batch=1)
    ev = cost.evaluate_sizes(1, 4, [0, 1, 2, 3], [1], {"f": [28, 18, 11, 7]})
    compute = max(3e9 * s / 64 / (v * 1e11) for s, v in zip([28, 18, 11, 7], [.8, .5, .3, .2]))
    total_bytes = 64 * 1000 * 4
    gather = (total_bytes - total_bytes * 7 / 64) / 1e9
    assert ev.seconds[0] == pytest.approx(compute + gather)


def test_proportional_split_beats_even_split_on_uneven_devices():
    cluster = ClusterSpec.from_speeds([0.8, 0.5, 0.3, 0.2])
    cost = CostModel(one_conv(), cluster, batch=1)
    even = cost.evaluate_sizes(1, 4, [0, 1, 2, 3], [1], {"f": [16, 16, 16, 16]})
    prop = cost.evaluate_sizes(1, 4, [0, 1, 2, 3], [1], {"f": [28, 18, 11, 7]})
    assert prop.seconds[0] < 0.5 * even.seconds[0]


def test_speed_depends_on_slice_size():
    slow_small = DeviceSpec("a", "/cpu:0", ((1e6, 1e9), (1e10, 1e11)))
    cluster = ClusterSpec((slow_small,), bandwidth=1e9, latency=0)
    big = CostModel(one_conv(), cluster, batch=1).evaluate_sizes(1, 1, [0], [1], {})
    # 3e9 FLOPs sit between the profile points: speed below the peak.
    assert big.seconds[0] > 3e9 / 1e11


def test_memory_counts_params_optimizer_slots_and_activations():
    cluster = ClusterSpec.from_speeds([1.0], memory_bytes=1e12)
    model = one_conv(filters=4, out_elems=10)
    ev = CostModel(model, cluster, batch=2,
                   memory_terms=TENSORS_ONLY).evaluate_sizes(1, 1, [0], [2], {})
    # 100 parameters x (value, gradient, 2 Adam slots) + (input 1000 + output 40) x 2 samples
    tensors = 100 * 4 * (2 + 2) + (40 + 1000) * 2 * 4
    assert ev.memory[0, 0] == pytest.approx(tensors)
    terms = MemoryTerms(base_bytes=1000, update_copies=1.5, exchange_copies=7,
                        activation_copies=3)
    ev = CostModel(model, cluster, batch=2, memory_terms=terms).evaluate_sizes(
        1, 1, [0], [2], {})
    assert ev.memory[0, 0] == pytest.approx(
        1000 + 100 * 4 * (2 + 2 + 1.5) + 3 * (40 + 1000) * 2 * 4)


def test_only_a_split_batch_axis_pays_the_gradient_exchange():
    model = one_conv(filters=4, out_elems=10)
    cluster = ClusterSpec.from_speeds([1.0, 1.0], memory_bytes=1e12)
    terms = MemoryTerms(base_bytes=0, update_copies=0, exchange_copies=3, activation_copies=1)
    cost = CostModel(model, cluster, batch=2, memory_terms=terms)
    batch = cost.evaluate_sizes(2, 1, [0, 1], [1, 1], {}).memory[0]
    filters = cost.evaluate_sizes(1, 2, [0, 1], [2], {"f": [2, 2]}).memory[0]
    # one sample each, the whole output; parameters x (value, gradient, slots, exchange)
    assert batch == pytest.approx([100 * 4 * (4 + 3) + (1000 + 40) * 1 * 4] * 2)
    # half the parameters, no exchange buffers; the gathered output whole and the slice
    assert filters == pytest.approx([50 * 4 * 4 + (1000 + 40 * 1.5) * 2 * 4] * 2)


def test_memory_terms_refuse_negative_or_infinite_copies():
    with pytest.raises(ValueError, match="activation_copies"):
        MemoryTerms(activation_copies=-1)
    with pytest.raises(ValueError, match="base_bytes"):
        MemoryTerms(base_bytes=float("inf"))


def test_plan_over_device_memory_is_infeasible():
    cluster = ClusterSpec.from_speeds([1.0, 1.0], memory_bytes=1000)
    ev = CostModel(one_conv(), cluster, batch=2).evaluate_sizes(2, 1, [0, 1], [1, 1], {})
    assert not ev.feasible[0] and ev.overflow[0] > 1


def test_population_is_evaluated_in_one_call():
    cluster = ClusterSpec.from_speeds([1.0, 0.5, 0.3, 0.2])
    cost = CostModel(one_conv(), cluster, batch=4)
    perm = np.tile(np.arange(4), (3, 1))
    sizes = np.array([[[16, 16, 16, 16]], [[28, 18, 11, 7]], [[40, 10, 8, 6]]])
    ev = cost.evaluate(1, 4, perm, np.full((3, 1), 4), sizes)
    assert ev.seconds.shape == (3,) and ev.memory.shape == (3, 4)
    assert np.argmin(ev.seconds) == 1


def test_lower_bound_is_total_work_over_total_speed():
    cluster = ClusterSpec.from_speeds([0.8, 0.5, 0.3, 0.2])
    cost = CostModel(one_conv(), cluster, batch=1)
    assert cost.lower_bound() == pytest.approx(3e9 / 1.8e11)


def test_a_model_step_profile_is_read_at_each_devices_whole_step_work():
    from meshpar.models import describe_model
    from meshpar.planning.cluster import ClusterSpec, DeviceSpec

    model = describe_model("vgg-cifar-small")
    step = 3.0 * model.flops  # one sample's training step
    # speed doubles from 1 to 4 samples: a fixed per-step cost, as measured
    profile = ((step, 1e9), (4 * step, 2e9))
    devices = tuple(DeviceSpec(name=f"w{i}", device=f"/job:worker/task:{i}/device:CPU:0",
                               profile=profile, memory_bytes=1e12) for i in range(2))
    cluster = ClusterSpec(devices, bandwidth=1e12, latency=0.0,
                          extra={"work": "model-step", "model": model.name})
    cost = CostModel(model, cluster, 4)
    ev = cost.evaluate_sizes(2, 1, [0, 1], [3, 1], {})
    # row 0: 3 samples at the speed of 3 samples' step (log-log interpolation)
    speed3 = np.exp(np.interp(np.log(3 * step), np.log([step, 4 * step]), np.log([1e9, 2e9])))
    assert ev.row_seconds[0] == pytest.approx([3 * step / speed3, step / 1e9], rel=1e-9)
    with pytest.raises(ValueError, match="measured on model"):
        CostModel(describe_model("vgg-cifar"), cluster, 4)


def _two_flat_step_workers():
    """vgg-cifar-small, one sample's training-step FLOPs, two workers whose
    model-step profiles are flat at 1 and 0.5 GFLOP/s, the profile's extra."""
    from meshpar.models import describe_model

    model = describe_model("vgg-cifar-small")
    step = 3.0 * model.flops
    devices = tuple(DeviceSpec(name=f"w{i}", device=f"/job:worker/task:{i}/device:CPU:0",
                               profile=((step, s),), memory_bytes=1e12)
                    for i, s in enumerate([1e9, 0.5e9]))
    return model, step, devices, {"work": "model-step", "model": model.name}


def test_measured_split_times_become_per_device_work_each_row_pays_at_its_own_speed():
    """Two workers at 1 and 0.5 GFLOP/s; the even 2/2 split measured 0.05 s
    above its slow row: that is 0.05 s x 0.5 GFLOP/s of work per device and
    step, which the fast row pays in half the time."""
    model, step, devices, extra = _two_flat_step_workers()
    measured = dict(extra, split_seconds={"batch": 2 * step / 0.5e9 + 0.05, "model": None,
                                          "batch_size": 4})
    cost = CostModel(model, ClusterSpec(devices, bandwidth=1e12, latency=0.0, extra=measured), 4)
    assert cost.split_overhead == pytest.approx({"batch": 0.05 * 0.5e9, "model": 0.0})
    even = cost.evaluate_sizes(2, 1, [0, 1], [2, 2], {})
    assert even.seconds[0] == pytest.approx(measured["split_seconds"]["batch"])
    uneven = cost.evaluate_sizes(2, 1, [0, 1], [3, 1], {})
    assert uneven.row_seconds[0] == pytest.approx([3 * step / 1e9 + 0.025,
                                                   step / 0.5e9 + 0.05])
    # the same plan with the devices' places swapped: each row keeps its device's price
    swapped = cost.evaluate_sizes(2, 1, [1, 0], [1, 3], {})
    assert swapped.row_seconds[0] == pytest.approx(uneven.row_seconds[0][::-1])
    alone = CostModel(model, ClusterSpec(devices[:1], bandwidth=1e12, latency=0.0,
                                         extra=measured), 4)
    assert alone.evaluate_sizes(1, 1, [0], [4], {}).seconds[0] == pytest.approx(4 * step / 1e9)


def test_a_split_measured_faster_than_its_compute_costs_nothing_and_model_work_is_per_row():
    """A measured split below the predicted compute gives zero work (never
    negative); a model split's work is priced at the row's slowest device."""
    model, step, devices, extra = _two_flat_step_workers()
    plain = CostModel(model, ClusterSpec(devices, bandwidth=1e12, latency=0.0, extra=extra), 4)
    dims = {d: [s // 2, s - s // 2] for d, s in zip(plain.dim_names, plain.dim_sizes)}
    model_compute = float(plain.evaluate_sizes(1, 2, [0, 1], [4], dims).compute_seconds[0])
    measured = dict(extra, split_seconds={"batch": 0.001, "model": model_compute + 0.1,
                                          "batch_size": 4})
    cost = CostModel(model, ClusterSpec(devices, bandwidth=1e12, latency=0.0, extra=measured), 4)
    assert cost.split_overhead["batch"] == 0.0
    assert cost.split_overhead["model"] == pytest.approx(0.1 * 0.5e9)
    assert cost.overhead_seconds(1, 2, np.array([[1e9, 0.5e9]])) == pytest.approx([0.1])
    assert cost.overhead_seconds(2, 1, np.array([[1e9], [0.5e9]])) == pytest.approx([0, 0])
    on_model = cost.evaluate_sizes(1, 2, [0, 1], [4], dims)
    assert on_model.seconds[0] == pytest.approx(model_compute + 0.1)


def test_a_model_step_profile_is_read_non_decreasing_and_a_kernel_profile_as_measured():
    """A step profile's bump (a point faster than the larger work after it) is
    pooled with its neighbours (geometric mean); a kernel profile is not."""
    from meshpar.models import describe_model
    from meshpar.planning.profiles import nondecreasing_profile

    bumpy = ((1.0, 6.0), (2.0, 7.0), (4.0, 9.0), (8.0, 7.0), (16.0, 8.0))
    pooled = (9.0 * 7.0) ** 0.5  # below 8.0, so the last point stays as it is
    fitted = nondecreasing_profile(bumpy)
    assert [w for w, _ in fitted] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert [f for _, f in fitted] == pytest.approx([6.0, 7.0, pooled, pooled, 8.0])
    assert nondecreasing_profile(bumpy[::-1]) == fitted
    rising = ((1.0, 1.0), (2.0, 2.0), (4.0, 2.0))
    assert nondecreasing_profile(rising) == rising

    model = describe_model("vgg-cifar-small")
    step = 3.0 * model.flops
    profile = tuple((k * step, f * 1e9) for k, f in bumpy)
    device = DeviceSpec(name="w0", device="/job:worker/task:0/device:CPU:0",
                        profile=profile, memory_bytes=1e12)
    for extra, speed in (({"work": "model-step", "model": model.name}, pooled), ({}, 7.0)):
        cost = CostModel(model, ClusterSpec((device,), bandwidth=1e12, latency=0.0,
                                            extra=extra), 8)
        assert float(cost.speed(np.array([0]), np.array([8 * step]))[0]) == pytest.approx(
            speed * 1e9)
    step_cost = CostModel(model, ClusterSpec((device,), bandwidth=1e12, latency=0.0, extra={
        "work": "model-step", "model": model.name}), 8)
    assert step_cost.evaluate_sizes(1, 1, [0], [8], {}).seconds[0] == pytest.approx(
        8 * step / (pooled * 1e9))
    assert cost.max_speed[0] == pytest.approx(9e9)  # the kernel profile's own top


def test_a_slice_runs_at_its_devices_measured_efficiency_for_its_share_of_the_dims():
    """Filter slices are priced at the device's measured speed on that share
    of every split dim (log-log between points, capped at 1, and below the
    narrowest the two narrowest points' trend goes on); whole layers (a batch split) are not touched, and the
    calibrated split work absorbs only what the slices do not explain."""
    model, step, flat, extra = _two_flat_step_workers()
    # speed grows with the batch: a slice is looked up at the whole model's
    # step at its row's batch (its narrowness is the efficiency's part)
    devices = tuple(dataclasses.replace(d, profile=((step, f), (4 * step, 2 * f)))
                    for d, f in zip(flat, (1e9, 0.5e9)))
    slices = ((0.25, 0.4), (0.5, 0.8))
    narrow = tuple(dataclasses.replace(d, slice_efficiency=slices) for d in devices)
    plain = CostModel(model, ClusterSpec(devices, bandwidth=1e12, latency=0.0, extra=extra), 4)
    cost = CostModel(model, ClusterSpec(narrow, bandwidth=1e12, latency=0.0, extra=extra), 4)
    assert cost.slices_priced and not plain.slices_priced
    # below 1/4: efficiency doubled from 1/4 to 1/2 (slope 1), so a narrower
    # slice takes as long as the 1/4 one, not less (held efficiency said 0.4 here)
    expected = {0.25: 0.4, 0.5: 0.8, 1.0: 1.0, 0.1: 0.4 * 0.1 / 0.25,
                0.375: np.exp(np.interp(np.log(0.375), np.log([0.25, 0.5]), np.log([0.4, 0.8])))}
    for fraction, eff in expected.items():
        assert float(cost.slice_efficiency(np.array([1]), np.array([fraction]))[0]) == \
            pytest.approx(eff)
    dims = {d: [s // 4, s - s // 4] for d, s in zip(cost.dim_names, cost.dim_sizes)}
    share = {d: s // 4 / s for d, s in zip(cost.dim_names, cost.dim_sizes)}
    mine, theirs = (c.evaluate_sizes(1, 2, [0, 1], [4], dims) for c in (cost, plain))
    # each layer's slice on device 0 holds its dim's share: slowed by that share's efficiency
    layer_eff = [float(cost.slice_efficiency(np.array([0]), np.array([share[l.split_dim]]))[0])
                 if l.split_dim else 1.0 for l in model.layers]
    work = [3 * l.flops * 4 * (share[l.split_dim] if l.split_dim else 1.0) for l in model.layers]
    speed0 = 2e9  # device 0's whole step of 4 samples, not its slices' summed work
    # the step's fixed part (2/3 of a 1-sample step here) goes by parameter share
    fixed = 2.0 / 3.0 * step / 1e9
    assert cost.fixed_seconds[cost.device_type[0]] == pytest.approx(fixed)
    params = np.array([l.params for l in model.layers], float)
    flops = np.array([l.flops for l in model.layers], float)
    shift = fixed * (params / params.sum() - flops / flops.sum())
    frac = [share[l.split_dim] if l.split_dim else 1.0 for l in model.layers]
    assert mine.device_seconds[0, 0] == pytest.approx(
        sum((w / speed0 + f * d) / e for w, f, d, e in zip(work, frac, shift, layer_eff)))
    assert mine.device_seconds[0, 0] > theirs.device_seconds[0, 0]
    batch = (cost.evaluate_sizes(2, 1, [0, 1], [3, 1], {}),
             plain.evaluate_sizes(2, 1, [0, 1], [3, 1], {}))
    assert batch[0].seconds[0] == pytest.approx(batch[1].seconds[0])
    # a device measured faster on slices than whole counts as whole (a lower bound stays one)
    fast = tuple(dataclasses.replace(d, slice_efficiency=((0.5, 1.3),)) for d in devices)
    fast_cost = CostModel(model, ClusterSpec(fast, bandwidth=1e12, latency=0.0, extra=extra), 4)
    assert float(fast_cost.slice_efficiency(np.array([0]), np.array([0.5]))[0]) == 1.0
    # a narrower slice measured faster than a wider one is pooled with it
    noisy = tuple(dataclasses.replace(d, slice_efficiency=((0.25, 0.88), (0.5, 0.67)))
                  for d in devices)
    noisy_cost = CostModel(model, ClusterSpec(noisy, bandwidth=1e12, latency=0.0, extra=extra), 4)
    for fraction in (0.1, 0.25, 0.375, 0.5):
        assert float(noisy_cost.slice_efficiency(np.array([0]), np.array([fraction]))[0]) == \
            pytest.approx(np.sqrt(0.88 * 0.67))
    # a gentler trend goes on at its own slope: the time of a slice still shrinks, less
    gentle = tuple(dataclasses.replace(d, slice_efficiency=((0.25, 0.4), (0.5, 0.6)))
                   for d in devices)
    gentle_cost = CostModel(model, ClusterSpec(gentle, bandwidth=1e12, latency=0.0,
                                               extra=extra), 4)
    slope = np.log(0.6 / 0.4) / np.log(2.0)
    assert float(gentle_cost.slice_efficiency(np.array([0]), np.array([0.125]))[0]) == \
        pytest.approx(0.4 * 0.5 ** slope)
    # the even model split's measured time: calibrated work is what the slices leave over
    even = {d: [s // 2, s - s // 2] for d, s in zip(cost.dim_names, cost.dim_sizes)}
    slow_compute = float(cost.evaluate_sizes(1, 2, [0, 1], [4], even).compute_seconds[0])
    measured = dict(extra, split_seconds={"batch": None, "model": slow_compute + 0.1,
                                          "batch_size": 4})
    calibrated = CostModel(model, ClusterSpec(narrow, bandwidth=1e12, latency=0.0,
                                              extra=measured), 4)
    assert calibrated.split_overhead["model"] == pytest.approx(0.1 * 1e9)  # slow top speed


def test_a_plan_may_count_on_its_devices_memory_less_the_headroom():
    """The count has been up to 23% under a measured need: with headroom h a
    plan counted between (1 - h) x memory and the memory is infeasible."""
    model = one_conv(filters=4, out_elems=10)
    terms = MemoryTerms(base_bytes=0, update_copies=0, exchange_copies=0,
                        activation_copies=1, headroom=0.25)
    need = 100 * 4 * 4 + (1000 + 40) * 2 * 4
    for memory, fits in ((need / 0.75 + 1, True), (need / 0.75 - 1, False), (need * 1.1, False)):
        cluster = ClusterSpec.from_speeds([1.0], memory_bytes=memory)
        ev = CostModel(model, cluster, batch=2, memory_terms=terms).evaluate_sizes(
            1, 1, [0], [2], {})
        assert ev.memory[0, 0] == pytest.approx(need) and bool(ev.feasible[0]) == fits
    with pytest.raises(ValueError, match="headroom"):
        MemoryTerms(headroom=1.0)


def test_a_step_profiles_fixed_part_is_its_intercept_held_within_the_shortest_step():
    from meshpar.planning.profiles import fixed_step_seconds

    work = 1e9  # FLOPs of one sample's step; step time 0.02 s + 0.01 s per sample
    profile = [(b * work, b * work / (0.02 + 0.01 * b)) for b in (1, 2, 4, 8)]
    assert fixed_step_seconds(profile) == pytest.approx(0.02)
    assert fixed_step_seconds(profile[:1]) == 0.0
    # speed falling with the batch: a negative intercept is no fixed part
    assert fixed_step_seconds([(work, 2e9), (4 * work, 1e9)]) == 0.0


def test_the_fixed_part_of_a_step_is_shared_out_by_parameters_not_flops():
    """Workers whose step takes 0.02 s + 0.01 s per sample (slices at full
    efficiency): each layer slice costs ``frac (flops share (t - A) + params
    share A)``, a replicated layer (``frac`` 1) on every device; a batch split
    is priced as with no fixed part, and a plan that gives worker 1 most of
    the parameter-heavy dim costs it more than by FLOPs."""
    from meshpar.models import describe_model

    model = describe_model("vgg-cifar-small")
    step = 3.0 * model.flops
    profile = tuple((b * step, b * step / (0.02 + 0.01 * b)) for b in (1, 2, 4, 8))
    devices = tuple(DeviceSpec(name=f"w{i}", device=f"/job:worker/task:{i}/device:CPU:0",
                               profile=profile, memory_bytes=1e12,
                               slice_efficiency=((0.25, 1.0), (0.5, 1.0))) for i in range(2))
    cluster = ClusterSpec(devices, bandwidth=1e12, latency=0.0,
                          extra={"work": "model-step", "model": model.name})
    cost = CostModel(model, cluster, 4)
    flat = CostModel(model, cluster, 4)
    flat.fixed_seconds[:] = 0.0
    assert cost.fixed_seconds == pytest.approx([0.02])
    names, sizes = cost.dim_names, cost.dim_sizes
    even = {d: [s // 2, s - s // 2] for d, s in zip(names, sizes)}
    assert cost.evaluate_sizes(2, 1, [0, 1], [3, 1], {}).device_seconds == pytest.approx(
        flat.evaluate_sizes(2, 1, [0, 1], [3, 1], {}).device_seconds, rel=1e-12)
    params = np.array([l.params for l in model.layers], float)
    flops = np.array([l.flops for l in model.layers], float)
    by_dim = {d: params[[l.split_dim == d for l in model.layers]].sum() for d in names}
    heavy = max(by_dim, key=by_dim.get)  # worker 1 takes 3/4 of it, 1/4 of the others
    skewed = {d: ([s // 4, s - s // 4] if d == heavy else [s - s // 4, s // 4])
              for d, s in zip(names, sizes)}
    whole = 0.02 + 0.01 * 4
    for plan in (even, skewed):
        got = cost.evaluate_sizes(1, 2, [0, 1], [4], plan).device_seconds[0]
        for m in range(2):
            frac = np.array([plan[l.split_dim][m] / model.split_dims[l.split_dim]
                             if l.split_dim else 1.0 for l in model.layers])
            expected = (frac * (flops / flops.sum() * (whole - 0.02)
                                + params / params.sum() * 0.02)).sum()
            assert got[m] == pytest.approx(expected, rel=1e-9)
    assert got[1] > flat.evaluate_sizes(1, 2, [0, 1], [4], skewed).device_seconds[0][1]


def test_stored_runs_repredicted_move_only_the_plans_whose_shares_differ():
    """``benchmarks/repredict.py`` on a stored enforced run (its own profile
    and plans): the planner's memory-driven split (the slow worker holds half
    the parameters, a quarter of the FLOPs) is predicted slower once the
    step's fixed part goes by parameters (0.70 -> 0.80 of its measured step;
    0.69 -> 0.79 before narrow slices' efficiency went on falling below the
    narrowest measured one);
    the workers alone stay exactly, Mesh-TF's even split nearly, where they were."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("repredict", root / "benchmarks" / "repredict.py")
    repredict = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(repredict)
    rows = {name: (before, now) for _, name, before, now in repredict.repredict(str(
        root / "benchmarks/results/train-0.9-0.3-vgg-pairs-memory150-enforced-run1/train.json"))}
    assert rows["planner"][0] == pytest.approx(0.70, abs=0.01)
    assert rows["planner"][1] == pytest.approx(0.80, abs=0.01)
    for name in ("alone-0", "alone-1"):
        assert rows[name][1] == pytest.approx(rows[name][0], rel=1e-9)
    # equal shares in every split dim: only its replicated layers move
    assert rows["mtf-even-filter"][1] == pytest.approx(rows["mtf-even-filter"][0], abs=0.005)



def test_a_plan_listing_the_model_axis_first_is_priced_as_the_same_placement_batch_first():
    """Devices are listed in pnum order, row-major over the plan's own mesh shape: in a
    'model:2;batch:2' plan the second device is batch row 1 of model column 0. The
    cost model reads each device's row and column by the axis names."""
    from meshpar.models import describe_model
    from meshpar.planning.planners import plan

    cluster = ClusterSpec.from_speeds([1.0, 0.6, 0.4, 0.2])
    batch_first = plan(describe_model("vgg-cifar-small"), cluster, 8, method="proportional",
                       shapes=[(2, 2)])
    assert [a for a, _ in batch_first.mesh_shape] == ["batch", "model"]
    d = batch_first.devices  # pnum r * 2 + c holds batch row r, model column c
    model_first = dataclasses.replace(
        batch_first, mesh_shape=(("model", 2), ("batch", 2)),
        devices=(d[0], d[2], d[1], d[3]))  # pnum c * 2 + r
    cost = CostModel(describe_model("vgg-cifar-small"), cluster, 8)
    ours, theirs = cost.evaluate_plan(model_first), cost.evaluate_plan(batch_first)
    assert ours.seconds[0] == pytest.approx(theirs.seconds[0], rel=1e-12)
    # per-device columns follow each plan's own device list
    for field in ("device_seconds", "memory"):
        of = {dev: v for dev, v in zip(model_first.devices, getattr(ours, field)[0])}
        assert [of[dev] for dev in d] == pytest.approx(list(getattr(theirs, field)[0]))
    swapped = dataclasses.replace(batch_first, devices=(d[0], d[2], d[1], d[3]))
    assert cost.evaluate_plan(swapped).seconds[0] != pytest.approx(
        cost.evaluate_plan(batch_first).seconds[0], rel=1e-6)  # another placement
