"""Learnability ceilings of a phantom dataset: what its ground truth allows.

The phantom generator records each subject's true anatomy in
``phantoms.json`` (:mod:`meshpar.data.phantoms`). A classifier given those
numbers, fitted on the same training subjects and scored on the same held-out
subjects as the network, bounds what an image model can be expected to reach:

==================  ===========================================================
ceiling             features (logistic regression, standardised, light L2)
==================  ===========================================================
``disease_stage``   the latent disease severity the label was drawn from (the
                    group's severity plus per-subject jitter): nothing seen in
                    an image carries more about the label
``anatomy``         the measures an image shows (``Phantom.measures``): for the
                    geometric phantoms ventricular volume relative to head
                    volume, hippocampus and temporal horn scale, cortical
                    thickness, sulcal width and age (the confound)
==================  ===========================================================

numpy only; no TensorFlow.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict, Mapping, Sequence

import numpy as np

from meshpar.evaluation.metrics import binary_metrics

__all__ = ["CEILINGS", "ceiling_features", "fit_logistic", "predict_logistic",
           "ceiling_metrics", "load_truth"]

CEILINGS = ("disease_stage", "anatomy")


def load_truth(data_dir) -> Dict[str, dict]:
    """Ground truth per subject of a phantom dataset, keyed by the file path
    relative to ``data_dir`` (as in ``labels.csv``). ValueError without
    ``phantoms.json`` (not a phantom dataset: no ceiling to compute)."""
    path = Path(data_dir) / "phantoms.json"
    if not path.is_file():
        raise ValueError(f"{path} not found: ceilings need a phantom dataset's ground truth")
    meta = json.loads(path.read_text(encoding="utf-8"))
    return {os.path.normpath(s["subject"]): s for s in meta["subjects"]}


def ceiling_features(truth: Mapping, ceiling: str) -> np.ndarray:
    """The feature vector of one subject's ground truth for ``ceiling``."""
    if ceiling == "disease_stage":
        return np.array([truth["atrophy"]], dtype=float)
    if ceiling == "anatomy":
        if "measures" not in truth:
            raise ValueError(f"{truth.get('subject', 'a subject')}: phantoms.json records no "
                             "measures (written by an older meshpar); write the phantoms again")
        measures = truth["measures"]
        return np.array([measures[k] for k in sorted(measures)], dtype=float)
    raise ValueError(f"unknown ceiling {ceiling!r}; choose from {', '.join(CEILINGS)}")


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1e-2, steps: int = 50) -> dict:
    """Logistic regression on standardised ``x`` (N, F), labels 0/1, by Newton's method.

    ``l2`` (on the weights, not the intercept) keeps separable data finite.
    Returns the model as a dict for :func:`predict_logistic`.
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    if x.ndim != 2 or y.shape != (x.shape[0],) or x.shape[0] < 2:
        raise ValueError(f"need features (N, F) and N labels with N >= 2, got {x.shape}, {y.shape}")
    if len(set(y.tolist())) != 2:
        raise ValueError("training labels must hold both classes")
    mean, std = x.mean(axis=0), x.std(axis=0)
    std[std == 0] = 1.0
    design = np.c_[(x - mean) / std, np.ones(len(x))]
    penalty = l2 * np.eye(design.shape[1])
    penalty[-1, -1] = 0.0
    w = np.zeros(design.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-design @ w))
        grad = design.T @ (p - y) + penalty @ w
        hess = design.T @ (design * (p * (1 - p))[:, None]) + penalty + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.max(np.abs(step)) < 1e-10:
            break
    return {"mean": mean, "std": std, "w": w}


def predict_logistic(model: dict, x: np.ndarray) -> np.ndarray:
    """Probability of class 1 for each row of ``x`` under ``model``."""
    z = (np.asarray(x, dtype=float) - model["mean"]) / model["std"]
    return 1.0 / (1.0 + np.exp(-(np.c_[z, np.ones(len(z))] @ model["w"])))


def ceiling_metrics(truth: Mapping[str, dict], train_keys: Sequence[str],
                    test_keys: Sequence[str], positive_label: str,
                    ceilings: Sequence[str] = CEILINGS) -> Dict[str, dict]:
    """Held-out metrics of each ceiling classifier: fitted on ``train_keys``,
    scored on ``test_keys`` (keys of ``truth``, see :func:`load_truth`)."""
    missing = [k for k in list(train_keys) + list(test_keys) if k not in truth]
    if missing:
        raise ValueError(f"no ground truth for {len(missing)} subject(s), e.g. {missing[0]}")
    y_train = np.array([truth[k]["label"] == positive_label for k in train_keys], dtype=int)
    y_test = np.array([truth[k]["label"] == positive_label for k in test_keys], dtype=int)
    out = {}
    for name in ceilings:
        x_train = np.stack([ceiling_features(truth[k], name) for k in train_keys])
        x_test = np.stack([ceiling_features(truth[k], name) for k in test_keys])
        model = fit_logistic(x_train, y_train)
        out[name] = binary_metrics(y_test, predict_logistic(model, x_test))
    return out
