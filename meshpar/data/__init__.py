"""Data for meshpar: synthetic brain MRI phantoms and NIfTI datasets.

``phantoms`` writes brain-like synthetic subjects as real ``.nii.gz`` files;
``nifti_files`` reads one NIfTI file or ``labels.csv``, checked; ``nifti``
reads an ADNI-style directory of them into a streaming ``tf.data`` pipeline,
through the small composable pre-processing steps of ``transforms``;
``cohorts`` splits subjects into train and validation sets by person. None
imports TensorFlow until :func:`make_tf_dataset` is called.
"""
from __future__ import annotations

from meshpar.data.cohorts import fold_split, group_by_person, person_folds, person_id, split_subjects
from meshpar.data.nifti import NiftiDataset, make_tf_dataset
from meshpar.data.nifti_files import load_volume, read_labels
from meshpar.data.phantoms import make_phantom, write_dataset
from meshpar.data.types import BadDataError, BadLabelsError, BadSubjectError, Subject, Volume
from meshpar.data.transforms import (
    Compose,
    CropOrPad,
    RandomAffine,
    RandomFlip,
    RandomShift,
    Reorient,
    Resample,
    Transform,
    ZScore,
    default_transform,
)

__all__ = [
    "BadDataError",
    "BadLabelsError",
    "BadSubjectError",
    "Compose",
    "CropOrPad",
    "NiftiDataset",
    "RandomAffine",
    "RandomFlip",
    "RandomShift",
    "Reorient",
    "Resample",
    "Subject",
    "Transform",
    "Volume",
    "ZScore",
    "default_transform",
    "group_by_person",
    "load_volume",
    "make_phantom",
    "make_tf_dataset",
    "person_id",
    "read_labels",
    "split_subjects",
    "person_folds",
    "fold_split",
    "write_dataset",
]
