"""``meshpar train`` on a model directory already at ``--steps`` (the same
command run twice) trains nothing; its table said ``samples/s  - (too few
steps after 1 warm-up steps)`` and its JSON ``"warmup_steps": 1``, for a run in
which no step ran. Found walking the docs as a new user (a second run in the
same directory). Both now say that no step ran."""
from types import SimpleNamespace

from meshpar.cli.train_report import run_summary
from meshpar.training.throughput import steady_state


def _summary(losses, ends):
    spec = SimpleNamespace(name="resattnet3d-tiny")
    mesh = SimpleNamespace(mesh_shape="all:1", devices=[""], split_weights={})
    return run_summary(spec, mesh, losses, len(losses), 0.0, steady_state(ends, batch=4),
                       on_cluster=False)


def test_a_run_with_no_step_says_so():
    summary, rows = _summary([], [])
    rows = dict(rows)
    assert rows["samples/s"] == "- (no step ran in this run)"
    assert summary["warmup_steps"] == 0 and summary["steady_steps"] == 0
    assert summary["samples_per_second"] is None and summary["steps"] == 0


def test_a_short_run_still_names_its_warm_up():
    summary, rows = _summary([0.7, 0.6], [1.0, 2.0])
    assert dict(rows)["samples/s"] == "- (too few steps after 1 warm-up steps)"
    assert summary["warmup_steps"] == 1
