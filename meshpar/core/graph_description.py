"""A model's layer table extracted from a built Mesh-TensorFlow graph.

:func:`describe_mtf_graph` walks ``mtf.Graph.operations`` and returns the same
:class:`~meshpar.planning.description.ModelDescription` a model's config gives,
so the planner can price any mtf model. It needs mesh_tensorflow (and so
TensorFlow); the planner itself never imports this module.
"""
from __future__ import annotations

import contextlib
import heapq
import math

from meshpar.core.graph_collectives import add_collectives
from meshpar.core.graph_forward import dim_names, layer_rows
from meshpar.planning.description import Layer, ModelDescription

ELEMENTWISE_FLOPS = "meshpar_elementwise_flops"
"""Attribute of a slicewise operation whose TF function does several element-wise ops
(or reductions): its FLOPs per element of its first input (without it an operation
counts one per element of its output)."""


def describe_mtf_graph(graph, name: str, batch_dim: str = "batch",
                       dtype_bytes: int = 4) -> ModelDescription:
    """Extract the layer table of a Mesh-TensorFlow graph, per sample.

    Reads ``graph.operations`` only; the graph is not changed (no operation,
    name or variable is added). Mesh-TensorFlow is imported when called.

    Parameters
    ----------
    graph : mtf.Graph
        A built (not necessarily lowered) graph, with or without a training
        step.
    name : str
        Name of the returned :class:`ModelDescription`.
    batch_dim : str
        Name of the batch dimension; FLOPs and element counts are divided by
        its size.
    dtype_bytes : int
        Bytes per activation element, copied to the description.

    Returns
    -------
    ModelDescription
        In graph order, each named after its operation: one :class:`Layer`
        per layer operation (``"net/s0b0/conv1/conv3d"``), one per gather
        (kind ``"gather"``), and the rows that hold a forward all-reduce or a
        whole parameter (see **Forward collectives**).

    Raises
    ------
    ValueError
        No forward operation, no dimension named ``batch_dim``, or no layer.

    Notes
    -----
    **Forward part.** The walk covers the operations created before the
    first one :func:`mtf.gradients` creates (their names have a
    ``.../gradients/...`` scope): model, loss and batch-norm updates, not the
    backward pass or the optimizer. Forward operations created after a
    gradient call are ignored.

    **Layers.** ``Conv2dOperation``/``Conv3dOperation`` (kind ``conv2d``/
    ``conv3d``) and their transposes (``conv2d_transpose``/
    ``conv3d_transpose``); einsums that contract a dimension with a weight
    operand (``dense``: dense layers, 1x1x1 projections); einsums that
    contract two activations (``attention``: score and value products).
    Einsums that contract nothing are element-wise products (``x * scale``).
    A weight is a variable or anything computed from variables alone.

    **Counts.** A layer's own FLOPs are ``2 * filter size * output
    positions`` for a convolution (input positions for a transpose) and
    ``2 * (operands - 1) * size of all dimensions`` for an einsum. Every
    other forward operation with the batch dimension adds 1 FLOP per output
    element (per input element for reductions and pooling; reshapes, pads,
    slices, concatenations, variables, imports, constants: 0) to the *owning*
    layer: the latest layer before it whose produced dimensions (below)
    appear in its shapes, else the latest layer before it (the first layer
    for operations before any). Operations without the batch dimension
    (batch-norm statistics on ``[channels]``, moving averages, weight-only
    arithmetic) are per-step, not per-sample, and are left out. ``params``
    are the trainable variables behind a layer's weight operands; any other
    trainable variable read in the forward part (biases, batch-norm scale and
    offset) goes to the layer owning its first reader, unless the split of
    that layer's row does not fit the variable (**Forward collectives**).
    Activation elements are per sample: a layer's activation operands in,
    its output out.

    **Splits.** A layer *produces* the dimensions of its output that its
    activation operands lack: a convolution's output-filter dimension (the
    last), a dense layer's new dimension(s), and for an attention product
    the output dimensions not in every operand. ``split_dim`` is the last
    produced dimension that (a) appears in no activation the layer's input
    is computed from (so a projection back to an existing dimension, as an
    attention output projection, is not a split) and (b) needs a collective
    when split: the first operation in graph order that removes the
    dimension on the way down is a reshape or ``rename_dimension`` (a gather
    before the next layer) or an einsum or convolution contracting it (an
    all-reduce). A dimension that is only reduced (``reduce_sum``, a loss)
    or reaches the output (the class dimension of logits) gives no split, as
    in the hand-written tables. A layer that contracts an earlier layer's
    split dimension (a split contraction, all-reduced) splits nothing of its
    own: that dimension holds the model axis, so its output stays whole (the
    second convolution of a ``vgg-cifar-pairs`` pair).

    **Forward collectives** are on the rows where the lowering runs them, at
    the size of the tensor it moves (:mod:`meshpar.core.graph_forward`): a
    row per gather (the pooled tensor, once per dimension however many
    layers produce it), the all-reduce of a split contraction on the
    contracting layer's row, split on the contracted dimension (the scores,
    the logits); a producing layer's row has ``comm=None``.

    **Backward and batch-axis collectives.** ``backward_allreduce_elems``,
    ``backward_allconcat_elems`` and ``batch_allreduce_elems`` are read from
    the forward operations by :func:`meshpar.core.graph_collectives.add_collectives`
    (the rules are in its module docstring).
    """
    import meshpar  # noqa: F401  (mesh_tensorflow import shim)
    import mesh_tensorflow as mtf

    ops = _forward_operations(graph)
    if not ops:
        raise ValueError(f"model {name!r}: the graph has no forward operations")
    batch = _batch_size(ops, batch_dim, name)
    walk = _GraphWalk(ops, batch_dim, batch, mtf)
    if not walk.layers:
        raise ValueError(f"model {name!r}: no convolution or contracting einsum in the graph")
    rows, row_ops = layer_rows(walk)
    rows = add_collectives(walk, rows, row_ops)
    first = rows[row_ops.index(walk.layers[0])]  # not a row of an operation before it
    return ModelDescription(name=name, layers=tuple(rows), batch_dim=batch_dim,
                            input_elems=first.in_elems, dtype_bytes=int(dtype_bytes))


