"""``meshpar plan`` picks the same devices whatever order ``--speeds`` and
``--memory-mib`` list them in, where devices tie on speed or on memory.

With device subsets (the CLI's default) the planner tries the fastest k
devices and, when none of those fits, the k with the most memory. Ties were
broken by the listing order, so the devices tried, and the plan, depended on
it: ``--speeds 1.0,0.5,0.5 --memory-mib 120,30,60`` (resattnet3d-small, batch
8) took the 1.0 device alone (15.11 ms), and the same devices listed
``1.0,0.5,0.5 / 120,60,30`` the 1.0 and the roomier 0.5 device (11.37 ms);
``--speeds 0.9,0.3,0.6 --memory-mib 10,120,120 --method even`` tried the 0.3
device alone when it was listed before the 0.6 one. Of devices of one speed
the roomier is now taken first, of one memory the faster.
"""
import itertools
import json

import pytest

from meshpar.cli import main

CASES = [((1.0, 1.0, 0.5), (30, 120, 120)),
         ((1.0, 0.5, 0.5), (120, 30, 60)),
         ((0.9, 0.3, 0.6), (10, 120, 120))]


def _plan(capsys, speeds, memory, method):
    args = ["plan", "--speeds", ",".join(map(str, speeds)), "--memory-mib",
            ",".join(map(str, memory)), "--model", "resattnet3d-small", "--batch", "8",
            "--method", method, "--json"]
    if method == "ga":
        args += ["--generations", "5", "--population", "16", "--seed", "1"]
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def _relabelled(plan, speeds, memory):
    """The plan with each device replaced by its speed and memory: its mesh, and for
    every device its (speed, memory, samples, split sizes of its column)."""
    cols = plan["mesh_shape"][1][1]
    batch_dim = plan["layout"][0][0]
    sizes = plan["split_sizes"]
    placed = []
    for k, device in enumerate(plan["devices"]):
        task = int(device.split("task:")[1].split("/")[0])
        row, col = divmod(k, cols)
        columns = tuple(sorted((d, s[col]) for d, s in sizes.items() if d != batch_dim))
        placed.append((speeds[task], memory[task], sizes[batch_dim][row], columns))
    return plan["mesh_shape"], sorted(placed)


@pytest.mark.parametrize("method", ["ga", "exact", "proportional", "even"])
@pytest.mark.parametrize("speeds, memory", CASES)
def test_tied_devices_are_chosen_whatever_the_listing_order(capsys, method, speeds, memory):
    found = {}
    for order in itertools.permutations(range(3)):
        s = [speeds[i] for i in order]
        m = [memory[i] for i in order]
        plan = _plan(capsys, s, m, method)
        assert plan["feasible"]
        found[order] = (plan["predicted_step_seconds"], _relabelled(plan, s, m))
    first = found[(0, 1, 2)]
    for order, got in found.items():
        assert got[0] == pytest.approx(first[0], rel=1e-9), order
        assert got[1] == first[1], order
