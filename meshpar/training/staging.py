"""Input staging: a training step computes on the batch fetched during the step before.

Without it every step begins with the input pipeline's ``IteratorGetNext`` on
the client, and every worker waits for it before its first op: traced on two
workers at 0.9/0.3 of a core (resattnet3d-small, batch 32) the workers' first
op started 11-25 ms into a 230-380 ms step, whatever was prefetched, since
handing over a prefetched batch and slicing it for the mesh still runs inside
the step. With staging, the step takes the batch the previous step left in a
:class:`StagingArea` (ready at once) and puts the next one, fetched while the
workers compute.

Where: the model's input volume is staged on the mesh's own devices, each
processor's slice in an area on that processor's device
(:meth:`meshpar.core.mesh_impl.HeterogeneousMeshImpl.stage_imports`), so the
client's cutting of the batch and the slices' trip to the workers happen
during the step before too; the labels (a few bytes) and, on Mesh-TF's own
``PlacementMeshImpl``, the volume as well, are staged on the client
(:func:`stage`). The area itself: :mod:`meshpar.core.staging`.

The data each step sees is unchanged: a hook puts the first batch when the
session starts (every area in one run, so all hold the same batch), so step
``k`` (from 0) trains on batch ``k`` of the stream as before, and a run
resumed from a checkpoint (whose stream starts at the checkpoint's step) sees
the batches an uninterrupted run would. The batch left in the areas when
training stops is never used. Only training is staged; evaluation and
prediction read the stream to its end.
"""
from __future__ import annotations

import tensorflow.compat.v1 as tf

from meshpar.core.staging import staging_area

tf_estimator = tf.estimator


class StageFirstBatchHook(tf_estimator.SessionRunHook):
    """Puts the first batch into the staging areas when a session starts (after the
    input iterator's own initialisation, which the estimator's input hooks run
    first). ``put_ops``: one op or a list, run together."""

    def __init__(self, put_ops):
        self._put = put_ops

    def after_create_session(self, session, coord):
        """One ``put`` of every area: the batch the first step will train on."""
        session.run(self._put)


def stage(*tensors, device=None):
    """``(staged, put_op, hook)``: :func:`meshpar.core.staging.staging_area`'s
    staged tensors and put op, with the hook that puts the first batch."""
    staged, put = staging_area(*tensors, device=device)
    return staged, put, StageFirstBatchHook(put)
