"""Each Mesh-TensorFlow op, on genuinely uneven 2-, 3- and 6-processor meshes,
against the one-processor result: the forward values and the gradients with
respect to every float input.

The loss is ``sum(output * r)`` with a fixed random ``r`` per output, so every
element of every gradient matters. A layout an op cannot lower under (upstream
refuses it even when split evenly) must fail with an error naming the op and
the dimension (``REFUSED``).
"""
import numpy as np
import pytest

from mtf_helpers import (HeterogeneousMeshImpl, mtf, new_graph, one_device_impl, run_lowered,
                         session, tf)

from meshpar.models import _layers as L

B, F, I = mtf.Dimension("batch", 7), mtf.Dimension("filters", 13), mtf.Dimension("d_in", 5)
H, W, D = mtf.Dimension("h", 4), mtf.Dimension("w", 4), mtf.Dimension("d", 4)
V = mtf.Dimension("vocab", 11)
# pooled sizes the window of 2 does not divide: the last row of h, w or d is in no window
H5, W7, D3 = mtf.Dimension("h", 5), mtf.Dimension("w", 7), mtf.Dimension("d", 3)


def _conv_filter(*dims):
    return [mtf.Dimension(f"f{d.name}", 3) for d in dims]


# Each builder takes {name: mtf tensor} of its inputs and returns its outputs.
# INPUTS gives the inputs' shapes ("int:<n>" makes integers in [0, n)).
OPS = {
    "einsum": ([[B, I], [I, F]], lambda x, w: [mtf.einsum([x, w], output_shape=[B, F])]),
    "conv2d": ([[B, H, W, I], _conv_filter(H, W) + [I, F]],
               lambda x, f: [mtf.Conv2dOperation(x, f, [1, 1, 1, 1], "SAME").outputs[0]]),
    "conv3d": ([[B, D, H, W, I], _conv_filter(D, H, W) + [I, F]],
               lambda x, f: [mtf.Conv3dOperation(x, f, [1, 1, 1, 1, 1], "SAME").outputs[0]]),
    "conv2d_transpose": ([[B, H, W, I], [mtf.Dimension("fh", 2), mtf.Dimension("fw", 2), F, I]],
                         lambda x, f: [mtf.Conv2dTransposeOperation(
                             x, f, [1, 2, 2, 1], "SAME").outputs[0]]),
    "conv3d_transpose": ([[B, D, H, W, I], [mtf.Dimension("fd", 2), mtf.Dimension("fh", 2),
                                            mtf.Dimension("fw", 2), F, I]],
                         lambda x, f: [mtf.Conv3dTransposeOperation(
                             x, f, [1, 2, 2, 2, 1], "SAME").outputs[0]]),
    # strides that divide the size (SAME) or the size less the window plus one (VALID)
    "conv2d_strided": ([[B, H5, W, I], [mtf.Dimension("fh", 2), mtf.Dimension("fw", 3), I, F]],
                       lambda x, f: [mtf.Conv2dOperation(x, f, [1, 2, 2, 1], "VALID").outputs[0],
                                     mtf.Conv2dOperation(x, f, [1, 1, 2, 1], "SAME").outputs[0]]),
    # VALID padding with a window no wider than the stride (upstream's output size)
    "conv2d_transpose_valid": ([[B, H5, W, I], [mtf.Dimension("fh", 2), mtf.Dimension("fw", 1),
                                                F, I]],
                               lambda x, f: [mtf.Conv2dTransposeOperation(
                                   x, f, [1, 2, 1, 1], "VALID").outputs[0]]),
    "pooling": ([[B, H, W, F]], lambda x: [mtf.layers.max_pool2d(x), mtf.layers.avg_pool2d(x)]),
    "pooling3d": ([[B, D, H, W, F]], lambda x: [mtf.layers.max_pool3d(x),
                                                mtf.layers.avg_pool3d(x)]),
    "pooling_odd": ([[B, H5, W7, F]], lambda x: [mtf.layers.max_pool2d(x),
                                                 mtf.layers.avg_pool2d(x)]),
    "pooling3d_odd": ([[B, D3, H5, W7, F]], lambda x: [mtf.layers.max_pool3d(x),
                                                       mtf.layers.avg_pool3d(x)]),
    # the models' own max pooling and ReLU (TF's gradient kernels on each slice)
    "max_pool": ([[B, H, W, F]], lambda x: [L.max_pool(x, (2, 2))]),
    "max_pool3d": ([[B, D, H, W, F]], lambda x: [L.max_pool(x, (2, 2, 2))]),
    "relu": ([[B, H, F]], lambda x: [L.relu(x)]),
    "reductions": ([[B, F]], lambda x: [
        mtf.reduce_sum(x, reduced_dim=F), mtf.reduce_max(x, reduced_dim=F),
        mtf.reduce_mean(x, reduced_dim=B), mtf.reduce_logsumexp(x, F)]),
    "softmax": ([[B, F]], lambda x: [mtf.softmax(x, F)]),
    "layer_norm": ([[B, F]], lambda x: [mtf.layers.layer_norm(x, F)]),
    "broadcast": ([[B], [F]], lambda x, y: [x * y, mtf.broadcast(x, [B, F])]),
    "slice": ([[B, H, F]], lambda x: [mtf.slice(x, 1, 2, "h")]),
    "concat": ([[B, H, F], [B, H, F]], lambda x, y: [mtf.concat([x, y], "h")]),
    "pad": ([[B, H, F]], lambda x: [mtf.pad(x, [1, 2], "h")]),
    "stack_unstack": ([[B, H, F]], lambda x: [mtf.stack(mtf.unstack(x, H)[::-1], "h", 1)]),
    "reshape": ([[B, H, W]], lambda x: [mtf.reshape(x, [B, mtf.Dimension("hw", 16)])]),
    "gather": ([[V, F], "int:11"], lambda w, i: [mtf.gather(w, i, V)]),
    "one_hot": (["int:13"], lambda i: [mtf.one_hot(i, F)]),
    "shift": ([[B, H, F]], lambda x: [
        mtf.shift(x, 1, H, wrap=False), mtf.shift(x, -2, H, wrap=False),
        mtf.shift(x, -1, H, wrap=True), mtf.shift(x, 5, H, wrap=True),
        mtf.shift(x, 6, H, wrap=False)]),
    "constant": ([[B, F]], lambda x: [x * mtf.constant(
        x.mesh, np.arange(B.size * F.size).reshape(B.size, F.size) / 10.0, x.shape)]),
    "top_k": ([[B, F]], lambda x: list(mtf.top_k(x, F, mtf.Dimension("k", 3)))),
    "argmax": ([[B, F]], lambda x: [mtf.argmax(x, F)]),
    "cumsum": ([[B, F]], lambda x: [mtf.cumsum(x, F)]),
}

