"""Random ops on real worker processes draw one device's values.

A dropout mask over an uneven 2 x 2 mesh on two TF gRPC workers (LocalCluster),
the workers in mixed order, is one device's mask, step after step: with the key
of each step drawn by every worker's own copy of a seeded generator, and with the
key hashed from the global step that the client holds (as the estimator keys it;
meshpar.core.mesh_impl: HeterogeneousMeshImpl.random).
"""
import numpy as np

from mtf_helpers import HeterogeneousMeshImpl, ONE_THREAD, mtf, new_graph, tf

from meshpar.runtime.client import ClusterClient
from meshpar.runtime.local_cluster import LocalCluster


def _masks(devices, mesh_shape, layout, weights, keyed, target="", config=None, steps=3):
    graph, mesh = new_graph(11)
    global_step = tf.train.get_or_create_global_step()
    dims = mtf.Shape([mtf.Dimension("batch", 6), mtf.Dimension("f", 13)])
    x = mtf.import_tf_tensor(mesh, tf.ones([6, 13]), dims)
    y = mtf.dropout(x, is_training=True, keep_prob=0.5)
    impl = HeterogeneousMeshImpl(mesh_shape, layout, devices, split_weights=weights)
    if keyed:
        impl.random_step = global_step
    out = mtf.Lowering(graph, {mesh: impl}).export_to_tf_tensor(y)
    with tf.control_dependencies([out]):
        step = tf.assign_add(global_step, 1)
    with tf.Session(target, config=config or tf.ConfigProto(**ONE_THREAD)) as sess:
        sess.run(tf.global_variables_initializer())
        return np.stack([sess.run([out, step])[0] for _ in range(steps)])


def test_dropout_masks_on_two_workers_are_one_devices():
    wanted = {keyed: _masks([""], "all:1", "", None, keyed) for keyed in (False, True)}
    for masks in wanted.values():
        assert not np.array_equal(masks[0], masks[1])  # a new mask every step
        assert set(np.unique(masks)) == {0.0, 2.0}
    with LocalCluster([1.0, 1.0], pin=False) as cluster:
        client = ClusterClient(cluster.addresses)
        workers = client.devices
        for keyed, want in wanted.items():
            got = _masks([workers[1], workers[0], workers[0], workers[1]], "batch:2;model:2",
                         "batch:batch;f:model", {"batch": [1, 2], "model": [3, 1]}, keyed,
                         client.target, client.session_config())
            np.testing.assert_array_equal(got, want, err_msg=f"keyed by the step: {keyed}")
