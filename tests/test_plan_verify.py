"""`meshpar plan --verify K`: the planner's K best candidates timed on the profiled
workers (whole training steps, in turns), the fastest measured kept and recorded."""
import json
import socket
from pathlib import Path

import pytest
import tensorflow.compat.v1 as tf

from meshpar.cli import main
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.plan import Plan
from meshpar.runtime import plan_trials

MODEL, BATCH = "vgg-cifar-small", 4
ROOT = Path(__file__).resolve().parent.parent


def _free_address() -> str:
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return f"localhost:{probe.getsockname()[1]}"


@pytest.fixture(scope="module")
def worker_addresses():
    """Two in-process TF worker tasks (no quota: structure, not speed)."""
    addresses = [_free_address(), _free_address()]
    spec = tf.train.ClusterSpec({"worker": addresses})
    servers = [tf.distribute.Server(spec, job_name="worker", task_index=i, start=True)
               for i in range(2)]
    yield addresses
    del servers


def _profile(tmp_path, addresses=None) -> str:
    """A profile of two uneven workers, with the addresses it was 'measured' at."""
    data = ClusterSpec.from_speeds([1.0, 0.25]).to_dict()
    if addresses is not None:
        data.setdefault("extra", {})["addresses"] = list(addresses)
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    return str(path)


def _plan_argv(profile, out, *extra):
    return ["plan", "--profile", profile, "--model", MODEL, "--batch", str(BATCH),
            "--out", str(out), *extra]


def test_the_fastest_measured_candidate_is_kept_not_the_fastest_predicted(
        tmp_path, monkeypatch, worker_addresses):
    """Measured times that reverse the predicted order: the plan saved is the last
    candidate (the one measured fastest), and every candidate's times are recorded."""
    timed = {}

    def fake(addresses, model, batch, plans, rounds, repeats=5, log=None):
        timed.update(addresses=list(addresses), model=model.name, batch=batch,
                     plans=list(plans), rounds=rounds)
        return [0.5 - 0.1 * i for i in range(len(plans))]

    monkeypatch.setattr(plan_trials, "time_plans", fake)
    out = tmp_path / "plan.json"
    assert main(_plan_argv(_profile(tmp_path, worker_addresses), out, "--verify", "3",
                           "--verify-rounds", "2")) == 0
    plans = timed["plans"]
    assert timed["addresses"] == worker_addresses and timed["batch"] == BATCH
    assert timed["model"] == MODEL and timed["rounds"] == 2 and len(plans) >= 2
    predicted = [p.predicted_step_seconds for p in plans]
    assert predicted == sorted(predicted)  # the candidates come fastest predicted first
    saved = Plan.load(out)
    last = plans[-1]
    assert (saved.mesh_shape, saved.devices, saved.split_sizes) == (
        last.mesh_shape, last.devices, last.split_sizes)
    record = saved.extra["verified"]
    assert record["picked"] == len(plans) - 1 and record["rounds"] == 2
    assert [c["measured_step_seconds"] for c in record["candidates"]] == pytest.approx(
        [0.5 - 0.1 * i for i in range(len(plans))])
    assert [c["predicted_step_seconds"] for c in record["candidates"]] == pytest.approx(
        predicted)


def test_candidates_run_on_the_profiled_workers_and_the_least_time_wins(
        tmp_path, worker_addresses):
    """A real run on two in-process workers: each candidate's step timed, the one of
    the least measured time saved."""
    out = tmp_path / "plan.json"
    assert main(_plan_argv(_profile(tmp_path, worker_addresses), out, "--verify", "2",
                           "--verify-rounds", "1")) == 0
    record = Plan.load(out).extra["verified"]
    measured = [c["measured_step_seconds"] for c in record["candidates"]]
    assert len(measured) == 2 and all(t > 0 for t in measured)
    assert record["picked"] == measured.index(min(measured))
    picked = record["candidates"][record["picked"]]
    saved = Plan.load(out)
    assert saved.mesh_shape_string() == picked["mesh"]
    assert list(saved.devices) == picked["devices"]


