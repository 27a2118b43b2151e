"""Mesh-TensorFlow building blocks shared by the model files.

Imported only from inside the models' ``build`` functions (it imports
TensorFlow). Every helper names its output dimension explicitly, so each
filter dimension of a network can have its own layout rule.

Batch normalisation
-------------------
:func:`batch_norm` normalises with the statistics of the *global* batch in
training (a sum over the batch dimension, an all-reduce when the batch is
split), so a data-parallel mesh computes exactly what one device computes on
the whole batch; its hand-written gradient synchronises once per layer. It
keeps moving averages (initialised to 0 and 1, not mtf's random moving mean)
and uses them in evaluation; the moving-average assignments are returned as
update operations for the training step.

With ``statistics="local"`` each device normalises with the statistics of its
own share of the batch (what PyTorch's ``BatchNorm`` does under DDP and Keras's
``BatchNormalization`` under ``MirroredStrategy``): no collective on the path
of the step; the gradients of scale and offset join the weight gradients'
all-reduce, the moving averages are the batch's weighted mean of the shares'
statistics. A different model from the global one on a batch-split mesh (each
share is a smaller normalisation group), the same on any other mesh.
"""
from __future__ import annotations

import contextlib

import meshpar  # noqa: F401  (installs the mesh_tensorflow import shim)
import mesh_tensorflow as mtf
import tensorflow.compat.v1 as tf

from meshpar.core.graph_collectives import BACKWARD_BATCH_SUMS
from meshpar.core.graph_description import ELEMENTWISE_FLOPS
from meshpar.core.lowering import lower_pooling


def he_initializer():
    """He (fan-in, truncated normal) initialiser; seeded by the graph seed."""
    return tf.variance_scaling_initializer(scale=2.0, mode="fan_in",
                                           distribution="truncated_normal")


def glorot_initializer():
    """Glorot (Xavier) uniform initializer from TF's variance scaling (fan average)."""
    return tf.variance_scaling_initializer(scale=1.0, mode="fan_avg",
                                           distribution="uniform")


def variable_dtype(x):
    """float32 master and slice variables, activations in ``x``'s dtype (as mtf's convs)."""
    return mtf.VariableDType(tf.float32, tf.float32, x.dtype)


def pad_to_even(x, dim_names):
    """Zero-pad each named dimension of odd size by one at the end.

    mtf computes a strided or pooled output size as ``floor(n / 2)`` while TF's
    ``SAME`` padding gives ``ceil(n / 2)``; on even sizes they agree.

    The zeros are concatenated, not padded (``mtf.pad``): TF 2.15's oneDNN CPU
    kernels fold a ``Pad`` whose only consumer is a ``Conv3D`` into the
    convolution and return a tensor of the wrong shape (a [2, 5, 4, 1, 3] input
    padded to [2, 6, 4, 2, 3] and convolved with stride 2 came out as the
    input itself, not [2, 3, 2, 1, 5]). A training graph hides it (the filter
    gradient reads the padded tensor too); prediction and evaluation of a
    network with an odd size at a strided convolution failed.
    """
    for name in dim_names:
        dim = x.shape.get_dim_by_name(name)
        if dim.size % 2:
            edge = mtf.zeros(x.mesh, x.shape.resize_dimension(name, 1), dtype=x.dtype)
            x = mtf.concat([x, edge], name)
    return x


def conv3d(x, out_dim, kernel=3, stride=1, name="conv3d"):
    """3-D convolution (no bias) of an NDHWC tensor to ``out_dim`` filters."""
    spatial = [d.name for d in x.shape.dims[-4:-1]]
    if stride != 1:
        x = pad_to_even(x, spatial)
    return mtf.layers.conv3d(
        x, out_dim, filter_size=(kernel,) * 3, strides=(stride,) * 3,
        padding="SAME", filter_initializer=he_initializer(), name=name)


def conv2d(x, out_dim, kernel=3, use_bias=True, name="conv2d"):
    """2-D convolution of an NHWC tensor, optionally with a bias."""
    with tf.variable_scope(name):
        y = mtf.layers.conv2d(x, out_dim, filter_size=(kernel, kernel),
                              filter_initializer=he_initializer(), name="conv")
        if use_bias:
            bias = mtf.get_variable(x.mesh, "bias", [out_dim], dtype=variable_dtype(x),
                                    initializer=tf.zeros_initializer())
            y += bias
    return y


