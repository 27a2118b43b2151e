"""Suite-wide settings: deterministic TF ops, quiet TF logs."""
import os

os.environ.setdefault("TF_DETERMINISTIC_OPS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("MPLBACKEND", "Agg")
# what importing meshpar sets (meshpar/_onednn.py), here too in case a test module
# imports tensorflow first: every test process runs the kernels users get
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")


import sys  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _close_tf_graph_contexts():
    """Leave no TF graph context open after a test (tests/mtf_helpers.py)."""
    yield
    helpers = sys.modules.get("mtf_helpers")
    if helpers is not None:
        helpers.close_graphs()


#: Test modules that start TF worker processes (LocalCluster pins worker i to
#: core i; timed benchmarks and speed re-measurements): under pytest-xdist
#: (`make test` runs two test processes) they all run in one process, one after
#: another, so that no two clusters share the cores, while the other process
#: runs the rest of the suite.
CLUSTER_MODULES = frozenset({
    "test_bench_hetero", "test_bench_memory", "test_bench_train", "test_determinism",
    "test_equivalence_rebalance", "test_equivalence_workers",
    "test_generality_tf_config", "test_local_cluster", "test_placement", "test_rebalance",
    "test_repro_worker_determinism", "test_worker_failure"})


def pytest_collection_modifyitems(config, items):
    """Put every test of :data:`CLUSTER_MODULES` in xdist group ``cluster``."""
    for item in items:
        module = getattr(item, "module", None)  # None: an item not from a Python module
        if module is not None and module.__name__.rsplit(".", 1)[-1] in CLUSTER_MODULES:
            item.add_marker(pytest.mark.xdist_group("cluster"))
