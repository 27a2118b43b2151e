import dataclasses
import json

import pytest

from meshpar.cli import main


def test_plan_json_prints_one_object_with_the_plan(capsys):
    rc = main(["plan", "--speeds", "1.0,0.5,0.3,0.2", "--model", "vgg-cifar", "--batch", "8",
               "--method", "proportional", "--json"])
    out = capsys.readouterr().out
    assert rc == 0
    data = json.loads(out)
    for key in ("method", "predicted_step_seconds", "planning_seconds", "mesh_shape",
                "layout", "devices", "split_sizes"):
        assert key in data
    assert data["method"] == "proportional" and len(data["devices"]) == 4


def test_plan_table_and_out_file(capsys, tmp_path):
    out_file = tmp_path / "plan.json"
    rc = main(["plan", "--speeds", "1.0,0.5", "--model", "vgg-cifar-small", "--batch", "4",
               "--method", "ga", "--generations", "5", "--seed", "3", "--out", str(out_file)])
    out = capsys.readouterr().out
    assert rc == 0 and "predicted step" in out and "mesh" in out
    assert json.loads(out_file.read_text())["method"] == "ga"


def test_plan_from_cluster_file(capsys, tmp_path):
    from meshpar.planning.cluster import ClusterSpec

    path = tmp_path / "cluster.json"
    ClusterSpec.from_speeds([1.0, 0.25]).save(path)
    rc = main(["plan", "--profile", str(path), "--model", "vgg-cifar-small", "--batch", "4",
               "--method", "exact", "--json"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["method"] == "exact"


@pytest.mark.parametrize("argv,message", [
    (["--speeds", "1,0.5", "--model", "nope"], "unknown model"),
    (["--speeds", "1,0", "--model", "vgg-cifar"], "speeds must be"),
    (["--speeds", "1,nan", "--model", "vgg-cifar"], "speeds must be"),
    (["--model", "vgg-cifar"], "exactly one of --speeds or --profile"),
    (["--speeds", "1", "--profile", "c.json"], "exactly one of --speeds or --profile"),
    (["--profile", "/nonexistent/c.json", "--model", "vgg-cifar"], "does not exist"),
    (["--speeds", "1,1", "--model", "vgg-cifar", "--method", "exact", "--time-limit", "0"],
     "--time-limit must be > 0"),
    (["--speeds", "1,1", "--model", "vgg-cifar", "--memory-mib", "0"],
     "--memory-mib: memory 0 is 0; memory budgets must be finite and > 0"),
    (["--speeds", "1,1", "--model", "vgg-cifar", "--memory-mib", "64,32,16"],
     "--memory-mib: 3 values for 2 devices"),
    (["--speeds", "1,1", "--model", "vgg-cifar", "--memory-mib", "lots"], "is not a number"),
])
def test_bad_plan_input_exits_2_with_one_line(capsys, argv, message):
    rc = main(["plan"] + argv)
    err = capsys.readouterr().err
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and message in err


def test_cluster_file_missing_field_exits_2(capsys, tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"devices": [], "bandwidth": 1e9}))
    assert main(["plan", "--cluster", str(path), "--model", "vgg-cifar"]) == 2
    assert "latency" in capsys.readouterr().err


def test_plan_that_cannot_fit_in_memory_exits_2(capsys, tmp_path):
    from meshpar.planning.cluster import ClusterSpec

    path = tmp_path / "tiny.json"
    ClusterSpec.from_speeds([1.0, 0.5], memory_bytes=1e5).save(path)
    rc = main(["plan", "--cluster", str(path), "--model", "vgg-cifar", "--method",
               "proportional"])
    assert rc == 2 and "fits in memory" in capsys.readouterr().err


def _plan_memory_mib(capsys, extra):
    rc = main(["plan", "--speeds", "0.9,0.3", "--model", "vgg-cifar", "--batch", "8",
               "--json"] + extra)
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    # MiB per worker task (the plan lists its devices in its own order)
    by_task = {int(d.split("task:")[1].split("/")[0]): m / 2**20
               for d, m in zip(data["devices"], data["memory_per_device"])}
    return [by_task[t] for t in sorted(by_task)], data


def test_a_memory_budget_moves_the_plan_within_it(capsys):
    """Unbounded, the plan's fast device is counted over 135 MiB for vgg-cifar at
    batch 8; with --memory-mib 180 (a plan may count on 75% of it: the count's
    headroom) every device is within 135 MiB (the GA moves memory to the slow
    device), and a per-device budget is read in order. When nothing fits, the
    refusal names the plan that overflows least (an even split's 106 MiB),
    not the fastest one, and what a plan may count on."""
    free, _ = _plan_memory_mib(capsys, [])
    assert max(free) > 135
    bounded, data = _plan_memory_mib(capsys, ["--memory-mib", "180"])
    assert data["feasible"] and max(bounded) <= 135
    per_device, data = _plan_memory_mib(capsys, ["--memory-mib", "181,140"])
    assert data["feasible"] and per_device[0] <= 0.75 * 181 and per_device[1] <= 0.75 * 140
    assert main(["plan", "--speeds", "0.9,0.3", "--model", "vgg-cifar", "--batch", "8",
                 "--memory-mib", "120"]) == 2
    assert ("needs 106.1 MiB, over the 90.0 MiB a plan may count on of its 120.0 MiB"
            in capsys.readouterr().err)