def relu(x, name="relu"):
    """``max(x, 0)`` whose gradient is TF's ``ReluGrad`` on each slice: one pass
    over the activation, where mtf's own gradient (``dy * cast(x > 0)``) is three."""
    return mtf.cwise(tf.nn.relu, [x], name=name, grad_function=_relu_gradient)


def _relu_gradient(op, dy):
    y = op.outputs[0]  # y > 0 exactly where x > 0, as in TF's own ReLU gradient
    return [mtf.slicewise(lambda y, dy: tf.raw_ops.ReluGrad(gradients=dy, features=y),
                          [y, dy], output_shape=dy.shape, output_dtype=dy.dtype,
                          splittable_dims=dy.shape.dims, name="relu_grad")]


def max_pool(x, ksize, name="max_pool"):
    """Non-overlapping max pooling over the spatial dimensions of an N(D)HWC tensor
    (2-D for two sizes, 3-D for three), as ``mtf.layers.max_pool2d``/``3d``.

    The gradient is TF's max-pool gradient kernel on each slice; mtf's own
    (upscale the output and its gradient by concatenation, compare, cast,
    multiply) took a tenth of resattnet3d-small's training step (traced:
    docs/measuring.md). A gradient reaches one maximum of a window where mtf's
    reaches every tied one; the models pool after a ReLU, whose gradient is zero
    on the only ties that occur (windows of zeros).
    """
    ksize = tuple(int(k) for k in ksize)
    if len(ksize) not in (2, 3):
        raise ValueError(f"max_pool: ksize must have 2 or 3 sizes, got {ksize}")
    if all(k == 1 for k in ksize):
        return x
    return _MaxPoolOperation(x, ksize, ksize, f"MAX_{len(ksize)}D", name=name).outputs[0]


class _MaxPoolOperation(mtf.PoolOperation):
    """mtf's pooling forward, with :class:`_MaxPoolGradOperation` as its gradient."""

    def gradient(self, grad_ys):
        return [_MaxPoolGradOperation(self.inputs[0], self.outputs[0], grad_ys[0], self._ksize,
                                      self._strides, self._pool_fn_string).outputs[0]]


class _MaxPoolGradOperation(mtf.PoolBackPropOperation):
    """``dx`` of non-overlapping max pooling: TF's ``MaxPoolGrad``/``MaxPool3DGrad``."""

    def lower(self, lowering):
        from mesh_tensorflow.ops import _tf_flatten_batch_dims, _tf_restore_batch_dims

        spatial = len(self._ksize)
        window = [1, *self._ksize, 1]
        kernel = tf.raw_ops.MaxPool3DGrad if spatial == 3 else tf.raw_ops.MaxPoolGrad

        def slice_gradient(x, y, dy):
            flat = [_tf_flatten_batch_dims(t, spatial + 1) for t in (x, y, dy)]
            dx = kernel(orig_input=flat[0], orig_output=flat[1], grad=flat[2], ksize=window,
                        strides=window, padding="VALID")
            return _tf_restore_batch_dims(dx, spatial + 1, x)

        # per slice; a split dimension whose slices cut windows is gathered first
        lower_pooling(self, lowering, slice_gradient, self._ksize, self.inputs[1])


def dense(x, reduced_dims, out_dim, use_bias=True, initializer=None, name="dense"):
    """``x . W (+ b)`` contracting ``reduced_dims`` into ``out_dim``."""
    reduced_dims = list(reduced_dims)
    with tf.variable_scope(name):
        kernel = mtf.get_variable(x.mesh, "kernel", reduced_dims + [out_dim],
                                  dtype=variable_dtype(x),
                                  initializer=initializer or glorot_initializer())
        out_shape = [d for d in x.shape.dims if d not in reduced_dims] + [out_dim]
        y = mtf.einsum([x, kernel], output_shape=out_shape)
        if use_bias:
            bias = mtf.get_variable(x.mesh, "bias", [out_dim], dtype=variable_dtype(x),
                                    initializer=tf.zeros_initializer())
            y += bias
    return y


