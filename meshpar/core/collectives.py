"""Collectives over uneven slices, and the default sizes they cut by.

:class:`UnevenCollectives` is the collective half of
:class:`~meshpar.core.mesh_impl.HeterogeneousMeshImpl`: all-reduce, allsplit,
alltoall and receive (shifts) over slices whose lengths differ between
processors (allconcat is Mesh-TF's, which concatenates pieces of any length).

Sizes are explicit. :meth:`~UnevenCollectives.allsplit` and
:meth:`~UnevenCollectives.alltoall` cut a tensor axis into ``sizes``, one
length per coordinate of the mesh axis: a list, an ``mtf.Dimension`` (its own
split on that axis, from the mesh's weights), or :data:`EVEN`, the named
default, equal pieces. Nothing about the caller's context changes which one is
used.
"""
from __future__ import annotations

import functools
import numbers

import meshpar  # noqa: F401  (installs the mesh_tensorflow import shim)
from meshpar import _compat
from meshpar.core.splits import even_sizes, offsets

mtf = _compat.import_mesh_tensorflow()
from mesh_tensorflow import placement_mesh_impl as _pmi  # noqa: E402
import tensorflow.compat.v1 as tf  # noqa: E402


class UnevenLayoutError(ValueError):
    """An operation needs equal slices but a dimension is split unevenly."""


#: The default ``sizes`` of :meth:`UnevenCollectives.allsplit` and
#: :meth:`~UnevenCollectives.alltoall`: equal pieces (Mesh-TF's rule, here without
#: its divisibility requirement), whatever the mesh's weights. Upstream
#: lowerings, written for equal slices, call the collectives without sizes.
EVEN = None


def _prod(values) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


class UnevenCollectives:
    """Collectives of a placement mesh whose slices may differ in length.

    A mixin for a ``PlacementMeshImpl`` subclass that provides ``_where()``
    (the op being lowered, for errors), ``pcoord()`` and ``dim_sizes()``.
    """

    def allreduce(self, x, mesh_axes, reduction_fn_string):
        """Reduce ``x`` over ``mesh_axes`` with a ring all-reduce that takes unequal chunks.

        ``reduction_fn_string`` is mtf's name of the reduction (``"SUM"``, ``"MAX"``, ...).
        """
        return self._collective_with_groups(
            x, mesh_axes, functools.partial(
                allreduce_ring_uneven, reduction_fn_string=reduction_fn_string))

    def _piece_sizes(self, sizes, total: int, mesh_axis: int, what: str) -> list:
        """The pieces a collective cuts a length-``total`` axis into (see :data:`EVEN`)."""
        axis = self.shape.dims[mesh_axis]
        if sizes is EVEN:
            return even_sizes(total, axis.size, f"{self._where()}{what}: a piece of length"
                                                f" {total} on mesh axis {axis.name!r}")
        if isinstance(sizes, mtf.Dimension):
            sizes = self.dim_sizes(sizes, mesh_axis)
        sizes = [int(s) for s in sizes]
        if len(sizes) != axis.size or sum(sizes) != total or min(sizes) < 0:
            raise ValueError(
                f"{self._where()}{what} sizes {sizes} do not cut a length of {total} into"
                f" {axis.size} pieces (one per coordinate of mesh axis {axis.name!r})")
        return sizes

    def allsplit(self, x, mesh_axis, split_axis, which=None, sizes=EVEN):
        """Keep one piece of each slice along tensor axis ``split_axis`` (inverse
        of :meth:`allconcat`).

        Parameters
        ----------
        x : LaidOutTensor
        mesh_axis, split_axis : int
            The mesh axis whose coordinates own the pieces; the tensor axis cut.
        which : LaidOutTensor or int, optional
            The piece each processor keeps; default its coordinate on
            ``mesh_axis``. Tensor-valued (not Python ints) needs equal pieces.
        sizes : :data:`EVEN`, list of int or mtf.Dimension
            One length per coordinate of ``mesh_axis``, summing to the slices'
            length along ``split_axis``. :data:`EVEN` (the default): equal
            pieces. A Dimension: its own split on ``mesh_axis`` (:meth:`dim_sizes`).
        """
        x = x.to_laid_out_tensor()
        if which is None:
            which = [self.pcoord(p, mesh_axis) for p in range(self.size)]
        elif isinstance(which, self.LaidOutTensor):
            which = which.tensor_list
        else:
            which = [which] * self.size

        def keep(pnum, piece):
            ndims = piece.shape.ndims
            these = self._piece_sizes(sizes, piece.shape.as_list()[split_axis], mesh_axis,
                                      "allsplit")
            begin, size = [0] * ndims, [-1] * ndims
            w = which[pnum]
            if isinstance(w, numbers.Integral):
                begin[split_axis], size[split_axis] = offsets(these)[w], these[w]
                return tf.slice(piece, begin, size)
            if len(set(these)) != 1:
                raise UnevenLayoutError(
                    f"{self._where()}allsplit with a tensor-valued 'which' needs equal"
                    f" pieces, got {these} on mesh axis {self.shape.dims[mesh_axis].name!r}")
            size[split_axis] = these[0]
            start = tf.one_hot(split_axis, ndims, dtype=tf.int32) * (tf.cast(w, tf.int32) * these[0])
            return tf.slice(piece, start, size)

        return self.slicewise(keep, self.laid_out_pnum(), x)

    def alltoall(self, x, mesh_axis, split_axis, concat_axis, sizes=EVEN):
        """Grouped alltoall: cut every slice along ``split_axis`` into ``sizes``
        (as :meth:`allsplit`; default :data:`EVEN`), send piece ``i`` to
        coordinate ``i`` of ``mesh_axis``, concatenate what arrives along
        ``concat_axis``."""
        x = x.to_laid_out_tensor()
        if self.shape[mesh_axis].size == 1:
            return x

        def exchange(xs, devices):
            total = xs[0].shape.as_list()[split_axis]
            these = self._piece_sizes(sizes, total, mesh_axis, "alltoall")
            parts = []  # parts[source][target]
            for source, device in zip(xs, devices):
                if source.shape.as_list()[split_axis] != total:
                    raise UnevenLayoutError(
                        f"{self._where()}alltoall over mesh axis"
                        f" {self.shape.dims[mesh_axis].name!r}: the split axis has"
                        f" different sizes on different processors")
                with tf.device(device):
                    parts.append(tf.split(source, these, axis=split_axis))
            outputs = []
            for target, device in enumerate(devices):
                with tf.device(device):
                    outputs.append(tf.concat([parts[s][target] for s in range(len(xs))],
                                             axis=concat_axis))
            return outputs

        return self._collective_with_groups(x, [mesh_axis], exchange)

    def receive(self, x, mesh_axis, source_pcoord):
        """Each processor takes the slice of processor ``source_pcoord[its pcoord]`` along
        ``mesh_axis`` (zeros where that is None), as Mesh-TF's ``receive`` (shifts).

        :class:`UnevenLayoutError` naming the op when source and target slices differ
        in shape: shifting needs equal slices along the axis.
        """
        x = x.to_laid_out_tensor()

        def receive_in_group(xs, devices):
            out = []
            for pcoord, device in enumerate(devices):
                own = xs[pcoord].shape.as_list()
                with tf.device(device):
                    source = source_pcoord[pcoord]
                    if source is None:
                        out.append(tf.zeros(own, xs[pcoord].dtype))
                        continue
                    if xs[source].shape.as_list() != own:
                        raise UnevenLayoutError(
                            f"{self._where()}shifting slices along mesh axis"
                            f" {self.shape.dims[mesh_axis].name!r} needs equal slices, got"
                            f" {xs[source].shape.as_list()} and {own}")
                    out.append(tf.identity(xs[source]))
            return out

        return self._collective_with_groups(x, [mesh_axis], receive_in_group)


