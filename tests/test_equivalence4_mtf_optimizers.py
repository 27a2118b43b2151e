"""An ``mtf.optimize`` rule in the race-free step trains on uneven meshes like one device.

``race_free_update_ops`` (and so ``make_estimator(optimizer=...)``) takes any
``mtf.optimize.Optimizer``. Its per-variable rule ran behind the gradient barrier,
but a rule that reads a variable it also writes in the step was left racing with
itself: ``mtf.optimize.MomentumOptimizer`` assigns ``v = lr * g + momentum * v`` and
subtracts ``v`` from the weight with a read of ``v`` that nothing ordered against
that assignment, so the weight moved by the old or the new velocity depending on
how the executor ordered the mesh's ops (vgg-cifar-small: kernels 2e-4 to 8e-4 off
one device's after 3 steps on every uneven mesh). Now every assignment of the step
writes after every value assigned is read: the old velocity, on every mesh.
"""
import numpy as np
import pytest

from mtf_helpers import mtf, tf, train_lowered_model

from meshpar import models
from meshpar.training.mesh_spec import MeshSpec

BATCH, LR = 5, 0.05
SPEC = models.get("vgg-cifar-small")
KERNEL = "vgg_cifar_small/conv1/conv/kernel"
MESHES = [MeshSpec("batch:3", split_weights={"batch": [3, 1, 1]}),
          MeshSpec("model:3", split_weights={"model": [40, 1, 1]}),
          MeshSpec("model:2;batch:2", split_weights={"batch": [4, 1], "model": [1, 2]})]
RULES = {"momentum": lambda: mtf.optimize.MomentumOptimizer(LR, 0.9),
         "adafactor": lambda: mtf.optimize.AdafactorOptimizer()}


def _train(mesh, rule, steps=3):
    """``(losses, unordered reads of the step, master variables after each step)``."""
    rng = np.random.RandomState(0)
    x = rng.randn(BATCH, *SPEC.input_shape).astype(np.float32)
    y = rng.randint(0, SPEC.config.num_classes, BATCH).astype(np.int32)
    return train_lowered_model(SPEC, x, y, mesh, RULES[rule], steps=steps, seed=1)


@pytest.fixture(scope="module")
def one_device():
    return {rule: _train(MeshSpec("all:1"), rule) for rule in RULES}


def test_mtf_momentum_subtracts_the_velocity_from_before_the_step(one_device):
    losses, unordered, history = one_device["momentum"]
    assert unordered == []
    velocity = KERNEL + "_momentum_v"
    np.testing.assert_array_equal(history[1][KERNEL], history[0][KERNEL])  # v was 0
    assert np.abs(history[1][velocity]).max() > 0
    for before, after in zip(history[1:], history[2:]):
        np.testing.assert_allclose(after[KERNEL], before[KERNEL] - before[velocity],
                                   rtol=0, atol=1e-7)
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("rule", sorted(RULES))
@pytest.mark.parametrize("mesh", MESHES, ids=lambda m: m.mesh_shape)
def test_mtf_rules_train_on_uneven_meshes_like_one_device(one_device, rule, mesh):
    want_losses, _, want = one_device[rule]
    losses, unordered, history = _train(mesh, rule)
    assert unordered == []
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5, atol=1e-6)
    assert sorted(history[-1]) == sorted(want[-1])
    for name, value in want[-1].items():
        np.testing.assert_allclose(history[-1][name], value, rtol=0,
                                   atol=3e-5 * float(np.abs(value).max()) + 1e-9,
                                   err_msg=f"{mesh.mesh_shape} {rule}: {name}")


def test_with_reference_variables_the_velocity_read_is_a_copy(one_device):
    """Resource variables off (``disable_v2_behavior``): a read of a reference variable
    shares its buffer, so the velocity read before its write still changed under the
    weight's update when that ran after the write (model:3 moved by the new velocity,
    5e-2 off one device's kernel after 3 steps). The read is a copy now."""
    tf.disable_resource_variables()
    try:
        _, unordered, history = _train(MESHES[1], "momentum")
    finally:
        tf.enable_resource_variables()
    assert unordered == []
    np.testing.assert_array_equal(history[1][KERNEL], history[0][KERNEL])
    want = one_device["momentum"][2][-1][KERNEL]
    np.testing.assert_allclose(history[-1][KERNEL], want, rtol=0,
                               atol=3e-5 * float(np.abs(want).max()))