def batch_statistics(x, channel_dim, shift=None):
    """Per-channel mean and (biased) variance over every other dimension, with ONE
    collective when the batch is split.

    The sums of ``x`` and ``x**2`` are first reduced locally to
    ``[batch, channel]`` (no communication: the batch dimension is kept),
    stacked into ``[stat=2, batch, channel]`` and reduced over the batch
    together: one all-reduce of ``2 x channels`` numbers per layer instead of
    two dependent ones (the mean, then the variance of the centred values),
    and in the backward pass two independent ones instead of a chain. Each
    sync point costs a wait for the slowest device, so this matters more on
    uneven meshes than the bytes do. ``var = E[(x-s)^2] - E[x-s]^2`` for a
    per-channel ``shift`` s near the mean (the moving mean): algebraically the
    variance, and without the cancellation of ``E[x^2] - E[x]^2`` in float32
    when the mean is large against the spread; clamped at 0. Every mesh
    computes this same formula.
    """
    return _statistics_together([x], channel_dim, [shift])[0]


def _statistics_together(xs, channel_dim, shifts):
    """``[(mean, variance)]`` of :func:`batch_statistics` for each of the same-shaped
    ``xs`` (``shifts[i]``: the shift of ``xs[i]``, all None or none), with ONE
    collective for all of them: the sums of every tensor are stacked before the
    reduction over the batch."""
    count = xs[0].shape.size // channel_dim.size
    n = len(xs)
    shifted = shifts[0] is not None
    shift_in = [mtf.stop_gradient(t) for t in shifts] if shifted else []

    def centred_and_squared(bc, *slices):
        parts = []
        for i, x in enumerate(slices[:n]):
            centred = x - bc(slices[n + i]) if shifted else x
            parts += [centred, tf.square(centred)]
        return parts

    sums, stat = _channel_sums(centred_and_squared, 2 * n, n * (3 + shifted), list(xs) + shift_in,
                               channel_dim, "bnstat")
    sums = mtf.unstack(sums * (1.0 / count), stat)
    out = []
    for i in range(n):
        offset, mean_sq = sums[2 * i], sums[2 * i + 1]
        mean = offset + shift_in[i] if shifted else offset
        out.append((mean, mtf.relu(mean_sq - mtf.square(offset))))
    return out


# Element-wise work on an activation and per-channel vectors runs as ONE slicewise
# TF function per device: TF broadcasts a [C] slice against [..., C] natively,
# where mtf's own broadcasting lowers every binary op to ExpandDims per missing
# dimension and a Transpose (about 75 extra TF ops per batch-norm layer and step).
# A smaller graph, not a measurably faster step (docs/measuring.md, "Small ops").

class _ChannelView:
    """Element-wise work between activation slices and per-channel ``[C]`` slices.

    With the channels last (the models' layout), activations are seen as 2-D
    ``[-1, W * C]`` (``W`` the dimension before the channels) and vectors tiled to
    ``W * C``: TF's broadcasting kernels are slow on a short innermost dimension
    (8 channels: ``x * a`` took 1.5x the time of ``tf.square(x)``) and run at a
    unary op's speed on a long one (resattnet3d-small's step: docs/measuring.md).
    The same formula element by element; Grappler may order a chain of products
    differently than on the 5-D shapes (float32 rounding, ~1e-7 relative).
    Otherwise vectors are reshaped to broadcast against the slices as they are.
    """

    def __init__(self, like, channel_axis: int):
        self.shape = like.shape.as_list()
        trailing = len(self.shape) - 1 - channel_axis
        flat = trailing == 0 and len(self.shape) > 2 and None not in self.shape
        self.repeat = self.shape[-2] if flat else 1
        self.trailing = trailing

    def flat(self, t):
        """An activation slice in the view's shape."""
        return tf.reshape(t, [-1, self.repeat * self.shape[-1]]) if self.repeat > 1 else t

    def restore(self, t):
        """A result of :meth:`flat` slices back in the activation's shape."""
        return tf.reshape(t, self.shape) if self.repeat > 1 else t

    def bc(self, v):
        """A per-channel slice, shaped to broadcast against :meth:`flat` slices."""
        if self.repeat > 1:
            return tf.tile(v, [self.repeat])
        return v if self.trailing == 0 else tf.reshape(v, [-1] + [1] * self.trailing)


def _on_view(fn, n_activations, channel_axis):
    """``fn(bc, *activations, *vectors)`` as a slice function: ``(view, result)`` with
    the activations flattened by a :class:`_ChannelView` of the first one."""
    def run(*slices):
        view = _ChannelView(slices[0], channel_axis)
        flat = [view.flat(t) for t in slices[:n_activations]]
        return view, fn(view.bc, *flat, *slices[n_activations:])
    return run


