"""describe_mtf_graph's forward collectives (meshpar.core.graph_forward): each on the
row of the operation whose lowering runs it, at the size of the tensor it moves,
so the graph-derived table prices the bytes a lowered training step sends."""
import types

import pytest

import meshpar  # noqa: F401  (import shim before mesh_tensorflow)
import mesh_tensorflow as mtf
import tensorflow.compat.v1 as tf

import test_collective_pricing as pricing
from test_graph_description_collectives import _graph_description, tf_graph  # noqa: F401
from meshpar.core.graph_description import describe_mtf_graph
from meshpar.planning.description import Layer

VGG, TINY, layout = pricing.VGG, pricing.TINY, pricing._layout

# One layout per rule, besides tests/test_collective_pricing.py's meshes.
RULE_CASES = [
    # a pooled output gathered at its pooled size (conv2 -> pool2 -> gather)
    (VGG, "model:2", layout(VGG, ["conv2_filters"], batch=False), {}),
    # the logits: a split contraction all-reduced at the logits' size; its kernel is
    # sliced over fc1_units, its bias whole, in the data-parallel all-reduce
    (VGG, "batch:2;model:2", layout(VGG, ["fc1_units"]), {"batch": [1, 1], "model": [3, 1]}),
    # a dimension two layers produce (conv2 and the projection), gathered once
    (TINY, "model:2", layout(TINY, ["s1b0_conv2_filters"], batch=False), {"model": [3, 1]}),
    # the stem gathered after its pool
    (TINY, "model:2", layout(TINY, ["stem_filters"], batch=False), {}),
    # attention: the scores all-reduced (split on key), the output projection (on value)
    (TINY, "model:2", layout(TINY, ["s1att_key", "s1att_value"], batch=False), {}),
    # earlier graph-table cases: gathers right after the convolution
    (TINY, "batch:2;model:2", layout(TINY, ["s0b0_conv1_filters", "s0b0_conv2_filters"]),
     {"batch": [1, 1], "model": [3, 1]}),
    (VGG, "model:3", layout(VGG, ["conv1_filters", "conv3_filters"], batch=False),
     {"model": [3, 2, 1]}),
]




# Split pairs are left to the hand-written table: the second conv of a pair has a
# kernel over two splittable dims (the first's filters, contracted, and its own),
# and a graph-derived row has one split_dim, chosen without knowing the layout
# (docs/cost_model.md, "Tables extracted from a graph"): its kernel's batch-axis
# all-reduce is priced whole.
# On model:3 alone (no batch axis) the graph table prices a pair exactly.
GRAPH_CASES = [case for case in pricing.CASES
               if case[0] != pricing.PAIRS or "batch" not in case[1]]


@pytest.mark.parametrize("name,mesh_shape,layout_rules,weights", GRAPH_CASES + RULE_CASES)
def test_graph_table_prices_the_bytes_the_lowered_step_sends(
        name, mesh_shape, layout_rules, weights, monkeypatch):
    # Before the forward collectives were placed where the lowering runs them:
    # resattnet3d-tiny on model:2 priced 442,368 model-axis bytes for 327,680 sent,
    # vgg-cifar-small on model:3 83,968 for 69,760.
    batch = 4
    counted = pricing.counted_bytes(name, mesh_shape, layout_rules, weights, batch)
    with tf.Graph().as_default():
        tf.set_random_seed(1)
        description = _graph_description(name)
    # predicted_bytes reads the table through models.get(name).describe(): hand it this one
    monkeypatch.setattr(pricing, "models", types.SimpleNamespace(
        get=lambda _: types.SimpleNamespace(describe=lambda: description)))
    predicted = pricing.predicted_bytes(name, mesh_shape, layout_rules, weights, batch)
    assert counted["model"] + counted["batch"] > 0
    assert predicted == {k: float(v) for k, v in counted.items()}


def _variable(mesh, name, dims):
    return mtf.get_variable(mesh, name, [mtf.Dimension(n, s) for n, s in dims],
                            initializer=tf.zeros_initializer())


def _image(mesh, channels=3):
    dims = [mtf.Dimension(n, s) for n, s in (("batch", 2), ("h", 4), ("w", 4),
                                             ("c", channels))]
    return mtf.import_tf_tensor(mesh, tf.zeros([2, 4, 4, channels]), mtf.Shape(dims))