# Dimensions each op is split along (see _cases).
SPLITS = {
    "einsum": ["filters", "batch", "d_in"], "conv2d": ["filters", "batch", "d_in"],
    "conv3d": ["filters", "batch"], "conv2d_transpose_valid": ["filters", "batch", "d_in"],
    "conv2d_strided": ["filters", "batch", "d_in"],
    "conv2d_transpose": ["filters", "batch", "d_in"],
    "conv3d_transpose": ["filters", "batch", "d_in"], "pooling": ["filters", "batch"],
    "pooling3d": ["filters", "batch"], "pooling_odd": ["filters", "batch", "w"],
    "pooling3d_odd": ["batch", "filters", "w"], "max_pool": ["filters", "batch"],
    "max_pool3d": ["filters", "batch"], "relu": ["filters", "batch", "h"], "reductions": ["filters", "batch"],
    "softmax": ["filters", "batch"], "layer_norm": ["filters", "batch"],
    "broadcast": ["filters", "batch"], "slice": ["filters", "batch"],
    "concat": ["filters", "batch"], "pad": ["filters", "batch"],
    "stack_unstack": ["filters", "batch"], "reshape": ["batch", "h"],
    "gather": ["filters", "vocab", "batch"], "one_hot": ["filters", "batch"],
    "shift": ["h", "filters", "batch"], "constant": ["filters", "batch"], "top_k": ["filters", "batch"], "argmax": ["filters", "batch"],
    "cumsum": ["filters", "batch"],
}

MESHES = {
    "2": ("p:2", {"p": [2, 1]}),
    "3": ("p:3", {"p": [3, 2, 1]}),
    "2x3": ("b:2;p:3", {"b": [2, 1], "p": [3, 2, 1]}),
}

