"""Training on uneven meshes gives the one-device result.

Each model is trained a few SGD steps on one device and on uneven hybrid
meshes (odd sizes, skewed weights); losses, gradients and weights must agree
to 1e-5 (float32, deterministic ops, one thread). The update is applied
between session runs here, so the comparison tests the mesh implementation
alone; the in-graph race-free step is tested in test_optim.py.
"""
import numpy as np
import pytest

from mtf_helpers import HeterogeneousMeshImpl, max_abs_diff, mtf, new_graph, session, tf

STEPS = 3
LR = 0.1
TOL = 1e-5


def _init(seed):
    return tf.glorot_uniform_initializer(seed=seed)


def conv2d_net(mesh, batch=6):
    """conv (13 filters, split) -> relu -> batch norm -> max pool -> re-layout ->
    conv over split input channels (partial sums) -> mean -> dense -> softmax CE."""
    rng = np.random.RandomState(0)
    b, h, w, c = (mtf.Dimension(n, s) for n, s in (("batch", batch), ("h", 8), ("w", 8), ("c", 3)))
    x = mtf.import_tf_tensor(mesh, tf.constant(rng.randn(batch, 8, 8, 3).astype(np.float32)),
                             mtf.Shape([b, h, w, c]))
    y = mtf.import_tf_tensor(mesh, tf.constant(rng.randint(0, 5, batch).astype(np.int32)),
                             mtf.Shape([b]))
    f1 = mtf.Dimension("f1", 13)
    h1 = mtf.relu(mtf.layers.conv2d(x, f1, (3, 3), name="c1", filter_initializer=_init(1)))
    h1, _ = mtf.layers.batch_norm(h1, is_training=True, momentum=0.9, epsilon=1e-5, name="bn")
    h1 = mtf.layers.max_pool2d(h1, (2, 2))
    h1 = mtf.rename_dimension(h1, "f1", "f1in")
    h2 = mtf.layers.conv2d(h1, mtf.Dimension("f2", 7), (3, 3), name="c2",
                           filter_initializer=_init(2))
    pooled = mtf.reduce_mean(h2, reduced_dim=h2.shape.dims[1])
    pooled = mtf.reduce_mean(pooled, reduced_dim=pooled.shape.dims[1])
    cls = mtf.Dimension("cls", 5)
    logits = mtf.layers.dense(pooled, cls, reduced_dims=pooled.shape.dims[-1:], name="d",
                              kernel_initializer=_init(3))
    xent = mtf.layers.softmax_cross_entropy_with_logits(logits, mtf.one_hot(y, cls), cls)
    return mtf.reduce_mean(xent)


def conv3d_net(mesh, batch=5):
    """3-D convs with split output filters, strided, avg pool, dense head."""
    rng = np.random.RandomState(1)
    dims = [mtf.Dimension(n, s) for n, s in
            (("batch", batch), ("d", 6), ("h", 6), ("w", 6), ("c", 2))]
    x = mtf.import_tf_tensor(mesh, tf.constant(rng.randn(batch, 6, 6, 6, 2).astype(np.float32)),
                             mtf.Shape(dims))
    y = mtf.import_tf_tensor(mesh, tf.constant(rng.randint(0, 2, batch).astype(np.int32)),
                             mtf.Shape([dims[0]]))
    h1 = mtf.relu(mtf.layers.conv3d(x, mtf.Dimension("g1", 11), name="k1",
                                    filter_initializer=_init(4)))
    h1 = mtf.rename_dimension(h1, "g1", "g1in")
    h2 = mtf.relu(mtf.layers.conv3d(h1, mtf.Dimension("g2", 9), strides=(2, 2, 2), name="k2",
                                    filter_initializer=_init(5)))
    h2 = mtf.layers.avg_pool3d(h2, (3, 3, 3))
    flat = mtf.reshape(h2, mtf.Shape([dims[0], mtf.Dimension("g2", 9)]))
    cls = mtf.Dimension("cls", 2)
    logits = mtf.layers.dense(flat, cls, reduced_dims=flat.shape.dims[-1:], name="head",
                              kernel_initializer=_init(6))
    xent = mtf.layers.softmax_cross_entropy_with_logits(logits, mtf.one_hot(y, cls), cls)
    return mtf.reduce_mean(xent)


