"""meshpar.core.optim: the unordered mtf step races; the race-free step matches numpy.

The model is a two-layer tanh net, where ordering matters: the gradient of the
first layer needs the second layer's weights, so an update of ``w2`` that runs
before that backward op changes ``g1``.
"""
import numpy as np
import pytest

import meshpar  # noqa: F401  (import shim before mesh_tensorflow)
import mesh_tensorflow as mtf
import tensorflow.compat.v1 as tf

from meshpar.core import optim
from meshpar.core.mesh_impl import HeterogeneousMeshImpl
from mtf_helpers import record_allreduces

ONE_THREAD = tf.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1)
RNG = np.random.RandomState(0)
X = RNG.randn(6, 5).astype(np.float32)
W1 = (RNG.randn(5, 7) * 0.5).astype(np.float32)
W2 = (RNG.randn(7, 3) * 0.5).astype(np.float32)
STEPS = 6
LEARNING_RATES = {"sgd": 0.5, "momentum": 0.2, "adam": 0.1}

MESHES = {
    "one device": ("all:1", "", None),
    "hidden over 3, uneven": ("all:3", "hidden:all", {"all": [3, 2, 2]}),
    "batch 2 x hidden 3, uneven": ("batch:2;model:3", "batch:batch;hidden:model",
                                   {"batch": [2, 1], "model": [3, 2, 1]}),
    "batch 1 x hidden 3, uneven": ("batch:1;model:3", "batch:batch;hidden:model",
                                   {"model": [3, 2, 1]}),
}


def numpy_reference(kind, steps=STEPS, fused=False, weight_decay=0.0):
    """Losses and final weights of the same training in float32 numpy.

    ``fused`` follows the rounding of TF's ResourceApplyAdam kernel (moments as
    ``m += (g - m) * (1 - beta1)``, step ``m * alpha / (sqrt(v) + eps)``): the same
    rule, other float32 rounding, which Adam's division amplifies past 1e-6) and
    applies decoupled weight decay as its own write before the kernel's."""
    lr = np.float32(LEARNING_RATES[kind])
    w = [W1.copy(), W2.copy()]
    slot_a = [np.zeros_like(v) for v in w]
    slot_b = [np.zeros_like(v) for v in w]
    power1 = power2 = np.float32(1.0)
    losses = []
    for _ in range(steps):
        a = np.tanh(X @ w[0])
        y = a @ w[1]
        losses.append(np.mean(y ** 2))
        dy = 2 * y / np.float32(y.size)
        grads = [X.T @ ((dy @ w[1].T) * (1 - a ** 2)), a.T @ dy]
        power1, power2 = power1 * np.float32(0.9), power2 * np.float32(0.999)
        # Decoupled decay (w1 and w2 are kernels): the fused update writes it first.
        decay = np.float32(LEARNING_RATES[kind] * weight_decay)
        for k, g in enumerate(grads):
            w_old = w[k] - w[k] * decay if fused else w[k]
            if kind == "sgd":
                step = lr * g
            elif kind == "momentum":
                slot_a[k] = slot_a[k] * np.float32(0.9) + g
                step = lr * slot_a[k]
            elif fused:
                slot_a[k] += (g - slot_a[k]) * np.float32(1 - np.float32(0.9))
                slot_b[k] += (g * g - slot_b[k]) * np.float32(1 - np.float32(0.999))
                alpha = lr * np.sqrt(np.float32(1) - power2) / (np.float32(1) - power1)
                step = slot_a[k] * alpha / (np.sqrt(slot_b[k]) + np.float32(1e-8))
            else:
                slot_a[k] = slot_a[k] * np.float32(0.9) + g * np.float32(0.1)
                slot_b[k] = slot_b[k] * np.float32(0.999) + g * g * np.float32(0.001)
                lr_t = np.sqrt(1 - power2) / (1 - power1) * lr
                step = slot_a[k] / (np.sqrt(slot_b[k]) + np.float32(1e-8)) * lr_t
            w[k] = w_old - step if fused or not weight_decay else w_old - (step + w_old * decay)
    return np.array(losses), w


