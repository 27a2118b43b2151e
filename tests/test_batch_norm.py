"""Batch normalisation in training: the hand-written gradient equals the op-by-op one,
an uneven batch split equals one device, and the backward pass synchronises once."""
import numpy as np
import pytest

import meshpar  # noqa: F401  (import shim before mesh_tensorflow)
import mesh_tensorflow as mtf
import tensorflow.compat.v1 as tf

from meshpar.core.mesh_impl import HeterogeneousMeshImpl
from meshpar.models import _layers as L
from mtf_helpers import record_allreduces

SHAPE = (5, 3, 4, 3, 6)  # batch, d, h, w, channels
EPS = 1e-5


@pytest.fixture(autouse=True)
def tf_graph():
    with tf.Graph().as_default() as graph:
        yield graph


def _layer_inputs(channels_first: bool = False):
    """Fixed activations ``x``, loss weights ``w`` (channels last) and the layer's
    variables on a new mtf graph; ``channels_first`` puts ``x``'s channel dimension
    second. Returns (graph, mesh, dims, x, w, scale, offset, shift)."""
    rng = np.random.RandomState(0)
    xv = (rng.randn(*SHAPE) * 2 + 1.5).astype(np.float32)
    wv = rng.randn(*SHAPE).astype(np.float32)
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "m")
    dims = [mtf.Dimension(n, s) for n, s in zip(["batch", "d", "h", "w", "c"], SHAPE)]
    x = mtf.import_tf_tensor(mesh, tf.constant(xv), mtf.Shape(dims))
    w = mtf.import_tf_tensor(mesh, tf.constant(wv), mtf.Shape(dims))
    channel = dims[-1]
    if channels_first:
        x = mtf.transpose(x, [dims[0], channel] + dims[1:4])
    scale = mtf.get_variable(mesh, "scale", [channel],
                             initializer=tf.random_uniform_initializer(0.5, 1.5, seed=1))
    offset = mtf.get_variable(mesh, "offset", [channel],
                              initializer=tf.random_uniform_initializer(-1, 1, seed=2))
    shift = mtf.get_variable(mesh, "shift", [channel], trainable=False,
                             initializer=tf.constant_initializer(0.7))
    return graph, mesh, dims, x, w, scale, offset, shift


def _build(closed_form: bool):
    """A BN layer on fixed inputs with a loss that reads y, the mean and the variance
    (so every path of the gradient is exercised); returns (graph, mesh, tensors)."""
    graph, mesh, dims, x, w, scale, offset, shift = _layer_inputs()
    channel = dims[-1]
    if closed_form:
        y, mean, var = L._normalise_training(x, scale, offset, shift, channel, EPS)
    else:  # the textbook formula, differentiated op by op by mtf (as meshpar had it)
        mean, var = L.batch_statistics(x, channel, shift=shift)
        normalised = (x - mean) * mtf.rsqrt(var + EPS)
        y = normalised * scale + offset
    loss = (mtf.reduce_sum(y * w, name="loss_sum") + mtf.reduce_sum(mean * mean) * 0.3
            + mtf.reduce_sum(var) * 0.2)
    grads = mtf.gradients([loss], [x, scale, offset])
    return graph, mesh, [y, mean, var, loss] + grads


def _run(closed_form, impl, build=None):
    """Lower ``(build or _build)(closed_form)`` on ``impl``; the tensors' values."""
    config = tf.ConfigProto(device_count={"CPU": 2}, intra_op_parallelism_threads=1,
                            inter_op_parallelism_threads=1)
    with tf.Graph().as_default():
        tf.set_random_seed(1)
        graph, mesh, tensors = (build or _build)(closed_form)
        lowering = mtf.Lowering(graph, {mesh: impl})
        outs = [lowering.export_to_tf_tensor(t) for t in tensors]
        with tf.Session(config=config) as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(lowering.copy_masters_to_slices())
            return sess.run(outs)


NAMES = ["y", "mean", "variance", "loss", "dx", "dscale", "doffset"]


def test_closed_form_gradient_equals_op_by_op_gradient():
    reference = _run(False, HeterogeneousMeshImpl("all:1", "", [""]))
    closed = _run(True, HeterogeneousMeshImpl("all:1", "", [""]))
    for name, a, b in zip(NAMES, reference, closed):
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-5, err_msg=name)


