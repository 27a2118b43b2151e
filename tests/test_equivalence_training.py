"""Every registered model family trains on uneven meshes of other shapes like one device.

The estimator's own graph (``meshpar.training.estimator.lower_model``: model, loss,
race-free optimizer step with the recipe, batch-norm averages) is trained a few
steps in one session on one device and on meshes that test_uneven_training.py
and test_estimator.py do not: pure data parallel over three devices, a device
with a single unit of a split, a batch that no axis size divides, the mesh axes
in the other order, per-layer weights from the exact planner's layout with its
device order, and local batch norm on a one-row mesh. Losses, forward outputs,
weights, Adam slots and batch-norm moving averages must agree to float32
rounding: within 3e-5 of each variable's largest value (measured: up to 1e-5,
where batch-norm statistics of a few samples or Adam's division of a near-zero
gradient by its own size amplify the rounding).
"""
import numpy as np
import pytest

import meshpar  # noqa: F401  (import shim before mesh_tensorflow)
import tensorflow.compat.v1 as tf

from mtf_helpers import ONE_THREAD, close_graphs
from meshpar import models
from meshpar.training.estimator import lower_model
from meshpar.training.mesh_spec import MeshSpec
from meshpar.training.recipe import DEFAULT_WEIGHT_DECAY, Recipe

BATCH, STEPS, LR = 5, 3, 0.01
TINY_LOCAL_BN = dict(input_shape=(16, 16, 16), stem_filters=4, stage_filters=(4, 8),
                     attention_stages=(1,))


def _train(spec, mesh, params=None, optimizer="adam", steps=STEPS, is_training=True):
    """``(losses, logits per step, variables)`` of ``steps`` steps on ``mesh``
    (in prediction: the loss and logits of the initial weights, no variables)."""
    rng = np.random.RandomState(0)
    x = rng.randn(BATCH, *spec.input_shape).astype(np.float32)
    y = rng.randint(0, spec.config.num_classes, BATCH).astype(np.int32)
    close_graphs()
    with tf.Graph().as_default():
        tf.set_random_seed(1)
        global_step = tf.train.get_or_create_global_step()
        recipe = Recipe.from_params(params or {})
        rate = recipe.learning_rate(LR, global_step)
        lowering, logits, loss, updates = lower_model(
            spec, tf.constant(x), tf.constant(y), mesh, is_training, optimizer, rate, recipe)
        tf_loss, tf_logits = (lowering.export_to_tf_tensor(t) for t in (loss, logits))
        with tf.control_dependencies(updates):
            step = tf.assign_add(global_step, 1)
        to_masters = lowering.copy_slices_to_masters()
        masters = {v.op.name: v for v in tf.global_variables() if "_slice_" not in v.op.name}
        with tf.Session(config=tf.ConfigProto(**ONE_THREAD)) as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(lowering.copy_masters_to_slices())
            if not is_training:
                value, out = sess.run([tf_loss, tf_logits])
                return np.array([value]), out[None], {}
            runs = [sess.run([tf_loss, tf_logits, step])[:2] for _ in range(steps)]
            sess.run(to_masters)
            variables = sess.run(masters)
    return (np.array([r[0] for r in runs]), np.array([r[1] for r in runs]), variables)


def _assert_same(reference, other, what):
    (ref_losses, ref_logits, ref_vars), (losses, logits, variables) = reference, other
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5, atol=1e-6, err_msg=what)
    np.testing.assert_allclose(logits, ref_logits, rtol=0,
                               atol=5e-6 * max(1.0, np.abs(ref_logits).max()), err_msg=what)
    assert sorted(variables) == sorted(ref_vars), what
    for name, want in ref_vars.items():
        # each variable to its own scale (Adam's second moments are ~1e-7)
        tol = 3e-5 * float(np.abs(want).max()) + 1e-9
        np.testing.assert_allclose(variables[name], want, rtol=0, atol=tol,
                                   err_msg=f"{what}: {name}")


