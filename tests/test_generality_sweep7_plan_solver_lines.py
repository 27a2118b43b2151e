"""HiGHS's debugging traces do not reach ``meshpar plan``'s output.

HiGHS prints ``HighsMipSolverData::transformNewIntegerFeasibleSolution
tmpSolver.run();`` with C's printf whatever ``disp`` says. It was sent to standard
error (tests/test_generality2_plan_json.py: not in front of the JSON), where it stood
in front of the one line of a refusal: ``meshpar plan --speeds 1,0.5,0.3,0.2 --batch
1000000 --method exact --model vgg-cifar-small`` wrote the trace, then 'meshpar plan:
error: exact planner: more than 200,000 batch splits cannot be ruled out; use
--method ga'. The solver's other output still goes to standard error.
"""
import os
import subprocess
import sys

TRACE = b"HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();\n"


def test_the_guard_drops_the_solvers_traces_and_passes_the_rest(capfd):
    from meshpar.planning.planners import milp as M

    print("before")
    with M._solver_output_to_stderr():
        os.write(1, TRACE + b"inside\n" + TRACE)
    print("after")
    out, err = capfd.readouterr()
    assert out == "before\nafter\n" and err == "inside\n"


def test_an_exact_refusal_is_one_line():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-m", "meshpar", "plan", "--speeds", "1,0.5,0.3,0.2",
                           "--batch", "1000000", "--method", "exact", "--model",
                           "vgg-cifar-small"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        "meshpar plan: error: exact planner: more than 200,000 batch splits cannot be ruled "
        "out; use --method ga"]
