"""Binary classification metrics and paired comparisons, in numpy (no TensorFlow).

========================  ====================================================
function                  what
========================  ====================================================
``binary_metrics``        accuracy, balanced accuracy, AUC, sensitivity and
                          specificity of one set of predictions
``auc``                   area under the ROC curve (Mann-Whitney, ties half)
``mean_std``              mean and sample standard deviation of a list
``paired_comparison``     difference of two configurations over the same runs
``prediction_agreement``  per-subject agreement of two prediction sets
========================  ====================================================

Class 1 is the positive class (the patient group: AD, pMCI); sensitivity is
the recall of class 1, specificity the recall of class 0.
"""
from __future__ import annotations

import math
from typing import Dict, Mapping, Sequence

import numpy as np

from meshpar.core.splits import number_above

__all__ = ["METRICS", "auc", "binary_metrics", "mean_std", "paired_comparison",
           "prediction_agreement"]

# The metrics every protocol report carries, in display order.
METRICS = ("accuracy", "balanced_accuracy", "auc", "sensitivity", "specificity")


def _labels_and_scores(y_true, score):
    y = np.asarray(y_true)
    s = np.asarray(score, dtype=float)
    if y.ndim != 1 or s.shape != y.shape:
        raise ValueError(f"labels and scores must be 1-D of the same length, got shapes "
                         f"{y.shape} and {s.shape}")
    if y.size == 0:
        raise ValueError("no predictions to score")
    if not np.isin(y, (0, 1)).all():
        raise ValueError(f"labels must be 0 or 1, got {sorted(set(y.tolist()))}")
    if not np.isfinite(s).all():
        raise ValueError("scores must be finite")
    return y.astype(int), s


def auc(y_true: Sequence[int], score: Sequence[float]) -> float:
    """Probability that a random positive scores above a random negative (ties count half).

    NaN when one class is absent (the AUC is undefined then).
    """
    y, s = _labels_and_scores(y_true, score)
    pos, neg = s[y == 1], s[y == 0]
    if pos.size == 0 or neg.size == 0:
        return float("nan")
    greater = (pos[:, None] > neg[None, :]).mean()
    ties = (pos[:, None] == neg[None, :]).mean()
    return float(greater + 0.5 * ties)


def binary_metrics(y_true: Sequence[int], p_positive: Sequence[float],
                   threshold: float = 0.5) -> Dict[str, float]:
    """Metrics of predicted probabilities of class 1 against true labels (0/1).

    A subject is predicted positive when ``p_positive > threshold``
    (``p == threshold`` goes to class 0, as an argmax over two classes with
    ties to the first does). Sensitivity (or specificity) is NaN when the
    positive (or negative) class is absent; balanced accuracy is their mean.
    """
    y, p = _labels_and_scores(y_true, p_positive)
    # logits or scores scored as if probabilities: each above 0.5 was 'class 1', in silence
    outside = p[(p < -1e-6) | (p > 1 + 1e-6)]
    if outside.size:
        raise ValueError(f"p_positive must be probabilities in [0, 1], got {float(outside[0])!r} "
                         "(logits or scores? apply a softmax or sigmoid first; auc() takes "
                         "any scores)")
    predicted = (p > _threshold(threshold)).astype(int)
    pos, neg = y == 1, y == 0
    sensitivity = float((predicted[pos] == 1).mean()) if pos.any() else float("nan")
    specificity = float((predicted[neg] == 0).mean()) if neg.any() else float("nan")
    return {
        "n": int(y.size),
        "accuracy": float((predicted == y).mean()),
        "balanced_accuracy": 0.5 * (sensitivity + specificity),
        "auc": auc(y, p),
        "sensitivity": sensitivity,
        "specificity": specificity,
    }


def mean_std(values: Sequence[float]) -> Dict[str, float]:
    """``{"mean", "std", "n"}`` of ``values``: sample std (ddof 1), 0 for a single value."""
    v = np.asarray(values, dtype=float)
    if v.ndim != 1 or v.size == 0:
        raise ValueError("mean_std needs a non-empty list of numbers")
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if v.size > 1 else 0.0,
            "n": int(v.size)}