def _channel_wise(fn, flops, activations, per_channel, channel_dim, name):
    """``fn(bc, *activation_slices, *channel_slices)`` on every device: a result shaped
    like the first activation; ``flops`` per element, for the graph-derived cost tables."""
    x = activations[0]
    run = _on_view(fn, len(activations), x.shape.dims.index(channel_dim))

    def slice_fn(*slices):
        view, y = run(*slices)
        return view.restore(y)

    y = mtf.slicewise(slice_fn, list(activations) + list(per_channel),
                      output_shape=x.shape, output_dtype=x.dtype,
                      splittable_dims=x.shape.dims, name=name)
    setattr(y.operation, ELEMENTWISE_FLOPS, flops)
    return y


def scale_and_shift(x, a, b, channel_dim):
    """``x * a + b`` for per-channel ``a`` and ``b``: two TF ops per device."""
    return _channel_wise(lambda bc, x, a, b: x * bc(a) + bc(b), 2, [x], [a, b], channel_dim,
                         "scale_and_shift")


def _channel_sums(parts_fn, n_parts, flops, inputs, channel_dim, tag):
    """``(sums, stat)``: the ``n_parts`` activation-shaped TF tensors ``parts_fn(bc, *slices)``
    computes from ``inputs`` (activations first, then per-channel vectors), each summed
    over every dimension but ``channel_dim``, as one ``[stat, channel]`` tensor;
    ``flops`` per activation element (the parts' element-wise ops and their sums).

    On each device the parts are reduced to ``[batch, channel]`` (the batch dimension
    kept: no communication) and stacked; the stack is then reduced over the batch:
    ONE all-reduce when the batch is split. Other dimensions must not be split (mtf
    refuses the layout at lowering).
    """
    x = inputs[0]
    keep = [d for d in x.shape.dims[:1] if d != channel_dim]
    axes = [i for i, d in enumerate(x.shape.dims) if d != channel_dim and d not in keep]
    stat = mtf.Dimension(f"{channel_dim.name}_{tag}", n_parts)
    n_activations = sum(1 for t in inputs if t.shape.ndims == x.shape.ndims)
    run = _on_view(parts_fn, n_activations, x.shape.dims.index(channel_dim))

    def local_sums(*slices):
        view, parts = run(*slices)
        return tf.stack([tf.reduce_sum(view.restore(p), axes) for p in parts])

    local = mtf.slicewise(local_sums, list(inputs), output_shape=[stat] + keep + [channel_dim],
                          output_dtype=x.dtype, splittable_dims=keep + [channel_dim],
                          name=f"{tag}_local")
    setattr(local.operation, ELEMENTWISE_FLOPS, flops)
    return mtf.reduce_sum(local, output_shape=[stat, channel_dim]), stat


def batch_norm(x, channel_dim, is_training, momentum=0.9, epsilon=1e-5, name="bn",
               statistics="global"):
    """Batch normalisation over every dimension but ``channel_dim``; in training with the
    statistics of the whole batch (``statistics="global"``) or of each device's share
    of it (``"local"``).

    Returns
    -------
    (mtf.Tensor, list of mtf.Operation)
        The normalised tensor and, in training, the moving-average updates.
    """
    ys, updates = batch_norms_together([x], channel_dim, is_training, momentum, epsilon,
                                       [name], statistics)
    return ys[0], updates


