"""Bad-input sweep 17: the cases that need more than one row of ``bad_input_cases.py``
(two commands that must agree, a run file edited between commands, what is still
accepted)."""
import json

import pytest

from meshpar.cli import main


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


# --------------------------------------------------------- --mesh all:N, plan and train
def test_plan_and_train_read_all_n_as_model_n(capsys):
    """``plan --mesh all:3`` planned the model axis, while ``train --mesh all:3`` was
    refused as 'splits nothing' (the models' layout puts the filters on a one-axis
    mesh of any name). Both now read all:N as model:N."""
    from meshpar.cli.train_options import mesh_from_speeds

    assert mesh_from_speeds([0.9, 0.3, 0.6], "all:3") == mesh_from_speeds([0.9, 0.3, 0.6],
                                                                           "model:3")
    assert main(["plan", "--speeds", "1,1,1", "--mesh", "all:3", "--method", "even",
                 "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert dict(map(tuple, plan["mesh_shape"])) == {"batch": 1, "model": 3}


@pytest.mark.parametrize("mesh", ["foo:2", "all:1;model:2", "foo:1;model:2"])
def test_plan_and_train_refuse_another_axis_alike(mesh, capsys):
    lines = []
    for argv in (["plan", "--speeds", "1,1", "--method", "even"],
                 ["train", "--synthetic", "--steps", "1", "--speeds", "1,1"]):
        assert main(argv + ["--mesh", mesh]) == 2
        lines.append(_error_line(capsys).split(": error: ", 1)[1])
    assert lines[0] == lines[1]
    assert "the mesh's axes are batch (the samples) and model (the filters)" in lines[0]


# ------------------------------------------------- a refused resume names what resumes it
def _run_file(model_dir, **fields):
    model_dir.mkdir()
    info = {"format": 1, "model": "resattnet3d-tiny", "model_overrides": {}, "seed": 0,
            "labels": ["NC", "AD"], "input_shape": [16, 16, 16, 1], "channels": 1,
            "val_fraction": 0.25, "optimizer": "adam",
            "split": {"folds": None, "fold": None, "fold_seed": 0, "test_fraction": None}}
    (model_dir / "meshpar_run.json").write_text(json.dumps({**info, **fields}))
    return str(model_dir)


@pytest.mark.parametrize("fields, flags", [
    (dict(seed=5), "--seed 5"),
    (dict(val_fraction=0.3), "--val-fraction 0.3"),
    (dict(optimizer="sgd"), "--optimizer sgd"),
    (dict(model="vgg-cifar-small"), "--model vgg-cifar-small"),
    (dict(model_overrides={"in_channels": 2}), "--channels 2"),
    (dict(split={"folds": 4, "fold": 1, "fold_seed": 3, "test_fraction": None}),
     "--folds 4 --fold 1 --fold-seed 3"),
    (dict(seed=5, optimizer="sgd"), "--seed 5 --optimizer sgd"),
])
def test_a_refused_resume_says_which_flags_resume_it(tmp_path, capsys, fields, flags):
    """Resuming without --seed a run made with --seed 5 was refused as 'holds a run
    with another seed (seed=5); use a new --model-dir', not saying that --seed 5
    resumes it; so for every setting a resume compares."""
    model_dir = _run_file(tmp_path / "m", **fields)
    argv = ["train", "--synthetic", "--model", "resattnet3d-tiny", "--batch", "2", "--steps",
            "2", "--no-progress", "--model-dir", model_dir]
    assert main(argv) == 2
    assert f"; resume it with {flags}, or use a new --model-dir" in _error_line(capsys)


def test_a_resume_refused_for_the_data_says_so(tmp_path):
    from meshpar.training.run import check_run_info

    model_dir = _run_file(tmp_path / "m", seed=5)
    recorded = json.loads(open(f"{model_dir}/meshpar_run.json").read())
    with pytest.raises(ValueError, match=r"\(input_shape=\[16, 16, 16, 1\], seed=5\); resume "
                                         r"it with --seed 5 and the data it trained on, or use"):
        check_run_info(model_dir, {**recorded, "input_shape": [8, 8, 8, 1], "seed": 0})
    with pytest.raises(ValueError, match=r"resume it with the data it trained on, or use"):
        check_run_info(model_dir, {**recorded, "input_shape": [8, 8, 8, 1]})
    with pytest.raises(ValueError, match=r"resume it with --labels NC,AD, or use"):
        check_run_info(model_dir, {**recorded, "labels": ["AD", "NC"]})


# ------------------------------------------------------ notes: meshpar <cmd>: note: ...
def test_plan_notes_a_replaced_plan_under_its_own_name(tmp_path, capsys):
    """Notes said 'meshpar: note:' while others (and every error) said 'meshpar train:
    note:'; each note now names its command, as the errors do."""
    out = tmp_path / "plan.json"
    argv = ["plan", "--speeds", "1,1", "--method", "even", "--out", str(out)]
    assert main(argv) == 0 and main(argv) == 0
    assert capsys.readouterr().err.strip() == f"meshpar plan: note: replaced the earlier {out}"


@pytest.mark.parametrize("command", ["train", "predict"])
def test_an_infeasible_plan_is_noted_under_the_command(tmp_path, capsys, command):
    import dataclasses

    from meshpar.cli import build_parser
    from meshpar.cli.train_options import mesh_arguments
    from meshpar.models import describe_model, get
    from meshpar.planning.planners import plan

    path = tmp_path / "plan.json"
    dataclasses.replace(plan(describe_model("vgg-cifar-small"), [0.9, 0.3], 4,
                             method="proportional"), feasible=False).save(path)
    rest = (["--synthetic", "--model", "vgg-cifar-small"] if command == "train" else
            ["--model-dir", str(tmp_path), "--data", str(tmp_path), "--out", "p.csv"])
    args = build_parser().parse_args([command, *rest, "--plan", str(path)])
    mesh_arguments(args, get("vgg-cifar-small"))
    assert capsys.readouterr().err.startswith(f"meshpar {command}: note: {path} does not fit")


def test_a_schedule_change_is_noted_under_train(tmp_path):
    from meshpar.training.run import schedule_change_note

    model_dir = _run_file(tmp_path / "m", recipe={"lr_schedule": "cosine", "warmup_steps": 0,
                                                  "total_steps": 2})
    note = schedule_change_note(model_dir, {"lr_schedule": "cosine", "warmup_steps": 0,
                                            "total_steps": 4}, 2)
    assert note.startswith("meshpar train: note: the learning-rate schedule now runs over 4")


def test_an_interrupted_command_says_which(monkeypatch, capsys):
    import meshpar.cli.plan

    def interrupted(args):
        raise KeyboardInterrupt
    monkeypatch.setattr(meshpar.cli.plan, "run", interrupted)
    assert main(["plan", "--speeds", "1,1"]) == 130
    assert capsys.readouterr().err.strip() == "meshpar plan: interrupted"


# ------------------------------------------------------ switches of the Python API
@pytest.mark.parametrize("value", ["false", "no", 0, 1, None])
def test_upstream_and_stage_input_are_true_or_false(value):
    """``MeshSpec(upstream="false")`` (and build_model_fn's / make_estimator's
    ``upstream=``, ``stage_input=``) read any truthy value as True: the string
    'false' lowered with Mesh-TF's even impl in silence."""
    from meshpar.training.estimator import build_model_fn
    from meshpar.training.mesh_spec import MeshSpec

    with pytest.raises(TypeError, match=f"upstream must be True or False, got {value!r}"):
        MeshSpec("model:2", upstream=value)
    for name in ("upstream", "stage_input"):
        with pytest.raises(TypeError, match=f"{name} must be True or False, got {value!r}"):
            build_model_fn("resattnet3d-tiny", mesh_shape="model:2", **{name: value})


def test_numpy_bools_are_still_switches():
    import numpy as np

    from meshpar.training.mesh_spec import MeshSpec

    assert MeshSpec("model:2", upstream=np.bool_(True)).upstream is True
    assert MeshSpec("model:2", upstream=False).upstream is False


@pytest.mark.parametrize("model_dir", [5, ["runs"], 1.5])
def test_make_estimator_names_a_model_dir_that_is_no_path(model_dir):
    from meshpar.training.estimator import make_estimator

    with pytest.raises(TypeError, match=r"model_dir must be a path \(str or os.PathLike\), "
                                        f"got {model_dir!r}".replace("[", r"\[")):
        make_estimator("resattnet3d-tiny", model_dir)


# ------------------------------------------------------------------ the data loaders
@pytest.fixture(scope="module")
def phantoms(tmp_path_factory):
    from meshpar.data import write_dataset

    root = tmp_path_factory.mktemp("phantoms") / "ds"
    write_dataset(root, 8, shape=(8, 8, 8), seed=1)
    return root


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(skip_bad="no"), TypeError, "skip_bad must be True or False, got 'no'"),
    (dict(check_headers="no"), TypeError, "check_headers must be True or False"),
    (dict(cache_bytes=1.5), ValueError, "cache_bytes must be a whole number >= 0, got 1.5"),
    (dict(cache_bytes=float("nan")), ValueError, "cache_bytes must be a whole number >= 0"),
    (dict(subjects="abc"), TypeError, "subjects must be Subjects"),
])
def test_nifti_dataset_names_a_wrong_argument(phantoms, kwargs, error, words):
    """skip_bad='no' skipped bad subjects in silence (a truthy string), cache_bytes 1.5
    was cut to 1, NaN said 'cannot convert float NaN to integer', subjects='abc' ended
    in "'str' object has no attribute 'label'"."""
    from meshpar.data import NiftiDataset

    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        NiftiDataset(phantoms, (8, 8, 8), **kwargs)


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(shuffle="no"), TypeError, "shuffle must be True or False, got 'no'"),
    (dict(augment="no"), TypeError, "augment must be True or False, got 'no'"),
    (dict(drop_remainder="no"), TypeError, "drop_remainder must be True or False"),
    (dict(skip_bad="no"), TypeError, "skip_bad must be True or False"),
    (dict(seed="1"), ValueError, "seed must be an integer >= 0, got '1'"),
    (dict(seed=1.5), ValueError, "seed must be an integer >= 0, got 1.5"),
    (dict(seed=-1), ValueError, "seed must be an integer >= 0, got -1"),
])
def test_make_tf_dataset_names_a_wrong_argument(phantoms, kwargs, error, words):
    """shuffle='no' shuffled and augment='no' augmented in silence; seed '1' and 1.5 were
    read as 1, -1 as 2**32 - 1; drop_remainder='no' was TF's 'Cannot convert'."""
    from meshpar.data import make_tf_dataset

    with pytest.raises(error, match=words):
        make_tf_dataset(phantoms, (8, 8, 8), **kwargs)


