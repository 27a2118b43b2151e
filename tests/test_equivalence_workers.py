"""Random ops on real worker processes draw one device's values.

Each worker holds its own copy of a random op's per-step key generator, with the
same seed (meshpar.core.mesh_impl: HeterogeneousMeshImpl.random): on two TF gRPC
workers (LocalCluster) a dropout mask over an uneven 2 x 2 mesh, with the workers
in mixed order, is one device's mask, run after run.
"""
import numpy as np

from mtf_helpers import HeterogeneousMeshImpl, ONE_THREAD, mtf, new_graph, tf

from meshpar.runtime.client import ClusterClient
from meshpar.runtime.local_cluster import LocalCluster


def _masks(devices, mesh_shape, layout, weights, target="", config=None, runs=3):
    graph, mesh = new_graph(11)
    dims = mtf.Shape([mtf.Dimension("batch", 6), mtf.Dimension("f", 13)])
    x = mtf.import_tf_tensor(mesh, tf.ones([6, 13]), dims)
    y = mtf.dropout(x, is_training=True, keep_prob=0.5)
    impl = HeterogeneousMeshImpl(mesh_shape, layout, devices, split_weights=weights)
    out = mtf.Lowering(graph, {mesh: impl}).export_to_tf_tensor(y)
    with tf.Session(target, config=config or tf.ConfigProto(**ONE_THREAD)) as sess:
        return np.stack([sess.run(out) for _ in range(runs)])


def test_dropout_masks_on_two_workers_are_one_devices():
    one = _masks([""], "all:1", "", None)
    assert not np.array_equal(one[0], one[1])  # a new mask every run
    assert set(np.unique(one)) == {0.0, 2.0}
    with LocalCluster([1.0, 1.0], pin=False) as cluster:
        client = ClusterClient(cluster.addresses)
        workers = client.devices
        got = _masks([workers[1], workers[0], workers[0], workers[1]], "batch:2;model:2",
                     "batch:batch;f:model", {"batch": [1, 2], "model": [3, 1]},
                     client.target, client.session_config())
    np.testing.assert_array_equal(got, one)
