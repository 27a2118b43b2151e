"""Learning-rate schedules: the rate of step ``t`` (the global step before the update).

All schedules start with an optional linear warm-up, ``lr * (t + 1) / W`` for
``t < W = warmup_steps``; then

==========  ==============================================================
name        rate at step ``t >= W``
==========  ==============================================================
constant    ``lr``
cosine      ``min_lr + (lr - min_lr) * (1 + cos(pi * u)) / 2``,
            ``u = min(1, (t - W) / (total_steps - W))``
step        ``lr * decay_rate ** floor((t - W) / decay_steps)``
==========  ==============================================================

:func:`learning_rate` gives the float for a step (for reports and tests);
:func:`learning_rate_tensor` the same formula as a TF scalar of the global
step, which the estimator imports into the Mesh-TF graph as the optimizer's
rate.

>>> [round(learning_rate("cosine", 1.0, t, warmup_steps=2, total_steps=6), 3) for t in range(7)]
[0.5, 1.0, 1.0, 0.854, 0.5, 0.146, 0.0]
"""
from __future__ import annotations

import math

__all__ = ["SCHEDULES", "check_schedule", "learning_rate", "learning_rate_tensor"]

SCHEDULES = ("constant", "cosine", "step")


def check_schedule(name: str, lr: float, warmup_steps: int = 0, total_steps=None,
                   decay_steps=None, decay_rate: float = 0.1, min_lr: float = 0.0) -> None:
    """ValueError naming what is wrong with a schedule's settings."""
    if name not in SCHEDULES:
        raise ValueError(f"unknown learning-rate schedule {name!r}; choose one of "
                         f"{', '.join(SCHEDULES)}")
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"learning rate must be finite and > 0, got {lr}")
    if warmup_steps < 0:
        raise ValueError(f"learning-rate warm-up steps must be >= 0, got {warmup_steps}")
    if name == "cosine":
        if total_steps is None or total_steps <= warmup_steps:
            raise ValueError(f"cosine schedule: total steps ({total_steps}) must exceed the "
                             f"warm-up steps ({warmup_steps})")
        if not 0 <= min_lr <= lr:
            raise ValueError(f"cosine schedule: min_lr must be in [0, lr], got {min_lr}")
    if name == "step":
        if decay_steps is None or decay_steps < 1:
            raise ValueError(f"step schedule: decay_steps must be >= 1, got {decay_steps}")
        if not 0 < decay_rate <= 1:
            raise ValueError(f"step schedule: decay_rate must be in (0, 1], got {decay_rate}")
        # steps 0 .. total - 1 run: a first decay at or past the total never comes (was a
        # constant rate in silence, as cosine's warm-up past the total is refused)
        if total_steps is not None and warmup_steps + decay_steps >= total_steps:
            raise ValueError(f"step schedule: the first decay, after {warmup_steps} warm-up "
                             f"and {decay_steps} decay steps, is not before the total steps "
                             f"({total_steps}): the rate would never decay (give fewer "
                             "decay steps, or the constant schedule)")
    if name == "constant" and total_steps is not None and warmup_steps > total_steps:
        raise ValueError(f"constant schedule: total steps ({total_steps}) are fewer than the "
                         f"warm-up steps ({warmup_steps}): the rate would never reach its peak")


def learning_rate(name: str, lr: float, step: int, warmup_steps: int = 0, total_steps=None,
                  decay_steps=None, decay_rate: float = 0.1, min_lr: float = 0.0) -> float:
    """The rate of ``step`` (0-based) under schedule ``name``."""
    check_schedule(name, lr, warmup_steps, total_steps, decay_steps, decay_rate, min_lr)
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    after = step - warmup_steps
    if name == "cosine":
        u = min(1.0, after / (total_steps - warmup_steps))
        return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * u))
    if name == "step":
        return lr * decay_rate ** (after // decay_steps)
    return lr


def learning_rate_tensor(name: str, lr: float, global_step, warmup_steps: int = 0,
                         total_steps=None, decay_steps=None, decay_rate: float = 0.1,
                         min_lr: float = 0.0):
    """:func:`learning_rate` as a float32 TF scalar of the int ``global_step`` tensor."""
    import tensorflow.compat.v1 as tf

    check_schedule(name, lr, warmup_steps, total_steps, decay_steps, decay_rate, min_lr)
    t = tf.cast(global_step, tf.float64)
    if name == "cosine":
        u = tf.minimum((t - warmup_steps) / float(total_steps - warmup_steps), 1.0)
        rate = min_lr + (lr - min_lr) * 0.5 * (1.0 + tf.cos(math.pi * u))
    elif name == "step":
        rate = lr * tf.pow(tf.constant(decay_rate, tf.float64),
                           tf.floor((t - warmup_steps) / float(decay_steps)))
    else:
        rate = tf.constant(lr, tf.float64)
    if warmup_steps:
        rate = tf.where(t < warmup_steps, lr * (t + 1.0) / warmup_steps, rate)
    return tf.cast(rate, tf.float32, name="scheduled_learning_rate")