def describe_built(build, input_shape, name: str, batch: int = 2,
                   dtype_bytes: int = 4) -> ModelDescription:
    """The layer table of the graph a network's ``build`` makes (see
    :func:`describe_mtf_graph`), for a network of one's own with no table of its own.

    ``build(inputs, mesh=..., is_training=True)`` returns ``(logits,
    update_ops)``; it is called on float32 zeros ``[batch, *input_shape]`` in a TF
    graph of its own, seeded (initialisers need a seed under
    ``TF_DETERMINISTIC_OPS``); the batch dimension is the first of the logits,
    as the estimator takes it. The counts are per sample, whatever ``batch``.
    """
    with _built(build, input_shape, batch) as (graph, logits):
        return describe_mtf_graph(graph, name, batch_dim=logits.shape.dims[0].name,
                                  dtype_bytes=dtype_bytes)


def built_dimensions(build, input_shape, batch: int = 2) -> dict:
    """``{name: size}`` of every tensor dimension of the graph ``build`` makes (as
    :func:`describe_built` builds it; the batch dimension's size is ``batch``): the
    dimensions a layout may name, where a layer table names one per layer."""
    with _built(build, input_shape, batch) as (graph, _):
        return {d.name: d.size for op in graph.operations for t in op.outputs
                for d in t.shape.dims}


@contextlib.contextmanager
def _built(build, input_shape, batch: int):
    """``(mtf graph, logits)`` of ``build`` on zeros ``[batch, *input_shape]``, in a
    seeded TF graph of its own that is the default one while inside."""
    import meshpar  # noqa: F401  (mesh_tensorflow import shim)
    import mesh_tensorflow as mtf
    import tensorflow.compat.v1 as tf

    with tf.Graph().as_default():
        tf.set_random_seed(0)
        graph = mtf.Graph()
        logits, _ = build(tf.zeros((int(batch),) + tuple(int(n) for n in input_shape)),
                          mesh=mtf.Mesh(graph, "mesh"), is_training=True)
        yield graph, logits


def _is_gradient_op(op) -> bool:
    return "/gradients/" in op.name or op.name.startswith("gradients/")


def _forward_operations(graph) -> list:
    """``graph.operations`` before the first one :func:`mtf.gradients` made."""
    ops = list(graph.operations)
    for i, op in enumerate(ops):
        if _is_gradient_op(op):
            return ops[:i]
    return ops


def _batch_size(ops, batch_dim: str, name: str) -> int:
    for op in ops:
        for t in op.outputs:
            for d in t.shape.dims:
                if d.name == batch_dim:
                    return d.size
    raise ValueError(f"model {name!r}: no dimension named {batch_dim!r} in the graph")


