"""Bad-input sweep 16: the cases that need more than one row of ``bad_input_cases.py``
(every flag of a kind at once, a patched core count, a file of their own, what is
still accepted)."""
import argparse
import json

import pytest

from meshpar.cli import build_parser, main


def _number_actions():
    """``(command, flag, parser, action)`` of every ``type=int`` / ``type=float`` flag."""
    found = []

    def walk(parser, command):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, command + [name])
            elif action.type in (int, float):
                found.append((" ".join(command), action.option_strings[0], parser, action))
    walk(build_parser(), [])
    return found


NUMBER_FLAGS = _number_actions()


def _exit_code(argv) -> int:
    """``main(argv)``'s exit code, argparse's own refusals (SystemExit) too."""
    try:
        return main(argv)
    except SystemExit as stop:
        return stop.code


def test_the_walk_finds_the_number_flags():
    flags = {(command, flag) for command, flag, _, _ in NUMBER_FLAGS}
    assert {("plan", "--batch"), ("train", "--lr"), ("evaluate", "--jobs"),
            ("bench train", "--rounds"), ("worker", "--task")} <= flags


@pytest.mark.parametrize("text", ["1_0", "\uff15", "\u0665", "0x10", "1__0", "", " "])
def test_no_number_flag_reads_underscores_or_other_scripts_digits(text):
    """Python's int() and float() read '1_0' as 10 and full-width or Arabic-Indic digits
    as ASCII ones: ``--speeds 1_0``, ``--batch 1_0``, ``--steps \uff15`` were taken as
    10, 10 and 5 in silence. Every int and float flag of every command refuses them."""
    for command, flag, parser, action in NUMBER_FLAGS:
        read = parser._registry_get("type", action.type, action.type)
        with pytest.raises(ValueError):
            read(text)
            pytest.fail(f"{command} {flag} read {text!r}")


@pytest.mark.parametrize("text, value", [("8", 8), (" 8 ", 8), ("+8", 8), ("-2", -2)])
def test_int_flags_still_read_what_a_user_means(text, value):
    for command, flag, parser, action in NUMBER_FLAGS:
        if action.type is int:
            assert parser._registry_get("type", int, int)(text) == value, (command, flag)


@pytest.mark.parametrize("text, value", [("0.5", 0.5), (".5", 0.5), ("5.", 5.0), ("1e-3", 1e-3),
                                         ("+2E+1", 20.0), (" 3 ", 3.0)])
def test_float_flags_still_read_what_a_user_means(text, value):
    for command, flag, parser, action in NUMBER_FLAGS:
        if action.type is float:
            assert parser._registry_get("type", float, float)(text) == value, (command, flag)


