"""`meshpar train --model net.py`: a network of one's own with Gaussian noise, dropout
and an update op of its own trains in keep-best chunks on an uneven ``batch:2;model:2``
mesh like one device trained in one go.

The layers the registered models do not use, end to end: ``mtf.random_normal``
(each element drawn from its position and the step: fe922f3),
``mtf.dropout`` and a per-filter gain buffer the forward pass reads and its update
writes (ordered behind the race-free barrier, 69fc7bf). Keep-best trains in chunks
of 2 steps, each a new session, so the noise of a chunk's steps must be the noise an
uninterrupted run draws at those steps. Validation losses and the final weights,
gain buffer included, must agree with one device's.
"""
import contextlib
import io
import json

import numpy as np

from meshpar.cli import main

NET = '''
from dataclasses import dataclass

import meshpar  # noqa: F401
import mesh_tensorflow as mtf
import tensorflow.compat.v1 as tf


@dataclass(frozen=True)
class Config:
    filters: int = 6
    noise: float = 0.3


CONFIG = Config()


def input_shape(config):
    return (8, 8, 3)


def layout_rules(config, model_axis="model", batch_axis="batch"):
    return ";".join(([f"batch:{batch_axis}"] if batch_axis else [])
                    + ([f"conv_filters:{model_axis}"] if model_axis else []))


def build(inputs, config, mesh=None, is_training=True):
    dims = [mtf.Dimension(n, s) for n, s in zip(["batch", "h", "w", "c"], inputs.shape.as_list())]
    x = mtf.import_tf_tensor(mesh, inputs, mtf.Shape(dims))
    filters = mtf.Dimension("conv_filters", config.filters)
    h = mtf.layers.conv2d(x, filters, (3, 3), name="conv")
    if is_training:
        h += mtf.random_normal(mesh, h.shape, stddev=config.noise)
    h = mtf.dropout(mtf.relu(h), is_training, keep_prob=0.7)
    for dim in dims[1:3]:
        h = mtf.reduce_mean(h, reduced_dim=dim)
    gain = mtf.get_variable(mesh, "gain", [filters], initializer=tf.ones_initializer(),
                            trainable=False)
    logits = mtf.layers.dense(h * gain, mtf.Dimension("classes", 2),
                              reduced_dims=h.shape.dims[-1:], name="head")
    if not is_training:
        return logits, []
    mean = mtf.stop_gradient(mtf.reduce_mean(h, reduced_dim=dims[0]))
    return logits, [mtf.assign(gain, gain * 0.8 + mean * 0.2)]
'''

COMMON = ["train", "--synthetic", "--n-synthetic", "24", "--val-fraction", "0.25",
          "--batch", "4", "--steps", "6", "--lr", "0.05", "--seed", "3", "--no-progress",
          "--json"]


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    assert code == 0, err.getvalue()
    return json.loads(out.getvalue().strip().splitlines()[-1])


def _variables(model_dir):
    import tensorflow.compat.v1 as tf

    reader = tf.train.load_checkpoint(str(model_dir))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def test_noisy_own_network_in_keep_best_chunks_on_an_uneven_mesh_is_one_devices(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "noisy.py").write_text(NET)
    one = _run(COMMON + ["--model", "noisy.py", "--no-keep-best", "--model-dir", "one"])
    chunked = _run(COMMON + ["--model", "noisy.py", "--keep-best", "--checkpoint-every", "2",
                             "--speeds", "6,2,3,1", "--mesh", "batch:2;model:2",
                             "--model-dir", "uneven"])
    weights = chunked["split_weights"]
    assert len(set(weights["batch"])) > 1 and len(set(weights["model"])) > 1
    assert [step for step, _ in chunked["val_losses"]] == [2, 4, 6]
    np.testing.assert_allclose(chunked["val_losses"][-1][1], one["eval_loss"], rtol=1e-5)
    want, got = _variables(tmp_path / "one"), _variables(tmp_path / "uneven")
    assert sorted(got) == sorted(want) and int(got["global_step"]) == 6
    assert not np.allclose(want["gain"], 1.0)  # the update ran
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=0,
                                   atol=3e-5 * float(np.abs(value).max()) + 1e-9, err_msg=name)
