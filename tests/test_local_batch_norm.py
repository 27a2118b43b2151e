"""Batch norm with each device's share of the batch as its normalisation group
(``statistics="local"``): the values and gradients of a group-wise reference, the
global formula where the batch is not split, and no cross-device edge on the path of
the activations or their gradients."""
import numpy as np
import pytest

import meshpar  # noqa: F401  (import shim before mesh_tensorflow)
import mesh_tensorflow as mtf
import tensorflow.compat.v1 as tf

from meshpar import models
from meshpar.core.graph_description import describe_mtf_graph
from meshpar.core.mesh_impl import HeterogeneousMeshImpl
from meshpar.models import _layers as L

SHAPE = (5, 3, 4, 3, 6)  # batch, d, h, w, channels
EPS = 1e-5
SHIFT = 0.7
GROUPS = [3, 2]  # the uneven batch split's shares


@pytest.fixture(autouse=True)
def tf_graph():
    with tf.Graph().as_default() as graph:
        tf.set_random_seed(1)
        yield graph


def _values():
    rng = np.random.RandomState(0)
    x = (rng.randn(*SHAPE) * 2 + 1.5).astype(np.float32)
    w = rng.randn(*SHAPE).astype(np.float32)
    scale = rng.uniform(0.5, 1.5, SHAPE[-1]).astype(np.float32)
    offset = rng.uniform(-1, 1, SHAPE[-1]).astype(np.float32)
    return x, w, scale, offset


def _mesh_run(impl, statistics, channels_first=False):
    """y (channels last), dx, dscale, doffset, mean, variance of one layer with the loss
    ``sum(y * w)`` on ``impl``, in a new TF graph; and the lowering and mtf ``(y, dx)``."""
    with tf.Graph().as_default():
        tf.set_random_seed(1)
        return _mesh_run_here(impl, statistics, channels_first)


def _mesh_run_here(impl, statistics, channels_first):
    xv, wv, sv, ov = _values()
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "m")
    dims = [mtf.Dimension(n, s) for n, s in zip(["batch", "d", "h", "w", "c"], SHAPE)]
    channel = dims[-1]
    x = mtf.import_tf_tensor(mesh, tf.constant(xv), mtf.Shape(dims))
    w = mtf.import_tf_tensor(mesh, tf.constant(wv), mtf.Shape(dims))
    if channels_first:
        x = mtf.transpose(x, [dims[0], channel] + dims[1:4])
    scale = mtf.get_variable(mesh, "scale", [channel], initializer=tf.constant_initializer(sv))
    offset = mtf.get_variable(mesh, "offset", [channel], initializer=tf.constant_initializer(ov))
    shift = mtf.get_variable(mesh, "shift", [channel], trainable=False,
                             initializer=tf.constant_initializer(SHIFT))
    normalise = L._normalise_local if statistics == "local" else L._normalise_training
    y, mean, variance = normalise(x, scale, offset, shift, channel, EPS)
    y = mtf.transpose(y, dims)
    loss = mtf.reduce_sum(y * w)
    dx, dscale, doffset = mtf.gradients([loss], [x, scale, offset])
    dx = mtf.transpose(dx, dims)
    lowering = mtf.Lowering(graph, {mesh: impl})
    outs = [lowering.export_to_tf_tensor(t) for t in (y, dx, dscale, doffset, mean, variance)]
    config = tf.ConfigProto(device_count={"CPU": 2}, intra_op_parallelism_threads=1,
                            inter_op_parallelism_threads=1)
    with tf.Session(config=config) as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(lowering.copy_masters_to_slices())
        return sess.run(outs), lowering, (y, dx)


def _reference(groups):
    """The group-wise formula in plain TF on one device: each group of samples
    normalised with its own mean and (biased) variance, differentiated by TF."""
    with tf.Graph().as_default():
        return _reference_here(groups)


def _reference_here(groups):
    xv, wv, sv, ov = _values()
    x = tf.constant(xv)
    scale, offset = tf.constant(sv), tf.constant(ov)
    ys, means, variances = [], [], []
    for part in tf.split(x, groups, axis=0):
        mean, variance = tf.nn.moments(part, axes=[0, 1, 2, 3])
        ys.append((part - mean) * tf.math.rsqrt(variance + EPS) * scale + offset)
        n = int(part.shape[0])
        means.append(mean * n)
        variances.append(variance * n)
    y = tf.concat(ys, 0)
    loss = tf.reduce_sum(y * tf.constant(wv))
    dx, dscale, doffset = tf.gradients(loss, [x, scale, offset])
    # the moving averages' statistics: the batch's mean of the groups' statistics
    mean, variance = tf.add_n(means) / SHAPE[0], tf.add_n(variances) / SHAPE[0]
    with tf.Session() as sess:
        return sess.run([y, dx, dscale, doffset, mean, variance])


NAMES = ["y", "dx", "dscale", "doffset", "mean", "variance"]


def _split_impl(weights=GROUPS):
    return HeterogeneousMeshImpl("batch:2", "batch:batch", ["/cpu:0", "/cpu:1"],
                                 split_weights={"batch": list(weights)})