def batch_norms_together(xs, channel_dim, is_training, momentum=0.9, epsilon=1e-5,
                         names=("bn",), statistics="global", variables=None):
    """:func:`batch_norm` of each of the same-shaped ``xs`` (its own variables, under
    ``names[i]``, and its own statistics) in training sharing their synchronisations:
    ONE all-reduce forward and one backward for all of them with global statistics,
    where each alone is one of each. Every device waits for the slowest at each, so
    two layers that can be normalised at the same point (a residual block's two
    branches) should be. The same formula as one :func:`batch_norm` per tensor (equal
    up to float32 rounding: the graph around it differs).
    ``variables[i]``: those of ``names[i]`` made earlier by :func:`batch_norm_variables`
    (None: made here), so that a model keeps the order its variables were made in,
    and with it their seeded initial values.

    Returns
    -------
    (list of mtf.Tensor, list of mtf.Operation)
    """
    if len(xs) != len(names) or not xs or (variables is not None
                                           and len(variables) != len(xs)):
        raise ValueError(f"batch_norms_together: {len(xs)} tensors for {len(names)} names"
                         + ("" if variables is None else f" and {len(variables)} variable sets"))
    if any(x.shape != xs[0].shape for x in xs):
        raise ValueError(f"batch_norms_together needs tensors of one shape, got "
                         f"{[str(x.shape) for x in xs]}")
    normalisers = {"global": _normalise_together, "local": _normalise_local}
    if statistics not in normalisers:
        raise ValueError(f"batch_norm statistics must be one of {sorted(normalisers)}, "
                         f"got {statistics!r}")
    # one tensor: everything under its name, as a single batch norm always was
    single = len(xs) == 1
    with tf.variable_scope(names[0]) if single else contextlib.nullcontext():
        made = variables or [None] * len(xs)
        variables = [v or batch_norm_variables(x, channel_dim, None if single else name)
                     for x, name, v in zip(xs, names, made)]
        if not is_training:
            ys = []
            for x, (scale, offset, moving_mean, moving_var) in zip(xs, variables):
                a = scale * mtf.rsqrt(moving_var + epsilon)
                ys.append(scale_and_shift(x, a, offset - moving_mean * a, channel_dim))
            return ys, []
        if statistics == "local":  # no collective forward to share
            results = [_normalise_local(x, *v[:3], channel_dim, epsilon)
                       for x, v in zip(xs, variables)]
        else:
            results = _normalise_together(xs, *(list(v) for v in list(zip(*variables))[:3]),
                                          channel_dim, epsilon)
        updates = []
        for (_, mean, variance), (_, _, moving_mean, moving_var) in zip(results, variables):
            updates += [
                mtf.assign(moving_mean, moving_mean * momentum + mean * (1.0 - momentum)),
                mtf.assign(moving_var, moving_var * momentum + variance * (1.0 - momentum)),
            ]
    return [y for y, _, _ in results], updates


def batch_norm_variables(x, channel_dim, name=None):
    """``(scale, offset, moving_mean, moving_variance)`` of a batch norm, under the
    variable scope ``name`` (None: the current one)."""
    dtype = variable_dtype(x)
    with tf.variable_scope(name) if name else contextlib.nullcontext():
        scale = mtf.get_variable(x.mesh, "scale", [channel_dim], dtype=dtype,
                                 initializer=tf.ones_initializer())
        offset = mtf.get_variable(x.mesh, "offset", [channel_dim], dtype=dtype,
                                  initializer=tf.zeros_initializer())
        moving_mean = mtf.get_variable(x.mesh, "moving_mean", [channel_dim], dtype=dtype,
                                       initializer=tf.zeros_initializer(), trainable=False)
        moving_var = mtf.get_variable(x.mesh, "moving_variance", [channel_dim], dtype=dtype,
                                      initializer=tf.ones_initializer(), trainable=False)
    return scale, offset, moving_mean, moving_var


def _normalise_training(x, scale, offset, shift, channel_dim, epsilon):
    """``(y, mean, variance)`` of batch normalisation in training with global
    statistics (:func:`_normalise_together` of one tensor)."""
    return _normalise_together([x], [scale], [offset], [shift], channel_dim, epsilon)[0]