def test_a_lower_memory_headroom_lets_a_plan_count_on_more_of_the_budget(capsys):
    """Under 140 MiB the default 25% headroom leaves 105 MiB, below any plan of
    vgg-cifar at batch 8; with --memory-headroom 0 the whole 140 MiB counts."""
    argv = ["plan", "--speeds", "0.9,0.3", "--model", "vgg-cifar", "--batch", "8",
            "--memory-mib", "140"]
    assert main(argv) == 2
    assert "over the 105.0 MiB a plan may count on of its 140.0 MiB" in capsys.readouterr().err
    full, data = _plan_memory_mib(capsys, ["--memory-mib", "140", "--memory-headroom", "0"])
    assert data["feasible"] and 105 < max(full) <= 140
    assert main(argv + ["--memory-headroom", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["meshpar plan: error: --memory-headroom must be in [0, 1), got 1.0"]


def test_plan_plot_draws_a_plan_that_leaves_a_device_idle(tmp_path, capsys):
    from meshpar.cli import main

    png, plan_file = tmp_path / "plan.png", tmp_path / "plan.json"
    assert main(["plan", "--speeds", "1.0,0.01", "--model", "vgg-cifar-small", "--batch", "8",
                 "--method", "proportional", "--plot", str(png), "--out", str(plan_file),
                 "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["devices"]) == 1  # the slow one idle
    assert png.read_bytes()[:4] == b"\x89PNG" and plan_file.exists()


def test_plan_plot_writes_a_png(tmp_path):
    from meshpar.cli import main

    out = tmp_path / "plan.png"
    assert main(["plan", "--speeds", "1.0,0.5,0.3,0.2", "--model", "resattnet3d-small",
                 "--batch", "8", "--method", "proportional", "--plot", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_plan_out_over_an_earlier_plan_says_it_replaced_it(tmp_path, capsys):
    out = tmp_path / "plan.json"
    argv = ["plan", "--speeds", "0.9,0.3", "--model", "vgg-cifar-small", "--batch", "4",
            "--method", "proportional", "--out", str(out)]
    assert main(argv) == 0
    assert "replaced" not in capsys.readouterr().err
    assert main(argv) == 0
    assert f"meshpar plan: note: replaced the earlier {out}" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["plan", "profile"])
def test_out_over_a_file_of_another_kind_is_refused_and_kept(tmp_path, capsys, command):
    """An earlier plan (profile) is replaced; a file that is not one is something the
    user saved: exit 2, one line, the file as it was."""
    out = tmp_path / "mine.json"
    out.write_text('{"mine": 1}')
    argv = (["plan", "--speeds", "0.9,0.3", "--model", "vgg-cifar-small", "--batch", "4",
             "--method", "proportional"] if command == "plan"
            else ["profile", "--quick", "--repeats", "1"])
    assert main(argv + ["--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    kind = "plan" if command == "plan" else "device profile"
    assert len(err) == 1 and f"{out} exists and is not a {kind}; it is kept" in err[0]
    assert out.read_text() == '{"mine": 1}'


def test_a_mesh_axis_that_splits_nothing_is_said():
    """`plan --all-devices` on a model too small to split gave a model:4 mesh with
    every dimension replicated and said nothing: four devices doing one device's work."""
    from meshpar.cli.plan import format_plan
    from meshpar.planning.plan import Plan

    devices = tuple(f"/job:worker/task:{i}/device:CPU:0" for i in range(4))
    copied = Plan(method="ga", model="vgg-cifar-small", batch=1,
                  mesh_shape=(("batch", 1), ("model", 4)), layout=(), devices=devices,
                  split_weights={"batch": [1.0], "model": [1.0] * 4})
    split = dataclasses.replace(copied, layout=(("conv1_filters", "model"),))
    assert ("note: nothing is split on mesh axis model: its 4 devices each compute the same "
            "work, no faster than one") in format_plan(copied).splitlines()
    assert "nothing is split" not in format_plan(split)


@pytest.mark.parametrize("method", ["exact", "proportional", "even"])
def test_a_seed_given_to_a_planner_that_draws_nothing_is_refused(capsys, method):
    """Only the GA draws random numbers: another method with --seed would plan the
    same whatever the seed, in silence."""
    rc = main(["plan", "--speeds", "1.0,0.5", "--model", "vgg-cifar-small", "--batch", "4",
               "--method", method, "--seed", "3"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert f"--seed goes with --method ga; --method {method} would ignore it" in err[0]
