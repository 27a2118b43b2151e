"""The rows of a graph-derived layer table, with the forward collectives where the
lowering runs them.

:func:`layer_rows` turns the layers
:func:`meshpar.core.graph_description.describe_mtf_graph` found into the rows of
its table, in graph order. The cost model prices a row's forward collective at
the row's ``out_elems`` when its ``split_dim`` is laid out, so each collective
is put on a row whose output is the tensor the lowering really moves
(docs/cost_model.md):

* **Gather.** A reshape (or ``rename_dimension``) whose per-sample activation
  input carries a split dimension its output lacks: the reshape lowering
  (``meshpar.core.lowering``) all-concatenates that input over the
  dimension's mesh axis. The reshape gets a row of its own (kind
  ``"gather"``, no FLOPs, in and out the input's size, ``comm="allconcat"``),
  so a pooled tensor is gathered at its pooled size, and a dimension that two
  layers produce (a block's second convolution and its projection, added
  before the gather) is gathered once.
* **Split contraction.** A layer whose operands carry a split dimension its
  output lacks: every device contracts its slice, and mtf all-reduces the
  partial output (a ``LazyAllreduceSum``, summed where the whole is first
  needed, at the same size). The layer's own row is split on that dimension,
  so its work is divided as the lowering divides it, with
  ``comm="allreduce"`` at its output: the attention scores, not the
  query/key projections; the logits, not fc1. Such a layer splits nothing
  of its own (:meth:`_GraphWalk.split_of`: the contracted dimension holds
  the one model axis, which a dimension of its output cannot share: mtf
  refuses two tensor dimensions on one mesh axis); a row given both would
  keep its own and put the all-reduce on a row after it (kind
  ``"allreduce"``, no FLOPs).
* **No collective.** The rows of the layers that produce a split dimension
  carry none (as the hand-written tables' convolution rows before their pool
  or add row). A layer whose output keeps a split dimension of its operands
  (attention's weighted sum of the values) computes its slice: its row is
  split on it.
* **Parameters by their own dimensions.** The cost model gives a column a
  row's share of the row's parameters (memory, and the data-parallel
  all-reduce), and the lowering holds a variable sliced on its split
  dimensions and whole otherwise. So a trainable variable carrying a split
  dimension goes to a row split on it (the logits kernel over ``fc1_units``
  with the logits row), and one carrying none whose row is split (the logits
  bias, after the split contraction) to a row of its own for the operation
  that reads it (kind ``"elementwise"``, not split, with that operation's
  FLOPs, taken from the layer that owned them).

Not covered: a reduction (``reduce_sum``) removing a split dimension (an
all-reduce that no row holds); two split contractions over one dimension
added before the sum (mtf all-reduces the sum once; each row prices its
own); a reshape from one split dimension onto another (an all-to-all, priced
as a gather).
"""
from __future__ import annotations

import dataclasses

from meshpar.planning.description import Layer


def dim_names(t) -> set:
    """The names of an mtf tensor's dimensions."""
    return {d.name for d in t.shape.dims}


def first_rows(row_ops) -> dict:
    """Operation -> the index of its first row (a layer's own row comes before
    its all-reduce row)."""
    at = {}
    for i, op in enumerate(row_ops):
        at.setdefault(op, i)
    return at


def layer_rows(walk) -> tuple:
    """``(rows, row_ops)`` in graph order: the Layer rows and the operation behind each."""
    produced = {op: walk.split_of(op) for op in walk.layers}
    split_dims = {d for d in produced.values() if d}
    entries = []  # (graph index, tie, operation, Layer): sorted, the table's order
    for op in walk.layers:
        entries += _layer_entries(walk, op, produced[op], split_dims)
    entries += _gather_entries(walk, split_dims)
    entries = _with_reader_entries(walk, entries, split_dims)
    entries.sort(key=lambda e: e[:2])
    rows, row_ops = [e[3] for e in entries], [e[2] for e in entries]
    return _place_params(walk, rows, row_ops, split_dims), row_ops


