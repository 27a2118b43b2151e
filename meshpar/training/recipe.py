"""The training recipe an estimator's ``params`` select: loss, extra metrics,
learning-rate schedule, decoupled weight decay and gradient clipping.

==================  =========================================================
``params`` key      meaning (default)
==================  =========================================================
``loss``            a name of :data:`meshpar.training.losses.LOSSES` or a
                    callable ``(logits, labels, class_dim) -> scalar``
                    (``"cross_entropy"``)
``class_weights``   one weight per class, for ``weighted_cross_entropy``
``focal_gamma``     focusing exponent of ``focal`` (2.0)
``metrics``         ``{name: fn(labels, predictions) -> (value, update_op)}``
                    added to evaluation; ``predictions`` has ``classes``,
                    ``probabilities`` and ``logits`` (none)
``lr_schedule``     ``"constant"``, ``"cosine"``, ``"step"``
                    (:mod:`meshpar.training.schedules`) or a callable
                    ``global_step -> float32 scalar`` (``"constant"``)
``warmup_steps``    linear warm-up steps of the schedule (0)
``total_steps``     where ``cosine`` reaches ``min_lr``
``decay_steps``,    ``step``: multiply by ``decay_rate`` every
``decay_rate``      ``decay_steps`` (0.1)
``min_lr``          final rate of ``cosine`` (0.0)
``weight_decay``    decoupled (AdamW-style) decay: ``w -= lr_t *
                    weight_decay * w`` with the optimizer's step, for kernels
                    (variables of rank >= 2), not biases or batch-norm
                    parameters (0.0; :mod:`meshpar.core.optim`)
``clip_norm``       scale all gradients by ``clip_norm / max(norm, clip_norm)``
                    (``norm`` the global norm) before the optimizer (None)
==================  =========================================================

Everything runs inside the Mesh-TF graph behind the race-free step
(:mod:`meshpar.core.optim`), so every mesh trains like one device.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Union

import meshpar  # noqa: F401  (installs the mesh_tensorflow import shim)
import mesh_tensorflow as mtf

from meshpar.core.optim import make_optimizer
from meshpar.core.splits import integer_at_least
from meshpar.training.defaults import DEFAULT_WEIGHT_DECAY  # re-exported: TF-free home

__all__ = ["Recipe", "ClipByGlobalNorm", "balanced_accuracy", "PARAM_KEYS", "DEFAULT_WEIGHT_DECAY"]

PARAM_KEYS = ("loss", "class_weights", "focal_gamma", "metrics", "lr_schedule", "warmup_steps",
              "total_steps", "decay_steps", "decay_rate", "min_lr", "weight_decay", "clip_norm")


@dataclass(frozen=True)
class Recipe:
    """The parsed ``params`` (see the module table); :meth:`from_params` validates them."""

    loss: Union[str, Callable] = "cross_entropy"
    class_weights: Optional[tuple] = None
    focal_gamma: float = 2.0
    metrics: Mapping = field(default_factory=dict)
    lr_schedule: Union[str, Callable] = "constant"
    warmup_steps: int = 0
    total_steps: Optional[int] = None
    decay_steps: Optional[int] = None
    decay_rate: float = 0.1
    min_lr: float = 0.0
    weight_decay: float = 0.0
    clip_norm: Optional[float] = None

    @classmethod
    def from_params(cls, params: Optional[Mapping]) -> "Recipe":
        """A recipe from an estimator's ``params``; ValueError for an unknown key or a bad
        value."""
        if params is not None and not isinstance(params, Mapping):
            raise TypeError(f"params must be a dict of {', '.join(PARAM_KEYS)}; got {params!r}")
        params = dict(params or {})
        unknown = sorted(set(params) - set(PARAM_KEYS))
        if unknown:
            raise ValueError(f"unknown params {', '.join(unknown)}; meshpar reads "
                             f"{', '.join(PARAM_KEYS)}")
        given = {k: v for k, v in params.items() if v is not None}
        loss = given.get("loss", "cross_entropy")
        for key, owner in (("class_weights", "weighted_cross_entropy"), ("focal_gamma", "focal")):
            if key in given and loss != owner:  # it would be ignored: not the run asked for
                raise ValueError(f"params[{key!r}] goes with loss={owner!r}; loss={loss!r} "
                                 "would ignore it")
        _refuse_ignored_schedule_settings(given)
        if "class_weights" in given:
            given["class_weights"] = _class_weights(given["class_weights"])
        for key in ("focal_gamma", "decay_rate", "min_lr", "weight_decay", "clip_norm"):
            if key in given and (isinstance(given[key], bool)
                                 or not isinstance(given[key], numbers.Real)):
                raise TypeError(f"params[{key!r}] must be a number, got {given[key]!r}")
        for key, least in (("warmup_steps", 0), ("total_steps", 1), ("decay_steps", 1)):
            if key in given:  # a fraction of a step, or -1 warm-up steps, is no schedule
                integer_at_least(given[key], f"params[{key!r}]", least)
        recipe = cls(**given)
        recipe._check()
        return recipe

    def _check(self) -> None:
        from meshpar.training.losses import make_loss
        from meshpar.training.schedules import SCHEDULES

        make_loss(self.loss)  # the name exists
        if not isinstance(self.metrics, Mapping) or not all(
                callable(f) for f in self.metrics.values()):
            raise ValueError("params['metrics'] must map names to metric functions")
        if not callable(self.lr_schedule) and self.lr_schedule not in SCHEDULES:
            raise ValueError(f"unknown learning-rate schedule {self.lr_schedule!r}; choose one "
                             f"of {', '.join(SCHEDULES)} or pass a callable")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be finite and >= 0, got {self.weight_decay}")
        if self.clip_norm is not None and not (math.isfinite(self.clip_norm)
                                               and self.clip_norm > 0):
            raise ValueError(f"clip_norm must be finite and > 0, got {self.clip_norm}")
        if not (math.isfinite(self.focal_gamma) and self.focal_gamma >= 0):
            raise ValueError(f"focal_gamma must be finite and >= 0, got {self.focal_gamma}")

    def check_learning_rate(self, lr: float) -> None:
        """ValueError for a schedule that ``lr`` and this recipe's settings make
        impossible (what building the step would find): for a caller that must
        refuse them before it writes anything."""
        if callable(self.lr_schedule):
            return
        from meshpar.training.schedules import check_schedule

        check_schedule(self.lr_schedule, float(lr), self.warmup_steps, self.total_steps,
                       self.decay_steps, self.decay_rate, self.min_lr)

    @property
    def scheduled(self) -> bool:
        """True if the learning rate changes with the step (a tensor, not a float)."""
        return callable(self.lr_schedule) or self.lr_schedule != "constant" or \
            self.warmup_steps > 0

    def learning_rate(self, lr: float, global_step):
        """The step's rate: ``lr`` itself (a float) unless :attr:`scheduled`, else a
        float32 TF scalar of ``global_step``."""
        if not self.scheduled:
            return float(lr)
        if callable(self.lr_schedule):
            import tensorflow.compat.v1 as tf

            return tf.cast(self.lr_schedule(global_step), tf.float32)
        from meshpar.training.schedules import learning_rate_tensor

        return learning_rate_tensor(self.lr_schedule, float(lr), global_step,
                                    self.warmup_steps, self.total_steps, self.decay_steps,
                                    self.decay_rate, self.min_lr)

    def loss_fn(self) -> Callable:
        """``(logits, labels, class_dim) -> scalar mtf loss``."""
        from meshpar.training.losses import make_loss

        return make_loss(self.loss, {"class_weights": self.class_weights,
                                     "focal_gamma": self.focal_gamma})

    def optimizer(self, rule, learning_rate):
        """The optimizer of the step: ``rule`` (a name of :func:`meshpar.core.optim.make_optimizer`,
        an mtf optimizer or a factory of one) at ``learning_rate`` (a float or a scalar
        mtf tensor) with the recipe's weight decay, clipped when ``clip_norm`` is set."""
        if isinstance(rule, str):
            rule = make_optimizer(rule, learning_rate, weight_decay=self.weight_decay)
        else:
            if self.scheduled or self.weight_decay:
                raise ValueError("a learning-rate schedule or weight decay needs the optimizer "
                                 "by name ('adam', 'momentum', 'sgd'), not an optimizer object")
            if callable(rule) and not isinstance(rule, mtf.optimize.Optimizer):
                rule = rule()  # a factory: a fresh optimizer per graph
        return rule if self.clip_norm is None else ClipByGlobalNorm(rule, self.clip_norm)

    def eval_metrics(self, labels, predictions: dict) -> dict:
        """The ``metrics`` functions applied to one evaluation batch."""
        return {name: fn(labels, predictions) for name, fn in self.metrics.items()}


