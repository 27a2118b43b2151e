"""HeterogeneousMeshImpl: slice arithmetic, validation, data movement."""
import numpy as np
import pytest

from mtf_helpers import (HeterogeneousMeshImpl, fresh_tf_graph, mtf, new_graph, run_lowered,
                         session, tf)
from meshpar.core.mesh_impl import UnevenLayoutError

MESH = "batch:2;model:3"
LAYOUT = "batch:batch;filters:model"
WEIGHTS = {"batch": [2, 1], "model": [3, 2, 1]}


def impl_2x3(**kw):
    kw.setdefault("split_weights", WEIGHTS)
    return HeterogeneousMeshImpl(MESH, LAYOUT, [""] * 6, **kw)


def test_split_sizes_follow_axis_weights_and_need_no_divisibility():
    impl = impl_2x3()
    assert impl.split_sizes(mtf.Dimension("filters", 13)) == [7, 4, 2]
    assert impl.split_sizes(mtf.Dimension("batch", 12)) == [8, 4]
    assert impl.split_sizes(mtf.Dimension("height", 12)) is None
    even = HeterogeneousMeshImpl("model:3", "filters:model", [""] * 3)
    assert even.split_sizes(mtf.Dimension("filters", 13)) == [5, 4, 4]


def test_dimension_weights_override_axis_weights():
    impl = HeterogeneousMeshImpl("model:3", "f1:model;f2:model", [""] * 3,
                                 split_weights={"model": [1, 1, 1]},
                                 dim_split_weights={"f2": [1, 1, 2]})
    assert impl.split_sizes(mtf.Dimension("f1", 12)) == [4, 4, 4]
    assert impl.split_sizes(mtf.Dimension("f2", 12)) == [3, 3, 6]


def test_slice_table_of_the_docstring():
    impl = impl_2x3()
    shape = mtf.Shape([mtf.Dimension("batch", 12), mtf.Dimension("filters", 12)])
    begins = [impl.slice_begin(shape, p) for p in range(6)]
    shapes = impl.slice_shapes(shape)
    assert begins == [[0, 0], [0, 6], [0, 10], [8, 0], [8, 6], [8, 10]]
    assert shapes == [[8, 6], [8, 4], [8, 2], [4, 6], [4, 4], [4, 2]]
    assert impl.laid_out_size(shape) == 144
    assert impl.slice_size(shape) == 48
    assert impl.is_uneven(shape)


def test_common_slice_shape_of_an_uneven_tensor_is_an_error_naming_the_dimension():
    impl = impl_2x3()
    shape = mtf.Shape([mtf.Dimension("filters", 13)])
    with pytest.raises(UnevenLayoutError, match="'filters'"):
        impl.slice_shape(shape)
    with impl.on_processor(2):
        assert impl.slice_shape(shape) == [2]


@pytest.mark.parametrize("kwargs, message", [
    (dict(devices=[""] * 5), "6 processors but 5 devices"),
    (dict(split_weights={"modle": [1, 1, 1]}), "mesh axis 'modle'"),
    (dict(split_weights={"model": [1, 1]}), "has 2 weights; mesh axis .model. has 3"),
    (dict(split_weights={"model": [1, -1, 1]}), "positive"),
    (dict(split_weights={"model": [1, float("nan"), 1]}), "finite"),
    (dict(dim_split_weights={"height": [1, 1, 1]}), "'height'"),
    (dict(dim_split_weights={"filters": [1, 1]}), "has 2 weights"),
])
def test_bad_construction_arguments_raise_clear_errors(kwargs, message):
    devices = kwargs.pop("devices", [""] * 6)
    with pytest.raises(ValueError, match=message):
        HeterogeneousMeshImpl(MESH, LAYOUT, devices, **kwargs)


def test_dimension_smaller_than_axis_is_an_error_naming_it():
    impl = impl_2x3()
    with pytest.raises(ValueError, match="'filters' \\(size 2\\)"):
        impl.split_sizes(mtf.Dimension("filters", 2))


def test_two_dimensions_of_one_tensor_on_one_axis_is_an_error():
    impl = HeterogeneousMeshImpl("model:3", "a:model;b:model", [""] * 3)
    shape = mtf.Shape([mtf.Dimension("a", 6), mtf.Dimension("b", 6)])
    with pytest.raises(ValueError, match="same Mesh Dimension"):
        impl.slice_shapes(shape)


def _uneven_tensor_roundtrip(impl, value, dims):
    graph, mesh = new_graph()
    x = mtf.import_tf_tensor(mesh, tf.constant(value), mtf.Shape(dims))
    return run_lowered(graph, mesh, impl, [x])[0]


