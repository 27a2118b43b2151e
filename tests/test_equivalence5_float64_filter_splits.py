"""The 3-D networks on filter splits compute one device's math: in float64 they agree to ~1e-14.

In float32 a filter split of resattnet3d-full is further from one device than a
batch split: after one forward and backward pass of a batch of 4 at 16^3 (its
deepest stage at one voxel, so batch norm there normalises 4 numbers a channel),
logits 3e-5 to 8e-5 and gradients up to 5e-4 of their largest value on
``model:3`` and ``batch:2;model:2``, where ``batch:2`` [3, 1] is bit-identical in
the logits and 2e-6 off in the gradients. The same graphs fed float64 volumes agree
to 2e-13 (gradients) on every one of those meshes (at 1^3, the smallest input it
accepts: 3e-12 against 3e-3 in float32): the float32 gap is rounding (a filter
split runs convolutions of other channel counts, whose kernels sum in another
order), amplified by batch norm over few values, not an op that differs.

This pins it at a size that runs in seconds: resattnet3d-full at 32^3 (attention
over 64 and 8 positions) on model:3 [3, 2, 1], resattnet3d-small on model:2
[2, 1] and an uneven 2 x 2 hybrid, fed float64 volumes: logits, loss and every
weight's gradient within 1e-11 of one device's, relative to their largest value
(an all-reduce summing in float32 fails it at 9e-9; measured here ~5e-14).

The networks keep float32 weights (their master and slice variables; the
activations take the input's dtype) and their max pooling is TF's ``MaxPool3D``
and ``MaxPool3DGrad``, which TF 2.15 has no float64 kernel for: this module swaps
in, for its own graphs, a float64 max over each non-overlapping window (a reshape)
and Mesh-TF's own pooling gradient (the window's maximum compared with each
input).
"""
import numpy as np
import pytest

from mtf_helpers import ONE_THREAD, close_graphs, mtf, tf

from meshpar import models
from meshpar.models import _layers
from meshpar.training.losses import cross_entropy
from meshpar.training.mesh_spec import MeshSpec

BATCH = 4
TOLERANCE = 1e-11


@pytest.fixture(autouse=True)
def float64_max_pooling(monkeypatch):
    """Max pooling (the stem's) of float64 slices: a max over each window."""
    from mesh_tensorflow import ops as mtf_ops

    upstream_pool_fn = mtf_ops.pool_fn

    def pool_fn(name):
        if name != "MAX_3D":
            return upstream_pool_fn(name)

        def window_max(x, ksize, strides, padding):
            assert list(ksize) == list(strides) and padding == "VALID"
            *lead, d, h, w, c = x.shape.as_list()
            kd, kh, kw = ksize
            windows = tf.reshape(x, lead + [d // kd, kd, h // kh, kh, w // kw, kw, c])
            n = len(lead)
            return tf.reduce_max(windows, [n + 1, n + 3, n + 5])
        return window_max

    monkeypatch.setattr(mtf_ops, "pool_fn", pool_fn)
    monkeypatch.setattr(_layers._MaxPoolGradOperation, "lower",
                        mtf_ops.PoolBackPropOperation.lower)


def _pass(spec, mesh, x, y):
    """``(logits, loss, {weight: gradient})`` of one training-mode pass on ``mesh``."""
    close_graphs()
    with tf.Graph().as_default():
        tf.set_random_seed(1)
        graph = mtf.Graph()
        mtf_mesh = mtf.Mesh(graph, "mesh")
        logits, _ = spec.build(tf.constant(x), mesh=mtf_mesh, is_training=True)
        labels = mtf.import_tf_tensor(mtf_mesh, tf.constant(y), mtf.Shape([logits.shape.dims[0]]))
        loss = cross_entropy(logits, labels, logits.shape.dims[-1])
        weights = graph.trainable_variables
        grads = mtf.gradients([loss], [v.outputs[0] for v in weights])
        lowering = mtf.Lowering(graph, {mtf_mesh: mesh.make_impl(spec)})
        outs = [lowering.export_to_tf_tensor(t) for t in [logits, loss] + grads]
        with tf.Session(config=tf.ConfigProto(**ONE_THREAD)) as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(lowering.copy_masters_to_slices())
            values = sess.run(outs)
    assert values[0].dtype == np.float64 and all(g.dtype == np.float64 for g in values[2:])
    return values[0], values[1], dict(zip([v.name for v in weights], values[2:]))


def _relative(got, want):
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-300))


