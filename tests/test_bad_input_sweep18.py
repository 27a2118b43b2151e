"""Bad-input sweep 18: the Python API a notebook calls directly (LocalCluster, the
re-balancing options and speed monitor, the cost model, clusters), each argument
either taken as meant or refused naming it; nothing here starts a worker."""
import math

import numpy as np
import pytest

from meshpar.runtime.local_cluster import LocalCluster


# ------------------------------------------------------------------------ LocalCluster
@pytest.mark.parametrize("kwargs, error, words", [
    (dict(pin="no"), TypeError, "LocalCluster pin must be True or False"),
    (dict(pin=0), TypeError, "LocalCluster pin must be True or False"),
    (dict(start_timeout=math.nan), ValueError, "LocalCluster start_timeout must be finite"),
    (dict(start_timeout=-1), ValueError, "LocalCluster start_timeout must be finite and > 0"),
    (dict(start_timeout="30"), TypeError, "LocalCluster start_timeout must be a number"),
    (dict(start_timeout=True), TypeError, "LocalCluster start_timeout must be a number"),
    (dict(memory_bytes=1e9), TypeError, "LocalCluster memory_bytes must be one number per "
                                        "worker"),
    (dict(memory_bytes=["1e9"]), TypeError, "LocalCluster memory_bytes[0] must be a number"),
    (dict(memory_bytes=[math.inf]), ValueError, "LocalCluster memory_bytes[0] must be finite"),
])
def test_local_cluster_names_a_wrong_argument(kwargs, error, words):
    """pin="no" pinned the workers (bool() of a string), a NaN start_timeout never
    passed (start() waited for good on a worker that never served), "30" and True were
    read as 30 and 1 s, and memory_bytes "1e9" as a number or 1e9 as
    "'float' object is not iterable"."""
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        LocalCluster([1.0], throttle="none", **kwargs)


def test_local_cluster_takes_numpy_values():
    """numpy's numbers and bools are taken (period_us=np.int64(10000) was refused as
    'must be 1000 to 1000000 microseconds, got 10000')."""
    cluster = LocalCluster(np.array([0.5, 1.0]), throttle="signal", pin=np.bool_(False),
                           period_us=np.int64(10_000), start_timeout=np.float32(30))
    assert (cluster.pin, cluster.period_us, cluster.start_timeout) == (False, 10_000, 30.0)
    assert isinstance(cluster.period_us, int) and isinstance(cluster.start_timeout, float)