def test_import_export_roundtrip_of_an_uneven_tensor():
    value = np.arange(7 * 13, dtype=np.float32).reshape(7, 13)
    dims = [mtf.Dimension("batch", 7), mtf.Dimension("filters", 13)]
    np.testing.assert_array_equal(_uneven_tensor_roundtrip(impl_2x3(), value, dims), value)


def test_make_slices_cut_where_slice_begin_says():
    impl = impl_2x3()
    value = np.arange(7 * 13, dtype=np.float32).reshape(7, 13)
    shape = mtf.Shape([mtf.Dimension("batch", 7), mtf.Dimension("filters", 13)])
    fresh_tf_graph()
    slices = impl.make_slices(tf.constant(value), shape)
    with session() as sess:
        got = sess.run(slices)
    for pnum, piece in enumerate(got):
        b0, f0 = impl.slice_begin(shape, pnum)
        bs, fs = impl.slice_shape(shape, pnum)
        np.testing.assert_array_equal(piece, value[b0:b0 + bs, f0:f0 + fs])


def _laid_out(impl, pieces):
    return impl.LaidOutTensor([tf.constant(p) for p in pieces])


def test_allconcat_joins_uneven_pieces():
    fresh_tf_graph()
    impl = HeterogeneousMeshImpl("model:3", "", [""] * 3)
    pieces = [np.full((2, s), i, np.float32) for i, s in enumerate([3, 1, 2])]
    out = impl.allconcat(_laid_out(impl, pieces), 0, 1)
    with session() as sess:
        for got in sess.run(out.tensor_list):
            np.testing.assert_array_equal(got, np.concatenate(pieces, 1))


def test_allsplit_cuts_by_the_sizes_it_is_given_and_evenly_by_default():
    fresh_tf_graph()
    impl = HeterogeneousMeshImpl("model:3", "filters:model", [""] * 3,
                                 split_weights={"model": [3, 2, 1]})
    value = np.arange(12, dtype=np.float32)
    whole = _laid_out(impl, [value] * 3)
    by_dim = impl.allsplit(whole, 0, 0, sizes=mtf.Dimension("filters", 12))
    by_list = impl.allsplit(whole, 0, 0, sizes=[1, 1, 10])
    even = impl.allsplit(whole, 0, 0)  # EVEN: the axis weights play no part
    with session() as sess:
        got = sess.run([by_dim.tensor_list, by_list.tensor_list, even.tensor_list])
    assert [g.tolist() for g in got[0]] == [value[:6].tolist(), value[6:10].tolist(),
                                            value[10:].tolist()]
    assert [g.tolist() for g in got[1]] == [[0.0], [1.0], value[2:].tolist()]
    assert [g.tolist() for g in got[2]] == [value[:4].tolist(), value[4:8].tolist(),
                                            value[8:].tolist()]


def test_allsplit_with_tensor_valued_which_takes_equal_pieces_only():
    fresh_tf_graph()
    impl = HeterogeneousMeshImpl("model:2", "", [""] * 2)
    value = np.arange(6, dtype=np.float32)
    which = impl.LaidOutTensor([tf.constant(1), tf.constant(0)])
    out = impl.allsplit(_laid_out(impl, [value] * 2), 0, 0, which=which)
    with session() as sess:
        got = sess.run(out.tensor_list)
    assert [g.tolist() for g in got] == [[3.0, 4.0, 5.0], [0.0, 1.0, 2.0]]
    with pytest.raises(UnevenLayoutError, match="equal pieces"):
        impl.allsplit(_laid_out(impl, [value] * 2), 0, 0, which=which, sizes=[2, 4])


@pytest.mark.parametrize("sizes, message", [
    ([6, 6], "do not cut a length of 12 into 3 pieces"),
    ([6, 4, 3], "do not cut a length of 12"),
    ([7, 6, -1], "do not cut"),
])
def test_collective_sizes_that_do_not_fit_are_refused(sizes, message):
    fresh_tf_graph()
    impl = HeterogeneousMeshImpl("model:3", "", [""] * 3)
    value = np.zeros((12,), np.float32)
    with pytest.raises(ValueError, match=message):
        impl.allsplit(_laid_out(impl, [value] * 3), 0, 0, sizes=sizes)
    with pytest.raises(ValueError, match=message):
        impl.alltoall(_laid_out(impl, [value] * 3), 0, 0, 0, sizes=sizes)