def test_the_loaders_still_take_numpy_values(phantoms):
    import numpy as np

    from meshpar.data import NiftiDataset

    source = NiftiDataset(phantoms, (8, 8, 8), skip_bad=np.bool_(False),
                          cache_bytes=np.int64(0))
    assert source.to_tf(np.int64(2), shuffle=np.bool_(True), seed=np.int64(3)) is not None


@pytest.mark.parametrize("call, error, words", [
    (lambda s, c: c.split_subjects(s, "0.2"), TypeError, "val_fraction must be a number"),
    (lambda s, c: c.split_subjects(s, 0.2, seed=1.5), TypeError,
     r"seed must be an integer >= 0, got 1.5"),
    (lambda s, c: c.split_subjects(s, 0.2, stratify="label"), TypeError,
     r"stratify must be field names, e.g. \('label', 'group'\), got 'label'"),
    (lambda s, c: c.person_folds(s, 2, stratify=("lable",)), ValueError,
     r"stratify field 'lable': subject .* has no such field"),
    (lambda s, c: c.fold_split(s, 2, True), ValueError,
     r"fold must be an integer in \[0, 2\), got True"),
    (lambda s, c: c.fold_split(s, 2, 0.5), ValueError, r"fold must be an integer in \[0, 2\)"),
    (lambda s, c: c.fold_split(s, "2", 1), ValueError, r"k must be an integer >= 2, got '2'"),
])
def test_the_cohort_splits_name_a_wrong_argument(phantoms, call, error, words):
    """fold_split(subjects, 2, True) held out fold 1 in silence; a string stratify was
    read letter by letter ("'Subject' object has no attribute 'l'"), seed 1.5 reached
    numpy's SeedSequence, a string k or fold Python's '<' between int and str."""
    from meshpar.data import cohorts, read_labels

    subjects = read_labels(phantoms, ("NC", "AD"))
    with pytest.raises(error, match=words):
        call(subjects, cohorts)


