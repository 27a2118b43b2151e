"""Same seed, same plan, same ops: bit-identical training.

What is and is not promised (README, "Determinism"): with ``TF_DETERMINISTIC_OPS=1``
(conftest.py sets it), a graph seed and one intra/inter-op thread, two runs of
one plan give the same losses and variables bit for bit; another mesh gives the
same numbers only up to float32 summation order (~1e-7 relative per step).
"""
import os

import numpy as np

import meshpar  # noqa: F401  (import shim before mesh_tensorflow)
import mesh_tensorflow as mtf
import tensorflow.compat.v1 as tf

from meshpar.training import estimator as E
from meshpar.core import optim
from meshpar.core.mesh_impl import HeterogeneousMeshImpl
from meshpar.models import ResAttNet3DConfig
from mtf_helpers import tiny_volumes as _data  # 8^3 volumes, class 1 brighter

tf.logging.set_verbosity(tf.logging.ERROR)

TINY = ResAttNet3DConfig.small(input_shape=(8, 8, 8), stem_filters=4, stage_filters=(6,),
                               attention_stages=(0,), name="tiny-resattnet3d")
UNEVEN = dict(mesh_shape="batch:2;model:2", split_weights={"batch": [2, 1], "model": [3, 1]})
BATCH, STEPS = 6, 4
ONE_THREAD = tf.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)


def test_deterministic_ops_are_on_for_the_suite():
    assert os.environ.get("TF_DETERMINISTIC_OPS") == "1"


def _train_estimator(model_dir, mesh, seed=3):
    x, y = _data()
    est = E.make_estimator(TINY, str(model_dir), optimizer="adam", learning_rate=0.01,
                           seed=seed, **mesh)
    history = E.LossHistoryHook()
    est.train(lambda: tf.data.Dataset.from_tensor_slices((x, y)).shuffle(12, seed=seed)
              .batch(BATCH, drop_remainder=True).repeat(), max_steps=STEPS, hooks=[history])
    variables = {name: est.get_variable_value(name) for name in est.get_variable_names()}
    return np.array(history.losses, np.float32), variables


def test_two_runs_of_one_uneven_plan_are_bit_identical(tmp_path):
    losses_a, vars_a = _train_estimator(tmp_path / "a", UNEVEN)
    losses_b, vars_b = _train_estimator(tmp_path / "b", UNEVEN)
    assert len(losses_a) == STEPS and np.all(np.isfinite(losses_a))
    np.testing.assert_array_equal(losses_a, losses_b)
    assert sorted(vars_a) == sorted(vars_b)
    for name in vars_a:   # weights, Adam slots, batch-norm averages
        np.testing.assert_array_equal(vars_a[name], vars_b[name], err_msg=name)


def _hand_built_run(mesh_shape, layout, weights, steps=3, seed=5, dropout=True):
    """A small conv net trained by hand: mtf graph, race-free updates, one session."""
    rng = np.random.RandomState(0)
    x_np = rng.randn(4, 6, 6, 3).astype(np.float32)
    y_np = rng.randint(0, 3, 4).astype(np.int32)
    with tf.Graph().as_default():
        tf.set_random_seed(seed)
        graph = mtf.Graph()
        mesh = mtf.Mesh(graph, "mesh")
        dims = [mtf.Dimension(n, s) for n, s in (("batch", 4), ("h", 6), ("w", 6), ("c", 3))]
        x = mtf.import_tf_tensor(mesh, tf.constant(x_np), mtf.Shape(dims))
        labels = mtf.import_tf_tensor(mesh, tf.constant(y_np), mtf.Shape(dims[:1]))
        h = mtf.relu(mtf.layers.conv2d(x, mtf.Dimension("filters", 7), name="conv",
                                       filter_initializer=tf.glorot_uniform_initializer()))
        if dropout:  # random, seeded by the graph
            h = mtf.dropout(h, is_training=True, keep_prob=0.8)
        h = mtf.reduce_mean(h, reduced_dim=dims[1])
        h = mtf.reduce_mean(h, reduced_dim=dims[2])
        classes = mtf.Dimension("classes", 3)
        logits = mtf.layers.dense(h, classes, reduced_dims=h.shape.dims[-1:], name="dense",
                                  kernel_initializer=tf.glorot_uniform_initializer())
        loss = mtf.reduce_mean(mtf.layers.softmax_cross_entropy_with_logits(
            logits, mtf.one_hot(labels, classes), classes))
        updates = optim.race_free_update_ops(graph, loss, optim.Adam(0.05))
        n = int(np.prod([int(p.split(":")[1]) for p in mesh_shape.split(";")]))
        impl = HeterogeneousMeshImpl(mesh_shape, layout, [""] * n, split_weights=weights)
        lowering = mtf.Lowering(graph, {mesh: impl})
        tf_loss = lowering.export_to_tf_tensor(loss)
        step = tf.group([lowering.lowered_operation(op) for op in updates])
        with tf.Session(config=ONE_THREAD) as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(lowering.copy_masters_to_slices())
            losses = [sess.run([tf_loss, step])[0] for _ in range(steps)]
    return np.array(losses, np.float32)


