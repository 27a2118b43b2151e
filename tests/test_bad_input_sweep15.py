"""Bad-input sweep 15: the cases that need more than one row of ``bad_input_cases.py``
(a fixture of their own, a note rather than a refusal, or a look at what was left
on disk)."""
import json

import pytest

from meshpar.cli import main

TINY = ["train", "--synthetic", "--model", "resattnet3d-tiny", "--batch", "2",
        "--val-fraction", "0", "--no-progress"]


def _replans(path, steps):
    """A ``--json`` summary of a resattnet3d-tiny batch-2 run that re-planned at ``steps``."""
    devices = [f"/job:worker/task:{t}/device:CPU:0" for t in range(2)]
    record = {"new": {"mesh_shape": "model:2", "layout": "", "devices": devices,
                      "split_weights": {"model": [1, 1]}, "dim_split_weights": {}}}
    path.write_text(json.dumps({"model": "resattnet3d-tiny", "batch": 2,
                                "replans": [dict(record, step=s) for s in steps]}) + "\n")
    return str(path)


@pytest.fixture
def dead_cluster(tmp_path):
    """Two worker addresses nobody serves (the replay is refused before they are asked)."""
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"worker": ["127.0.0.1:1", "127.0.0.1:2"]}))
    return str(path)


def test_a_replay_whose_replans_all_lie_past_the_steps_is_refused(tmp_path, dead_cluster,
                                                                  capsys):
    """Every re-plan at or past --steps: the replay would replay nothing (was accepted in
    silence, the run trained on its first mesh throughout)."""
    replans = _replans(tmp_path / "summary.json", [5, 9])
    rc = main(TINY + ["--steps", "5", "--cluster", dead_cluster, "--speeds", "1,1",
                      "--replay-replans", replans])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert (f"--replay-replans {replans}: its re-plans are at steps 5, 9, none before "
            "--steps 5, so this run would ignore it") in err


def test_a_shorter_replay_names_the_replans_it_leaves_out(tmp_path, dead_cluster, capsys):
    """Some re-plans before --steps: replayed, the later ones named in a note (the run
    then fails on the dead workers: the note came before them)."""
    replans = _replans(tmp_path / "summary.json", [3, 9])
    rc = main(TINY + ["--steps", "7", "--cluster", dead_cluster, "--speeds", "1,1",
                      "--replay-replans", replans])
    err = capsys.readouterr().err
    assert rc == 1, err  # the workers, not the replay
    assert (f"meshpar train: note: --replay-replans {replans}: 1 of its 2 re-plans (step(s) "
            "9) are at or past --steps 7 and are not replayed") in err


def test_an_empty_replay_is_still_the_static_plan(tmp_path, dead_cluster, capsys):
    """No re-plans at all (benchmarks/rebalance.py's 'static' run): neither refused nor
    noted."""
    replans = _replans(tmp_path / "summary.json", [])
    rc = main(TINY + ["--steps", "3", "--cluster", dead_cluster, "--speeds", "1,1",
                      "--replay-replans", replans])
    err = capsys.readouterr().err
    assert rc == 1 and "--replay-replans" not in err, err


@pytest.mark.parametrize("flag", ["--checkpoint-every", "--worker-times-every"])
def test_a_cadence_at_the_last_step_is_accepted(flag):
    """N == --steps still takes effect once (a checkpoint or a traced step at the end)."""
    from meshpar.cli.train import check_argv

    args = check_argv(["--synthetic", "--steps", "3", flag, "3", "--no-keep-best"])
    assert getattr(args, flag[2:].replace("-", "_")) == 3