def test_write_dataset_force_no_keeps_a_saved_dataset(phantoms):
    """force='no' is a truthy string: write_dataset wrote over the non-empty directory."""
    from meshpar.data import write_dataset

    before = (phantoms / "labels.csv").read_bytes()
    with pytest.raises(TypeError, match="force must be True or False, got 'no'"):
        write_dataset(phantoms, 4, shape=(8, 8, 8), seed=2, force="no")
    assert (phantoms / "labels.csv").read_bytes() == before


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(voxel_mm="1"), ValueError, "voxel_mm must be a voxel size in mm or three of them, "
                                     "got '1'"),
    (dict(voxel_mm=[1.0, 1.0]), ValueError, "voxel_mm must be a voxel size in mm or three"),
    (dict(phantom_fn="x"), TypeError, "phantom_fn must be callable"),
    (dict(fractions="0.5,0.5"), ValueError, "fractions must be numbers, one per label, got "
                                            "'0.5,0.5'"),
])
def test_write_dataset_names_a_wrong_argument(tmp_path, kwargs, error, words):
    """voxel_mm='1' was read as 1 mm, [1, 1] ended in numpy's broadcast error, phantom_fn
    'x' in "'str' object is not callable" and a string of fractions was listed letter by
    letter."""
    from meshpar.data import write_dataset

    with pytest.raises(error, match=words):
        write_dataset(tmp_path / "ds", 2, shape=(8, 8, 8), **kwargs)
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("name, overrides, error, words", [
    ("resattnet3d-tiny", dict(stem_pool="no"), TypeError,
     "resattnet3d-tiny: stem_pool must be True or False, got 'no'"),
    ("resattnet3d-tiny", dict(in_channels=True), TypeError,
     r"resattnet3d-tiny: in_channels must be an integer >= 1, got True"),
    ("resattnet3d-tiny", dict(input_shape=(16.5, 16, 16)), TypeError,
     r"resattnet3d-tiny: input_shape\[0\] must be an integer >= 1, got 16.5"),
    ("resattnet3d-tiny", dict(stage_filters="48"), TypeError,
     "resattnet3d-tiny: stage_filters must be a sequence of integers, got '48'"),
    ("vgg-cifar-small", dict(split_pairs="no"), TypeError,
     "vgg-cifar-small: split_pairs must be True or False, got 'no'"),
    ("vgg-cifar-small", dict(filters=(6, 6, 12, 12.5)), TypeError,
     r"vgg-cifar-small: filters\[3\] must be an integer >= 1, got 12.5"),
    ("vgg-cifar-small", dict(in_channels=3.0), TypeError,
     "vgg-cifar-small: in_channels must be an integer >= 1, got 3.0"),
])
def test_a_model_config_names_a_wrong_override(name, overrides, error, words):
    """models.resolve(name, **overrides): stem_pool='no' and split_pairs='no' were read as
    True, input_shape 16.5 and filters 12.5 were cut to 16 and 12, stage_filters '48' read
    as (4, 8), in_channels True as one channel and 3.0 kept as a float."""
    from meshpar import models

    with pytest.raises(error, match=words):
        models.resolve(name, **overrides)