def train(kind, mesh, race_free=True, steps=STEPS, check_only=False, bucket=True, fused=True,
          weight_decay=0.0, fetch_ops=False):
    """Train the tiny net with mtf on ``mesh``; losses and final weights.

    With ``check_only``, return :func:`optim.unordered_reads` of one step instead.
    """
    shape, layout, weights = MESHES[mesh]
    with tf.Graph().as_default():
        tf.set_random_seed(1)
        graph = mtf.Graph()
        m = mtf.Mesh(graph, "mesh")
        batch, inp = mtf.Dimension("batch", 6), mtf.Dimension("in", 5)
        hidden, out = mtf.Dimension("hidden", 7), mtf.Dimension("out", 3)
        x = mtf.import_tf_tensor(m, tf.constant(X), [batch, inp])
        w1 = mtf.get_variable(m, "w1", [inp, hidden], initializer=tf.constant_initializer(W1))
        w2 = mtf.get_variable(m, "w2", [hidden, out], initializer=tf.constant_initializer(W2))
        y = mtf.einsum([mtf.tanh(mtf.einsum([x, w1], [batch, hidden])), w2], [batch, out])
        loss = mtf.reduce_mean(mtf.square(y))
        rule = optim.make_optimizer(kind, LEARNING_RATES[kind], fused=fused,
                                    weight_decay=weight_decay)
        updates = (optim.race_free_update_ops(graph, loss, rule, bucket=bucket) if race_free
                   else optim.naive_update_ops(graph, loss, rule))
        n = int(np.prod([int(a.split(":")[1]) for a in shape.split(";")]))
        impl = HeterogeneousMeshImpl(shape, layout, [""] * n, split_weights=weights)
        lowering = mtf.Lowering(graph, {m: impl})
        tf_loss = lowering.export_to_tf_tensor(loss)
        tf_weights = [lowering.export_to_tf_tensor(v) for v in (w1, w2)]
        train_op = tf.group([lowering.lowered_operation(op) for op in updates])
        if check_only:
            return optim.unordered_reads([tf_loss, train_op])
        with tf.Session(config=ONE_THREAD) as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(lowering.copy_masters_to_slices())
            losses = [sess.run([tf_loss, train_op])[0] for _ in range(steps)]
            return np.array(losses), sess.run(tf_weights)


@pytest.mark.parametrize("decay", [0.0, 0.05], ids=["", "decay"])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "mtf ops"])
@pytest.mark.parametrize("mesh", list(MESHES))
@pytest.mark.parametrize("kind", ["sgd", "momentum", "adam"])
def test_race_free_step_matches_numpy_for_six_steps(kind, mesh, fused, decay):
    ref_losses, ref_weights = numpy_reference(kind, fused=fused, weight_decay=decay)
    losses, weights = train(kind, mesh, fused=fused, weight_decay=decay)
    np.testing.assert_allclose(losses, ref_losses, atol=1e-6, rtol=0)
    for got, want in zip(weights, ref_weights):
        # Adam divides by sqrt(v): float32 rounding of tiny gradients shows up
        # relative to the weight, so allow 1e-5 relative on top of 1e-6.
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("mesh", ["one device", "batch 2 x hidden 3, uneven"])
@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_unordered_mtf_step_lets_weight_reads_run_after_their_update(kind, mesh):
    """The naive step leaves reads of ``w2`` (for ``g1``) unordered against
    ``w2 -= ...``; on a split mesh this changes results from run to run. The
    race-free step orders every read before every write."""
    assert train(kind, mesh, race_free=False, check_only=True)
    assert train(kind, mesh, race_free=True, check_only=True) == []


