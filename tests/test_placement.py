"""A plan's device order is honoured on a real cluster: each plan device is matched
to its worker task by name, and a plan for another cluster is refused."""
import json

import pytest

from meshpar.cli import main
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.plan import Plan
from meshpar.runtime.client import ClusterClient, parse_worker_device
from meshpar.runtime.local_cluster import LocalCluster


def test_worker_device_names_parse_to_task_and_device():
    assert parse_worker_device("/job:worker/task:1/device:GPU:0") == (1, "GPU:0")
    assert parse_worker_device("/job:worker/replica:0/task:12") == (12, None)
    assert parse_worker_device("/job:ps/task:0/device:CPU:0") == (None, None)
    assert parse_worker_device("cpu0") == (None, None)


def _plan(devices, model="vgg-cifar-small", weights=(3.0, 1.0)):
    return Plan(method="test", model=model, batch=4, mesh_shape=(("batch", len(devices)),),
                layout=(("batch", "batch"),), devices=tuple(devices),
                split_weights={"batch": list(weights)}, dim_split_weights={},
                split_sizes={}, predicted_step_seconds=1.0, planning_seconds=0.0,
                memory_per_device=(0.0,) * len(devices))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster([1.0, 1.0], throttle="none") as c:
        path = tmp_path_factory.mktemp("cluster") / "cluster.json"
        path.write_text(json.dumps({"worker": c.addresses}))
        yield c, path


def test_client_places_plan_devices_on_the_named_tasks(cluster):
    local, _ = cluster
    client = ClusterClient(local.addresses)
    plan_devices = ["/job:worker/task:1/device:CPU:0", "/job:worker/task:0/device:CPU:0"]
    assert client.place(plan_devices) == plan_devices
    assert client.place(["/job:worker/task:1", "/job:worker/task:0"]) == plan_devices
    with pytest.raises(ValueError, match="task:2.*not a worker of this cluster"):
        client.place(["/job:worker/task:0/device:CPU:0", "/job:worker/task:2/device:CPU:0"])
    with pytest.raises(ValueError, match="same worker task 0"):
        client.place(["/job:worker/task:0", "/job:worker/task:0/device:CPU:0"])
    with pytest.raises(ValueError, match="'cpu0'.*not a worker"):
        client.place(["cpu0", "/job:worker/task:1"])