# Layouts an op cannot lower under, and the op class named in the error:
# upstream refuses these on any split, even or not.
REFUSED = {
    ("slice", "h"): "SliceOperation", ("pad", "h"): "PadOperation",
    ("concat", "h"): "ConcatOperation", ("stack_unstack", "h"): "UnstackOperation",
}


def _input_values(specs, rng):
    """Fixed inputs for ``specs``; the 1-D integer inputs run along batch."""
    values = []
    for spec in specs:
        if isinstance(spec, str):
            values.append((mtf.Shape([B]), rng.randint(0, int(spec[4:]), size=B.size)
                           .astype(np.int32)))
        else:
            shape = mtf.Shape(spec)
            values.append((shape, rng.randn(*shape.to_integer_list).astype(np.float32)))
    return values


def _run(op_name, impl):
    specs, build = OPS[op_name]
    graph, mesh = new_graph()
    rng = np.random.RandomState(0)
    inputs = [mtf.import_tf_tensor(mesh, tf.constant(v), shape)
              for shape, v in _input_values(specs, rng)]
    outputs = build(*inputs)
    loss = None
    for out in outputs:
        if not out.dtype.is_floating:
            continue
        r = rng.randn(*out.shape.to_integer_list).astype(np.float32)
        term = mtf.reduce_sum(out * mtf.import_tf_tensor(mesh, tf.constant(r), out.shape))
        loss = term if loss is None else loss + term
    wrt = [x for x in inputs if x.dtype.is_floating]
    grads = mtf.gradients([loss], wrt) if loss is not None and wrt else []
    return run_lowered(graph, mesh, impl, outputs + grads)


_REFERENCE = {}


def _reference(op_name):
    if op_name not in _REFERENCE:
        _REFERENCE[op_name] = _run(op_name, one_device_impl())
    return _REFERENCE[op_name]


def _cases():
    """Every split dimension on 3 processors; the first also on 2, and with
    batch on the 2x3 mesh."""
    for op_name, dims in SPLITS.items():
        yield op_name, "2", f"{dims[0]}:p"
        for dim in dims:
            yield op_name, "3", f"{dim}:p"
        if dims[0] != "batch":
            yield op_name, "2x3", f"batch:b;{dims[0]}:p"


def _impl(mesh, layout):
    shape, weights = MESHES[mesh]
    n = int(np.prod([int(size) for size in shape.replace(";", ":").split(":")[1::2]]))
    return HeterogeneousMeshImpl(shape, layout, [""] * n, split_weights=weights)


@pytest.mark.parametrize("op_name, mesh, layout", list(_cases()))
def test_op_on_an_uneven_mesh_matches_one_processor(op_name, mesh, layout):
    impl = _impl(mesh, layout)
    split_dims = [pair.split(":")[0] for pair in layout.split(";")]
    assert all(len(set(impl.split_sizes(d))) > 1
               for d in (B, F, I, V, H, W, D, H5, W7, D3) if d.name in split_dims), "must split unevenly"
    got = _run(op_name, impl)
    want = _reference(op_name)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        # float32 sums in another order: within 1e-6 of the output's scale
        scale = max(1.0, float(np.max(np.abs(w), initial=0.0)))
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-6 * scale)


@pytest.mark.parametrize("op_name, pools", [
    ("pooling_odd", (tf.nn.max_pool2d, tf.nn.avg_pool2d)),
    ("pooling3d_odd", (tf.nn.max_pool3d, tf.nn.avg_pool3d))])
def test_pooling_over_sizes_the_window_does_not_divide_is_tfs(op_name, pools):
    # upstream's gradient assumed divisible sizes: a shape error, on one device too
    (x_shape, x), = _input_values(OPS[op_name][0], np.random.RandomState(0))
    got = _reference(op_name)
    rng = np.random.RandomState(0)
    _input_values(OPS[op_name][0], rng)  # the draws _run made before its weights
    window = [1] + [2] * (x_shape.ndims - 2) + [1]
    with tf.Graph().as_default():
        x = tf.constant(x)
        outs = [pool(x, window, window, "VALID") for pool in pools]
        loss = tf.add_n([tf.reduce_sum(out * rng.randn(*out.shape.as_list()).astype(np.float32))
                         for out in outs])
        with session() as sess:
            want = sess.run(outs + tf.gradients(loss, [x]))
    assert not want[-1][..., -1, :].any()  # the column in no window has no gradient
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-6 * max(1.0, float(np.abs(w).max())))