def _conv(x, mesh, name, out_dim, k=3):
    kernel = _variable(mesh, name, [("fh", k), ("fw", k), (x.shape.dims[-1].name,
                                                           x.shape.dims[-1].size),
                                    (out_dim.name, out_dim.size)])
    return mtf.Conv2dOperation(x, kernel, strides=(1, 1, 1, 1), padding="SAME").outputs[0]


def _dense_loss(x, mesh):
    """flatten -> dense to 3 units -> mean square loss."""
    flat = mtf.Dimension("flat", x.shape.size // x.shape.dims[0].size)
    x = mtf.reshape(x, [x.shape.dims[0], flat])
    w = _variable(mesh, "dense", [("flat", flat.size), ("units", 3)])
    mtf.reduce_mean(mtf.square(mtf.einsum([x, w], output_shape=[x.shape.dims[0],
                                                                mtf.Dimension("units", 3)])))


def test_a_pooled_output_is_gathered_at_the_pooled_size():
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    f = mtf.Dimension("f", 4)
    y = mtf.layers.max_pool2d(mtf.relu(_conv(_image(mesh), mesh, "k", f)), (2, 2))
    _dense_loss(mtf.rename_dimension(y, "f", "f_all"), mesh)
    conv, gather, dense = describe_mtf_graph(graph, "pool").layers
    assert (conv.split_dim, conv.comm, conv.out_elems) == ("f", None, 4 * 4 * 4)
    assert gather == Layer(name=gather.name, kind="gather", flops=0.0, in_elems=2 * 2 * 4,
                           out_elems=2 * 2 * 4, split_dim="f", split_size=4, comm="allconcat")
    assert (dense.split_dim, dense.comm) == (None, None)


def test_a_dimension_two_layers_produce_is_gathered_once():
    # conv and a 1x1 projection onto the same filter dim, added, then gathered
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    x, f = _image(mesh), mtf.Dimension("f", 4)
    y = _conv(x, mesh, "k3", f) + _conv(x, mesh, "k1", f, k=1)
    _dense_loss(mtf.rename_dimension(mtf.relu(y), "f", "f_all"), mesh)
    rows = describe_mtf_graph(graph, "twice").layers
    assert [(r.kind, r.split_dim, r.comm) for r in rows] == [
        ("conv2d", "f", None), ("conv2d", "f", None), ("gather", "f", "allconcat"),
        ("dense", None, None)]
    assert rows[2].out_elems == 4 * 4 * 4


def _mlp(hidden=(3,), bias=False):
    """x [batch=4, d_in=6] -> dense per hidden size -> dense to out=2 (+ bias) -> loss."""
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    batch = mtf.Dimension("batch", 4)
    x = mtf.import_tf_tensor(mesh, tf.zeros([4, 6]), mtf.Shape([batch, mtf.Dimension("d_in", 6)]))
    for i, units in enumerate(list(hidden) + [2]):
        out = mtf.Dimension(f"h{i}" if i < len(hidden) else "out", units)
        w = _variable(mesh, f"w{i}", [(x.shape.dims[-1].name, x.shape.dims[-1].size),
                                      (out.name, units)])
        x = mtf.einsum([x, w], output_shape=[batch, out])
    if bias:
        x = x + _variable(mesh, "bias", [("out", 2)])
    mtf.reduce_mean(mtf.square(x))
    return describe_mtf_graph(graph, "mlp")


def test_a_split_contraction_is_all_reduced_at_its_output_on_its_own_row():
    first, last, add = _mlp(bias=True).layers
    assert (first.split_dim, first.comm, first.params) == ("h0", None, 6 * 3)
    # the contracting layer's work is split too; its kernel [h0, out] is sliced
    assert (last.split_dim, last.comm, last.out_elems, last.params) == ("h0", "allreduce", 2, 6)
    # the bias is whole on every device: a row of its own, not split, with its add
    assert add == Layer(name=add.name, kind="elementwise", flops=2.0, params=2, in_elems=2,
                        out_elems=2)


def test_a_split_contraction_splits_nothing_of_its_own():
    """h0 and h1 on the one model axis at once is no layout (the kernel [h0, h1] would
    have both on it: mtf refuses): the layer contracting h0 is the split
    contraction, its output h1 stays whole (as the second convolution of a
    vgg-cifar-pairs pair). It used to list h1 as a split too."""
    rows = _mlp(hidden=(3, 5)).layers
    assert [(r.kind, r.split_dim, r.comm, r.out_elems) for r in rows] == [
        ("dense", "h0", None, 3), ("dense", "h0", "allreduce", 5), ("dense", None, None, 2)]
