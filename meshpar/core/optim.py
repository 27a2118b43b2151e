"""Race-free optimizer steps on Mesh-TensorFlow graphs.

Why this module exists
----------------------
In a TF1 graph the ops of one ``session.run`` are ordered only by data and
control edges. A variable's value is read by the forward pass, by the backward
pass of *other* layers and by the fetched loss; the update of that variable
depends only on its *own* gradient. Nothing stops the executor from running
``w1 -= lr * g1`` before the backward op that still needs the old ``w1`` to
compute ``g0``. (mtf lowers a variable with ``tf.cast(slice_variable)``, which
returns the variable itself when the dtype already matches, so every consumer
makes its own ``ReadVariableOp``; a reference variable's read aliases its
buffer. Either way, a read can land after the write.) Training then
silently differs from the one-device result, and differently on every mesh.
Mesh-TensorFlow's own optimizers (``mtf.optimize``) have this race, and
``mtf.depend`` cannot help directly: it fails on gradients that are pending
all-reduces (``LazyAllreduceSum``).

The fix is one barrier: every update of the step takes, as control inputs,
every slice of every gradient of the step, the loss and whatever else the
caller fetches (:func:`after_all`). All reads feeding those tensors have then
run before any variable is written.

Update rules (TF1 semantics, so a numpy reference is easy to write):

=========  ==========================================================
rule       update
=========  ==========================================================
Sgd        ``w -= lr * g``
Momentum   ``v = mu * v + g;  w -= lr * v``  (tf.train.MomentumOptimizer)
Adam       ``m, v`` moments, bias-corrected step (tf.train.AdamOptimizer)
=========  ==========================================================

``learning_rate`` may be a scalar mtf.Tensor (a schedule); ``weight_decay``
adds decoupled decay ``lr * weight_decay * w`` (AdamW) of the kernels.

By default (``fused=True``) each variable slice is updated by one TF kernel
(``ResourceApplyAdam`` and friends, :mod:`meshpar.core.fused_apply`) instead of
a dozen element-wise ops; ``fused=False`` writes the rule as mtf arithmetic.
Same variables and slots either way; results differ by float32 rounding.

Any ``mtf.optimize.Optimizer`` (e.g. ``AdafactorOptimizer``) can be passed to
:func:`race_free_update_ops` instead; its per-variable rule is used behind the
same barrier, and its assignments write only after every value they assign is
read (``MomentumOptimizer`` reads the velocity it also assigns: the old one, on
every mesh).

Example
-------
>>> update_ops = race_free_update_ops(graph, loss, Adam(1e-3))   # doctest: +SKIP
>>> lowering = mtf.Lowering(graph, {mesh: mesh_impl})            # doctest: +SKIP
>>> train_op = tf.group([lowering.lowered_operation(op) for op in update_ops])  # doctest: +SKIP
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence

import meshpar  # noqa: F401  (installs the mesh_tensorflow import shim)
import mesh_tensorflow as mtf
import tensorflow.compat.v1 as tf

from meshpar.core import fused_apply

__all__ = [
    "AfterAll",
    "after_all",
    "Sgd",
    "Momentum",
    "Adam",
    "make_optimizer",
    "race_free_update_ops",
    "allreduce_together",
    "naive_update_ops",
    "unordered_reads",
]


class AfterAll(mtf.Operation):
    """Identity of ``x`` whose lowering runs after every slice of ``dependencies``.

    Unlike ``mtf.Depend`` it accepts tensors whose lowering is a pending
    all-reduce (it materialises them first), and the dependencies are real
    inputs of the operation, so the mtf graph records the ordering too.
    """

    def __init__(self, x, dependencies: Sequence, name: Optional[str] = None):
        deps = [d for d in dependencies if d is not None]
        for d in deps:
            if not isinstance(d, mtf.Tensor):
                raise ValueError(f"after_all: dependencies must be mtf.Tensors, got {d!r}")
        super().__init__([x] + deps, x.mesh, name=name or "after_all")
        self._outputs = [mtf.Tensor(self, x.shape, x.dtype)]

    @property
    def has_gradient(self):
        """False: ordering only, nothing to differentiate."""
        return False

    def lower(self, lowering):
        """Lower to ``tf.identity`` of each slice under control dependencies on all the
        other inputs' slices.
        """
        mesh_impl = lowering.mesh_impl(self)
        control = _barrier_tokens(lowering, self.inputs[1:])
        x = lowering.tensors[self.inputs[0]].to_laid_out_tensor()
        with tf.control_dependencies(control):
            lowering.set_tensor_lowering(
                self.outputs[0], mesh_impl.slicewise(tf.identity, x))


def _barrier_tokens(lowering, dependencies) -> list:
    """One no-op per device that runs after every local slice of ``dependencies``.

    The same order as a control edge on every slice (an op gated on all the
    tokens waits for every slice), but a gated op gets one cross-device edge
    per device instead of one per remote slice, and the tokens are shared by
    every AfterAll of the lowering that waits on the same tensors (the
    race-free step gates every gradient behind one barrier): fewer messages
    and ops per step.
    """
    cache = lowering.__dict__.setdefault("_meshpar_barrier_tokens", {})
    key = tuple(id(d) for d in dependencies)
    if key not in cache:
        by_device = {}
        for dep in dependencies:
            for t in lowering.tensors[dep].to_laid_out_tensor().tensor_list:
                by_device.setdefault(t.device, []).append(t)
        tokens = []
        for device, tensors in by_device.items():
            with tf.device(device):
                tokens.append(tf.group(*tensors, name="after_all_token"))
        cache[key] = tokens
    return cache[key]


def after_all(x, dependencies: Iterable) -> "mtf.Tensor":
    """Return ``x``, available only after all ``dependencies`` are computed."""
    return AfterAll(x, list(dependencies)).outputs[0]


def _rate(learning_rate):
    """A float, or a scalar mtf.Tensor (a schedule of the global step) kept as is."""
    return learning_rate if isinstance(learning_rate, mtf.Tensor) else float(learning_rate)


def _decayed(step, var, learning_rate, weight_decay: float):
    """``step + learning_rate * weight_decay * var`` for a kernel (rank >= 2; biases and
    batch-norm parameters do not decay): decoupled weight decay, as AdamW, in the
    variable's one write (two read-modify-write assigns of one variable would race)."""
    if not weight_decay or var.outputs[0].shape.ndims < 2:
        return step
    return step + var.outputs[0] * (learning_rate * weight_decay)