def test_a_model_config_still_takes_numpy_integers():
    import numpy as np

    from meshpar import models

    config = models.resolve("resattnet3d-tiny", in_channels=np.int64(2),
                            input_shape=np.array([16, 16, 16])).config
    assert config.in_channels == 2 and type(config.in_channels) is int
    assert config.input_shape == (16, 16, 16)


@pytest.mark.parametrize("kwargs, words", [
    (dict(elastic="no"), "RebalanceOptions.elastic must be True or False, got 'no'"),
    (dict(rebalance="no"), "RebalanceOptions.rebalance must be True or False, got 'no'"),
    (dict(every=True), "rebalance every must be an integer >= 1, got True"),
    (dict(patience=2.0), "rebalance patience must be an integer >= 1, got 2.0"),
    (dict(trigger="0.2"), "rebalance trigger must be a number, got '0.2'"),
    (dict(budget="0.5"), "rebalance budget must be a number, got '0.5'"),
])
def test_rebalance_options_name_a_wrong_type(kwargs, words):
    """RebalanceOptions(elastic='no') turned elastic training on, every=True sampled each
    step, trigger '0.2' was float()'s: each now a TypeError naming the field."""
    from meshpar.training.rebalance import RebalanceOptions

    with pytest.raises(TypeError, match=words):
        RebalanceOptions(**kwargs)


