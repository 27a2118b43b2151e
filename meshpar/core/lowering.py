"""Uneven-aware lowerings for the mtf ops that assume one slice shape.

A few Mesh-TensorFlow ops compute ``mesh_impl.slice_shape(...)`` once, outside
the per-processor function, and use it for every processor (reshape, the
convolution gradients, one_hot, constant, top_k), and ``Lowering`` checks every
slice against that one shape. Under :class:`HeterogeneousMeshImpl` these ops
are lowered here, per processor, whenever the layout of one of their tensors
is uneven; with an even layout the upstream lowering runs unchanged.

Transposed convolutions (``Conv2dTransposeOperation``,
``Conv3dTransposeOperation``) are always lowered here under a
``HeterogeneousMeshImpl``: upstream sizes every slice's output with the whole
output-channel dimension, so it cannot split the filters even evenly. Here
batch, input channels and output channels may be split, evenly or not; a split
spatial or filter-window dimension is refused with an error naming the op and
the dimension, as upstream refuses it. So are pads (``PadOperation``): each
slice is concatenated with zeros rather than padded by TF's ``Pad``, which TF
2.15's oneDNN CPU kernels fold into a following ``Conv3D`` with a wrong output
shape. Pooling (``PoolOperation`` and its gradient) over a dimension split so
that a slice does not hold whole windows gathers that dimension first
(:func:`lower_pooling`).

:func:`install` wraps the ``lower`` methods of those op classes (and two
``Lowering`` methods), listed in one registry (``_PATCHED``); the wrappers leave
other mesh implementations alone. :func:`uninstall` puts the upstream methods
back, and ``with installed():`` scopes them. Creating a
``HeterogeneousMeshImpl`` installs them; importing this module does not.

The patched ``Lowering.mesh_impl`` hands each op being lowered its own view of
the mesh (``HeterogeneousMeshImpl.for_op``), which names the op in errors and
seeds its random ops; the mesh itself keeps no per-op state.
"""
from __future__ import annotations

import contextlib

import numpy as np

from meshpar import _compat

mtf = _compat.import_mesh_tensorflow()
from mesh_tensorflow import ops as mtf_ops  # noqa: E402
import tensorflow.compat.v1 as tf  # noqa: E402

_INSTALLED = False


def _heterogeneous(impl) -> bool:
    # Duck-typed (no import of mesh_impl, which imports this module): only
    # HeterogeneousMeshImpl has per-processor slice shapes and per-op views.
    return callable(getattr(impl, "for_op", None))


def _prod(values) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def _any_uneven(impl, op) -> bool:
    return any(impl.is_uneven(t.shape) for t in list(op.inputs) + list(op.outputs))


def _wrap_lower(cls, uneven_lower, even_too=False):
    """Route ``cls.lower`` to ``uneven_lower`` under a heterogeneous mesh when a
    tensor of the op is laid out unevenly (or always, with ``even_too``)."""
    original = cls.lower

    def lower(self, lowering):
        impl = lowering.mesh_impl(self)
        if _heterogeneous(impl) and (even_too or _any_uneven(impl, self)):
            return uneven_lower(self, lowering, impl)
        return original(self, lowering)

    lower.__doc__ = original.__doc__
    lower.meshpar_original = original
    cls.lower = lower


# ------------------------------------------------------- refused layouts
def _refuse(op, impl, dim, why: str):
    """Raise a ValueError naming the op, the dimension and how the layout splits it."""
    mesh_axis = impl.tensor_dimension_to_mesh_axis(dim)
    raise ValueError(
        f"mtf op {op.name!r} ({type(op).__name__}) {why} tensor dimension {dim.name!r},"
        f" which the layout splits over mesh axis {impl.shape.dims[mesh_axis].name!r}"
        f" as {impl.dim_sizes(dim, mesh_axis)}; lay {dim.name!r} out on no mesh axis")