def test_momentum_moves_on_the_first_step_unlike_mtf_momentum():
    losses, _ = train("momentum", "one device", steps=2)
    assert losses[1] < losses[0]


def test_make_optimizer_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown optimizer"):
        optim.make_optimizer("rmsprop", 0.1)


def test_after_all_accepts_pending_allreduce_gradients():
    """mtf.depend fails on a LazyAllreduceSum; after_all materialises it."""
    with tf.Graph().as_default():
        graph = mtf.Graph()
        m = mtf.Mesh(graph, "mesh")
        a, b = mtf.Dimension("a", 5), mtf.Dimension("b", 2)
        x = mtf.import_tf_tensor(m, tf.constant(np.ones((5, 2), np.float32)), [a, b])
        summed = mtf.reduce_sum(x, output_shape=[b])  # split a -> pending all-reduce
        gated = optim.after_all(summed, [summed])
        impl = HeterogeneousMeshImpl("all:2", "a:all", ["", ""], split_weights={"all": [3, 2]})
        lowering = mtf.Lowering(graph, {m: impl})
        out = lowering.export_to_tf_tensor(gated)
        with tf.Session(config=ONE_THREAD) as sess:
            np.testing.assert_allclose(sess.run(out), [5.0, 5.0])


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_gradients_all_reduced_together_equal_one_by_one(kind):
    together = train(kind, "batch 2 x hidden 3, uneven", bucket=True)
    apart = train(kind, "batch 2 x hidden 3, uneven", bucket=False)
    np.testing.assert_allclose(together[0], apart[0], atol=1e-7, rtol=0)
    for got, want in zip(together[1], apart[1]):
        np.testing.assert_allclose(got, want, atol=1e-7, rtol=1e-6)


def test_the_weight_gradients_cross_the_batch_axis_in_one_all_reduce(monkeypatch):
    """w1 and w2 (both split on hidden, uneven) each have a gradient summed over the
    split batch: two all-reduces one by one, one together (besides the forward
    contraction over hidden and the loss's mean)."""
    calls = record_allreduces(monkeypatch)
    train("sgd", "batch 2 x hidden 3, uneven", check_only=True, bucket=False)
    apart, calls[:] = list(calls), []
    train("sgd", "batch 2 x hidden 3, uneven", check_only=True, bucket=True)
    assert sorted(apart) == ["einsum/gradients/einsum_1", "einsum_1",
                             "einsum_1/gradients/einsum_1", "reduce_mean/reduce"]
    assert sorted(calls) == ["allreduce_together", "einsum_1", "reduce_mean/reduce"]


def test_allreduce_together_passes_reduced_tensors_through():
    with tf.Graph().as_default():
        graph = mtf.Graph()
        m = mtf.Mesh(graph, "mesh")
        a, b = mtf.Dimension("a", 5), mtf.Dimension("b", 2)
        x = mtf.import_tf_tensor(m, tf.constant(np.arange(10, dtype=np.float32).reshape(5, 2)),
                                 [a, b])
        pending = mtf.reduce_sum(x, output_shape=[b])  # split a -> pending all-reduce
        whole = x * 2.0  # nothing pending
        outs = optim.allreduce_together([pending, whole])
        impl = HeterogeneousMeshImpl("all:2", "a:all", ["", ""], split_weights={"all": [3, 2]})
        lowering = mtf.Lowering(graph, {m: impl})
        got = [lowering.export_to_tf_tensor(t) for t in outs]
        with tf.Session(config=ONE_THREAD) as sess:
            summed, doubled = sess.run(got)
    np.testing.assert_array_equal(summed, [20.0, 25.0])
    np.testing.assert_array_equal(doubled, np.arange(10).reshape(5, 2) * 2.0)


def test_weight_decay_changes_the_weights():
    """The decay cases of the numpy comparison would pass if decay did nothing in
    both; it does something."""
    decayed, plain = train("adam", "one device", weight_decay=0.05), train("adam", "one device")
    assert max(np.max(np.abs(a - b)) for a, b in zip(decayed[1], plain[1])) > 1e-3


