"""Bad arguments to the Python API fail at the call, naming the argument: the
estimator's training numbers, mesh arguments a plan or MeshSpec would override,
MeshSpec weights, split_sizes' weights and sizes, and the planner's arguments.
Valid input (numpy numbers, a plan re-placed on other devices) still works."""
import dataclasses
import math

import numpy as np
import pytest

import meshpar  # noqa: F401  (import shim before mesh_tensorflow)
import tensorflow.compat.v1 as tf

from meshpar.core.splits import split_sizes
from meshpar.models import describe_model
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.plan import Plan
from meshpar.planning.planners import plan
from meshpar.training import estimator as E

tf.logging.set_verbosity(tf.logging.ERROR)

MODEL = "vgg-cifar-small"
BAD = (ValueError, TypeError)


def _plan():
    """A two-device plan of MODEL (model axis, uneven)."""
    return Plan(method="proportional", model=MODEL, batch=8, mesh_shape=(("model", 2),),
                layout=(("conv1_filters", "model"),), devices=("/cpu:0", "/cpu:0"),
                split_weights={"model": [2.0, 1.0]})


# --- 1. the estimator's learning rate and counts -------------------------------

@pytest.mark.parametrize("rate", [-1.0, 0.0, math.nan, math.inf, "1e-3", True, None])
def test_make_estimator_refuses_a_learning_rate_that_is_not_a_positive_number(tmp_path, rate):
    with pytest.raises(BAD, match="learning_rate must be"):
        E.make_estimator(MODEL, model_dir=str(tmp_path), learning_rate=rate)


@pytest.mark.parametrize("name, value", [
    ("threads", -1), ("threads", 1.5), ("save_checkpoints_steps", 0),
    ("save_checkpoints_steps", None), ("keep_checkpoint_max", 0), ("keep_checkpoint_max", -3),
    ("save_summary_steps", 0), ("log_step_count_steps", -1), ("seed", -1), ("seed", "1"),
])
def test_make_estimator_refuses_bad_counts_naming_them(tmp_path, name, value):
    with pytest.raises(BAD, match=f"{name} must be an integer >= "):
        E.make_estimator(MODEL, model_dir=str(tmp_path), **{name: value})


@pytest.mark.parametrize("params, message", [
    ([1, 2], "params must be a dict of loss, class_weights"),
    ({"warmup_steps": -1}, "params['warmup_steps'] must be an integer >= 0, got -1"),
    ({"warmup_steps": 1.5}, "params['warmup_steps'] must be an integer >= 0, got 1.5"),
    ({"total_steps": 0, "lr_schedule": "cosine"}, "params['total_steps'] must be an integer >= 1"),
    ({"decay_steps": 2.5, "lr_schedule": "step"}, "params['decay_steps'] must be an integer >= 1"),
    ({"focal_gamma": "2", "loss": "focal"}, "params['focal_gamma'] must be a number, got '2'"),
    ({"clip_norm": "1"}, "params['clip_norm'] must be a number, got '1'"),
    ({"weight_decay": "0.1"}, "params['weight_decay'] must be a number"),
    ({"loss": "weighted_cross_entropy", "class_weights": "balanced"},
     "params['class_weights'] must be a list of numbers, one per class, got 'balanced' ('balanced'"
     " is `meshpar train --class-weights`'s"),
    ({"loss": "weighted_cross_entropy", "class_weights": [1, "2"]},
     "params['class_weights'] must be a list of numbers"),
    # used to be ignored in silence (the CLI refuses --class-weights and --focal-gamma so)
    ({"class_weights": [1, 2]}, "params['class_weights'] goes with loss='weighted_cross_entropy'; "
                                "loss='cross_entropy' would ignore it"),
    ({"loss": "weighted_cross_entropy", "focal_gamma": 1.0},
     "params['focal_gamma'] goes with loss='focal'; loss='weighted_cross_entropy' would ignore it"),
])
def test_make_estimator_refuses_bad_params_at_the_call_naming_the_key(tmp_path, params, message):
    # used to pass the call and fail at the first step ("could not convert string to float:
    # 'b'", "must be real number, not str"), or to train with -1 warm-up steps
    with pytest.raises(BAD) as info:
        E.make_estimator(MODEL, model_dir=str(tmp_path), params=params)
    assert message in str(info.value)


def test_make_estimator_takes_numpy_numbers_and_the_documented_nones(tmp_path):
    est = E.make_estimator(MODEL, model_dir=str(tmp_path), learning_rate=np.float32(0.01),
                           threads=np.int64(0), seed=np.int32(3),
                           save_checkpoints_steps=np.int64(5), keep_checkpoint_max=None,
                           save_summary_steps=None, log_step_count_steps=np.int16(7))
    assert est.config.tf_random_seed == 3 and est.config.log_step_count_steps == 7
    assert est.config.session_config.intra_op_parallelism_threads == 0  # TF's choice
    assert E.run_config(str(tmp_path), seed=None).tf_random_seed is None


