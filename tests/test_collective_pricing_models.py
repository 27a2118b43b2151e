"""Every registered model, every mesh shape and the layouts the planner can pick:
the cost model's bytes per collective against the bytes the lowered training step
sends (the counting is tests/test_collective_pricing.py's, read its docstring).

The planner's layout gene lays out any subset of a model's split dimensions on
``model``, so besides the default layout (every dimension) each model is checked
with alternate dimensions replicated and with the complement, on meshes
``batch:R;model:M`` with R, M in {1, 2, 3} and uneven splits (pieces as small
as one unit).
"""
import pytest

from test_collective_pricing import _layout, _spec, counted_bytes, predicted_bytes

from meshpar import models


def _check(model, mesh_shape, layout, weights, batch):
    counted = counted_bytes(model, mesh_shape, layout, weights, batch)
    predicted = predicted_bytes(model, mesh_shape, layout, weights, batch)
    assert predicted == {k: float(v) for k, v in counted.items()}, (mesh_shape, layout)
    return counted


def _alternate(model, start):
    """Every other split dimension of ``model`` (from index ``start``): a layout gene."""
    spec = _spec(model)
    return spec.module.split_dim_names(spec.config)[start::2]


REGISTERED = [name for name in models.names() if name not in models.ALIASES]


@pytest.mark.parametrize("name", REGISTERED)
def test_every_registered_model_is_priced_as_its_lowered_step_sends(name):
    """batch:2;model:3, uneven rows and columns, every split dimension laid out."""
    counted = _check(name, "batch:2;model:3", _layout(name),
                     {"batch": [3, 1], "model": [5, 2, 1]}, batch=4)
    assert counted["model"] > 0 and counted["batch"] > 0


TINY_LOCAL_BN = models.get("resattnet3d-tiny", bn_statistics="local")


@pytest.mark.parametrize("model", ["vgg-cifar-small", "vgg-cifar-small-pairs",
                                   "resattnet3d-tiny", TINY_LOCAL_BN],
                         ids=["vgg", "pairs", "resattnet3d", "resattnet3d-local-bn"])
@pytest.mark.parametrize("start", [0, 1], ids=["even dims", "odd dims"])
def test_layout_genes_replicating_some_dimensions_are_priced_as_sent(model, start):
    """batch:3;model:2 with half the split dimensions replicated (each dimension is
    laid out in one case and replicated in the other)."""
    _check(model, "batch:3;model:2", _layout(model, _alternate(model, start)),
           {"batch": [1, 3, 2], "model": [1, 4]}, batch=5)


MESHES = [(r, m) for r in (1, 2, 3) for m in (1, 2, 3) if r * m > 1]


@pytest.mark.parametrize("rows,cols", MESHES, ids=[f"batch:{r};model:{m}" for r, m in MESHES])
@pytest.mark.parametrize("name", ["vgg-cifar-small", "vgg-cifar-small-pairs"])
def test_every_mesh_shape_is_priced_as_sent(name, rows, cols):
    mesh = ";".join([f"batch:{rows}"] * (rows > 1) + [f"model:{cols}"] * (cols > 1))
    weights = {axis: w for axis, w, size in (("batch", [2, 1, 4][:rows], rows),
                                             ("model", [1, 6, 2][:cols], cols)) if size > 1}
    _check(name, mesh, _layout(name, "all" if cols > 1 else [], batch=rows > 1),
           weights, batch=rows + 2)


def test_a_hybrid_three_by_three_mesh_of_the_residual_network_is_priced_as_sent():
    _check("resattnet3d-tiny", "batch:3;model:3", _layout("resattnet3d-tiny"),
           {"batch": [1, 1, 3], "model": [1, 1, 5]}, batch=5)


def test_local_batch_norm_sends_its_moving_averages_statistics_over_the_batch():
    """With local statistics nothing is all-reduced on the step's path, but the
    moving averages take the batch's mean of the shares' statistics: [2, C] per
    batch norm, as many bytes as global statistics send (the table said none)."""
    glob = models.get("resattnet3d-tiny")
    local = counted_bytes(TINY_LOCAL_BN, "batch:2", "batch:batch", {"batch": [1, 1]}, 2)
    assert local == counted_bytes(glob, "batch:2", "batch:batch", {"batch": [1, 1]}, 2)
    assert predicted_bytes(TINY_LOCAL_BN, "batch:2", "batch:batch", {"batch": [1, 1]},
                           2) == {k: float(v) for k, v in local.items()}


def _pixel_net():
    """A network of one's own whose layout splits a pooled spatial dimension ``h``
    (tests/test_equivalence5_pooling_split_space.py trains it like one device)."""
    import types

    from test_equivalence5_pooling_split_space import _pooling_net

    net = types.SimpleNamespace(build=_pooling_net, input_shape=lambda config: (8, 6, 2),
                                layout_rules=lambda config, model_axis="model",
                                batch_axis="batch": f"batch:{batch_axis};h:{model_axis}")
    return models.from_module(net, types.SimpleNamespace(), name="pixel-net")