def test_hand_built_uneven_mesh_with_dropout_is_bit_reproducible():
    """Two fresh graphs, same seed, on an uneven 2x3 mesh: identical losses,
    dropout masks included (mtf random ops take their seed from the graph seed)."""
    mesh = ("batch:2;model:3", "batch:batch;filters:model", {"batch": [3, 1], "model": [3, 2, 1]})
    first = _hand_built_run(*mesh)
    second = _hand_built_run(*mesh)
    assert np.all(np.isfinite(first)) and first[-1] != first[0]
    np.testing.assert_array_equal(first, second)
    assert not np.array_equal(first, _hand_built_run(*mesh, seed=6))  # the seed does matter


def test_another_mesh_agrees_to_float32_rounding_only():
    """One device vs an uneven 2x3 mesh (no random ops): float32 sums run in
    another order, so the losses agree closely; bit equality is not promised."""
    uneven = _hand_built_run("batch:2;model:3", "batch:batch;filters:model",
                             {"batch": [3, 1], "model": [3, 2, 1]}, dropout=False)
    one = _hand_built_run("all:1", "", None, dropout=False)
    np.testing.assert_allclose(uneven, one, rtol=1e-5, atol=1e-6)


def test_uneven_dropout_masks_follow_the_graph_seed_and_agree_across_replicas():
    def mask(seed):
        with tf.Graph().as_default():
            tf.set_random_seed(seed)
            graph = mtf.Graph()
            mesh = mtf.Mesh(graph, "mesh")
            ones = mtf.ones(mesh, mtf.Shape([mtf.Dimension("batch", 4), mtf.Dimension("f", 11)]))
            out = mtf.dropout(ones, is_training=True, keep_prob=0.5)
            # f split 6/3/2 over model; batch not laid out: both rows of the mesh replicate
            impl = HeterogeneousMeshImpl("rows:2;model:3", "f:model", [""] * 6,
                                         split_weights={"model": [3, 2, 1]})
            lowering = mtf.Lowering(graph, {mesh: impl})
            slices = lowering.tensors[out].to_laid_out_tensor().tensor_list
            with tf.Session(config=ONE_THREAD) as sess:
                return sess.run([lowering.export_to_tf_tensor(out)] + list(slices))

    first, second = mask(11), mask(11)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    for col in range(3):            # replicas of one slice (pnum col and 3 + col) agree
        np.testing.assert_array_equal(first[1 + col], first[4 + col])
    assert not np.array_equal(first[0], mask(12)[0])


def _checkpoint(model_dir):
    reader = tf.train.load_checkpoint(str(model_dir))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def test_cluster_runs_and_a_resumed_run_are_bit_identical(tmp_path):
    """`meshpar train --cluster` on three real TF gRPC workers (uneven ``model:3``):
    a run stopped halfway and resumed ends with the same variables, bit for bit,
    as an uninterrupted one. Every step of a non-deterministic cluster run drifts
    (with Grappler's arithmetic optimizer on, two uninterrupted runs differed by
    ~2e-7 after 10 steps), so this also stands for run-to-run equality."""
    import json
    import shutil

    from meshpar.cli import main
    from meshpar.runtime.local_cluster import LocalCluster

    steps = 10
    with LocalCluster([0.9, 0.3, 0.6], pin=False) as cluster:
        cluster_file = tmp_path / "cluster.json"
        cluster_file.write_text(json.dumps({"worker": cluster.addresses}))

        def train(model_dir, total_steps):
            assert main(["train", "--synthetic", "--model", "resattnet3d-tiny",
                         "--speeds", "0.9,0.3,0.6", "--mesh", "model:3",
                         "--cluster", str(cluster_file), "--seed", "3",
                         "--steps", str(total_steps), "--checkpoint-every", str(steps // 2),
                         "--n-synthetic", "16", "--val-fraction", "0", "--no-progress",
                         "--model-dir", str(tmp_path / model_dir)]) == 0
            return _checkpoint(tmp_path / model_dir)

        first = train("a", steps)
        # The same run stopped at the halfway checkpoint: its copy with the
        # final checkpoint dropped, resumed to the end.
        shutil.copytree(tmp_path / "a", tmp_path / "c")
        for path in (tmp_path / "c").glob(f"model.ckpt-{steps}.*"):
            path.unlink()
        tf.train.update_checkpoint_state(str(tmp_path / "c"), f"model.ckpt-{steps // 2}")
        assert _checkpoint(tmp_path / "c")["global_step"] == steps // 2
        resumed = train("c", steps)
    assert sorted(first) == sorted(resumed)
    assert int(first["global_step"]) == int(resumed["global_step"]) == steps
    for name in first:
        np.testing.assert_array_equal(first[name], resumed[name], err_msg=name)

def test_cluster_sessions_turn_the_arithmetic_optimizer_off_only_for_determinism():
    from tensorflow.core.protobuf import rewriter_config_pb2

    from meshpar.runtime.client import ClusterClient

    client = ClusterClient(["127.0.0.1:1"], check=False)
    off = rewriter_config_pb2.RewriterConfig.OFF
    assert client.session_config().graph_options.rewrite_options.arithmetic_optimization == off
    for deterministic, expected in ((True, off), (False, rewriter_config_pb2.RewriterConfig.DEFAULT)):
        config = client.session_config(deterministic=deterministic)
        assert config.graph_options.rewrite_options.arithmetic_optimization == expected