def _decay_rate(var, learning_rate, weight_decay: float):
    """``learning_rate * weight_decay`` for a kernel, None where nothing decays (the fused
    form of :func:`_decayed`)."""
    if not weight_decay or var.outputs[0].shape.ndims < 2:
        return None
    return learning_rate * weight_decay


def _slot(var, suffix: str):
    return mtf.get_variable(var.mesh, var.name + suffix, var.shape, dtype=var.dtype,
                            initializer=tf.zeros_initializer(), trainable=False)


class _Fusable(mtf.optimize.Optimizer):
    """``fused=True`` (the default) lowers each variable's update to one TF kernel per
    slice (:mod:`meshpar.core.fused_apply`) where the variables allow it; ``False``
    writes the same rule as mtf arithmetic (a dozen ops per variable)."""

    fused = True

    def _use_fused(self, var) -> bool:
        return self.fused and fused_apply.fusable([var])

    def apply_grads(self, grads, variables):
        """Every variable's update; mtf's own Assigns combined as ``mtf.optimize`` does,
        fused updates kept as they are (``combine_assignments`` takes only Assigns)."""
        ops = []
        for grad, var in zip(grads, variables):
            ops.extend(self.apply_grad(grad, var))
        assigns = [op for op in ops if isinstance(op, mtf.Assign)]
        others = [op for op in ops if not isinstance(op, mtf.Assign)]
        if assigns:
            assigns = variables[0].graph.combine_assignments(assigns)
        return others + assigns


