"""The training recipe inside the Mesh-TF graph: learning-rate schedules, decoupled
weight decay, gradient clipping and the loss registry each do what their formula
says on one device, and an uneven mesh gives the one-device result."""
import math

import numpy as np
import pytest

from mtf_helpers import HeterogeneousMeshImpl, max_abs_diff, mtf, new_graph, session, tf
from test_uneven_training import conv2d_net

from meshpar.core import optim
from meshpar.training.recipe import Recipe
from meshpar.training.schedules import learning_rate

LR = 0.1
UNEVEN = dict(mesh_shape="batch:2;model:2", layout="batch:batch;f1:model;f2:model", n=4,
              split_weights={"batch": [2, 1], "model": [3, 1]})
ONE = dict(mesh_shape="all:1", layout="", n=1)


def run_steps(params, mesh, steps=1, check_order=False):
    """SGD ``steps`` times with the recipe of ``params``, in-graph and race-free
    (``check_order``: assert it). Returns per step: (weights before, gradients) and
    the final weights, by name."""
    graph, mtf_mesh = new_graph()
    loss = conv2d_net(mtf_mesh)
    recipe = Recipe.from_params(params)
    global_step = tf.train.get_or_create_global_step()
    rate = recipe.learning_rate(LR, global_step)
    if isinstance(rate, tf.Tensor):
        rate = mtf.import_tf_tensor(mtf_mesh, rate, mtf.Shape([]))
    variables = graph.trainable_variables
    grads = mtf.gradients([loss], [v.outputs[0] for v in variables])
    updates = optim.race_free_update_ops(graph, loss, recipe.optimizer("sgd", rate))
    impl = HeterogeneousMeshImpl(mesh["mesh_shape"], mesh["layout"], [""] * mesh["n"],
                                 split_weights=mesh.get("split_weights"))
    lowering = mtf.Lowering(graph, {mtf_mesh: impl})
    values = [lowering.export_to_tf_tensor(v.outputs[0]) for v in variables]
    tf_grads = [lowering.export_to_tf_tensor(g) for g in grads]
    step = tf.group([lowering.lowered_operation(op) for op in updates])
    if check_order:
        assert optim.unordered_reads([step]) == []
    with tf.control_dependencies([step]):
        train = tf.assign_add(global_step, 1)
    history = []
    with session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(lowering.copy_masters_to_slices())
        for _ in range(steps):
            history.append(sess.run([values, tf_grads]))
            sess.run(train)
        final = sess.run(values)
    names = [v.name for v in variables]
    return [(dict(zip(names, w)), dict(zip(names, g))) for w, g in history], \
        dict(zip(names, final))


def assert_same(one, uneven, tol=1e-5):
    for name in one:
        assert max_abs_diff(one[name], uneven[name]) <= tol, name


def test_schedule_rates_follow_their_formulas():
    # warm-up 2 of lr 1: 0.5, 1; cosine over steps 2..6; step decay by 0.5 every 2
    cosine = [learning_rate("cosine", 1.0, t, warmup_steps=2, total_steps=6) for t in range(8)]
    assert cosine == pytest.approx([0.5, 1.0, 1.0, (1 + math.cos(math.pi / 4)) / 2, 0.5,
                                    (1 + math.cos(3 * math.pi / 4)) / 2, 0.0, 0.0])
    step = [learning_rate("step", 0.8, t, decay_steps=2, decay_rate=0.5) for t in range(6)]
    assert step == pytest.approx([0.8, 0.8, 0.4, 0.4, 0.2, 0.2])
    with pytest.raises(ValueError, match="total steps"):
        learning_rate("cosine", 1.0, 0, warmup_steps=5, total_steps=5)
    with pytest.raises(ValueError, match="decay_steps"):
        learning_rate("step", 1.0, 0)
    with pytest.raises(ValueError, match="unknown params lr"):
        Recipe.from_params({"lr": 1})


def test_scheduled_rate_in_the_graph_is_the_formula_and_uneven_matches_one_device():
    params = {"lr_schedule": "cosine", "warmup_steps": 2, "total_steps": 4}
    history, final = run_steps(params, ONE, steps=4)
    names = list(final)
    weights = [w for w, _ in history] + [final]
    for t, (_, grads) in enumerate(history):
        expected = learning_rate("cosine", LR, t, warmup_steps=2, total_steps=4)
        for name in names:
            np.testing.assert_allclose(weights[t][name] - weights[t + 1][name],
                                       expected * grads[name], atol=2e-6, err_msg=name)
    assert [learning_rate("cosine", LR, t, warmup_steps=2, total_steps=4)
            for t in range(4)] == pytest.approx([0.05, 0.1, 0.1, 0.05])
    _, uneven = run_steps(params, UNEVEN, steps=4)
    assert_same(final, uneven)