def _refusing(dim_of, why: str):
    """A lowering that refuses, naming the op and the dimension, a layout that
    splits ``dim_of(op)``, and otherwise lowers as upstream, which refuses the
    same layouts (evenly split too) with terse messages ("can't slice along
    split axis")."""
    def lower(op, lowering, impl):
        dim = dim_of(op)
        if impl.tensor_dimension_to_mesh_axis(dim) is not None:
            _refuse(op, impl, dim, why)
        return op.lower.meshpar_original(op, lowering)
    return lower


def _lower_pad(op, lowering, impl):
    """``mtf.pad`` on each slice as a concatenation with zeros, not a TF ``Pad``:
    TF 2.15's oneDNN CPU kernels fold a ``Pad`` whose only consumer is a
    ``Conv3D`` into the convolution and return a tensor of the unpadded input's
    shape (a network that pads before a convolution then fails to predict,
    where no filter gradient also reads the pad; ``_layers.pad_to_even``). The
    padded dimension may not be split (refused naming the op, as upstream)."""
    dim = op._output_dim  # pylint: disable=protected-access
    if impl.tensor_dimension_to_mesh_axis(dim) is not None:
        _refuse(op, impl, dim, "cannot pad along")
    axis, (before, after) = op._axis, op._paddings  # pylint: disable=protected-access

    def pad(x):
        padded = _zeros_around(x, axis, before, after, name="pad")
        return tf.identity(x) if padded is x else padded

    lowering.set_tensor_lowering(op.outputs[0],
                                 impl.slicewise(pad, lowering.tensors[op.inputs[0]]))


def _zeros_around(x, axis: int, before: int, after: int, name: str = "concat"):
    """``x`` with ``before`` and ``after`` zeros along ``axis``, concatenated rather
    than padded by TF's ``Pad`` (see :func:`_lower_pad`); ``x`` itself when both are 0."""
    def zeros(n):
        shape = x.shape.as_list()
        shape[axis] = n
        return tf.zeros(shape, x.dtype)
    parts = ([zeros(before)] if before else []) + [x] + ([zeros(after)] if after else [])
    return tf.concat(parts, axis, name=name) if len(parts) > 1 else x


def _concat_dim(op):
    return op.outputs[0].shape.get_dim_by_name(op._concat_dim_name)  # pylint: disable=protected-access


# ------------------------------------------------------------------ reshape
def _same_cut(impl, old_shape, old_axis, new_shape, new_axis, mesh_axis) -> bool:
    """Do the old and new layouts cut the flat tensor at the same places?"""
    if old_shape.cumprod[old_axis] != new_shape.cumprod[new_axis]:
        return False
    inner_old = _prod(old_shape.to_integer_list[old_axis + 1:])
    inner_new = _prod(new_shape.to_integer_list[new_axis + 1:])
    old_sizes = impl.dim_sizes(old_shape.dims[old_axis], mesh_axis)
    new_sizes = impl.dim_sizes(new_shape.dims[new_axis], mesh_axis)
    return all(a * inner_old == b * inner_new for a, b in zip(old_sizes, new_sizes))


def _lower_reshape(op, lowering, impl):
    old_shape, new_shape = op.inputs[0].shape, op.outputs[0].shape
    old_axes = impl.tensor_layout(old_shape).mesh_axis_to_tensor_axis(impl.ndims)
    new_axes = impl.tensor_layout(new_shape).mesh_axis_to_tensor_axis(impl.ndims)
    slices = lowering.tensors[op.inputs[0]]
    split_after = []  # (mesh_axis, new tensor axis): cut after the reshape
    for mesh_axis, (old_axis, new_axis) in enumerate(zip(old_axes, new_axes)):
        if old_axis is None and new_axis is None:
            continue
        if old_axis is not None and new_axis is not None:
            if _same_cut(impl, old_shape, old_axis, new_shape, new_axis, mesh_axis):
                continue
            # alltoall when the new cut can be made on a dimension of the old tensor
            new_dim = new_shape.dims[new_axis]
            old_twin = [j for j, d in enumerate(old_shape.dims)
                        if j != old_axis and d.size == new_dim.size
                        and old_shape.cumprod[j] == new_shape.cumprod[new_axis]]
            if old_twin:
                slices = impl.alltoall(slices, mesh_axis, old_twin[0], old_axis,
                                       sizes=new_dim)
                continue
        if old_axis is not None:
            slices = impl.allconcat(slices, mesh_axis, old_axis)
        if new_axis is not None:
            split_after.append((mesh_axis, new_axis))

    pending = dict(split_after)

    def reshaped_shape(pnum):
        shape = impl.slice_shape(new_shape, pnum)
        for mesh_axis, new_axis in pending.items():
            shape[new_axis] = new_shape.dims[new_axis].size
        return shape

    slices = impl.slicewise_delay_allreduce(
        lambda x: tf.reshape(x, reshaped_shape(impl._current_pnum)), slices)  # pylint: disable=protected-access
    for mesh_axis, new_axis in split_after:
        slices = impl.allsplit(slices, mesh_axis, new_axis, sizes=new_shape.dims[new_axis])
    lowering.set_tensor_lowering(op.outputs[0], slices)