def test_train_puts_each_slice_where_the_plan_says(cluster, tmp_path, capsys):
    _, cluster_file = cluster
    # Planned for speeds 0.3, 0.9: the planner lists task 1 (fast) first.
    from meshpar.models import describe_model
    from meshpar.planning.planners import plan

    planned = plan(describe_model("vgg-cifar-small"), ClusterSpec.from_speeds([0.3, 0.9]), 4,
                   method="proportional", shapes=[(2, 1)])
    assert planned.devices[0] == "/job:worker/task:1/device:CPU:0"
    planned.save(tmp_path / "plan.json")
    rc = main(["train", "--synthetic", "--model", "vgg-cifar-small", "--cluster",
               str(cluster_file), "--plan", str(tmp_path / "plan.json"), "--steps", "3",
               "--batch", "4", "--n-synthetic", "16", "--no-progress", "--json",
               "--model-dir", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert rc == 0
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["devices"] == list(planned.devices)  # pnum 0 on task 1, not task 0
    assert summary["split_weights"]["batch"] == pytest.approx(list(planned.split_weights["batch"]))


def _train_on(cluster_file, devices, tmp_path, capsys) -> tuple:
    """``(exit code, stderr)`` of a one-step ``train --cluster`` on a plan naming ``devices``."""
    _plan(devices).save(tmp_path / "plan.json")
    rc = main(["train", "--synthetic", "--model", "vgg-cifar-small", "--cluster",
               str(cluster_file), "--plan", str(tmp_path / "plan.json"), "--steps", "1",
               "--batch", "4", "--n-synthetic", "16", "--no-progress"])
    return rc, capsys.readouterr().err


def _dead_address() -> str:
    """A 127.0.0.1 address nobody listens on (a port just freed)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_a_worker_the_plan_leaves_out_may_be_down(cluster, tmp_path, capsys):
    """A plan on worker 0 alone trains while worker 1 of the cluster file is down
    (its sessions involve the plan's workers only); a plan that uses worker 1 is
    refused naming it."""
    local, _ = cluster
    cluster_file = tmp_path / "half-down.json"
    cluster_file.write_text(json.dumps({"worker": [local.addresses[0], _dead_address()]}))
    _plan(["/job:worker/task:0/device:CPU:0"], weights=(1.0,)).save(tmp_path / "alone.json")
    rc = main(["train", "--synthetic", "--model", "vgg-cifar-small", "--cluster",
               str(cluster_file), "--plan", str(tmp_path / "alone.json"), "--steps", "2",
               "--batch", "4", "--n-synthetic", "16", "--no-progress", "--json",
               "--model-dir", str(tmp_path / "run")])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert json.loads(captured.out.strip().splitlines()[-1])["devices"] == [
        "/job:worker/task:0/device:CPU:0"]
    rc, err = _train_on(cluster_file, ["/job:worker/task:0/device:CPU:0",
                                       "/job:worker/task:1/device:CPU:0"], tmp_path, capsys)
    assert rc != 0 and "cannot reach worker 1 at" in err


def test_a_plan_for_another_cluster_is_refused_in_one_line(cluster, tmp_path, capsys):
    rc, err = _train_on(cluster[1], ["/job:worker/task:0/device:CPU:0",
                                     "/job:worker/task:5/device:CPU:0"], tmp_path, capsys)
    assert rc == 2
    assert "task:5" in err and "not a worker of this cluster" in err
    assert len(err.strip().splitlines()) == 1


def test_profile_plan_train_flow_on_one_cluster_description(cluster, tmp_path, capsys):
    """The documented flow: profile the cluster's workers, plan from that profile,
    train on the same cluster; every device the plan names is one of its tasks."""
    _, cluster_file = cluster
    profile, plan_file = tmp_path / "profile.json", tmp_path / "plan.json"
    assert main(["profile", "--cluster", str(cluster_file), "--model", "vgg-cifar-small",
                 "--batch", "4", "--repeats", "1", "--out", str(profile)]) == 0
    # no --model: the profile says which model its steps were
    assert main(["plan", "--profile", str(profile), "--batch", "4",
                 "--generations", "5", "--out", str(plan_file)]) == 0
    planned = Plan.load(plan_file)
    assert planned.model == "vgg-cifar-small"
    assert set(planned.devices) <= {"/job:worker/task:0/device:CPU:0",
                                    "/job:worker/task:1/device:CPU:0"}
    capsys.readouterr()
    # no --model, no --batch: the plan's
    assert main(["train", "--synthetic", "--cluster",
                 str(cluster_file), "--plan", str(plan_file), "--steps", "2",
                 "--n-synthetic", "16", "--no-progress", "--json",
                 "--model-dir", str(tmp_path / "run")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["devices"] == list(planned.devices)
    assert summary["model"] == "vgg-cifar-small" and summary["steps"] == 2
    # the plan knows where its devices were profiled, so the same workers listed
    # the other way round keep their slices (task numbers swap, machines do not)
    local, _ = cluster
    where = dict(zip(["/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"],
                     local.addresses))
    assert planned.extra["worker_addresses"] == [where[d] for d in planned.devices]
    reversed_file = tmp_path / "reversed.json"
    reversed_file.write_text(json.dumps({"worker": list(reversed(local.addresses))}))
    swap = {"/job:worker/task:0/device:CPU:0": "/job:worker/task:1/device:CPU:0",
            "/job:worker/task:1/device:CPU:0": "/job:worker/task:0/device:CPU:0"}
    # what `train --cluster reversed.json --plan plan.json` builds its mesh on (the
    # training itself is the run above)
    import argparse

    from meshpar.cli import train as cli_train
    from meshpar.cli.train_options import cluster_client, mesh_arguments

    sub = argparse.ArgumentParser().add_subparsers()
    cli_train.register(sub)
    args = sub.choices["train"].parse_args(["--synthetic", "--cluster", str(reversed_file),
                                            "--plan", str(plan_file)])
    cli_train._check_args(args)  # pylint: disable=protected-access
    mesh = mesh_arguments(args, cli_train._model_spec(args),  # pylint: disable=protected-access
                          cluster_client(args))
    assert args.model == "vgg-cifar-small" and args.batch == 4
    assert mesh["devices"] == [swap[d] for d in planned.devices]


def test_model_profile_without_a_cluster_is_refused(capsys):
    assert main(["profile", "--model", "vgg-cifar"]) == 2
    assert "--model goes with --cluster" in capsys.readouterr().err


def test_a_plan_profiled_on_these_workers_follows_them_in_any_listed_order(cluster):
    """A plan made from a profile records where each device was profiled; a cluster
    file listing the same workers in another order still gets each slice on the
    worker meant for it; one listing none of them places by task number (and says
    so); one listing only some of them is refused."""
    local, _ = cluster
    a, b = local.addresses
    devices = ["/job:worker/task:1/device:CPU:0", "/job:worker/task:0/device:CPU:0"]
    same = ClusterClient([a, b])
    assert same.place(devices, plan_addresses=[b, a]) == devices
    swapped = ClusterClient([b, a])
    assert swapped.place(devices, plan_addresses=[b, a]) == list(reversed(devices))
    notes = []
    assert same.place(devices, plan_addresses=["10.9.9.9:1", "10.9.9.9:2"],
                      log=notes.append) == devices
    assert len(notes) == 1 and "10.9.9.9:1" in notes[0]
    with pytest.raises(ValueError, match="without 10.9.9.9:2"):
        same.place(devices, plan_addresses=[b, "10.9.9.9:2"])
    # the same workers spelled "localhost": still followed by address
    named = ClusterClient([x.replace("127.0.0.1", "localhost") for x in (b, a)])
    assert named.place(devices, plan_addresses=[b, a]) == list(reversed(devices))


def test_addresses_match_whatever_the_host_is_called():
    from meshpar.runtime.client import canonical_address

    assert canonical_address("localhost:2222") == canonical_address("127.0.0.1:2222") \
        == "127.0.0.1:2222"
    assert canonical_address("127.0.0.1:2223") != canonical_address("127.0.0.1:2222")
    assert canonical_address("No-Such-Host.invalid:1") == "no-such-host.invalid:1"


def test_a_device_the_worker_lacks_is_refused_not_run_on_its_cpu(cluster, tmp_path, capsys):
    rc, err = _train_on(cluster[1], ["/job:worker/task:1/device:GPU:0",
                                     "/job:worker/task:0/device:GPU:0"], tmp_path, capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "worker 1 at" in err and "has no GPU:0" in err and "CPU:0" in err


def test_a_rebalancing_profile_follows_its_workers_in_any_listed_order(cluster):
    """The profile ``--rebalance-profile`` reads keeps each machine's measured speed
    when the cluster file lists the machines the other way round."""
    import dataclasses

    local, _ = cluster
    a, b = local.addresses
    speeds = ClusterSpec.from_speeds([0.9, 0.3])
    alone = {d.device: [[1.0, 2 * d.profile[0][1]]] for d in speeds.devices}
    profile = dataclasses.replace(speeds, extra={"addresses": [a, b], "alone_profile": alone})
    assert ClusterClient([a, b]).follow_addresses(profile) is profile
    moved = ClusterClient([b, a]).follow_addresses(profile)
    fast = max(moved.devices, key=lambda d: d.profile[-1][1])
    assert parse_worker_device(fast.device) == (1, "CPU:0")  # the 0.9 machine is task 1 now
    assert [d.profile for d in moved.devices] == [d.profile for d in profile.devices]
    # its speeds alone move with it (a one-device plan is priced by them)
    assert moved.alone_points(fast.device) == ((1.0, 2 * fast.profile[0][1]),)
