"""Regression guards (they pass on the code they were written on): the GA's plan is
a function of its inputs and ``--seed`` alone, in any process, and any seed lands
near the exact planner's optimum.

Python salts ``hash()`` of strings per process (``PYTHONHASHSEED``): a set or a
hash-ordered walk of device or dimension names in the planner would give each
process its own plan. Two processes with different salts must print the same
plan, all but its planning time (a clock reading).
"""
import json
import os
import subprocess
import sys

import pytest

from meshpar.models import describe_model
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.planners import plan

ARGS = ["--speeds", "1.0,0.6,0.6,0.3", "--memory-mib", "400,90,150,400", "--model",
        "vgg-cifar-small-pairs", "--batch", "7", "--seed", "5", "--generations", "20", "--json"]


def _plan_in_a_process(salt: str) -> dict:
    env = dict(os.environ, PYTHONHASHSEED=salt, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-m", "meshpar", "plan", *ARGS], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    found.pop("planning_seconds")
    return found


def test_one_seed_gives_one_plan_whatever_the_process_hash_salt():
    assert _plan_in_a_process("1") == _plan_in_a_process("2")


@pytest.mark.parametrize("name, speeds, batch, memory_mib", [
    ("resattnet3d-tiny", [1.0, 0.5, 0.5, 0.2], 7, None),
    ("vgg-cifar-small-pairs", [0.9, 0.3, 0.6], 6, [60, 200, 200]),
])
def test_every_seed_lands_within_one_percent_of_the_optimum(name, speeds, batch, memory_mib):
    description = describe_model(name)
    cluster = ClusterSpec.from_speeds(speeds)
    if memory_mib:
        cluster = cluster.with_memory([m * 2 ** 20 for m in memory_mib])
    best = plan(description, cluster, batch, method="exact", subsets=True)
    for seed in range(4):
        found = plan(description, cluster, batch, method="ga", seed=seed, subsets=True,
                     generations=30)
        assert found.feasible
        assert found.predicted_step_seconds <= 1.01 * best.predicted_step_seconds, seed