def _normalise_together(xs, scales, offsets, shifts, channel_dim, epsilon):
    """``[(y, mean, variance)]`` of batch normalisation in training of each of ``xs``
    (``shifts``: their moving means), with a hand-written gradient; ONE collective
    forward and one backward for all of them when the batch is split.

    Differentiated op by op, ``y = (x - mean) * rsqrt(var + eps) * scale + offset``
    all-reduces four per-channel tensors in the backward pass (the gradients of
    ``scale``, ``offset``, ``mean`` and ``rsqrt``), two of them on the path to
    ``dx``: each is a point where every device waits for the slowest. The
    closed form needs two per-channel sums, ``sum(dy)`` and ``sum(dy * xhat)``,
    which are the gradients of ``offset`` and ``scale`` as well, reduced together
    by :func:`_channel_sums` (as :func:`batch_statistics` does forward), those of
    every tensor in one stack. The forward pass is two passes over ``x`` (``x * a
    + b`` with per-channel ``a``, ``b``) instead of four.
    Every mesh, one device included, computes this same formula.
    """
    n = len(xs)
    count = xs[0].shape.size // channel_dim.size

    def forward(*inputs):
        ys, stats = [], []
        for (mean, variance), x, scale, offset in zip(
                _statistics_together(inputs[:n], channel_dim, shifts), inputs[:n],
                inputs[n:2 * n], inputs[2 * n:]):
            a = scale * mtf.rsqrt(variance + epsilon)
            ys.append(scale_and_shift(x, a, offset - mean * a, channel_dim))
            stats += [mean, variance]
        return tuple(ys + stats)

    def backward(explicit_inputs, all_inputs, forward_operations, outputs, output_grads):
        del forward_operations
        xs, scales = explicit_inputs[:n], explicit_inputs[n:2 * n]
        means, variances = outputs[n::2], outputs[n + 1::2]
        dys = [mtf.zeros_like(x) if dy is None else dy
               for x, dy in zip(xs, output_grads[:n])]
        rstds = [mtf.rsqrt(v + epsilon) for v in variances]

        def dy_and_dy_xhat(bc, *slices):  # dy_i, x_i pairs, then mean_i, rstd_i pairs
            parts = []
            for i in range(n):
                dy, x = slices[2 * i], slices[2 * i + 1]
                mean, rstd = slices[2 * n + 2 * i], slices[2 * n + 2 * i + 1]
                parts += [dy, dy * ((x - bc(mean)) * bc(rstd))]
            return parts

        pairs = [t for dy, x in zip(dys, xs) for t in (dy, x)]
        stats = [t for mean, rstd in zip(means, rstds) for t in (mean, rstd)]
        sums, stat = _channel_sums(dy_and_dy_xhat, 2 * n, 5 * n, pairs + stats, channel_dim,
                                   "bngrad")
        sums = mtf.unstack(sums, stat)
        dxs = [_input_gradient(dys[i], xs[i], scales[i], means[i], rstds[i], sums[2 * i],
                               sums[2 * i + 1], output_grads[n + 2 * i],
                               output_grads[n + 2 * i + 1], count, channel_dim)
               for i in range(n)]
        # The shifts (the moving means, under stop_gradient) are the only other
        # inputs: zeros rather than None, which mtf reports as a warning.
        return (dxs + sums[1::2] + sums[0::2]
                + [mtf.zeros_like(t) for t in all_inputs[3 * n:]])

    outputs = mtf.custom_gradient(forward, backward, list(xs) + list(scales) + list(offsets))
    # for the graph-derived cost tables: the backward all-reduces over the batch
    # nothing but the gradients of scale and offset, priced as parameters
    setattr(outputs[0].operation, BACKWARD_BATCH_SUMS, [])
    return [(outputs[i], outputs[n + 2 * i], outputs[n + 2 * i + 1]) for i in range(n)]


def _input_gradient(dy, x, scale, mean, rstd, d_offset, d_scale, dmean, dvariance, count,
                    channel_dim):
    """``dx`` of batch normalisation from the two all-reduced sums."""
    # dx = (dy - (d_offset + xhat * d_scale) / count) * a, written per channel as
    # a * dy + k1 * (x - mean) + k0; the mean and variance are outputs too (the
    # moving averages read them): a gradient reaching them through another path
    # adds dmean / count to k0 and 2 dvariance / count to k1, exactly.
    a = scale * rstd
    k1 = a * rstd * d_scale * (-1.0 / count)
    k0 = a * d_offset * (-1.0 / count)
    if dmean is not None:
        k0 += dmean * (1.0 / count)
    if dvariance is not None:
        k1 += dvariance * (2.0 / count)

    def input_gradient(bc, dy, x, a, k1, mean, k0):
        return dy * bc(a) + (x - bc(mean)) * bc(k1) + bc(k0)

    return _channel_wise(input_gradient, 5, [dy, x], [a, k1, mean, k0], channel_dim,
                         "bn_input_gradient")


