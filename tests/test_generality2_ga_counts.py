"""The GA reports the generations it ran, not one more.

``history`` holds the first population's best and then one entry per
generation, and the plan's ``extra["generations"]`` and ``meshpar plan``'s
'GA history ... over N generations' were its length: ``--generations 5``
reported 6 (and the default 60 without improvement, 61).
"""
import pytest

from meshpar.cli import main
from meshpar.models import describe_model
from meshpar.planning.planners import plan


@pytest.mark.parametrize("generations", [1, 5, 12])
def test_extra_generations_is_what_ran(generations):
    p = plan(describe_model("resattnet3d-tiny"), [1.0, 0.5, 0.3], 5, method="ga",
             generations=generations, patience=0)
    assert p.extra["generations"] == generations
    assert len(p.history) == generations + 1


def test_the_table_says_how_many_generations_ran(capsys):
    assert main(["plan", "--speeds", "1.0,0.5,0.3", "--model", "resattnet3d-tiny", "--batch",
                 "5", "--generations", "5", "--all-devices"]) == 0
    assert "over 5 generations" in capsys.readouterr().out