# --- 2. mesh arguments a plan or a MeshSpec would silently override -----------

@pytest.mark.parametrize("extra", [dict(split_weights={"model": [1, 1]}),
                                   dict(dim_split_weights={"conv1_filters": [1, 1]}),
                                   dict(layout="conv2_filters:model")])
def test_a_plan_with_explicit_mesh_arguments_is_refused(extra):
    name = next(iter(extra))
    with pytest.raises(ValueError, match=f"plan= sets the whole mesh: drop {name}="):
        E.build_model_fn(MODEL, plan=_plan(), **extra)


@pytest.mark.parametrize("extra", [dict(split_weights={"model": [1, 2]}), dict(devices=["", ""]),
                                   dict(layout="conv1_filters:model"), dict(upstream=True)])
def test_a_mesh_spec_with_explicit_mesh_arguments_is_refused(extra):
    name = next(iter(extra))
    with pytest.raises(ValueError, match=f"mesh= sets the whole mesh: drop {name}="):
        E.build_model_fn(MODEL, mesh=E.MeshSpec("model:2"), **extra)


@pytest.mark.parametrize("devices", [["a", "b", "c"], ["a"]])
def test_a_plan_re_placed_on_another_number_of_devices_is_refused(devices):
    with pytest.raises(ValueError, match=f"mesh model:2 has 2 processors but {len(devices)} "
                                         "devices were given"):
        E.build_model_fn(MODEL, plan=_plan(), devices=devices)
    with pytest.raises(TypeError, match="devices must be a sequence of device strings"):
        E.build_model_fn(MODEL, plan=_plan(), devices="ab")


def test_a_plan_for_another_model_is_refused(tmp_path):
    other = dataclasses.replace(_plan(), model="resattnet3d-tiny")
    with pytest.raises(ValueError, match="plan was made for model 'resattnet3d-tiny', "
                                         f"not '{MODEL}'"):
        E.build_model_fn(MODEL, plan=other, devices=["", ""])
    other.save(str(tmp_path / "plan.json"))
    with pytest.raises(ValueError, match="plan was made for model 'resattnet3d-tiny'"):
        E.make_estimator(MODEL, model_dir=str(tmp_path / "run"), plan=str(tmp_path / "plan.json"))


WORKERS = ["/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"]


@pytest.mark.parametrize("kwargs, what", [
    (dict(plan=_plan(), devices=WORKERS), "devices="),
    (dict(mesh_shape="model:2", devices=WORKERS), "devices="),
    (dict(mesh=E.MeshSpec("model:2", devices=WORKERS)), "mesh="),
    (dict(plan=dataclasses.replace(_plan(), devices=tuple(WORKERS))), "plan="),
])
def test_make_estimator_refuses_worker_devices_outside_their_cluster(tmp_path, monkeypatch,
                                                                      kwargs, what):
    # devices= and mesh= of worker tasks used to pass and fail at the first step with
    # TF's "Graph execution error" traceback (only plan= without devices= was refused)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match=f"{what} places the mesh on worker tasks "
                                         r"\(/job:worker/task:0/device:CPU:0, \.\.\.\), which "
                                         "this process does not have"):
        E.make_estimator(MODEL, model_dir=str(tmp_path), **kwargs)


def test_a_plan_re_placed_on_as_many_devices_keeps_its_mesh():
    fn = E.build_model_fn(MODEL, plan=_plan(), devices=["", ""])
    assert fn.mesh.devices == ("", "")
    assert fn.mesh.mesh_shape == "model:2" and fn.mesh.layout == "conv1_filters:model"
    assert fn.mesh.split_weights == {"model": [2.0, 1.0]}
    even = E.build_model_fn(MODEL, mesh=E.MeshSpec("model:2", upstream=True), upstream=True)
    assert even.mesh.upstream
    with pytest.raises(TypeError, match="mesh must be a MeshSpec"):
        E.build_model_fn(MODEL, mesh="model:2")


# --- 3. MeshSpec weights, checked at construction ---------------------------

@pytest.mark.parametrize("weights, message", [
    ({"model": [1, 2]}, "has 2 weights; mesh axis 'model' has 3 coordinates"),
    ({"model": [1, -1, 1]}, "weight 1 is -1.0; weights must be positive"),
    ({"model": [1, 0, 1]}, "weight 1 is 0.0; weights must be positive"),
    ({"model": [1, math.nan, 1]}, "weight 1 is nan; weights must be finite"),
    ({"rows": [1, 1]}, "names mesh axis 'rows', which is not in mesh"),
    ({"model": "123"}, "weights must be a sequence of numbers"),
    ([1, 2, 3], "split_weights must be a dict"),
])
def test_mesh_spec_refuses_bad_split_weights(weights, message):
    with pytest.raises(BAD, match=message):
        E.MeshSpec("batch:2;model:3", split_weights=weights)


