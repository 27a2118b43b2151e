"""README.rst: ``meshpar bench memory`` "sets the count next to their peak memory
growth: 0.77-1.56 of it", the count over the measured need (what the 0.25 headroom
covers: the count up to 23% under). The README had it the other way round ("their
peak memory growth next to the count: 0.77-1.56 of it")."""
from meshpar.bench import memory as bench_memory

MIB = 2 ** 20


def test_the_table_gives_the_count_over_the_measured_growth():
    task = {"predicted_bytes": 77 * MIB, "measured_bytes": 100 * MIB}
    result = {"models": [{"model": "vgg-cifar-small", "batch": 4, "steps": 2,
                          "strategies": {"alone-0": {"mesh": "batch:1;model:1",
                                                     "tasks": [task]}}}]}
    table = bench_memory.format_table(result)
    assert "predicted / measured MiB" in table
    assert "77.0 /   100.0 (0.77)" in table
