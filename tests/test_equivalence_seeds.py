"""`meshpar train` seeds: one seed, one result; another seed, another; no mesh in it.

Local runs (emulated devices) of the tiny ResAttNet on synthetic phantoms with
augmentation, so the NIfTI reader's shuffled order and the random flips are in the
path: two runs with one seed end with bit-identical checkpoints, another seed
ends elsewhere, and the same seed on uneven meshes (from scratch, and resumed
halfway from the one-device run's checkpoint) gives the one-device weights to float32
rounding: the data order and the augmentation of a seed do not depend on the mesh.
"""
import glob
import json
import os
import shutil

import numpy as np
import pytest

from meshpar.cli import main

STEPS = 4
COMMON = ["train", "--synthetic", "--model", "resattnet3d-tiny", "--n-synthetic", "12",
          "--val-fraction", "0", "--no-keep-best", "--no-progress", "--batch", "4",
          "--augment", "--steps", str(STEPS), "--checkpoint-every", str(STEPS // 2), "--json"]


def _train(model_dir, capsys, seed=3, mesh=()):
    assert main(COMMON + ["--seed", str(seed), "--model-dir", str(model_dir), *mesh]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _checkpoint(model_dir):
    import tensorflow.compat.v1 as tf

    reader = tf.train.load_checkpoint(str(model_dir))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


@pytest.fixture(scope="module")
def one_device(tmp_path_factory):
    """The seed-3 run on one device: its directory and final variables."""
    model_dir = tmp_path_factory.mktemp("seeds") / "one"
    assert main(COMMON + ["--seed", "3", "--model-dir", str(model_dir)]) == 0
    return model_dir, _checkpoint(model_dir)


def _assert_close(got, want, what):
    assert sorted(got) == sorted(want), what
    assert int(got["global_step"]) == int(want["global_step"]) == STEPS
    for name, value in want.items():
        scale = float(np.abs(value).max())  # Adam's moments are tiny
        np.testing.assert_allclose(got[name], value, rtol=0, atol=3e-5 * scale + 1e-9,
                                   err_msg=f"{what}: {name}")


def test_one_seed_is_bit_identical_and_another_seed_is_not(one_device, tmp_path, capsys):
    _, first = one_device
    again = _train(tmp_path / "again", capsys)
    second = _checkpoint(tmp_path / "again")
    assert sorted(first) == sorted(second)
    for name in first:
        np.testing.assert_array_equal(first[name], second[name], err_msg=name)
    other = _train(tmp_path / "other", capsys, seed=4)
    assert other["first_loss"] != again["first_loss"]
    moved = _checkpoint(tmp_path / "other")
    assert any(not np.array_equal(first[n], moved[n]) for n in first if n != "global_step")


def test_the_same_seed_on_uneven_meshes_trains_on_the_same_data(one_device, tmp_path, capsys):
    one_dir, want = one_device
    _train(tmp_path / "batch", capsys, mesh=["--speeds", "1,3", "--mesh", "batch:2"])
    _assert_close(_checkpoint(tmp_path / "batch"), want, "batch:2 [1, 3]")
    # resumed at the halfway checkpoint on another mesh: the stream goes on from there
    resumed = tmp_path / "resumed"
    shutil.copytree(one_dir, resumed)
    for path in glob.glob(os.path.join(resumed, f"model.ckpt-{STEPS}.*")):
        os.unlink(path)
    import tensorflow.compat.v1 as tf

    tf.train.update_checkpoint_state(str(resumed), f"model.ckpt-{STEPS // 2}")
    _train(resumed, capsys, mesh=["--speeds", "3,1,1,2", "--mesh", "batch:2;model:2"])
    _assert_close(_checkpoint(resumed), want, "resumed on batch:2;model:2")
