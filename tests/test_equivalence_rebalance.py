"""A re-plan mid-training changes no math beyond float32 rounding.

Two real TF gRPC workers (LocalCluster). `meshpar train --cluster --replay-replans`
switches the mesh at steps 2 and 4 (batch:2 -> model:2 with the workers in the
other order and weights 3:1 -> batch:2 with weights 1:3), each switch a new segment
that restores the checkpoint and resumes the augmented data stream. It must end
where a run without re-plans ends, and where one local device ends, to rounding.
"""
import json

import numpy as np

from meshpar.cli import main
from meshpar.runtime.local_cluster import LocalCluster

STEPS = 6
COMMON = ["train", "--synthetic", "--model", "resattnet3d-tiny", "--n-synthetic", "12",
          "--val-fraction", "0", "--no-progress", "--batch", "4", "--seed", "3", "--augment",
          "--steps", str(STEPS), "--json"]


def _worker(task):
    return f"/job:worker/task:{task}/device:CPU:0"


def _checkpoint(model_dir):
    import tensorflow.compat.v1 as tf

    reader = tf.train.load_checkpoint(str(model_dir))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def test_replanned_run_ends_where_one_device_and_an_unplanned_run_end(tmp_path, capsys):
    replans = {"model": "resattnet3d-tiny", "batch": 4, "replans": [
        {"step": 2, "new": {"mesh_shape": "model:2", "layout": None,
                            "devices": [_worker(1), _worker(0)],
                            "split_weights": {"model": [3.0, 1.0]}, "dim_split_weights": {}}},
        {"step": 4, "new": {"mesh_shape": "batch:2", "layout": None,
                            "devices": [_worker(0), _worker(1)],
                            "split_weights": {"batch": [1.0, 3.0]}, "dim_split_weights": {}}},
    ]}
    (tmp_path / "replans.json").write_text(json.dumps(replans))
    with LocalCluster([1.0, 1.0], pin=False) as cluster:
        cluster_file = tmp_path / "cluster.json"
        cluster_file.write_text(json.dumps({"worker": cluster.addresses}))
        on_cluster = COMMON + ["--cluster", str(cluster_file), "--speeds", "1,1",
                               "--mesh", "batch:2"]
        assert main(on_cluster + ["--model-dir", str(tmp_path / "plain")]) == 0
        assert main(on_cluster + ["--model-dir", str(tmp_path / "replanned"),
                                  "--replay-replans", str(tmp_path / "replans.json")]) == 0
        summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["step"] for r in summary["replans"]] == [2, 4]
    assert summary["final_mesh"]["split_weights"] == {"batch": [1.0, 3.0]}
    assert main(COMMON + ["--model-dir", str(tmp_path / "one")]) == 0
    want = _checkpoint(tmp_path / "one")
    for run in ("plain", "replanned"):
        got = _checkpoint(tmp_path / run)
        assert sorted(got) == sorted(want), run
        assert int(got["global_step"]) == STEPS, run
        for name, value in want.items():
            scale = float(np.abs(value).max())  # Adam's moments are tiny
            np.testing.assert_allclose(got[name], value, rtol=0, atol=3e-5 * scale + 1e-9,
                                       err_msg=f"{run}: {name}")
