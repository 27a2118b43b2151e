"""meshpar.training.staging: a staged step trains on the batch an unstaged step would."""
import numpy as np
import pytest

import meshpar  # noqa: F401  (import shim before mesh_tensorflow)
import tensorflow.compat.v1 as tf

from meshpar.models import ResAttNet3DConfig
from meshpar.training import estimator as E
from meshpar.training import staging

tf.logging.set_verbosity(tf.logging.ERROR)

TINY = ResAttNet3DConfig.small(input_shape=(8, 8, 8), stem_filters=4, stage_filters=(6,),
                               attention_stages=(0,), name="tiny-resattnet3d")
BATCH = 4


def _input(seed=0, n=20):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 8, 8, 8, 1).astype(np.float32)
    y = (np.arange(n) % 2).astype(np.int32)
    x[y == 1, 2:6, 2:6, 2:6] += 1.0
    return lambda: tf.data.Dataset.from_tensor_slices((x, y)).batch(
        BATCH, drop_remainder=True).repeat()


def _estimator(model_dir, stage_input, upstream=False):
    fn = E.build_model_fn(TINY, optimizer="adam", learning_rate=0.01, stage_input=stage_input,
                          mesh_shape="batch:2",
                          split_weights=None if upstream else {"batch": [3, 1]},
                          devices=["/cpu:0", "/cpu:0"], upstream=upstream)
    return tf.estimator.Estimator(fn, model_dir=str(model_dir),
                                  config=E.run_config(str(model_dir), seed=2))


def _weights(est):
    return {n: est.get_variable_value(n) for n in est.get_variable_names()}


@pytest.mark.parametrize("upstream", [False, True], ids=["per-device", "mtf-on-client"])
def test_staged_training_sees_the_same_batches_in_the_same_order(tmp_path, upstream):
    """Losses step by step and final weights equal the unstaged run's (each step
    trains on batch k of the stream, not k+1), on an uneven batch split with the
    volume staged on the mesh's devices, and on Mesh-TF's even mesh staged on the
    client."""
    runs = {}
    for stage_input in (False, True):
        est = _estimator(tmp_path / str(stage_input), stage_input, upstream)
        history = E.LossHistoryHook()
        est.train(_input(), max_steps=7, hooks=[history])
        runs[stage_input] = (history.losses, _weights(est))
    (plain_losses, plain), (staged_losses, staged) = runs[False], runs[True]
    assert len(staged_losses) == 7
    # equal up to float rounding of two graphs that differ by the staging ops; a
    # stream shifted by one batch moves them by far more (measured: up to 0.14)
    np.testing.assert_allclose(staged_losses, plain_losses, rtol=0, atol=1e-6)
    assert plain.keys() == staged.keys()
    for name in plain:
        np.testing.assert_allclose(staged[name], plain[name], rtol=0, atol=1e-6, err_msg=name)


def test_a_staged_run_resumed_from_a_checkpoint_equals_an_uninterrupted_one(tmp_path):
    """A new session puts the first batch of the resumed stream (the stream of
    meshpar train starts at the checkpoint's step), so nothing is skipped or
    repeated across the resume."""
    straight = _estimator(tmp_path / "straight", True)
    straight.train(_input(), max_steps=6)
    resumed = _estimator(tmp_path / "resumed", True)
    resumed.train(_input(), max_steps=3)
    # the stream resumes at batch 3, as inputs.train_input_fn does after a checkpoint
    resumed.train(lambda: _input()().skip(3), max_steps=6)
    a, b = _weights(straight), _weights(resumed)
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=0, atol=1e-6, err_msg=name)


def _train_graph(stage_input, upstream=False):
    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(0)
        x = tf.zeros([BATCH, 8, 8, 8, 1])
        y = tf.zeros([BATCH], tf.int32)
        fn = E.build_model_fn(TINY, stage_input=stage_input, mesh_shape="batch:2",
                              split_weights=None if upstream else {"batch": [3, 1]},
                              devices=["/job:worker/task:0/device:CPU:0",
                                       "/job:worker/task:1/device:CPU:0"], upstream=upstream)
        spec = fn(x, y, tf.estimator.ModeKeys.TRAIN)
    return graph, spec, x


def test_the_volume_is_staged_on_each_device_and_cut_before_the_step_needs_it():
    """One area per processor on that processor's device holds its uneven slice
    (3 and 1 of 4 samples); the model's first op reads the area, not the client's
    batch; the labels' area stays on the client; every put runs in the step and
    in the first-batch hook."""
    graph, spec, x = _train_graph(True)
    stages = [n for n in graph.as_graph_def().node if n.op == "Stage"]
    by_device = {n.device: n for n in stages}
    w0, w1 = "/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"
    assert set(by_device) == {w0, w1, ""}  # "" : the labels' area, with the labels
    unstage = {op.device: op for op in graph.get_operations() if op.type == "Unstage"}
    assert unstage[w0].outputs[0].shape.as_list() == [3, 8, 8, 8, 1]
    assert unstage[w1].outputs[0].shape.as_list() == [1, 8, 8, 8, 1]
    # the batch the client holds feeds only the puts (the next step's slices)
    readers = {c.type for c in x.consumers()}
    assert readers == {"Slice"}
    for sl in x.consumers():
        assert {c.type for c in sl.outputs[0].consumers()} == {"Stage"}
    puts = {op.name for op in graph.get_operations() if op.type == "Stage"}
    hook, = spec.training_hooks
    hooked = {op.name for op in hook._put}  # pylint: disable=protected-access
    assert len(puts) == 3 and puts == hooked and puts <= _ancestors(spec.train_op)


def _ancestors(op):
    seen, todo = set(), [op]
    while todo:
        o = todo.pop()
        if o.name in seen:
            continue
        seen.add(o.name)
        todo += [t.op for t in o.inputs] + list(o.control_inputs)
    return seen


def test_upstream_mtf_keeps_the_volume_staged_on_the_client():
    graph, _, x = _train_graph(True, upstream=True)
    stages = [n for n in graph.as_graph_def().node if n.op == "Stage"]
    assert [n.device for n in stages] == [""]
    assert {c.type for c in x.consumers()} == {"Stage"}


def test_unstaged_training_has_no_staging_areas():
    graph, spec, _ = _train_graph(False)
    assert not [op for op in graph.get_operations() if op.type in ("Stage", "Unstage")]
    assert not spec.training_hooks


def test_staging_refuses_a_batch_of_unknown_size():
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None, 3])
        with pytest.raises(ValueError, match="static shapes"):
            staging.stage(x, tf.zeros([2], tf.int32))
