"""The run file is written through a temporary file of its own, and ``--devices`` takes
this process's own full device name (two findings of stop 52's docs audit)."""
import json

import pytest

from meshpar.training.run import RUN_FILE, load_run_info, save_run_info

INFO = {"model": "vgg-cifar-small", "model_overrides": {}, "labels": ["0", "1"],
        "input_shape": [32, 32, 3], "channels": 3, "batch": 2}


def test_writing_the_run_file_leaves_a_users_file_beside_it_alone(tmp_path):
    kept = tmp_path / (RUN_FILE + ".tmp")
    kept.write_text("mine")
    save_run_info(str(tmp_path), INFO)
    assert kept.read_text() == "mine"
    assert load_run_info(str(tmp_path))["batch"] == 2
    assert json.loads((tmp_path / RUN_FILE).read_text())["model"] == "vgg-cifar-small"
    assert sorted(p.name for p in tmp_path.iterdir()) == [RUN_FILE, RUN_FILE + ".tmp"]


@pytest.mark.parametrize("name", ["/job:localhost/replica:0/task:0/device:CPU:0",
                                  "/job:localhost/device:CPU:0", "/cpu:0", ""])
def test_this_processs_own_device_names_are_local(name):
    from meshpar.cli.train_options import check_local_devices

    check_local_devices([name, name])


@pytest.mark.parametrize("name", ["/job:worker/task:0/device:CPU:0",
                                  "/job:localhost/task:1/device:CPU:0"])
def test_another_tasks_device_is_refused(name):
    from meshpar.cli.train_options import check_local_devices

    with pytest.raises(ValueError, match="names a worker task's device"):
        check_local_devices([name])


def test_train_places_slices_on_the_full_local_name(tmp_path, capsys):
    from meshpar.cli import main

    full = "/job:localhost/replica:0/task:0/device:CPU:0"
    assert main(["train", "--synthetic", "--model", "vgg-cifar-small", "--n-synthetic", "8",
                 "--steps", "1", "--batch", "2", "--val-fraction", "0", "--no-progress",
                 "--speeds", "0.6,0.4", "--devices", f"{full},{full}",
                 "--model-dir", str(tmp_path / "m")]) == 0
    assert "mesh model:2" in capsys.readouterr().out
