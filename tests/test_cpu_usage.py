"""Each worker's CPU time read from the kernel (meshpar.runtime.cpu_usage): the
formulas on made-up samples, and the readings on real processes."""
import os
import subprocess
import sys
import time

import pytest

from meshpar.runtime.cpu_usage import (CpuSampler, cpu_seconds_between, process_cpu_seconds,
                                       share_used)

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")


def test_cpu_seconds_between_interpolates_the_samples():
    samples = [(10.0, [0.0, 1.0]), (11.0, [0.5, 1.0]), (13.0, [2.5, 1.2])]
    # 10.5 -> 12.0: worker 0 from 0.25 to 1.5, worker 1 from 1.0 to 1.1
    assert cpu_seconds_between(samples, 10.5, 12.0) == pytest.approx([1.25, 0.1])
    assert cpu_seconds_between(samples, 10.0, 13.0) == pytest.approx([2.5, 0.2])


def test_a_window_the_samples_do_not_cover_has_no_reading():
    samples = [(10.0, [0.0]), (11.0, [0.5])]
    assert cpu_seconds_between(samples, 9.0, 10.5) is None
    assert cpu_seconds_between(samples, 10.5, 11.5) is None
    assert cpu_seconds_between(samples[:1], 10.0, 10.0 + 1e-9) is None
    with pytest.raises(ValueError, match="end after it starts"):
        cpu_seconds_between(samples, 10.5, 10.5)


def test_share_used_is_cpu_time_over_the_window_times_the_share():
    assert share_used([0.9, 0.15], 2.0, [0.9, 0.3]) == pytest.approx([0.5, 0.25])
    with pytest.raises(ValueError, match="2 CPU readings for 1 shares"):
        share_used([1.0, 1.0], 1.0, [1.0])
    with pytest.raises(ValueError, match="> 0"):
        share_used([1.0], 0.0, [1.0])


def test_a_busy_process_is_read_busy_and_a_sleeping_one_idle():
    busy = subprocess.Popen([sys.executable, "-c",
                             "import time\nt = time.time()\nwhile time.time() - t < 5: pass"])
    asleep = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        time.sleep(0.5)  # past the interpreters' start-up
        with CpuSampler([busy.pid, asleep.pid], interval=0.02) as sampler:
            time.sleep(1.0)
        start, end = sampler.samples[0][0], sampler.samples[-1][0]
        used = sampler.cpu_seconds_between(start, end)
        # two cores, one busy loop: at least a good part of a core (a shared host)
        assert used[0] > 0.3 * (end - start)
        assert used[1] < 0.05 * (end - start)
        assert process_cpu_seconds(busy.pid) >= sampler.samples[-1][1][0]
        times = [t for t, _ in sampler.samples]
        assert times == sorted(times) and len(times) > 10
    finally:
        for p in (busy, asleep):
            p.kill()
            p.wait()


def test_the_sampler_stops_at_a_process_that_exited():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    sampler = CpuSampler([gone.pid], interval=0.01)
    sampler.start()
    sampler.stop()
    assert sampler.samples == []
    with pytest.raises(ValueError, match="interval"):
        CpuSampler([1], interval=0)