def test_nan_and_inf_reach_each_flags_own_range_check(capsys):
    """nan and inf are not refused by the reader: the flag's own check names its range."""
    assert main(["plan", "--speeds", "1,1", "--memory-headroom", "nan"]) == 2
    assert "--memory-headroom must be in [0, 1), got nan" in capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["plan", "--speeds", "1,1", "--batch", "1_0"], "argument --batch: invalid int value: '1_0'"),
    (["plan", "--speeds", "1,1", "--method", "exact", "--time-limit", "1_0"],
     "argument --time-limit: invalid float value: '1_0'"),
    (["plan", "--speeds", "1_0,1"], "--speeds: '1_0' is not a number"),
    (["plan", "--speeds", "\uff11,1"], "--speeds: '\uff11' is not a number"),
    (["plan", "--speeds", "1,1", "--memory-mib", "6_4"], "--memory-mib: '6_4' is not a number"),
    (["plan", "--speeds", "1,1", "--mesh", "batch:1;model:\uff12"], "--mesh: bad shape"),
])
def test_the_command_line_names_the_flag_and_the_value(argv, words, capsys):
    assert _exit_code(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("meshpar plan: error: ") and words in err[0], err


# ------------------------------------------------------------------ evaluate --jobs
def test_evaluate_runs_more_jobs_than_cores_as_many_as_the_cores(tmp_path, monkeypatch,
                                                                capsys):
    """--jobs 64 on a 2-core machine started every run at once (each a TensorFlow
    process of its own), in silence. Runs give the same results at any --jobs, so
    more than the cores is not an error (the docs' `--jobs 2` on a 1-core machine):
    evaluate says so and runs as many as the cores at a time. (--folds 1 is refused
    next in line, before any run.)"""
    import meshpar.cli.evaluate as evaluate

    monkeypatch.setattr(evaluate, "usable_cores", lambda: 2, raising=False)
    seen = {}
    real_check = evaluate._check

    def check(args):
        try:
            real_check(args)
        finally:
            seen["jobs"] = args.jobs
    monkeypatch.setattr(evaluate, "_check", check)
    out = tmp_path / "acc"
    assert _exit_code(["evaluate", "--out", str(out), "--jobs", "3", "--folds", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == ("meshpar evaluate: note: --jobs 3 is more than the 2 cores this process "
                      "may use; running 2 at a time (each run is a TensorFlow process of its "
                      "own)")
    assert err[1].startswith("meshpar evaluate: error: --folds must be >= 2"), err
    assert seen["jobs"] == 2 and not out.exists()


def test_usable_cores_is_the_affinity_mask(monkeypatch):
    import meshpar.cli.evaluate as evaluate

    monkeypatch.setattr(evaluate.os, "sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)
    assert evaluate.usable_cores() == 3


# ------------------------------------------------------------ a device listed twice
DEVICE = "/job:worker/task:0/device:CPU:0"


def _plan_file(tmp_path, devices):
    from meshpar.models import describe_model
    from meshpar.planning.cluster import ClusterSpec
    from meshpar.planning.planners import plan

    path = tmp_path / "plan.json"
    plan(describe_model("resattnet3d-tiny"), ClusterSpec.from_speeds([1.0, 0.5]), 2,
         method="proportional").save(path)
    data = json.loads(path.read_text())
    data["devices"] = devices
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("second", [DEVICE, "/job:worker/replica:0/task:0/device:CPU:0",
                                    "/job:worker/task:0/device:cpu:0", DEVICE + " "])
def test_a_plan_that_lists_a_worker_device_twice_is_refused(tmp_path, second):
    """Its two slices would run on the one device, planned as two devices' speed; a
    hand-edited plan.json was taken as written."""
    from meshpar.planning.plan import Plan

    with pytest.raises(ValueError, match=r"device .* of pnum 1 is pnum 0's \(/job:worker/task:0/"
                                         r"device:CPU:0\) too; each worker device holds one"):
        Plan.load(_plan_file(tmp_path, [DEVICE, second]))


def test_train_refuses_such_a_plan_in_one_line(tmp_path, capsys):
    path = _plan_file(tmp_path, [DEVICE, DEVICE])
    rc = main(["train", "--synthetic", "--model", "resattnet3d-tiny", "--batch", "2",
               "--steps", "1", "--no-progress", "--plan", str(path),
               "--model-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "is pnum 0's" in err[0], err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("devices", [["/cpu:0", "/cpu:0"], ["", ""],
                                     [DEVICE, "/job:worker/task:0/device:GPU:0"],
                                     [DEVICE, "/job:worker/task:1/device:CPU:0"]])
def test_emulated_devices_and_two_devices_of_one_task_are_still_planned(tmp_path, devices):
    from meshpar.planning.plan import Plan

    assert list(Plan.load(_plan_file(tmp_path, devices)).devices) == devices


# ------------------------------------------------------------ a chief in the cluster
CHIEF = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"]}


@pytest.mark.parametrize("command", [["profile", "--model", "resattnet3d-tiny", "--batch", "2"],
                                     ["train", "--synthetic", "--model", "resattnet3d-tiny",
                                      "--batch", "2", "--steps", "1", "--speeds", "1,1"]])
def test_a_cluster_file_with_a_chief_is_refused_not_left_idle(tmp_path, capsys, command):
    """TF's chief is a worker that also coordinates; meshpar placed nothing on it and
    trained on the 'worker' job alone, in silence."""
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(CHIEF))
    out = ["--out", str(tmp_path / "p.json")] if command[0] == "profile" else [
        "--model-dir", str(tmp_path / "run")]
    assert main(command + ["--cluster", str(path)] + out) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{path}: job 'chief' (127.0.0.1:1) would sit idle" in err[0], err
    assert "no chief" in err[0] and not list(tmp_path.glob("p.json")) + list(
        tmp_path.glob("run"))


def test_tf_config_with_a_parameter_server_is_refused(monkeypatch):
    from meshpar.runtime.cluster_files import worker_addresses

    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["h:1"], "ps": ["h:2"]},
                                                "task": {"type": "worker", "index": 0}}))
    with pytest.raises(ValueError, match=r"^TF_CONFIG: job 'ps' \(h:2\) would sit idle: "
                                         "meshpar places every slice, variables too"):
        worker_addresses("TF_CONFIG")


