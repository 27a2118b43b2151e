"""Small helpers for tests that build and run Mesh-TensorFlow graphs."""
import numpy as np

import meshpar  # noqa: F401  (import shim before mesh_tensorflow)
import mesh_tensorflow as mtf
import tensorflow.compat.v1 as tf

from meshpar.core.mesh_impl import HeterogeneousMeshImpl

# TF2 runs eagerly; Mesh-TF builds TF1 graphs. Instead of switching eager off
# for the whole process (which breaks other tests), each test builds inside a
# graph context that conftest.py closes after the test.
_OPEN_GRAPHS = []

ONE_THREAD = dict(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)


def session():
    return tf.Session(config=tf.ConfigProto(**ONE_THREAD))


def one_device_impl():
    return HeterogeneousMeshImpl("all:1", "", [""])


def fresh_tf_graph(seed=1):
    """Make a new tf.Graph the default one until the test ends."""
    close_graphs()
    graph = tf.Graph()
    context = graph.as_default()
    context.__enter__()
    _OPEN_GRAPHS.append(context)
    tf.set_random_seed(seed)
    return graph


def close_graphs():
    while _OPEN_GRAPHS:
        _OPEN_GRAPHS.pop().__exit__(None, None, None)


def new_graph(seed=1):
    """A fresh default tf.Graph and an mtf graph with one mesh on it."""
    fresh_tf_graph(seed)
    graph = mtf.Graph()
    return graph, mtf.Mesh(graph, "mesh")


def run_lowered(graph, mesh, impl, tensors, extra_tf=()):
    """Lower ``graph`` on ``impl`` and return the values of mtf ``tensors``."""
    lowering = mtf.Lowering(graph, {mesh: impl})
    outs = [lowering.export_to_tf_tensor(t) for t in tensors]
    with session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(lowering.copy_masters_to_slices())
        return sess.run(outs + list(extra_tf))


def max_abs_diff(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def record_allreduces(monkeypatch) -> list:
    """A list that receives the name of the mtf op behind every all-reduce lowered
    from now on in the test (meshpar's mesh implementation)."""
    from meshpar.core.collectives import UnevenCollectives

    calls = []
    original = UnevenCollectives.allreduce

    def recording(self, x, mesh_axes, reduction_fn_string):
        calls.append(self._op.name if self._op is not None else "")
        return original(self, x, mesh_axes, reduction_fn_string)

    monkeypatch.setattr(UnevenCollectives, "allreduce", recording)
    return calls


def tiny_volumes(n=12, seed=0):
    """``(x, y)``: ``n`` random 8^3 one-channel volumes, labels alternating 0/1, the
    class-1 volumes brighter in a central cube (learnable in a few steps)."""
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 8, 8, 8, 1).astype(np.float32)
    y = (np.arange(n) % 2).astype(np.int32)
    x[y == 1, 2:6, 2:6, 2:6] += 1.0
    return x, y


def at_checkpoint(model_dir, step):
    """``model_dir`` (a pathlib.Path, created) made to hold a latest checkpoint at
    ``step``; the input functions read only its number. Returns it as a string."""
    model_dir.mkdir(exist_ok=True)
    (model_dir / f"model.ckpt-{step}.index").write_bytes(b"")
    (model_dir / "checkpoint").write_text(f'model_checkpoint_path: "model.ckpt-{step}"\n')
    return str(model_dir)


def train_lowered_model(spec, x, y, mesh, optimizer, learning_rate=None, steps=3, seed=1):
    """``(losses, unordered reads of the step, master variables before and after each
    step)`` of ``steps`` training steps of the estimator's lowered step of ``spec``
    (:func:`meshpar.training.estimator.lower_model`) on ``mesh``, features ``x`` and
    labels ``y``, in one thread (:func:`meshpar.core.optim.unordered_reads` lists
    what in the step nothing orders against a write)."""
    from meshpar.core import optim
    from meshpar.training.estimator import lower_model

    close_graphs()
    with tf.Graph().as_default():
        tf.set_random_seed(seed)
        global_step = tf.train.get_or_create_global_step()
        rate = () if learning_rate is None else (learning_rate,)
        lowering, _, loss, updates = lower_model(spec, tf.constant(x), tf.constant(y), mesh,
                                                 True, optimizer, *rate)
        tf_loss = lowering.export_to_tf_tensor(loss)
        with tf.control_dependencies(updates):
            step = tf.assign_add(global_step, 1)
        unordered = optim.unordered_reads([tf_loss, step.op])
        to_masters = lowering.copy_slices_to_masters()
        masters = {v.op.name: v for v in tf.global_variables() if "_slice_" not in v.op.name}
        with tf.Session(config=tf.ConfigProto(**ONE_THREAD)) as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(lowering.copy_masters_to_slices())
            history, losses = [sess.run(masters)], []
            for _ in range(steps):
                losses.append(sess.run([tf_loss, step])[0])
                sess.run(to_masters)
                history.append(sess.run(masters))
    return np.array(losses), unordered, history
