"""The layout gene: per split dimension, laid out on the model axis or replicated,
chosen by the GA and priced by the cost model; a partial layout trains like one device."""
import itertools

import numpy as np
import pytest

from meshpar.models import describe_model
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.cost_model import CostModel
from meshpar.planning.description import Layer, ModelDescription
from meshpar.planning.plan import Plan
from meshpar.planning.planners import plan
from meshpar.planning.planners.common import build_plan
from meshpar.planning.planners.lattice import layout_flips


def two_layers():
    """A big convolution (much work, a small output) and a small layer whose
    output is large: splitting the small one costs a gather of its output and
    an all-reduce of its input's gradient, far more than its compute saves."""
    return ModelDescription("two", (
        Layer("big", "conv3d", 4e9, params=1000, in_elems=1000, out_elems=1000,
              split_dim="big_f", split_size=64, comm="allconcat"),
        Layer("small", "conv3d", 1e6, params=100, in_elems=1000, out_elems=20_000_000,
              split_dim="small_f", split_size=16, comm="allconcat",
              backward_allreduce_elems=1000),
        Layer("head", "dense", 1e6, params=10, in_elems=20_000_000, out_elems=2),
    ), input_elems=1000)


def test_ga_replicates_the_layer_whose_split_costs_more_than_it_saves_and_splits_the_big_one():
    model = two_layers()
    cluster = ClusterSpec.from_speeds([1.0, 1.0], bandwidth=1e9, latency=1e-4)
    best = plan(model, cluster, 4, method="ga", shapes=[(1, 2)], generations=30)
    laid_out = {d for d, axis in best.layout if axis == "model"}
    assert laid_out == {"big_f"}
    assert best.extra["replicated"] == ["small_f"]
    # every layout at the GA's sizes: its choice is the fastest
    cost = CostModel(model, cluster, 4)
    times = {lay: cost.evaluate_sizes(1, 2, [0, 1], [4], {"big_f": [32, 32], "small_f": [8, 8]},
                                      list(lay)).seconds[0]
             for lay in ((), ("big_f",), ("small_f",), ("big_f", "small_f"))}
    assert min(times, key=times.get) == ("big_f",)
    assert best.predicted_step_seconds <= times[("big_f",)] * (1 + 1e-9)
    # without the gene every dim is laid out, and that is slower here
    fixed = plan(model, cluster, 4, method="ga", shapes=[(1, 2)], generations=30,
                 layout_gene=False)
    assert {d for d, a in fixed.layout if a == "model"} == {"big_f", "small_f"}
    assert fixed.predicted_step_seconds > 1.5 * best.predicted_step_seconds


def test_the_plan_records_the_layout_of_the_chromosome_and_prices_it_again_from_json(tmp_path):
    model = describe_model("vgg-cifar-small")
    cluster = ClusterSpec.from_speeds([1.0, 0.5, 0.5, 0.25])
    cost = CostModel(model, cluster, 8)
    rng = np.random.default_rng(0)
    for _ in range(4):
        mask = rng.random(len(cost.dim_names)) < 0.5
        p = build_plan("ga", cost, 2, 2, [0, 1, 2, 3], [2, 1], [2, 1], layout=mask)
        assert [d for d, a in p.layout if a == "model"] == \
            [d for d, on in zip(cost.dim_names, mask) if on]
        assert set(p.split_sizes) == {"batch"} | {d for d, on in zip(cost.dim_names, mask) if on}
        path = tmp_path / "plan.json"
        p.save(path)
        again = CostModel(model, cluster, 8).evaluate_plan(Plan.load(path))
        assert again.seconds[0] == p.predicted_step_seconds


def test_a_ga_plan_is_priced_with_its_own_layout():
    model = describe_model("resattnet3d-small")
    cluster = ClusterSpec.from_speeds([1.0, 0.6, 0.25, 0.25])
    best = plan(model, cluster, 8, method="ga", generations=20, population=16)
    ev = CostModel(model, cluster, 8).evaluate_plan(best)
    assert ev.seconds[0] == best.predicted_step_seconds