class Sgd(_Fusable):
    """Plain SGD: ``w -= lr * g`` (``+ lr * weight_decay * w`` for kernels)."""

    def __init__(self, learning_rate: float, weight_decay: float = 0.0, fused: bool = True):
        self.learning_rate = _rate(learning_rate)
        self.weight_decay = float(weight_decay)
        self.fused = bool(fused)

    def apply_grad(self, grad, var):
        """``var -= learning_rate * grad`` (no update for a None gradient)."""
        if grad is None:
            return []
        if self._use_fused(var):
            return [fused_apply.FusedApply(
                var, [], grad, [self.learning_rate], fused_apply.sgd_kernel,
                decay=_decay_rate(var, self.learning_rate, self.weight_decay))]
        return [mtf.assign_sub(var, _decayed(grad * self.learning_rate, var, self.learning_rate,
                                             self.weight_decay))]


class Momentum(_Fusable):
    """SGD with momentum, as ``tf.train.MomentumOptimizer``.

    ``v = momentum * v + g``, then ``w -= lr * v`` with the *new* ``v`` (mtf's
    own ``MomentumOptimizer`` subtracts the old one, which lags a step).
    """

    def __init__(self, learning_rate: float, momentum: float = 0.9, weight_decay: float = 0.0,
                 fused: bool = True):
        self.learning_rate = _rate(learning_rate)
        self.momentum = float(momentum)
        self.weight_decay = float(weight_decay)
        self.fused = bool(fused)

    def apply_grad(self, grad, var):
        """Update the momentum slot and the variable (no update for a None gradient)."""
        if grad is None:
            return []
        slot = _slot(var, "/momentum")
        if self._use_fused(var):
            return [fused_apply.FusedApply(
                var, [slot], grad, [self.learning_rate],
                fused_apply.momentum_kernel(self.momentum),
                decay=_decay_rate(var, self.learning_rate, self.weight_decay))]
        new_slot = slot * self.momentum + grad
        return [mtf.assign(slot, new_slot),
                mtf.assign_sub(var, _decayed(new_slot * self.learning_rate, var,
                                             self.learning_rate, self.weight_decay))]


class Adam(_Fusable):
    """Adam with bias correction, as ``tf.train.AdamOptimizer``.

    ``beta1^t`` and ``beta2^t`` are mtf scalar variables (``<scope>/beta1_power``,
    ``beta2_power``) updated behind the same barrier, so the bias correction
    never races with them.
    """

    def __init__(self, learning_rate: float, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, name: str = "adam", weight_decay: float = 0.0,
                 fused: bool = True):
        self.fused = bool(fused)
        self.learning_rate = _rate(learning_rate)
        self.weight_decay = float(weight_decay)
        self.beta1 = float(beta1)
        self.beta2 = float(beta2)
        self.epsilon = float(epsilon)
        self.name = name

    def apply_grads(self, grads, variables):
        """Adam updates for all ``(grad, variable)`` pairs, sharing one step count.

        Returns the assign operations; variables with a None gradient are skipped.
        """
        pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]
        if not pairs:
            return []
        mesh = pairs[0][1].mesh
        with tf.variable_scope(None, default_name=self.name):
            # beta1^t and beta2^t, as tf.train.AdamOptimizer keeps them.
            power1 = mtf.get_variable(mesh, "beta1_power", [], trainable=False,
                                      initializer=tf.ones_initializer())
            power2 = mtf.get_variable(mesh, "beta2_power", [], trainable=False,
                                      initializer=tf.ones_initializer())
        new_power1 = power1 * self.beta1
        new_power2 = power2 * self.beta2
        ops = [mtf.assign(power1, new_power1), mtf.assign(power2, new_power2)]
        # lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t), for the mtf arithmetic only: the
        # fused kernel computes it from the rate and the two powers itself.
        lr_t = (mtf.sqrt(1.0 - new_power2) / (1.0 - new_power1) * self.learning_rate
                if not all(self._use_fused(var) for _, var in pairs) else None)
        kernel = fused_apply.adam_kernel(self.beta1, self.beta2, self.epsilon)
        for grad, var in pairs:
            if self._use_fused(var):
                ops.append(fused_apply.FusedApply(
                    var, [_slot(var, "/adam_m"), _slot(var, "/adam_v")], grad,
                    [self.learning_rate, new_power1, new_power2], kernel,
                    decay=_decay_rate(var, self.learning_rate, self.weight_decay)))
            else:
                ops.extend(self._apply(grad, var, lr_t))
        return ops

    def _apply(self, grad, var, lr_t):
        m, v = _slot(var, "/adam_m"), _slot(var, "/adam_v")
        new_m = m * self.beta1 + grad * (1.0 - self.beta1)
        new_v = v * self.beta2 + mtf.square(grad) * (1.0 - self.beta2)
        step = _decayed(new_m / (mtf.sqrt(new_v) + self.epsilon) * lr_t, var,
                        self.learning_rate, self.weight_decay)
        return [mtf.assign(m, new_m), mtf.assign(v, new_v), mtf.assign_sub(var, step)]

    def apply_grad(self, grad, var):  # pragma: no cover - apply_grads is the entry point
        """Not supported: Adam needs the shared step count, so use :meth:`apply_grads`."""
        raise ValueError("Adam needs the step count: call apply_grads")