@pytest.mark.parametrize("channels_first", [False, True])
def test_uneven_split_normalises_each_share_with_its_own_statistics(channels_first):
    got, _, _ = _mesh_run(_split_impl(), "local", channels_first)
    want = _reference(GROUPS)
    for name, a, b in zip(NAMES, want, got):
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-5, err_msg=name)
    # and it is not the global layer: the shares' statistics differ from the batch's
    assert np.max(np.abs(got[0] - _reference([SHAPE[0]])[0])) > 1e-2


def test_uneven_hybrid_mesh_groups_by_batch_share_only():
    """batch:2;model:2 (3/2 samples, 4/2 channels): the groups are the batch shares;
    the channel split changes nothing."""
    hybrid = HeterogeneousMeshImpl("batch:2;model:2", "batch:batch;c:model", [""] * 4,
                                   split_weights={"batch": GROUPS, "model": [4, 2]})
    got, _, _ = _mesh_run(hybrid, "local")
    for name, a, b in zip(NAMES, _reference(GROUPS), got):
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-5, err_msg=name)


def test_without_a_batch_split_local_is_the_global_formula():
    one = HeterogeneousMeshImpl("all:1", "", [""])
    local, _, _ = _mesh_run(one, "local")
    glob, _, _ = _mesh_run(one, "global")
    for name, a, b in zip(NAMES, glob, local):
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-5, err_msg=name)
    # a model split (filters over two devices) does not split the groups either
    model_split = HeterogeneousMeshImpl("model:2", "c:model", ["/cpu:0", "/cpu:1"],
                                        split_weights={"model": [4, 2]})
    split, _, _ = _mesh_run(model_split, "local")
    for name, a, b in zip(NAMES, glob, split):
        np.testing.assert_allclose(b, a, rtol=2e-5, atol=2e-5, err_msg=name)


def _devices_reached(tensor):
    """Devices of every op the TF tensor depends on."""
    seen, todo, devices = set(), [tensor.op], set()
    while todo:
        op = todo.pop()
        if op in seen:
            continue
        seen.add(op)
        devices.add(op.device)
        todo.extend(t.op for t in op.inputs)
        todo.extend(op.control_inputs)
    return devices


def test_no_cross_device_edge_on_the_activations_path():
    """Each device's slice of ``y`` and of ``dx`` depends on ops of its own device only
    (and the untouched inputs): no device waits for another in the layer. With global
    statistics both depend on the other device (the all-reduces)."""
    for statistics, crosses in (("local", False), ("global", True)):
        with tf.Graph().as_default():
            tf.set_random_seed(1)
            _, lowering, (y, dx) = _mesh_run_here(_split_impl(), statistics, False)
            for t in (y, dx):
                slices = lowering.tensors[t].to_laid_out_tensor().tensor_list
                for own, other in (("cpu:0", "cpu:1"), ("cpu:1", "cpu:0")):
                    piece = next(s for s in slices if s.device.lower().endswith(own))
                    reached = {d.lower() for d in _devices_reached(piece) if d}
                    assert any(d.endswith(other) for d in reached) == crosses, (
                        statistics, t.name, own)


def test_model_config_and_registry():
    spec = models.get("resattnet3d-small-local-bn")
    assert spec.config.bn_statistics == "local"
    assert models.get("resattnet3d-small").config.bn_statistics == "global"
    with pytest.raises(ValueError, match="bn_statistics"):
        models.get("resattnet3d-tiny", bn_statistics="per-device")
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "m")
    x = mtf.zeros(mesh, mtf.Shape([mtf.Dimension("batch", 2), mtf.Dimension("c", 3)]))
    with pytest.raises(ValueError, match="statistics must be one of"):
        L.batch_norm(x, x.shape.dims[-1], True, statistics="per-device")
    # the planner's table: the same bytes as global statistics (local ones are
    # all-reduced for the moving averages, beside the step's path)
    glob = models.get("resattnet3d-small").describe()
    local = spec.describe()
    assert sum(l.batch_allreduce_elems for l in glob.layers) > 0
    assert [l.batch_allreduce_elems for l in local.layers] == [
        l.batch_allreduce_elems for l in glob.layers]
    assert local.flops == glob.flops and local.params == glob.params


@pytest.mark.parametrize("statistics", ["global", "local"])
def test_graph_derived_batch_collectives_agree_with_the_table(statistics):
    """The built graph's batch-axis collectives (what the cost tables read) are the
    hand-written table's: the statistics per norm row, forward with global ones, for
    the moving averages with local ones."""
    spec = models.get("resattnet3d-tiny", bn_statistics=statistics)
    graph = mtf.Graph()
    mesh = mtf.Mesh(graph, "mesh")
    x = tf.constant(np.zeros((2,) + spec.input_shape, np.float32))
    logits, _ = spec.build(x, mesh=mesh, is_training=True)
    loss = mtf.reduce_mean(mtf.square(logits))
    mtf.gradients([loss], [v.outputs[0] for v in graph.trainable_variables])
    extracted = describe_mtf_graph(graph, spec.name)
    described = spec.describe()
    assert (sum(l.batch_allreduce_elems for l in extracted.layers)
            == sum(l.batch_allreduce_elems for l in described.layers))
    assert extracted.flops == pytest.approx(described.flops, rel=0.01)
