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
pieces. The two that cut (allsplit, alltoall) take the sizes of the pieces as
an argument, ``sizes``; left out it is :data:`EVEN`, Mesh-TF's equal pieces
(:func:`~meshpar.core.splits.even_sizes`, no divisibility needed), which is
what an upstream lowering written for equal slices expects. A lowering that
cuts a laid-out dimension passes ``sizes=impl.dim_sizes(dim, mesh_axis)`` (or
just the dimension, ``sizes=dim``), so the call says which split it uses.

The mtf ops whose own lowering assumes one slice shape for all processors are
handled in :mod:`meshpar.core.lowering`; while an op is lowered it sees a view
of this mesh bound to that op (:meth:`HeterogeneousMeshImpl.for_op`), so no
per-op state is left on the mesh itself.
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import operator
import os
import random as _py_random
from typing import Mapping, Optional, Sequence

import meshpar  # noqa: F401  (installs the mesh_tensorflow import shim)
from meshpar import _compat
from meshpar.core import lowering, random_draws
from meshpar.core.collectives import EVEN, UnevenCollectives, UnevenLayoutError  # noqa: F401  (re-exported)
from meshpar.core.splits import even_sizes, offsets, split_sizes, validate_weights
from meshpar.core.staging import staging_area

mtf = _compat.import_mesh_tensorflow()
from mesh_tensorflow import placement_mesh_impl as _pmi  # noqa: E402
import tensorflow.compat.v1 as tf  # noqa: E402


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


def _check_shape_and_layout(shape, layout):
    """``layout`` as Mesh-TF takes it (pairs as tuples); ValueError for a mesh shape or
    layout string Mesh-TF refuses with its 'bad input to _parse_string_to_list_of_pairs
    ...' (e.g. a size of 2.5, a rule without ':') and for a repeated mesh axis ('a:1;a:2'
    made a mesh with two axes 'a'); TypeError for a layout that is no layout (None, a
    dict, anything but (dimension, axis) pairs). Mesh-TF's own spellings ('a:2,b:3') stay
    accepted."""
    if isinstance(shape, str):
        try:
            shape = mtf.convert_to_shape(shape)
        except ValueError:
            raise ValueError(f"mesh shape: bad shape {shape!r}, expected axis:size pairs "
                             "such as batch:2;model:2") from None
    if isinstance(shape, mtf.Shape):
        names = [d.name for d in shape.dims]
        if len(set(names)) != len(names):
            raise ValueError(f"mesh shape: axis names must differ, got {shape}")
    if isinstance(layout, str):
        try:
            mtf.convert_to_layout_rules(layout)
        except ValueError:
            raise ValueError(f"layout: bad rule in {layout!r}, expected dimension:axis rules "
                             "such as batch:batch;conv1_filters:model") from None
    elif not isinstance(layout, mtf.LayoutRules):
        if isinstance(layout, dict) and not layout:  # no rules: Mesh-TF's test_utils pass {}
            return []
        # a dict was 'not enough values to unpack', the pair 'fm' the rule f:m, and a JSON
        # list of [dimension, axis] lists 'unhashable type: list'
        if not (isinstance(layout, (list, tuple, set, frozenset)) and all(
                isinstance(p, (tuple, list)) and len(p) == 2
                and all(isinstance(x, str) for x in p) for p in layout)):
            raise TypeError(f"layout must be a layout string such as 'batch:batch;f:model', "
                            f"mtf.LayoutRules or (dimension, axis) pairs, got {layout!r}")
        return [tuple(p) for p in layout]
    return layout


def _device_list(devices) -> list:
    """``devices`` as a list: a sequence of device strings, not one string (its
    characters would be read as devices) nor None."""
    if devices is not None and not isinstance(devices, (str, bytes, Mapping)):
        try:
            out = list(devices)
        except TypeError:  # not iterable: refused below
            out = None
        if out is not None:
            for i, device in enumerate(out):  # 1 was "'int' object has no attribute 'split'"
                if not isinstance(device, (str, tf.DeviceSpec)):  # at the lowering
                    raise ValueError(f"devices[{i}] is {device!r}; devices are device strings "
                                     "(e.g. '/cpu:0', or '' for an emulated device)")
            return out
    raise ValueError(f"devices must be a sequence of device strings, one per processor "
                     f"(e.g. [''] * n for emulated devices), got {devices!r}")