def test_bench_on_an_existing_cluster_reads_the_workers_the_same_way(tmp_path):
    from meshpar.runtime.cluster_files import ExistingCluster

    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(CHIEF))
    with pytest.raises(ValueError, match="job 'chief'"):
        ExistingCluster(str(path))
    path.write_text(json.dumps({"worker": CHIEF["worker"]}))
    assert ExistingCluster(str(path)).devices == ["/job:worker/task:0/device:CPU:0",
                                                  "/job:worker/task:1/device:CPU:0"]


# ------------------------------------------------------------ a worker's task index
@pytest.mark.parametrize("index", ["\uff10", "\u0660", "0_0"])
def test_a_task_index_in_other_digits_is_refused_not_served(index):
    """TF_CONFIG's "index": "\uff10" (full-width) passed str.isdigit and int() made it
    task 0, served in silence. The address is in use here, so a worker that took the
    index would stop there, not serve."""
    import socket

    from meshpar.runtime.worker import serve

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        cluster = {"worker": ["127.0.0.1:%d" % busy.getsockname()[1]]}
        with pytest.raises(ValueError, match="the task index must be a whole number, got "):
            serve(cluster, "worker", index, announce=None)


# ------------------------------------------------ predict on a link to the training's data
def test_predict_refuses_another_fold_of_the_training_data_through_a_link(tmp_path, capsys):
    """The run file records the dataset's absolute path; a symbolic link to it (or any
    other path to the same directory) was another dataset, so another fold of the
    training's own subjects, most of them trained on, was predicted in silence. (A
    copy is still another dataset: tests/test_predict.py.)"""
    from meshpar.data import write_dataset

    data = tmp_path / "data"
    write_dataset(str(data), 6, shape=(16, 16, 16))
    link = tmp_path / "link"
    link.symlink_to(data, target_is_directory=True)
    run = tmp_path / "run"
    run.mkdir()
    (run / "meshpar_run.json").write_text(json.dumps({
        "model": "resattnet3d-tiny", "model_overrides": {}, "labels": ["NC", "AD"],
        "input_shape": [16, 16, 16, 1], "channels": 1, "batch": 2, "data": str(data),
        "split": {"folds": 3, "fold": 0, "fold_seed": 0, "test_fraction": None}}))
    out = tmp_path / "p.csv"
    for given in (link, tmp_path / "link" / ".." / "data"):
        assert main(["predict", "--model-dir", str(run), "--data", str(given), "--folds", "3",
                     "--fold", "1", "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "was trained with (--folds 3 --fold 0 --fold-seed 0, " \
            in err[0] and "run/meshpar_run.json)" in err[0], err
    assert not out.exists()


def test_make_estimator_refuses_a_tf_config_with_a_parameter_server(tmp_path, monkeypatch):
    """The library's own reading of a workers-only TF_CONFIG (it masters the workers, as
    train --cluster TF_CONFIG does) left a 'ps' job idle in silence, as the CLI did."""
    from meshpar.training.estimator import make_estimator

    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["127.0.0.1:1"],
                                                            "ps": ["127.0.0.1:2"]},
                                                "task": {"type": "worker", "index": 0}}))
    with pytest.raises(ValueError, match=r"TF_CONFIG: job 'ps' \(127.0.0.1:2\) would sit idle"):
        make_estimator("resattnet3d-tiny", str(tmp_path / "run"))