@pytest.mark.parametrize("layout, weights, message", [
    (None, {"conv1_filters": [1, math.inf]}, "weight 1 is inf; weights must be finite"),
    (None, {"conv1_filters": [1, -2]}, "weights must be positive"),
    ("conv1_filters:model", {"conv1_filters": [1, 1]}, "has 2 weights; mesh axis 'model' has 3"),
    ("conv1_filters:model", {"fc1_units": [1, 1, 1]}, "does not put on any axis"),
])
def test_mesh_spec_refuses_bad_dim_split_weights(layout, weights, message):
    with pytest.raises(ValueError, match=message):
        E.MeshSpec("model:3", layout=layout, dim_split_weights=weights)


def test_dim_split_weights_are_checked_against_the_model_layout_when_none_is_given():
    with pytest.raises(ValueError, match="has 3 weights; mesh axis 'model' has 2"):
        E.build_model_fn(MODEL, mesh_shape="model:2",
                         dim_split_weights={"conv1_filters": [1, 2, 3]})
    with pytest.raises(ValueError, match="'nodim', which the layout"):
        E.build_model_fn(MODEL, mesh_shape="model:2", dim_split_weights={"nodim": [1, 2]})
    fn = E.build_model_fn(MODEL, mesh_shape="model:2",
                          dim_split_weights={"conv1_filters": np.array([1.0, 2.0])})
    assert fn.mesh.dim_split_weights == {"conv1_filters": [1.0, 2.0]}


def test_mesh_spec_takes_numpy_weights():
    mesh = E.MeshSpec("batch:2;model:3", split_weights={"model": np.array([3, 2, 1]),
                                                        "batch": (np.float32(1), 2)})
    assert mesh.split_weights == {"model": [3.0, 2.0, 1.0], "batch": [1.0, 2.0]}
    with pytest.raises(TypeError, match="devices must be a sequence"):
        E.MeshSpec("model:2", devices="ab")


# --- 4. split_sizes ----------------------------------------------------------

def test_split_sizes_takes_numpy_sizes_and_weights():
    assert split_sizes(np.int64(10), [3, 1]) == [8, 2]
    assert split_sizes(np.float32(10), np.array([1.0, 3.0])) == [3, 7]
    assert split_sizes(np.int32(13), [np.float64(1)] * 3) == [5, 4, 4]


@pytest.mark.parametrize("weights", ["12", {1: 2}, {1, 2}, 5, [True, 1], ["1", "2"]])
def test_split_sizes_refuses_weights_that_are_not_a_sequence_of_numbers(weights):
    with pytest.raises(ValueError, match="weights must be"):
        split_sizes(10, weights, what="conv1_filters")


def test_split_sizes_handles_huge_finite_weights_and_refuses_infinite_ones():
    assert split_sizes(10, [1e308, 1e308]) == [5, 5]
    assert split_sizes(100, [1e307, 1]) == [99, 1]
    assert split_sizes(12, [1e308, 5e307, 2.5e307]) == split_sizes(12, [4, 2, 1])
    for bad in ([math.inf, 1], [1, math.nan]):
        with pytest.raises(ValueError, match="must be finite"):
            split_sizes(10, bad)


# --- 5. the planner's arguments ---------------------------------------------

@pytest.fixture(scope="module")
def desc():
    return describe_model(MODEL)


def test_plan_names_the_model_type_for_a_model_name():
    with pytest.raises(TypeError, match=r"ModelDescription.*describe_model\('vgg-cifar-small'\)"):
        plan(MODEL, ClusterSpec.from_speeds([1, 0.5]), 8, method="even")


def test_plan_takes_relative_speeds_for_a_cluster(desc):
    cluster = ClusterSpec.from_speeds([1, 0.5])
    got = plan(desc, [1, 0.5], 8, method="proportional")
    want = plan(desc, cluster, 8, method="proportional")
    assert (got.mesh_shape, got.devices, got.split_weights) == \
        (want.mesh_shape, want.devices, want.split_weights)
    assert plan(desc, np.array([1.0, 0.5]), np.int64(8), method="even",
                seed=np.int64(2)).batch == 8
    with pytest.raises(TypeError, match="cluster must be a ClusterSpec"):
        plan(desc, "1,0.5", 8, method="even")