MESHES = {
    # three devices, batch 5 split 3/1/1: no axis size divides the batch
    "batch:3": MeshSpec("batch:3", split_weights={"batch": [3, 1, 1]}),
    # the second and third device hold ONE filter or unit of every split dimension
    "model:3 one unit": MeshSpec("model:3", split_weights={"model": [40, 1, 1]}),
    "batch:2;model:2": MeshSpec("batch:2;model:2", split_weights={"batch": [1, 3],
                                                                  "model": [3, 1]}),
    # the model axis first: pnums run over the batch fastest
    "model:2;batch:2": MeshSpec("model:2;batch:2", split_weights={"batch": [4, 1],
                                                                  "model": [1, 2]}),
}
FAMILIES = ["resattnet3d-tiny", "vgg-cifar-small", "vgg-cifar-small-pairs"]
_REFERENCES = {}


def _reference(name, **kwargs):
    key = (name, repr(sorted(kwargs.items())))
    if key not in _REFERENCES:
        _REFERENCES[key] = _train(models.get(name), MeshSpec("all:1"), **kwargs)
    return _REFERENCES[key]


def test_every_registered_family_is_in_this_sweep():
    """Each model module with a registered name has a small member here."""
    modules = {models.get(name).module for name in models.names()}
    assert modules == {models.get(name).module for name in FAMILIES}


# resattnet3d-tiny is the slowest to build: two meshes (its 2 x 3 hybrids are in
# test_estimator.py and test_determinism.py)
CASES = [(name, mesh) for name in FAMILIES for mesh in sorted(MESHES)
         if name != "resattnet3d-tiny" or mesh in ("model:3 one unit", "model:2;batch:2")]


@pytest.mark.parametrize("name, mesh", CASES)
def test_adam_steps_on_meshes_of_other_shapes_match_one_device(name, mesh):
    reference = _reference(name)
    assert reference[0][-1] < reference[0][0]  # it trains
    _assert_same(reference, _train(models.get(name), MESHES[mesh]), f"{name} on {mesh}")


RECIPES = [
    # `meshpar train`'s default decay (x50, to matter in 3 steps) on a cosine schedule
    ("vgg-cifar-small", "adam", {"weight_decay": DEFAULT_WEIGHT_DECAY * 50,
                                  "lr_schedule": "cosine", "warmup_steps": 1,
                                  "total_steps": STEPS + 1}),
    ("vgg-cifar-small", "momentum", {"clip_norm": 0.5, "loss": "weighted_cross_entropy",
                                     "class_weights": [1.0, 3.0] + [1.0] * 8}),
]


@pytest.mark.parametrize("name, optimizer, params", RECIPES)
def test_weight_decay_schedules_clipping_and_losses_match_one_device(name, optimizer, params):
    spec = models.get(name)
    mesh = MeshSpec("batch:2;model:3", split_weights={"batch": [1, 4], "model": [1, 1, 6]})
    reference = _train(spec, MeshSpec("all:1"), params, optimizer)
    _assert_same(reference, _train(spec, mesh, params, optimizer), f"{name} {optimizer}")


@pytest.mark.parametrize("name", FAMILIES)
def test_prediction_on_an_uneven_mesh_gives_the_one_device_logits(name):
    """The inference graph (batch norm on its moving averages)."""
    spec = models.get(name)
    reference = _train(spec, MeshSpec("all:1"), is_training=False)
    for mesh in (MeshSpec("batch:2;model:3", split_weights={"batch": [1, 4],
                                                            "model": [1, 1, 6]}),
                 MeshSpec("batch:3")):
        losses, logits, _ = _train(spec, mesh, is_training=False)
        np.testing.assert_allclose(losses, reference[0], rtol=1e-6)
        np.testing.assert_allclose(logits, reference[1], rtol=0,
                                   atol=2e-6 * max(1.0, np.abs(reference[1]).max()))


PLANNED = [
    ("resattnet3d-tiny", "exact", (2, 2), [0.3, 1.0, 0.6, 0.9]),
    ("vgg-cifar-small-pairs", "exact", (2, 2), [0.3, 1.0, 0.6, 0.9]),
    ("vgg-cifar-small-pairs", "ga", (1, 3), [1.0, 0.5, 0.2]),
]


