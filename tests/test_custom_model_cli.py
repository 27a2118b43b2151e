"""A network of one's own through the CLI: ``meshpar plan -> train -> predict``.

A tiny 3-D network (two conv3d layers with splittable filters, a dense head) is
written to a file of its own, as a user would. ``meshpar plan --model
tiny3d.py`` plans it for two devices of speeds 1.0 and 0.4 (an uneven batch
split); ``meshpar train --plan`` finds the network by the reference the plan
records and trains it 3 steps on two emulated devices; its losses and
weights must equal the same module trained through the Python API
(``from_module``, ``make_estimator``) on one device on the same batches.
``meshpar predict --model-dir`` finds it again by the run file, from another
directory, and predicts alike on one device and on an uneven model split.
Also: a module name with ``:ATTR``, docs/training.md's 2-D ``mynet.py`` on
``--synthetic`` images, and each refusal of a reference (one line, exit 2).
"""
import contextlib
import csv
import importlib.util
import io
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from meshpar.cli import main

STEPS, BATCH = 3, 4

TINY3D = '''"""A tiny 3-D network of one's own."""
from dataclasses import dataclass

import meshpar  # noqa: F401  (before mesh_tensorflow)
import mesh_tensorflow as mtf
import tensorflow.compat.v1 as tf


@dataclass(frozen=True)
class Config:
    filters: tuple = (5, 3)
    classes: int = 2
    in_channels: int = 1


CONFIG = Config()


def input_shape(config):
    return (8, 8, 8, config.in_channels)


def layout_rules(config, model_axis="model", batch_axis="batch"):
    rules = [f"batch:{batch_axis}"] if batch_axis else []
    if model_axis:
        rules += [f"conv{i}_filters:{model_axis}" for i in range(1, len(config.filters) + 1)]
    return ";".join(rules)


def build(inputs, config, mesh=None, is_training=True):
    names = ["batch", "d", "h", "w", "c"]
    x = mtf.import_tf_tensor(mesh, inputs, mtf.Shape(
        [mtf.Dimension(n, s) for n, s in zip(names, inputs.shape.as_list())]))
    init = tf.glorot_uniform_initializer()
    for i, filters in enumerate(config.filters, start=1):
        split = mtf.Dimension(f"conv{i}_filters", filters)
        x = mtf.relu(mtf.layers.conv3d(x, split, (3, 3, 3), name=f"conv{i}",
                                       filter_initializer=init))
        x = mtf.rename_dimension(x, split.name, f"conv{i}_channels")  # whole again
    for _ in range(3):
        x = mtf.reduce_mean(x, reduced_dim=x.shape.dims[1])
    logits = mtf.layers.dense(x, mtf.Dimension("classes", config.classes),
                              reduced_dims=x.shape.dims[-1:], name="head",
                              kernel_initializer=init)
    return logits, []
'''


def _run(argv):
    """``(exit code, stdout, stderr)`` of ``meshpar argv`` in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def _refused(argv, *patterns):
    """``meshpar argv`` exits 2 with one line on stderr matching each pattern."""
    code, _, err = _run(argv)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, (code, err)
    for pattern in patterns:
        assert re.search(pattern, lines[0]), (pattern, lines[0])
    return lines[0]


@pytest.fixture(scope="module")
def flow(tmp_path_factory):
    """The network's file, the phantoms, the plan and a 3-step uneven training run."""
    root = tmp_path_factory.mktemp("custom-cli")
    net = root / "nets" / "tiny3d.py"
    net.parent.mkdir()
    net.write_text(TINY3D, encoding="utf-8")
    assert _run(["data", "synth", "--out", root / "data", "--n", 12,
                 "--shape", "8,8,8"])[0] == 0
    code, out, err = _run(["plan", "--speeds", "1.0,0.4", "--model", net, "--batch", BATCH,
                           "--method", "exact", "--out", root / "plan.json"])
    assert code == 0, err
    code, out, err = _run(["train", "--data", root / "data", "--plan", root / "plan.json",
                           "--steps", STEPS, "--augment", "none", "--val-fraction", 0,
                           "--model-dir", root / "run", "--no-progress", "--json"])
    assert code == 0, err
    return dict(root=root, net=net, summary=json.loads(out.strip().splitlines()[-1]))


def test_the_plan_and_the_run_file_record_the_reference(flow):
    root, net = flow["root"], flow["net"]
    plan = json.loads((root / "plan.json").read_text())
    assert plan["model"] == "tiny3d" and plan["extra"]["model_ref"] == str(net)
    assert len(set(plan["split_sizes"]["batch"])) > 1  # uneven: 1.0 and 0.4
    run = json.loads((root / "run" / "meshpar_run.json").read_text())
    assert run["model"] == "tiny3d" and run["model_ref"] == str(net)
    assert run["input_shape"] == [8, 8, 8, 1]
    summary = flow["summary"]
    assert summary["model"] == "tiny3d" and summary["steps"] == STEPS
    assert summary["split_weights"]["batch"] == plan["split_weights"]["batch"]


