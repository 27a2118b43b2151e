"""One TF kernel per variable slice for an optimizer's update (``ResourceApply*``).

Why
---
Written as mtf arithmetic, an Adam update is about a dozen element-wise ops per
variable (moments, square root, division, decay, three assigns, three reads),
each lowered once per device and each a pass over the variable's slice. TF
ships the same rules as single kernels (``ResourceApplyAdam``,
``ResourceApplyMomentum``, ``ResourceApplyGradientDescent``) that update the
variable and its slots in place in one pass. :class:`FusedApply` lowers an
update to one such kernel per slice (plus one op for decoupled weight decay of
kernels). Measured (docs/measuring.md, "Optimizer kernels"): on vgg-cifar
(4.6M parameters) the fast worker alone went from 67 to 73 samples/s; on
resattnet3d-small (60k parameters) the update was never the cost.

The slots stay the same per-variable mtf variables with the same names, so
checkpoints are unchanged and a run can switch between fused and unfused
updates. The arithmetic is the same formula as the mtf version; results differ
only by floating-point rounding (tests compare them).
"""
from __future__ import annotations

import copy
from typing import Callable, Optional, Sequence

import meshpar  # noqa: F401  (installs the mesh_tensorflow import shim)
import mesh_tensorflow as mtf
import tensorflow.compat.v1 as tf

__all__ = ["FusedApply", "fusable", "APPLY_KERNEL_WRITES"]

#: TF kernels that write variables, and how many of their leading inputs they
#: write (the variable, then its slots): the race check needs to know.
APPLY_KERNEL_WRITES = {
    "ResourceApplyAdam": 3,
    "ResourceApplyMomentum": 2,
    "ResourceApplyGradientDescent": 1,
}


def fusable(variables: Sequence) -> bool:
    """True when every variable is float32 in its slices and as master and TF makes
    resource variables (its default; ``tf.disable_resource_variables()`` or
    ``disable_v2_behavior()`` switch to reference variables): the kernels update
    float32 resource variables in place; anything else takes the mtf path."""
    return tf.resource_variables_enabled() and all(
        v.slice_dtype == tf.float32 and v.master_dtype == tf.float32 for v in variables)


class FusedApply(mtf.Operation):
    """Update ``variable`` (and its ``slots``) with one kernel per slice.

    Parameters
    ----------
    variable : mtf.Variable
    slots : list of mtf.Variable
        Slot variables of the same shape and layout, in the kernel's order.
    grad : mtf.Tensor
        The (already reduced, already gated) gradient of ``variable``.
    scalars : list of mtf.Tensor or float
        Scalar operands of the kernel (learning rate, step count powers, ...);
        mtf scalars are lowered per device.
    kernel : callable
        ``kernel(var_handle, slot_handles, grad_slice, scalar_slices) -> tf.Operation``.
    decay : mtf.Tensor or float, optional
        Decoupled weight decay factor ``lr * weight_decay``: ``w -= decay * w``
        in its own write, ordered before the kernel's (two unordered writes of
        one variable would race).
    """

    def __init__(self, variable, slots: Sequence, grad, scalars: Sequence,
                 kernel: Callable, decay=None, name: Optional[str] = None):
        as_op = lambda v: v.operation if isinstance(v, mtf.Tensor) else v  # noqa: E731
        variable = as_op(variable)
        self._variable = variable
        self._slots = [as_op(s) for s in slots]
        for v in self.variables:
            _exclude_from_stacking(v)
        self._kernel = kernel
        self._n_scalars = len(scalars)
        # The scalars, then the decay: mtf tensors among them are inputs, lowered per device.
        self._operands = list(scalars) + ([] if decay is None else [decay])
        mtf_inputs = [grad] + [s for s in self._operands if isinstance(s, mtf.Tensor)]
        super().__init__(mtf_inputs, variable.mesh, name=name or "fused_apply")
        self._outputs = []

    @property
    def has_gradient(self):
        """False: an update, after differentiation."""
        return False

    @property
    def variables(self):
        """The variables this operation writes (the variable, then its slots)."""
        return [self._variable] + self._slots

    def lower(self, lowering):
        """One kernel per slice on that slice's device (and one decay write before it)."""
        mesh_impl = lowering.mesh_impl(self)
        grads = lowering.tensors[self.inputs[0]].to_laid_out_tensor().all_slices
        lowered = iter(self.inputs[1:])
        operands = []  # per operand: a list of one tensor per processor
        for value in self._operands:
            if isinstance(value, mtf.Tensor):
                operands.append(lowering.tensors[next(lowered)].to_laid_out_tensor().all_slices)
            else:
                operands.append([value] * mesh_impl.size)
        scalars, decay = operands[:self._n_scalars], operands[self._n_scalars:]
        var_slices = lowering.variables[self._variable].laid_out_tensor.all_slices
        slot_slices = [lowering.variables[s].laid_out_tensor.all_slices for s in self._slots]
        ops = []
        for pnum, device in enumerate(mesh_impl.devices):
            with tf.device(device):
                var = var_slices[pnum]
                before = [grads[pnum]]
                if decay:
                    # Gated on the gradient, so on the step's barrier like the kernel.
                    with tf.control_dependencies(before):
                        rate = tf.cast(decay[0][pnum], var.dtype)
                        before = [tf.raw_ops.ResourceApplyGradientDescent(
                            var=var.handle, alpha=rate, delta=var.read_value())]
                with tf.control_dependencies(before):
                    ops.append(self._kernel(var.handle, [s[pnum].handle for s in slot_slices],
                                            grads[pnum], [s[pnum] for s in scalars]))
        lowering.operations[self] = tf.group(ops)


