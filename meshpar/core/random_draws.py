"""Counter-based uniform draws: each element of a random tensor is a hash of its
position in the whole tensor and of a key, so any cut of the tensor over a mesh
(uneven splits, any layout or device order) draws the values one device draws.
:meth:`meshpar.core.mesh_impl.HeterogeneousMeshImpl.random` uses it for
``mtf.random_uniform`` (hence ``mtf.dropout``) and, through two such draws per
element (Box-Muller), for ``mtf.random_normal``."""
from __future__ import annotations

import math
import operator
from typing import Optional

import tensorflow.compat.v1 as tf


def uniform_arguments(tf_fn, kwargs) -> Optional[tuple]:
    """``(minval, maxval, dtype)`` when ``tf_fn(shape, **kwargs)`` is a uniform draw that
    :func:`uniform_at` makes (``tf.random.uniform`` of a float dtype, or of an integer
    dtype with integer bounds, Python's or numpy's, less than 2**32 apart); None
    otherwise."""
    if tf_fn not in (tf.random.uniform, tf.random_uniform):
        return None
    if set(kwargs) - {"minval", "maxval", "dtype", "name"}:
        return None
    dtype = tf.as_dtype(kwargs.get("dtype", tf.float32))
    minval, maxval = kwargs.get("minval", 0), kwargs.get("maxval")
    if dtype.is_floating:
        return minval, 1 if maxval is None else maxval, dtype
    if dtype.is_integer:
        minval, maxval = _integer(minval), _integer(maxval)
        if minval is not None and maxval is not None and 0 < maxval - minval <= 2 ** 32:
            return minval, maxval, dtype
    return None


def _integer(value) -> Optional[int]:
    """``value`` as a Python int if it is an integer (a numpy integer too: a bound a
    network computed with numpy), else None (a tensor, a float, a bool, None)."""
    if isinstance(value, (bool, float)) or value is None:
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def normal_arguments(tf_fn, kwargs) -> Optional[tuple]:
    """``(mean, stddev, dtype)`` when ``tf_fn(shape, **kwargs)`` is a normal draw that
    :func:`normal_at` makes (``tf.random.normal`` of a float dtype); None otherwise."""
    if tf_fn is not tf.random.normal or set(kwargs) - {"mean", "stddev", "dtype", "name"}:
        return None
    dtype = tf.as_dtype(kwargs.get("dtype", tf.float32))
    if not dtype.is_floating:
        return None
    return kwargs.get("mean", 0.0), kwargs.get("stddev", 1.0), dtype


def mix32(x):
    """A bijective 32-bit integer hash (Chris Wellons' "lowbias32") of a uint32 tensor."""
    def shift_xor(v, bits):
        return tf.bitwise.bitwise_xor(v, tf.bitwise.right_shift(v, tf.constant(bits, tf.uint32)))

    x = shift_xor(x, 16) * tf.constant(0x7FEB352D, tf.uint32)
    x = shift_xor(x, 15) * tf.constant(0x846CA68B, tf.uint32)
    return shift_xor(x, 16)


def uniform_at(full_shape, begin, size, keys, minval, maxval, dtype):
    """The uniform values of the elements ``begin .. begin + size`` of a tensor of
    ``full_shape``: each a hash of the element's flat index in the whole tensor and of
    ``keys`` (a uint32 tensor of two words), so any cut of the tensor draws the same
    values."""
    strides, stride = [], 1
    for extent in reversed(full_shape):
        strides.insert(0, stride)
        stride *= int(extent)
    index = tf.zeros(size, tf.int64)
    for axis, (start, extent, step) in enumerate(zip(begin, size, strides)):
        line = [1] * len(size)
        line[axis] = extent
        index += tf.reshape(tf.range(start, start + extent, dtype=tf.int64) * step, line)
    low = tf.cast(tf.bitwise.bitwise_and(index, 0xFFFFFFFF), tf.uint32)
    if stride > 2 ** 32:  # the high words of the flat indices are not all 0
        high = tf.cast(tf.bitwise.right_shift(index, tf.constant(32, tf.int64)), tf.uint32)
    else:
        high = tf.zeros([], tf.uint32)
    bits = mix32(tf.bitwise.bitwise_xor(mix32(tf.bitwise.bitwise_xor(low, keys[0])),
                                         mix32(tf.bitwise.bitwise_xor(high, keys[1]))))
    if dtype.is_integer:
        offset = tf.math.floormod(tf.cast(bits, tf.int64), maxval - minval)
        return tf.cast(offset + minval, dtype)
    if dtype == tf.float64:  # 53 random bits: 27 from a second hash of these
        more = tf.bitwise.right_shift(
            mix32(tf.bitwise.bitwise_xor(bits, tf.constant(0x9E3779B9, tf.uint32))),
            tf.constant(5, tf.uint32))
        unit = (tf.cast(tf.bitwise.right_shift(bits, tf.constant(6, tf.uint32)), tf.float64)
                * 2.0 ** 27 + tf.cast(more, tf.float64)) * 2.0 ** -53
    else:  # as many bits as the dtype's significand holds: exact and below 1 in it
        digits = {tf.float16: 11, tf.bfloat16: 8}.get(dtype, 24)
        unit = tf.cast(tf.bitwise.right_shift(bits, tf.constant(32 - digits, tf.uint32)),
                       tf.float32) * 2.0 ** -digits
    low_t = tf.cast(minval, unit.dtype)
    return tf.cast(low_t + unit * (tf.cast(maxval, unit.dtype) - low_t), dtype)


def normal_at(full_shape, begin, size, keys, mean, stddev, dtype):
    """The normal values of the elements ``begin .. begin + size`` of a tensor of
    ``full_shape`` (as :func:`uniform_at`, any cut draws the same values): Box-Muller
    of two uniform draws of each element's position, the second under other keys,
    computed in float64 so that rounding does not depend on the cut either."""
    first = uniform_at(full_shape, begin, size, keys, 0.0, 1.0, tf.float64)
    other = tf.bitwise.bitwise_xor(keys, tf.constant([0x85EBCA6B, 0xC2B2AE35], tf.uint32))
    second = uniform_at(full_shape, begin, size, other, 0.0, 1.0, tf.float64)
    radius = tf.sqrt(-2.0 * tf.math.log1p(-first))  # 1 - first in (0, 1]: finite
    z = radius * tf.cos((2.0 * math.pi) * second)
    return tf.cast(tf.cast(mean, tf.float64) + tf.cast(stddev, tf.float64) * z, dtype)


def step_key(step, seed: int):
    """Two uint32 words for training step ``step`` (a TF integer scalar) and ``seed``
    (a Python integer below 2**31): a hash of the two, so every processor that
    computes it in one step holds the same key, and a resumed run the key an
    uninterrupted one would have."""
    step = tf.cast(step, tf.int64)
    low = tf.cast(tf.bitwise.bitwise_and(step, 0xFFFFFFFF), tf.uint32)
    high = tf.cast(tf.bitwise.right_shift(step, tf.constant(32, tf.int64)), tf.uint32)
    first = mix32(tf.bitwise.bitwise_xor(
        mix32(tf.bitwise.bitwise_xor(low, tf.constant(seed, tf.uint32))), high))
    return tf.stack([first, mix32(tf.bitwise.bitwise_xor(
        first, tf.constant(0x9E3779B9, tf.uint32)))])