def _mapping(value, what: str, key: str) -> Mapping:
    """``value`` (None: empty) if it is a mapping of ``key`` name -> weights, else ValueError."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} must be a mapping of {key} name -> weights, got {value!r}")
    return value


class HeterogeneousMeshImpl(UnevenCollectives, _pmi.PlacementMeshImpl):
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
        layout = _check_shape_and_layout(shape, layout)
        # Not super().__init__: PlacementMeshImpl.__init__ names its own class
        # through a module global, which tests may point at this class.
        mtf.MeshImpl.__init__(self, shape, layout)
        lowering.install()  # uneven-aware lowerings of the ops that assume one slice shape
        self._devices = _device_list(devices)
        if self.size < 1:
            raise ValueError(f"mesh {self.shape} has no processors: every axis needs size >= 1")
        self.copy_master_to_slice_ops = []
        if len(self._devices) != self.size:
            raise ValueError(
                f"mesh {self.shape} has {self.size} processors but {len(self._devices)}"
                f" devices were given")
        axis_names = [d.name for d in self.shape.dims]
        self._check_layout(axis_names)
        self._split_weights = {}
        for axis, weights in _mapping(split_weights, "split_weights", "mesh axis").items():
            if axis not in axis_names:
                raise ValueError(
                    f"split_weights names mesh axis {axis!r}, which is not in mesh"
                    f" {self.shape} (axes: {axis_names})")
            self._split_weights[axis] = _weights_for_axis(
                weights, self.shape.dims[axis_names.index(axis)],
                f"split_weights for mesh axis {axis!r}")
        self._dim_split_weights = {}
        for dim_name, weights in _mapping(dim_split_weights, "dim_split_weights",
                                          "tensor dimension").items():
            axis = self._layout_axis_of_name(dim_name)
            if axis is None:
                raise ValueError(
                    f"dim_split_weights names tensor dimension {dim_name!r}, which the"
                    f" layout {self.layout_rules} does not put on any axis of mesh"
                    f" {self.shape}")
            self._dim_split_weights[dim_name] = _weights_for_axis(
                weights, self.shape.dims[axis], f"dim_split_weights for dimension {dim_name!r}")
        self._current_pnum = None     # set while slicewise() calls fn for one processor
        self._op = None               # set only on views made by for_op()
        self._sizes_cache = {}
        self._staged_imports = set()  # names of TF tensors imported through staging areas
        self.staging_puts = []        # their put ops (shared by every for_op view)
        #: a TF integer scalar counting the training steps (the estimator sets its global
        #: step): uniform random ops then key each step's draws by it (see :meth:`random`)
        self.random_step = None

    @classmethod
    def from_plan(cls, plan, devices: Optional[Sequence[str]] = None) -> "HeterogeneousMeshImpl":
        """The mesh of a :class:`~meshpar.planning.plan.Plan`.

        ``devices`` replaces the plan's device strings (same count, pnum order).
        """
        from meshpar.planning.plan import Plan

        if isinstance(plan, (str, os.PathLike)):
            plan = Plan.load(plan)  # as MeshSpec.from_plan: was 'str' has no attribute 'devices'
        if not isinstance(plan, Plan):
            raise TypeError(f"plan must be a Plan or the path of a plan file, got {plan!r}")
        devs = _device_list(plan.devices if devices is None else devices)  # "ab": not a, b
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
        if not 0 <= mesh_axis < self.ndims:  # a negative one would index from the end
            raise ValueError(f"mesh_axis {mesh_axis} is not an axis of mesh {self.shape} "
                             f"(0..{self.ndims - 1})")
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

    def pcoord(self, pnum: int, mesh_axis: int) -> int:
        """Coordinate of processor ``pnum`` along mesh axis ``mesh_axis`` (row-major pnums)."""
        return self._coordinates(pnum)[mesh_axis]

    def _coordinates(self, pnum) -> list:
        """Mesh coordinates of processor ``pnum``; ValueError for a pnum outside
        0..size-1 (Mesh-TF's arithmetic wraps it round to another processor)."""
        try:
            index = operator.index(pnum)
        except TypeError:
            raise ValueError(f"pnum must be an integer, got {pnum!r}") from None
        if not 0 <= index < self.size:
            raise ValueError(f"pnum {index} is not a processor of mesh {self.shape} "
                             f"(pnums 0..{self.size - 1})")
        return mtf.pnum_to_processor_coordinates(self.shape, index)

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
            coords = self._coordinates(pnum)
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
        coords = self._coordinates(pnum)
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
    @property
    def op(self):
        """The mtf op this view is lowering (:meth:`for_op`); None on the mesh itself."""
        return self._op

    def for_op(self, op) -> "HeterogeneousMeshImpl":
        """A view of this mesh for lowering ``op``: errors name ``op`` and random
        ops seed from its name.

        The view is a shallow copy: it shares the devices, layout, weights,
        size cache and master-to-slice copy list with this mesh and differs only
        in :attr:`op`, so nothing about one op outlives that op's lowering or is
        seen by the next one. The patched ``mtf.Lowering.mesh_impl``
        (:mod:`meshpar.core.lowering`) hands each op its own view.
        """
        view = copy.copy(self)
        view._op = op  # pylint: disable=protected-access
        view._current_pnum = None  # pylint: disable=protected-access
        return view

    def _where(self) -> str:
        if self._op is None:
            return ""
        return f"mtf op {self._op.name!r} ({type(self._op).__name__}): "

    @contextlib.contextmanager
    def on_processor(self, pnum: int):
        """Within: :meth:`slice_shape` without pnum means processor ``pnum``."""
        previous, self._current_pnum = self._current_pnum, pnum
        try:
            yield
        finally:
            self._current_pnum = previous

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

    def stage_imports(self, tensors) -> None:
        """Import these TF tensors a step ahead, each processor's slice from a
        staging area on that processor's own device.

        When one is imported (:meth:`import_tf_tensor`), its slices are cut where
        it lives and ``put`` into one ``StagingArea`` per processor, on the
        processor's device; the imported tensor is what each area's ``get``
        returns, i.e. what the previous put left there. The put ops collect in
        :attr:`staging_puts`: run them in every step (a step then computes on
        slices already on its devices while the next ones travel) and once
        before the first step. Why: staged on the client, every step of a mesh
        over remote workers began with the client cutting the batch and sending
        each worker its slice, while the workers waited.
        """
        self._staged_imports.update(t.name for t in tensors)

    def import_tf_tensor(self, x, tf_x):
        """The laid-out slices of ``tf_x`` (staged per device when
        :meth:`stage_imports` named it)."""
        slices = self.make_slices(tf_x, x.shape)
        if getattr(tf_x, "name", None) not in self._staged_imports:
            return self.LaidOutTensor(slices)
        staged = []
        for piece, device in zip(slices, self._devices):
            (got,), put = staging_area(piece, device=device)
            self.staging_puts.append(put)
            staged.append(got)
        return self.LaidOutTensor(staged)

    def broadcast_impl(self, old_slices, old_shape, new_shape):
        """Broadcast every slice from ``old_shape`` to its slice shape of ``new_shape``."""
        def grow(x):
            zeros = tf.zeros(self.slice_shape(new_shape), dtype=x.dtype)
            return zeros + mtf.ops._expand_dims(x, old_shape, new_shape)  # pylint: disable=protected-access

        return self.slicewise(grow, old_slices)

    def random(self, shape, tf_fn, kwargs):
        """A random op (``mtf.random_uniform``, ``mtf.dropout``), slice by slice.

        With a TF graph seed (``tf.set_random_seed``, ``RunConfig(tf_random_seed=)``)
        the op's seed comes from the graph seed and the mtf op's name, so a rerun
        draws the same values (Mesh-TF's own ``PlacementMeshImpl`` draws them from
        Python's unseeded ``random`` and the per-process string ``hash``, so its
        dropout masks change every run). Without a graph seed the op seed is
        random, as there.

        Uniform draws (``tf.random.uniform``: ``mtf.random_uniform``, hence
        ``mtf.dropout``) are a counter-based hash of each element's position in
        the whole tensor and of a key that changes at every step, the same on every
        processor (:func:`meshpar.core.random_draws.uniform_at`, :meth:`_step_key`): the values do not depend
        on the mesh, the layout or the split, so a dropout mask on an uneven mesh is
        the one of one device, step after step, and the one-device result holds for
        such models too. Normal draws (``tf.random.normal``: ``mtf.random_normal``, a
        Gaussian-noise layer) are made from two such uniform draws per element
        (:func:`~meshpar.core.random_draws.normal_at`), so they do not depend on the
        mesh either. Any other ``tf_fn`` draws each slice with a seed from the op
        seed and the slice's position (copies of one slice agree; another layout
        draws other values).
        """
        shape = mtf.convert_to_shape(shape)
        graph_seed = tf.get_default_graph().seed
        if graph_seed is not None and self._op is not None:
            op_seed = f"{graph_seed},{self._op.name}"
        else:
            op_seed = repr(_py_random.random())

        uniform = random_draws.uniform_arguments(tf_fn, kwargs)
        normal = random_draws.normal_arguments(tf_fn, kwargs)
        if uniform is not None or normal is not None:
            digest = hashlib.sha256(op_seed.encode()).digest()
            fixed = [int.from_bytes(digest[i:i + 4], "little") for i in (0, 4)]
            run_seed = int.from_bytes(digest[8:12], "little") >> 1
            at, arguments = ((random_draws.uniform_at, uniform) if uniform is not None
                             else (random_draws.normal_at, normal))

            def draw_counted(pnum):
                # New values at every step, the same key on every processor
                keys = tf.bitwise.bitwise_xor(self._step_key(run_seed),
                                              tf.constant(fixed, tf.uint32))
                return at(shape.to_integer_list, self.slice_begin(shape, pnum),
                          self.slice_shape(shape, pnum), keys, *arguments)

            return self.slicewise(draw_counted, self.laid_out_pnum())

        def draw(pnum):
            # Slices that cover the same part of the tensor get the same seed,
            # so replicas of one slice hold the same values.
            text = f"{op_seed},{self.slice_begin(shape, pnum)}"
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little") >> 1
            return tf_fn(self.slice_shape(shape, pnum), seed=seed, **kwargs)

        return self.slicewise(draw, self.laid_out_pnum())

    def _step_key(self, seed: int):
        """Two uint32 words that change at every step, the same on every processor: a
        hash of :attr:`random_step` when it is set (a resumed run draws what an
        uninterrupted one would), else drawn at every run by a stateful generator that
        every processor holds with the seed ``seed`` (it starts again with each session)."""
        if self.random_step is None:
            return tf.cast(tf.random.uniform([2], 0, 2 ** 31 - 1, tf.int32, seed=seed),
                           tf.uint32)
        return random_draws.step_key(self.random_step, seed)