# -------------------------------------------------------- conv gradients
def _conv_fns(op):
    """(forward convolution, backprop input, backprop filter) for a 2-D or 3-D op."""
    if op._conv_dimension == 2:  # pylint: disable=protected-access
        return tf.nn.conv2d, tf.nn.conv2d_backprop_input, tf.nn.conv2d_backprop_filter
    return tf.nn.conv3d, mtf_ops.conv3d_backprop_input_v2, mtf_ops.conv3d_backprop_filter_v2


def _flat_sizes(sizes, k):
    """A slice shape with its batch dimensions folded into one (all but the last k)."""
    return [_prod(sizes[:-k])] + list(sizes[-k:])


def _lower_conv_backprop_input(op, lowering, impl):
    # Upstream reads the common slice shape before its transpose branch, which
    # an uneven layout does not have; here each processor uses its own.
    dy, conv_filter = op.inputs
    k = op._num_nonbatch_dims  # pylint: disable=protected-access
    forward, backprop_input, _ = _conv_fns(op)

    def per_processor(pnum, tf_dy, tf_filter):
        flat_dy = mtf_ops._tf_flatten_batch_dims(tf_dy, k)  # pylint: disable=protected-access
        if op._is_transpose:  # the gradient of a transposed conv is a convolution
            dx = forward(flat_dy, tf_filter, op._strides, op._padding)  # pylint: disable=protected-access
        else:
            sizes = _flat_sizes(impl.slice_shape(op.outputs[0].shape, pnum), k)
            dx = backprop_input(sizes, tf_filter, flat_dy,
                                op._strides, op._padding)  # pylint: disable=protected-access
        return mtf_ops._tf_restore_batch_dims(dx, k, tf_dy)  # pylint: disable=protected-access

    dx = impl.slicewise(per_processor, impl.laid_out_pnum(),
                        lowering.tensors[dy], lowering.tensors[conv_filter])
    out_axis = impl.tensor_dimension_to_mesh_axis(dy.shape.dims[-1])
    if out_axis is not None:  # partial sums over the split output channels
        dx = mtf_ops.LazyAllreduceSum(impl, dx, [out_axis])
    lowering.set_tensor_lowering(op.outputs[0], dx)


def _lower_conv_backprop_filter(op, lowering, impl):
    conv_input, dy = op.inputs
    k = op._num_nonbatch_dims  # pylint: disable=protected-access
    _, _, backprop_filter = _conv_fns(op)

    def per_processor(pnum, tf_input, tf_dy):
        x, y = (tf_dy, tf_input) if op._is_transpose else (tf_input, tf_dy)  # pylint: disable=protected-access
        return backprop_filter(
            mtf_ops._tf_flatten_batch_dims(x, k),  # pylint: disable=protected-access
            impl.slice_shape(op.outputs[0].shape, pnum),
            mtf_ops._tf_flatten_batch_dims(y, k),  # pylint: disable=protected-access
            op._strides, op._padding)  # pylint: disable=protected-access

    df = impl.slicewise(per_processor, impl.laid_out_pnum(),
                        lowering.tensors[conv_input], lowering.tensors[dy])
    batch_axes = [impl.tensor_dimension_to_mesh_axis(d) for d in dy.shape.dims[:-k]]
    batch_axes = [a for a in batch_axes if a is not None]
    if batch_axes:  # sum the filter gradient over the data-parallel pieces
        df = mtf_ops.LazyAllreduceSum(impl, df, batch_axes)
    lowering.set_tensor_lowering(op.outputs[0], df)