def _layer_entries(walk, op, dim, split_dims) -> list:
    """The layer's row, and an all-reduce row when it also contracts a split dim."""
    i, y = walk.index[op], op.outputs[0]
    operands = set().union(*(dim_names(t) for t in op.inputs))
    contracted = sorted(operands & split_dims - dim_names(y))
    if dim is None and contracted:
        return [(i, 0, op, walk.row(op, contracted[0], "allreduce"))]
    if dim is None:  # a slice of a split dimension its operands carry, if any
        kept = sorted(set().union(*(dim_names(t) for t in walk.activations(op)))
                      & dim_names(y) & split_dims)
        return [(i, 0, op, walk.row(op, kept[0] if kept else None))]
    elems = int(round(walk.per_sample(y)))
    return [(i, 0, op, walk.row(op, dim))] + [
        (i, j, op, Layer(name=f"{op.name}/allreduce/{d}", kind="allreduce", flops=0.0,
                         in_elems=elems, out_elems=elems, split_dim=d,
                         split_size=_size(op, d), comm="allreduce"))
        for j, d in enumerate(contracted, start=1)]


def _gather_entries(walk, split_dims) -> list:
    """A row per (reshape, split dim of its per-sample input that its output lacks)."""
    entries = []
    for op in walk.ops:
        if not isinstance(op, walk.mtf.ReshapeOperation):
            continue
        for x in walk.activations(op):
            if walk.batch_dim not in dim_names(x):
                continue  # a per-step tensor: no per-step model-axis field
            elems = int(round(walk.per_sample(x)))
            for j, d in enumerate(sorted((dim_names(x) - dim_names(op.outputs[0])) & split_dims)):
                entries.append((walk.index[op], j, op, Layer(
                    name=op.name if j == 0 else f"{op.name}/{d}", kind="gather", flops=0.0,
                    in_elems=elems, out_elems=elems, split_dim=d, split_size=_size(op, d),
                    comm="allconcat")))
    return entries


def _with_reader_entries(walk, entries, split_dims) -> list:
    """``entries`` plus a row for each operation reading a whole variable that its
    owning layer's row would split; the operation's FLOPs leave that row."""
    split_of = {op: row.split_dim for _, tie, op, row in entries if tie == 0}
    readers = {}  # reading operation -> the layer that owned it (and its FLOPs)
    for var, (layer, reader) in walk.homes.items():
        if reader is not None and split_of[layer] and not dim_names(var.outputs[0]) & split_dims:
            readers.setdefault(reader, layer)
    moved = {}
    for reader, layer in readers.items():
        moved[layer] = moved.get(layer, 0.0) + walk.op_flops(reader)
    out = [e if e[1] or e[2] not in moved else
           e[:3] + (dataclasses.replace(e[3], flops=e[3].flops - moved[e[2]]),)
           for e in entries]
    return out + [(walk.index[reader], 0, reader, Layer(
        name=reader.name, kind="elementwise", flops=walk.op_flops(reader),
        in_elems=int(round(sum(walk.per_sample(t) for t in walk.activations(reader)))),
        out_elems=int(round(walk.per_sample(reader.outputs[0]))))) for reader in readers]


def _place_params(walk, rows, row_ops, split_dims) -> list:
    """``rows`` with every trainable variable's size on one row (see the module doc)."""
    at = first_rows(row_ops)
    params = [0] * len(rows)
    for var, (layer, reader) in walk.homes.items():
        own = dim_names(var.outputs[0]) & split_dims
        i = at[layer]
        if own and rows[i].split_dim not in own:
            i = next(j for j, row in enumerate(rows) if row.split_dim in own)
        elif not own and rows[i].split_dim and reader in at:
            i = at[reader]
        params[i] += var.shape.size
    return [dataclasses.replace(row, params=int(n)) for row, n in zip(rows, params)]


def _size(op, dim) -> int:
    return next(d.size for t in list(op.inputs) + list(op.outputs)
                for d in t.shape.dims if d.name == dim)
