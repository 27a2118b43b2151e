"""``meshpar demo`` part 2 prints the planners' predicted steps in ms for a
cluster of relative speeds: it now says that those times are relative (speed 1
taken as 1e11 FLOP/s), not this machine's.

Found walking ``make run`` as a new user: part 2 predicted 9.51 ms a step for
the GA's plan, and part 3 then trained that plan at ~31 ms a step (255
samples/s of batch 8), which read as a cost model off by three times;
``meshpar plan --speeds`` marks the same numbers as relative.
"""
from meshpar.cli.demo import show_plans
from meshpar.planning.cluster import REFERENCE_FLOPS


def test_demo_plans_say_their_times_are_relative(capsys):
    plan = show_plans([0.8, 0.5, 0.3, 0.2], 8)
    out = capsys.readouterr().out
    assert f"{REFERENCE_FLOPS:.0e} FLOP/s" in out and "1e+11" in out
    assert "relative speeds 0.8, 0.5, 0.3, 0.2" in out
    assert "not this machine's step times" in out
    # the rows still give the planners' predicted steps, in ms
    assert f"{plan.predicted_step_seconds * 1000:.2f} ms" in out