@pytest.mark.parametrize("kwargs, message", [
    (dict(seed=-1), "seed must be an integer >= 0, got -1"),
    (dict(seed="x"), "seed must be an integer >= 0"),
    (dict(seed=1.5), "seed must be an integer >= 0"),
    (dict(batch=0), "batch must be an integer >= 1"),
    (dict(batch=8.5), "batch must be an integer >= 1"),
    (dict(method="ga", time_limit=math.nan), "time_limit .* must be finite and > 0"),
    (dict(method="ga", time_limit=math.inf), "time_limit .* must be finite and > 0"),
    (dict(method="ga", time_limit=-1), "time_limit .* must be finite and > 0"),
    (dict(method="ga", time_limit="10"), "time_limit .* must be a number"),
    (dict(method="exact", time_limit=math.nan), "time_limit .* must be finite and > 0"),
    (dict(method="exact", mip_rel_gap=math.nan), "mip_rel_gap must be"),
    (dict(method="ga", generations=2.5), "generations must be an integer >= 1"),
    (dict(method="ga", population=0), "population must be an integer >= 1"),
    (dict(method="ga", crossover_rate=1.5), r"crossover_rate must be in \[0, 1\]"),
    (dict(method="ga", weight_sigma=-0.1), "weight_sigma must be >= 0"),
    (dict(method="ga", layout_gene="no"), "layout_gene must be True or False"),
    (dict(method=["ga"]), "unknown planning method"),
    (dict(subsets="yes"), "subsets must be True or False"),
    (dict(memory_terms=None), "memory_terms must be a MemoryTerms"),
])
def test_plan_refuses_bad_arguments_naming_them(desc, kwargs, message):
    kwargs = {"batch": 8, "method": "even", **kwargs}
    with pytest.raises(BAD, match=message):
        plan(desc, ClusterSpec.from_speeds([1, 0.5]), **kwargs)


def test_plan_takes_numpy_options(desc):
    result = plan(desc, [1, 0.5], 8, method="ga", seed=np.int64(1), generations=np.int32(2),
                  population=np.int64(8), time_limit=np.float32(60), crossover_rate=np.float64(1))
    assert result.feasible


# --- 5. Layouts that would split less than asked -----------------------------

@pytest.mark.parametrize("kwargs, message", [
    # the model's own rules name 'batch' and 'model': these axes used to copy the work
    (dict(mesh_shape="bar:2;foo:2"), r"mesh bar:2;foo:2: axis 'bar' splits nothing"),
    (dict(mesh_shape="model:2", layout="zzz:model"),
     r"layout rule zzz:model: vgg-cifar-small has no dimension 'zzz'; it lays out batch, "
     r"conv1_filters"),
    (dict(mesh_shape="model:2", layout="conv1_filters:modl"),
     r"layout rule conv1_filters:modl: mesh model:2 has no axis 'modl', and no rule uses its "
     r"axis 'model'"),
    # was Mesh-TF's 'bad input to _parse_string_to_list_of_pairs nonsense'
    (dict(mesh_shape="model:2", layout="nonsense"), r"layout: bad rule 'nonsense'"),
    (dict(mesh_shape="model:2", layout="a:b:c"), r"layout: bad rule 'a:b:c'"),
])
def test_a_layout_that_would_split_less_than_asked_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        E.build_model_fn(MODEL, **kwargs)


@pytest.mark.parametrize("kwargs", [
    dict(mesh_shape="all:2"), dict(mesh_shape="batch:2;model:1"), dict(mesh_shape="rows:1;model:2"),
    dict(mesh_shape="model:2", layout=""),  # replicated on purpose
    dict(mesh_shape="model:2", layout=";conv1_filters:model;"),
    dict(mesh_shape="model:2", layout="batch:batch;conv1_filters:model"),  # one layout, any mesh
])
def test_layouts_that_split_what_they_say_are_taken(kwargs):
    assert E.build_model_fn(MODEL, **kwargs).mesh.mesh_shape == kwargs["mesh_shape"]


def test_parse_layout_is_the_one_layout_reader():
    from meshpar.planning.plan import parse_layout
    from meshpar.training.live_speeds import worker_work

    assert parse_layout(" batch:batch ; conv1_filters : model;") == (
        ("batch", "batch"), ("conv1_filters", "model"))
    assert parse_layout("") == ()
    # a dimension's first rule on the mesh applies, as in Mesh-TF; a rule to an absent
    # axis splits nothing (worker_work used to count it as split)
    desc = E.as_spec(MODEL).describe()
    mesh = E.MeshSpec("model:2", devices=[f"/job:worker/task:{i}/device:CPU:0" for i in (0, 1)],
                      split_weights={"model": [3, 1]})
    split = worker_work(mesh, desc, "conv1_filters:model;conv2_filters:model;conv3_filters:model;"
                                    "conv4_filters:model;fc1_units:model")
    absent = worker_work(mesh, desc, "conv1_filters:other;conv2_filters:other;"
                                     "conv3_filters:other;conv4_filters:other;fc1_units:other")
    assert absent == {0: 1.0, 1: 1.0} and split[0] > split[1] and split[0] < 1.0