def make_optimizer(name: str, learning_rate: float, **kwargs):
    """``"sgd"``, ``"momentum"`` or ``"adam"`` -> an optimizer of this module."""
    table = {"sgd": Sgd, "momentum": Momentum, "adam": Adam}
    try:
        cls = table[name.lower()]
    except KeyError:
        raise ValueError(
            f"unknown optimizer {name!r}; choose one of {', '.join(sorted(table))}") from None
    return cls(learning_rate, **kwargs)


def _variables_and_grads(graph, loss, variables):
    if variables is None:
        variables = list(graph.trainable_variables)
    if not variables:
        raise ValueError("the graph has no trainable variables")
    grads = mtf.gradients([loss], [v.outputs[0] for v in variables])
    return list(variables), grads


def race_free_update_ops(graph, loss, optimizer, variables=None,
                         extra_dependencies: Iterable = (), bucket: bool = True,
                         model_updates: Iterable = ()) -> list:
    """Gradient step whose every variable update runs after the whole backward pass.

    Parameters
    ----------
    graph : mtf.Graph
    loss : mtf.Tensor
        Scalar loss.
    optimizer : mtf.optimize.Optimizer
        :class:`Sgd`, :class:`Momentum`, :class:`Adam` or any mtf optimizer.
    variables : list of mtf.Variable, optional
        Defaults to ``graph.trainable_variables``.
    extra_dependencies : iterable of mtf.Tensor
        Other tensors the caller fetches in the same ``session.run`` (logits,
        metrics): the updates wait for them too.
    bucket : bool
        All-reduce the gradients together (:func:`allreduce_together`), one
        message per device pair instead of one per variable.
    model_updates : iterable of mtf.Operation
        The model's own updates of the step (batch-norm moving averages, an
        average of the weights): the optimizer's writes wait for the values
        they assign (which may read a weight the optimizer writes); returned
        after the optimizer's operations, in their order.

    Every ``mtf.Assign`` returned (the optimizer's, e.g. an ``mtf.optimize``
    rule's slots, and the model's) is made again to write only after every
    value any of them assigns, and the gradients, are computed: a rule that
    reads a variable it also writes in the step (``mtf.optimize.MomentumOptimizer``
    subtracts its velocity while it assigns a new one) then reads the value
    from before the step on every mesh, not whichever the executor reached
    first. The original assignments are left unused in the graph, except one
    that an ``mtf.depend`` waits for (it runs where the model put it, once).

    Returns
    -------
    list of mtf.Operation
        The update (assign) operations; lower them and group their lowered ops.
    """
    variables, grads = _variables_and_grads(graph, loss, variables)
    if bucket:
        reduced = iter(allreduce_together([g for g in grads if g is not None]))
        grads = [None if g is None else next(reduced) for g in grads]
    model_updates = list(model_updates)
    reads = {}  # id of an assigned value -> the value read once, a tensor of its own
    barrier = ([g for g in grads if g is not None] + [loss] + list(extra_dependencies)
               + _assigned_values(model_updates, reads))
    gated = [None if g is None else after_all(g, barrier) for g in grads]
    ops = optimizer.apply_grads(gated, variables) + model_updates
    step = [g for g in gated if g is not None] + _assigned_values(ops, reads)
    awaited = _awaited_operations(graph)
    return [op if id(op) in awaited else _written_after(op, step, reads) for op in ops]


