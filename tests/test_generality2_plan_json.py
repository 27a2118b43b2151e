"""``meshpar plan --json`` prints one JSON object on stdout for every method.

HiGHS, under ``--method exact``, printed a debugging line
(``HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();``)
with C's printf on the process's standard output, in front of the plan's
JSON, so ``json.loads`` of the output failed (vgg-cifar on five devices at
batch 7 or 8). The solver's prints now go to standard error.
"""
import json
import os
import subprocess
import sys

import pytest


def _plan_stdout(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-m", "meshpar", "plan", *args], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("batch", [7, 8])
def test_exact_plan_json_is_the_whole_stdout(batch):
    out = _plan_stdout("--speeds", "1.0,0.5,0.3,0.2,0.1", "--model", "vgg-cifar",
                       "--batch", str(batch), "--method", "exact", "--json")
    plan = json.loads(out)  # the solver's lines are not in it
    assert plan["method"] == "exact" and plan["batch"] == batch
    assert sum(plan["split_sizes"]["batch"]) == batch


def test_exact_plan_table_has_no_solver_lines():
    out = _plan_stdout("--speeds", "1.0,0.5,0.3,0.2,0.1", "--model", "vgg-cifar",
                       "--batch", "7", "--method", "exact")
    assert "Highs" not in out
    assert out.startswith("method            exact")


def test_the_solver_guard_restores_stdout(capfd):
    from meshpar.planning.planners import milp as M

    print("before")
    with M._solver_output_to_stderr():
        os.write(1, b"inside\n")
    print("after")
    out, err = capfd.readouterr()
    assert out == "before\nafter\n" and err == "inside\n"