def _plan(model, batch, layout, model_sizes, mesh=(("batch", 1), ("model", 2))):
    from meshpar.planning.plan import Plan

    return Plan(method="custom", model=model, batch=batch, mesh_shape=mesh, layout=layout,
                devices=tuple(f"/job:worker/task:{i}/device:CPU:0" for i in range(2)),
                split_sizes={"batch": [batch], **model_sizes},
                dim_split_weights={d: [float(n) for n in sizes]
                                   for d, sizes in model_sizes.items()})


def test_a_layout_the_table_cannot_price_is_refused_not_priced_as_replicated():
    """h = 8 over 5/3 on model:2: the lowering gathers the split h before the pooling
    and the reshape (bytes on the model axis), which no row of the table holds (it
    splits only the dense layer's filters f). CostModel.evaluate_plan priced the plan
    as if h were replicated, with no collective at all; it now refuses the rule."""
    from meshpar.planning.cluster import ClusterSpec
    from meshpar.planning.cost_model import CostModel

    spec = _pixel_net()
    sent = counted_bytes(spec, "model:2", "h:model", {"model": [5, 3]}, batch=2)
    assert sent["model"] > 0
    cost = CostModel(spec.describe(), ClusterSpec.from_speeds([1.0, 1.0]), 2)
    assert "h" not in cost.dim_names
    with pytest.raises(ValueError, match=r"layout rule h:model cannot be priced: "
                       r"'pixel-net'.s layer table does not split 'h'"):
        cost.evaluate_plan(_plan("pixel-net", 2, (("batch", "batch"), ("h", "model")),
                                 {"h": [5, 3]}))
    # its own split dimension prices as before
    ok = _plan("pixel-net", 2, (("f", "model"),), {"f": [3, 1]})
    assert cost.evaluate_plan(ok).comm_seconds[0] > 0


def test_a_dimension_on_the_other_axis_is_refused():
    """vgg's conv1 filters on the batch axis are no split the cost model prices: it
    read them as a replicated layer (and the plan's rows as one batch row each)."""
    from meshpar.planning.cluster import ClusterSpec
    from meshpar.planning.cost_model import CostModel

    cost = CostModel(models.describe_model("vgg-cifar-small"),
                     ClusterSpec.from_speeds([1.0, 1.0]), 4)
    plan = _plan("vgg-cifar-small", 4, (("conv1_filters", "batch"),),
                 {"conv1_filters": [3, 3]}, mesh=(("batch", 2), ("model", 1)))
    with pytest.raises(ValueError, match="layout rule conv1_filters:batch cannot be priced: "
                       "the cost model prices 'conv1_filters' on 'model' only"):
        cost.evaluate_plan(plan)


@pytest.mark.parametrize("name", REGISTERED)
def test_every_byte_of_traffic_is_in_the_step_time_and_nothing_else(name):
    """With even splits on equal devices and no latency, each collective's seconds
    in ``evaluate`` times the bandwidth is its bytes in ``traffic`` over the R * M
    devices that send them (an all-concat's device receives (M-1)/M of S, the ring
    all-reduce moves 2(k-1)/k of S per device; traffic counts (k-1) S and 2(k-1) S
    over all rows or columns): a collective priced in one and not the other breaks
    the equality. Every split dimension laid out, and half of them."""
    import numpy as np

    from meshpar.planning.cluster import ClusterSpec
    from meshpar.planning.cost_model import CostModel

    description = models.describe_model(name)
    bandwidth = 1e9
    for rows, cols in ((1, 2), (2, 1), (2, 2), (3, 2)):
        cluster = ClusterSpec.from_speeds([1.0] * (rows * cols), bandwidth=bandwidth,
                                          latency=0.0)
        batch = 2 * rows
        cost = CostModel(description, cluster, batch)
        sizes = {d: [s // cols] * cols for d, s in description.split_dims.items()}
        assert all(s % cols == 0 for s in description.split_dims.values())
        for layout in (None, list(description.split_dims)[::2]):
            traffic = cost.traffic(rows, cols, [batch // rows] * rows, sizes, layout)
            ev = cost.evaluate_sizes(rows, cols, list(range(rows * cols)),
                                     [batch // rows] * rows, sizes, layout)
            assert ev.comm_seconds[0] * bandwidth * rows * cols == pytest.approx(
                sum(traffic.values()), rel=1e-9), (rows, cols, layout)
            assert (rows * cols > 1) == (sum(traffic.values()) > 0)
            assert np.all(ev.row_seconds == ev.row_seconds[0, 0])


@pytest.mark.parametrize("model", ["vgg-cifar-small-pairs", TINY_LOCAL_BN],
                         ids=["pairs", "resattnet3d-local-bn"])
def test_a_network_read_from_its_graph_is_priced_as_sent(model):
    """A network of one's own without a table of its own is priced from the table
    read from its built graph (core.graph_description): here a registered network's
    module without its ``describe``, on batch:2;model:3 with every other dim laid out."""
    import types

    base = _spec(model)
    own = types.SimpleNamespace(build=base.module.build, layout_rules=base.module.layout_rules,
                                input_shape=lambda config: base.input_shape)
    spec = models.ModelSpec(base.name, own, base.config)
    dims = [d for d in base.module.split_dim_names(base.config)[::2]]
    assert set(spec.describe().split_dims) == set(base.describe().split_dims)
    _check(spec, "batch:2;model:3", _layout(base, dims), {"batch": [3, 1], "model": [5, 2, 1]},
           batch=4)