def paired_comparison(a: Sequence[float], b: Sequence[float]) -> Dict[str, float]:
    """Compare configuration ``b`` with ``a`` over the same runs (same seeds and folds).

    Returns the mean and sample std of ``b - a``, a 95% t confidence interval
    of the mean difference (None for one run: there is none), the paired t-test
    p-value (two-sided; NaN when every difference is equal or there is one run, the
    test is undefined) and how many runs ``b`` beat, tied and lost. Differences
    equal but for float rounding (accuracies k/n, ``b`` one subject better in every
    run) count as equal. A pair holding a NaN (an AUC of a test fold with one class)
    is left out: ``n`` counts the pairs compared, ``undefined`` those left out.
    """
    from scipy import stats

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or x.size == 0:
        raise ValueError(f"paired comparison needs two equal-length lists, got {x.shape} "
                         f"and {y.shape}")
    defined = ~(np.isnan(x) | np.isnan(y))
    x, y = x[defined], y[defined]
    d = y - x
    # equal but for rounding is a tie: balanced accuracies 0.5 * (1/2 + 2/6) and
    # 0.5 * (0/2 + 5/6), both 5/12, differ in the last bit and were a win or a loss
    tie = np.abs(d) <= _rounding(x, y) if d.size else np.zeros(0, bool)
    out = {"n": int(d.size), "undefined": int((~defined).sum()),
           "mean_difference": float(d.mean()) if d.size else float("nan"),
           "std_difference": float(d.std(ddof=1)) if d.size > 1 else 0.0 if d.size else math.nan,
           "wins": int((~tie & (d > 0)).sum()), "ties": int(tie.sum()),
           "losses": int((~tie & (d < 0)).sum())}
    if d.size > 1 and not _all_equal(d, x, y):
        half = stats.t.ppf(0.975, d.size - 1) * out["std_difference"] / math.sqrt(d.size)
        out["ci95"] = [out["mean_difference"] - half, out["mean_difference"] + half]
        out["p_value"] = float(stats.ttest_rel(y, x).pvalue)
    elif d.size > 1:  # all differences equal: no spread to test against
        out["std_difference"] = 0.0
        out["ci95"] = [out["mean_difference"], out["mean_difference"]]
        out["p_value"] = float("nan")
    else:  # one run (or none): a t interval has no degree of freedom
        out["ci95"] = None
        out["p_value"] = float("nan")
    return out


def _all_equal(d: np.ndarray, x: np.ndarray, y: np.ndarray) -> bool:
    """Whether the differences ``d = y - x`` differ only by the rounding of ``x`` and
    ``y`` (a few ulps of the largest value): 61/80 - 60/80 and 71/80 - 70/80 differ in
    the last bit, and a t-test on that spread gave p ~ 1e-59."""
    return float(np.ptp(d)) <= _rounding(x, y)


def _rounding(x: np.ndarray, y: np.ndarray) -> float:
    """How far apart two of these metrics may be by float rounding alone: a few ulps of
    the largest value (at least of 1)."""
    scale = max(1.0, float(np.abs(x).max()), float(np.abs(y).max()))
    return 16 * np.finfo(float).eps * scale


def prediction_agreement(a: Mapping[str, float], b: Mapping[str, float],
                         threshold: float = 0.5) -> Dict[str, float]:
    """Per-subject agreement of two prediction sets (subject key -> p of class 1).

    Compares the subjects both hold: the largest and mean absolute
    probability difference and the share of equal predicted labels.
    """
    threshold = _threshold(threshold)
    common = sorted(set(a) & set(b))
    if not common:
        raise ValueError("the two prediction sets share no subject")
    pa = np.array([a[k] for k in common], dtype=float)
    pb = np.array([b[k] for k in common], dtype=float)
    if not (np.isfinite(pa).all() and np.isfinite(pb).all()):  # NaN differences were NaN
        bad = [k for k, x, y in zip(common, pa, pb) if not (math.isfinite(x) and math.isfinite(y))]
        raise ValueError(f"probabilities must be finite; subject {bad[0]} has "
                         f"{a[bad[0]]!r} and {b[bad[0]]!r}")
    diff = np.abs(pa - pb)
    return {"subjects": len(common), "max_abs_p_difference": float(diff.max()),
            "mean_abs_p_difference": float(diff.mean()),
            "label_agreement": float(((pa > threshold) == (pb > threshold)).mean())}


def _threshold(threshold) -> float:
    """``threshold`` as a probability in [0, 1]; a NaN one predicted every subject
    negative in silence (``p > nan`` is False), a string was numpy's comparison error."""
    value = number_above(threshold, "threshold", -math.inf)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"threshold must be a probability in [0, 1], got {threshold!r}")
    return value