def test_alltoall_moves_the_pieces_it_is_given():
    fresh_tf_graph()
    impl = HeterogeneousMeshImpl("model:3", "", [""] * 3, split_weights={"model": [3, 2, 1]})
    full = np.arange(6 * 12, dtype=np.float32).reshape(6, 12)
    rows = [full[0:3], full[3:5], full[5:6]]  # split along axis 0 like [3, 2, 1]
    uneven = impl.alltoall(_laid_out(impl, rows), 0, split_axis=1, concat_axis=0,
                           sizes=[6, 4, 2])
    even = impl.alltoall(_laid_out(impl, rows), 0, split_axis=1, concat_axis=0)
    with session() as sess:
        got, got_even = sess.run([uneven.tensor_list, even.tensor_list])
    for pnum, (begin, end) in enumerate([(0, 6), (6, 10), (10, 12)]):
        np.testing.assert_array_equal(got[pnum], full[:, begin:end])
    for pnum in range(3):  # EVEN: four columns each
        np.testing.assert_array_equal(got_even[pnum], full[:, 4 * pnum:4 * pnum + 4])


@pytest.mark.parametrize("shape", [(3, 5), (37, 41), (1031,)])
def test_allreduce_ring_with_unequal_chunks_sums_exactly(shape):
    fresh_tf_graph()
    impl = HeterogeneousMeshImpl("model:3", "", [""] * 3)
    rng = np.random.RandomState(0)
    pieces = [rng.randint(-5, 5, size=shape).astype(np.float32) for _ in range(3)]
    summed = impl.allreduce(_laid_out(impl, pieces), [0], "SUM")
    maxed = impl.allreduce(_laid_out(impl, pieces), [0], "MAX")
    with session() as sess:
        s, m = sess.run([summed.tensor_list, maxed.tensor_list])
    for got in s:
        np.testing.assert_array_equal(got, sum(pieces))
    for got in m:
        np.testing.assert_array_equal(got, np.maximum.reduce(pieces))


def test_receive_between_unequal_slices_is_refused():
    fresh_tf_graph()
    impl = HeterogeneousMeshImpl("model:2", "", [""] * 2)
    pieces = [np.zeros((3,), np.float32), np.zeros((2,), np.float32)]
    with pytest.raises(UnevenLayoutError, match="needs equal slices"):
        impl.shift_by_n_processors(_laid_out(impl, pieces), 0, 1, wrap=True)


def test_variables_get_per_processor_slices_and_copy_back_to_master():
    graph, mesh = new_graph()
    value = np.arange(5 * 13, dtype=np.float32).reshape(5, 13)
    shape = mtf.Shape([mtf.Dimension("rows", 5), mtf.Dimension("filters", 13)])
    var = mtf.get_variable(mesh, "w", shape, initializer=tf.constant_initializer(value))
    impl = impl_2x3()
    lowering = mtf.Lowering(graph, {mesh: impl})
    laid_out = lowering.variables[var.operation]
    shapes = [t.shape.as_list() for t in laid_out.laid_out_tensor.tensor_list]
    assert shapes == [[5, 7], [5, 4], [5, 2]] * 2
    exported = lowering.export_to_tf_tensor(var)
    with session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(lowering.copy_masters_to_slices())
        np.testing.assert_array_equal(sess.run(exported), value)
        master = var.operation.get_master()
        sess.run(master.assign(tf.zeros_like(master)))
        sess.run(lowering.copy_slices_to_masters())
        np.testing.assert_array_equal(sess.run(master), value)


def test_random_ops_draw_per_processor_shapes():
    graph, mesh = new_graph()
    shape = mtf.Shape([mtf.Dimension("batch", 5), mtf.Dimension("filters", 13)])
    r = mtf.random_uniform(mesh, shape)
    got = run_lowered(graph, mesh, impl_2x3(), [r])[0]
    assert got.shape == (5, 13)
    assert 0.0 <= got.min() and got.max() < 1.0


def test_one_hot_top_k_and_constants_on_an_uneven_dimension():
    graph, mesh = new_graph()
    classes = mtf.Dimension("filters", 13)
    batch = mtf.Dimension("batch", 5)
    labels = np.array([0, 6, 7, 12, 3], np.int32)
    scores = np.random.RandomState(1).randn(5, 13).astype(np.float32)
    one_hot = mtf.one_hot(mtf.import_tf_tensor(mesh, tf.constant(labels), mtf.Shape([batch])),
                          classes)
    x = mtf.import_tf_tensor(mesh, tf.constant(scores), mtf.Shape([batch, classes]))
    values, indices = mtf.top_k(x, classes, mtf.Dimension("k", 3))
    ones = mtf.ones(mesh, mtf.Shape([batch, classes]))
    got = run_lowered(graph, mesh, impl_2x3(), [one_hot, values, indices, ones])
    np.testing.assert_array_equal(got[0], np.eye(13, dtype=np.float32)[labels])
    order = np.argsort(-scores, axis=1)[:, :3]
    np.testing.assert_array_equal(got[2], order)
    np.testing.assert_allclose(got[1], np.take_along_axis(scores, order, 1))
    np.testing.assert_array_equal(got[3], np.ones((5, 13), np.float32))
