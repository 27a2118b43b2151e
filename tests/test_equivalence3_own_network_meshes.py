"""Regression guards (they pass on the code as found) for two promises the docs make
of this session's features, on inputs the other tests do not try:

* docs/training.md "Your own network": a network of one's own (``--model
  PATH.py:ATTR``, ATTR dotted) trains on any mesh the planner or ``--mesh`` gives,
  model-first axis orders and ``batch:R;model:M`` hybrids included, with a layer
  too narrow to split left whole by the plan, to the one-device result;
* README "resume with another --batch": a run (docs/training.md's 2-D ``mynet.py``
  on synthetic images) resumed across three batch changes, one of them with
  ``--keep-best``, on an uneven mesh records where each batch began in the stream and ends where the
  same resumes on one device end.
"""
import contextlib
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

from meshpar.cli import main

# the network of tests/test_custom_model_cli.py, its sizes chosen by a dotted ATTR
SIZES = '''

class Sizes:
    narrow = Config(filters=(2, 5))   # conv1 cannot be cut in three

    @classmethod
    def wide(cls):
        return Config(filters=(4, 6))
'''


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    assert code == 0, err.getvalue()
    return out.getvalue()


def _kernels(model_dir):
    import tensorflow.compat.v1 as tf

    reader = tf.train.load_checkpoint(str(model_dir))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name.endswith(("kernel", "bias"))}


def _same(got, want):
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=0,
                                   atol=1e-6 * float(np.abs(value).max()) + 1e-9, err_msg=name)


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    from test_custom_model_cli import TINY3D

    path = tmp_path_factory.mktemp("own") / "sized.py"
    path.write_text(TINY3D + SIZES, encoding="utf-8")
    return path


TRAIN = ["train", "--synthetic", "--n-synthetic", 12, "--steps", 2, "--batch", 6,
         "--augment", "none", "--val-fraction", 0, "--no-progress", "--json",
         "--lr-warmup-steps", 0]


@pytest.mark.parametrize("attr,meshes", [
    ("Sizes.wide", [("model:3;batch:1", "1,0.5,0.3"), ("model:2;batch:2", "1,0.5,0.8,0.3")]),
    ("Sizes.narrow", [("batch:2;model:2", "1,0.5,0.8,0.3")]),
])
def test_own_network_on_model_first_and_hybrid_meshes_trains_like_one_device(
        net, tmp_path, attr, meshes):
    model = f"{net}:{attr}"
    _run(TRAIN + ["--model", model, "--model-dir", tmp_path / "one"])
    want = _kernels(tmp_path / "one")
    for i, (mesh, speeds) in enumerate(meshes):
        summary = json.loads(_run(TRAIN + ["--model", model, "--mesh", mesh, "--speeds", speeds,
                                           "--model-dir", tmp_path / f"m{i}"]).splitlines()[-1])
        assert summary["model"] == f"sized:{attr}"
        _same(_kernels(tmp_path / f"m{i}"), want)


def test_a_plan_that_leaves_a_narrow_layer_whole_trains_like_one_device(net, tmp_path):
    model = f"{net}:Sizes.narrow"
    plan = json.loads(_run(["plan", "--speeds", "1,0.5,0.3", "--model", model, "--batch", 6,
                            "--method", "exact", "--mesh", "model:3", "--all-devices",
                            "--json"]))
    assert "conv1_filters" not in dict(plan["layout"])  # 2 filters over 3 devices
    assert len(plan["split_sizes"]["conv2_filters"]) == 3
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    _run(TRAIN + ["--model", model, "--model-dir", tmp_path / "one"])
    _run(TRAIN + ["--plan", tmp_path / "plan.json", "--model-dir", tmp_path / "planned"])
    _same(_kernels(tmp_path / "planned"), _kernels(tmp_path / "one"))


def _docs_mynet(path):
    """docs/training.md's 2-D ``mynet.py`` (a network of one's own on (H, W, C) images)."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "training.md").read_text(
        encoding="utf-8")
    section = text[text.index("\n## Your own network\n"):]
    path.write_text(re.findall(r"```python\n(.*?)```", section, re.S)[0], encoding="utf-8")
    return path


def test_resumes_across_three_batch_changes_on_an_uneven_mesh_end_like_one_device(tmp_path):
    mynet = _docs_mynet(tmp_path / "mynet.py")
    base = ["train", "--synthetic", "--model", mynet, "--n-synthetic", 20,
            "--val-fraction", 0.2, "--no-progress", "--json", "--lr-schedule", "constant",
            "--lr-warmup-steps", 0]
    chunks = [(2, 4, []), (4, 3, ["--keep-best", "--checkpoint-every", 1]), (5, 6, []),
              (7, 3, [])]
    for name, mesh in (("one", []), ("uneven", ["--speeds", "0.7,0.2,0.4", "--mesh",
                                                "batch:3"])):
        for steps, batch, extra in chunks:
            _run(base + mesh + extra + ["--steps", steps, "--batch", batch,
                                        "--model-dir", tmp_path / name])
        info = json.loads((tmp_path / name / "meshpar_run.json").read_text())
        assert info["stream"] == [[0, 0, 4], [2, 8, 3], [4, 14, 6], [5, 20, 3]]
    _same(_kernels(tmp_path / "uneven"), _kernels(tmp_path / "one"))