@pytest.mark.parametrize("name, method, shape, speeds", PLANNED)
def test_planned_per_layer_weights_layouts_and_device_orders_match_one_device(
        name, method, shape, speeds):
    """A planner's plan for devices of other speeds: per-dimension weights, the
    dimensions its layout genes split (the GA may leave some whole) and a device
    order that is not the speed order; used with local devices in its order."""
    from meshpar.planning import planners
    from meshpar.planning.cluster import ClusterSpec

    plan = planners.plan(models.describe_model(name), ClusterSpec.from_speeds(speeds), BATCH,
                         method=method, shapes=[shape])
    weights = list(plan.dim_split_weights.values()) + list(plan.split_weights.values())
    assert any(len(set(w)) > 1 for w in weights)  # an uneven plan
    mesh = MeshSpec.from_plan(plan, devices=[""] * len(plan.devices))
    _assert_same(_reference(name), _train(models.get(name), mesh), f"{name} {method} plan")


def test_local_batch_norm_on_one_row_meshes_is_one_devices_batch_norm():
    """Without a batch split each device's share of the batch is the whole batch:
    resattnet3d-small-local-bn on model:3 and batch:1;model:3 (per-layer weights)
    trains like itself on one device, and like the global-statistics network."""
    spec = models.get("resattnet3d-small-local-bn", **TINY_LOCAL_BN)
    reference = _train(spec, MeshSpec("all:1"), optimizer="momentum")
    for mesh in (MeshSpec("model:3", split_weights={"model": [5, 2, 1]}),
                 MeshSpec("batch:1;model:3", layout=spec.layout_rules(),
                          dim_split_weights={"stem_filters": [1, 1, 10],
                                             "s1b0_conv1_filters": [3, 4, 1]})):
        _assert_same(reference, _train(spec, mesh, optimizer="momentum"),
                     f"local bn on {mesh.mesh_shape}")
    global_bn = _train(models.get("resattnet3d-tiny"), MeshSpec("all:1"), optimizer="momentum")
    np.testing.assert_allclose(reference[0], global_bn[0], rtol=1e-5)


def test_local_batch_norm_groups_depend_on_the_batch_split_only():
    """With a batch split the groups are the batch axis' shares: adding a model axis
    (and reordering the axes) changes nothing but rounding."""
    spec = models.get("resattnet3d-small-local-bn", **TINY_LOCAL_BN)
    reference = _train(spec, MeshSpec("batch:2", split_weights={"batch": [3, 2]}),
                       optimizer="momentum", steps=1)
    hybrid = _train(spec, MeshSpec("model:3;batch:2", split_weights={"batch": [3, 2],
                                                                     "model": [1, 2, 3]}),
                    optimizer="momentum", steps=1)
    _assert_same(reference, hybrid, "local bn batch groups")
    one = _train(spec, MeshSpec("all:1"), optimizer="momentum", steps=1)
    assert np.abs(one[1] - reference[1]).max() > 1e-3  # the groups do matter


def test_copies_of_a_slice_stay_bit_identical_through_training():
    """Every processor holding the same part of a variable (a kernel split on the
    model axis, copied on both batch rows; biases and batch-norm parameters on all
    six) ends 3 Adam steps with the same bits: the all-reduces hand every copy the
    same sum, so no copy drifts from the one the checkpoint keeps."""
    spec = models.get("resattnet3d-tiny")
    mesh = MeshSpec("batch:2;model:3", split_weights={"batch": [1, 4], "model": [1, 1, 6]})
    rng = np.random.RandomState(0)
    x = rng.randn(BATCH, *spec.input_shape).astype(np.float32)
    y = rng.randint(0, 2, BATCH).astype(np.int32)
    close_graphs()
    with tf.Graph().as_default():
        tf.set_random_seed(1)
        lowering, logits, _, updates = lower_model(spec, tf.constant(x), tf.constant(y), mesh,
                                                   True, "adam", LR)
        impl = lowering.mesh_impl(logits)
        slices = {v.name: (lowering.variables[v].laid_out_tensor.all_slices, v.shape)
                  for v in lowering.graph.all_variables}
        step = tf.group(updates)
        with tf.Session(config=tf.ConfigProto(**ONE_THREAD)) as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(lowering.copy_masters_to_slices())
            for _ in range(STEPS):
                sess.run(step)
            values = sess.run({name: pieces for name, (pieces, _) in slices.items()})
    copies = 0
    for name, (_, shape) in slices.items():
        by_part = {}
        for pnum, value in enumerate(values[name]):
            by_part.setdefault(tuple(impl.slice_begin(shape, pnum)), []).append(value)
        for part in by_part.values():
            for value in part[1:]:
                copies += 1
                np.testing.assert_array_equal(value, part[0], err_msg=name)
    assert copies > 100
