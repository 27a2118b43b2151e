"""A network of one's own, not a registered one: planned and trained like the others.

The network is defined here, as a user would in a module of their own: two 2-D
convolutions with splittable filter dimensions and a dense head, no batch norm;
its layer table comes from its built graph (``describe_mtf_graph``). It trains
2 Adam steps on one device, on an uneven ``batch:2;model:2`` mesh and from a
plan the planner made for it; losses and variables must agree. Also: its own
dimension names (``feat1``, batch ``examples``), ``models.from_module`` and what
it says of a module that lacks a function, the planner taking the spec, a
module without a layer table of its own, docs/training.md's example, and a
model-step profile of it on an in-process worker server.
"""
import re
import socket
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import meshpar  # noqa: F401  (import shim before mesh_tensorflow)
import mesh_tensorflow as mtf
import tensorflow.compat.v1 as tf

from meshpar import models
from meshpar.core.graph_description import describe_mtf_graph
from meshpar.planning import planners
from meshpar.planning.plan import Plan
from meshpar.training import estimator as E

tf.logging.set_verbosity(tf.logging.ERROR)

BATCH, SHAPE, CLASSES = 4, (6, 6, 2), 3
UNEVEN = dict(mesh_shape="batch:2;model:2", devices=[""] * 4,
              split_weights={"batch": [3, 1], "model": [1, 2]})


class TinyConfig(types.SimpleNamespace):
    """Hyper-parameters of the tiny network: no ``name``, no registered type."""


def _filter_dims(config):
    return [f"{config.prefix}{i}" for i in range(1, len(config.filters) + 1)]


def layout_rules(config, model_axis="model", batch_axis="batch"):
    """Batch on ``batch_axis``, both filter dimensions on ``model_axis``."""
    rules = [f"{config.batch}:{batch_axis}"] if batch_axis else []
    return ";".join(rules + ([f"{d}:{model_axis}" for d in _filter_dims(config)]
                             if model_axis else []))


def build(inputs, config, mesh=None, is_training=True):
    """conv 3x3 -> ReLU -> gather, twice; mean over space; dense to the classes."""
    del is_training
    dims = [mtf.Dimension(n, s) for n, s in zip([config.batch, "h", "w", "c"],
                                                 inputs.shape.as_list())]
    x = mtf.import_tf_tensor(mesh, inputs, mtf.Shape(dims))
    init = tf.glorot_uniform_initializer()
    for i, (name, size) in enumerate(zip(_filter_dims(config), config.filters), start=1):
        x = mtf.relu(mtf.layers.conv2d(x, mtf.Dimension(name, size), (3, 3), name=f"conv{i}",
                                       filter_initializer=init))
        x = mtf.rename_dimension(x, name, f"{name}_in")
    for _ in range(2):
        x = mtf.reduce_mean(x, reduced_dim=x.shape.dims[1])
    classes = mtf.Dimension("classes", CLASSES)
    logits = mtf.layers.dense(x, classes, reduced_dims=x.shape.dims[-1:], name="head",
                              kernel_initializer=init)
    return logits, []


def describe(config):
    """The layer table of the built graph (in a graph of its own, seeded)."""
    with tf.Graph().as_default():
        tf.set_random_seed(0)  # initialisers need one under TF_DETERMINISTIC_OPS
        graph = mtf.Graph()
        build(tf.zeros((2,) + SHAPE), config, mesh=mtf.Mesh(graph, "mesh"))
        return describe_mtf_graph(graph, "tiny", batch_dim=config.batch)


TINY = types.SimpleNamespace(describe=describe, build=build, layout_rules=layout_rules)


def _spec(prefix="conv", batch="batch"):
    return models.ModelSpec("tiny", TINY, TinyConfig(filters=(5, 3), prefix=prefix,
                                                     batch=batch))


def _input():
    rng = np.random.RandomState(0)
    x = rng.randn(8, *SHAPE).astype(np.float32)
    y = (np.arange(8) % CLASSES).astype(np.int32)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH, drop_remainder=True).repeat()


