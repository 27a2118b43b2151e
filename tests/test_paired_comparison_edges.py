"""paired_comparison on the inputs the protocol produces: accuracies k/n whose
differences are equal but for float rounding, and AUCs that are NaN (a test fold
holding one class)."""
import math

import numpy as np
import pytest

from meshpar.evaluation import metrics


def test_one_subject_better_in_every_run_is_no_spread():
    """b beats a by exactly one of 80 subjects in every run: the differences are all
    1/80, the t-test undefined. Float rounding made them differ by 1e-16 and the
    report gave p ~ 6e-59 with a 1e-16 wide interval."""
    a = np.array([60, 62, 70, 66, 64]) / 80
    b = np.array([61, 63, 71, 67, 65]) / 80
    c = metrics.paired_comparison(a, b)
    assert c["mean_difference"] == pytest.approx(1 / 80)
    assert math.isnan(c["p_value"])
    assert c["std_difference"] == 0.0
    assert c["ci95"] == [c["mean_difference"], c["mean_difference"]]
    assert (c["wins"], c["ties"], c["losses"], c["n"]) == (5, 0, 0, 5)


def test_a_real_spread_still_gets_its_test():
    """Differences of one and two subjects of 80 keep their t-test (by hand:
    d = 1/80, 2/80, 1/80; mean 4/240, s = 1/(80 sqrt 3), t = 4, 2 dof:
    p = 1 - 4/sqrt(18))."""
    a = np.array([60, 62, 70]) / 80
    b = np.array([61, 64, 71]) / 80
    c = metrics.paired_comparison(a, b)
    assert c["std_difference"] == pytest.approx(1 / (80 * math.sqrt(3)))
    assert c["p_value"] == pytest.approx(1 - 4 / math.sqrt(18), abs=1e-9)


def test_nan_pairs_are_left_out_and_counted():
    """An AUC is NaN on a test fold with one class; the pair was kept, making the mean
    difference NaN while wins/ties/losses silently summed to fewer than n."""
    c = metrics.paired_comparison([0.8, float("nan"), 0.6, 0.7], [0.9, 0.5, 0.65, 0.7])
    assert (c["n"], c["undefined"]) == (3, 1)
    assert c["mean_difference"] == pytest.approx(0.05)
    assert (c["wins"], c["ties"], c["losses"]) == (2, 1, 0)
    assert c["wins"] + c["ties"] + c["losses"] == c["n"]
    assert c["p_value"] == pytest.approx(0.2254, abs=1e-3)  # d = .1, .05, 0: t = 1.732, 2 dof


def test_every_pair_undefined():
    c = metrics.paired_comparison([float("nan")] * 2, [0.5, float("nan")])
    assert (c["n"], c["undefined"]) == (0, 2)
    assert math.isnan(c["mean_difference"]) and math.isnan(c["std_difference"])
    assert c["ci95"] is None and (c["wins"], c["ties"], c["losses"]) == (0, 0, 0)
    assert math.isnan(c["p_value"])