def _api_training(flow, model_dir):
    """Losses and variables of the same module trained through the API, one device."""
    import tensorflow.compat.v1 as tf

    from meshpar import models
    from meshpar.data import default_transform, nifti
    from meshpar.training import estimator as E
    from meshpar.training import inputs

    loaded = importlib.util.spec_from_file_location("tiny3d_api", flow["net"])
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    spec = models.from_module(module, module.CONFIG, name="tiny3d")
    run = json.loads((flow["root"] / "run" / "meshpar_run.json").read_text())
    data = str(flow["root"] / "data")
    labels = tuple(run["labels"])
    train, _, _ = inputs.split_three_ways(nifti.read_labels(data, labels), 0.0, 0)
    source = nifti.NiftiDataset(data, (8, 8, 8), labels, subjects=train, channels=1,
                                transform=default_transform((8, 8, 8), augment=False))
    est = E.make_estimator(spec, str(model_dir), seed=0, params=run["recipe"],
                           learning_rate=run["lr"], stage_input=True)
    history = E.LossHistoryHook()
    with tf.Graph().as_default():
        est.train(inputs.train_input_fn(source, BATCH, 0, str(model_dir)), max_steps=STEPS,
                  hooks=[history])
    return history.losses, {v: est.get_variable_value(v) for v in est.get_variable_names()}


def test_the_uneven_cli_run_trains_like_one_device_through_the_api(flow, tmp_path):
    import tensorflow.compat.v1 as tf

    losses, variables = _api_training(flow, tmp_path / "api")
    assert len(losses) == STEPS
    summary = flow["summary"]
    np.testing.assert_allclose([summary["first_loss"], summary["last_loss"]],
                               [losses[0], losses[-1]], rtol=1e-5, atol=1e-6)
    trained = tf.train.load_checkpoint(str(flow["root"] / "run"))
    kernels = [n for n in variables if n.endswith("kernel")]
    assert {"conv1/kernel", "conv2/kernel", "head/kernel"} <= set(kernels)
    for name in kernels + [n for n in variables if n.endswith("bias")]:
        want = variables[name]
        np.testing.assert_allclose(trained.get_tensor(name), want, rtol=0,
                                   atol=1e-5 * float(np.abs(want).max()) + 1e-9, err_msg=name)


def _probabilities(path):
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return [r["subject_id"] for r in rows], np.array(
        [[float(r["p_NC"]), float(r["p_AD"])] for r in rows])


def test_predict_finds_the_network_by_the_run_file_from_anywhere(flow, tmp_path, monkeypatch):
    root = flow["root"]
    monkeypatch.chdir(tmp_path)  # the run file's reference is absolute
    outs = {}
    for name, mesh in (("one", []), ("uneven", ["--speeds", "0.3,0.7"])):
        outs[name] = tmp_path / f"{name}.csv"
        code, out, err = _run(["predict", "--model-dir", root / "run", "--data", root / "data",
                               "--out", outs[name]] + mesh)
        assert code == 0, err
    (ids, one), (uneven_ids, uneven) = (_probabilities(outs[n]) for n in ("one", "uneven"))
    assert len(ids) == 12 and ids == uneven_ids
    np.testing.assert_allclose(uneven, one, atol=2e-6)


def test_a_plan_is_refused_for_another_network(flow, tmp_path):
    root, net = flow["root"], flow["net"]
    same_name = tmp_path / "tiny3d.py"  # another file, the same name
    shutil.copy(net, same_name)
    argv = ["train", "--data", root / "data", "--plan", root / "plan.json", "--steps", 1,
            "--model-dir", tmp_path / "run"]
    _refused(argv + ["--model", same_name], r"^meshpar train: error: .*plan\.json: plan was "
             rf"made for model 'tiny3d' of {re.escape(str(net))}, not of "
             rf"{re.escape(str(same_name))}$")
    other = tmp_path / "other.py"
    other.write_text(TINY3D, encoding="utf-8")
    _refused(argv + ["--model", other], "plan was made for model 'tiny3d', not 'other'")
    _refused(argv + ["--model", "resattnet3d-tiny"],
             "plan was made for model 'tiny3d', not 'resattnet3d-tiny'")
    assert not (tmp_path / "run").exists()


