"""A mesh axis wider than some of a model's dimensions leaves those dimensions whole.

``train --speeds`` (and ``predict``, ``evaluate``, ``make_estimator(mesh_shape=...)``:
every mesh without a plan's layout) laid every filter dimension on the ``model``
axis, so seven speeds on vgg-cifar-small (6 filters in its first two convolutions)
or five on resattnet3d-tiny (a 4-filter stem) stopped at the first step: "tensor
dimension 'conv1_filters' (size 6) on mesh axis 'model': size 6 cannot be split
into 7 parts of at least 1". The planner already keeps such a dimension whole
(``CostModel.active_dims``); the default layout now does the same, and the run
trains to the one-device result. An axis wider than every dimension is refused
in one line that says so.
"""
import json

import numpy as np
import pytest

from meshpar.cli import main
from meshpar.models import resolve
from meshpar.training.mesh_spec import MeshSpec, check_layout, default_layout

STEPS = 2
COMMON = ["train", "--synthetic", "--n-synthetic", "8", "--val-fraction", "0",
          "--no-keep-best", "--no-progress", "--batch", "3", "--seed", "5",
          "--steps", str(STEPS), "--json"]


def test_the_default_layout_keeps_narrow_dimensions_whole():
    tiny = resolve("resattnet3d-tiny")  # stem, s0b0 and the key: 4 units; s1b0, value: 8
    assert default_layout(tiny, "model:4") == tiny.layout_rules(batch_axis=None)  # all fit
    rules = dict(r.split(":") for r in default_layout(tiny, "batch:2;model:5").split(";"))
    assert rules == {"batch": "batch", "s1b0_conv1_filters": "model",
                     "s1b0_conv2_filters": "model", "s1att_value": "model"}
    rules = dict(r.split(":") for r in default_layout(tiny, "all:8").split(";"))
    assert rules == {"s1b0_conv1_filters": "all", "s1b0_conv2_filters": "all",
                     "s1att_value": "all"}


def test_an_axis_wider_than_every_dimension_is_refused_so():
    with pytest.raises(ValueError, match=r"axis 'model' splits nothing: each dimension "
                                         r"resattnet3d-tiny lays out on it has fewer units "
                                         r"than its 9 devices \(stem_filters 4,.*s1att_value 8\)"):
        check_layout(resolve("resattnet3d-tiny"), MeshSpec("model:9"))


def _train(model, model_dir, capsys, mesh=()):
    assert main(COMMON + ["--model", model, "--model-dir", str(model_dir), *mesh]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _checkpoint(model_dir):
    import tensorflow.compat.v1 as tf

    reader = tf.train.load_checkpoint(str(model_dir))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


@pytest.mark.parametrize("model, speeds, mesh", [
    ("vgg-cifar-small", "1,0.6,0.5,0.3,0.3,0.2,0.1", "model:7"),
    ("resattnet3d-tiny", "0.2,1,0.5,0.7,0.3", "model:5"),
])
def test_a_mesh_wider_than_a_layer_trains_to_the_one_device_result(tmp_path, capsys, model,
                                                                   speeds, mesh):
    one = _train(model, tmp_path / "one", capsys)
    wide = _train(model, tmp_path / "wide", capsys, ["--speeds", speeds, "--mesh", mesh])
    assert wide["mesh_shape"] == mesh
    np.testing.assert_allclose(wide["last_loss"], one["last_loss"], rtol=1e-5)
    want, got = _checkpoint(tmp_path / "one"), _checkpoint(tmp_path / "wide")
    assert sorted(got) == sorted(want) and int(got["global_step"]) == STEPS
    for name, value in want.items():
        scale = float(np.abs(value).max())
        np.testing.assert_allclose(got[name], value, rtol=0, atol=3e-5 * scale + 1e-9,
                                   err_msg=name)