def _awaited_operations(graph) -> set:
    """Ids of the operations an ``mtf.depend`` of ``graph`` waits for: an update the
    model made part of its forward pass runs there, so it is neither made again (the
    copy would apply it a second time) nor put after the step (a cycle)."""
    return {id(d) for op in graph.operations if isinstance(op, mtf.Depend)
            for d in op._dependencies  # pylint: disable=protected-access  (no accessor)
            if isinstance(d, mtf.Operation)}


def _assigned_values(ops, reads: dict) -> list:
    """The values the ``mtf.Assign`` operations among ``ops`` assign, each read into a
    tensor of its own (a variable's own output would be read again by each consumer,
    and a gate on it would order none of those reads); ``reads`` caches them."""
    values = []
    for op in ops:
        if isinstance(op, mtf.Assign):
            for value in op.inputs:
                if id(value) not in reads:
                    reads[id(value)] = _ReadOnce(value).outputs[0]
                values.append(reads[id(value)])
    return values


class _ReadOnce(mtf.Operation):
    """``x`` read into tensors of its own, one per slice. With reference variables
    (resource variables off) a copy: a read of one shares the variable's buffer, so a
    write after the read would still change what a later consumer of the read sees."""

    def __init__(self, x):
        super().__init__([x], x.mesh, name="assigned_value")
        self._outputs = [mtf.Tensor(self, x.shape, x.dtype)]

    @property
    def has_gradient(self):
        """False: used on the step's updates, after differentiation."""
        return False

    def lower(self, lowering):
        """``tf.identity`` of each slice (a resource variable's read is its own), else
        ``DeepCopy``."""
        mesh_impl = lowering.mesh_impl(self)
        copy = (tf.identity if tf.resource_variables_enabled()
                else lambda t: tf.raw_ops.DeepCopy(x=t))
        x = lowering.tensors[self.inputs[0]].to_laid_out_tensor()
        lowering.set_tensor_lowering(self.outputs[0], mesh_impl.slicewise(copy, x))


def _written_after(op, barrier, reads: dict):
    """``op`` again assigning its values (as read in ``reads``) only after every tensor
    of ``barrier`` (an ``mtf.Assign``; any other operation as it is)."""
    if not isinstance(op, mtf.Assign):
        return op
    return mtf.Assign(op.variables, [after_all(reads[id(v)], barrier) for v in op.inputs],
                      op.assign_fn, name=f"{op.name.split('/')[-1]}_after_step")


