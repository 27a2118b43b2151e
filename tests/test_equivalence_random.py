"""Random ops on uneven meshes draw one device's values.

``mtf.random_uniform`` (and so ``mtf.dropout``) on a ``HeterogeneousMeshImpl``
used to seed each slice from the slice's offset: every mesh, layout or split drew
another dropout mask, so a model with dropout trained differently on every plan.
Now each element's value is a hash of its position in the whole tensor and of the
op's seed: any cut of the tensor draws the same values.
"""
import numpy as np
import pytest

from mtf_helpers import HeterogeneousMeshImpl, mtf, new_graph, session, tf

from meshpar.core import optim

MESHES = [
    ("all:1", "", None),
    ("model:3", "f:model", {"model": [3, 2, 1]}),
    ("model:3", "f:model", {"model": [20, 1, 1]}),  # a device with one unit
    ("batch:3", "batch:batch", {"batch": [1, 1, 5]}),
    ("batch:2;model:3", "batch:batch;f:model", {"batch": [1, 4], "model": [1, 1, 6]}),
    ("model:2;batch:2", "batch:batch;f:model", {"batch": [3, 1], "model": [1, 3]}),
    ("rows:2;model:2", "f:model", {"model": [2, 5]}),  # replicated over rows
]


def _draw(mesh_shape, layout, weights, seed=11, runs=1, **kwargs):
    """The values of a [7, 3, 13] ``mtf.random_uniform`` in ``runs`` session runs
    (the first run's alone when ``runs`` is 1)."""
    graph, mesh = new_graph(seed)
    shape = mtf.Shape([mtf.Dimension("batch", 7), mtf.Dimension("h", 3), mtf.Dimension("f", 13)])
    out = mtf.random_uniform(mesh, shape, **kwargs)
    n = int(np.prod([int(a.split(":")[1]) for a in mesh_shape.split(";")]))
    impl = HeterogeneousMeshImpl(mesh_shape, layout, [""] * n, split_weights=weights)
    lowering = mtf.Lowering(graph, {mesh: impl})
    values = lowering.export_to_tf_tensor(out)
    with session() as sess:
        draws = [sess.run(values) for _ in range(runs)]
    return draws[0] if runs == 1 else np.stack(draws)


@pytest.mark.parametrize("mesh_shape, layout, weights", MESHES[1:])
@pytest.mark.parametrize("kwargs", [{}, dict(minval=-2.0, maxval=3.0, dtype=tf.float64),
                                    dict(minval=-5, maxval=7, dtype=tf.int32)])
def test_uniform_draws_do_not_depend_on_the_mesh(mesh_shape, layout, weights, kwargs):
    """Run after run: each run draws new values, the same on every mesh."""
    one = _draw(*MESHES[0], runs=3, **kwargs)
    assert not np.array_equal(one[0], one[1]) and not np.array_equal(one[1], one[2])
    np.testing.assert_array_equal(_draw(mesh_shape, layout, weights, runs=3, **kwargs), one)


def test_uniform_draws_are_uniform_follow_the_seed_and_stay_in_range():
    values = _draw("all:1", "", None, seed=3).ravel()
    runs = _draw("batch:2;model:3", "batch:batch;f:model", {"batch": [1, 4], "model": [1, 1, 6]},
                 seed=3, runs=30).reshape(30, -1)
    assert abs(np.corrcoef(runs[:-1].ravel(), runs[1:].ravel())[0, 1]) < 0.03  # run to run
    more = np.concatenate([_draw("all:1", "", None, seed=s).ravel() for s in range(4, 40)])
    assert 0.0 <= more.min() and more.max() < 1.0
    assert abs(more.mean() - 0.5) < 0.01 and abs(more.var() - 1 / 12) < 0.005
    counts = np.histogram(more, bins=10, range=(0, 1))[0]
    assert counts.min() > 0.9 * more.size / 10
    assert abs(np.corrcoef(more[:-1], more[1:])[0, 1]) < 0.03
    np.testing.assert_array_equal(values, _draw("all:1", "", None, seed=3).ravel())
    assert not np.array_equal(values, _draw("all:1", "", None, seed=4).ravel())
    ints = _draw("model:3", "f:model", {"model": [3, 2, 1]}, minval=-5, maxval=7,
                 dtype=tf.int32)
    assert ints.dtype == np.int32 and set(np.unique(ints)) == set(range(-5, 7))