def _exclude_from_stacking(variable) -> None:
    """Keep ``variable`` out of mtf's variable stacking.

    ``mtf.Lowering`` (autostack) merges small variables of one shape that no
    ``mtf.Assign`` writes, or that the same Assigns write, into one stacked
    variable, and rewrites only Assigns to match: a kernel given the original
    slice variables would then find none. Stacking keys on, among others, the
    ``__dict__`` of the variable's dtype object, so a private copy naming the
    variable makes its key unique. (Stacking only shortens graph building; it
    adds a stack and an unstack op per group to every step.)
    """
    dtype = copy.copy(variable._dtype)  # pylint: disable=protected-access
    dtype.meshpar_unstacked = variable.name
    variable._dtype = dtype  # pylint: disable=protected-access


def adam_kernel(beta1: float, beta2: float, epsilon: float) -> Callable:
    """``ResourceApplyAdam``: the moments, then ``w -= lr_t * m / (sqrt(v) + eps)`` with
    ``lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)`` (tf.train.AdamOptimizer's rule).
    Scalars: learning rate, beta1^t, beta2^t."""
    def kernel(var, slots, grad, scalars):
        lr, power1, power2 = (tf.cast(s, grad.dtype) for s in scalars)
        return tf.raw_ops.ResourceApplyAdam(
            var=var, m=slots[0], v=slots[1], beta1_power=power1, beta2_power=power2,
            lr=lr, beta1=tf.constant(beta1, grad.dtype), beta2=tf.constant(beta2, grad.dtype),
            epsilon=tf.constant(epsilon, grad.dtype), grad=grad)
    return kernel


def momentum_kernel(momentum: float) -> Callable:
    """``ResourceApplyMomentum``: ``v = momentum * v + g; w -= lr * v``. Scalar: the rate."""
    def kernel(var, slots, grad, scalars):
        return tf.raw_ops.ResourceApplyMomentum(
            var=var, accum=slots[0], lr=tf.cast(scalars[0], grad.dtype), grad=grad,
            momentum=tf.constant(momentum, grad.dtype))
    return kernel


def sgd_kernel(var, slots, grad, scalars):
    """``ResourceApplyGradientDescent``: ``w -= lr * g``. Scalar: the rate."""
    return tf.raw_ops.ResourceApplyGradientDescent(
        var=var, alpha=tf.cast(scalars[0], grad.dtype), delta=grad)
