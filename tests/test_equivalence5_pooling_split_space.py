"""Pooling over a split spatial dimension pools one device's windows.

Mesh-TF's pooling (``mtf.layers.max_pool2d``/``avg_pool2d``/``3d``, and the
models' ``_layers.max_pool`` with TF's gradient kernels) pooled each slice by
itself: a layout that splits a pooled dimension (``h:model`` in a network of one's
own) works only where every slice holds whole windows. An uneven split cuts
windows: h = 8 over weights [5, 2, 1] (slices 5, 2, 1) died in TF's 'Negative
dimension size caused by subtracting 2 from 1', over [5, 3] in 'wrong slice
shape ... expected [3, 3, 3, 5], got [3, 2, 3, 5]'; so did an even split of 6
into 3 and 3. Such a dimension is now gathered, pooled whole and cut again by
the output's own sizes; aligned slices still pool alone, with no collective.
Forward values and gradients are checked against one processor.
"""
import numpy as np
import pytest

from mtf_helpers import (HeterogeneousMeshImpl, max_abs_diff, mtf, new_graph, one_device_impl,
                         record_allreduces, run_lowered, tf)

from meshpar.models import _layers as L

B, F = mtf.Dimension("batch", 3), mtf.Dimension("f", 5)
POOLS = {
    "max_pool2d": (2, mtf.layers.max_pool2d),
    "avg_pool2d": (2, mtf.layers.avg_pool2d),
    "max_pool3d": (3, mtf.layers.max_pool3d),
    "avg_pool3d": (3, mtf.layers.avg_pool3d),
    "models' max_pool 2-D": (2, lambda x: L.max_pool(x, (2, 2))),
    "models' max_pool 3-D": (3, lambda x: L.max_pool(x, (2, 2, 2))),
}
# (mesh, its weights, layout, spatial sizes): h or w cut into slices that split windows
MESHES = {
    "5/2/1": ("p:3", {"p": [5, 2, 1]}, "h:p", (8, 6, 4)),
    "5/3": ("p:2", {"p": [5, 3]}, "h:p", (8, 6, 4)),
    "even 3/3": ("p:2", None, "w:p", (4, 6, 4)),
    "2x3": ("b:2;p:3", {"b": [2, 1], "p": [1, 4, 3]}, "batch:b;h:p", (8, 6, 4)),
}


def _pool_and_gradient(pool, spatial, impl):
    """``[pooled, d(sum(pooled * r))/dx]`` of fixed inputs on ``impl``."""
    n, fn = POOLS[pool]
    dims = [mtf.Dimension(name, size) for name, size in zip("hwd", spatial[:n])]
    shape = mtf.Shape([B] + dims + [F])
    rng = np.random.RandomState(0)
    graph, mesh = new_graph()
    x = mtf.import_tf_tensor(mesh, tf.constant(rng.randn(*shape.to_integer_list)
                                               .astype(np.float32)), shape)
    y = fn(x)
    r = mtf.import_tf_tensor(mesh, tf.constant(rng.randn(*y.shape.to_integer_list)
                                               .astype(np.float32)), y.shape)
    dx = mtf.gradients([mtf.reduce_sum(y * r)], [x])[0]
    return run_lowered(graph, mesh, impl, [y, dx])


@pytest.mark.parametrize("mesh", sorted(MESHES))
@pytest.mark.parametrize("pool", sorted(POOLS))
def test_pooling_over_a_split_spatial_dimension_is_one_processors(pool, mesh):
    shape, weights, layout, spatial = MESHES[mesh]
    n = int(np.prod([int(a.split(":")[1]) for a in shape.split(";")]))
    impl = HeterogeneousMeshImpl(shape, layout, [""] * n, split_weights=weights)
    want = _pool_and_gradient(pool, spatial, one_device_impl())
    got = _pool_and_gradient(pool, spatial, impl)
    assert got[0].shape == want[0].shape and got[1].shape == want[1].shape
    assert max_abs_diff(got[0], want[0]) < 1e-6, "forward"
    assert max_abs_diff(got[1], want[1]) < 1e-6, "gradient"


