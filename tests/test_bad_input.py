"""Bad input of every kind ends in a clear error, never a traceback, a hang or a silent result.

One table, ``CASES`` (in ``bad_input_cases.py``), drives one parametrized test:
each row is its own test.

* ``cli`` rows run ``meshpar.cli.main(argv)`` in this process and check the exit
  code (2 unless the command documents another, e.g. ``data check`` exits 1
  when it found bad subjects), that stderr holds exactly one line starting with
  ``meshpar`` that contains the expected fragment, and that no "Traceback"
  was printed (fd-level capture, so TF's own logging would show too).
* ``subprocess`` rows run ``python -m meshpar`` to prove nothing reaches the
  terminal but that one line, within a time limit.
* ``api`` rows call the library and expect a ``ValueError`` (or
  ``FileNotFoundError``) whose message contains the fragment.

Argument strings may name ``{d}`` (a directory with the fixtures built once by
``files``), ``{dead}`` (a 127.0.0.1 address nobody listens on) and ``{live}``
(one that accepts connections).
"""
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from bad_input_cases import CASES, SHAPE, SYNTH, Case
from nifti_helpers import blob, save_nifti

from meshpar.cli import main


# ------------------------------------------------------------------- fixtures
def _nifti_set(root: Path, kind: str, n: int = 8) -> None:
    """``n`` good 16^3 subjects; subject 3 broken as ``kind`` says."""
    root.mkdir()
    rows = ["subject,label"]
    for i in range(n):
        name = "s3.nii" if (kind == "truncated" and i == 3) else f"s{i}.nii.gz"
        save_nifti(root / name, blob(SHAPE, seed=i))
        rows.append(f"{name},{'AD' if i % 2 and kind != 'one-class' else 'NC'}")
    bad = root / ("s3.nii" if kind == "truncated" else "s3.nii.gz")
    if kind == "corrupt":
        bad.write_bytes(b"not a NIfTI file " * 20)
    elif kind in ("truncated", "gzcut"):
        data = bad.read_bytes()
        bad.write_bytes(data[: len(data) * 2 // 3])
    elif kind == "rank":
        save_nifti(bad, np.zeros(SHAPE[:2], np.float32))
    elif kind == "one-class":
        pass  # every subject good, every label NC
    elif kind == "nan":
        volume = blob(SHAPE, seed=3)
        volume[2, 2, 2] = np.nan
        save_nifti(bad, volume)
    (root / "labels.csv").write_text("\n".join(rows) + "\n")


@pytest.fixture(scope="module")
def addresses():
    """A listening 127.0.0.1 port and one that is bound but refuses connections."""
    live = socket.socket()
    live.bind(("127.0.0.1", 0))
    live.listen(4)
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))  # bound, never listening: connect() is refused
    try:
        yield {"live": "127.0.0.1:%d" % live.getsockname()[1],
               "dead": "127.0.0.1:%d" % dead.getsockname()[1]}
    finally:
        live.close()
        dead.close()