def test_a_resume_with_another_file_of_the_same_name_is_refused(flow, tmp_path):
    root = flow["root"]
    shutil.copytree(root / "run", tmp_path / "run")
    same_name = tmp_path / "tiny3d.py"
    shutil.copy(flow["net"], same_name)
    _refused(["train", "--data", root / "data", "--model", same_name, "--steps", STEPS + 1,
              "--augment", "none", "--val-fraction", 0, "--model-dir", tmp_path / "run"],
             "holds a run with another model_ref")


def test_a_run_whose_file_is_gone_is_refused_by_predict(flow, tmp_path):
    root = flow["root"]
    net = tmp_path / "gone.py"
    net.write_text(TINY3D, encoding="utf-8")
    shutil.copytree(root / "run", tmp_path / "run")
    run_file = tmp_path / "run" / "meshpar_run.json"
    info = json.loads(run_file.read_text())
    run_file.write_text(json.dumps(dict(info, model="gone", model_ref=str(net))))
    net.write_text(TINY3D.replace("classes: int = 2", "classes: int = 2\n    name: str = "
                                  "'renamed'"), encoding="utf-8")
    argv = ["predict", "--model-dir", tmp_path / "run", "--data", root / "data",
            "--out", tmp_path / "p.csv"]
    _refused(argv, "meshpar_run.json: model 'gone' of .*gone.py: that network is now named "
             "'renamed'")
    net.unlink()
    _refused(argv, r"meshpar_run.json: model 'gone' with model_overrides \{\}: model "
             rf"'{re.escape(str(net))}': no such file")


