"""``meshpar train --cluster cluster.json`` (or ``predict``) with two workers and
neither ``--plan`` nor ``--speeds`` said ``mesh all:1 has 1 processors but 2
devices were given``: the one-device mesh was handed every worker, devices the
user had not given. Found walking the docs as a new user (``train --cluster
cluster.json --synthetic --model resattnet3d-tiny``). It now says to give a
plan or one speed per worker; one worker, or one ``--devices`` entry, still
trains on that one device."""
from types import SimpleNamespace

import pytest

from meshpar.cli.train_options import mesh_arguments


def _args(**kw):
    base = dict(devices=None, plan=None, speeds=None, mesh=None, mesh_impl="meshpar",
                cluster="cluster.json", device_type=None, rebalance_options=None)
    return SimpleNamespace(**{**base, **kw})


class _Client:
    def __init__(self, n):
        self.devices = [f"/job:worker/task:{i}/device:CPU:0" for i in range(n)]
        self.tasks = list(range(n))

    def use_only(self, tasks):
        self.tasks = list(tasks)

    def check_reachable(self):
        pass

    def check_devices(self, devices):
        pass


def test_a_cluster_of_two_workers_needs_a_plan_or_speeds():
    with pytest.raises(ValueError) as err:
        mesh_arguments(_args(), None, _Client(2))
    message = str(err.value)
    assert "the cluster (cluster.json) has 2 workers" in message
    assert "--plan" in message and "--speeds 1,1" in message
    assert "devices were given" not in message


def test_devices_of_this_machine_need_them_too():
    with pytest.raises(ValueError, match="--devices names 2 devices: .*--speeds 1,1"):
        mesh_arguments(_args(cluster=None, devices="/cpu:0,/cpu:0"), None, None)


def test_one_worker_or_given_speeds_still_make_a_mesh():
    one = mesh_arguments(_args(), None, _Client(1))
    assert one["mesh_shape"] == "all:1" and one["devices"] == ["/job:worker/task:0/device:CPU:0"]
    two = mesh_arguments(_args(speeds="1,1"), None, _Client(2))
    assert two["mesh_shape"] == "model:2" and len(two["devices"]) == 2