@pytest.fixture(scope="module")
def files(tmp_path_factory, addresses):
    from meshpar.planning.cluster import ClusterSpec
    from meshpar.models import describe_model
    from meshpar.planning.planners import plan

    d = tmp_path_factory.mktemp("bad-input")
    plan(describe_model("vgg-cifar-small"), ClusterSpec.from_speeds([1.0, 0.5]), 4,
         method="proportional").save(d / "plan.json")
    planned = json.loads((d / "plan.json").read_text())
    for name, change in [("batch-negative", {"batch": -1}),
                         ("batch-sizes", {"split_sizes": {"batch": [3, 3]}}),
                         ("weights-text", {"split_weights": {"batch": ["a", "b"]}}),
                         ("mesh-fraction", {"mesh_shape": [["batch", 2.5], ["model", 1]]}),
                         ("batch-infinite", {"batch": float("inf")})]:
        (d / f"plan-{name}.json").write_text(json.dumps(dict(planned, **change)))
    (d / "plan-model-ref-number.json").write_text(json.dumps(dict(planned,
                                                                 extra={"model_ref": 5})))
    unweighted = dict(planned)
    del unweighted["split_weights"]  # hand-edited: the uneven sizes left, the runtime cut evenly
    (d / "plan-weights-deleted.json").write_text(json.dumps(unweighted))
    misspelt = dict(planned)
    misspelt["split_weight"] = misspelt.pop("split_weights")  # hand-edited: the weights lost
    (d / "plan-misspelt-field.json").write_text(json.dumps(misspelt))
    good = ClusterSpec.from_speeds([1.0, 0.5]).to_dict()
    (d / "no-latency.json").write_text(json.dumps({k: v for k, v in good.items() if k != "latency"}))
    (d / "profile.json").write_text(json.dumps(good))
    broken = dict(good, devices=[{k: v for k, v in dev.items() if k != "profile"}
                                 for dev in good["devices"]])
    (d / "device-no-profile.json").write_text(json.dumps(broken))
    (d / "profile-extra-list.json").write_text(json.dumps(dict(good, extra=[1, 2])))
    (d / "profile-model-ref-number.json").write_text(json.dumps(dict(good,
                                                                    extra={"model_ref": 5})))
    # a third worker's device deleted by hand, its address left
    (d / "profile-address-left.json").write_text(json.dumps(dict(
        good, extra={"addresses": ["a:1", "b:2", "c:3"]})))
    step = {"work": "model-step", "model": "vgg-cifar-small"}  # a model-step profile's extra
    (d / "profile-overhead-list.json").write_text(json.dumps(dict(
        good, extra=dict(step, split_overhead_flops=[1]))))
    (d / "profile-overhead-nan.json").write_text(json.dumps(dict(
        good, extra=dict(step, split_overhead_flops={"batch": float("nan"), "model": 0}))))
    (d / "profile-model-list.json").write_text(json.dumps(dict(good, extra={"model": ["vgg-cifar"]})))
    rows = [dict(dev) for dev in good["devices"]]
    rows[0]["slice_efficiencies"] = [[0.5, 0.8]]  # misspelt: the measurement was dropped
    rows[1]["device"] = None                      # was planned as device 'None'
    (d / "profile-device-fields.json").write_text(json.dumps(dict(good, devices=rows)))
    (d / "not-json.json").write_text("{\"worker\": [\"127.0.0.1:1\"")
    (d / "empty.json").write_text("{}")
    (d / "binary.json").write_bytes(b"\xff\xfe{}")
    (d / "out-json-dir" / "hetero.json").mkdir(parents=True)
    for place in ("synth-labels-dir/labels.csv", "synth-subject-dir/subjects/sub-0002.nii.gz"):
        (d / place).mkdir(parents=True)
    (d / "synth-subjects-file").mkdir()
    (d / "synth-subjects-file" / "subjects").write_text("kept\n")
    (d / "out-foreign").mkdir()
    (d / "out-foreign" / "train.json").write_text("kept\n")
    (d / "out-foreign" / "memory.json").write_text(json.dumps({"worker": ["127.0.0.1:1"]}))
    (d / "task-ps.json").write_text(json.dumps({"cluster": {"worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]},
                                                "task": {"type": "worker", "index": 0}}))
    (d / "task-3.json").write_text(json.dumps({"cluster": {"worker": ["127.0.0.1:1"]},
                                               "task": {"type": "worker", "index": 3}}))
    (d / "port-99999.json").write_text(json.dumps({"worker": ["localhost:99999"]}))
    (d / "address-twice.json").write_text(json.dumps({"worker": ["localhost:2222",
                                                                 "localhost:2222"]}))
    (d / "no-workers.json").write_text(json.dumps({"worker": []}))
    run = {"model": "resattnet3d-tiny", "model_overrides": {}, "labels": ["NC", "AD"],
           "input_shape": [16, 16, 16, 1], "channels": 1}
    for name, text in (("run-int", "5"), ("run-null", json.dumps(dict(run, model_overrides=None))),
                       ("run-bad-best", json.dumps(run)),
                       ("run-batch-null", json.dumps(dict(run, batch=None))),
                       ("run-unknown-override", json.dumps(dict(run, model_overrides={"bogus": 1})))):
        (d / name / "best").mkdir(parents=True)
        (d / name / "meshpar_run.json").write_text(text)
    (d / "run-bad-best" / "best" / "best.json").write_text("{bad")
    (d / "no-host.json").write_text(json.dumps({"worker": [":2222"]}))
    (d / "host-with-space.json").write_text(json.dumps({"worker": ["local host:2223"]}))
    (d / "task-list.json").write_text(json.dumps({"cluster": {"worker": ["127.0.0.1:1"]},
                                                  "task": [0]}))
    # the reachable worker first: every address is probed, not only the first
    (d / "live-worker.json").write_text(json.dumps({"worker": [addresses["live"]]}))
    (d / "tf-dead.json").write_text(json.dumps({"worker": [addresses["live"], addresses["dead"]]}))
    elsewhere = dict(planned, extra=dict(planned.get("extra") or {},
                                         worker_addresses=[addresses["live"], "127.0.0.1:1"]))
    (d / "plan-other-workers.json").write_text(json.dumps(elsewhere))
    (d / "foreign-model").mkdir()  # what a plain TF estimator leaves
    for name in ("checkpoint", "graph.pbtxt"):
        (d / "foreign-model" / name).write_text("kept\n")
    for kind in ("corrupt", "truncated", "gzcut", "rank", "nan", "one-class"):
        _nifti_set(d / kind, kind)
    (d / "label-column-twice").mkdir()  # which 'label' holds the diagnosis?
    save_nifti(d / "label-column-twice" / "s0.nii.gz", blob(SHAPE, seed=0))
    (d / "label-column-twice" / "labels.csv").write_text("subject,label,Label\n"
                                                         "s0.nii.gz,NC,AD\n")
    (d / "dir-subject").mkdir()  # labels.csv names a directory as a subject's file
    (d / "dir-subject" / "s0.nii.gz").mkdir()
    save_nifti(d / "dir-subject" / "s1.nii.gz", blob(SHAPE, seed=1))
    (d / "dir-subject" / "labels.csv").write_text("subject,label\ns0.nii.gz,NC\ns1.nii.gz,AD\n")
    return d


def _fill(text: str, d: Path, addresses: dict) -> str:
    return text.replace("{d}", str(d)).replace("{dead}", addresses["dead"]).replace(
        "{live}", addresses["live"])


# ----------------------------------------------------------------------- test
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, files, addresses, capfd):
    expect = _fill(case.expect, files, addresses)
    if case.kind == "api":
        with pytest.raises(case.error) as info:
            case.call(files)
        assert expect in str(info.value)
        return
    argv = [_fill(a, files, addresses) for a in case.call]
    started = time.monotonic()
    if case.kind == "subprocess":
        proc = subprocess.run([sys.executable, "-m", "meshpar"] + argv, capture_output=True,
                              text=True, timeout=120, cwd=files)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    else:
        capfd.readouterr()
        rc = main(argv)
        out, err = capfd.readouterr()
    elapsed = time.monotonic() - started
    assert "Traceback" not in out + err
    assert rc == case.code, (rc, err)
    if case.code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        # the command as the user typed it, as argparse's own errors name it:
        # "meshpar data synth: error:", "meshpar bench memory: error:"
        named = argv[:2] if argv[0] in ("bench", "data") and argv[1:2] and \
            not argv[1].startswith("-") else argv[:1]
        assert lines[0].startswith(f"meshpar {' '.join(named)}: error: "), lines[0]
        assert expect in lines[0], lines[0]
    else:  # `data check` found bad subjects: it lists each on stdout and exits 1
        assert any(line.strip().startswith("bad: ") and expect in line
                   for line in out.splitlines()), out
    assert elapsed < 60, f"took {elapsed:.1f} s"


