"""A split by person does not depend on the order the scans are listed in.

A person's stratum (label and group) was that of the first scan listed: a person
with scans of two labels (a converter: NC at one visit, AD at a later one) moved
between strata when labels.csv listed the rows in another order, and with it the
validation set, the test fold and the training data of one --seed and --fold-seed.
The stratum is now that of the person's scan with the first file path.
"""
from pathlib import Path

import pytest

from meshpar.data import person_folds, split_subjects
from meshpar.data.types import Subject


def _scans():
    scans = []
    for i in range(10):  # one scan each, alternating labels
        scans.append(Subject(Path(f"/d/p{i:02d}_v1.nii.gz"), "NC" if i % 2 else "AD",
                             subject_id=f"p{i:02d}"))
    for i in range(10, 13):  # converters: NC at the first visit, AD at the second
        scans.append(Subject(Path(f"/d/p{i:02d}_v1.nii.gz"), "NC", subject_id=f"p{i:02d}"))
        scans.append(Subject(Path(f"/d/p{i:02d}_v2.nii.gz"), "AD", subject_id=f"p{i:02d}"))
    return scans


def _paths(part):
    return sorted(str(s.path) for s in part)


@pytest.mark.parametrize("seed", range(4))
def test_the_listing_order_of_the_scans_changes_no_split(seed):
    listed, reversed_ = _scans(), _scans()[::-1]
    for a, b in zip(split_subjects(listed, 0.3, seed=seed),
                    split_subjects(reversed_, 0.3, seed=seed)):
        assert _paths(a) == _paths(b)
    for a, b in zip(person_folds(listed, 3, seed=seed), person_folds(reversed_, 3, seed=seed)):
        assert _paths(a) == _paths(b)