@pytest.mark.parametrize("strides, padding, dim, size, declared, made", [
    ([1, 2, 1, 1], "SAME", "h", 5, 2, 3), ([1, 1, 2, 1], "VALID", "w", 7, 2, 3),
    ([1, 1, 1, 2, 1], "SAME", "w", 7, 3, 4)])
def test_a_stride_that_does_not_divide_the_size_is_refused_naming_op_and_dimension(
        strides, padding, dim, size, declared, made):
    # upstream declares floor(size / stride) outputs where TF makes the ceiling: it
    # failed as "wrong slice shape for Tensor[conv2d:0, ...]", on one device too
    dims = [B, D3, H5, W7, I] if len(strides) == 5 else [B, H5, W7, I]
    window = [mtf.Dimension(f"f{d.name}", 3) for d in dims[1:-1]]
    op = mtf.Conv2dOperation if len(strides) == 4 else mtf.Conv3dOperation
    specs = [dims, window + [I, F]]
    OPS["strided_refused"] = (specs, lambda x, f: [op(x, f, strides, padding).outputs[0]])
    try:
        for impl in (one_device_impl(), _impl("2", "filters:p")):
            with pytest.raises(ValueError, match=(
                    f"Conv.dOperation.*stride 2 over tensor dimension '{dim}' of size {size}"
                    f" .*declares {declared} outputs where the convolution makes {made}")):
                _run("strided_refused", impl)
    finally:
        del OPS["strided_refused"]


@pytest.mark.parametrize("strides, windows, refused", [
    ([1, 2, 2, 1], (3, 2), "window of 3 over stride 2 along tensor dimension 'h' with VALID"
                           " padding: Mesh-TensorFlow declares 10 outputs where the transposed"
                           " convolution makes 11"),
    ([1, 1, 1, 1, 1], (1, 1, 2), "window of 2 over stride 1 along tensor dimension 'w' with"
                                 " VALID padding: Mesh-TensorFlow declares 7 outputs where the"
                                 " transposed convolution makes 8")])
def test_a_valid_transposed_convolution_wider_than_its_stride_is_refused(strides, windows,
                                                                          refused):
    # upstream declares size x stride outputs whatever the padding: TF's shape error
    # when run ("Conv2DBackpropInput ... Graph execution error"), on one device too
    dims = [B, D3, H5, W7, I] if len(strides) == 5 else [B, H5, W7, I]
    window = [mtf.Dimension(f"f{d.name}", n) for d, n in zip(dims[1:-1], windows)]
    op = mtf.Conv2dTransposeOperation if len(strides) == 4 else mtf.Conv3dTransposeOperation
    OPS["transpose_refused"] = ([dims, window + [F, I]],
                                lambda x, f: [op(x, f, strides, "VALID").outputs[0]])
    try:
        for impl in (one_device_impl(), _impl("2", "filters:p")):
            with pytest.raises(ValueError, match=f"Conv.dTransposeOperation.*{refused}"):
                _run("transpose_refused", impl)
    finally:
        del OPS["transpose_refused"]


@pytest.mark.parametrize("op_name, dim", sorted(REFUSED))
def test_op_that_cannot_split_a_dimension_names_the_op_and_the_dimension(op_name, dim):
    with pytest.raises(ValueError, match=f"{REFUSED[(op_name, dim)]}.*dimension '{dim}'"):
        _run(op_name, _impl("3", f"{dim}:p"))


@pytest.mark.parametrize("op_name", ["conv2d", "conv3d", "conv2d_transpose", "conv3d_transpose"])
@pytest.mark.parametrize("dim", ["h", "fh"])
def test_convolution_refuses_a_split_window_naming_op_and_dimension(op_name, dim):
    # upstream's own refusal of a forward convolution's split window said only
    # "can't slice along dimension h", whatever the op and the dimension's name
    with pytest.raises(ValueError, match=f"Conv.d(Transpose)?Operation.*dimension '{dim}'"):
        _run(op_name, _impl("2", f"{dim}:p"))