@pytest.fixture
def step_types(monkeypatch):
    """``step_types(kind, fused)``: the TF op types (with counts) one lowered training
    step of the tiny net runs on the uneven 2 x 3 mesh (6 devices)."""
    from collections import Counter
    seen, original = [], optim.unordered_reads

    def recording(fetches):
        roots = [f.op if isinstance(f, tf.Tensor) else f for f in tf.nest.flatten(fetches)]
        seen.append(Counter(op.type for op in optim._ancestors(roots)))
        return original(fetches)

    monkeypatch.setattr(optim, "unordered_reads", recording)

    def types(kind, fused, mesh="batch 2 x hidden 3, uneven"):
        assert train(kind, mesh, fused=fused, check_only=True) == []
        return seen.pop()
    return types


def test_a_batch_axis_of_one_row_sums_nothing_and_copies_no_gradient(step_types):
    """On ``batch:1`` the weight gradients' pending sums are over one row: no flat
    concatenation and split of them (two 18 MB copies a step on vgg-cifar); with
    two rows, one of each per device (the numerics: test_race_free_step_matches_numpy)."""
    one_row = step_types("adam", True, "batch 1 x hidden 3, uneven")
    assert one_row["ConcatV2"] == 0 and one_row["SplitV"] == 0
    two_rows = step_types("adam", True)
    assert two_rows["ConcatV2"] >= 6 and two_rows["SplitV"] >= 6


def test_fused_adam_is_one_kernel_per_variable_slice(step_types):
    """Two variables on six devices: twelve ResourceApplyAdam kernels, no square root
    (the kernel computes lr_t and sqrt(v) itself), and at least 8 ops fewer per
    variable slice than the mtf arithmetic."""
    fused, plain = step_types("adam", True), step_types("adam", False)
    assert fused["ResourceApplyAdam"] == 12
    assert plain["ResourceApplyAdam"] == 0
    assert fused["Sqrt"] == 0 and plain["Sqrt"] >= 12
    assert sum(fused.values()) < sum(plain.values()) - 12 * 8


def test_fused_and_mtf_updates_keep_the_same_variables():
    """Same slot names and shapes, so a checkpoint of one restores into the other."""
    def names(fused):
        with tf.Graph().as_default():
            graph = mtf.Graph()
            m = mtf.Mesh(graph, "mesh")
            batch, inp = mtf.Dimension("batch", 6), mtf.Dimension("in", 5)
            out = mtf.Dimension("out", 3)
            x = mtf.import_tf_tensor(m, tf.constant(X), [batch, inp])
            w = mtf.get_variable(m, "w", [inp, out], initializer=tf.zeros_initializer())
            loss = mtf.reduce_mean(mtf.square(mtf.einsum([x, w], [batch, out])))
            optim.race_free_update_ops(graph, loss, optim.Adam(0.1, fused=fused))
            return sorted((v.name, tuple(v.shape.to_integer_list)) for v in graph.all_variables)
    assert names(True) == names(False)
    assert any(n.endswith("/adam_v") for n, _ in names(True))


def test_reference_variables_take_the_mtf_arithmetic():
    """With resource variables off (``disable_v2_behavior`` does that) there is no
    handle to update in place: the rule is written as mtf ops, and still trains as
    the numpy reference says."""
    tf.disable_resource_variables()
    try:
        losses, weights = train("adam", "batch 2 x hidden 3, uneven", fused=True)
    finally:
        tf.enable_resource_variables()
    ref_losses, ref_weights = numpy_reference("adam", fused=False)
    np.testing.assert_allclose(losses, ref_losses, atol=1e-6, rtol=0)
    for got, want in zip(weights, ref_weights):
        np.testing.assert_allclose(got, want, atol=1e-6, rtol=1e-5)
