"""``meshpar train`` reports the split it runs, per-layer ratios included.

A plan from the exact planner or the GA splits each layer by its own ratios
(``dim_split_weights``); the axis weights are only one of them (the exact
planner's are even). The run printed and summarised the axis weights alone:
``train --plan`` of an exact plan whose layers split 3:1 and 7:1 said
``split weights {batch: [1, 1], model: [1, 1]}`` and its JSON had no trace of
the per-layer split.
"""
import json

from meshpar.cli import main
from meshpar.cli.train_report import format_weights
from meshpar.models import describe_model
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.planners import plan


def test_format_weights_names_the_per_dimension_weights():
    assert format_weights({"model": [1.0, 1.0]}, {"conv1_filters": [3.0, 0.9999999999]}) == \
        "{model: [1, 1]}, per dimension {conv1_filters: [3, 1]}"
    assert format_weights({"model": [1.0, 1.0]}, {}) == "{model: [1, 1]}"
    assert format_weights({}, {"f": [1.0, 2.0]}) == "even, per dimension {f: [1, 2]}"


def test_train_on_a_plan_with_per_layer_ratios_reports_them(tmp_path, capsys):
    planned = plan(describe_model("resattnet3d-tiny"), ClusterSpec.from_speeds([1.0, 0.3]), 2,
                   method="exact", shapes=[(1, 2)])
    assert planned.dim_split_weights
    assert len({tuple(w) for w in planned.dim_split_weights.values()}) > 1  # layers differ
    planned.save(tmp_path / "plan.json")
    assert main(["train", "--synthetic", "--plan", str(tmp_path / "plan.json"), "--steps", "1",
                 "--n-synthetic", "8", "--no-progress", "--json", "--no-keep-best",
                 "--model-dir", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["dim_split_weights"] == {k: list(v)
                                            for k, v in planned.dim_split_weights.items()}
    mesh_line = next(line for line in out.splitlines() if line.startswith("mesh "))
    for dim in planned.dim_split_weights:
        assert dim in mesh_line, mesh_line