def _refuse_split_windows(op, impl):
    """A convolution's spatial and filter-window dimensions stay whole (as
    upstream: batch and channels may be split, windows not): refuse a layout
    that splits one, naming the op and the dimension."""
    conv_input, conv_filter = op.inputs
    k = conv_filter.shape.ndims - 2  # spatial dimensions
    for dim in conv_input.shape.dims[-k - 1:-1] + conv_filter.shape.dims[:k]:
        if impl.tensor_dimension_to_mesh_axis(dim) is not None:
            _refuse(op, impl, dim, "cannot split its spatial or filter-window")


def _refuse_undivided_strides(op):
    """Refuse a strided convolution over a size its stride does not divide (SAME:
    the size; VALID: the size less the window plus one), naming the op and the
    dimension: upstream declares floor(size / stride) outputs where TF's
    convolution makes the ceiling, so it failed later as a wrong slice shape."""
    conv_input, conv_filter = op.inputs
    k = conv_filter.shape.ndims - 2
    for i, (dim, window) in enumerate(zip(conv_input.shape.dims[-k - 1:-1],
                                          conv_filter.shape.dims[:k])):
        stride = int(op._strides[i + 1])  # pylint: disable=protected-access
        span = dim.size - (window.size - 1 if op._padding == "VALID" else 0)  # pylint: disable=protected-access
        if span % stride:
            raise ValueError(
                f"mtf op {op.name!r} ({type(op).__name__}) cannot stride {stride} over tensor"
                f" dimension {dim.name!r} of size {dim.size} ({op._padding} padding):"  # pylint: disable=protected-access
                f" Mesh-TensorFlow declares {span // stride} outputs where the convolution"
                f" makes {-(-span // stride)}; pad {dim.name!r} so that {stride} divides"
                + (" its size" if op._padding != "VALID" else  # pylint: disable=protected-access
                   f" its size less {window.size - 1}"))


def _refuse_wide_valid_windows(op):
    """Refuse a transposed convolution with VALID padding whose window is wider than
    its stride, naming the op and the dimension: upstream declares size x stride
    outputs whatever the padding, where TF's makes (size - 1) x stride + window, so
    it failed when run with TF's opaque shape error."""
    conv_input, conv_filter = op.inputs
    k = conv_filter.shape.ndims - 2
    if op._padding != "VALID":  # pylint: disable=protected-access
        return
    for i, (dim, window) in enumerate(zip(conv_input.shape.dims[-k - 1:-1],
                                          conv_filter.shape.dims[:k])):
        stride = int(op._strides[i + 1])  # pylint: disable=protected-access
        if window.size > stride:
            raise ValueError(
                f"mtf op {op.name!r} ({type(op).__name__}) cannot take a window of"
                f" {window.size} over stride {stride} along tensor dimension {dim.name!r}"
                f" with VALID padding: Mesh-TensorFlow declares {dim.size * stride} outputs"
                f" where the transposed convolution makes"
                f" {(dim.size - 1) * stride + window.size}; use SAME padding or a window"
                f" no wider than the stride")


def _lower_conv(op, lowering, impl):
    """Conv2dOperation / Conv3dOperation as upstream, whose refusal of a split
    window names neither the op nor the dimension ("can't slice along dimension
    h", whatever the dimension is called), and whose strides over a size they do
    not divide failed as a wrong slice shape (:func:`_refuse_undivided_strides`)."""
    _refuse_split_windows(op, impl)
    _refuse_undivided_strides(op)
    return op.lower.meshpar_original(op, lowering)


