"""A network of one's own may lay out any dimension of its graph, not only the one
per layer its layer table names.

The table read from the graph (``describe_built``) gives each layer one split
dimension: for Mesh-TF's ``multihead_attention`` the key/value size ``kv``, not
``heads``. ``check_layout`` took the table for every dimension the network has, so
the usual Mesh-TF layout ``heads:model`` was refused as a typo ("bignet has no
dimension 'heads'"), on one device too. A rule's dimension the table lacks is now
looked up in the built graph; one narrower than the model axis stays whole there as
the table's do (3 heads on ``model:4``). The network also has Mesh-TF's own
``batch_norm`` (its moving averages as update ops), ``layer_norm`` and
``dense_relu_dense``; every mesh must train it to the one-device weights.
"""
import contextlib
import io
import json

import numpy as np
import pytest

from meshpar.cli import main

NET = '''from dataclasses import dataclass

import meshpar  # noqa: F401  (before mesh_tensorflow)
import mesh_tensorflow as mtf


@dataclass(frozen=True)
class Config:
    filters: int = 5
    heads: int = 3
    hidden: int = 6
    classes: int = 3


CONFIG = Config()


def input_shape(config):
    return (4, 3, 2)


def layout_rules(config, model_axis="model", batch_axis="batch"):
    rules = [f"batch:{batch_axis}"] if batch_axis else []
    if model_axis:
        rules += [f"{d}:{model_axis}" for d in ("conv_filters", "heads", "hidden")]
    return ";".join(rules)


def build(inputs, config, mesh=None, is_training=True):
    dims = [mtf.Dimension(n, s) for n, s in zip(["batch", "h", "w", "c"], inputs.shape.as_list())]
    x = mtf.import_tf_tensor(mesh, inputs, mtf.Shape(dims))
    x = mtf.layers.conv2d(x, mtf.Dimension("conv_filters", config.filters), (3, 3), name="conv")
    x, updates = mtf.layers.batch_norm(x, is_training, 0.9, epsilon=1e-5, name="bn")
    x = mtf.layers.layer_norm(mtf.rename_dimension(mtf.relu(x), "conv_filters", "io"),
                              mtf.Dimension("io", config.filters), name="ln")
    b, h, w, io = x.shape.dims
    x = mtf.reshape(x, [b, mtf.Dimension("length", h.size * w.size), io])
    x += mtf.layers.multihead_attention(
        x, mtf.rename_dimension(x, "length", "memory_length"), None, mtf.Dimension("kv", 2),
        mtf.Dimension("heads", config.heads), is_training=is_training, dropout=0.0, name="att")
    x += mtf.layers.dense_relu_dense(x, mtf.Dimension("hidden", config.hidden),
                                     is_training=is_training, dropout=0.0, name="ffn")
    x = mtf.reduce_mean(x, reduced_dim=x.shape.dims[1])
    logits = mtf.layers.dense(x, mtf.Dimension("classes", config.classes), reduced_dims=[io],
                              name="head")
    return logits, updates
'''

TRAIN = ["train", "--synthetic", "--n-synthetic", 12, "--steps", 2, "--batch", 5,
         "--val-fraction", 0, "--no-progress", "--json", "--lr-warmup-steps", 0]


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    assert code == 0, err.getvalue()
    return json.loads(out.getvalue().splitlines()[-1])


def _variables(model_dir):
    import tensorflow.compat.v1 as tf

    reader = tf.train.load_checkpoint(str(model_dir))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


@pytest.fixture(scope="module")
def one_device(tmp_path_factory):
    root = tmp_path_factory.mktemp("graph-dims")
    (root / "attnet.py").write_text(NET, encoding="utf-8")
    _run(TRAIN + ["--model", root / "attnet.py", "--model-dir", root / "one"])
    return root


@pytest.mark.parametrize("mesh, speeds", [("batch:2;model:2", "0.4,1,0.7,0.2"),
                                          ("model:4", "1,0.3,0.6,0.5")])
def test_heads_laid_out_on_the_model_axis_train_like_one_device(one_device, mesh, speeds):
    model_dir = one_device / mesh.replace(";", "-").replace(":", "")
    summary = _run(TRAIN + ["--model", one_device / "attnet.py", "--mesh", mesh,
                            "--speeds", speeds, "--model-dir", model_dir])
    assert summary["mesh_shape"] == mesh
    want, got = _variables(one_device / "one"), _variables(model_dir)
    assert sorted(got) == sorted(want)
    assert "bn/bn_moving_mean" in want  # Mesh-TF's batch norm updates its averages
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=0,
                                   atol=3e-5 * float(np.abs(value).max()) + 1e-9, err_msg=name)


def test_a_dimension_the_graph_lacks_is_still_refused_with_the_tables_dimensions(one_device):
    from meshpar import models
    from meshpar.training.mesh_spec import MeshSpec, check_layout

    spec = models.resolve(str(one_device / "attnet.py"))
    check_layout(spec, MeshSpec("model:2", layout="heads:model;batch:batch"))
    with pytest.raises(ValueError, match="no dimension 'haeds'; it lays out batch, "
                                         "conv_filters, hidden, kv$"):
        check_layout(spec, MeshSpec("model:2", layout="haeds:model"))
