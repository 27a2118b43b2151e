"""``train``/``predict --cluster TF_CONFIG`` run on the workers TF_CONFIG lists.

The README documents TF_CONFIG as the other way to name the workers, with the
layout ``meshpar worker`` reads (``{"cluster": {"worker": [...]}, "task":
...}``). tf.estimator's RunConfig read the same variable as a between-graph job
of this process and refused it: 'If "cluster" is set in TF_CONFIG, it must have
one "chief" node.' (exit 2), so no run on a TF_CONFIG cluster could start.
"""
import json

import pytest

from meshpar.cli import main
from meshpar.data import write_dataset
from meshpar.runtime.local_cluster import LocalCluster


@pytest.fixture(scope="module")
def workers():
    with LocalCluster([1.0, 1.0], throttle="none") as cluster:
        yield cluster.addresses


def test_train_and_predict_on_a_tf_config_cluster(workers, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": workers},
                                                "task": {"type": "worker", "index": 0}}))
    run, data = tmp_path / "run", tmp_path / "data"
    write_dataset(str(data), 6, shape=(16, 16, 16))
    assert main(["train", "--data", str(data), "--model", "resattnet3d-tiny", "--cluster",
                 "TF_CONFIG", "--speeds", "0.5,1", "--mesh", "batch:2", "--batch", "3",
                 "--steps", "1", "--val-fraction", "0", "--no-progress", "--json",
                 "--no-keep-best", "--model-dir", str(run)]) == 0, capsys.readouterr().err
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["devices"] == ["/job:worker/task:0/device:CPU:0",
                                  "/job:worker/task:1/device:CPU:0"]
    assert summary["steps"] == 1
    assert main(["predict", "--model-dir", str(run), "--data", str(data), "--cluster",
                 "TF_CONFIG", "--speeds", "1,0.5", "--mesh", "batch:2",
                 "--out", str(tmp_path / "p.csv")]) == 0, capsys.readouterr().err
    assert len((tmp_path / "p.csv").read_text().strip().splitlines()) == 1 + 6


def test_make_estimator_masters_a_workers_only_tf_config(workers, tmp_path, monkeypatch):
    """The library path: make_estimator in a process whose TF_CONFIG lists only
    the workers failed in RunConfig ('must have one "chief" node'); it now
    masters the workers itself, as ``train --cluster TF_CONFIG`` does."""
    from meshpar.data import make_tf_dataset
    from meshpar.training.estimator import make_estimator

    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": workers},
                                                "task": {"type": "worker", "index": 0}}))
    data = tmp_path / "data"
    write_dataset(str(data), 4, shape=(16, 16, 16))
    devices = [f"/job:worker/task:{i}/device:CPU:0" for i in range(2)]
    estimator = make_estimator("resattnet3d-tiny", str(tmp_path / "run"), mesh_shape="batch:2",
                               devices=devices, split_weights={"batch": [1, 2]})
    assert estimator.config.master.startswith("grpc://")
    assert estimator.config.cluster_spec.as_dict() == {}  # no between-graph job of its own
    estimator.train(lambda: make_tf_dataset(str(data), (16, 16, 16), batch_size=3,
                                            repeat=True, drop_remainder=True), max_steps=1)
    assert estimator.get_variable_value("global_step") == 1
