"""--replay-replans on a resumed run: what train_rebalancing switches to and records."""
import os

from meshpar import models
from meshpar.training import rebalance as R
from meshpar.training.mesh_spec import MeshSpec

DEVICES = ["/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"]


def _checkpoint(model_dir, step):
    """What tf.train.latest_checkpoint reads: the state file and the index."""
    with open(os.path.join(model_dir, "checkpoint"), "w") as f:
        f.write(f'model_checkpoint_path: "model.ckpt-{step}"\n')
    open(os.path.join(model_dir, f"model.ckpt-{step}.index"), "w").close()


class _Client:
    addresses = ["a:1", "b:1"]

    def down_workers(self, timeout):
        return []


def test_a_resumed_replay_switches_once_to_the_mesh_in_force_at_its_step(tmp_path):
    """Resumed at step 20 with re-plans at steps 10 and 15: the run switches to step 15's
    mesh once, at 20, and records that one switch. It had recorded (and logged) two
    re-plans at step 20, the first to step 10's mesh, which no step of the run trained on
    (a record that, replayed, names a mesh the run never used)."""
    spec = models.resolve("resattnet3d-tiny")
    start = MeshSpec("model:2", None, DEVICES, {"model": [1, 1]}, None)
    first = MeshSpec("model:2", None, DEVICES, {"model": [3, 1]}, None)
    second = MeshSpec("model:2", None, DEVICES, {"model": [1, 3]}, None)
    _checkpoint(tmp_path, 20)
    trained = []

    def build(mesh, tasks):
        class Estimator:
            def train(self, input_fn, max_steps, hooks):
                trained.append((mesh.split_weights, max_steps))
                _checkpoint(tmp_path, max_steps)
        return Estimator()

    result = R.train_rebalancing(build, None, 30, start, _Client(), spec.describe(), 4,
                                 str(tmp_path), R.RebalanceOptions(), [],
                                 lambda mesh: mesh.layout_for(spec),
                                 [(10, first), (15, second)], log=lambda line: None)
    assert trained == [({"model": [1, 3]}, 30)]
    assert [(r["step"], r["old"]["split_weights"], r["new"]["split_weights"])
            for r in result["replans"]] == [(20, {"model": [1.0, 1.0]}, {"model": [1.0, 3.0]})]
