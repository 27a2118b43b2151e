"""describe_mtf_graph's backward and batch-axis collectives (meshpar.core.graph_collectives)
against the hand-written tables (against the bytes a lowered training step sends:
tests/test_graph_forward_collectives.py)."""
from collections import Counter

import pytest

import meshpar  # noqa: F401  (import shim before mesh_tensorflow)
import mesh_tensorflow as mtf
import tensorflow.compat.v1 as tf

from test_description import _built_model_graph
from meshpar import models
from meshpar.core.graph_description import describe_mtf_graph

FIELDS = ("backward_allreduce_elems", "backward_allconcat_elems", "batch_allreduce_elems")


@pytest.fixture(autouse=True)
def tf_graph():
    with tf.Graph().as_default() as graph:
        tf.set_random_seed(1)
        yield graph


def _graph_description(name):
    _, graph = _built_model_graph(name)
    return describe_mtf_graph(graph, name)


def _per_dim(description):
    """{(split dim, field): elements}: what the cost model prices when that dim is laid
    out (and, for the batch field, a column's share), whichever row of the dim holds it."""
    totals = Counter()
    for layer in description.layers:
        for field in FIELDS:
            totals[(layer.split_dim, field)] += getattr(layer, field)
    return {k: v for k, v in totals.items() if v}


@pytest.mark.parametrize("name", ["resattnet3d-tiny", "vgg-cifar-small"])
def test_collectives_per_split_dimension_equal_the_hand_written_tables(name):
    # The graph has one row per convolution or contraction; the hand-written table also
    # has batch-norm, pool and add rows, so a collective may sit on another row of the
    # same split dimension there (bn2's statistics, the identity shortcut on `_add`).
    # The cost model prices a row's collectives when its split dim is laid out, so the
    # totals per split dimension and kind are what must agree.
    extracted = _per_dim(_graph_description(name))
    described = _per_dim(models.get(name).describe())
    assert extracted == described
    kinds = {field for _, field in described}
    assert "backward_allreduce_elems" in kinds  # the comparison is not of empty tables


def test_vgg_rows_carry_the_input_gradient_all_reduce_row_by_row():
    # one graph row per hand-written conv/dense row of the same split dimension
    extracted = {}
    for l in _graph_description("vgg-cifar-small").layers:  # the conv/dense, before its gather
        if l.split_dim:
            extracted.setdefault(l.split_dim, l.backward_allreduce_elems)
    described = {}
    for l in models.get("vgg-cifar-small").describe().layers:  # the conv/dense producing it
        if l.split_dim:
            described.setdefault(l.split_dim, l.backward_allreduce_elems)
    assert extracted == described


@pytest.mark.parametrize("source,elems", [("import", 0), ("trainable", 6), ("stopped", 0)])
def test_an_input_gradient_is_all_reduced_only_when_mtf_computes_it(source, elems):
    # x -> dense split on `hidden` (contracted by the next dense): x's gradient sums over
    # `hidden`, all-reduced when it is laid out; an imported x, or one behind
    # stop_gradient, gets no gradient
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    batch, d_in, hidden = (mtf.Dimension(n, s) for n, s in (("batch", 4), ("d_in", 6),
                                                            ("hidden", 3)))
    x = mtf.import_tf_tensor(mesh, tf.zeros([4, 6]), mtf.Shape([batch, d_in]))
    if source != "import":
        x = x + mtf.get_variable(mesh, "shift", [d_in], initializer=tf.zeros_initializer())
    if source == "stopped":
        x = mtf.stop_gradient(x)
    w1 = mtf.get_variable(mesh, "w1", [d_in, hidden], initializer=tf.zeros_initializer())
    h = mtf.einsum([x, w1], output_shape=[batch, hidden])
    w2 = mtf.get_variable(mesh, "w2", [hidden, mtf.Dimension("out", 2)],
                          initializer=tf.zeros_initializer())
    mtf.reduce_mean(mtf.square(mtf.einsum([h, w2], output_shape=[batch, w2.shape.dims[-1]])))
    first = next(l for l in describe_mtf_graph(graph, "mlp").layers if l.kind == "dense")
    assert (first.split_dim, first.backward_allreduce_elems) == ("hidden", elems)
