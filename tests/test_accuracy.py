"""The phantom tasks are learnable at the default settings: what their ground truth allows.

No network is trained here (accuracy of the model is measured by the
protocol, ``meshpar evaluate``, over seeds and folds; see docs/accuracy.md).
These checks guard the data: a classifier given the generator's
image-visible anatomy of 400 subjects per class (fitted on half, scored on the
other half) separates NC from AD almost perfectly and sMCI from pMCI well but
not perfectly, while the disease stage itself bounds both.
"""
import numpy as np

from meshpar.data.phantoms import anatomy_measures, sample_params
from meshpar.evaluation.ceiling import ceiling_metrics


def _truth(labels, n_per_class=400, seed=7):
    rng = np.random.default_rng(seed)
    truth = {}
    for label in labels:
        for i in range(n_per_class):
            p = sample_params(rng, label, labels)
            truth[f"{label}-{i}"] = {"label": label, "atrophy": p.atrophy,
                                     "measures": anatomy_measures(p)}
    return truth


def _ceilings(labels):
    truth = _truth(labels)
    keys = sorted(truth)
    return ceiling_metrics(truth, keys[::2], keys[1::2], labels[1])


def test_ad_vs_nc_is_separable_from_anatomy():
    c = _ceilings(("NC", "AD"))
    assert c["anatomy"]["accuracy"] >= 0.97
    assert c["anatomy"]["auc"] >= 0.99


def test_smci_vs_pmci_is_learnable_but_harder():
    c = _ceilings(("sMCI", "pMCI"))
    assert 0.88 <= c["anatomy"]["accuracy"] < 0.99
    assert c["anatomy"]["accuracy"] <= c["disease_stage"]["accuracy"] + 0.02
