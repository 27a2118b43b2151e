"""A worker runs its kernels with op determinism unless its environment says otherwise.

``meshpar train --cluster`` sets ``TF_DETERMINISTIC_OPS=1`` (README, "Determinism"),
but in its own process only: the kernels of the slices run in the workers, and
``meshpar worker`` (started by hand, or by a LocalCluster made in a process that had
not set it yet) ran them without op determinism, so the deterministic kernels the
README promises were not the ones that ran (GPU workers' convolutions and
reductions). A worker now sets it unless its environment gives a value, as
``train`` and ``predict`` do. Seen through the check TensorFlow makes only under op
determinism: a random op without any seed is refused.
"""
import pytest
import tensorflow.compat.v1 as tf

from meshpar.runtime.local_cluster import LocalCluster


def _seedless_random_op_runs(cluster) -> bool:
    with tf.Graph().as_default():
        with tf.device(cluster.devices[0]):
            # seeds 0, 0: no seed (the raw op: tf.random.uniform would refuse it here
            # already when this process has op determinism on)
            draw = tf.raw_ops.RandomUniform(shape=[3], dtype=tf.float32, seed=0, seed2=0)
        with tf.Session(cluster.target) as sess:
            try:
                sess.run(draw)
            except tf.errors.InvalidArgumentError as err:
                assert "determinism" in str(err)
                return False
    return True


@pytest.mark.parametrize("setting, runs", [(None, False), ("0", True)])
def test_a_worker_is_deterministic_unless_told_not_to_be(monkeypatch, setting, runs):
    if setting is None:  # a process that has not set it: its workers inherit nothing
        monkeypatch.delenv("TF_DETERMINISTIC_OPS", raising=False)
    else:
        monkeypatch.setenv("TF_DETERMINISTIC_OPS", setting)
    with LocalCluster([1.0], pin=False) as cluster:
        assert _seedless_random_op_runs(cluster) is runs
