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