def _normalise_local(x, scale, offset, shift, channel_dim, epsilon):
    """``(y, mean, variance)`` of batch normalisation in training with each device's
    share of the batch as its normalisation group: no collective forward or
    backward on the activations' path.

    The statistics travel as per-sample rows ``[stat=2, batch, channel]`` (each
    sample carries its share's mean and variance), so mtf's semantics hold: the
    moving averages' ``mean`` and ``variance`` are the rows' mean over the batch
    (the batch's mean exactly; the mean of the shares' variances), an all-reduce
    that only the step's variable writes wait for. Backward, per-sample sums of ``dy`` and
    ``dy * xhat`` give the share's sums for ``dx`` locally and, summed over the
    batch, the gradients of ``offset`` and ``scale``: pending all-reduces that
    the optimizer bucket sends with the weight gradients. On a mesh that does
    not split the batch, the group is the whole batch: the global formula.
    """
    batch = x.shape.dims[0]
    stat = mtf.Dimension(f"{channel_dim.name}_bnlocal", 2)
    channel_axis = x.shape.dims.index(channel_dim)
    groups = [i for i in range(x.shape.ndims) if i != channel_axis]     # batch and space
    space = [i for i in groups if i != 0]

    def rows_of(per_channel, like):  # [C] slices -> [2, local batch, C]
        return tf.broadcast_to(tf.stack(per_channel)[:, None, :],
                               [2, tf.shape(like)[0], tf.shape(per_channel[0])[0]])

    def forward_slices(x, scale, offset, shift):
        count = x.shape.num_elements() // int(x.shape[channel_axis])
        view = _ChannelView(x, channel_axis)
        flat, bc = view.flat(x), view.bc
        centred = flat - bc(shift)
        m1 = tf.reduce_sum(view.restore(centred), groups) / count
        variance = tf.nn.relu(tf.reduce_sum(view.restore(tf.square(centred)), groups) / count
                              - tf.square(m1))
        mean = shift + m1
        a = scale * tf.math.rsqrt(variance + epsilon)
        y = view.restore(flat * bc(a) + bc(offset - mean * a))
        return y, rows_of([mean, variance], x)

    def forward(x, scale, offset):
        y, rows = mtf.slicewise(
            forward_slices, [x, scale, offset, mtf.stop_gradient(shift)],
            output_shape=[x.shape, mtf.Shape([stat, batch, channel_dim])],
            output_dtype=[x.dtype, x.dtype], splittable_dims=x.shape.dims,
            name="bn_local_forward")
        setattr(y.operation, ELEMENTWISE_FLOPS, 6)  # as batch_statistics + scale_and_shift
        mean, variance = mtf.unstack(
            mtf.reduce_sum(rows, output_shape=[stat, channel_dim]) * (1.0 / batch.size), stat)
        return y, rows, mean, variance

    def backward_slices(dy, x, rows, scale):
        count = x.shape.num_elements() // int(x.shape[channel_axis])
        mean, rstd = rows[0, 0], tf.math.rsqrt(rows[1, 0] + epsilon)
        view = _ChannelView(x, channel_axis)
        flat_dy, bc = view.flat(dy), view.bc
        xhat = (view.flat(x) - bc(mean)) * bc(rstd)
        per_sample = [tf.reduce_sum(dy, space),
                      tf.reduce_sum(view.restore(flat_dy * xhat), space)]  # [b, C]
        s0, s1 = (tf.reduce_sum(p, 0) for p in per_sample)
        dx = bc(scale * rstd) * (flat_dy - (bc(s0) + xhat * bc(s1)) / count)
        return view.restore(dx), per_sample[0], per_sample[1]

    def backward(explicit_inputs, all_inputs, forward_operations, outputs, output_grads):
        del forward_operations
        x, scale, _ = explicit_inputs
        _, rows, _, _ = outputs
        dy, *others = output_grads
        if any(g is not None for g in others):
            raise ValueError("batch_norm(statistics='local'): its statistics are not "
                             "differentiable (only the moving averages read them)")
        per_sample = mtf.Shape([batch, channel_dim])
        dx, dy_rows, dy_xhat_rows = mtf.slicewise(
            backward_slices, [dy, x, rows, scale],
            output_shape=[x.shape, per_sample, per_sample], output_dtype=[x.dtype] * 3,
            splittable_dims=x.shape.dims, name="bn_local_backward")
        setattr(dx.operation, ELEMENTWISE_FLOPS, 10)
        d_offset = mtf.reduce_sum(dy_rows, output_shape=[channel_dim])
        d_scale = mtf.reduce_sum(dy_xhat_rows, output_shape=[channel_dim])
        return [dx, d_scale, d_offset] + [mtf.zeros_like(t) for t in all_inputs[3:]]

    y, _, mean, variance = mtf.custom_gradient(forward, backward, [x, scale, offset])
    setattr(y.operation, BACKWARD_BATCH_SUMS, [])
    return y, mean, variance


def gather(x, old_name, new_name):
    """Rename a (split) channel dimension to an unsplit one: an all-concat.

    The next layer contracts over the whole channel dimension, so each device
    needs all of it; the layout decides whether ``old_name`` was split.
    """
    return mtf.rename_dimension(x, old_name, new_name)
