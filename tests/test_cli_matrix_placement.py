"""Where ``train --cluster --plan`` puts a plan's slices, for the cases README's
"Two files, two names" names: the same workers in another order, partly other
workers, and none of the plan's workers (no worker process is started)."""
import pytest

from meshpar.runtime.client import ClusterClient

TASK = "/job:worker/task:{}/device:CPU:0"


@pytest.fixture(scope="module")
def client():
    return ClusterClient(["127.0.0.1:1", "127.0.0.1:2"], check=False)


def test_the_same_workers_listed_in_another_order_keep_their_slices(client):
    placed = client.place([TASK.format(0), TASK.format(1)],
                          plan_addresses=["127.0.0.1:2", "127.0.0.1:1"])
    assert placed == [TASK.format(1), TASK.format(0)]


def test_a_plan_for_partly_other_workers_is_refused(client):
    with pytest.raises(ValueError, match="without 127.0.0.1:9"):
        client.place([TASK.format(0), TASK.format(1)],
                     plan_addresses=["127.0.0.1:1", "127.0.0.1:9"])


def test_a_plan_for_none_of_the_listed_workers_goes_by_its_task_names_with_a_note(client):
    notes = []
    placed = client.place([TASK.format(1), TASK.format(0)],
                          plan_addresses=["127.0.0.1:7", "127.0.0.1:8"], log=notes.append)
    assert placed == [TASK.format(1), TASK.format(0)]
    assert len(notes) == 1 and "none of which this cluster lists" in notes[0]
