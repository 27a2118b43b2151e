"""``meshpar plan``'s device table: the memory column said ``memory GiB`` beside
each device, which reads as the device's memory, while it is what the cost
model counts the device needs for its part; and in GiB (``0.049``) where
``--memory-mib`` and plan's own refusal speak MiB (``needs 50.1 MiB``). Found
walking the docs as a new user (``plan --profile profile.json --memory-mib
200``). The table now has ``needs`` and ``has`` (the profile's memory or the
``--memory-mib`` budget), each with its unit."""
from meshpar.cli.plan import format_plan
from meshpar.models import describe_model
from meshpar.planning.cluster import ClusterSpec
from meshpar.planning.planners import plan


def _rows(text):
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.split()[:1] == ["pnum"])
    return lines[at], [line.split() for line in lines[at + 1:]]


def test_device_table_says_need_and_memory_with_units():
    cluster = ClusterSpec.from_speeds([1.0, 0.5]).with_memory([300 * 2**20, 200 * 2**20])
    result = plan(describe_model("resattnet3d-tiny"), cluster, 4, method="proportional",
                  subsets=False)
    header, rows = _rows(format_plan(result, cluster))
    assert header.split() == ["pnum", "(batch,model)", "needs", "has", "device"]
    has = {d.device: d.memory_bytes for d in cluster.devices}
    for p, row in enumerate(rows):
        needs = result.memory_per_device[p]
        assert row[3:5] == [f"{needs / 2**20:.1f}", "MiB"]  # under 1 GiB: MiB
        assert row[5:7] == [f"{has[row[-1]] / 2**20:.1f}", "MiB"]
        assert row[-1] == result.devices[p]


def test_without_a_cluster_the_memory_it_has_is_unknown():
    cluster = ClusterSpec.from_speeds([1.0])
    result = plan(describe_model("resattnet3d-tiny"), cluster, 2, method="even")
    header, rows = _rows(format_plan(result))
    assert rows[0][5] == "-"