def test_collectives_of_a_layout_are_the_sum_of_each_dims_own():
    # Each collective of the lowering belongs to one dim's layout, so the
    # bytes and the row's collective time of a layout are the sums of those
    # of its dims alone (compute is not additive: segments merge).
    model = describe_model("resattnet3d-tiny")
    cluster = ClusterSpec.from_speeds([1.0, 0.5, 0.5, 0.25], bandwidth=1e9, latency=1e-4)
    cost = CostModel(model, cluster, 4)
    sizes = {d: [max(1, s // 2), s - max(1, s // 2)]
             for d, s in zip(cost.dim_names, cost.dim_sizes)}
    dims = cost.dim_names[::3]

    def comm(layout):
        traffic = sum(cost.traffic(2, 2, [3, 1], sizes, layout).values())
        ev = cost.evaluate_sizes(2, 2, [0, 1, 2, 3], [3, 1], sizes, layout)
        return traffic, ev.row_seconds[0] - (ev.seconds[0] - ev.comm_seconds[0]), ev.comm_seconds[0]

    base_bytes = comm([])[0]
    parts = sum(comm([d])[0] - base_bytes for d in dims)
    assert comm(dims)[0] == pytest.approx(base_bytes + parts, rel=1e-12)
    # the model-axis seconds of every row: each dim's collectives alone, summed
    split = cost._split_layers(cost.layout_mask(2, dims))
    frac = cost._fractions(split, cost._sizes_array(2, sizes), 2)
    whole = cost._row_comm(split, frac, np.array([[3.0, 1.0]]), 2)
    alone = 0.0
    for d in dims:
        s = cost._split_layers(cost.layout_mask(2, [d]))
        alone = alone + cost._row_comm(s, cost._fractions(s, cost._sizes_array(2, sizes), 2),
                                       np.array([[3.0, 1.0]]), 2)
    np.testing.assert_allclose(whole, alone, rtol=1e-12)


def test_layout_flips_change_one_splittable_dim_each():
    lay = np.array([True, False, True, False])
    active = np.array([True, True, False, True])
    flips = layout_flips(lay, active)
    assert flips.shape == (3, 4)
    for row, d in zip(flips, (0, 1, 3)):
        assert list(np.nonzero(row != lay)[0]) == [d]


def test_exhaustive_layouts_never_beat_the_ga_by_much_on_a_small_model():
    # vgg-cifar-small has 5 split dims: 32 layouts, each with the GA's own sizes
    model = describe_model("vgg-cifar-small")
    cluster = ClusterSpec.from_speeds([1.0, 0.3], bandwidth=2e8, latency=1e-4)
    best = plan(model, cluster, 4, method="ga", shapes=[(1, 2)], generations=40)
    cost = CostModel(model, cluster, 4)
    sizes = {d: list(s) for d, s in best.split_sizes.items()}
    for d, s in zip(cost.dim_names, cost.dim_sizes):
        sizes.setdefault(d, [max(1, int(s) * 10 // 13), int(s) - max(1, int(s) * 10 // 13)])
    perm = [cost.cluster.device_strings.index(d) for d in best.devices]
    times = [cost.evaluate_sizes(1, 2, perm, [4], sizes, list(lay)).seconds[0]
             for k in range(len(cost.dim_names) + 1)
             for lay in itertools.combinations(cost.dim_names, k)]
    assert best.predicted_step_seconds <= min(times) * (1 + 1e-9)


def test_a_plan_with_a_partial_layout_trains_like_one_device(tmp_path):
    """``meshpar train --plan`` path: the plan's layout (conv2 and fc1 split, the
    other dims replicated) on an uneven 2x2 mesh; losses equal one device's."""
    import meshpar  # noqa: F401  (import shim before mesh_tensorflow)
    import tensorflow.compat.v1 as tf

    from meshpar.training import estimator as E

    rng = np.random.RandomState(0)
    x = rng.randn(16, 8, 8, 3).astype(np.float32)
    y = (np.arange(16) % 10).astype(np.int32)

    def train_input():
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(4, drop_remainder=True).repeat()

    partial = Plan(method="ga", model="vgg-cifar-small", batch=4,
                   mesh_shape=(("batch", 2), ("model", 2)),
                   layout=(("batch", "batch"), ("conv2_filters", "model"),
                           ("fc1_units", "model")),
                   devices=("", "", "", ""),
                   split_weights={"batch": [3, 1], "model": [2, 1]},
                   dim_split_weights={"fc1_units": [1, 3]})
    losses = {}
    for name, where in (("one", {}), ("partial", {"plan": partial})):
        est = E.make_estimator("vgg-cifar-small", str(tmp_path / name), optimizer="momentum",
                               learning_rate=0.01, **where)
        history = E.LossHistoryHook()
        est.train(train_input, max_steps=6, hooks=[history])
        losses[name] = np.array(history.losses)
    assert len(losses["one"]) == 6
    np.testing.assert_allclose(losses["partial"], losses["one"], atol=1e-5, rtol=0)
