"""Training losses on Mesh-TensorFlow logits, by name or as a callable.

Every loss takes ``(logits [batch, classes], labels int [batch], class_dim,
options)`` and returns a scalar mtf tensor; the batch may be split over the
mesh (the mean is then an all-reduce), so every mesh computes the same value.

=========================  =================================================
name                       loss
=========================  =================================================
``cross_entropy``          mean softmax cross-entropy (the default)
``weighted_cross_entropy`` ``sum_i w[y_i] CE_i / sum_i w[y_i]`` with
                           ``options["class_weights"]`` (one per class)
``focal``                  mean ``(1 - p_t)^gamma CE_i`` (Lin et al. 2017),
                           ``gamma = options["focal_gamma"]`` (default 2)
=========================  =================================================

A callable ``loss(logits, labels, class_dim) -> scalar mtf.Tensor`` can be
given instead of a name (``params["loss"]`` of the estimator).

Evaluation scores each example (:func:`example_losses`, on the exported
logits), so a padded last batch counts by its real examples only.
"""
from __future__ import annotations

from typing import Callable, Mapping, Union

__all__ = ["LOSSES", "make_loss", "example_losses", "cross_entropy", "weighted_cross_entropy",
           "focal"]


def _per_example(logits, labels, class_dim):
    """Softmax cross-entropy of each example, ``[batch]``."""
    import mesh_tensorflow as mtf

    targets = mtf.one_hot(labels, class_dim, dtype=logits.dtype)
    return mtf.layers.softmax_cross_entropy_with_logits(logits, targets, class_dim)


def cross_entropy(logits, labels, class_dim, options=None):
    """Mean softmax cross-entropy over the batch."""
    import mesh_tensorflow as mtf

    return mtf.reduce_mean(_per_example(logits, labels, class_dim))


def weighted_cross_entropy(logits, labels, class_dim, options=None):
    """Cross-entropy weighted by class: ``sum w[y] CE / sum w[y]``.

    ``options["class_weights"]``: one weight > 0 per class (e.g. inverse
    class frequencies for an unbalanced cohort).
    """
    import mesh_tensorflow as mtf
    import tensorflow.compat.v1 as tf

    weights = list((options or {}).get("class_weights") or [])
    if len(weights) != class_dim.size or not all(w > 0 for w in weights):
        raise ValueError(f"weighted_cross_entropy needs class_weights: {class_dim.size} "
                         f"weights > 0, got {weights}")
    targets = mtf.one_hot(labels, class_dim, dtype=logits.dtype)
    per_class = mtf.import_tf_tensor(logits.mesh, tf.constant(weights, dtype=logits.dtype),
                                     mtf.Shape([class_dim]))
    example_weight = mtf.reduce_sum(targets * per_class, reduced_dim=class_dim)
    ce = mtf.layers.softmax_cross_entropy_with_logits(logits, targets, class_dim)
    return mtf.reduce_sum(ce * example_weight) / mtf.reduce_sum(example_weight)


def focal(logits, labels, class_dim, options=None):
    """Focal loss: cross-entropy scaled by ``(1 - p_t)^gamma`` (``p_t`` the true
    class's probability), so confidently right examples weigh less."""
    import mesh_tensorflow as mtf

    gamma = float((options or {}).get("focal_gamma", 2.0))
    if gamma < 0:
        raise ValueError(f"focal_gamma must be >= 0, got {gamma}")
    ce = _per_example(logits, labels, class_dim)
    p_true = mtf.exp(-ce)
    return mtf.reduce_mean(mtf.pow(1.0 - p_true, gamma) * ce) if gamma else mtf.reduce_mean(ce)


LOSSES = {"cross_entropy": cross_entropy, "weighted_cross_entropy": weighted_cross_entropy,
          "focal": focal}


def make_loss(loss: Union[str, Callable, None], options: Mapping = None) -> Callable:
    """``(logits, labels, class_dim) -> scalar`` for a name of :data:`LOSSES` (with
    its ``options``) or a callable of that signature (used as is)."""
    if loss is None:
        loss = "cross_entropy"
    if callable(loss):
        return loss
    try:
        fn = LOSSES[loss]
    except (KeyError, TypeError):
        raise ValueError(f"unknown loss {loss!r}; choose one of {', '.join(sorted(LOSSES))} "
                         "or pass a callable") from None
    return lambda logits, labels, class_dim: fn(logits, labels, class_dim, options)


def example_losses(loss: Union[str, Callable, None], logits, labels, options: Mapping = None):
    """Per-example TF values ``[n]`` of the named ``loss`` for TF ``logits [n, classes]``
    and ``labels [n]`` (``n`` may be dynamic: the real examples of an evaluation
    batch), or None for a callable loss.

    Their mean over any set of examples, however batched, is the set's loss:
    per-example cross-entropy and focal terms; for ``weighted_cross_entropy``
    each term ``w[y] CE`` over the class weights' mean (Keras's
    sum-over-batch-size reduction, scaled so that equal weights give the
    cross-entropy). Training's ``sum w CE / sum w`` of a batch would make the
    evaluation depend on how the set is batched (at batch 1 it is the plain
    cross-entropy).
    """
    import tensorflow.compat.v1 as tf

    if callable(loss):
        return None
    options = options or {}
    # the dense op: the sparse one's deterministic kernel needs a static batch
    ce = tf.nn.softmax_cross_entropy_with_logits(
        labels=tf.one_hot(labels, tf.shape(logits)[-1], dtype=logits.dtype), logits=logits)
    name = loss or "cross_entropy"
    if name == "focal":
        gamma = float(options.get("focal_gamma", 2.0))
        return tf.pow(1.0 - tf.exp(-ce), gamma) * ce if gamma else ce
    if name == "weighted_cross_entropy":
        weights = [float(w) for w in options["class_weights"]]
        per_class = tf.constant([w / (sum(weights) / len(weights)) for w in weights],
                                logits.dtype)
        return tf.gather(per_class, labels) * ce
    make_loss(name)  # an unknown name fails here as in training
    return ce