@pytest.mark.parametrize("kwargs, words", [
    (dict(skip_bad="no"), "skip_bad must be True or False, got 'no'"),
    (dict(check_files="no"), "check_files must be True or False, got 'no'"),
])
def test_read_labels_names_a_wrong_switch(phantoms, kwargs, words):
    from meshpar.data import read_labels

    with pytest.raises(TypeError, match=words):
        read_labels(phantoms, ("NC", "AD"), **kwargs)


def test_read_labels_refuses_a_label_set_string(phantoms):
    """read_labels(d, 'NC,AD') read the string letter by letter and said label 'NC' is not
    in ('N', 'C', ',', 'A', 'D')."""
    from meshpar.data import read_labels

    with pytest.raises(ValueError, match=r"label_set must be a sequence of names, e.g. "
                                         r"\('NC', 'AD'\), got 'NC,AD'"):
        read_labels(phantoms, "NC,AD")


# ------------------------------------------- saves TensorFlow cannot find as the latest
def _saves(model_dir, state):
    """Empty stand-ins of saves 0 and 2 (their names are all that is read before the
    refusal) and the 'checkpoint' file ``state`` (None: none)."""
    for step in (0, 2):
        for suffix in (".index", ".data-00000-of-00001", ".meta"):
            (model_dir / f"model.ckpt-{step}{suffix}").write_bytes(b"")
    if state is not None:
        (model_dir / "checkpoint").write_text(state)


STATES = [(None, "no 'checkpoint' file"),
          ("", "a 'checkpoint' file that cannot be read"),
          ('model_checkpoint_path: "model.ckpt-4"\n', "model.ckpt-4, whose files are gone")]