# ------------------------------------------------- transposed convolution
def _lower_conv_transpose(op, lowering, impl):
    """Conv2dTransposeOperation / Conv3dTransposeOperation, per processor."""
    conv_input, conv_filter = op.inputs
    k = conv_filter.shape.ndims - 2  # spatial dimensions
    _refuse_split_windows(op, impl)
    _refuse_wide_valid_windows(op)
    out_shape = op.outputs[0].shape
    backprop_input = tf.nn.conv2d_backprop_input if k == 2 else mtf_ops.conv3d_backprop_input_v2

    def per_processor(pnum, tf_input, tf_filter):
        # This processor's own output slice: its batch rows and output channels.
        sizes = _flat_sizes(impl.slice_shape(out_shape, pnum), k + 1)
        y = backprop_input(sizes, tf_filter, mtf_ops._tf_flatten_batch_dims(tf_input, k + 1),  # pylint: disable=protected-access
                           op._strides, op._padding)  # pylint: disable=protected-access
        return mtf_ops._tf_restore_batch_dims(y, k + 1, tf_input)  # pylint: disable=protected-access

    y = impl.slicewise(per_processor, impl.laid_out_pnum(),
                       lowering.tensors[conv_input], lowering.tensors[conv_filter])
    in_axis = impl.tensor_dimension_to_mesh_axis(conv_input.shape.dims[-1])
    if in_axis is not None:  # partial sums over the split input channels
        y = mtf_ops.LazyAllreduceSum(impl, y, [in_axis])
    lowering.set_tensor_lowering(op.outputs[0], y)


# ------------------------------------------------------- one_hot, constant
def _lower_one_hot(op, lowering, impl):
    out_shape = op.outputs[0].shape
    on_value = tf.cast(op._on_value, op._dtype)  # pylint: disable=protected-access
    off_value = tf.cast(op._off_value, op._dtype)  # pylint: disable=protected-access

    def per_processor(pnum, indices):
        depth = impl.slice_shape(out_shape, pnum)[-1]
        offset = impl.slice_begin(out_shape, pnum)[-1]
        return tf.one_hot(indices - offset, depth, on_value=on_value,
                          off_value=off_value, dtype=op._dtype)  # pylint: disable=protected-access

    y = impl.slicewise(per_processor, impl.laid_out_pnum(), lowering.tensors[op.inputs[0]])
    lowering.set_tensor_lowering(op.outputs[0], y)


def _lower_constant(op, lowering, impl):
    # Upstream fills every slice with the whole value, which works for a scalar
    # only; an array value (mtf.constant of a numpy array) is cut per processor.
    out = op.outputs[0]
    value = op._value  # pylint: disable=protected-access
    if np.ndim(value) > 0:
        value = np.reshape(np.asarray(value), out.shape.to_integer_list)

    def per_processor(pnum):
        shape = impl.slice_shape(out.shape, pnum)
        if np.ndim(value) == 0:
            return tf.constant(value=value, dtype=out.dtype, shape=shape)
        begin = impl.slice_begin(out.shape, pnum)
        piece = value[tuple(slice(b, b + n) for b, n in zip(begin, shape))]
        return tf.constant(piece, dtype=out.dtype)

    lowering.set_tensor_lowering(out, impl.slicewise(per_processor, impl.laid_out_pnum()))


# ------------------------------------------------------------------- shift
def _lower_shift(op, lowering, impl):
    """A shift along a dimension that is not split, or split unevenly: each slice
    shifted whole, the vacated positions concatenated zeros (upstream pads with
    TF's ``Pad``, which TF 2.15's oneDNN kernels fold into a following ``Conv3D``
    with a wrong output shape: see :func:`_lower_pad`); along an uneven split,
    gather the dimension, shift it whole, cut it again by its own sizes
    (upstream moves equal blocks between neighbours, which needs equal slices).
    An even split shifts as upstream (blocks between neighbours, no pad)."""
    dim, axis = op._dim, op._axis  # pylint: disable=protected-access
    mesh_axis = impl.tensor_dimension_to_mesh_axis(dim)
    if mesh_axis is not None and len(set(impl.dim_sizes(dim, mesh_axis))) == 1:
        return op.lower.meshpar_original(op, lowering)
    offset, size = op._offset, dim.size  # pylint: disable=protected-access

    def shift_whole(t):
        if op._wrap:  # pylint: disable=protected-access
            return tf.roll(t, offset % size, axis)
        keep = max(0, size - abs(offset))  # elements that stay in the tensor
        begin, sizes = [0] * t.shape.ndims, [-1] * t.shape.ndims
        begin[axis], sizes[axis] = (0 if offset > 0 else size - keep), keep
        if not keep:
            return tf.zeros(t.shape.as_list(), t.dtype)
        vacated = size - keep
        kept = tf.slice(t, begin, sizes)
        return _zeros_around(kept, axis, vacated if offset > 0 else 0,
                             0 if offset > 0 else vacated)

    if mesh_axis is None:
        lowering.set_tensor_lowering(
            op.outputs[0], impl.slicewise(shift_whole, lowering.tensors[op.inputs[0]]))
        return
    whole = impl.allconcat(lowering.tensors[op.inputs[0]], mesh_axis, axis)
    shifted = impl.slicewise(shift_whole, whole)
    lowering.set_tensor_lowering(op.outputs[0], impl.allsplit(shifted, mesh_axis, axis, sizes=dim))