def test_a_module_name_with_attr_and_docs_mynet_on_synthetic_images(flow, tmp_path,
                                                                    monkeypatch):
    monkeypatch.chdir(flow["net"].parent)  # a module is found in the current directory
    monkeypatch.syspath_prepend(str(flow["net"].parent))
    code, out, err = _run(["plan", "--speeds", "1.0,0.5", "--model", "tiny3d:Config",
                           "--batch", 2, "--method", "proportional", "--json"])
    assert code == 0, err
    plan = json.loads(out)
    assert plan["model"] == "tiny3d:Config" and plan["extra"]["model_ref"] == "tiny3d:Config"
    text = (Path(__file__).resolve().parent.parent / "docs" / "training.md").read_text(
        encoding="utf-8")
    section = text[text.index("\n## Your own network\n"):]
    mynet = tmp_path / "mynet.py"
    mynet.write_text(re.findall(r"```python\n(.*?)```", section, re.S)[0], encoding="utf-8")
    code, out, err = _run(["train", "--synthetic", "--model", f"{mynet}:Config",
                           "--speeds", "0.7,0.3", "--mesh", "batch:1;model:2", "--batch", 4,
                           "--steps", 2, "--n-synthetic", 12, "--model-dir", tmp_path / "m",
                           "--no-progress", "--json"])
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["model"] == "mynet:Config" and summary["steps"] == 2
    assert np.isfinite(summary["last_loss"])
    run = json.loads((tmp_path / "m" / "meshpar_run.json").read_text())
    assert run["model_ref"] == f"{mynet}:Config" and run["input_shape"] == [16, 16, 3]
    _refused(["predict", "--model-dir", tmp_path / "m", "--data", flow["root"] / "data",
              "--out", tmp_path / "p.csv"], "mynet:Config was trained on synthetic images")


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_broken_references_are_refused_in_one_line(flow, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    body = TINY3D.replace("CONFIG = Config()\n", "")
    cases = {  # --model value -> what the one line says
        "missing.py": rf"model 'missing.py': no such file {re.escape(str(tmp_path))}/missing.py",
        str(_write(tmp_path / "tiny3d.txt", TINY3D)): r"is not a Python file \(\.py\)",
        str(_write(tmp_path / "broken.py", "import no_such_module_xyz\n")):
            r"importing .*broken\.py failed: ModuleNotFoundError: No module named "
            r"'no_such_module_xyz'$",
        str(_write(tmp_path / "syntax.py", "def f(:\n")):
            r"importing .*syntax\.py failed: SyntaxError: ",
        str(_write(tmp_path / "nobuild.py", body.replace("def build(", "def _build(")
                   + "CONFIG = Config()\n")): r"'.*nobuild\.py' lacks build: a network's "
                                              r"module gives build\(",
        f"{flow['net']}:SMALL": r"the module has no attribute 'SMALL'",
        f"{flow['net']}:": r"'' after ':' is not an attribute name",
        str(_write(tmp_path / "noconfig.py", body)):
            r"the module has neither CONFIG nor config\(\); name its config: .*:ATTR",
        str(_write(tmp_path / "both.py", body + "CONFIG = Config()\n\n\ndef config():\n"
                   "    return Config()\n")): r"has both CONFIG and config\(\)",
        str(_write(tmp_path / "failing.py", body + "\n\ndef config():\n    return 1 / 0\n")):
            r"config\(\) failed: ZeroDivisionError: division by zero",
        str(_write(tmp_path / "named.py", body.replace("in_channels: int = 1", "in_channels: "
                                                       "int = 1\n    name: str = 'vgg-cifar'")
                   + "CONFIG = Config()\n")): r"its config is named 'vgg-cifar', a registered",
        "no_such_pkg_xyz.net": r"no module named 'no_such_pkg_xyz'",
        "a-b.c": r"neither a Python file \(PATH\.py\) nor a module name",
        "tiny3d": r"unknown model 'tiny3d'; choose one of .*; or a network of one's own: "
                  r"tiny3d\.py",
    }
    for value, pattern in cases.items():
        _refused(["plan", "--speeds", "1,0.5", "--model", value], "^meshpar plan: error: ",
                 pattern)
    broken = str(tmp_path / "broken.py")
    for argv in (["train", "--synthetic", "--model", broken, "--steps", 1],
                 ["profile", "--cluster", _write(tmp_path / "c.json",
                                                 '{"worker": ["localhost:1"]}'),
                  "--model", broken],
                 ["bench", "train", "--models", f"resattnet3d-tiny,{broken}"],
                 ["bench", "memory", "--models", broken],
                 ["evaluate", "--model", broken, "--out", tmp_path / "ev"]):
        line = _refused(argv, "importing .*broken.py failed: ModuleNotFoundError")
        assert line.startswith("meshpar " + " ".join(argv[:2 if argv[0] == "bench" else 1]))
    assert not (tmp_path / "ev").exists()


def test_shapes_that_cannot_be_synthesised_are_refused(tmp_path):
    small = _write(tmp_path / "small.py", TINY3D.replace("(8, 8, 8, config.in_channels)",
                                                         "(4, 4, 4, config.in_channels)"))
    flat = _write(tmp_path / "flat.py", TINY3D.replace("(8, 8, 8, config.in_channels)",
                                                       "(64, config.in_channels)"))
    argv = ["train", "--synthetic", "--steps", 1, "--model-dir", tmp_path / "m", "--model"]
    _refused(argv + [small], r"--synthetic phantoms are at least 8 voxels a side; small "
                             r"takes \(4, 4, 4\): give --data")
    _refused(argv + [flat], r"flat takes inputs of shape \(64, 1\); meshpar train reads 2-D "
                            r"images \(H, W, C\) or 3-D volumes \(D, H, W, C\)")
    _refused(argv + [f"{small}", "--channels", 2], "phantoms have one channel; small takes 2")
    _refused(argv + [tmp_path / "flat.py:Config"], "flat:Config takes inputs of shape")
    assert not os.path.exists(tmp_path / "m" / "meshpar_run.json")


def test_a_model_step_profile_records_the_reference_plan_finds(flow, tmp_path, monkeypatch):
    """``meshpar profile --cluster --model tiny3d.py`` on one in-process worker server;
    ``meshpar plan --profile`` without ``--model`` plans the network the profile names."""
    import socket

    import tensorflow.compat.v1 as tf

    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        address = f"localhost:{probe.getsockname()[1]}"
    tf.distribute.Server(tf.train.ClusterSpec({"worker": [address]}), job_name="worker",
                         task_index=0, start=True)
    cluster = _write(tmp_path / "cluster.json", json.dumps({"worker": [address]}))
    monkeypatch.chdir(tmp_path)
    code, _, err = _run(["profile", "--cluster", cluster, "--model", flow["net"], "--batch", 2,
                         "--repeats", 1, "--out", tmp_path / "profile.json"])
    assert code == 0, err
    profile = json.loads((tmp_path / "profile.json").read_text())
    assert profile["extra"]["model"] == "tiny3d"
    assert profile["extra"]["model_ref"] == str(flow["net"])
    code, out, err = _run(["plan", "--profile", tmp_path / "profile.json", "--batch", 2,
                           "--method", "even", "--json"])
    assert code == 0, err
    plan = json.loads(out)
    assert plan["model"] == "tiny3d" and plan["extra"]["model_ref"] == str(flow["net"])


def test_bench_names_its_files_after_a_reference_inside_its_work_directory(tmp_path):
    """``bench train/memory --models`` take references by their absolute path: the plan
    files and model directories named after them stay inside the work directory."""
    from meshpar.bench.train_runs import file_stem

    assert file_stem("resattnet3d-small") == "resattnet3d-small"
    stem = file_stem(f"{tmp_path}/nets/my net.py:Config.small")
    assert "/" not in stem and " " not in stem and stem.endswith("my_net.py_Config.small")
    assert os.path.dirname(os.path.join(tmp_path, f"{stem}-even.plan.json")) == str(tmp_path)
