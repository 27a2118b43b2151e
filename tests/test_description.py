"""meshpar.planning.description: the layer table, and extracting it from a Mesh-TensorFlow graph."""
import subprocess
import sys

import numpy as np
import pytest

import meshpar  # noqa: F401  (import shim before mesh_tensorflow)
import mesh_tensorflow as mtf
import tensorflow.compat.v1 as tf

from meshpar import models
from meshpar.core.graph_description import describe_mtf_graph
from meshpar.planning.description import Layer, ModelDescription


@pytest.fixture(autouse=True)
def tf_graph():
    """Every test builds in its own TF1 graph (graph mode, not eager)."""
    with tf.Graph().as_default() as graph:
        tf.set_random_seed(1)  # initialisers need a seed under TF_DETERMINISTIC_OPS
        yield graph


def _variable(mesh, name, dims):
    return mtf.get_variable(mesh, name, [mtf.Dimension(n, s) for n, s in dims],
                            initializer=tf.zeros_initializer())


def _conv_dense_graph(train=True):
    """import [batch=2, h=4, w=4, c=3] -> conv 3x3 to f=5 (+bias, ReLU) -> rename f -> flatten
    -> dense to units=7 -> mean square loss (+ gradients and an SGD step when ``train``)."""
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    dims = [mtf.Dimension(n, s) for n, s in (("batch", 2), ("h", 4), ("w", 4), ("c", 3))]
    x = mtf.import_tf_tensor(mesh, tf.zeros([2, 4, 4, 3]), mtf.Shape(dims))
    kernel = _variable(mesh, "conv_kernel", [("fh", 3), ("fw", 3), ("c", 3), ("f", 5)])
    y = mtf.Conv2dOperation(x, kernel, strides=(1, 1, 1, 1), padding="SAME").outputs[0]
    y = mtf.relu(y + _variable(mesh, "conv_bias", [("f", 5)]))
    y = mtf.rename_dimension(y, "f", "f_all")
    flat = mtf.Dimension("flat", 80)
    y = mtf.reshape(y, [dims[0], flat])
    w = _variable(mesh, "dense_kernel", [("flat", 80), ("units", 7)])
    y = mtf.einsum([y, w], output_shape=[dims[0], mtf.Dimension("units", 7)])
    loss = mtf.reduce_mean(mtf.square(y))
    if train:
        variables = list(graph.trainable_variables)
        grads = mtf.gradients([loss], [v.outputs[0] for v in variables])
        mtf.optimize.SgdOptimizer(0.1).apply_grads(grads, variables)
    return graph


def test_conv_and_dense_graph_gives_exact_per_sample_numbers():
    table = describe_mtf_graph(_conv_dense_graph(), "toy")
    conv, gather, dense = table.layers
    # conv: 2 * (3*3*3*5 filter) * 16 positions, + bias add and ReLU on 16*5 outputs each
    assert conv == Layer(name="conv2d", kind="conv2d", flops=2.0 * 135 * 16 + 80 + 80,
                         params=135 + 5, in_elems=48, out_elems=80,
                         split_dim="f", split_size=5)
    # the rename gathers the split output: a row of its own, at the size it gathers
    assert gather == Layer(name="reshape", kind="gather", flops=0.0, in_elems=80,
                           out_elems=80, split_dim="f", split_size=5, comm="allconcat")
    # dense: 2 * 80 * 7, + the loss: square (7 outputs) and mean (7 inputs) per sample;
    # units is only reduced by the loss, so it is not a split
    assert dense == Layer(name="einsum", kind="dense", flops=2.0 * 80 * 7 + 7 + 7,
                          params=560, in_elems=80, out_elems=7)
    assert (table.name, table.batch_dim, table.input_elems, table.dtype_bytes) == \
        ("toy", "batch", 48, 4)
    assert table.params == 700


def test_gradient_and_optimizer_ops_are_not_counted():
    trained = describe_mtf_graph(_conv_dense_graph(train=True), "toy")
    with tf.Graph().as_default():
        assert describe_mtf_graph(_conv_dense_graph(train=False), "toy") == trained


def test_extraction_does_not_change_the_graph():
    graph = _conv_dense_graph()
    before = ([op.name for op in graph.operations], list(graph.trainable_variables),
              list(graph.all_variables), graph.unique_name("probe", mark_as_used=False))
    describe_mtf_graph(graph, "toy")
    after = ([op.name for op in graph.operations], list(graph.trainable_variables),
             list(graph.all_variables), graph.unique_name("probe", mark_as_used=False))
    assert before == after


