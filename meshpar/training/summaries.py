"""TensorBoard summaries beyond the ``model_fn``'s own (loss, accuracy, learning rate).

:class:`WorkerStepTimeHook` traces every ``every``-th training step and writes,
per task of the mesh (``worker:0``, ``worker:1``, ... or ``local`` for
emulated devices; see :func:`meshpar.runtime.step_trace.step_breakdown`),
how long it was busy (``worker_step_time/<task>``: compute plus
communication) and idle (``worker_idle_time/<task>``), plus the traced
step's wall time (``step_time``), all in seconds, to the model directory's
event file. An uneven mesh is balanced when the workers' busy times agree.
"""
from __future__ import annotations

import time

import tensorflow.compat.v1 as tf

__all__ = ["WorkerStepTimeHook", "read_scalars"]


class WorkerStepTimeHook(tf.estimator.SessionRunHook):
    """Every ``every``-th step of a training run: trace it, write per-task step times."""

    def __init__(self, model_dir: str, every: int):
        if every < 1:
            raise ValueError(f"worker step times: every must be >= 1, got {every}")
        self.model_dir = model_dir
        self.every = int(every)
        self.written = 0  # traced steps written so far
        self._seen = 0
        self._started = None
        self._step = None

    def begin(self):
        """Find the global step tensor of the graph being run."""
        self._step = tf.train.get_global_step()

    def before_run(self, run_context):
        """On a chosen step, ask for a full trace and the global step."""
        self._seen += 1
        if self._seen % self.every:
            return None
        self._started = time.perf_counter()
        return tf.train.SessionRunArgs(
            fetches=self._step, options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE))

    def after_run(self, run_context, run_values):
        """Write the traced step's per-task busy and idle seconds."""
        if self._seen % self.every or run_values.run_metadata is None:
            return
        from meshpar.runtime.step_trace import step_breakdown

        wall = time.perf_counter() - self._started
        parts = step_breakdown(run_values.run_metadata.step_stats, wall)
        values = [tf.Summary.Value(tag="step_time", simple_value=wall)]
        for task, p in parts.items():
            values.append(tf.Summary.Value(tag=f"worker_step_time/{task}",
                                           simple_value=p["compute"] + p["communication"]))
            values.append(tf.Summary.Value(tag=f"worker_idle_time/{task}", simple_value=p["idle"]))
        writer = tf.summary.FileWriterCache.get(self.model_dir)
        writer.add_summary(tf.Summary(value=values), int(run_values.results))
        writer.flush()
        self.written += 1


def read_scalars(directory: str) -> dict:
    """``{tag: [(step, value), ...]}`` of the scalar summaries in the event files
    directly in ``directory`` (for tests and quick checks)."""
    import glob
    import os

    out = {}
    for path in sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*"))):
        for event in tf.train.summary_iterator(path):
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    out.setdefault(value.tag, []).append((event.step, value.simple_value))
                elif value.HasField("tensor") and value.tensor.dtype == tf.float32.as_datatype_enum:
                    number = tf.make_ndarray(value.tensor)
                    if number.ndim == 0:
                        out.setdefault(value.tag, []).append((event.step, float(number)))
    return out
