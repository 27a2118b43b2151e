"""HeterogeneousMeshImpl: Mesh-TensorFlow's placement mesh with uneven slices.

Mesh-TensorFlow cuts a tensor dimension laid out on a mesh axis into equal
slices and requires the axis size to divide the dimension. Here every
coordinate of a mesh axis gets its own share, from weights (e.g. device
speeds), through the one split rule :func:`meshpar.core.splits.split_sizes`.

Per-axis semantics: all processors with the same coordinate on an axis get the
same share of every dimension laid out on that axis. On a mesh
``batch:2;model:3`` with weights ``{"batch": [2, 1], "model": [3, 2, 1]}`` a
batch of 12 and a 12-filter convolution are cut like this::

    pnum  coords(batch, model)  batch rows  filters
    0     (0, 0)                0..7        0..5
    1     (0, 1)                0..7        6..9
    2     (0, 2)                0..7        10..11
    3     (1, 0)                8..11       0..5
    4     (1, 1)                8..11       6..9
    5     (1, 2)                8..11       10..11

Collectives (allreduce, allconcat, allsplit, alltoall, receive) take uneven
pieces; the mtf ops whose own lowering assumes one slice shape for all
processors are handled in :mod:`meshpar.core.lowering`.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import random as _py_random
from typing import Mapping, Optional, Sequence

import meshpar  # noqa: F401  (installs the mesh_tensorflow import shim)
from meshpar import _compat
from meshpar.core import lowering
from meshpar.core.splits import even_sizes, offsets, split_sizes, validate_weights

mtf = _compat.import_mesh_tensorflow()
from mesh_tensorflow import placement_mesh_impl as _pmi  # noqa: E402
import tensorflow.compat.v1 as tf  # noqa: E402


class UnevenLayoutError(ValueError):
    """An operation needs equal slices but a dimension is split unevenly."""


def _as_dimension(dim) -> "mtf.Dimension":
    if isinstance(dim, mtf.Dimension):
        return dim
    if isinstance(dim, (tuple, list)) and len(dim) == 2:
        return mtf.Dimension(str(dim[0]), int(dim[1]))
    raise TypeError(f"expected an mtf.Dimension or (name, size), got {dim!r}")


def _prod(values) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def _weights_for_axis(weights, axis, what: str) -> tuple:
    """Validated weights, one per coordinate of mesh dimension ``axis``."""
    values = validate_weights(weights, what)
    if len(values) != axis.size:
        raise ValueError(f"{what} has {len(values)} weights; mesh axis {axis.name!r} has"
                         f" {axis.size} coordinates")
    return tuple(values)


class HeterogeneousMeshImpl(_pmi.PlacementMeshImpl):
    """A drop-in :class:`PlacementMeshImpl` whose slices may differ in size.

    Parameters
    ----------
    shape : mtf.Shape, str or list
        Mesh shape, e.g. ``"batch:2;model:3"``.
    layout : mtf.LayoutRules, str or list
        Layout rules, e.g. ``"batch:batch;filters:model"``.
    devices : list of str
        One device string per processor, in row-major mesh order.
    split_weights : dict, optional
        ``{mesh_axis_name: [w_0, ..., w_{n-1}]}``: one positive weight per
        coordinate of that axis (e.g. relative device speeds). Axes not named
        split evenly (any size, no divisibility needed).
    dim_split_weights : dict, optional
        ``{tensor_dim_name: [w_0, ...]}``: per-dimension weights that override
        the axis weights for that dimension (per-layer ratios).

    Examples
    --------
    >>> impl = HeterogeneousMeshImpl("model:3", "filters:model", [""] * 3,
    ...                              split_weights={"model": [0.5, 0.3, 0.2]})
    >>> impl.split_sizes(mtf.Dimension("filters", 13))
    [6, 4, 3]
    """

    def __init__(self, shape, layout, devices: Sequence[str],
                 split_weights: Optional[Mapping[str, Sequence[float]]] = None,
                 dim_split_weights: Optional[Mapping[str, Sequence[float]]] = None):
        # Not super().__init__: PlacementMeshImpl.__init__ names its own class
        # through a module global, which tests may point at this class.
        mtf.MeshImpl.__init__(self, shape, layout)
        lowering.install()  # uneven-aware lowerings of the ops that assume one slice shape
        self._devices = list(devices)
        self.copy_master_to_slice_ops = []
        if len(self._devices) != self.size:
            raise ValueError(
                f"mesh {self.shape} has {self.size} processors but {len(self._devices)}"
                f" devices were given")
        axis_names = [d.name for d in self.shape.dims]
        self._check_layout(axis_names)
        self._split_weights = {}
        for axis, weights in (split_weights or {}).items():
            if axis not in axis_names:
                raise ValueError(
                    f"split_weights names mesh axis {axis!r}, which is not in mesh"
                    f" {self.shape} (axes: {axis_names})")
            self._split_weights[axis] = _weights_for_axis(
                weights, self.shape.dims[axis_names.index(axis)],
                f"split_weights for mesh axis {axis!r}")
        self._dim_split_weights = {}
        for dim_name, weights in (dim_split_weights or {}).items():
            axis = self._layout_axis_of_name(dim_name)
            if axis is None:
                raise ValueError(
                    f"dim_split_weights names tensor dimension {dim_name!r}, which the"
                    f" layout {self.layout_rules} does not put on any axis of mesh"
                    f" {self.shape}")
            self._dim_split_weights[dim_name] = _weights_for_axis(
                weights, self.shape.dims[axis], f"dim_split_weights for dimension {dim_name!r}")
        self._current_pnum = None     # set while slicewise() calls fn for one processor
        self._current_op = None       # the mtf op being lowered (for error messages)
        self._even_collectives = False
        self._sizes_cache = {}

    @classmethod
    def from_plan(cls, plan, devices: Optional[Sequence[str]] = None) -> "HeterogeneousMeshImpl":
        """The mesh of a :class:`~meshpar.planning.plan.Plan`.

        ``devices`` replaces the plan's device strings (same count, pnum order).
        """
        devs = list(plan.devices if devices is None else devices)
        if len(devs) != len(plan.devices):
            raise ValueError(f"plan needs {len(plan.devices)} devices, got {len(devs)}")
        return cls(plan.mesh_shape_string(), plan.layout_string(), devs,
                   split_weights={k: list(v) for k, v in plan.split_weights.items()},
                   dim_split_weights={k: list(v) for k, v in plan.dim_split_weights.items()})

    # ------------------------------------------------------------------ layout
    def _check_layout(self, axis_names):
        seen = {}
        for tensor_dim, mesh_dim in sorted(self.layout_rules._pairs):  # pylint: disable=protected-access
            if mesh_dim in axis_names and tensor_dim in seen and seen[tensor_dim] != mesh_dim:
                raise ValueError(
                    f"layout puts tensor dimension {tensor_dim!r} on two mesh axes"
                    f" ({seen[tensor_dim]!r} and {mesh_dim!r})")
            seen[tensor_dim] = mesh_dim

    def _layout_axis_of_name(self, dim_name: str) -> Optional[int]:
        return self.tensor_dimension_to_mesh_axis(mtf.Dimension(dim_name, 1))

    def tensor_layout(self, arg):
        """Mesh-TF's tensor layout, with errors naming the mtf op being lowered."""
        try:
            return super().tensor_layout(arg)
        except ValueError as err:
            raise ValueError(f"{self._where()}bad layout for {arg}: {err}") from None

    @property
    def split_weights(self) -> dict:
        """Per-axis weights given at construction (axis name -> tuple)."""
        return dict(self._split_weights)

    @property
    def dim_split_weights(self) -> dict:
        """Per-dimension weights given at construction (dim name -> tuple)."""
        return dict(self._dim_split_weights)

    def weights_for(self, dim, mesh_axis: Optional[int] = None) -> Optional[tuple]:
        """Weights used to split ``dim``; None means an even split."""
        dim = _as_dimension(dim)
        if dim.name in self._dim_split_weights:
            return self._dim_split_weights[dim.name]
        if mesh_axis is None:
            mesh_axis = self.tensor_dimension_to_mesh_axis(dim)
        if mesh_axis is None:
            return None
        return self._split_weights.get(self.shape.dims[mesh_axis].name)

    def dim_sizes(self, dim, mesh_axis: int) -> list:
        """Sizes of ``dim`` along ``mesh_axis`` (one per coordinate)."""
        dim = _as_dimension(dim)
        key = (dim.name, dim.size, mesh_axis)
        sizes = self._sizes_cache.get(key)
        if sizes is None:
            axis = self.shape.dims[mesh_axis]
            what = (f"{self._where()}tensor dimension {dim.name!r} (size {dim.size}) on"
                    f" mesh axis {axis.name!r}")
            weights = self.weights_for(dim, mesh_axis)
            if weights is None:
                sizes = even_sizes(dim.size, axis.size, what)
            else:
                sizes = split_sizes(dim.size, weights, what)
            self._sizes_cache[key] = sizes
        return list(sizes)

    def split_sizes(self, dim) -> Optional[list]:
        """Sizes of ``dim`` per coordinate of the mesh axis it is laid out on.

        Returns None if the layout does not split ``dim``.
        """
        dim = _as_dimension(dim)
        mesh_axis = self.tensor_dimension_to_mesh_axis(dim)
        if mesh_axis is None:
            return None
        return self.dim_sizes(dim, mesh_axis)

    def axis_sizes(self, total: int, mesh_axis: int) -> list:
        """Sizes of an anonymous dimension of size ``total`` split by the axis weights."""
        axis = self.shape.dims[mesh_axis]
        weights = None if self._even_collectives else self._split_weights.get(axis.name)
        what = f"{self._where()}a dimension of size {total} on mesh axis {axis.name!r}"
        if weights is None:
            return even_sizes(total, axis.size, what)
        return split_sizes(total, weights, what)

    def pcoord(self, pnum: int, mesh_axis: int) -> int:
        """Coordinate of processor ``pnum`` along mesh axis ``mesh_axis`` (row-major pnums)."""
        return mtf.pnum_to_processor_coordinates(self.shape, pnum)[mesh_axis]

    # ----------------------------------------------------------- slice shapes
    def _split_axes(self, tensor_shape):
        layout = self.tensor_layout(tensor_shape)
        return list(zip(tensor_shape.dims, layout.tensor_axis_to_mesh_axis))

    def slice_shape(self, tensor_shape, pnum: Optional[int] = None) -> list:
        """Shape of processor ``pnum``'s slice of a tensor of ``tensor_shape``.

        Without ``pnum``: inside :meth:`slicewise` the processor being built;
        elsewhere the common slice shape, which exists only if every processor
        has the same one (otherwise :class:`UnevenLayoutError`).
        """
        tensor_shape = mtf.convert_to_shape(tensor_shape)
        if pnum is None:
            pnum = self._current_pnum
        if pnum is not None:
            coords = mtf.pnum_to_processor_coordinates(self.shape, pnum)
            return [dim.size if axis is None else self.dim_sizes(dim, axis)[coords[axis]]
                    for dim, axis in self._split_axes(tensor_shape)]
        shape = []
        for dim, axis in self._split_axes(tensor_shape):
            if axis is None:
                shape.append(dim.size)
                continue
            sizes = self.dim_sizes(dim, axis)
            if len(set(sizes)) != 1:
                raise UnevenLayoutError(
                    f"{self._where()}needs equal slices, but tensor dimension"
                    f" {dim.name!r} (size {dim.size}) is split {sizes} over mesh axis"
                    f" {self.shape.dims[axis].name!r}; this operation does not support an"
                    f" uneven layout of that dimension (lay it out evenly or not at all)")
            shape.append(sizes[0])
        return shape

    def slice_shapes(self, tensor_shape) -> list:
        """Slice shape of every processor, in pnum order."""
        return [self.slice_shape(tensor_shape, p) for p in range(self.size)]

    def slice_begin(self, tensor_shape, pnum: int) -> list:
        """Offset of processor ``pnum``'s slice in each tensor dimension (uneven offsets:
        the sum of the sizes of the lower coordinates).
        """
        tensor_shape = mtf.convert_to_shape(tensor_shape)
        coords = mtf.pnum_to_processor_coordinates(self.shape, pnum)
        return [0 if axis is None else offsets(self.dim_sizes(dim, axis))[coords[axis]]
                for dim, axis in self._split_axes(tensor_shape)]

    def is_uneven(self, tensor_shape) -> bool:
        """True if some processors hold slices of different shapes."""
        tensor_shape = mtf.convert_to_shape(tensor_shape)
        return any(axis is not None and len(set(self.dim_sizes(dim, axis))) > 1
                   for dim, axis in self._split_axes(tensor_shape))

    def slice_size(self, tensor_shape) -> int:
        """Elements of the largest slice (what bounds per-device memory)."""
        return max(_prod(s) for s in self.slice_shapes(mtf.convert_to_shape(tensor_shape)))

    def laid_out_size(self, tensor_shape) -> int:
        """Total elements over all slices (replicated dimensions counted on every processor)."""
        return sum(_prod(s) for s in self.slice_shapes(mtf.convert_to_shape(tensor_shape)))

    # -------------------------------------------------------------- plumbing
    def _where(self) -> str:
        op = self._current_op
        if op is None:
            return ""
        return f"mtf op {op.name!r} ({type(op).__name__}): "

    @contextlib.contextmanager
    def on_processor(self, pnum: int):
        """Within: :meth:`slice_shape` without pnum means processor ``pnum``."""
        previous, self._current_pnum = self._current_pnum, pnum
        try:
            yield
        finally:
            self._current_pnum = previous

    @contextlib.contextmanager
    def even_collectives(self):
        """Within: collectives called without sizes split evenly (used when an
        upstream lowering, written for equal slices, runs on an even layout)."""
        previous, self._even_collectives = self._even_collectives, True
        try:
            yield
        finally:
            self._even_collectives = previous

    def slicewise(self, fn, *inputs):
        """Apply ``fn`` to each processor's slices on that processor's device.

        Non-laid-out inputs are passed whole to every processor; a tuple result gives
        a tuple of laid-out tensors.
        """
        inputs = mtf.convert_args_to_laid_out_tensors(inputs)
        inputs = [x.tensor_list if isinstance(x, self.LaidOutTensor) else [x] * self.size
                  for x in inputs]
        outputs = []
        for pnum, device in enumerate(self._devices):
            with tf.device(device), self.on_processor(pnum):
                outputs.append(fn(*[x[pnum] for x in inputs]))
        if isinstance(outputs[0], tuple):
            return tuple(self.LaidOutTensor(list(t)) for t in zip(*outputs))
        return self.LaidOutTensor(outputs)

    # ------------------------------------------------------------- variables
    class LaidOutVariable(_pmi.PlacementMeshImpl.LaidOutVariable):
        """Slice variables of per-processor shapes, and master <-> slice copies."""

        def __init__(self, variable, mesh_impl):  # pylint: disable=super-init-not-called
            self._variable = variable
            self._mesh_impl = mesh_impl
            shape = variable.outputs[0].shape
            master = variable.get_master()
            if self.slice_is_master:
                self._laid_out_tensor = mesh_impl.LaidOutTensor([master])
                self._copy_slices_to_master = tf.group([])
                self._copy_master_to_slices = tf.group([])
                return
            slices, as_master_dtype = [], []
            for pnum, device in enumerate(mesh_impl.devices):
                with tf.device(device):
                    var = tf.get_variable(
                        f"{variable.name}_slice_{pnum}",
                        mesh_impl.slice_shape(shape, pnum),
                        dtype=variable.slice_dtype, collections=[])
                    slices.append(var)
                    as_master_dtype.append(tf.cast(var, variable.master_dtype))
            self._laid_out_tensor = mesh_impl.LaidOutTensor(slices)
            self._copy_master_to_slices = self.assign_to_slices(
                mtf.assign_slice, mesh_impl.make_slices(master, shape))
            self._copy_slices_to_master = variable.assign_to_master(
                mesh_impl.combine_slices(as_master_dtype, shape))

    def make_slices(self, tf_tensor, tensor_shape):
        """Cut a whole ``tf_tensor`` into the (uneven) slices of all processors, pnum order."""
        tensor_shape = mtf.convert_to_shape(tensor_shape)
        replicated = self.tensor_layout(tensor_shape).is_fully_replicated

        def one_slice(pnum):
            if replicated:
                return tf_tensor
            return tf.slice(tf_tensor, self.slice_begin(tensor_shape, pnum),
                            self.slice_shape(tensor_shape, pnum))

        return mtf.parallel([tf_tensor.device] * self.size, one_slice, list(range(self.size)))

    # (combine_slices is inherited: it concatenates, which takes uneven pieces.)

    def broadcast_impl(self, old_slices, old_shape, new_shape):
        """Broadcast every slice from ``old_shape`` to its slice shape of ``new_shape``."""
        def grow(x):
            zeros = tf.zeros(self.slice_shape(new_shape), dtype=x.dtype)
            return zeros + mtf.ops._expand_dims(x, old_shape, new_shape)  # pylint: disable=protected-access

        return self.slicewise(grow, old_slices)

    def random(self, shape, tf_fn, kwargs):
        """A random op (``mtf.random_uniform``, ``mtf.dropout``), slice by slice.

        With a TF graph seed (``tf.set_random_seed``, ``RunConfig(tf_random_seed=)``)
        each slice's op seed comes from the graph seed, the mtf op's name and
        the slice's position, so a rerun draws the same values (Mesh-TF's own
        ``PlacementMeshImpl`` draws them from Python's unseeded ``random`` and
        the per-process string ``hash``, so its dropout masks change every run).
        Without a graph seed the op seed is random, as there.
        """
        shape = mtf.convert_to_shape(shape)
        graph_seed = tf.get_default_graph().seed
        if graph_seed is not None and self._current_op is not None:
            op_seed = f"{graph_seed},{self._current_op.name}"
        else:
            op_seed = repr(_py_random.random())

        def draw(pnum):
            # Slices that cover the same part of the tensor get the same seed,
            # so replicas of one slice hold the same values.
            text = f"{op_seed},{self.slice_begin(shape, pnum)}"
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little") >> 1
            return tf_fn(self.slice_shape(shape, pnum), seed=seed, **kwargs)

        return self.slicewise(draw, self.laid_out_pnum())

    # ----------------------------------------------------------- collectives
    def allreduce(self, x, mesh_axes, reduction_fn_string):
        """Reduce ``x`` over ``mesh_axes`` with a ring all-reduce that takes unequal chunks.

        ``reduction_fn_string`` is mtf's name of the reduction (``"SUM"``, ``"MAX"``, ...).
        """
        return self._collective_with_groups(
            x, mesh_axes, functools.partial(
                allreduce_ring_uneven, reduction_fn_string=reduction_fn_string))

    def allsplit(self, x, mesh_axis, split_axis, which=None, sizes=None):
        """Keep this processor's piece of each slice along ``split_axis``.

        ``sizes`` (one per coordinate of ``mesh_axis``) defaults to the axis
        weights applied to the slice's size; pass the dimension's own sizes
        when it has per-dimension weights.
        """
        x = x.to_laid_out_tensor()
        n = self.shape[mesh_axis].size
        if which is not None:
            which_list = (which.tensor_list if isinstance(which, self.LaidOutTensor)
                          else [which] * self.size)
            if not all(isinstance(w, int) for w in which_list):
                if sizes is None and not self._split_weights.get(self.shape.dims[mesh_axis].name):
                    return super().allsplit(x, mesh_axis, split_axis, which)
                raise UnevenLayoutError(
                    f"{self._where()}allsplit with a tensor-valued 'which' needs an even"
                    f" split of mesh axis {self.shape.dims[mesh_axis].name!r}")
        else:
            which_list = [self.pcoord(p, mesh_axis) for p in range(self.size)]

        def keep(pnum, piece):
            total = piece.shape.as_list()[split_axis]
            these = list(sizes) if sizes is not None else self.axis_sizes(total, mesh_axis)
            if len(these) != n or sum(these) != total:
                raise ValueError(
                    f"{self._where()}allsplit sizes {these} do not split {total} into {n}")
            begin = [0] * piece.shape.ndims
            size = [-1] * piece.shape.ndims
            begin[split_axis] = offsets(these)[which_list[pnum]]
            size[split_axis] = these[which_list[pnum]]
            return tf.slice(piece, begin, size)

        return self.slicewise(keep, self.laid_out_pnum(), x)

    def alltoall(self, x, mesh_axis, split_axis, concat_axis, split_sizes=None):
        """Grouped alltoall: split along ``split_axis`` (by ``split_sizes``,
        default the axis weights), exchange, concatenate along ``concat_axis``."""
        x = x.to_laid_out_tensor()
        n = self.shape[mesh_axis].size
        if n == 1:
            return x

        def exchange(xs, devices):
            total = xs[0].shape.as_list()[split_axis]
            sizes = list(split_sizes) if split_sizes is not None else self.axis_sizes(total, mesh_axis)
            parts = []  # parts[source][target]
            for source, device in zip(xs, devices):
                if source.shape.as_list()[split_axis] != total:
                    raise UnevenLayoutError(
                        f"{self._where()}alltoall over mesh axis"
                        f" {self.shape.dims[mesh_axis].name!r}: the split axis has"
                        f" different sizes on different processors")
                with tf.device(device):
                    parts.append(tf.split(source, sizes, axis=split_axis))
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