def test_dense_contracted_by_the_next_dense_is_an_allreduce_and_weights_may_be_derived():
    # the all-reduce is of the contracting layer's output, on its row (split on hidden)
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    batch, d_in = mtf.Dimension("batch", 4), mtf.Dimension("d_in", 6)
    x = mtf.import_tf_tensor(mesh, tf.zeros([4, 6]), mtf.Shape([batch, d_in]))
    w1 = _variable(mesh, "w1", [("d_in", 6), ("hidden", 3)]) * 0.5   # weight-only arithmetic
    h = mtf.einsum([x, w1], output_shape=[batch, mtf.Dimension("hidden", 3)])
    w2 = _variable(mesh, "w2", [("hidden", 3), ("out", 2)])
    mtf.einsum([h, w2], output_shape=[batch, mtf.Dimension("out", 2)])
    first, second = describe_mtf_graph(graph, "mlp").layers
    assert (first.kind, first.params, first.flops) == ("dense", 18, 2.0 * 6 * 3)
    assert (first.split_dim, first.split_size, first.comm) == ("hidden", 3, None)
    assert (second.split_dim, second.comm, second.out_elems) == ("hidden", "allreduce", 2)


def test_conv_transpose_counts_input_positions():
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    dims = [mtf.Dimension(n, s) for n, s in (("batch", 2), ("h", 3), ("w", 3), ("c", 4))]
    x = mtf.import_tf_tensor(mesh, tf.zeros([2, 3, 3, 4]), mtf.Shape(dims))
    y = mtf.layers.conv2d_transpose(x, mtf.Dimension("f", 2), filter_size=(2, 2),
                                    strides=(2, 2), name="up")
    mtf.rename_dimension(y, "f", "f_all")
    layer, gather = describe_mtf_graph(graph, "up").layers
    assert layer.kind == "conv2d_transpose"
    assert layer.flops == 2.0 * (2 * 2 * 2 * 4) * 9
    assert (layer.out_elems, layer.split_dim) == (6 * 6 * 2, "f")
    assert (gather.out_elems, gather.split_dim, gather.comm) == (6 * 6 * 2, "f", "allconcat")


def test_a_graph_without_the_batch_dimension_or_layers_is_an_error():
    graph = _conv_dense_graph()
    with pytest.raises(ValueError, match="no dimension named 'examples'"):
        describe_mtf_graph(graph, "toy", batch_dim="examples")
    empty = mtf.Graph()
    with pytest.raises(ValueError, match="no forward operations"):
        describe_mtf_graph(empty, "empty")
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    batch = mtf.Dimension("batch", 2)
    mtf.relu(mtf.import_tf_tensor(mesh, tf.zeros([2]), mtf.Shape([batch])))
    with pytest.raises(ValueError, match="no convolution or contracting einsum"):
        describe_mtf_graph(graph, "flat")


def _built_model_graph(name, batch=2):
    spec = models.get(name)
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    x = tf.constant(np.zeros((batch,) + spec.input_shape, np.float32))
    logits, _ = spec.build(x, mesh=mesh, is_training=True)
    loss = mtf.reduce_mean(mtf.square(logits))
    mtf.gradients([loss], [v.outputs[0] for v in graph.trainable_variables])
    return spec, graph


# vgg-cifar-small-pairs: the second convolution of a pair (a split contraction) listed
# its own filters as a split; the model never lays them out (one model axis)
@pytest.mark.parametrize("name", ["resattnet3d-tiny", "vgg-cifar-small",
                                  "vgg-cifar-small-pairs"])
def test_extracted_table_agrees_with_the_hand_written_describe(name):
    spec, graph = _built_model_graph(name)
    extracted = describe_mtf_graph(graph, name)
    described = spec.describe()
    assert extracted.split_dims == described.split_dims
    assert extracted.params == described.params == sum(v.size for v in graph.trainable_variables)
    # element-wise work is counted per op here and per rule of thumb there (e.g. batch norm
    # ~8 ops/element vs 9, the training loss): within 1% on these models
    assert extracted.flops == pytest.approx(described.flops, rel=0.01)
    assert extracted.input_elems == described.input_elems
    # every split dimension has a forward collective (on a gather or contracting row)
    assert {l.split_dim for l in extracted.layers if l.comm} == set(extracted.split_dims)
    assert all(l.split_dim for l in extracted.layers if l.comm)


def test_extracted_table_is_batch_size_independent_and_round_trips_as_json():
    _, small = _built_model_graph("vgg-cifar-small", batch=2)
    a = describe_mtf_graph(small, "v")
    with tf.Graph().as_default():
        tf.set_random_seed(1)
        _, big = _built_model_graph("vgg-cifar-small", batch=5)
        b = describe_mtf_graph(big, "v")
    assert a == b
    assert ModelDescription.from_dict(a.to_dict()) == a


def test_description_module_imports_no_tensorflow():
    code = ("import sys, meshpar.planning.description; "
            "sys.exit(any(m in sys.modules for m in ('tensorflow', 'mesh_tensorflow')))")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
