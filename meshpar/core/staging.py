"""A staging area for a step's input: the tensors a step computes on were put
during the step before (:mod:`meshpar.training.staging` says why and how the
estimator uses it; :meth:`meshpar.core.mesh_impl.HeterogeneousMeshImpl.stage_imports`
stages each processor's slice on its own device)."""
from __future__ import annotations

import tensorflow.compat.v1 as tf
from tensorflow.python.ops import data_flow_ops


def staging_area(*tensors, device=None):
    """``(staged, put_op)``: ``staged``, the tensors a step computes on (the ones
    the previous ``put_op`` put), in the order given; ``put_op`` puts this
    step's ``tensors`` for the next step (run it in the step, e.g. as a control
    input of the train op; something must put the first batch before the first
    ``get``).

    Each tensor must have a static shape (a batched dataset with
    ``drop_remainder=True``). One area, on ``device`` when given (the tensors
    then travel there when put), else colocated with the first tensor.
    """
    for t in tensors:
        if not t.shape.is_fully_defined():
            raise ValueError(f"staging needs static shapes, got {t.name} of shape {t.shape}")
    where = tf.device(device) if device is not None else tf.colocate_with(tensors[0])
    with where, tf.name_scope("meshpar_input_stage"):
        # capacity 2: the batch in use and the one being put can both be held
        area = data_flow_ops.StagingArea([t.dtype for t in tensors],
                                         shapes=[t.shape for t in tensors], capacity=2)
        put = area.put(list(tensors))
        staged = area.get()
    staged = list(staged) if isinstance(staged, (list, tuple)) else [staged]
    for got, t in zip(staged, tensors):
        got.set_shape(t.shape)
    return staged, put