# ----------------------------------------------------------------- pooling
def lower_pooling(op, lowering, slice_fn, ksize, pooled) -> None:
    """Lower a non-overlapping pooling ``op`` or its gradient: ``slice_fn`` on each
    processor's slices of ``op.inputs`` (the first input holds the whole windows);
    ``pooled``: the op's pooled tensor (its output, or the gradient's ``y``).

    A pooled dimension split so that some slice does not hold whole windows (slices
    cut by uneven weights, or an even split of 6 into 3 and 3 under windows of 2) is
    gathered first (all-concat), pooled whole and the output cut again by its own
    sizes: upstream pooled each slice by itself, so windows straddling two slices
    were pooled as two partial windows, a wrong output shape or TF's 'Negative
    dimension size'. Otherwise (and on other mesh implementations) each slice pools
    itself, as upstream."""
    impl = lowering.mesh_impl(op)
    inputs = [lowering.tensors[t] for t in op.inputs]
    whole = op.inputs[0].shape
    cuts = []
    if _heterogeneous(impl):
        for i, k in enumerate(ksize):
            axis = whole.ndims - 1 - len(ksize) + i
            mesh_axis = impl.tensor_dimension_to_mesh_axis(whole.dims[axis])
            if mesh_axis is None:
                continue
            big = impl.dim_sizes(whole.dims[axis], mesh_axis)
            small = impl.dim_sizes(pooled.shape.dims[axis], mesh_axis)
            # the last slice may also hold the remainder the pooling drops
            if all(b == k * s for b, s in zip(big[:-1], small[:-1])):
                continue
            inputs = [impl.allconcat(t, mesh_axis, axis) for t in inputs]
            cuts.append((mesh_axis, axis))
    out = op.outputs[0]
    y = impl.slicewise(slice_fn, *inputs)
    for mesh_axis, axis in cuts:
        y = impl.allsplit(y, mesh_axis, axis, sizes=out.shape.dims[axis])
    lowering.set_tensor_lowering(out, y)


def _lower_pool(op, lowering, impl):
    ksize, strides = op._ksize, op._strides  # pylint: disable=protected-access
    fn = mtf_ops._pool_helper(ksize, strides, op._pool_fn_string)  # pylint: disable=protected-access
    lower_pooling(op, lowering, fn, ksize, op.outputs[0])


def _lower_pool_backprop(op, lowering, impl):
    """Upstream's gradient of non-overlapping pooling, per slice or on gathered slices
    (:func:`lower_pooling`), with zeros for the rows a pooled size that the window does
    not divide leaves out of every window (the forward pooling drops them, as TF's
    VALID pooling does): upstream's gradient assumed divisible sizes, and an input of
    5 rows under windows of 2 failed with a shape error, on one device too."""
    ksize, kind = list(op._strides), op._pool_fn_string  # pylint: disable=protected-access
    start = -len(ksize) - 1

    def upscale(t, like):
        up = mtf_ops._tf_upscale(t, start, -1, list(ksize))  # pylint: disable=protected-access
        rest = [int(a) - int(b) for a, b in zip(like.shape, up.shape)]
        if not any(rest):
            return up
        return tf.pad(up, [[0, r] for r in rest])

    def gradient(x, y, dy):
        if kind.startswith("MAX"):
            return tf.cast(tf.equal(x, upscale(y, x)), x.dtype) * upscale(dy, x)
        return upscale(dy, x) / tf.constant(_prod(ksize), dtype=x.dtype)

    lower_pooling(op, lowering, gradient, ksize, op.inputs[1])