def train(build, mesh_shape, layout, n_devices, steps=STEPS, **weights):
    """SGD ``steps`` times; returns per-step losses, first gradients, final weights."""
    graph, mesh = new_graph()
    loss = build(mesh)
    variables = graph.trainable_variables
    grads = mtf.gradients([loss], [v.outputs[0] for v in variables])
    impl = HeterogeneousMeshImpl(mesh_shape, layout, [""] * n_devices, **weights)
    lowering = mtf.Lowering(graph, {mesh: impl})
    tf_loss = lowering.export_to_tf_tensor(loss)
    tf_grads = [lowering.export_to_tf_tensor(g) for g in grads]
    masters = [v.get_master() for v in variables]
    feeds = [tf.placeholder(m.dtype.base_dtype, m.shape) for m in masters]
    apply = tf.group([m.assign_sub(LR * f) for m, f in zip(masters, feeds)])
    losses, first_grads = [], None
    with session() as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(steps):
            sess.run(lowering.copy_masters_to_slices())
            value, grad_values = sess.run([tf_loss, tf_grads])
            losses.append(value)
            first_grads = first_grads or grad_values
            sess.run(apply, dict(zip(feeds, grad_values)))
        final = sess.run(masters)
    names = [v.name for v in variables]
    return losses, dict(zip(names, first_grads)), dict(zip(names, final))


def assert_same_training(reference, other):
    ref_losses, ref_grads, ref_weights = reference
    losses, grads, weights = other
    assert max_abs_diff(ref_losses, losses) <= TOL
    assert ref_losses[-1] < ref_losses[0]  # it does train
    for name in ref_grads:
        assert max_abs_diff(ref_grads[name], grads[name]) <= TOL, name
        assert max_abs_diff(ref_weights[name], weights[name]) <= TOL, name


@pytest.fixture(scope="module")
def conv2d_reference():
    return train(conv2d_net, "all:1", "", 1)


@pytest.fixture(scope="module")
def conv3d_reference():
    return train(conv3d_net, "all:1", "", 1)


def test_conv2d_hybrid_2x3_skewed_mesh_matches_one_device(conv2d_reference):
    run = train(conv2d_net, "batch:2;model:3", "batch:batch;f1:model;f2:model", 6,
                split_weights={"batch": [2, 1], "model": [3, 2, 1]})
    assert_same_training(conv2d_reference, run)


def test_conv2d_split_input_channels_with_per_dimension_weights(conv2d_reference):
    # f1in (the second conv's input channels) is split too, with its own weights:
    # the relayout is an allconcat + uneven allsplit, the conv sums partial results.
    run = train(conv2d_net, "batch:2;model:3",
                "batch:batch;f1:model;f1in:model;cls:model", 6,
                split_weights={"batch": [1, 3], "model": [5, 1, 2]},
                dim_split_weights={"f1in": [1, 1, 4], "cls": [1, 2, 1]})
    assert_same_training(conv2d_reference, run)


def test_conv2d_pure_model_parallel_over_four_uneven_devices(conv2d_reference):
    run = train(conv2d_net, "model:4", "f1:model;f2:model", 4,
                split_weights={"model": [0.8, 0.5, 0.3, 0.2]})
    assert_same_training(conv2d_reference, run)


def test_conv3d_hybrid_mesh_with_odd_sizes_matches_one_device(conv3d_reference):
    run = train(conv3d_net, "batch:2;model:2", "batch:batch;g1:model;g2:model", 4,
                split_weights={"batch": [3, 1], "model": [0.7, 0.3]})
    assert_same_training(conv3d_reference, run)


def test_conv3d_uneven_batch_only_data_parallel(conv3d_reference):
    run = train(conv3d_net, "batch:3", "batch:batch", 3, split_weights={"batch": [3, 1, 1]})
    assert_same_training(conv3d_reference, run)