def test_weight_decay_shrinks_kernels_only_and_uneven_matches_one_device():
    wd = 0.5
    [(before, grads)], after = run_steps({"weight_decay": wd}, ONE)
    kernels = [n for n in before if before[n].ndim >= 2]
    assert kernels and len(kernels) < len(before)  # biases / batch-norm parameters exist
    for name in before:
        decay = LR * wd * before[name] if name in kernels else 0.0
        np.testing.assert_allclose(after[name], before[name] - LR * grads[name] - decay,
                                   atol=2e-6, err_msg=name)
        if name in kernels:
            assert max_abs_diff(after[name], before[name] - LR * grads[name]) > 1e-3
    _, uneven = run_steps({"weight_decay": wd, "clip_norm": 1e3}, UNEVEN, check_order=True)
    assert_same(after, uneven)


def test_clipping_scales_the_step_to_the_norm_and_uneven_matches_one_device():
    clip = 0.05
    [(before, grads)], after = run_steps({"clip_norm": clip}, ONE)
    norm = math.sqrt(sum(float(np.sum(np.square(g, dtype=np.float64))) for g in grads.values()))
    assert norm > 2 * clip  # the clip is active: the step is scaled by clip / norm
    for name in before:
        np.testing.assert_allclose(after[name], before[name] - LR * grads[name] * clip / norm,
                                   atol=2e-6, err_msg=name)
    _, uneven = run_steps({"clip_norm": clip}, UNEVEN)
    assert_same(after, uneven)
    [(_, _)], unclipped = run_steps({"clip_norm": 10 * norm}, ONE)  # above the norm: no change
    for name in before:
        np.testing.assert_allclose(unclipped[name], before[name] - LR * grads[name], atol=2e-6)


def _losses(params, mesh):
    """Loss of fixed logits/labels through the registry, on ``mesh``."""
    from meshpar.training.losses import make_loss

    graph, mtf_mesh = new_graph()
    rng = np.random.RandomState(0)
    logits_np = rng.randn(5, 3).astype(np.float32) * 2
    labels_np = np.array([0, 2, 1, 1, 0], np.int32)
    batch, cls = mtf.Dimension("batch", 5), mtf.Dimension("cls", 3)
    logits = mtf.import_tf_tensor(mtf_mesh, tf.constant(logits_np), mtf.Shape([batch, cls]))
    labels = mtf.import_tf_tensor(mtf_mesh, tf.constant(labels_np), mtf.Shape([batch]))
    loss = make_loss(params.get("loss"), params)(logits, labels, cls)
    impl = HeterogeneousMeshImpl(mesh["mesh_shape"], mesh["layout"], [""] * mesh["n"],
                                 split_weights=mesh.get("split_weights"))
    lowering = mtf.Lowering(graph, {mtf_mesh: impl})
    with session() as sess:
        value = sess.run(lowering.export_to_tf_tensor(loss))
    shifted = logits_np - logits_np.max(1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    return float(value), -logp[np.arange(5), labels_np], labels_np


BATCH3 = dict(mesh_shape="batch:3", layout="batch:batch", n=3, split_weights={"batch": [3, 1, 1]})


@pytest.mark.parametrize("params", [
    {"loss": "cross_entropy"},
    {"loss": "weighted_cross_entropy", "class_weights": [1.0, 3.0, 0.5]},
    {"loss": "focal", "focal_gamma": 2.0},
])
def test_losses_follow_their_formulas_on_an_uneven_batch_split(params):
    value, ce, labels = _losses(params, BATCH3)
    if params["loss"] == "weighted_cross_entropy":
        w = np.array(params["class_weights"])[labels]
        expected = float((w * ce).sum() / w.sum())
    elif params["loss"] == "focal":
        expected = float(np.mean((1 - np.exp(-ce)) ** 2 * ce))
    else:
        expected = float(ce.mean())
    assert value == pytest.approx(expected, rel=1e-5)
    assert value == pytest.approx(_losses(params, ONE)[0], abs=1e-6)
    if params["loss"] != "cross_entropy":
        assert abs(expected - ce.mean()) > 1e-3  # differs from the default


def test_unknown_loss_and_bad_weights_are_value_errors():
    with pytest.raises(ValueError, match="unknown loss 'hinge'"):
        Recipe.from_params({"loss": "hinge"})
    with pytest.raises(ValueError, match="3 weights"):
        _losses({"loss": "weighted_cross_entropy", "class_weights": [1.0, 2.0]}, ONE)
    with pytest.raises(ValueError, match="clip_norm"):
        Recipe.from_params({"clip_norm": 0})