def test_a_refused_replay_writes_nothing_into_the_model_directory(files, capfd):
    """An unreadable --replay-replans is refused before the run file is written: the
    model directory it names is not created (a refused run leaves no half-run behind)."""
    model_dir = files / "replay-refused"
    rc = main(SYNTH + ["--model", "resattnet3d-tiny", "--cluster", str(files / "live-worker.json"),
                       "--replay-replans", str(files / "nope.json"),
                       "--model-dir", str(model_dir)])
    err = capfd.readouterr().err
    assert rc == 2 and "--replay-replans" in err and "cannot be read" in err, err
    assert not model_dir.exists()


def test_a_learning_rate_train_would_refuse_stops_evaluate_before_its_phantoms(files, capfd):
    """evaluate checks each run's train arguments, the learning rate's schedule
    included, before it writes anything: a NaN rate used to be refused by the
    first training run, after the phantoms and the results directory were made."""
    out = files / "ev-lr-nan"
    rc = main(["evaluate", "--out", str(out), "--train-args=--lr nan"])
    err = capfd.readouterr().err
    assert rc == 2 and "learning rate must be finite and > 0, got nan" in err, err
    assert not out.exists()


def test_only_addresses_of_this_machine_count_as_local():
    """`meshpar worker` notes a cluster file that puts its task on another machine's
    address (it would serve, but nobody would reach it there)."""
    from meshpar.runtime.worker import is_local_host

    assert is_local_host("127.0.0.1") and is_local_host("localhost")
    assert not is_local_host("192.0.2.1")  # TEST-NET-1 (RFC 5737): never a host's own
    assert not is_local_host("no-such-host.invalid")


def test_with_memory_takes_one_number_for_every_device():
    """The docstring's "one value for every device" as a plain number (it was a TypeError,
    "'int' object is not iterable"); a list of one still works."""
    from meshpar.planning.cluster import ClusterSpec

    cluster = ClusterSpec.from_speeds([1.0, 0.5])
    assert [d.memory_bytes for d in cluster.with_memory(2 ** 30).devices] == [2 ** 30] * 2
    assert [d.memory_bytes for d in cluster.with_memory([2 ** 30]).devices] == [2 ** 30] * 2