def test_time_plans_refuses_a_plan_of_another_batch(worker_addresses):
    plan = Plan(method="even", model=MODEL, batch=8, mesh_shape=(("batch", 1), ("model", 1)),
                layout=(), devices=("/job:worker/task:0/device:CPU:0",))
    with pytest.raises(ValueError, match="batch 8 cannot be timed at batch 4"):
        plan_trials.time_plans(worker_addresses, MODEL, BATCH, [plan])


def test_pick_measured_takes_the_least_time_and_the_first_of_a_tie():
    plans = [Plan(method="ga", model=MODEL, batch=BATCH,
                  mesh_shape=(("batch", 1), ("model", 1)), layout=(),
                  devices=(f"/job:worker/task:{i}/device:CPU:0",),
                  predicted_step_seconds=0.1 * (i + 1)) for i in range(3)]
    chosen, record = plan_trials.pick_measured(plans, [0.3, 0.2, 0.2], rounds=1)
    assert chosen is plans[1] and record["picked"] == 1
    assert chosen.extra["verified"] is record
    with pytest.raises(ValueError, match="2 times for 3 plans"):
        plan_trials.pick_measured(plans, [0.1, 0.2])


@pytest.mark.parametrize("extra, message", [
    (["--verify", "0"], "--verify and --verify-rounds must be >= 1"),
    (["--verify", "2", "--verify-rounds", "0"], "must be >= 1"),
    (["--verify-rounds", "2"], "--verify-rounds goes with --verify K"),
    (["--verify", "2", "--all-devices"], "--all-devices does not go with it"),
    (["--verify", "2", "--mesh", "batch:2"], "--mesh does not go with it"),
])
def test_verify_options_are_refused_in_one_line(tmp_path, capsys, extra, message):
    assert main(_plan_argv(_profile(tmp_path, ["localhost:1", "localhost:2"]),
                           tmp_path / "p.json", *extra)) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert err.startswith("meshpar plan: error:")
    assert not (tmp_path / "p.json").exists()


def test_verify_needs_a_profile_of_workers(tmp_path, capsys):
    assert main(["plan", "--speeds", "1.0,0.5", "--verify", "2"]) == 2
    assert "--speeds does not go with it" in capsys.readouterr().err
    assert main(_plan_argv(_profile(tmp_path), tmp_path / "p.json", "--verify", "2")) == 2
    err = capsys.readouterr().err.strip()
    assert "records none (a profile of `meshpar profile --cluster` does)" in err
    assert len(err.splitlines()) == 1


def test_candidates_hold_the_fastest_device_alone_where_a_split_is_the_pick():
    """Stop 56's batch-8 profile of resattnet3d-small: the planner's pick is a 7/1
    split predicted 2.5% faster than the fast worker alone (which ran 1.28x as fast
    as it); the fast worker alone is among the candidates to time, next after it."""
    from meshpar.models import describe_model
    from meshpar.planning.planners.candidates import candidate_plans

    stored = json.loads((ROOT / "benchmarks/results/train-0.9-0.3-batch8-amd-stop56/train.json")
                        .read_text(encoding="utf-8"))
    profile = ClusterSpec.from_dict(stored["profiles"]["resattnet3d-small"])
    first, second = candidate_plans(describe_model("resattnet3d-small"), profile, 8, 2)
    assert first.split_sizes["batch"] == [7, 1] and len(first.devices) == 2
    assert second.devices == (profile.devices[0].device,)
    assert second.split_sizes["batch"] == [8]
    assert first.predicted_step_seconds < second.predicted_step_seconds


def test_every_candidate_records_its_workers_addresses():
    """The batch neighbours too (they were built without them): each candidate is
    placed on the workers its devices were profiled at."""
    from meshpar.models import describe_model
    from meshpar.planning.planners.candidates import candidate_plans

    data = ClusterSpec.from_speeds([1.0, 0.5]).to_dict()
    data.setdefault("extra", {})["addresses"] = ["h0:1", "h1:1"]
    profile = ClusterSpec.from_dict(data)
    where = {d.device: a for d, a in zip(profile.devices, ["h0:1", "h1:1"])}
    plans = candidate_plans(describe_model(MODEL), profile, 8, 6)
    assert any(p.method.endswith("-neighbour") for p in plans)
    for p in plans:
        assert p.extra["worker_addresses"] == [where[d] for d in p.devices]
