"""``meshpar plan --method even|proportional`` says that none of *its* plans fits.

Those two split without regard to memory (evenly; by speed), so when none of their
plans fits, others may: speeds 1000,1,1 at batch 10**6 (vgg-cifar-small, 16 GiB
devices) put 998,004 samples on the fast device, and ``--method proportional``
said 'no plan fits in memory', while ``--method even`` gives a plan that fits on
the same cluster. The refusal now names the method and the methods that move
shares to where they fit; ga and exact, which do, keep 'no plan fits in memory'.
"""
import json

import pytest

from meshpar.cli import main

ARGS = ["plan", "--speeds", "1000,1,1", "--batch", "1000000", "--model", "vgg-cifar-small"]


def _error(capsys, args):
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("meshpar plan: error: "), err
    return err[0]


def test_proportional_says_none_of_its_plans_fits_where_another_method_fits(capsys):
    assert main(ARGS + ["--method", "even", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["feasible"]  # a plan that fits exists
    err = _error(capsys, ARGS + ["--method", "proportional"])
    assert "no proportional plan fits in memory: /job:worker/task:0/device:CPU:0 needs" in err
    assert err.endswith("; --method proportional does not move shares to where they fit, "
                        "--method exact and ga do")


@pytest.mark.parametrize("method, says", [
    ("even", "no even plan fits in memory"), ("proportional", "no proportional plan fits"),
    ("ga", "no plan fits in memory"), ("exact", "no plan fits in memory")])
def test_a_budget_nothing_fits_names_the_method_that_does_not_search(capsys, method, says):
    err = _error(capsys, ["plan", "--speeds", "1,0.5", "--model", "vgg-cifar-small",
                          "--memory-mib", "1", "--method", method])
    assert says in err
    assert ("--method exact and ga do" in err) == (method in ("even", "proportional"))