def _train(spec, model_dir, **mesh):
    est = E.make_estimator(spec, str(model_dir), learning_rate=0.05, **mesh)
    history = E.LossHistoryHook()
    est.train(_input, max_steps=2, hooks=[history])
    return np.array(history.losses), {v: est.get_variable_value(v)
                                      for v in est.get_variable_names()}


def _assert_same(got, want, what):
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-7, err_msg=what)
    assert set(got[1]) == set(want[1]), what
    for name, value in want[1].items():
        np.testing.assert_allclose(got[1][name], value, rtol=0,
                                   atol=1e-6 * float(np.abs(value).max()) + 1e-9,
                                   err_msg=f"{what}: {name}")


@pytest.fixture(scope="module")
def one_device(tmp_path_factory):
    """Losses and variables of 2 steps on one device."""
    return _train(_spec(), tmp_path_factory.mktemp("one"))


def test_an_uneven_mesh_trains_a_network_of_ones_own_like_one_device(one_device, tmp_path):
    losses, variables = one_device
    assert len(losses) == 2 and {"conv1/kernel", "conv2/kernel", "head/kernel"} <= set(variables)
    _assert_same(_train(_spec(), tmp_path, **UNEVEN), one_device, "batch:2;model:2")


def test_a_module_that_gives_its_input_shape_has_it_checked(tmp_path):
    module = types.SimpleNamespace(**vars(TINY), input_shape=lambda config: (6, 6, 3))
    spec = models.ModelSpec("tiny", module, _spec().config)
    assert spec.input_shape == (6, 6, 3)
    with pytest.raises(ValueError, match=r"tiny: features have shape \[6, 6, 2\], "
                                         r"expected \[6, 6, 3\]"):
        _train(spec, tmp_path)
    with pytest.raises(ValueError, match="input_shape.config. function in its module"):
        _spec().input_shape  # pylint: disable=expression-not-assigned


def test_a_plan_for_it_trains_it_like_one_device(one_device, tmp_path):
    spec = _spec()
    plan = planners.plan(spec.describe(), [1.0, 0.6, 0.3, 0.2], BATCH, method="exact",
                         shapes=[(2, 2)])
    assert plan.model == "tiny" and plan.mesh_shape_string() == "batch:2;model:2"
    assert {"conv1", "conv2"} <= dict(plan.layout).keys()
    assert len(set(plan.split_sizes["batch"])) > 1  # uneven
    plan.save(tmp_path / "plan.json")
    for what in (plan, str(tmp_path / "plan.json")):  # a Plan, its file
        got = _train(spec, tmp_path / str(len(list(tmp_path.iterdir()))), plan=what,
                     devices=[""] * 4)
        _assert_same(got, one_device, f"plan {type(what).__name__}")
    with pytest.raises(ValueError, match="plan was made for model 'tiny', not 'other'"):
        E.make_estimator(spec._replace(name="other"), str(tmp_path / "x"), plan=plan,
                         devices=[""] * 4)


def test_from_module_makes_the_spec_and_says_what_a_module_lacks(one_device, tmp_path):
    spec = models.from_module(TINY, _spec().config, name="tiny")
    assert spec == _spec()
    assert models.from_module(TINY, TinyConfig(name="cfg")).name == "cfg"
    assert models.from_module(models.vgg_cifar, models.VggCifarConfig.small()).name == \
        "vgg-cifar-small"
    for lacking in ("describe", "build", "layout_rules"):
        module = types.SimpleNamespace(**{k: v for k, v in vars(TINY).items() if k != lacking})
        with pytest.raises(TypeError, match=f"lacks {lacking}: a network's module gives "
                                            f"{lacking}\\("):
            models.from_module(module, spec.config, name="tiny")
    with pytest.raises(ValueError, match="give name="):
        models.from_module(TINY, spec.config)  # a namespace has no __name__, the config none
    with pytest.raises(ValueError, match=r"from_module\(module, config\)"):
        E.make_estimator(spec.config, str(tmp_path / "config"))  # a config alone
    only_logits = types.SimpleNamespace(**vars(TINY))
    only_logits.build = lambda *args, **kwargs: build(*args, **kwargs)[0]
    with pytest.raises(TypeError, match=r"must return \(logits, update_ops\)"):
        _train(models.from_module(only_logits, spec.config, name="tiny"), tmp_path / "logits")


