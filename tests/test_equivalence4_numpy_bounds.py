"""Integer uniform draws with numpy bounds on uneven meshes are one device's.

``HeterogeneousMeshImpl.random`` makes integer ``mtf.random_uniform`` draws from a
counter-based hash of each element's position (any cut draws the same values) only
when the bounds were Python ints: bounds a network computed with numpy
(``maxval=np.int64(classes)``, a 0-d array) fell back to seeding each slice from its
offset, so the draws changed with the mesh, layout and split, and a resumed run drew
the first steps' values again. Numpy integers are integers now.
"""
import numpy as np
import pytest

from mtf_helpers import HeterogeneousMeshImpl, mtf, new_graph, session, tf

MESHES = [("model:3", "f:model", {"model": [3, 2, 1]}),
          ("batch:2;model:3", "batch:batch;f:model", {"batch": [1, 5], "model": [1, 1, 6]})]


def _draws(mesh_shape, layout, weights, runs=3, **kwargs):
    graph, mesh = new_graph(11)
    shape = mtf.Shape([mtf.Dimension("batch", 6), mtf.Dimension("f", 13)])
    out = mtf.random_uniform(mesh, shape, **kwargs)
    n = int(np.prod([int(a.split(":")[1]) for a in mesh_shape.split(";")]))
    impl = HeterogeneousMeshImpl(mesh_shape, layout, [""] * n, split_weights=weights)
    values = mtf.Lowering(graph, {mesh: impl}).export_to_tf_tensor(out)
    with session() as sess:
        return np.stack([sess.run(values) for _ in range(runs)])


@pytest.mark.parametrize("bounds", [(np.int64(-2), np.int32(9)), (0, np.array(7)),
                                    (np.uint8(3), 40)])
@pytest.mark.parametrize("mesh_shape, layout, weights", MESHES)
def test_integer_draws_with_numpy_bounds_do_not_depend_on_the_mesh(mesh_shape, layout, weights,
                                                                   bounds):
    low, high = bounds
    one = _draws("all:1", "", None, minval=low, maxval=high, dtype=tf.int32)
    assert one.dtype == np.int32 and one.min() >= low and one.max() < high
    assert set(np.unique(one)) == set(range(int(low), int(high)))
    np.testing.assert_array_equal(
        _draws(mesh_shape, layout, weights, minval=low, maxval=high, dtype=tf.int32), one)
    python = _draws("all:1", "", None, minval=int(low), maxval=int(high), dtype=tf.int32)
    np.testing.assert_array_equal(one, python)  # the bounds' type changes nothing


def test_a_bool_or_tensor_bound_is_not_taken_for_an_integer():
    from meshpar.core.random_draws import uniform_arguments

    assert uniform_arguments(tf.random.uniform, dict(minval=0, maxval=np.int64(5),
                                                     dtype=tf.int32)) == (0, 5, tf.int32)
    assert uniform_arguments(tf.random.uniform, dict(minval=False, maxval=5,
                                                     dtype=tf.int32)) is None
    with tf.Graph().as_default():
        assert uniform_arguments(tf.random.uniform, dict(minval=0, maxval=tf.constant(5),
                                                         dtype=tf.int32)) is None
