"""meshpar.data.cohorts: train/validation splits by person, stratified by label and group."""
from pathlib import Path

import pytest

from meshpar.data.cohorts import group_by_person, person_id, split_subjects
from meshpar.data.types import Subject


def _scans(people=20, visits=2):
    return [Subject(f"p{p}_v{v}.nii", ("NC", "AD")[p % 2], None, f"p{p}")
            for p in range(people) for v in range(visits)]


def test_split_is_stratified_and_keeps_a_persons_scans_together():
    subjects = _scans()
    train, val = split_subjects(subjects, val_fraction=0.2, seed=1)
    assert len(train) + len(val) == 40
    val_people = {s.subject_id for s in val}
    assert not val_people & {s.subject_id for s in train}
    assert sorted(s.label for s in val) == ["AD"] * 4 + ["NC"] * 4  # 2 people each, 2 scans each
    assert split_subjects(subjects, 0.2, seed=1) == (train, val)
    assert split_subjects(subjects, 0.2, seed=2) != (train, val)


def test_both_sides_keep_the_input_order():
    subjects = _scans(people=10)
    train, val = split_subjects(subjects, 0.3, seed=3)
    order = {s: i for i, s in enumerate(subjects)}
    assert [order[s] for s in train] == sorted(order[s] for s in train)
    assert [order[s] for s in val] == sorted(order[s] for s in val)


def test_groups_are_strata_too_and_every_stratum_of_two_sends_one_but_never_all():
    subjects = [Subject(Path(f"s{i}.nii"), "MCI", group, "") for i, group in
                enumerate(["sMCI", "sMCI", "pMCI", "pMCI", "pMCI", "solo"])]
    train, val = split_subjects(subjects, val_fraction=0.1)
    assert sorted(s.group for s in val) == ["pMCI", "sMCI"]  # the one-person stratum stays in train
    assert [s.group for s in train].count("solo") == 1


def test_zero_fraction_keeps_everyone_in_train_and_a_bad_fraction_is_an_error():
    subjects = _scans(people=4)
    assert split_subjects(subjects, 0.0) == (subjects, [])
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="val_fraction"):
            split_subjects(subjects, bad)


def test_a_scan_without_subject_id_is_its_own_person():
    scans = [Subject(Path("a.nii"), "AD"), Subject(Path("b.nii"), "AD", subject_id="x"),
             Subject(Path("c.nii"), "AD", subject_id="x")]
    assert person_id(scans[0]) == "a.nii"
    assert {k: len(v) for k, v in group_by_person(scans).items()} == {"a.nii": 1, "x": 2}


def test_the_package_re_exports_the_split():
    import meshpar.data

    assert meshpar.data.split_subjects is split_subjects