def test_uneven_batch_split_equals_one_device():
    one = _run(True, HeterogeneousMeshImpl("all:1", "", [""]))
    split = _run(True, HeterogeneousMeshImpl("batch:2", "batch:batch", ["/cpu:0", "/cpu:1"],
                                             split_weights={"batch": [3, 2]}))
    for name, a, b in zip(NAMES, one, split):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5, err_msg=name)


def _count_allreduces(monkeypatch, closed_form, build=None):
    calls = record_allreduces(monkeypatch)
    with tf.Graph().as_default():
        tf.set_random_seed(1)
        graph, mesh, _ = (build or _build)(closed_form)
        impl = HeterogeneousMeshImpl("batch:2", "batch:batch", ["/cpu:0", "/cpu:1"],
                                     split_weights={"batch": [3, 2]})
        mtf.Lowering(graph, {mesh: impl})
    # the loss's own reductions are not the layer's
    return [c for c in calls if not c.startswith("loss_sum")]


def test_one_collective_forward_and_one_backward(monkeypatch):
    """Forward: the stacked statistics. Backward: the stacked sums of dy and dy * xhat.
    Differentiated op by op the same layer all-reduces two per-channel tensors here
    (four in resattnet3d's blocks, where the mean's and rsqrt's gradients are separate)."""
    closed = _count_allreduces(monkeypatch, True)
    assert closed == ["reduce", "custom_gradient/gradients/reduce"]
    op_by_op = _count_allreduces(monkeypatch, False)
    assert len([c for c in op_by_op if "gradients" in c]) >= 2, op_by_op


def test_per_channel_broadcasts_lower_without_reshuffling_ops():
    """The layer's element-wise work is one slicewise TF function per device: TF
    broadcasts the per-channel slices itself. mtf's broadcasting of ``x * a + b`` and
    of the op-by-op backward lowers to ExpandDims and Transpose ops on every device
    (tens per layer and step)."""
    def reshuffles(closed_form):
        with tf.Graph().as_default() as graph:
            tf.set_random_seed(1)
            mtf_graph, mesh, _ = _build(closed_form)
            impl = HeterogeneousMeshImpl("batch:2", "batch:batch", ["/cpu:0", "/cpu:1"],
                                         split_weights={"batch": [3, 2]})
            mtf.Lowering(mtf_graph, {mesh: impl})
            return [op.type for op in graph.get_operations()
                    if op.type in ("ExpandDims", "Transpose")]

    assert reshuffles(True) == []
    assert len(reshuffles(False)) > 10


def test_channel_dimension_anywhere():
    """The per-channel vectors broadcast against the slices wherever the channel
    dimension sits: channels second gives the channels-last values, transposed."""
    def run(channels_first):
        with tf.Graph().as_default():
            tf.set_random_seed(1)
            graph, mesh, dims, x, w, scale, offset, shift = _layer_inputs(channels_first)
            y, mean, var = L._normalise_training(x, scale, offset, shift, dims[-1], EPS)
            y = mtf.transpose(y, dims)  # channels last again for the comparison
            dscale, doffset = mtf.gradients([mtf.reduce_sum(y * w)], [scale, offset])
            impl = HeterogeneousMeshImpl("batch:2", "batch:batch", ["/cpu:0", "/cpu:1"],
                                         split_weights={"batch": [3, 2]})
            lowering = mtf.Lowering(graph, {mesh: impl})
            outs = [lowering.export_to_tf_tensor(t) for t in (y, mean, var, dscale, doffset)]
            with tf.Session(config=tf.ConfigProto(device_count={"CPU": 2})) as sess:
                sess.run(tf.global_variables_initializer())
                sess.run(lowering.copy_masters_to_slices())
                return sess.run(outs)

    last, first = run(False), run(True)
    for name, a, b in zip(["y", "mean", "variance", "dscale", "doffset"], last, first):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5, err_msg=name)