class AllreduceTogether(mtf.Operation):
    """Identity of several tensors whose pending all-reduces run as ONE per group of
    mesh axes (a flat concatenation of every slice, reduced, then split back).

    The weight gradients of a data-parallel step are sums over the batch that mtf
    all-reduces one by one (``LazyAllreduceSum``): dozens of small messages a
    step, each a point where a device waits for the others. Together they are
    one message per device pair. Each element is the same sum as before.
    Inputs without a pending all-reduce pass through.
    """

    def __init__(self, xs: Sequence, name: Optional[str] = None):
        if not xs:
            raise ValueError("allreduce_together: no tensors")
        super().__init__(list(xs), xs[0].mesh, name=name or "allreduce_together")
        self._outputs = [mtf.Tensor(self, x.shape, x.dtype) for x in xs]

    @property
    def has_gradient(self):
        """False: used on gradients, after differentiation."""
        return False

    def lower(self, lowering):
        """Group pending all-reduces by (mesh axes, dtype); one all-reduce a group.
        A sum over mesh axes of size 1 only (a batch axis of one row) is its input:
        flattening and splitting it back would copy every gradient a step for
        nothing (vgg-cifar-pairs at batch 8 on one device: 1.8 ms of a 55 ms step)."""
        mesh_impl = lowering.mesh_impl(self)
        groups = {}
        for x, y in zip(self.inputs, self.outputs):
            lowered = lowering.tensors[x]
            if isinstance(lowered, mtf.LazyAllreduceSum) and all(
                    mesh_impl.shape.dims[a].size == 1 for a in lowered.mesh_axes):
                lowering.set_tensor_lowering(y, lowered.to_laid_out_tensor())
            elif isinstance(lowered, mtf.LazyAllreduceSum):
                key = (tuple(sorted(lowered.mesh_axes)), x.dtype)
                groups.setdefault(key, []).append((y, lowered))
            else:
                lowering.set_tensor_lowering(y, lowered)
        for (axes, _), members in groups.items():
            parts = [lazy.laid_out_input for _, lazy in members]
            flat = mesh_impl.slicewise(
                lambda *ts: tf.concat([tf.reshape(t, [-1]) for t in ts], 0), *parts)
            reduced = mesh_impl.allreduce(flat, list(axes), "SUM")

            def unflatten(flat_slice, *ts):
                sizes = [t.shape.num_elements() for t in ts]
                pieces = tf.split(flat_slice, sizes)
                return tuple(tf.reshape(p, t.shape) for p, t in zip(pieces, ts))

            outs = mesh_impl.slicewise(unflatten, reduced, *parts)  # a tuple: one per part
            for (y, lazy), out in zip(members, outs):
                if lazy.add_counter_fn:
                    lazy.add_counter_fn()
                lowering.set_tensor_lowering(y, out)


def allreduce_together(xs: Sequence) -> list:
    """``xs`` unchanged, their pending all-reduces run together (:class:`AllreduceTogether`)."""
    return AllreduceTogether(list(xs)).outputs


def naive_update_ops(graph, loss, optimizer, variables=None) -> list:
    """The unordered step (what ``mtf.optimize`` does): for demonstrations and tests."""
    variables, grads = _variables_and_grads(graph, loss, variables)
    return optimizer.apply_grads(grads, variables)


_ASSIGN_TYPES = {"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp",
                 "Assign", "AssignAdd", "AssignSub"}
_VARIABLE_TYPES = {"VarHandleOp", "VariableV2", "Variable"}


def unordered_reads(fetches) -> list:
    """Variable reads in a step that are not ordered before that variable's writes.

    Looks at the TF ops ``session.run(fetches)`` would execute. For each
    variable written in the step, every read of it (a ``ReadVariableOp`` of a
    resource variable, any non-assign consumer of a reference variable) must
    be an ancestor of every write; otherwise the executor may run the read
    after the write. An empty list means the step is race-free.

    Parameters
    ----------
    fetches : tf.Tensor, tf.Operation or a (nested) list of them

    Returns
    -------
    list of (str, str)
        ``(read op name, write op name)`` pairs that are unordered.
    """
    roots = [f.op if isinstance(f, tf.Tensor) else f for f in tf.nest.flatten(fetches)]
    closure = _ancestors(roots)
    writes, reads = {}, {}
    for op in closure:
        if op.type in fused_apply.APPLY_KERNEL_WRITES:
            for handle in list(op.inputs)[:fused_apply.APPLY_KERNEL_WRITES[op.type]]:
                writes.setdefault(handle.op, []).append(op)
        elif op.type in _ASSIGN_TYPES and op.inputs:
            var = op.inputs[0].op
            if var.type in _VARIABLE_TYPES:
                writes.setdefault(var, []).append(op)
        elif op.type == "ReadVariableOp":
            reads.setdefault(op.inputs[0].op, []).append(op)
        else:
            for inp in op.inputs:
                if inp.op.type in ("VariableV2", "Variable"):
                    reads.setdefault(inp.op, []).append(op)
    found = []
    for var, var_writes in writes.items():
        for write in var_writes:
            before = _ancestors([write])
            for read in reads.get(var, []):
                if read not in before:
                    found.append((read.name, write.name))
    return found


def _ancestors(roots) -> set:
    """``roots`` and every op they depend on through data or control edges."""
    seen, stack = set(), list(roots)
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return seen