def test_a_remainder_the_pooling_drops_stays_dropped_on_a_split():
    """h = 7 under windows of 2 pools 3 rows and drops the last, on slices 3/4 too."""
    impl = HeterogeneousMeshImpl("p:2", "h:p", ["", ""], split_weights={"p": [3, 4]})
    want = _pool_and_gradient("models' max_pool 2-D", (7, 6), one_device_impl())
    got = _pool_and_gradient("models' max_pool 2-D", (7, 6), impl)
    assert want[0].shape[1] == 3 and not want[1][:, 6].any()
    assert max_abs_diff(got[0], want[0]) < 1e-6 and max_abs_diff(got[1], want[1]) < 1e-6


def test_slices_of_whole_windows_pool_alone(monkeypatch):
    """h = 8 over [3, 1] (slices 6 and 2, each whole windows): no collective."""
    from meshpar.core.collectives import UnevenCollectives

    gathers = []
    original = UnevenCollectives.allsplit
    monkeypatch.setattr(UnevenCollectives, "allsplit",
                        lambda self, *a, **k: gathers.append(a) or original(self, *a, **k))
    allreduces = record_allreduces(monkeypatch)
    impl = HeterogeneousMeshImpl("p:2", "h:p", ["", ""], split_weights={"p": [3, 1]})
    want = _pool_and_gradient("max_pool2d", (8, 6), one_device_impl())
    got = _pool_and_gradient("max_pool2d", (8, 6), impl)
    assert max_abs_diff(got[0], want[0]) < 1e-6 and max_abs_diff(got[1], want[1]) < 1e-6
    assert not gathers and not allreduces


def _pooling_net(inputs, config, mesh=None, is_training=True):
    """Per-pixel dense (no convolution: it cannot split space) -> ReLU -> max pool 2x2
    -> dense head: a network of one's own whose layout may split ``h``."""
    dims = [mtf.Dimension(n, s) for n, s in zip(["batch", "h", "w", "c"],
                                                 inputs.shape.as_list())]
    x = mtf.import_tf_tensor(mesh, inputs, mtf.Shape(dims))
    h = L.relu(L.dense(x, [dims[-1]], mtf.Dimension("f", 4), name="pixel"))
    h = L.max_pool(h, (2, 2))
    flat = mtf.reshape(h, [dims[0], mtf.Dimension("flat", h.shape.size // dims[0].size)])
    return L.dense(flat, [flat.shape.dims[-1]], mtf.Dimension("classes", 3), name="head"), []


def test_a_network_of_ones_own_laid_out_on_space_trains_like_one_device():
    import types

    from mtf_helpers import train_lowered_model

    from meshpar import models
    from meshpar.training.mesh_spec import MeshSpec

    net = types.SimpleNamespace(build=_pooling_net, input_shape=lambda config: (8, 6, 2),
                                layout_rules=lambda config, model_axis="model",
                                batch_axis="batch": f"batch:{batch_axis};h:{model_axis}")
    spec = models.from_module(net, types.SimpleNamespace(), name="pixel-net")
    rng = np.random.RandomState(0)
    x, y = rng.randn(5, 8, 6, 2).astype(np.float32), rng.randint(0, 3, 5).astype(np.int32)
    losses, _, history = train_lowered_model(spec, x, y, MeshSpec("all:1"), "momentum", 0.1)
    assert losses[-1] < losses[0]
    for mesh in (MeshSpec("model:3", split_weights={"model": [5, 2, 1]}),
                 MeshSpec("batch:2;model:2", split_weights={"batch": [1, 4], "model": [5, 3]})):
        other_losses, _, other = train_lowered_model(spec, x, y, mesh, "momentum", 0.1)
        np.testing.assert_allclose(other_losses, losses, rtol=1e-5, err_msg=mesh.mesh_shape)
        for name, want in history[-1].items():
            np.testing.assert_allclose(other[-1][name], want, rtol=0,
                                       atol=3e-5 * float(np.abs(want).max()) + 1e-9,
                                       err_msg=f"{mesh.mesh_shape}: {name}")
