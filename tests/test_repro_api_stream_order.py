"""A NIfTI stream from the Python API does not depend on the order its subjects are listed in.

``meshpar train`` sorted the training subjects by file before streaming them
(tests/test_repro_labels_order.py), but the stream itself shuffled subjects by
their position: ``make_tf_dataset(directory, seed=5)`` on one dataset whose
labels.csv listed its rows in another order (or a ``NiftiDataset`` given the
same subjects in another order, e.g. one side of ``split_subjects``, which keeps
the input order) yielded other batches with the same seed, and a stream resumed
at ``start`` on the other listing went on in another permutation. The shuffle now
ranks the subjects by their file (relative to the dataset) before drawing the
permutation; an unshuffled stream keeps the order given.
"""
import csv
import shutil

import numpy as np
import pytest

from meshpar.data import write_dataset
from meshpar.data.nifti import NiftiDataset, make_tf_dataset

SHAPE = (8, 8, 8)
N = 7


@pytest.fixture(scope="module")
def listings(tmp_path_factory):
    """One dataset twice: as written, and a copy whose labels.csv lists the rows reversed."""
    root = tmp_path_factory.mktemp("listings")
    write_dataset(root / "data", N, shape=SHAPE, seed=3)
    shutil.copytree(root / "data", root / "reversed")
    with open(root / "data" / "labels.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    with open(root / "reversed" / "labels.csv", "w", newline="") as fh:
        csv.writer(fh).writerows([rows[0]] + rows[:0:-1])
    return root / "data", root / "reversed"


def _batches(dataset, count):
    """The first ``count`` batches of a tf.data dataset as numpy (volumes, labels)."""
    return [(x.numpy(), y.numpy()) for x, y in dataset.take(count)]


def _assert_same_batches(a, b):
    assert len(a) == len(b)
    for (xa, ya), (xb, yb) in zip(a, b):
        np.testing.assert_array_equal(ya, yb)
        np.testing.assert_array_equal(xa, xb)


def test_a_reordered_labels_csv_streams_the_same_batches(listings):
    data, reversed_ = listings
    first = NiftiDataset(data, SHAPE)
    assert [s.path.name for s in NiftiDataset(reversed_, SHAPE).subjects] == \
        [s.path.name for s in first.subjects][::-1]
    # 3 epochs of 7 subjects in batches of 3: the permutations of epochs 0, 1 and 2
    a = _batches(make_tf_dataset(data, SHAPE, batch_size=3, seed=5, repeat=True), 7)
    b = _batches(make_tf_dataset(reversed_, SHAPE, batch_size=3, seed=5, repeat=True), 7)
    _assert_same_batches(a, b)
    # a resumed stream (start) on the other listing goes on where the first one was
    resumed = make_tf_dataset(reversed_, SHAPE, batch_size=3, seed=5, repeat=True, start=9)
    _assert_same_batches(a[3:], _batches(resumed, 4))
    # one epoch by examples(): the same volumes in the same order
    for (xa, ya), (xb, yb) in zip(first.examples(shuffle=True, seed=5, epoch=1),
                                  NiftiDataset(reversed_, SHAPE).examples(
                                      shuffle=True, seed=5, epoch=1)):
        assert ya == yb
        np.testing.assert_array_equal(xa, xb)


def test_subjects_given_in_another_order_stream_alike_and_unshuffled_keep_it(listings):
    data, _ = listings
    subjects = NiftiDataset(data, SHAPE).subjects
    forward = NiftiDataset(data, SHAPE, subjects=subjects)
    backward = NiftiDataset(data, SHAPE, subjects=subjects[::-1])
    _assert_same_batches(_batches(forward.to_tf(2, seed=1, repeat=True), 5),
                         _batches(backward.to_tf(2, seed=1, repeat=True), 5))
    # another seed is another stream (the test above could not pass by ignoring the seed)
    other = _batches(forward.to_tf(N, seed=2), 1)[0][0]
    assert not np.array_equal(_batches(forward.to_tf(N, seed=1), 1)[0][0], other)
    # without shuffling, the order given is the order streamed
    plain = _batches(backward.to_tf(N, shuffle=False), 1)[0]
    expected = [backward[i] for i in range(N)]
    np.testing.assert_array_equal(plain[0], np.stack([x for x, _ in expected]))
    np.testing.assert_array_equal(plain[1], [y for _, y in expected])
