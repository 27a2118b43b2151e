"""meshpar.data.cohorts: train/validation splits by person, stratified by label and group."""
from pathlib import Path

import pytest

from meshpar.data.cohorts import fold_split, group_by_person, person_folds, person_id, split_subjects
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


def test_folds_partition_people_and_balance_every_stratum():
    subjects = _scans(people=23, visits=2)
    folds = person_folds(subjects, k=5, seed=4)
    assert sorted(map(id, sum(folds, []))) == sorted(map(id, subjects))
    owners = [{s.subject_id for s in f} for f in folds]
    for i in range(5):
        for j in range(i + 1, 5):
            assert not owners[i] & owners[j]
    people = [len(o) for o in owners]
    assert max(people) - min(people) <= 1 and sum(people) == 23
    for f in folds:  # 12 NC and 11 AD people: 2 or 3 of each per fold
        for label in ("NC", "AD"):
            assert len({s.subject_id for s in f if s.label == label}) in (2, 3)
    assert person_folds(subjects, 5, seed=4) == folds
    assert person_folds(subjects, 5, seed=5) != folds


def test_fold_split_holds_out_one_fold_and_rejects_bad_k_or_fold():
    subjects = _scans(people=6)
    rest, held = fold_split(subjects, k=3, fold=1, seed=0)
    assert held == person_folds(subjects, 3, seed=0)[1]
    assert len(rest) + len(held) == len(subjects)
    assert not {s.subject_id for s in rest} & {s.subject_id for s in held}
    with pytest.raises(ValueError, match="fold must be"):
        fold_split(subjects, 3, 3)
    with pytest.raises(ValueError, match="need at least 7 people"):
        person_folds(subjects, 7)
    with pytest.raises(ValueError, match="k must be"):
        person_folds(subjects, 1)