def _refuse_ignored_schedule_settings(given: Mapping) -> None:
    """ValueError for a schedule setting of ``given`` (params without None values) that
    its ``lr_schedule`` would ignore with a value other than the default: decay_steps
    with the constant schedule trained at a constant rate in silence (the CLI refuses
    its flags so; its defaults, as any default, change nothing and pass)."""
    schedule = given.get("lr_schedule", "constant")
    for key, needs in (("decay_steps", "step"), ("decay_rate", "step"), ("min_lr", "cosine"),
                       ("warmup_steps", None), ("total_steps", None)):
        if key not in given or given[key] == getattr(Recipe, key):
            continue
        if callable(schedule):
            raise ValueError(f"params[{key!r}] is a setting of the named schedules; a callable "
                             "lr_schedule computes the rate itself and would ignore it")
        if needs is not None and schedule != needs:
            raise ValueError(f"params[{key!r}] goes with lr_schedule={needs!r}; "
                             f"lr_schedule={schedule!r} would ignore it")


def _class_weights(value) -> tuple:
    """``params['class_weights']`` as a tuple of floats; TypeError for anything but a
    sequence of numbers (``'balanced'`` is `meshpar train`'s: it counts the training set)."""
    weights = None if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__") \
        else list(value)
    if weights is None or any(isinstance(w, bool) or not isinstance(w, numbers.Real)
                              for w in weights):
        hint = (" ('balanced' is `meshpar train --class-weights`'s: it counts the training set;"
                " give the weights here)") if isinstance(value, str) and value == "balanced" else ""
        raise TypeError(f"params['class_weights'] must be a list of numbers, one per class, "
                        f"got {value!r}{hint}")
    return tuple(float(w) for w in weights)


