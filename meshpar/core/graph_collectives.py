"""The backward and batch-axis collectives of a layer table, read from a built
Mesh-TensorFlow graph.

:func:`add_collectives` fills ``backward_allreduce_elems``,
``backward_allconcat_elems`` and ``batch_allreduce_elems`` of the rows
:func:`meshpar.core.graph_description.describe_mtf_graph` extracted. Each rule
is the gradient mtf builds for a forward operation, and the collective its
lowering runs when a dimension is laid out (docs/cost_model.md's table):

* **Reduced input gradient.** For an operation other than a reshape, the
  gradient of an activation input ``x`` sums over every dimension of the
  other operands and of the output that ``x`` lacks (an einsum's or a
  convolution's filter dimension, a broadcast's new dimension). If that
  dimension is a split dimension, laid out on ``model``, the sum is an
  all-reduce of ``x`` (per sample) -> ``backward_allreduce_elems``; if it is
  the batch dimension (``x`` is a per-step tensor broadcast over the batch,
  e.g. batch-norm mean and normalising factor) an all-reduce of ``x`` over
  ``batch`` -> ``batch_allreduce_elems``.
* **Sliced gradient gathered.** A reshape (or ``rename_dimension``) whose
  output carries a split dimension its input lacks slices a whole tensor
  locally forward; its gradient is gathered back -> ``backward_allconcat_elems``
  (per sample, the input's size).
* **Batch statistics.** An operation that removes the batch dimension from an
  activation (a reduction over the batch) whose result a later layer's input
  or a variable's update (``mtf.assign``: batch-norm moving averages) depends
  on is an all-reduce of that result over ``batch`` forward ->
  ``batch_allreduce_elems`` (local batch-norm statistics reach only the moving
  averages: an all-reduce beside the step's path, bytes all the same). The
  loss's mean is left out: the cost model adds it as a constant.

Only inputs that need a gradient count: computed from a trainable variable,
not through ``stop_gradient``, by an operation the loss (an unconsumed
output) depends on. The model-axis rules count per-sample tensors (with the
batch dimension) only: a per-step one gathered or all-reduced over ``model``
has no field. Weights are left out: their gradients are the parameter
all-reduce the cost model prices from ``params``. A collective goes to a row
split on the dimension that causes it (the operation's own row, else its
owning layer's, else the first such row), since the cost model prices it when
that dimension is laid out; batch-axis elements to a row split on the
tensor's split dimension (its share is what a column holds), or to one that
is not split.
"""
from __future__ import annotations

import dataclasses
import types

from meshpar.core.graph_forward import dim_names, first_rows


BACKWARD_BATCH_SUMS = "meshpar_backward_batch_sums"
"""Attribute of a custom-gradient operation: the mtf.Shapes its backward all-reduces
over the batch besides its weights' gradients (without it the operation is priced
as one op)."""


