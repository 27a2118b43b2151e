"""A cluster may list local emulated devices on one device string (``/device:CPU:0``
twice: ``ClusterSpec`` takes it), but a plan names each of its devices by that
string. Two such devices of other speeds were planned as if the plan could tell
them apart: vgg-cifar-small at batch 8 on 1.0 and 0.3 of ``/device:CPU:0`` gave
every method but even a 6/2 batch split reported at 37 us a step, which the cost
model re-priced from the saved plan at 89 us (it found both devices at the string's
last listing, the slow one), and which of the two a worker is, nothing could say.
Planning now refuses such a cluster, naming the two devices and their string;
devices alike in everything may still share one (either takes either share).
"""
import pytest

from meshpar.cli import main
from meshpar.models import describe_model
from meshpar.planning.cluster import ClusterSpec, DeviceSpec
from meshpar.planning.cost_model import CostModel
from meshpar.planning.planners import METHODS, plan


def _shared(fast=1e11, slow=3e10, memory=(2**34, 2**34)):
    return ClusterSpec((DeviceSpec("a", "/device:CPU:0", ((1.0, fast),), memory[0]),
                        DeviceSpec("b", "/device:CPU:0", ((1.0, slow),), memory[1])))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("cluster", [_shared(), _shared(slow=1e11, memory=(2**34, 2**33))],
                         ids=["speed", "memory"])
def test_unlike_devices_on_one_string_are_refused(method, cluster):
    with pytest.raises(ValueError, match="devices 'a' and 'b' share the device string "
                                         "'/device:CPU:0' but differ"):
        plan(describe_model("vgg-cifar-small"), cluster, 8, method=method)


@pytest.mark.parametrize("method", METHODS)
def test_alike_devices_on_one_string_plan_and_reprice_to_the_time_reported(method):
    model, cluster = describe_model("vgg-cifar-small"), _shared(slow=1e11)
    found = plan(model, cluster, 8, method=method, subsets=False)
    assert found.devices == ("/device:CPU:0",) * 2
    assert float(CostModel(model, cluster, 8).evaluate_plan(found).seconds[0]) == \
        pytest.approx(found.predicted_step_seconds, rel=1e-12)


def test_plan_refuses_such_a_profile_in_one_line(tmp_path, capsys):
    path = tmp_path / "profile.json"
    _shared().save(str(path))
    assert main(["plan", "--profile", str(path), "--model", "vgg-cifar-small",
                 "--method", "proportional"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("meshpar plan: error: devices 'a' and 'b' "
                                               "share the device string"), err