def allreduce_ring_uneven(xs, devices, reduction_fn_string="SUM"):
    """Ring all-reduce whose chunks need not be equal.

    The flattened tensor is cut into ``len(xs)`` chunks by the split rule (any
    size works, no divisibility), each chunk is reduced along the ring starting
    at a different device, and the chunks are put back together.
    """
    n = len(xs)
    if len(devices) != n:
        raise ValueError("allreduce: need one device per tensor")
    if n == 1:
        return xs
    shape = xs[0].shape.as_list()
    for x in xs[1:]:
        if x.shape.as_list() != shape:
            raise UnevenLayoutError(
                f"allreduce over processors holding slices of different shapes"
                f" ({shape} and {x.shape.as_list()})")
    size = None if None in shape else _prod(shape)
    # Two devices: each adds the other's whole tensor, one message each way;
    # chunking would only double the messages and add split/concat ops.
    if n == 2 or size is None or size < max(1024, n):
        return _pmi.allreduce_ring_single_shard(xs, devices, reduction_fn_string)
    chunk_sizes = even_sizes(size, n, "allreduce chunks")
    chunks = mtf.parallel(devices, lambda t: tf.split(tf.reshape(t, [-1]), chunk_sizes), xs)
    reduced = [[None] * n for _ in range(n)]  # reduced[device][chunk]
    for c in range(n):
        order = [(c + k) % n for k in range(n)]  # this chunk's ring starts at device c
        ys = _pmi.allreduce_ring_single_shard(
            [chunks[d][c] for d in order], [devices[d] for d in order], reduction_fn_string)
        for d, y in zip(order, ys):
            reduced[d][c] = y
    return mtf.parallel(devices, lambda parts: tf.reshape(tf.concat(parts, 0), shape), reduced)