def add_collectives(walk, rows: list, row_ops: list) -> list:
    """``rows`` (``row_ops[i]`` the operation behind ``rows[i]``) with the three
    collective fields set."""
    mtf = walk.mtf
    split_dims = {row.split_dim for row in rows if row.split_dim}
    grads = _needs_gradient(walk)
    to_loss = _reaches(walk, lambda op: op.outputs and not any(
        walk.consumers.get(t) for t in op.outputs))
    layer_set = set(walk.layers)
    to_layer_or_update = _reaches(walk, lambda op: op in layer_set or isinstance(op, mtf.Assign))
    fields = [[0.0, 0.0, 0.0] for _ in rows]  # allreduce, allconcat, batch
    place = _Placement(walk, rows, row_ops)
    # mtf differentiates a custom-gradient operation with its own function, not
    # the operations inside it: those get no gradient rule; the operation
    # declares the batch all-reduces of its backward (_layers._normalise_together).
    # Forward, the operations inside run as usual and the operation itself
    # only passes their outputs on.
    custom = {op for op in walk.ops if isinstance(op, mtf.CustomGradientOperation)}
    inside = {f for op in custom for f in op._forward_operations}  # noqa: SLF001
    declared = {op for op in custom if hasattr(op, BACKWARD_BATCH_SUMS)}
    for op in declared:
        if to_loss.get(op):
            for shape in getattr(op, BACKWARD_BATCH_SUMS):
                t = types.SimpleNamespace(shape=shape)  # a tensor's shape, no tensor
                fields[place.for_tensor(t, split_dims, op)][2] += shape.size
    for op in walk.ops:
        acts = [t for t in walk.activations(op) if grads.get(t)] if (
            to_loss.get(op) and op not in inside and op not in declared) else []
        if isinstance(op, mtf.ReshapeOperation):
            for x in (t for t in acts if walk.batch_dim in dim_names(t)):  # per sample
                for d in (dim_names(op.outputs[0]) - dim_names(x)) & split_dims:
                    fields[place.on_dim(d, op)][1] += walk.per_sample(x)
        else:
            around = set().union(*(dim_names(t) for t in list(op.inputs) + list(op.outputs)))
            for x in acts:
                missing = around - dim_names(x)
                if walk.batch_dim in dim_names(x):
                    for d in missing & split_dims:
                        fields[place.on_dim(d, op)][0] += walk.per_sample(x)
                elif walk.batch_dim in missing:
                    fields[place.for_tensor(x, split_dims, op)][2] += x.shape.size
        if to_layer_or_update.get(op) and op not in layer_set and op not in custom and any(
                walk.batch_dim in dim_names(t) for t in walk.activations(op)):
            for y in op.outputs:
                if walk.batch_dim not in dim_names(y):
                    fields[place.for_tensor(y, split_dims, op)][2] += y.shape.size
    return [dataclasses.replace(row, backward_allreduce_elems=int(round(ar)),
                                backward_allconcat_elems=int(round(ac)),
                                batch_allreduce_elems=int(round(b)))
            for row, (ar, ac, b) in zip(rows, fields)]


def _needs_gradient(walk) -> dict:
    """Tensor -> whether mtf.gradients computes its gradient (it depends on a
    trainable variable, not through stop_gradient)."""
    mtf, out = walk.mtf, {}
    for op in walk.ops:
        if isinstance(op, mtf.Variable):
            need = op.trainable
        elif isinstance(op, mtf.ReadVariable):
            need = op._var.trainable  # noqa: SLF001 (no public accessor)
        elif isinstance(op, mtf.StopGradient):
            need = False
        else:
            need = any(out.get(t, False) for t in op.inputs)
        for t in op.outputs:
            out[t] = need
    return out


def _reaches(walk, is_target) -> dict:
    """Operation -> whether it is a target or some target depends on it.

    A custom-gradient operation consumes every output of its function and passes
    each on as its own output: a function output reaches what that one output of
    the operation reaches, not what the others do (a batch norm's moving-average
    statistics are outputs beside the normalised activation).
    """
    out = {}

    def tensor_reaches(t) -> bool:
        for c in walk.consumers.get(t, ()):
            fn_outputs = getattr(c, "_fn_outputs", None)
            if fn_outputs is not None and t in fn_outputs:
                mirror = c.outputs[fn_outputs.index(t)]
                if bool(is_target(c)) or any(out.get(c2, False)
                                             for c2 in walk.consumers.get(mirror, ())):
                    return True
            elif out.get(c, False):
                return True
        return False

    for op in reversed(walk.ops):
        out[op] = bool(is_target(op)) or any(tensor_reaches(t) for t in op.outputs)
    return out


class _Placement:
    """Which row of the table a collective is written on."""

    def __init__(self, walk, rows, row_ops):
        self.walk, self.rows = walk, rows
        self.row_of = first_rows(row_ops)

    def on_dim(self, dim, op) -> int:
        """A row split on ``dim``: ``op``'s own, its owner's, else the first."""
        for cand in (op, self.walk.owner(op)):
            i = self.row_of.get(cand)
            if i is not None and self.rows[i].split_dim == dim:
                return i
        return next(i for i, row in enumerate(self.rows) if row.split_dim == dim)

    def for_tensor(self, t, split_dims, op) -> int:
        """A row split on ``t``'s split dimension, else one not split (the owner if it is
        not, else the first)."""
        own = sorted(dim_names(t) & split_dims)
        if own:
            return self.on_dim(own[0], op)
        owner = self.row_of[op] if op in self.row_of else self.row_of[self.walk.owner(op)]
        if self.rows[owner].split_dim is None:
            return owner
        return next((i for i, row in enumerate(self.rows) if row.split_dim is None), owner)
