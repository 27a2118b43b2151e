"""The re-balancing log line names a plan's per-dimension split, not only the axes'.

A re-plan switched to a GA or exact plan whose per-layer ratios
(``dim_split_weights``) override the axis weights of their dimensions, but
the line ``re-plan at step ...`` showed only the axis weights (the exact
planner's are even: ``[model=0.50/0.50]`` for layers split 3:1). The train
summary gained them in c0536f2; the log line now says them too.
"""
from meshpar.training.mesh_spec import MeshSpec
from meshpar.training.rebalance import _Run

DEVICES = [f"/job:worker/task:{i}/device:CPU:0" for i in range(2)]


def test_replan_log_line_shows_the_per_dimension_weights():
    old = MeshSpec("model:2", "conv1_filters:model;conv2_filters:model", DEVICES,
                   {"model": [1.0, 1.0]}, {})
    new = MeshSpec("model:2", "conv1_filters:model;conv2_filters:model", DEVICES,
                   {"model": [1.0, 1.0]},
                   {"conv1_filters": [3.0, 1.0], "conv2_filters": [7.0, 1.0]})
    lines = []
    run = _Run.__new__(_Run)
    run.mesh, run.layout_of, run.log = old, lambda mesh: mesh.layout, lines.append
    run.replans, run.lost = [], []
    run.pending = {"step": 5, "reason": "drift", "mesh": new, "work": {0: 1.0, 1: 1.0},
                   "speeds": {0: 1.0, 1: 0.2}, "predicted_gain": 0.5, "back": [], "lost": [],
                   "plan_predicted_step_seconds": 1.0}
    run.apply(6)
    assert lines == ["re-plan at step 6 (drift): model:2 on tasks 0,1 [model=0.50/0.50] -> "
                     "model:2 on tasks 0,1 [model=0.50/0.50; per dimension "
                     "conv1_filters=0.75/0.25;conv2_filters=0.88/0.12], predicted gain +50%"]
    assert run.replans[0]["new"]["dim_split_weights"] == new.dim_split_weights
