"""A network's own update ops are ordered in the race-free step like its weights.

``build`` returns update operations run with each training step: the registered
networks' batch-norm averages, and in a network of one's own anything else, such
as an average of the weights (it reads a weight the optimizer writes) or a buffer
the forward pass reads and the update writes. The estimator's step
(``lower_model``) added them beside the race-free optimizer step unordered: the
optimizer's write of a weight did not wait for the update's read of it, nor the
update's write of a buffer for the forward pass's read, so a step could read a
value of the next step, depending on how the executor ordered the mesh's ops.
Now the optimizer's writes wait for the values the updates assign, and each update
writes after the step's barrier: no read of the step is left unordered against a
write, and the network trains on uneven meshes like one device.
"""
import types

import numpy as np

from mtf_helpers import close_graphs, mtf, tf, train_lowered_model

from meshpar import models
from meshpar.core import optim
from meshpar.training import estimator as E
from meshpar.training.mesh_spec import MeshSpec

BATCH, SHAPE, CLASSES, FILTERS = 5, (6, 6, 2), 3, 7
UNEVEN = [MeshSpec("model:3", split_weights={"model": [1, 1, 5]}),
          MeshSpec("batch:2;model:2", split_weights={"batch": [4, 1], "model": [2, 5]})]


def _build(inputs, config, mesh=None, is_training=True):
    """conv (split filters) -> ReLU -> mean over space -> times a per-filter gain
    buffer -> dense head; updates: the gain follows the batch's mean activation, and
    ``head_average`` averages the head's kernel."""
    dims = [mtf.Dimension(n, s) for n, s in zip(["batch", "h", "w", "c"],
                                                 inputs.shape.as_list())]
    x = mtf.import_tf_tensor(mesh, inputs, mtf.Shape(dims))
    filters = mtf.Dimension("conv_filters", FILTERS)
    h = mtf.relu(mtf.layers.conv2d(x, filters, (3, 3), name="conv",
                                   filter_initializer=tf.glorot_uniform_initializer()))
    for dim in dims[1:3]:
        h = mtf.reduce_mean(h, reduced_dim=dim)
    gain = mtf.get_variable(mesh, "gain", [filters], initializer=tf.ones_initializer(),
                            trainable=False)
    classes = mtf.Dimension("classes", CLASSES)
    kernel = mtf.get_variable(mesh, "head_kernel", [filters, classes],
                              initializer=tf.glorot_uniform_initializer())
    logits = mtf.einsum([h * gain, kernel], output_shape=[dims[0], classes])
    if not is_training:
        return logits, []
    average = mtf.get_variable(mesh, "head_average", [filters, classes],
                               initializer=tf.zeros_initializer(), trainable=False)
    activation = mtf.stop_gradient(mtf.reduce_mean(h, reduced_dim=dims[0]))
    return logits, [mtf.assign(gain, gain * 0.5 + activation * 0.5),
                    mtf.assign(average, average * 0.5 + kernel * 0.5)]


NET = types.SimpleNamespace(
    build=_build, input_shape=lambda config: SHAPE,
    layout_rules=lambda config, model_axis="model", batch_axis="batch": ";".join(
        ([f"batch:{batch_axis}"] if batch_axis else [])
        + ([f"conv_filters:{model_axis}"] if model_axis else [])))
SPEC = models.from_module(NET, types.SimpleNamespace(), name="updating-net")


def _data():
    rng = np.random.RandomState(0)
    return (rng.randn(BATCH, *SHAPE).astype(np.float32),
            rng.randint(0, CLASSES, BATCH).astype(np.int32))


def _train(mesh, steps=3, spec=SPEC):
    """``(losses, unordered reads of the step, master variables after each step)``
    of ``steps`` SGD steps of the estimator's step of ``spec`` on ``mesh``."""
    x, y = _data()
    return train_lowered_model(spec, x, y, mesh, "sgd", 0.5, steps=steps, seed=2)


def test_the_step_reads_every_variable_before_any_write_on_every_mesh():
    for mesh in [MeshSpec("all:1")] + UNEVEN:
        assert _train(mesh, steps=0)[1] == [], mesh.mesh_shape


def test_the_estimator_step_orders_a_networks_own_updates():
    model_fn = E.build_model_fn(SPEC, mesh=UNEVEN[1], optimizer="momentum")
    x, y = _data()
    close_graphs()
    with tf.Graph().as_default():
        tf.set_random_seed(1)
        spec = model_fn(tf.constant(x), tf.constant(y), tf.estimator.ModeKeys.TRAIN)
        assert optim.unordered_reads([spec.loss, spec.train_op]) == []


def test_a_network_with_its_own_updates_trains_on_uneven_meshes_like_one_device():
    losses, _, history = _train(MeshSpec("all:1"))
    assert losses[-1] < losses[0]
    for before, after in zip(history, history[1:]):  # the updates read the step's values
        np.testing.assert_allclose(after["head_average"], 0.5 * before["head_average"]
                                   + 0.5 * before["head_kernel"], rtol=1e-6, atol=1e-7)
        assert not np.allclose(after["head_kernel"], before["head_kernel"])
        assert not np.allclose(after["gain"], before["gain"])
    for mesh in UNEVEN:
        other_losses, _, other = _train(mesh)
        np.testing.assert_allclose(other_losses, losses, rtol=1e-5, err_msg=mesh.mesh_shape)
        for name, want in history[-1].items():
            np.testing.assert_allclose(other[-1][name], want, rtol=0,
                                       atol=3e-5 * float(np.abs(want).max()) + 1e-9,
                                       err_msg=f"{mesh.mesh_shape}: {name}")


def _build_depending(inputs, config, mesh=None, is_training=True):
    """The network above, its logits made to wait for a step counter's update
    (``mtf.depend``): the update is part of the forward pass."""
    logits, updates = _build(inputs, config, mesh, is_training)
    if not is_training:
        return logits, updates
    count = mtf.get_variable(mesh, "count", [], initializer=tf.zeros_initializer(),
                             trainable=False)
    counted = mtf.assign_add(count, mtf.ones(mesh, [], dtype=count.dtype))
    return mtf.depend(logits, [counted]), updates + [counted]


def test_an_update_the_forward_pass_waits_for_runs_once_a_step():
    """Left where the model put it: the step's copy behind the barrier would apply it a
    second time (69fc7bf's copies did: the counter read 6 after 3 steps)."""
    spec = models.from_module(types.SimpleNamespace(**{**vars(NET), "build": _build_depending}),
                              types.SimpleNamespace(), name="counting-net")
    _, _, history = _train(MeshSpec("all:1"), spec=spec)
    _, _, uneven = _train(UNEVEN[1], spec=spec)
    assert [float(h["count"]) for h in history] == [0.0, 1.0, 2.0, 3.0]
    assert float(uneven[-1]["count"]) == 3.0
    np.testing.assert_allclose(uneven[-1]["head_average"], history[-1]["head_average"],
                               rtol=0, atol=1e-6)
