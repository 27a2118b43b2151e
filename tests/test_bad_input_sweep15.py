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


# --------------------------------------------------------- data synth: room to write
def test_a_dataset_bigger_than_the_free_disk_is_refused_before_writing(tmp_path, monkeypatch,
                                                                      capsys):
    """n subjects whose float32 files outgrow the free space: refused up front (a full
    disk stopped the writing with a traceback, subjects later), nothing made."""
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(2**40, 2**40 - 2**20, 2**20))
    rc = main(["data", "synth", "--out", str(tmp_path / "new" / "set"), "--n", "4",
               "--shape", "32,32,32"])
    err = capsys.readouterr().err
    assert rc == 0, err  # 4 subjects of 32^3 (128 KiB each, counted whole) fit in 1 MiB
    rc = main(["data", "synth", "--out", str(tmp_path / "other"), "--n", "10",
               "--shape", "32,32,32"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith("meshpar data synth: error: 10 subjects of 32x32x32 need about "
                               "1.25 MiB on disk (float32, 4 bytes a voxel), more than the "
                               "1 MiB free under "), lines[0]
    assert not (tmp_path / "other").exists()


def test_the_files_force_replaces_count_as_free(tmp_path, monkeypatch):
    """Rewriting a dataset with --force frees its old subject files as it goes."""
    import shutil
    from collections import namedtuple

    assert main(["data", "synth", "--out", str(tmp_path / "set"), "--n", "10",
                 "--shape", "32,32,32"]) == 0
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(2**40, 2**40, 2**19))
    assert main(["data", "synth", "--out", str(tmp_path / "set"), "--n", "10",
                 "--shape", "32,32,32", "--force", "--seed", "1"]) == 0


def test_a_subject_bigger_than_the_memory_is_refused_before_writing(tmp_path, monkeypatch,
                                                                    capsys):
    """One subject needing more memory than is available: refused up front (the
    out-of-memory killer ended the process without a word)."""
    from meshpar.data import synth_checks

    monkeypatch.setattr(synth_checks, "_available_memory", lambda: 2**30)
    rc = main(["data", "synth", "--out", str(tmp_path / "set"), "--n", "2",
               "--shape", "300,300,300"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0] == ("meshpar data synth: error: a 300x300x300 subject needs about 1.21 GiB "
                        "of memory while it is drawn (48 bytes a voxel), more than the 1 GiB "
                        "available; use a smaller shape"), lines[0]
    assert not (tmp_path / "set").exists()


def test_write_dataset_checks_the_room_too(tmp_path, monkeypatch):
    """The Python API (evaluate's phantoms go through it) refuses the same way."""
    from meshpar.data import synth_checks
    from meshpar.data.phantoms import write_dataset

    monkeypatch.setattr(synth_checks, "_available_memory", lambda: 2**20)
    with pytest.raises(ValueError, match="a 64x64x64 subject needs about 12 MiB of memory"):
        write_dataset(tmp_path / "set", 2, shape=(64, 64, 64))
    assert not (tmp_path / "set").exists()


# ------------------------------------------------------------ places that take nothing
@pytest.mark.parametrize("errno_name, text", [("ENOSPC", "No space left on device"),
                                              ("EROFS", "Read-only file system")])
def test_a_full_or_read_only_disk_is_one_line(tmp_path, monkeypatch, capsys, errno_name, text):
    """A write that the file system refuses (full, read-only: root is not stopped by a
    directory's permissions, so these are what a read-only output directory gives) was
    a traceback; now one line naming the place, exit 2."""
    import errno

    import meshpar.planning.plan as plan_module

    def refused(self, path):
        raise OSError(getattr(errno, errno_name), text, str(path))

    monkeypatch.setattr(plan_module.Plan, "save", refused)
    rc = main(["plan", "--speeds", "1,1", "--method", "even", "--out",
               str(tmp_path / "plan.json")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"meshpar plan: error: [Errno {getattr(errno, errno_name)}] "
                               f"{text}: '{tmp_path / 'plan.json'}'"), lines[0]


def test_other_os_errors_still_show_their_traceback(tmp_path, monkeypatch):
    """Only the errors of a place are one line: anything else is a bug to see whole."""
    import errno

    import meshpar.planning.plan as plan_module

    def broken(self, path):
        raise OSError(errno.EBADF, "Bad file descriptor")

    monkeypatch.setattr(plan_module.Plan, "save", broken)
    with pytest.raises(OSError, match="Bad file descriptor"):
        main(["plan", "--speeds", "1,1", "--method", "even", "--out", str(tmp_path / "x.json")])


# ------------------------------------------------- data synth --force over a dataset
def test_synth_force_keeps_a_dataset_it_did_not_write(tmp_path, capsys):
    """`data synth --out mydata --force` over a real dataset: its labels.csv and its
    subjects named like the phantoms' were replaced. Now refused, every byte kept."""
    root = tmp_path / "mydata"
    (root / "subjects").mkdir(parents=True)
    scan = root / "subjects" / "sub-0001.nii.gz"
    scan.write_bytes(b"a scan of a person")
    (root / "labels.csv").write_text("subject,label\nsubjects/sub-0001.nii.gz,AD\n")
    before = {p: p.read_bytes() for p in (scan, root / "labels.csv")}
    rc = main(["data", "synth", "--out", str(root), "--n", "2", "--shape", "8,8,8", "--force"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, lines
    assert "holds labels.csv that `meshpar data synth` did not write" in lines[0]
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(p.name for p in root.rglob("*")) == ["labels.csv", "sub-0001.nii.gz",
                                                       "subjects"]


def test_synth_force_rewrites_its_own_dataset_and_an_interrupted_one(tmp_path):
    """An earlier data synth (its phantoms.json beside labels.csv) is rewritten, and so is
    one interrupted before its labels.csv and record (subjects only)."""
    root = tmp_path / "phantoms"
    assert main(["data", "synth", "--out", str(root), "--n", "2", "--shape", "8,8,8"]) == 0
    assert main(["data", "synth", "--out", str(root), "--n", "2", "--shape", "8,8,8",
                 "--seed", "1", "--force"]) == 0
    (root / "labels.csv").unlink()
    (root / "phantoms.json").unlink()
    assert main(["data", "synth", "--out", str(root), "--n", "2", "--shape", "8,8,8",
                 "--seed", "2", "--force"]) == 0
    assert (root / "labels.csv").is_file() and (root / "phantoms.json").is_file()


def test_predictions_do_not_go_through_a_users_tmp_file(tmp_path):
    """write_predictions wrote 'OUT.tmp' and renamed it over OUT: a file the user kept
    at that name was lost."""
    from pathlib import Path

    from meshpar.data.types import Subject
    from meshpar.training.run import write_predictions

    out = tmp_path / "pred.csv"
    kept = tmp_path / "pred.csv.tmp"
    kept.write_text("mine\n")
    write_predictions(str(out), [Subject(Path("s1.nii.gz"), "AD", subject_id="s1")],
                      [[0.25, 0.75]], ["NC", "AD"])
    assert kept.read_text() == "mine\n"
    assert out.read_text().splitlines() == ["path,subject_id,label,group,p_NC,p_AD,predicted",
                                            "s1.nii.gz,s1,AD,,0.25,0.75,AD"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pred.csv", "pred.csv.tmp"]


# ------------------------------------------------ evaluate: what it writes at the end
@pytest.mark.parametrize("name, content, expect", [
    ("accuracy.json", "my own notes\n",
     "accuracy.json exists and is not a `meshpar evaluate` result; it is kept"),
    ("accuracy.png", "not an image\n", "accuracy.png exists and is not a PNG image; it is kept"),
    ("accuracy.json", None, "accuracy.json is a directory; evaluate writes its accuracy.json"),
])
def test_evaluate_refuses_to_write_its_results_over_another_file(tmp_path, capsys, name,
                                                                  content, expect):
    """accuracy.json and accuracy.png are written after every run (hours): a file of the
    user's there was replaced, a directory failed at the end. Said before any phantom."""
    out = tmp_path / "results"
    out.mkdir()
    if content is None:
        (out / name).mkdir()
    else:
        (out / name).write_text(content)
    rc = main(["evaluate", "--out", str(out), "--n", "8", "--folds", "2", "--seeds", "0"])
    lines = [l for l in capsys.readouterr().err.strip().splitlines() if l.startswith("meshpar")]
    assert rc == 2 and len(lines) == 1 and expect in lines[0], lines
    assert sorted(p.name for p in out.iterdir()) == [name]


def test_evaluate_replaces_its_own_earlier_results(tmp_path):
    """An earlier accuracy.json and accuracy.png of evaluate's are accepted (a rerun
    resumes into the same --out)."""
    import json

    from meshpar.cli.evaluate import _refuse_replacing_results

    (tmp_path / "accuracy.json").write_text(json.dumps({"protocol": {}, "tasks": {}}))
    (tmp_path / "accuracy.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 8)
    _refuse_replacing_results(str(tmp_path))


def test_predictions_of_subjects_at_non_utf8_paths(tmp_path):
    """A dataset under a directory of non-UTF-8 bytes: predict failed on the CSV after
    every subject was predicted. The CSV holds the path's own bytes and reads back."""
    import os
    from pathlib import Path

    from meshpar.data.types import Subject
    from meshpar.evaluation.report import read_predictions
    from meshpar.training.run import write_predictions

    data = os.fsdecode(os.fsencode(str(tmp_path)) + b"/ds\xff")
    out = str(tmp_path / "pred.csv")
    write_predictions(out, [Subject(Path(data) / "s1.nii.gz", "AD", subject_id="s1")],
                      [[0.25, 0.75]], ["NC", "AD"])
    assert b"/ds\xff/s1.nii.gz" in (tmp_path / "pred.csv").read_bytes()
    rows = read_predictions(out, data, "AD")
    assert [r["p"] for r in rows.values()] == [0.75]