def test_the_planner_takes_the_spec_itself():
    spec = _spec()
    for method in ("proportional", "exact"):
        by_spec = planners.plan(spec, [1.0, 0.6, 0.3, 0.2], BATCH, method=method)
        by_table = planners.plan(spec.describe(), [1.0, 0.6, 0.3, 0.2], BATCH, method=method)
        for field in ("model", "mesh_shape", "layout", "split_weights", "dim_split_weights",
                      "devices", "predicted_step_seconds"):
            assert getattr(by_spec, field) == getattr(by_table, field), (method, field)
    # a table named otherwise: the plan is the spec's, so make_estimator(spec, plan=) takes it
    other = models.ModelSpec("mine", TINY, spec.config)
    made = planners.plan(other, [1.0, 0.5], BATCH, method="proportional")
    assert made.model == "mine"
    made.check_compatible(("mine",))
    assert Plan.from_dict(made.to_dict()).model == "mine"
    assert planners.plan(models.get("vgg-cifar-small"), [1.0, 0.5], 8,
                         method="proportional").model == "vgg-cifar-small"
    with pytest.raises(TypeError, match="describe\\(\\) must return a ModelDescription"):
        planners.plan(models.ModelSpec("bad", types.SimpleNamespace(
            describe=lambda config: None), None), [1.0], BATCH)


def test_a_module_without_describe_is_described_from_its_built_graph(one_device, tmp_path):
    module = types.SimpleNamespace(build=build, layout_rules=layout_rules,
                                   input_shape=lambda config: SHAPE)
    spec = models.from_module(module, _spec(prefix="feat", batch="examples").config, name="tiny")
    assert spec.describe() == describe(spec.config)  # read from the graph build makes
    assert spec.describe().batch_dim == "examples"
    with pytest.raises(TypeError, match="lacks describe"):  # neither a table nor a shape
        models.from_module(types.SimpleNamespace(build=build, layout_rules=layout_rules),
                           spec.config, name="tiny")
    plan = planners.plan(spec, [1.0, 0.6, 0.3, 0.2], BATCH, method="exact", shapes=[(2, 2)])
    assert dict(plan.layout)["examples"] == "batch" and dict(plan.layout)["feat1"] == "model"
    _assert_same(_train(spec, tmp_path, plan=plan, devices=[""] * 4), one_device, "plan")


def test_the_example_of_docs_training_md_runs(tmp_path, monkeypatch):
    text = (Path(__file__).resolve().parent.parent / "docs" / "training.md").read_text(
        encoding="utf-8")
    section = text[text.index("\n## Your own network\n"):]
    module, usage = re.findall(r"```python\n(.*?)```", section, re.S)[:2]
    (tmp_path / "mynet.py").write_text(module, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "mynet", raising=False)
    namespace = {"__name__": "training_md_example"}
    with tf.Graph().as_default():
        exec(compile(usage, "docs/training.md", "exec"), namespace)  # pylint: disable=exec-used
    assert namespace["plan"].model == "mynet"
    assert namespace["est"].get_variable_value("global_step") == 3
    assert (tmp_path / "runs" / "mynet" / "checkpoint").is_file()


def test_a_model_step_profile_times_a_network_of_ones_own():
    """``profile_cluster_workers(model=spec)`` on one in-process worker server: the
    profile's work items are the tiny network's training steps."""
    from meshpar.runtime import profiling

    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        address = f"localhost:{probe.getsockname()[1]}"
    tf.distribute.Server(tf.train.ClusterSpec({"worker": [address]}), job_name="worker",
                         task_index=0, start=True)
    module = types.SimpleNamespace(**vars(TINY), input_shape=lambda config: SHAPE)
    spec = models.from_module(module, _spec().config, name="tiny")
    profile = profiling.profile_cluster_workers([address], model=spec, batch=2, repeats=1)
    assert profile.extra["work"] == "model-step" and profile.extra["model"] == "tiny"
    assert profile.extra["kernel"].startswith("tiny training step")
    assert [work for work, _ in profile.devices[0].profile] == [
        3.0 * spec.describe().flops * b for b in (1, 2)]
