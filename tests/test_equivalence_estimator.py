"""A checkpoint written on one uneven mesh goes on, evaluates and predicts on any other.

Train 3 steps of the tiny ResAttNet (batch norm, attention) on an uneven 2 x 3 mesh
with Adam, weight decay and a cosine schedule with warm-up (the step count lives in
the checkpoint: global step, Adam's beta powers). Continuing 2 steps on one device,
on a mesh with its axes in the other order and other weights, and on a model axis
with per-layer weights must give the same losses and variables; evaluation (a padded
last batch) and prediction from the 3-step checkpoint on other meshes must give one
device's scores.
"""
import shutil

import numpy as np
import pytest

import meshpar  # noqa: F401  (import shim before mesh_tensorflow)
import tensorflow.compat.v1 as tf

from meshpar.models import ResAttNet3DConfig
from meshpar.training import estimator as E
from meshpar.training.inputs import pad_last_batch
from mtf_helpers import tiny_volumes as _data  # 8^3 volumes, class 1 brighter

tf.logging.set_verbosity(tf.logging.ERROR)

TINY = ResAttNet3DConfig.small(input_shape=(8, 8, 8), stem_filters=4, stage_filters=(6,),
                               attention_stages=(0,), name="tiny-resattnet3d")
BATCH = 4
PARAMS = {"weight_decay": 0.05, "lr_schedule": "cosine", "warmup_steps": 1, "total_steps": 6}
TRAINED_ON = dict(mesh_shape="batch:2;model:3", split_weights={"batch": [1, 3],
                                                               "model": [4, 1, 1]})
MESHES = {
    "one device": {},
    "model:2;batch:2": dict(mesh_shape="model:2;batch:2",
                            split_weights={"batch": [3, 1], "model": [1, 5]}),
    "model:3 per layer": dict(mesh_shape="model:3", dim_split_weights={
        "stem_filters": [1, 1, 2], "s0b0_conv1_filters": [5, 1, 1],
        "s0att_value": [1, 4, 1]}),
}


def _estimator(model_dir, mesh):
    return E.make_estimator(TINY, str(model_dir), optimizer="adam", learning_rate=0.02,
                            params=PARAMS, **mesh)


def _train_input():
    x, y = _data()
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH, drop_remainder=True).repeat()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The directory of the 3-step checkpoint written on TRAINED_ON."""
    model_dir = tmp_path_factory.mktemp("equivalence") / "uneven"
    _estimator(model_dir, TRAINED_ON).train(_train_input, max_steps=3)
    return model_dir


def test_continuing_on_other_meshes_gives_the_one_device_continuation(trained, tmp_path):
    results = {}
    for name, mesh in MESHES.items():
        model_dir = tmp_path / name.replace(":", "_").replace(";", "_").replace(" ", "_")
        shutil.copytree(trained, model_dir)
        est = _estimator(model_dir, mesh)
        history = E.LossHistoryHook()
        est.train(_train_input, max_steps=5, hooks=[history])
        assert est.get_variable_value("global_step") == 5
        results[name] = (np.array(history.losses),
                         {v: est.get_variable_value(v) for v in est.get_variable_names()})
    losses, variables = results.pop("one device")
    assert len(losses) == 2
    names = set(variables)
    assert {"adam/beta1_power", "adam/beta2_power"} <= names
    assert any(n.endswith("moving_variance") for n in names)
    for name, (other_losses, other_variables) in results.items():
        np.testing.assert_allclose(other_losses, losses, rtol=1e-5, atol=1e-6, err_msg=name)
        assert set(other_variables) == names, name
        for var in names:  # each to its own scale (Adam's second moments are tiny)
            want = np.asarray(variables[var], np.float64)
            np.testing.assert_allclose(other_variables[var], want, rtol=0,
                                       atol=3e-5 * float(np.abs(want).max()) + 1e-9,
                                       err_msg=f"{name}: {var}")


def test_evaluation_and_prediction_on_other_meshes_give_one_devices_scores(trained):
    x, y = _data(n=10, seed=4)  # 10 in batches of 4: the last batch has 2 padded examples

    def eval_input():
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).map(
            pad_last_batch(BATCH))

    def predict_input():
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).map(
            pad_last_batch(BATCH, labels=False))  # features only, as predict_input_fn

    scores = {}
    for name, mesh in [("one device", {}), ("batch:3", dict(
            mesh_shape="batch:3", split_weights={"batch": [1, 1, 2]})),
            ("model:2;batch:2", MESHES["model:2;batch:2"])]:
        est = _estimator(trained, mesh)
        metrics = est.evaluate(eval_input)
        probabilities = np.array([p["probabilities"] for p in est.predict(predict_input)])
        scores[name] = (metrics, probabilities[:len(x)])
    metrics, probabilities = scores.pop("one device")
    assert metrics["global_step"] == 3
    assert 0.0 < probabilities.min() and probabilities.max() < 1.0
    for name, (other_metrics, other_probabilities) in scores.items():
        np.testing.assert_allclose(other_probabilities, probabilities, rtol=0, atol=2e-6,
                                   err_msg=name)
        assert set(other_metrics) == set(metrics), name
        for key, value in metrics.items():
            assert other_metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-6), \
                f"{name}: {key}"