class ClipByGlobalNorm(mtf.optimize.Optimizer):
    """An mtf optimizer around another whose gradients are first scaled by
    ``clip_norm / max(norm, clip_norm)``, ``norm`` the global norm of all of them
    (a sum of per-gradient all-reduced squares, the same on every mesh).

    It gets the race-free step's gated gradients, so the norm waits for the whole
    backward pass like the inner rule does.
    """

    def __init__(self, inner, clip_norm: float):
        self.inner = inner
        self.clip_norm = float(clip_norm)

    def apply_grads(self, grads, variables):
        """Clip, then the inner rule's update; returns its assign operations."""
        present = [g for g in grads if g is not None]
        if present:
            total = mtf.add_n([mtf.reduce_sum(mtf.square(g)) for g in present])
            scale = mtf.minimum(mtf.rsqrt(total) * self.clip_norm, 1.0)
            grads = [None if g is None else g * scale for g in grads]
        return self.inner.apply_grads(grads, variables)

    def apply_grad(self, grad, var):
        """Not supported: the global norm needs every gradient, so use :meth:`apply_grads`."""
        raise ValueError("ClipByGlobalNorm needs all gradients: call apply_grads")


def balanced_accuracy(labels, predictions):
    """A ``params['metrics']`` function: mean recall over the classes
    (``tf.metrics.mean_per_class_accuracy``)."""
    import tensorflow.compat.v1 as tf

    classes = predictions["classes"]
    num = predictions["probabilities"].shape.as_list()[-1]
    return tf.metrics.mean_per_class_accuracy(labels, classes, num)
