"""The model-step profile times the step `meshpar train` runs by default."""
from collections import Counter

import tensorflow.compat.v1 as tf

from meshpar import models
from meshpar.runtime import profiling
from meshpar.training.estimator import MeshSpec, lower_model
from meshpar.training.recipe import DEFAULT_WEIGHT_DECAY, Recipe

DEVICE = "/job:localhost/replica:0/task:0/device:CPU:0"


def _op_types(build) -> Counter:
    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(0)  # initialisers are random ops; the suite runs deterministic ops
        build()
    return Counter(op.type for op in graph.get_operations())


def _train_step(weight_decay):
    spec = models.get("vgg-cifar-small")

    def build():
        x = tf.zeros((2,) + tuple(models.input_shape(spec.config)))
        y = tf.zeros([2], tf.int32)
        lower_model(spec, x, y, MeshSpec("all:1", devices=[DEVICE]), True,
                    recipe=Recipe(weight_decay=weight_decay))
    return _op_types(build)


def test_the_profiled_step_decays_the_kernels_as_the_default_recipe_does():
    spec = models.get("vgg-cifar-small")
    profiled = _op_types(lambda: profiling._model_step_graph(tf, spec, DEVICE, 2))
    decayed, plain = _train_step(DEFAULT_WEIGHT_DECAY), _train_step(0.0)
    decay_ops = {t: n for t, n in decayed.items() if not plain[t]}  # kinds only the decay runs
    assert decay_ops  # one pass of its own per kernel (TF's fused Adam has no decay)
    assert {t: profiled[t] for t in decay_ops} == decay_ops


def test_meshpar_trains_with_the_decay_the_profile_times_by_default():
    from meshpar.cli import build_parser

    args = build_parser().parse_args(["train", "--synthetic", "--model", "vgg-cifar-small"])
    assert args.weight_decay == DEFAULT_WEIGHT_DECAY > 0
