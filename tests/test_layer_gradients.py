"""The models' max pooling and ReLU (``meshpar.models._layers``) compute what
mtf's own ops compute, values and gradients, with one TF gradient kernel per
slice instead of mtf's chains of element-wise ops."""
import numpy as np
import pytest

from mtf_helpers import HeterogeneousMeshImpl, mtf, new_graph, one_device_impl, run_lowered, tf

from meshpar.models import _layers as L

B, C = mtf.Dimension("batch", 5), mtf.Dimension("channels", 6)
SPATIAL = {2: [mtf.Dimension("h", 6), mtf.Dimension("w", 4)],
           3: [mtf.Dimension("d", 4), mtf.Dimension("h", 6), mtf.Dimension("w", 4)]}
MTF_POOL = {2: mtf.layers.max_pool2d, 3: mtf.layers.max_pool3d}


def _value_and_gradient(build, x_value, r_seed, impl):
    """``(y, d sum(y * r) / dx)`` of ``build(x)`` lowered on ``impl``."""
    graph, mesh = new_graph()
    shape = mtf.Shape([B] + SPATIAL[x_value.ndim - 2] + [C])
    x = mtf.import_tf_tensor(mesh, tf.constant(x_value), shape)
    y = build(x)
    r = np.random.RandomState(r_seed).randn(*y.shape.to_integer_list).astype(np.float32)
    loss = mtf.reduce_sum(y * mtf.import_tf_tensor(mesh, tf.constant(r), y.shape))
    return run_lowered(graph, mesh, impl, [y] + mtf.gradients([loss], [x]))


def _inputs(spatial, seed=0, zero_windows=False):
    rng = np.random.RandomState(seed)
    x = rng.randn(B.size, *[d.size for d in SPATIAL[spatial]], C.size).astype(np.float32)
    if zero_windows:  # ReLU's ties: whole windows of zeros, and zeros beside a maximum
        x[:, :2] = -np.abs(x[:, :2])
    return x


@pytest.mark.parametrize("spatial", [2, 3])
@pytest.mark.parametrize("zero_windows", [False, True])
def test_max_pool_after_relu_matches_mtf_values_and_gradients(spatial, zero_windows):
    ksize = (2,) * spatial
    x = _inputs(spatial, seed=spatial, zero_windows=zero_windows)
    ours = _value_and_gradient(lambda t: L.max_pool(L.relu(t), ksize), x, 1, one_device_impl())
    theirs = _value_and_gradient(lambda t: MTF_POOL[spatial](mtf.relu(t), ksize), x, 1,
                                 one_device_impl())
    for got, want in zip(ours, theirs):
        np.testing.assert_array_equal(got, want)
    assert np.count_nonzero(ours[1]) > 0


def test_max_pool_gradient_reaches_one_maximum_of_a_window_of_ties():
    """Documented difference from mtf: a window of equal values passes its gradient to one
    of them (TF's kernel), mtf's to every one (only met after a ReLU, whose gradient is 0
    there)."""
    x = np.ones((B.size, 6, 4, C.size), np.float32)
    ours = _value_and_gradient(lambda t: L.max_pool(t, (2, 2)), x, 1, one_device_impl())
    theirs = _value_and_gradient(lambda t: mtf.layers.max_pool2d(t, (2, 2)), x, 1,
                                 one_device_impl())
    np.testing.assert_array_equal(ours[0], theirs[0])
    np.testing.assert_allclose(ours[1].reshape(B.size, 3, 2, 2, 2, C.size).sum(axis=(2, 4)),
                               theirs[1].reshape(B.size, 3, 2, 2, 2, C.size)[:, :, 0, :, 0])
    assert np.count_nonzero(ours[1]) == ours[1].size // 4
    assert np.count_nonzero(theirs[1]) == theirs[1].size