def test_statistics_without_a_shift_on_an_uneven_split():
    """``batch_statistics`` without a shift (plain sums) on a 3/1 batch split == numpy."""
    xv = (np.random.RandomState(0).randn(4, 3, 3, 3, 5) * 2 + 1.5).astype(np.float32)
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "m")
    dims = [mtf.Dimension(n, s) for n, s in zip(["batch", "d", "h", "w", "c"], xv.shape)]
    x = mtf.import_tf_tensor(mesh, tf.constant(xv), mtf.Shape(dims))
    mean, var = L.batch_statistics(x, dims[-1])
    impl = HeterogeneousMeshImpl("batch:2", "batch:batch", ["/cpu:0", "/cpu:1"],
                                 split_weights={"batch": [3, 1]})
    lowering = mtf.Lowering(graph, {mesh: impl})
    outs = [lowering.export_to_tf_tensor(t) for t in (mean, var)]
    with tf.Session(config=tf.ConfigProto(device_count={"CPU": 2})) as sess:
        got_mean, got_var = sess.run(outs)
    np.testing.assert_allclose(got_mean, xv.mean(axis=(0, 1, 2, 3)), atol=1e-5)
    np.testing.assert_allclose(got_var, xv.var(axis=(0, 1, 2, 3)), atol=1e-5)


def _build_pair(together: bool):
    """Two batch norms (their own variables) of two activations with the same
    dimensions, as a residual block's branches; a loss reading both outputs. Returns
    (graph, mesh, tensors): outputs, loss, gradients, the moving averages' new values."""
    graph, mesh, dims, x, w, _, _, _ = _layer_inputs()
    channel = dims[-1]
    x2 = mtf.relu(x * w) - 0.4  # another activation of the same shape
    names = ["bn_a", "bn_b"]
    made = [L.batch_norm_variables(x, channel, name) for name in names]
    if together:
        ys, updates = L.batch_norms_together([x, x2], channel, True, 0.9, EPS, names,
                                             variables=made)
    else:
        ys, updates = [], []
        for t, name, v in zip([x, x2], names, made):
            y, ops = L.batch_norms_together([t], channel, True, 0.9, EPS, [name],
                                            variables=[v])
            ys += y
            updates += ops
    loss = (mtf.reduce_sum(ys[0] * w, name="loss_sum")
            + mtf.reduce_sum(ys[1] * ys[1], name="loss_sum_b"))
    grads = mtf.gradients([loss], [x] + [t for v in made for t in v[:2]])
    moving = [u.inputs[-1] for u in updates]  # the moving averages' new values
    return graph, mesh, ys + [loss] + grads + moving


@pytest.mark.parametrize("mesh", ["all:1", "batch:2"])
def test_batch_norms_together_equal_one_per_tensor(mesh):
    """The same outputs, gradients (input, scales, offsets) and moving averages as a
    batch norm per tensor, on one device and on an uneven batch split."""
    def impl():
        if mesh == "all:1":
            return HeterogeneousMeshImpl("all:1", "", [""])
        return HeterogeneousMeshImpl("batch:2", "batch:batch", ["/cpu:0", "/cpu:1"],
                                     split_weights={"batch": [3, 2]})
    apart, together = _run(False, impl(), _build_pair), _run(True, impl(), _build_pair)
    assert len(together) == len(apart) == 2 + 1 + 5 + 4
    for i, (a, b) in enumerate(zip(apart, together)):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5, err_msg=f"output {i}")


def test_batch_norms_together_synchronise_once_each_way(monkeypatch):
    """Two batch norms apart all-reduce twice forward and twice backward on a batch
    split; together once each way."""
    apart = _count_allreduces(monkeypatch, False, _build_pair)
    together = _count_allreduces(monkeypatch, True, _build_pair)
    assert len(apart) == 4 and len([c for c in apart if "gradients" in c]) == 2, apart
    assert len(together) == 2 and len([c for c in together if "gradients" in c]) == 1, \
        together


def test_batch_norms_together_refuse_tensors_of_other_shapes():
    graph, mesh, dims, x, w, _, _, _ = _layer_inputs()
    other = mtf.reduce_sum(x, reduced_dim=dims[1])
    with pytest.raises(ValueError, match="one shape"):
        L.batch_norms_together([x, other], dims[-1], True, names=["a", "b"])
    with pytest.raises(ValueError, match="2 tensors for 1 names"):
        L.batch_norms_together([x, w], dims[-1], True, names=["a"])
