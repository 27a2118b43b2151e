"""Classification metrics of per-subject predictions, in numpy.

The held-out test set is scored from the probabilities ``meshpar predict``
writes, so the test numbers ``meshpar train`` reports and the CSV agree, and
every subject counts (no batch is dropped). For two classes, class 1 is the
positive class (AD in NC,AD; pMCI in sMCI,pMCI).

>>> m = classification_metrics([0, 0, 1, 1], [[0.9, 0.1], [0.4, 0.6], [0.3, 0.7], [0.2, 0.8]])
>>> m["accuracy"], m["auc"], m["sensitivity"], m["specificity"]
(0.75, 1.0, 1.0, 0.5)
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["classification_metrics", "roc_auc", "METRIC_NAMES"]

#: Keys of :func:`classification_metrics`, in the order reports list them.
METRIC_NAMES = ("accuracy", "balanced_accuracy", "auc", "sensitivity", "specificity", "loss")


def roc_auc(labels: Sequence[int], scores: Sequence[float]) -> float:
    """Area under the ROC curve of ``scores`` for ``labels == 1`` (ties count half).

    The Mann-Whitney statistic: the chance that a random positive scores
    above a random negative. NaN when one class is absent.
    """
    labels = np.asarray(labels) == 1
    scores = np.asarray(scores, dtype=np.float64)
    pos, neg = scores[labels], scores[~labels]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * ties) / (len(pos) * len(neg)))


def classification_metrics(labels: Sequence[int], probabilities) -> dict:
    """Accuracy, balanced accuracy, AUC, sensitivity, specificity and mean
    cross-entropy of ``probabilities`` ``[n, classes]`` against ``labels``.

    Balanced accuracy is the mean recall over the classes present. AUC,
    sensitivity (recall of class 1) and specificity (recall of class 0) are
    defined for two classes only (None otherwise); a recall of a class with
    no subjects is NaN. ``n`` is the number of subjects.
    """
    labels = np.asarray(labels, dtype=np.int64)
    probs = np.asarray(probabilities, dtype=np.float64)
    if probs.ndim != 2 or len(probs) != len(labels):
        raise ValueError(f"probabilities must be [n, classes] for {len(labels)} labels, "
                         f"got shape {probs.shape}")
    if len(labels) == 0:
        raise ValueError("no subjects to score")
    if labels.min() < 0 or labels.max() >= probs.shape[1]:
        raise ValueError(f"labels must be class ids in [0, {probs.shape[1]})")
    predicted = probs.argmax(axis=1)
    recalls = {c: float(np.mean(predicted[labels == c] == c)) if np.any(labels == c)
               else float("nan") for c in range(probs.shape[1])}
    present = [r for c, r in recalls.items() if np.any(labels == c)]
    picked = np.clip(probs[np.arange(len(labels)), labels], 1e-12, 1.0)
    two = probs.shape[1] == 2
    return {"n": int(len(labels)),
            "accuracy": float(np.mean(predicted == labels)),
            "balanced_accuracy": float(np.mean(present)),
            "auc": roc_auc(labels, probs[:, 1]) if two else None,
            "sensitivity": recalls[1] if two else None,
            "specificity": recalls[0] if two else None,
            "loss": float(-np.mean(np.log(picked)))}
