"""What ``meshpar profile --cluster`` logs for each size it times: a model's whole
steps are named by their batch (``batch 8``); the conv3d kernel's sizes by their
shape. A model-step profile printed ``size (1,)``, ``size (2,)``: the kernel's
tuple, which reads as a shape of one element."""
from meshpar.runtime.timed_rounds import time_sizes


class _Session:
    """Runs nothing: the timings are not what is checked."""

    def run(self, ops):
        return None


def _logged(sizes, what):
    logs = []
    steps = {(0, size): f"step{size}" for size in sizes}
    time_sizes(_Session(), steps, sizes, {size: 1e9 for size in sizes}, 1, 1, logs.append,
               what)
    return [line.split(":")[0] for line in logs]


def test_a_model_step_profile_logs_each_batch_size():
    assert _logged([(1,), (2,), (8,)], "batch") == ["batch 1", "batch 2", "batch 8"]


def test_the_conv3d_kernel_profile_logs_each_shape():
    assert _logged([(2, 8, 8, 8, 4, 4)], "size") == ["size (2, 8, 8, 8, 4, 4)"]