class _GraphWalk:
    """One pass over the forward operations: weights, ancestry, layers, owners."""

    def __init__(self, ops, batch_dim, batch, mtf):
        self.ops, self.batch_dim, self.batch, self.mtf = ops, batch_dim, batch, mtf
        self.index = {op: i for i, op in enumerate(ops)}
        self.consumers = {}
        for op in ops:
            for t in op.inputs:
                self.consumers.setdefault(t, []).append(op)
        self.conv_kinds = [(getattr(mtf, cls), kind) for cls, kind in (
            ("Conv2dOperation", "conv2d"), ("Conv3dOperation", "conv3d"),
            ("Conv2dTransposeOperation", "conv2d_transpose"),
            ("Conv3dTransposeOperation", "conv3d_transpose")) if hasattr(mtf, cls)]
        self.weights = {}    # weight tensor -> set of Variable operations behind it
        self.ancestry = {}   # activation tensor -> dim names of it and its activation ancestors
        for op in ops:
            self._visit(op)
        self.layers = [op for op in ops if self.kind(op) is not None
                       and batch_dim in dim_names(op.outputs[0])]
        self.produced_by = {op: self.produced(op) for op in self.layers}
        self.extra_flops = {op: 0.0 for op in self.layers}
        self._splits = {}  # layer -> its split_dim (split_of)
        # trainable Variable -> (owning layer, the non-layer operation reading it or None)
        self.homes = {}
        if self.layers:
            self._charge()

    # -- pass 1: weights and activation ancestry
    def _visit(self, op):
        mtf = self.mtf
        if isinstance(op, mtf.Variable):
            for t in op.outputs:
                self.weights[t] = {op}
            return
        if isinstance(op, mtf.ReadVariable):
            self.weights[op.outputs[0]] = {op._var}  # noqa: SLF001 (no public accessor)
            return
        if op.inputs and all(t in self.weights for t in op.inputs):
            behind = set().union(*(self.weights[t] for t in op.inputs))
            for t in op.outputs:
                self.weights[t] = behind
            return
        seen = set().union(*(self.ancestry.get(t, set()) for t in op.inputs
                             if t not in self.weights)) if op.inputs else set()
        for t in op.outputs:
            self.ancestry[t] = seen | dim_names(t)

    def activations(self, op) -> list:
        return [t for t in op.inputs if t not in self.weights]

    def kind(self, op):
        for cls, kind in self.conv_kinds:
            if isinstance(op, cls):
                return kind
        if isinstance(op, self.mtf.EinsumOperation):
            out = dim_names(op.outputs[0])
            if not any(dim_names(t) - out for t in op.inputs):
                return None  # element-wise product
            return "attention" if len(self.activations(op)) == len(op.inputs) else "dense"
        return None

    # -- per-sample sizes
    def per_sample(self, t) -> float:
        return t.shape.size / self.batch if self.batch_dim in dim_names(t) else float(t.shape.size)

    def layer_flops(self, op) -> float:
        y = op.outputs[0]
        if self.kind(op).startswith("conv"):
            x, f = op.inputs[0], op.inputs[1]
            positions = (self.per_sample(x) / x.shape.dims[-1].size
                         if self.kind(op).endswith("transpose")
                         else self.per_sample(y) / y.shape.dims[-1].size)
            return 2.0 * f.shape.size * positions
        dims = {d.name: d.size for t in op.inputs for d in t.shape.dims}
        total = math.prod(dims.values())
        if self.batch_dim in dims:
            total /= self.batch
        return 2.0 * (len(op.inputs) - 1) * total

    def produced(self, op) -> list:
        """Output dim names, in output order, that the layer's activations lack."""
        y = op.outputs[0]
        acts = self.activations(op)
        if self.kind(op) == "attention":
            return [d.name for d in y.shape.dims
                    if not all(d.name in dim_names(t) for t in acts)]
        have = set().union(*(dim_names(t) for t in acts)) if acts else set()
        return [d.name for d in y.shape.dims if d.name not in have]

    # -- pass 2: element-wise FLOPs and stray variables to their owning layer
    def op_flops(self, op) -> float:
        mtf = self.mtf
        free = tuple(getattr(mtf, cls) for cls in (
            "Variable", "ReadVariable", "ImportOperation", "ImportLaidOutTensorOperation",
            "Constant", "ReshapeOperation", "StopGradient", "Assign", "Depend",
            "PrintOperation", "ScalarSummaryOperation", "PadOperation", "SliceOperation",
            "ConcatOperation", "SplitOperation", "StackOperation", "UnstackOperation",
            "ShiftOperation", "BroadcastOperation", "RangeOperation") if hasattr(mtf, cls))
        if isinstance(op, free):
            return 0.0
        if hasattr(op, ELEMENTWISE_FLOPS):
            x = op.inputs[0]
            return (getattr(op, ELEMENTWISE_FLOPS) * self.per_sample(x)
                    if self.batch_dim in dim_names(x) else 0.0)
        if isinstance(op, (mtf.ReduceOperation, mtf.PoolOperation)):
            sized = op.inputs
        else:
            sized = op.outputs
        return float(sum(self.per_sample(t) for t in sized if self.batch_dim in dim_names(t)))

    def owner(self, op):
        i = self.index[op]
        before = [layer for layer in self.layers if self.index[layer] < i]
        if not before:
            return self.layers[0]
        names = set().union(*(dim_names(t) for t in list(op.inputs) + list(op.outputs)))
        for layer in reversed(before):
            if names.intersection(self.produced_by[layer]):
                return layer
        return before[-1]

    def _charge(self):
        """Element-wise FLOPs to their owning layer; each trainable variable's home (its
        first reading layer, else the owner of its first reader) for the row builder."""
        layer_set = set(self.layers)
        for layer in self.layers:
            for t in layer.inputs:
                for var in sorted(self.weights.get(t, ()), key=lambda v: v.name):
                    if var.trainable:
                        self.homes.setdefault(var, (layer, None))
        for op in self.ops:
            if op in layer_set or (op.outputs and all(t in self.weights for t in op.outputs)):
                continue  # a layer, or weight-only arithmetic
            stray = [var for t in op.inputs for var in sorted(self.weights.get(t, ()),
                                                                key=lambda v: v.name)
                     if var.trainable and var not in self.homes]
            flops = self.op_flops(op)
            if stray or flops:
                owner = self.owner(op)
                self.extra_flops[owner] += flops
                for var in stray:
                    self.homes.setdefault(var, (owner, op))

    # -- splits
    def collective(self, op, dim: str):
        """First removal of ``dim`` downstream of ``op``: reshape -> allconcat, contraction ->
        allreduce, anything else (a reduction) or none -> None."""
        heap, seen = [], set()

        def push(t):
            for c in self.consumers.get(t, ()):
                if c not in seen:
                    seen.add(c)
                    heapq.heappush(heap, (self.index[c], id(c), c))

        push(op.outputs[0])
        while heap:
            _, _, c = heapq.heappop(heap)
            kept = [t for t in c.outputs if dim in dim_names(t)]
            if kept:
                for t in kept:
                    push(t)
            elif isinstance(c, self.mtf.ReshapeOperation):
                return "allconcat"
            elif self.kind(c) is not None:
                return "allreduce"
        return None

    def split_of(self, op):
        """The last produced dimension that is new to the layer's input and needs a
        collective when split (the row's ``split_dim``), or None; None too for a
        split contraction (the layer contracts an earlier layer's split dimension:
        that dimension holds the one model axis, so the layer's own output stays
        whole, as the second convolution of a split pair)."""
        if op not in self._splits:
            self._splits[op] = None
            contracted = set().union(*(dim_names(t) for t in op.inputs)) \
                - dim_names(op.outputs[0])
            if not any(self.split_of(layer) in contracted for layer in self.layers
                       if self.index[layer] < self.index[op]):
                seen = set().union(*(self.ancestry.get(t, set())
                                     for t in self.activations(op)))
                for dim in reversed([d for d in self.produced(op) if d not in seen]):
                    if self.collective(op, dim) is not None:
                        self._splits[op] = dim
                        break
        return self._splits[op]

    def row(self, op, split_dim=None, comm=None) -> Layer:
        """The layer's row, split on ``split_dim`` (parameters are placed later)."""
        y = op.outputs[0]
        sizes = {d.name: d.size for t in list(op.inputs) + [y] for d in t.shape.dims}
        return Layer(
            name=op.name, kind=self.kind(op),
            flops=self.layer_flops(op) + self.extra_flops[op],
            in_elems=int(round(sum(self.per_sample(t) for t in self.activations(op)))),
            out_elems=int(round(self.per_sample(y))),
            split_dim=split_dim,
            split_size=sizes[split_dim] if split_dim else None,
            comm=comm)