@pytest.mark.parametrize("state, why", STATES)
def test_train_refuses_saves_it_would_start_over_on(tmp_path, capsys, state, why):
    """A model directory whose 'checkpoint' file was missing (a partial copy), empty (a
    run killed while writing it) or named a save whose files were removed: TF's
    latest_checkpoint is None, so train began again at step 0 and wrote over
    model.ckpt-0 and -2 in silence (an empty file: 'Invalid checkpoint state loaded')."""
    model_dir = tmp_path / "m"
    _run_file(model_dir)
    _saves(model_dir, state)
    kept = sorted(p.name for p in model_dir.iterdir())
    assert main(["train", "--synthetic", "--model", "resattnet3d-tiny", "--batch", "2",
                 "--steps", "4", "--no-progress", "--model-dir", str(model_dir)]) == 2
    line = _error_line(capsys)
    assert f"{model_dir} holds checkpoints (model.ckpt-0, model.ckpt-2) but " in line
    assert why in line and "training there would start again at step 0" in line
    assert 'model_checkpoint_path: "model.ckpt-2" names the last' in line
    assert sorted(p.name for p in model_dir.iterdir()) == kept


@pytest.mark.parametrize("state, why", STATES)
def test_predict_says_why_it_finds_no_latest_checkpoint(tmp_path, capsys, phantoms, state,
                                                        why):
    model_dir = tmp_path / "m"
    _run_file(model_dir)
    _saves(model_dir, state)
    assert main(["predict", "--model-dir", str(model_dir), "--data", str(phantoms),
                 "--out", str(tmp_path / "p.csv")]) == 2
    line = _error_line(capsys)
    assert why in line and "predict finds no latest checkpoint" in line
    assert "or give --checkpoint one of them" in line


def test_make_estimator_refuses_saves_it_would_start_over_on(tmp_path):
    from meshpar.training.estimator import make_estimator

    _saves(tmp_path, None)
    with pytest.raises(ValueError, match=r"holds checkpoints \(model.ckpt-0, model.ckpt-2\) "
                                         r"but no 'checkpoint' file .*: the estimator would "
                                         r"start again at step 0"):
        make_estimator("resattnet3d-tiny", str(tmp_path))


@pytest.mark.parametrize("argv, prog, unknown", [
    (["bench", "memory", "--mesh", "all:2"], "meshpar bench memory", "--mesh all:2"),
    (["data", "check", "ds", "--bogus"], "meshpar data check", "--bogus"),
    (["plan", "--speeds", "1,1", "extra"], "meshpar plan", "extra"),
    (["train", "--synthetic", "--bogus"], "meshpar train", "--bogus"),
    (["bench", "--bogus"], "meshpar bench", "--bogus"),
    (["--bogus"], "meshpar", "--bogus"),
])
def test_an_unknown_argument_is_named_under_its_command(argv, prog, unknown, capsys):
    """argparse said an unknown option of any command as 'meshpar: error: unrecognized
    arguments' (the top-level parser's name), unlike every other error of the command."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    assert _error_line(capsys) == (f"{prog}: error: unrecognized arguments: {unknown} "
                                   f"(see {prog} --help)")


@pytest.mark.parametrize("call", ["from_plan", "build_model_fn", "make_estimator"])
def test_a_plan_given_as_its_json_object_is_named(tmp_path, call):
    """plan=json.load(open('plan.json')) ended in "'dict' object has no attribute
    'devices'" (MeshSpec.from_plan, make_estimator) or '... no attribute
    'check_compatible'' (build_model_fn)."""
    from meshpar.models import describe_model
    from meshpar.planning.planners import plan
    from meshpar.training import estimator
    from meshpar.training.mesh_spec import MeshSpec

    made = plan(describe_model("resattnet3d-tiny"), [1, 1], 4, method="even").to_dict()
    calls = {"from_plan": lambda: MeshSpec.from_plan(made),
             "build_model_fn": lambda: estimator.build_model_fn("resattnet3d-tiny", made),
             "make_estimator": lambda: estimator.make_estimator(
                 "resattnet3d-tiny", str(tmp_path / "m"), made)}
    with pytest.raises(TypeError, match=r"plan must be a Plan or the path of a plan file, got "
                                        r"a dict; for a plan file's JSON object, "
                                        r"Plan.from_dict\(it\)"):
        calls[call]()