# ------------------------------------------------------ a checkpoint missing a file
def test_resuming_from_a_checkpoint_missing_a_data_file_is_refused(tmp_path, capsys):
    """A checkpoint copied or cleaned up without one of its .data shards: resuming (and
    predicting from it) was TensorFlow's 'Restoring from checkpoint failed' traceback."""
    run = tmp_path / "run"
    argv = ["train", "--synthetic", "--model", "vgg-cifar-small", "--n-synthetic", "8",
            "--batch", "4", "--val-fraction", "0", "--no-progress", "--no-keep-best",
            "--devices", "/cpu:0,/cpu:0", "--speeds", "1,1", "--model-dir", str(run)]
    assert main(argv + ["--steps", "1"]) == 0, capsys.readouterr().err
    shards = sorted(run.glob("model.ckpt-1.data-*"))
    assert [p.name for p in shards] == ["model.ckpt-1.data-00000-of-00002",
                                        "model.ckpt-1.data-00001-of-00002"]
    whole = shards[1].read_bytes()
    shards[1].unlink()
    capsys.readouterr()
    assert main(argv + ["--steps", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"meshpar train: error: checkpoint {run}/model.ckpt-1 is incomplete: "
                   "model.ckpt-1.data-00001-of-00002 is missing (1 of its 2 data files); a "
                   "resumed run starts from it: copy its files back whole, or give another "
                   "--model-dir"], err
    shards[1].write_bytes(whole[:len(whole) // 2])  # a copy cut short
    assert main(argv + ["--steps", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"meshpar train: error: checkpoint {run}/model.ckpt-1 cannot be read whole ("), err
    shards[1].write_bytes(whole)  # whole again: the run resumes
    assert main(argv + ["--steps", "2"]) == 0, capsys.readouterr().err


def test_predicting_from_a_checkpoint_missing_a_data_file_is_refused(tmp_path, capsys):
    from meshpar.data import write_dataset

    data = tmp_path / "data"
    write_dataset(str(data), 4, shape=(16, 16, 16))
    run = tmp_path / "run"
    run.mkdir()
    (run / "meshpar_run.json").write_text(json.dumps({
        "model": "resattnet3d-tiny", "model_overrides": {}, "labels": ["NC", "AD"],
        "input_shape": [16, 16, 16, 1], "channels": 1, "batch": 2}))
    (run / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-3"\n')
    for name in ("model.ckpt-3.index", "model.ckpt-3.data-00001-of-00002"):
        (run / name).write_bytes(b"")
    out = tmp_path / "p.csv"
    assert main(["predict", "--model-dir", str(run), "--data", str(data), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "model.ckpt-3.data-00000-of-00002 is missing (1 of its 2 data " \
        "files); copy its files back whole, or give --checkpoint another" in err[0], err
    assert not out.exists()


def test_a_checkpoint_is_complete_with_every_shard_of_one_save(tmp_path):
    """Shards of an older save beside a complete one do not count against it (these
    empty files then fail to be read, the check after the files')."""
    from meshpar.training.run import refuse_incomplete_checkpoint

    prefix = tmp_path / "model.ckpt-5"
    for name in ("index", "data-00000-of-00001", "data-00001-of-00002"):  # an older save
        (tmp_path / f"model.ckpt-5.{name}").write_bytes(b"")
    with pytest.raises(ValueError, match=r"model.ckpt-5 cannot be read whole \("):
        refuse_incomplete_checkpoint(str(prefix), "")
    (tmp_path / "model.ckpt-5.data-00000-of-00001").unlink()
    with pytest.raises(ValueError, match=r"model.ckpt-5.data-00000-of-00002 is missing \(1 of"):
        refuse_incomplete_checkpoint(str(prefix), "")
    (tmp_path / "model.ckpt-5.data-00001-of-00002").unlink()
    with pytest.raises(ValueError, match=r"ckpt-5.data-00000-of-00001 is missing \(1 of its 1"):
        refuse_incomplete_checkpoint(str(prefix), "")


# ------------------------------------------------------ a replay off the cluster's workers
def _replay_file(path, devices):
    record = {"new": {"mesh_shape": f"model:{len(devices)}", "layout": "", "devices": devices,
                      "split_weights": {"model": [1] * len(devices)}, "dim_split_weights": {}},
              "step": 1}
    path.write_text(json.dumps({"model": "resattnet3d-tiny", "batch": 2,
                                "replans": [record]}) + "\n")
    return str(path)


@pytest.mark.parametrize("devices, words", [
    (["/job:worker/task:0/device:CPU:0", "/job:worker/task:5/device:CPU:0"],
     "places pnum 1 on '/job:worker/task:5/device:CPU:0', which is not a worker of --cluster"),
    (["/job:worker/task:1/device:CPU:0", "/job:worker/task:1/device:CPU:0"],
     "places pnums 0 and 1 on worker task 1; each worker holds one slice"),
    (["/job:worker/task:0/device:CPU:0", ""], "places pnum 1 on '', which is not a worker"),
])
def test_a_replay_off_the_clusters_workers_is_refused_before_any_step(tmp_path, capsys,
                                                                      devices, words):
    """A re-plan to task 5 of a 2-worker cluster was refused at its step, once training
    had begun, in words that named no flag; one to a task twice replayed both slices
    on the one worker in silence. (The workers here are dead: the refusal comes first.)"""
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"worker": ["127.0.0.1:1", "127.0.0.1:2"]}))
    rc = main(["train", "--synthetic", "--model", "resattnet3d-tiny", "--batch", "2",
               "--steps", "3", "--val-fraction", "0", "--no-progress", "--cluster", str(cluster),
               "--speeds", "1,1", "--model-dir", str(tmp_path / "run"),
               "--replay-replans", _replay_file(tmp_path / "summary.json", devices)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("meshpar train: error: --replay-replans ") and words in err[0], err
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------ an output directory not writable
@pytest.fixture
def unwritable(tmp_path, monkeypatch):
    """A directory ``os.access`` says no file can be made in (as a read-only mount or
    another user's directory does; root may write anywhere, so it is simulated)."""
    import os

    shut = tmp_path / "shut"
    shut.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, *a, **k: False if os.path.abspath(
        path) == str(shut) and mode & os.W_OK else real(path, mode, *a, **k))
    return shut


@pytest.mark.parametrize("command, words", [
    (["plan", "--speeds", "1,1", "--out", "{shut}/plan.json"],
     "meshpar plan: error: {shut}/plan.json: its directory {shut} is not writable"),
    (["plan", "--speeds", "1,1", "--plot", "{shut}/plan.png"],
     "meshpar plan: error: {shut}/plan.png: its directory {shut} is not writable"),
    (["data", "synth", "--out", "{shut}/phantoms", "--n", "2", "--shape", "16,16,16"],
     "meshpar data synth: error: --out {shut}/phantoms: {shut}, where it would be made, is "
     "not writable by this user; give a path elsewhere"),
    (["train", "--synthetic", "--model", "vgg-cifar-small", "--batch", "4", "--steps", "1",
      "--no-progress", "--trace-step", "1", "--trace-out", "{shut}/trace.json"],
     "meshpar train: error: {shut}/trace.json: its directory {shut} is not writable"),
    (["evaluate", "--out", "{shut}", "--n", "2"],  # (--n 2 is refused next in line)
     "meshpar evaluate: error: --out {shut} is not writable"),
])
def test_an_output_directory_that_cannot_be_written_is_refused_before_the_work(
        unwritable, capsys, command, words):
    """It was '[Errno 30] Read-only file system' once the plan was made, the phantoms
    begun, or the whole run trained for its trace."""
    argv = [a.replace("{shut}", str(unwritable)) for a in command]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(words.replace("{shut}", str(unwritable))), err
    assert list(unwritable.iterdir()) == []


def test_predict_refuses_an_unwritable_out_before_predicting(unwritable, tmp_path, capsys):
    from meshpar.data import write_dataset

    data = tmp_path / "data"
    write_dataset(str(data), 4, shape=(16, 16, 16))
    run = tmp_path / "run"  # no checkpoint: the refusal comes before it is looked for
    run.mkdir()
    (run / "meshpar_run.json").write_text(json.dumps({
        "model": "resattnet3d-tiny", "model_overrides": {}, "labels": ["NC", "AD"],
        "input_shape": [16, 16, 16, 1], "channels": 1, "batch": 2}))
    out = unwritable / "p.csv"
    assert main(["predict", "--model-dir", str(run), "--data", str(data), "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith(
        f"meshpar predict: error: --out {out}: its directory {unwritable} is not writable by "
        "this user; give a path elsewhere")
