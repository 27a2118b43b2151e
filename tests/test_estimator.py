"""meshpar.training.estimator: uneven hybrid meshes train like one device; checkpoints move between meshes."""
import shutil

import numpy as np
import pytest

import meshpar  # noqa: F401  (import shim before mesh_tensorflow)
import tensorflow.compat.v1 as tf

from meshpar.training import estimator as E
from meshpar.models import ResAttNet3DConfig

tf.logging.set_verbosity(tf.logging.ERROR)

# Smallest network with every part: stem, pool, residual block, attention, head.
TINY = ResAttNet3DConfig.small(input_shape=(8, 8, 8), stem_filters=4, stage_filters=(6,),
                               attention_stages=(0,), name="tiny-resattnet3d")
HYBRID = dict(mesh_shape="batch:2;model:3",
              split_weights={"batch": [2, 1], "model": [3, 2, 1]})
BATCH = 6


def _data(n=24, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 8, 8, 8, 1).astype(np.float32)
    y = (np.arange(n) % 2).astype(np.int32)
    x[y == 1, 2:6, 2:6, 2:6] += 1.0  # a bright blob marks class 1
    return x, y


def _train_input(x, y):
    return lambda: tf.data.Dataset.from_tensor_slices((x, y)).batch(
        BATCH, drop_remainder=True).repeat()


def _eval_input(x, y):
    return lambda: tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH, drop_remainder=True)


def test_uneven_hybrid_mesh_trains_like_one_device(tmp_path):
    x, y = _data()
    results = {}
    for name, mesh in [("one", {}), ("hybrid", HYBRID)]:
        est = E.make_estimator(TINY, str(tmp_path / name), optimizer="adam",
                               learning_rate=0.01, **mesh)
        history = E.LossHistoryHook()
        est.train(_train_input(x, y), max_steps=24, hooks=[history])
        results[name] = (np.array(history.losses), est.evaluate(_eval_input(x, y)))
    (one_losses, one_eval), (hyb_losses, hyb_eval) = results["one"], results["hybrid"]
    assert len(one_losses) == 24
    assert one_losses[-1] < 0.5 * one_losses[0]  # it learns
    np.testing.assert_allclose(hyb_losses, one_losses, atol=1e-5, rtol=0)
    for metric in ("accuracy", "auc", "sensitivity", "specificity"):
        assert hyb_eval[metric] == pytest.approx(one_eval[metric], abs=1e-6), metric
    assert hyb_eval["loss"] == pytest.approx(one_eval["loss"], abs=1e-5)
    assert one_eval["accuracy"] >= 0.7  # above chance (0.5) after 24 steps


def _losses(est, x, y):
    """Per-example cross-entropy of ``est``'s predictions for ``x`` (whole batches)."""
    probs = np.array([p["probabilities"] for p in est.predict(
        lambda: tf.data.Dataset.from_tensor_slices(x).batch(BATCH, drop_remainder=True))])
    return -np.log(probs[np.arange(len(y)), y])