NETWORKS = {"resattnet3d-full": dict(input_shape=(32, 32, 32)), "resattnet3d-small": {}}
MESHES = {
    # the open question's mesh (each mesh of the full network costs ~10 s of graph)
    "resattnet3d-full": [MeshSpec("model:3", split_weights={"model": [3, 2, 1]})],
    "resattnet3d-small": [MeshSpec("model:2", split_weights={"model": [2, 1]}),
                          MeshSpec("batch:2;model:2", split_weights={"batch": [3, 1],
                                                                     "model": [2, 1]})],
}


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_filter_splits_in_float64_give_one_devices_logits_and_gradients(name):
    spec = models.get(name, **NETWORKS[name])
    rng = np.random.RandomState(0)
    x = rng.randn(BATCH, *spec.input_shape)  # float64
    y = (np.arange(BATCH) % 2).astype(np.int32)
    want_logits, want_loss, want_grads = _pass(spec, MeshSpec("all:1"), x, y)
    assert len(want_grads) > 20 and all(np.abs(g).max() > 0 for g in want_grads.values())
    for mesh in MESHES[name]:
        what = f"{name} on {mesh.mesh_shape} {mesh.split_weights}"
        logits, loss, grads = _pass(spec, mesh, x, y)
        assert _relative(logits, want_logits) < TOLERANCE, what
        assert abs(loss - want_loss) < TOLERANCE * abs(want_loss), what
        assert sorted(grads) == sorted(want_grads), what
        worst = max((_relative(grads[k], g), k) for k, g in want_grads.items())
        assert worst[0] < TOLERANCE, f"{what}: {worst}"


def test_filter_split_in_float64_gives_one_devices_gradients_on_phantom_volumes(tmp_path):
    """On brain phantoms as training reads them (z-scored over the head: the
    background sits 2.5 standard deviations below the mean) a float32 filter
    split of resattnet3d-small ended one SGD step up to 2-3% (of each update's
    largest value) away from one device in a few batch-norm offsets, where a
    batch split stays within 1e-7: a filter split of the stem is off by as much
    on Gaussian volumes shifted by -2.5. Traced to one ReLU: the gradient
    reaching ``s0b0/bn1``'s output differed in ONE element, whose float64
    pre-activation is 1.3e-5 and the split's float32 one -1.2e-6 (one device's
    rounded to the float64 side); the float32 forward pass is within 1e-5 of
    float64 on both meshes. A kink of the network, not an op that differs: in
    float64 the split gives one device's gradients on the same volumes."""
    from meshpar.data.nifti import make_tf_dataset
    from meshpar.data.phantoms import write_dataset

    write_dataset(tmp_path, BATCH, shape=(32, 32, 32), seed=9)
    volumes, labels = next(iter(make_tf_dataset(tmp_path, batch_size=BATCH, shuffle=False)))
    x, y = volumes.numpy().astype(np.float64), labels.numpy().astype(np.int32)
    assert x.mean() < -1.0  # the shifted input that made float32's kink visible
    spec = models.get("resattnet3d-small")
    _, want_loss, want_grads = _pass(spec, MeshSpec("all:1"), x, y)
    _, loss, grads = _pass(spec, MESHES["resattnet3d-small"][0], x, y)
    assert abs(loss - want_loss) < TOLERANCE * abs(want_loss)
    worst = max((_relative(grads[k], g), k) for k, g in want_grads.items())
    assert worst[0] < TOLERANCE, worst
