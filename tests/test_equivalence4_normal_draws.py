"""Normal draws (``mtf.random_normal``) on uneven meshes are one device's.

A network of one's own may add Gaussian noise (``mtf.random_normal``), a layer the
registered models do not use. ``HeterogeneousMeshImpl.random`` drew such a tensor
slice by slice from a seed of the slice's offset: every mesh, layout or split drew
other noise, so the network trained differently on every plan, and the stateful
generator started again with each session, so a resumed run drew the noise of the
first steps again. Now each element is Box-Muller of two counter-based uniform
draws of its position, keyed by the step: any cut of the tensor draws the same
values, and a resumed run those an uninterrupted one draws.
"""
import types

import numpy as np
import pytest

from mtf_helpers import HeterogeneousMeshImpl, mtf, new_graph, session, tf, train_lowered_model

from meshpar import models
from meshpar.training.mesh_spec import MeshSpec

MESHES = [
    ("model:3", "f:model", {"model": [3, 2, 1]}),
    ("model:3", "f:model", {"model": [11, 1, 1]}),  # devices with one unit
    ("batch:2;model:3", "batch:batch;f:model", {"batch": [1, 5], "model": [1, 1, 6]}),
    ("model:2;batch:2", "batch:batch;f:model", {"batch": [4, 2], "model": [1, 3]}),
]


def _impl(mesh_shape, layout, weights):
    n = int(np.prod([int(a.split(":")[1]) for a in mesh_shape.split(";")]))
    return HeterogeneousMeshImpl(mesh_shape, layout, [""] * n, split_weights=weights)


def _draws(mesh_shape, layout, weights, runs=3, start=None, seed=11, **kwargs):
    """``runs`` session runs of a [6, 13] ``mtf.random_normal``; keyed by a global
    step set to ``start`` (as the estimator keys it) unless ``start`` is None."""
    graph, mesh = new_graph(seed)
    shape = mtf.Shape([mtf.Dimension("batch", 6), mtf.Dimension("f", 13)])
    out = mtf.random_normal(mesh, shape, **kwargs)
    impl = _impl(mesh_shape, layout, weights)
    global_step = None
    if start is not None:
        global_step = tf.train.get_or_create_global_step()
        impl.random_step = global_step
    values = mtf.Lowering(graph, {mesh: impl}).export_to_tf_tensor(out)
    fetch = [values]
    if global_step is not None:
        with tf.control_dependencies([values]):
            fetch.append(tf.assign_add(global_step, 1))
    with session() as sess:
        sess.run(tf.global_variables_initializer())
        if global_step is not None:
            sess.run(global_step.assign(start))
        return np.stack([sess.run(fetch)[0] for _ in range(runs)])


@pytest.mark.parametrize("mesh_shape, layout, weights", MESHES)
def test_normal_draws_do_not_depend_on_the_mesh(mesh_shape, layout, weights):
    one = _draws("all:1", "", None, stddev=2.0, mean=1.0)
    assert len({run.tobytes() for run in one}) == 3  # new noise at every run
    got = _draws(mesh_shape, layout, weights, stddev=2.0, mean=1.0)
    np.testing.assert_allclose(got, one, rtol=0, atol=1e-6)


def test_normal_draws_have_their_mean_and_spread_and_follow_the_seed():
    values = _draws("model:3", "f:model", {"model": [3, 2, 1]}, runs=400, seed=3,
                    mean=-1.5, stddev=0.5, dtype=tf.float64)
    assert values.dtype == np.float64 and np.all(np.isfinite(values))
    z = (values.ravel() + 1.5) / 0.5
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1.0) < 0.02
    assert abs(np.mean(z ** 3)) < 0.06 and abs(np.mean(z ** 4) - 3.0) < 0.15
    assert 0.30 < np.mean(np.abs(z) > 1.0) < 0.335  # 0.317 for a normal
    assert abs(np.corrcoef(z[:-1], z[1:])[0, 1]) < 0.03
    np.testing.assert_array_equal(_draws("all:1", "", None, runs=1, seed=3),
                                  _draws("all:1", "", None, runs=1, seed=3))
    assert not np.array_equal(_draws("all:1", "", None, runs=1, seed=3),
                              _draws("all:1", "", None, runs=1, seed=4))


def test_step_keyed_normal_draws_resume_where_an_uninterrupted_run_goes_on():
    uninterrupted = _draws("all:1", "", None, runs=4, start=0)
    assert len({run.tobytes() for run in uninterrupted}) == 4
    resumed = _draws("batch:2;model:3", "batch:batch;f:model",
                     {"batch": [1, 2], "model": [3, 1, 1]}, runs=2, start=2)
    np.testing.assert_allclose(resumed, uninterrupted[2:], rtol=0, atol=1e-6)


class NoisyConfig(types.SimpleNamespace):
    """The noisy network's sizes."""


def _build(inputs, config, mesh=None, is_training=True):
    """conv 3x3 (split filters) -> Gaussian noise in training -> ReLU -> mean over
    space -> dense to the classes."""
    dims = [mtf.Dimension(n, s) for n, s in zip(["batch", "h", "w", "c"],
                                                 inputs.shape.as_list())]
    x = mtf.import_tf_tensor(mesh, inputs, mtf.Shape(dims))
    h = mtf.layers.conv2d(x, mtf.Dimension("conv_filters", config.filters), (3, 3),
                          name="conv", filter_initializer=tf.glorot_uniform_initializer())
    if is_training:
        h += mtf.random_normal(mesh, h.shape, stddev=config.noise)
    h = mtf.relu(h)
    for dim in dims[1:3]:
        h = mtf.reduce_mean(h, reduced_dim=dim)
    logits = mtf.layers.dense(h, mtf.Dimension("classes", 3), reduced_dims=h.shape.dims[-1:],
                              name="head", kernel_initializer=tf.glorot_uniform_initializer())
    return logits, []


NOISY = types.SimpleNamespace(
    build=_build, input_shape=lambda config: (6, 6, 2),
    layout_rules=lambda config, model_axis="model", batch_axis="batch": ";".join(
        ([f"batch:{batch_axis}"] if batch_axis else [])
        + ([f"conv_filters:{model_axis}"] if model_axis else [])))


def _train(mesh, steps=3):
    """Losses and master variables of ``steps`` Adam steps of the noisy network."""
    spec = models.from_module(NOISY, NoisyConfig(filters=7, noise=0.5), name="noisy")
    rng = np.random.RandomState(0)
    x = rng.randn(5, 6, 6, 2).astype(np.float32)
    y = rng.randint(0, 3, 5).astype(np.int32)
    losses, _, history = train_lowered_model(spec, x, y, mesh, "adam", 0.05, steps=steps,
                                             seed=2)
    return losses, history[-1]


def test_a_network_with_gaussian_noise_trains_on_uneven_meshes_like_one_device():
    one_losses, one_vars = _train(MeshSpec("all:1"))
    for mesh in (MeshSpec("batch:2;model:2", split_weights={"batch": [4, 1],
                                                             "model": [2, 5]}),
                 MeshSpec("model:3", split_weights={"model": [1, 1, 5]})):
        losses, variables = _train(mesh)
        np.testing.assert_allclose(losses, one_losses, rtol=1e-5, err_msg=mesh.mesh_shape)
        assert sorted(variables) == sorted(one_vars)
        for name, want in one_vars.items():
            np.testing.assert_allclose(variables[name], want, rtol=0,
                                       atol=3e-5 * float(np.abs(want).max()) + 1e-9,
                                       err_msg=f"{mesh.mesh_shape}: {name}")