def test_evaluation_scores_every_example_of_a_padded_last_batch(tmp_path):
    """10 examples in batches of 6: the last batch holds 4 of them and 2 padded
    ones (label PAD_LABEL). Loss and accuracy are the means over the 10 (from the
    predicted probabilities, computed here in numpy), on one device and on the
    uneven hybrid mesh; weighted and focal losses too, per example."""
    from meshpar.training.inputs import PAD_LABEL, pad_last_batch

    x, y = _data(n=10, seed=3)

    def padded_eval():
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).map(
            pad_last_batch(BATCH))

    def predict_input():
        return tf.data.Dataset.from_tensor_slices(x).batch(BATCH).map(
            lambda v: pad_last_batch(BATCH, labels=False)(v, None))

    with tf.Graph().as_default():
        tf.set_random_seed(0)
        batches = tf.data.make_one_shot_iterator(padded_eval()).get_next()
        with tf.Session() as sess:
            first, last = sess.run(batches), sess.run(batches)
    assert last[0].shape == first[0].shape == (BATCH, 8, 8, 8, 1) and not last[0][4:].any()
    assert list(last[1]) == list(y[6:]) + [PAD_LABEL] * 2
    results = {}
    for name, mesh in [("one", {}), ("hybrid", HYBRID)]:
        est = E.make_estimator(TINY, str(tmp_path / name), optimizer="adam",
                               learning_rate=0.01, **mesh)
        est.train(_train_input(*_data()), max_steps=6)
        probs = np.array([p["probabilities"] for p in est.predict(predict_input)])[:10]
        ce = -np.log(probs[np.arange(10), y])
        scores = est.evaluate(padded_eval)
        assert scores["loss"] == pytest.approx(ce.mean(), rel=1e-5), name
        assert scores["accuracy"] == pytest.approx((probs.argmax(1) == y).mean()), name
        gamma, weights = 2.0, (1.0, 3.0)
        for params, expected in [
                ({"loss": "focal", "focal_gamma": gamma},
                 ((1 - np.exp(-ce)) ** gamma * ce).mean()),
                ({"loss": "weighted_cross_entropy", "class_weights": list(weights)},
                 # the mean of w[y] CE over the 10, the weights scaled to mean 1
                 (np.take(weights, y) / np.mean(weights) * ce).mean())]:
            other = E.make_estimator(TINY, str(tmp_path / name), optimizer="adam",
                                     learning_rate=0.01, params=params, **mesh)
            assert other.evaluate(padded_eval)["loss"] == pytest.approx(expected, rel=1e-5)
        results[name] = scores
    from meshpar.training.losses import cross_entropy

    own = E.make_estimator(TINY, str(tmp_path / "one"), params={"loss": cross_entropy})
    whole = own.evaluate(lambda: padded_eval().take(1))  # a callable loss: whole batches
    assert whole["loss"] == pytest.approx(np.mean(_losses(own, x[:6], y[:6])), rel=1e-5)
    with pytest.raises(tf.errors.InvalidArgumentError, match="callable loss cannot leave out"):
        own.evaluate(padded_eval)
    for key in ("loss", "accuracy", "auc"):
        assert results["hybrid"][key] == pytest.approx(results["one"][key], abs=1e-5), key


def test_two_class_metrics_of_one_class_are_nan_not_one_or_zero(tmp_path):
    """AUC needs both classes, sensitivity a positive, specificity a negative:
    scored on class-0 examples only, AUC and sensitivity are NaN and specificity
    is defined; on both classes all three are numbers."""
    x, y = _data()
    est = E.make_estimator(TINY, str(tmp_path / "m"), optimizer="adam", learning_rate=0.01)
    est.train(_train_input(x, y), max_steps=2)
    zeros = y == 0
    only_zero = est.evaluate(_eval_input(x[zeros], y[zeros]))
    assert np.isnan(only_zero["auc"]) and np.isnan(only_zero["sensitivity"])
    assert 0.0 <= only_zero["specificity"] <= 1.0
    both = est.evaluate(_eval_input(x, y))
    assert all(0.0 <= both[k] <= 1.0 for k in ("auc", "sensitivity", "specificity"))


def _variables(est):
    return {name: est.get_variable_value(name) for name in est.get_variable_names()
            if name != "global_step"}


def test_checkpoint_from_uneven_mesh_restores_on_one_device_and_on_a_2x2_mesh(tmp_path):
    """Train 3 steps on model:3 [3,2,1]; continue one step there, on one device
    and on batch:2;model:2 with other weights: identical variables (Adam slots
    and batch-norm averages too), so each mesh restored the slices it needed."""
    x, y = _data()
    first = tmp_path / "uneven"
    uneven = dict(mesh_shape="model:3", split_weights={"model": [3, 2, 1]})
    E.make_estimator(TINY, str(first), optimizer="momentum", learning_rate=0.05,
                     **uneven).train(_train_input(x, y), max_steps=3)
    meshes = {
        "uneven": uneven,
        "one": {},
        "2x2": dict(mesh_shape="batch:2;model:2",
                    split_weights={"batch": [1, 2], "model": [1, 3]}),
    }
    after = {}
    for name, mesh in meshes.items():
        model_dir = tmp_path / f"continued_{name}"
        shutil.copytree(first, model_dir)
        est = E.make_estimator(TINY, str(model_dir), optimizer="momentum", learning_rate=0.05,
                               **mesh)
        est.train(_train_input(x, y), max_steps=4)
        assert est.get_variable_value("global_step") == 4
        after[name] = _variables(est)
    names = set(after["uneven"])
    assert any(n.endswith("/momentum") for n in names) and any("moving_mean" in n for n in names)
    assert not any("_slice_" in n for n in names)  # only masters are checkpointed
    for name in ("one", "2x2"):
        assert set(after[name]) == names
        for var in names:
            np.testing.assert_allclose(after[name][var], after["uneven"][var], atol=1e-6,
                                       err_msg=f"{name}: {var}")