# ------------------------------------------------------------------- top_k
def _lower_top_k(op, lowering, impl):
    x = op.inputs[0]
    ndims = x.shape.ndims
    reduced_dim, k = op._reduced_dim, op._k_dim.size  # pylint: disable=protected-access
    reduced_axis = x.shape.dims.index(reduced_dim)
    mesh_axis = impl.tensor_dimension_to_mesh_axis(reduced_dim)
    order = [i for i in range(ndims) if i != reduced_axis] + [reduced_axis]

    def local_top_k(pnum, t):
        t = tf.transpose(t, order)
        local = t.shape.as_list()[-1]
        values, indices = tf.math.top_k(t, min(k, local))
        offset = 0 if mesh_axis is None else impl.slice_begin(x.shape, pnum)[reduced_axis]
        return values, indices + offset  # global indices

    values, indices = impl.slicewise(local_top_k, impl.laid_out_pnum(), lowering.tensors[x])
    if mesh_axis is not None:
        values = impl.allconcat(values, mesh_axis, ndims - 1)
        indices = impl.allconcat(indices, mesh_axis, ndims - 1)

        def global_top_k(vals, idx):
            vals, where = tf.math.top_k(vals, k)
            return vals, tf.gather(idx, where, batch_dims=ndims - 1)

        values, indices = impl.slicewise(global_top_k, values, indices)
    lowering.set_tensor_lowering(op.outputs[0], values)
    lowering.set_tensor_lowering(op.outputs[1], indices)


# ---------------------------------------------------------------- Lowering
def _wrap_lowering_methods():
    original_mesh_impl = mtf_ops.Lowering.mesh_impl
    original_verify = mtf_ops.Lowering.verify_slice_shapes

    def mesh_impl(self, m):
        impl = original_mesh_impl(self, m)
        if isinstance(m, mtf_ops.Operation) and _heterogeneous(impl):
            return impl.for_op(m)  # this op's own view: no state left on the mesh
        return impl

    def verify_slice_shapes(self, tensor, laid_out_tensor):
        impl = self.mesh_impl(tensor)
        if not _heterogeneous(impl):
            return original_verify(self, tensor, laid_out_tensor)
        if isinstance(laid_out_tensor, mtf_ops.LazyAllreduceSum):
            laid_out_tensor = laid_out_tensor.laid_out_input
        actual = [t.shape.as_list() for t in laid_out_tensor.to_laid_out_tensor().tensor_list]
        expected = impl.slice_shapes(tensor.shape)
        for pnum, (want, got) in enumerate(zip(expected, actual)):
            if want != got:
                raise ValueError(
                    f"wrong slice shape for {tensor} on processor {pnum}: expected"
                    f" {want}, got {got}")

    mesh_impl.meshpar_original = original_mesh_impl
    verify_slice_shapes.meshpar_original = original_verify
    mtf_ops.Lowering.mesh_impl = mesh_impl
    mtf_ops.Lowering.verify_slice_shapes = verify_slice_shapes


