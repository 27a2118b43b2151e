"""A cluster profile times its steps with the graph rewrites of the training it plans:
`meshpar train` runs with op determinism (TF_DETERMINISTIC_OPS=1 unless set), which
turns Grappler's arithmetic optimizer off, so the profile's session does too."""
import socket

import pytest
import tensorflow.compat.v1 as tf
from tensorflow.core.protobuf import rewriter_config_pb2
from tensorflow.python.framework import config as tf_config

from meshpar.runtime import client as client_module
from meshpar.runtime import profiling

OFF = rewriter_config_pb2.RewriterConfig.OFF


@pytest.mark.parametrize("value, expected", [(None, True), ("1", True), ("true", True),
                                             ("0", False), ("false", False)])
def test_training_determinism_is_what_train_runs(monkeypatch, value, expected):
    """Unset: train sets it to 1. Set: what it says (op determinism not enabled here)."""
    monkeypatch.setattr(tf_config, "is_op_determinism_enabled", lambda: False)
    if value is None:
        monkeypatch.delenv("TF_DETERMINISTIC_OPS", raising=False)
    else:
        monkeypatch.setenv("TF_DETERMINISTIC_OPS", value)
    assert client_module.training_determinism() is expected


@pytest.fixture(scope="module")
def worker_address():
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        address = f"localhost:{probe.getsockname()[1]}"
    tf.distribute.Server(tf.train.ClusterSpec({"worker": [address]}), job_name="worker",
                         task_index=0, start=True)
    return address


def _profile_rewrites(monkeypatch, address, **kwargs):
    """The arithmetic optimizer settings of the sessions that ran the profile's graph
    (the device check's session lists devices only), and the profile."""
    made = []

    class Recording(tf.Session):
        def __init__(self, target="", graph=None, config=None):
            if graph is not None:
                made.append(config.graph_options.rewrite_options.arithmetic_optimization)
            super().__init__(target, graph=graph, config=config)

    monkeypatch.setattr(tf, "Session", Recording)
    profile = profiling.profile_cluster_workers([address], sizes=[(1, 4, 2, 4)], repeats=1,
                                                transfer_bytes=64, **kwargs)
    return made, profile


def test_profile_session_runs_without_the_arithmetic_optimizer_as_train_does(
        monkeypatch, worker_address):
    monkeypatch.delenv("TF_DETERMINISTIC_OPS", raising=False)  # train's default then: on
    made, profile = _profile_rewrites(monkeypatch, worker_address)
    assert made and all(setting == OFF for setting in made)
    assert profile.extra["deterministic"] is True


def test_profile_without_determinism_keeps_the_optimizer(monkeypatch, worker_address):
    made, profile = _profile_rewrites(monkeypatch, worker_address, deterministic=False)
    assert made and all(setting != OFF for setting in made)
    assert profile.extra["deterministic"] is False


def test_profile_refuses_a_determinism_that_is_not_a_bool(worker_address):
    with pytest.raises(TypeError, match="deterministic"):
        profiling.profile_cluster_workers([worker_address], sizes=[(1, 4, 2, 4)], repeats=1,
                                          deterministic="no")