def test_model_fn_rejects_dynamic_batch_and_wrong_shapes():
    model_fn = E.build_model_fn(TINY)
    with tf.Graph().as_default():
        dynamic = tf.placeholder(tf.float32, [None, 8, 8, 8, 1])
        with pytest.raises(ValueError, match="drop_remainder"):
            model_fn(dynamic, None, tf.estimator.ModeKeys.PREDICT)
        wrong = tf.zeros([2, 8, 8, 4, 1])
        with pytest.raises(ValueError, match="expected"):
            model_fn(wrong, None, tf.estimator.ModeKeys.PREDICT)


def test_upstream_even_split_names_a_dimension_it_cannot_cut():
    """Mesh-TF's PlacementMeshImpl cuts evenly: a batch of 5 on two rows, or a
    stem of 4 filters on three columns, is refused in our words, naming the
    dimension and the axis; meshpar's own mesh takes the same uneven sizes."""
    cases = [("batch:2", 5, "dimension batch of size 5 into 2 equal parts on mesh axis batch"),
             ("model:3", 6, "of size 4 into 3 equal parts on mesh axis model")]
    for shape, batch, message in cases:
        for upstream in (True, False):
            model_fn = E.build_model_fn(TINY, mesh_shape=shape, upstream=upstream)
            with tf.Graph().as_default():
                tf.set_random_seed(0)
                features = tf.zeros([batch, 8, 8, 8, 1])
                if upstream:
                    with pytest.raises(ValueError, match=message):
                        model_fn(features, None, tf.estimator.ModeKeys.PREDICT)
                else:
                    model_fn(features, None, tf.estimator.ModeKeys.PREDICT)


def test_mesh_spec_from_explicit_arguments_and_default_layout():
    spec = E._as_spec(TINY)
    mesh = E.MeshSpec("batch:2;model:3")
    assert mesh.devices == ("",) * 6
    layout = mesh.layout_for(spec)
    assert layout.startswith("batch:batch;stem_filters:model")
    assert E.default_layout(spec, "all:3").split(";")[0] == "stem_filters:all"
    assert E.default_layout(spec, "batch:4") == "batch:batch"
    with pytest.raises(ValueError, match="processors"):
        E.MeshSpec("model:3", devices=["", ""])
    with pytest.raises(ValueError, match="one of"):
        E.build_model_fn(TINY, mesh=mesh, mesh_shape="all:1")


def test_mesh_spec_from_plan_uses_its_mesh_layout_and_weights():
    plan_module = pytest.importorskip("meshpar.planning.plan")
    plan = plan_module.Plan(method="proportional", model=TINY.name, batch=BATCH,
                            mesh_shape=(("model", 3),), layout=(("stem_filters", "model"),),
                            devices=("", "", ""), split_weights={"model": [3, 2, 1]})
    mesh = E.MeshSpec.from_plan(plan)
    assert mesh.mesh_shape == "model:3"
    assert mesh.layout == "stem_filters:model"
    assert mesh.split_weights == {"model": [3, 2, 1]}


def test_estimator_train_step_orders_every_variable_read_before_every_write():
    """The whole training step (model, optimizer slots, batch-norm averages,
    global step) has no read that may run after a write of the same variable."""
    from meshpar.core import optim

    model_fn = E.build_model_fn(TINY, mesh_shape="model:2", split_weights={"model": [2, 1]},
                                optimizer="adam")
    x, y = _data(BATCH)
    with tf.Graph().as_default():
        tf.set_random_seed(1)
        spec = model_fn(tf.constant(x), tf.constant(y), tf.estimator.ModeKeys.TRAIN)
        assert optim.unordered_reads([spec.loss, spec.train_op]) == []
