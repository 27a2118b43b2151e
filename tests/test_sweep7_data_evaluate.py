"""Sweep 7 of the evaluation path: the table of a protocol whose test folds do not all
hold both classes, checked against counts by hand."""
from meshpar.evaluation import metrics, report


def _row(key, y, p):
    return {"key": key, "seed": 0, "fold": int(key[-1]), "config": "one-device",
            "metrics": metrics.binary_metrics(y, p), "train": {}, "p": {}}


def test_a_metric_undefined_in_some_runs_says_over_how_many_runs_it_is_taken():
    """A fold of one class has no AUC or sensitivity; the mean over the other runs was
    shown under 'runs 3' as if taken over three."""
    scored = [_row("ad-nc-seed0-fold0", [1, 0, 1, 0], [0.9, 0.1, 0.8, 0.3]),  # acc 1, AUC 1
              _row("ad-nc-seed0-fold1", [0, 0, 0, 0], [0.1, 0.2, 0.7, 0.3]),  # acc 3/4, no AUC
              _row("ad-nc-seed0-fold2", [1, 0, 1, 0], [0.9, 0.6, 0.4, 0.3])]  # acc 1/2, AUC 3/4
    summary = report.summarize(scored, {"ad-nc": ("NC", "AD")}, ["one-device"])
    auc = summary["ad-nc"]["configs"]["one-device"]["summary"]["auc"]
    assert auc["n"] == 2 and auc["mean"] == 0.875  # (1 + 3/4) / 2
    table = report.format_table(summary)
    row = next(line for line in table.splitlines() if "one-device" in line)
    # accuracy (1, 3/4, 1/2): mean 0.75, sample std 0.25, over every run: no count
    assert "0.750 +/- 0.250 " in row and "0.750 +/- 0.250 (" not in row
    # AUC (1, 3/4): sample std sqrt(2 * 0.125^2) = 0.177; sensitivity (1, 1/2): 0.354
    assert "0.875 +/- 0.177 (2 of 3 runs)" in row
    assert "0.750 +/- 0.354 (2 of 3 runs)" in row
    assert row.split()[2] == "3"  # the runs column


def test_balanced_accuracies_equal_but_for_rounding_are_a_tie():
    """A test fold of 2 AD and 6 NC: one configuration finds 1 of 2 AD and 2 of 6 NC, the
    other 0 of 2 AD and 5 of 6 NC; both balanced accuracies are 5/12, but 0.5 * (1/2 +
    2/6) and 0.5 * (0/2 + 5/6) differ in the last bit, and the pair was a win or a loss."""
    y = [1, 1, 0, 0, 0, 0, 0, 0]
    first = metrics.binary_metrics(y, [0.9, 0.1, 0.9, 0.9, 0.9, 0.9, 0.1, 0.1])
    other = metrics.binary_metrics(y, [0.1, 0.1, 0.9, 0.1, 0.1, 0.1, 0.1, 0.1])
    assert (first["sensitivity"], first["specificity"]) == (0.5, 2 / 6)
    assert (other["sensitivity"], other["specificity"]) == (0.0, 5 / 6)
    assert first["balanced_accuracy"] != other["balanced_accuracy"]  # the last bit
    # a second run where the other configuration is better by one AD (1/2 * 1/2 = 1/4)
    a = [first["balanced_accuracy"], 0.5]
    b = [other["balanced_accuracy"], 0.75]
    got = metrics.paired_comparison(a, b)
    assert (got["wins"], got["ties"], got["losses"]) == (1, 1, 0)
    # the mean difference stays the arithmetic one: (~0 + 1/4) / 2
    assert abs(got["mean_difference"] - 0.125) < 1e-15


def test_logits_are_not_scored_as_probabilities():
    """Logits [2.3, -1.2, 0.4, -0.1] for y [1, 0, 0, 1] were thresholded at 0.5 as if
    probabilities (accuracy 1/2, in silence); probabilities of the same ranking score."""
    import pytest

    with pytest.raises(ValueError, match=r"p_positive must be probabilities in \[0, 1\], got "
                                         r"2.3 \(logits or scores\?"):
        metrics.binary_metrics([1, 0, 0, 1], [2.3, -1.2, 0.4, -0.1])
    # the same scores through a sigmoid: 0.909, 0.231, 0.599, 0.475 -> predicted 1, 0, 1, 0
    got = metrics.binary_metrics([1, 0, 0, 1], [0.909, 0.231, 0.599, 0.475])
    assert got["accuracy"] == 0.5 and got["auc"] == 0.75  # pairs: 0.909 > both, 0.475 > 0.231
    assert metrics.auc([1, 0, 0, 1], [2.3, -1.2, 0.4, -0.1]) == 0.75  # any scores


def test_evaluate_notes_labels_that_make_the_controls_positive(tmp_path, capsys):
    """--labels AD,NC made NC class 1: the report's 'sensitivity' was NC's recall, without
    a word. The note comes before anything runs (here a refused --train-args stops it)."""
    from meshpar.cli import main

    (tmp_path / "data").mkdir()
    argv = ["evaluate", "--out", str(tmp_path / "out"), "--data", str(tmp_path / "data"),
            "--train-args", "--seed 3"]
    assert main(argv + ["--labels", "AD,NC"]) == 2
    err = capsys.readouterr().err
    assert ("meshpar evaluate: note: --labels AD,NC makes NC class 1, the positive class: "
            "sensitivity is the recall of NC and specificity of AD") in err
    assert "--train-args may not set --seed" in err.splitlines()[-1]
    for labels in ("NC,AD", "sMCI,pMCI", "x,y"):  # the patients second, or unknown names
        assert main(argv + ["--labels", labels]) == 2
        assert "note" not in capsys.readouterr().err
