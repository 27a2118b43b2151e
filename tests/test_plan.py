import json

import pytest

from meshpar.planning.plan import Plan


def example_plan(**overrides):
    fields = dict(
        method="proportional", model="vgg-cifar", batch=8,
        mesh_shape=(("batch", 2), ("model", 2)),
        layout=(("batch", "batch"), ("conv1_filters", "model")),
        devices=("/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0",
                 "/job:worker/task:2/device:CPU:0", "/job:worker/task:3/device:CPU:0"),
        split_weights={"batch": [0.6, 0.4], "model": [0.7, 0.3]},
        dim_split_weights={"conv1_filters": [2.0, 1.0]},
        split_sizes={"batch": [5, 3], "conv1_filters": [40, 20]},
        predicted_step_seconds=0.25, planning_seconds=0.01,
        memory_per_device=(1.0, 2.0, 3.0, 4.0), history=(0.3, 0.25),
        lower_bound_seconds=0.2)
    fields.update(overrides)
    return Plan(**fields)


def test_mesh_and_layout_strings_use_mesh_tensorflow_syntax():
    plan = example_plan()
    assert plan.mesh_shape_string() == "batch:2;model:2"
    assert plan.layout_string() == "batch:batch;conv1_filters:model"


def test_plan_json_round_trip(tmp_path):
    plan = example_plan()
    path = tmp_path / "plan.json"
    plan.save(path)
    assert Plan.load(path) == plan
    assert Plan.from_dict(json.loads(path.read_text())) == plan


def test_plan_file_missing_field_is_named(tmp_path):
    data = example_plan().to_dict()
    del data["devices"]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"plan\.json.*'devices'"):
        Plan.load(path)


def test_device_count_must_match_mesh():
    with pytest.raises(ValueError, match="4 processors"):
        example_plan(devices=("/cpu:0",))


def test_weights_must_match_axis_size():
    with pytest.raises(ValueError, match="weights"):
        example_plan(split_weights={"model": [1.0, 2.0, 3.0]})


def test_check_compatible_rejects_other_model_or_device_count():
    plan = example_plan()
    plan.check_compatible("vgg-cifar", 4)
    with pytest.raises(ValueError, match="resattnet3d-small"):
        plan.check_compatible("resattnet3d-small", 4)
    with pytest.raises(ValueError, match="not 3"):
        plan.check_compatible("vgg-cifar", 3)


def test_a_layout_on_an_axis_the_mesh_lacks_is_refused():
    with pytest.raises(ValueError, match="puts 'batch' on mesh axis 'nosuchaxis', which mesh "
                                         "batch:2;model:2 does not have"):
        example_plan(layout=(("batch", "nosuchaxis"),))


def test_split_sizes_must_be_what_the_weights_give():
    """The runtime cuts by the weights, so sizes edited by hand are refused, not ignored;
    sizes the weights give (the example's 5/3 of 8 at 0.6/0.4) load."""
    assert example_plan().split_sizes["batch"] == [5, 3]
    with pytest.raises(ValueError, match=r"split_sizes of 'batch' \[2, 6\] are not what its "
                                         r"weights give \(\[5, 3\]\)"):
        example_plan(split_sizes={"batch": [2, 6], "conv1_filters": [40, 20]})
    with pytest.raises(ValueError, match="'conv1_filters'"):
        example_plan(split_sizes={"batch": [5, 3], "conv1_filters": [30, 30]})