@pytest.mark.parametrize("layout", ["batch:p", "channels:p"])
def test_pool_and_relu_on_an_uneven_mesh_match_one_device(layout):
    x = _inputs(3, seed=7)
    impl = HeterogeneousMeshImpl("p:3", layout, [""] * 3, split_weights={"p": [3, 2, 1]})
    build = lambda t: L.relu(L.max_pool(t, (2, 2, 2)))  # noqa: E731
    got = _value_and_gradient(build, x, 2, impl)
    want = _value_and_gradient(build, x, 2, one_device_impl())
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_lowered_gradients_are_one_tf_kernel_each():
    graph, mesh = new_graph()
    shape = mtf.Shape([B] + SPATIAL[3] + [C])
    x = mtf.import_tf_tensor(mesh, tf.zeros(shape.to_integer_list), shape)
    loss = mtf.reduce_sum(L.max_pool(L.relu(x), (2, 2, 2)))
    before = {op.name for op in tf.get_default_graph().get_operations()}
    run_lowered(graph, mesh, one_device_impl(), mtf.gradients([loss], [x]))
    new = [op.type for op in tf.get_default_graph().get_operations() if op.name not in before]
    assert new.count("MaxPool3DGrad") == 1 and new.count("ReluGrad") == 1
    assert "Equal" not in new and "Greater" not in new


def test_max_pool_refuses_a_window_of_the_wrong_rank():
    graph, mesh = new_graph()
    x = mtf.zeros(mesh, mtf.Shape([B] + SPATIAL[2] + [C]))
    with pytest.raises(ValueError, match="ksize must have 2 or 3 sizes"):
        L.max_pool(x, (2,))


# Per-channel element-wise work (batch norm's) on a 2-D view with tiled vectors


def _scale_and_shift(dims, channel, impl, seed=3):
    graph, mesh = new_graph()
    rng = np.random.RandomState(seed)
    shape = mtf.Shape(dims)
    xv = rng.randn(*shape.to_integer_list).astype(np.float32)
    av, bv = (rng.randn(channel.size).astype(np.float32) for _ in range(2))
    x = mtf.import_tf_tensor(mesh, tf.constant(xv), shape)
    a, b = (mtf.import_tf_tensor(mesh, tf.constant(v), mtf.Shape([channel])) for v in (av, bv))
    y, = run_lowered(graph, mesh, impl, [L.scale_and_shift(x, a, b, channel)])
    axis = dims.index(channel)
    bshape = [-1 if i == axis else 1 for i in range(len(dims))]
    return y, xv * av.reshape(bshape) + bv.reshape(bshape)


@pytest.mark.parametrize("layout", ["", "channels:p", "batch:p"])
def test_scale_and_shift_is_the_elementwise_formula_on_any_layout(layout):
    impl = (one_device_impl() if not layout else HeterogeneousMeshImpl(
        "p:3", layout, [""] * 3, split_weights={"p": [3, 2, 1]}))
    got, want = _scale_and_shift([B] + SPATIAL[3] + [C], C, impl)
    np.testing.assert_array_equal(got, want)


def test_scale_and_shift_with_channels_not_last():
    got, want = _scale_and_shift([B, C] + SPATIAL[2], C, one_device_impl())
    np.testing.assert_array_equal(got, want)


def test_per_channel_products_run_on_rows_of_a_whole_line_of_channels():
    """The lowered ``x * a`` multiplies a ``[-1, W * C]`` view by ``a`` tiled ``W`` times:
    no broadcast of a ``[C]`` vector against the 5-D activation."""
    graph, mesh = new_graph()
    shape = mtf.Shape([B] + SPATIAL[3] + [C])
    x = mtf.import_tf_tensor(mesh, tf.zeros(shape.to_integer_list), shape)
    a = mtf.import_tf_tensor(mesh, tf.ones([C.size]), mtf.Shape([C]))
    before = {op.name for op in tf.get_default_graph().get_operations()}
    run_lowered(graph, mesh, one_device_impl(), [L.scale_and_shift(x, a, a, C)])
    new = [op for op in tf.get_default_graph().get_operations() if op.name not in before]
    products = [op for op in new if op.type == "Mul"]
    assert products and all(op.inputs[0].shape.as_list()[-1] == SPATIAL[3][-1].size * C.size
                            for op in products)