# The one registry of overrides: (class, method name) of every upstream method
# replaced while installed; each replacement keeps the original as
# ``.meshpar_original``.
_PATCHED = (
    (mtf_ops.Lowering, "mesh_impl"), (mtf_ops.Lowering, "verify_slice_shapes"),
    (mtf_ops.ReshapeOperation, "lower"), (mtf_ops.Conv2or3dBackpropInputOperation, "lower"),
    (mtf_ops.Conv2or3dBackpropFilterOperation, "lower"), (mtf_ops.OneHotOperation, "lower"),
    (mtf_ops.Constant, "lower"), (mtf_ops.TopKOperation, "lower"),
    (mtf_ops.Conv2dTransposeOperation, "lower"), (mtf_ops.Conv3dTransposeOperation, "lower"),
    (mtf_ops.SliceOperation, "lower"), (mtf_ops.PadOperation, "lower"),
    (mtf_ops.ConcatOperation, "lower"), (mtf_ops.SplitOperation, "lower"),
    (mtf_ops.StackOperation, "lower"), (mtf_ops.UnstackOperation, "lower"),
    (mtf_ops.ShiftOperation, "lower"), (mtf_ops.PoolOperation, "lower"),
    (mtf_ops.PoolBackPropOperation, "lower"), (mtf_ops.Conv2dOperation, "lower"),
    (mtf_ops.Conv3dOperation, "lower"),
)

# Ops that cannot split one of their dimensions, evenly or not: (class, that
# dimension, what the op does to it).
_REFUSALS = (
    (mtf_ops.SliceOperation, lambda op: op._slice_dim, "cannot slice along"),  # pylint: disable=protected-access
    (mtf_ops.ConcatOperation, _concat_dim, "cannot concatenate along"),
    (mtf_ops.SplitOperation, lambda op: op._split_dim, "cannot split along"),  # pylint: disable=protected-access
    (mtf_ops.StackOperation, lambda op: op._new_dim, "cannot stack along"),  # pylint: disable=protected-access
    (mtf_ops.UnstackOperation, lambda op: op._dim, "cannot unstack along"),  # pylint: disable=protected-access
)


def is_installed() -> bool:
    """Whether the uneven-aware lowerings are in place."""
    return _INSTALLED


def install() -> None:
    """Install the uneven-aware lowerings (idempotent). A
    :class:`~meshpar.core.mesh_impl.HeterogeneousMeshImpl` installs them when it
    is created; other mesh implementations lower exactly as upstream either way."""
    global _INSTALLED
    if _INSTALLED:
        return
    _wrap_lowering_methods()
    _wrap_lower(mtf_ops.ReshapeOperation, _lower_reshape)
    _wrap_lower(mtf_ops.Conv2or3dBackpropInputOperation, _lower_conv_backprop_input)
    _wrap_lower(mtf_ops.Conv2or3dBackpropFilterOperation, _lower_conv_backprop_filter)
    _wrap_lower(mtf_ops.OneHotOperation, _lower_one_hot)
    _wrap_lower(mtf_ops.Constant, _lower_constant, even_too=True)
    _wrap_lower(mtf_ops.ShiftOperation, _lower_shift, even_too=True)
    _wrap_lower(mtf_ops.TopKOperation, _lower_top_k)
    _wrap_lower(mtf_ops.Conv2dOperation, _lower_conv, even_too=True)
    _wrap_lower(mtf_ops.Conv3dOperation, _lower_conv, even_too=True)
    _wrap_lower(mtf_ops.Conv2dTransposeOperation, _lower_conv_transpose, even_too=True)
    _wrap_lower(mtf_ops.Conv3dTransposeOperation, _lower_conv_transpose, even_too=True)
    _wrap_lower(mtf_ops.PadOperation, _lower_pad, even_too=True)
    _wrap_lower(mtf_ops.PoolOperation, _lower_pool, even_too=True)
    _wrap_lower(mtf_ops.PoolBackPropOperation, _lower_pool_backprop, even_too=True)
    for cls, dim_of, why in _REFUSALS:
        _wrap_lower(cls, _refusing(dim_of, why), even_too=True)
    _INSTALLED = True


def uninstall() -> None:
    """Put every upstream method back as it was (idempotent)."""
    global _INSTALLED
    if not _INSTALLED:
        return
    for cls, name in _PATCHED:
        setattr(cls, name, getattr(cls, name).meshpar_original)
    _INSTALLED = False


@contextlib.contextmanager
def installed():
    """Within: the uneven-aware lowerings are installed; on leaving, the previous
    state is restored (uninstalled again only if this call installed them)."""
    was = _INSTALLED
    install()
    try:
        yield
    finally:
        if not was:
            uninstall()