def _dropout_net_run(mesh_shape, layout, weights, steps=3, seed=5):
    """A conv net with dropout trained by the race-free Adam step: per-step losses
    (each step another mask)."""
    rng = np.random.RandomState(0)
    x_np = rng.randn(5, 6, 6, 3).astype(np.float32)
    y_np = rng.randint(0, 3, 5).astype(np.int32)
    graph, mesh = new_graph(seed)
    dims = [mtf.Dimension(n, s) for n, s in (("batch", 5), ("h", 6), ("w", 6), ("c", 3))]
    x = mtf.import_tf_tensor(mesh, tf.constant(x_np), mtf.Shape(dims))
    labels = mtf.import_tf_tensor(mesh, tf.constant(y_np), mtf.Shape(dims[:1]))
    h = mtf.relu(mtf.layers.conv2d(x, mtf.Dimension("filters", 7), name="conv",
                                   filter_initializer=tf.glorot_uniform_initializer(seed=1)))
    h = mtf.dropout(h, is_training=True, keep_prob=0.6)
    h = mtf.reduce_mean(h, reduced_dim=dims[1])
    h = mtf.reduce_mean(h, reduced_dim=dims[2])
    classes = mtf.Dimension("classes", 3)
    logits = mtf.layers.dense(h, classes, reduced_dims=h.shape.dims[-1:], name="dense",
                              kernel_initializer=tf.glorot_uniform_initializer(seed=2))
    loss = mtf.reduce_mean(mtf.layers.softmax_cross_entropy_with_logits(
        logits, mtf.one_hot(labels, classes), classes))
    updates = optim.race_free_update_ops(graph, loss, optim.Adam(0.05))
    n = int(np.prod([int(a.split(":")[1]) for a in mesh_shape.split(";")]))
    impl = HeterogeneousMeshImpl(mesh_shape, layout, [""] * n, split_weights=weights)
    lowering = mtf.Lowering(graph, {mesh: impl})
    tf_loss = lowering.export_to_tf_tensor(loss)
    step = tf.group([lowering.lowered_operation(op) for op in updates])
    with session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(lowering.copy_masters_to_slices())
        return np.array([sess.run([tf_loss, step])[0] for _ in range(steps)])


def test_a_model_with_dropout_trains_on_uneven_meshes_like_one_device():
    one = _dropout_net_run("all:1", "", None)
    for mesh_shape, layout, weights in [
            ("batch:2;model:3", "batch:batch;filters:model", {"batch": [3, 1],
                                                              "model": [3, 2, 1]}),
            ("model:2;batch:2", "batch:batch;filters:model", {"batch": [1, 4],
                                                              "model": [1, 5]})]:
        np.testing.assert_allclose(_dropout_net_run(mesh_shape, layout, weights), one,
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.float32])
def test_low_precision_draws_stay_below_one_on_every_mesh(dtype):
    """Drawn with as many bits as the dtype's significand holds: none rounds up to
    1.0 (with 24 bits, float16 and bfloat16 drew 1.0 about once in 4096 and 256)."""
    graph, mesh = new_graph(3)
    shape = mtf.Shape([mtf.Dimension("batch", 64), mtf.Dimension("f", 1000)])
    out = mtf.random_uniform(mesh, shape, dtype=dtype)
    impl = HeterogeneousMeshImpl("model:3", "f:model", [""] * 3,
                                 split_weights={"model": [3, 2, 1]})
    values = mtf.Lowering(graph, {mesh: impl}).export_to_tf_tensor(out)
    with session() as sess:
        drawn = sess.run(tf.cast(values, tf.float32))
    assert drawn.min() >= 0.0 and drawn.max() < 1.0
    assert abs(drawn.mean() - 0.5) < 0.01


def _step_keyed_masks(mesh_shape, layout, weights, steps, start=0):
    """Dropout masks of ``steps`` steps from global step ``start`` in a new session,
    the mesh keyed by the global step as the estimator keys it."""
    graph, mesh = new_graph(11)
    global_step = tf.train.get_or_create_global_step()
    dims = mtf.Shape([mtf.Dimension("batch", 6), mtf.Dimension("f", 13)])
    y = mtf.dropout(mtf.import_tf_tensor(mesh, tf.ones([6, 13]), dims), True, keep_prob=0.5)
    n = int(np.prod([int(a.split(":")[1]) for a in mesh_shape.split(";")]))
    impl = HeterogeneousMeshImpl(mesh_shape, layout, [""] * n, split_weights=weights)
    impl.random_step = global_step
    out = mtf.Lowering(graph, {mesh: impl}).export_to_tf_tensor(y)
    with tf.control_dependencies([out]):
        step = tf.assign_add(global_step, 1)
    with session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(global_step.assign(start))
        return np.stack([sess.run([out, step])[0] for _ in range(steps)])


def test_masks_keyed_by_the_step_resume_where_an_uninterrupted_run_goes_on():
    """With the step as key (the estimator's global step), a run resumed at step 2 in
    a new session draws the masks of steps 2 and 3 of an uninterrupted run, on any
    mesh; without it the generators start again with each session."""
    uninterrupted = _step_keyed_masks("all:1", "", None, 4)
    assert len({m.tobytes() for m in uninterrupted}) == 4
    np.testing.assert_array_equal(_step_keyed_masks("all:1", "", None, 2, start=2),
                                  uninterrupted[2:])
    np.testing.assert_array_equal(
        _step_keyed_masks("batch:2;model:3", "batch:batch;f:model",
                          {"batch": [1, 2], "model": [3, 1, 1]}, 2, start=2),
        uninterrupted[2:])


def test_the_estimator_keys_random_ops_by_its_global_step():
    from meshpar.models import VggCifarConfig
    from meshpar.training.estimator import MeshSpec, as_spec, lower_model

    spec = as_spec(VggCifarConfig.small(image_shape=(4, 4), filters=(3,), dense_units=(),
                                        name="vgg-4"))
    new_graph()
    global_step = tf.train.get_or_create_global_step()
    lowering, logits, _, _ = lower_model(spec, tf.zeros([2, 4, 4, 3]), tf.zeros([2], tf.int32),
                                         MeshSpec("batch:2"), True)
    assert lowering.mesh_impl(logits).random_step is global_step
