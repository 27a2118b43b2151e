"""Learnability ceilings of the phantom tasks for several group severities (no training).

For each (class 0, class 1) severity pair, subjects are drawn with
:func:`meshpar.data.phantoms.sample_params` (anatomy only; nothing is
rendered) and the ceilings of :mod:`meshpar.evaluation.ceiling` (logistic
regression on the true disease stage; on the image-visible anatomy measures)
are scored on held-out subjects in two regimes:

* protocol size: ``--n`` subjects per seed (equal classes), test fold 0 of
  ``--folds``, mean +/- std over ``--seeds`` (what ``meshpar evaluate`` sees);
* asymptotic: ``--n-large`` subjects per class, half for fitting, half held out.

    python benchmarks/accuracy.py [--out benchmarks/results/accuracy-ceilings/ceilings.json]

The full accuracy protocol (training) is ``meshpar evaluate``; see docs/accuracy.md.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from meshpar.data.phantoms import GROUP_SEVERITY, anatomy_measures, sample_params
from meshpar.evaluation.ceiling import CEILINGS, ceiling_metrics
from meshpar.evaluation.metrics import mean_std


def cohort(n_per_class: int, severities, seed: int) -> dict:
    """Ground truth of ``2 * n_per_class`` subjects, keyed like ``phantoms.json``."""
    rng = np.random.default_rng(seed)
    truth = {}
    for cls, severity in enumerate(severities):
        for i in range(n_per_class):
            params = sample_params(rng, str(cls), ("0", "1"), severity=severity)
            truth[f"c{cls}-{i:05d}"] = {"label": str(cls), "atrophy": params.atrophy,
                                        "measures": anatomy_measures(params)}
    return truth


def protocol_size(severities, n: int, folds: int, seeds) -> dict:
    """Ceilings on test fold 0 of ``folds`` (every folds-th subject of a shuffled
    cohort), mean +/- std over ``seeds``."""
    scores = {name: [] for name in CEILINGS}
    for seed in seeds:
        truth = cohort(n // 2, severities, seed)
        keys = list(np.random.default_rng(seed).permutation(sorted(truth)))
        test, train = keys[::folds], [k for i, k in enumerate(keys) if i % folds]
        for name, m in ceiling_metrics(truth, train, test, "1").items():
            scores[name].append(m["accuracy"])
    return {name: mean_std(v) for name, v in scores.items()}


def asymptotic(severities, n_large: int, seed: int) -> dict:
    """Held-out accuracy of each ceiling fitted on ``n_large`` subjects."""
    truth = cohort(n_large, severities, seed)
    keys = sorted(truth)
    return {name: m["accuracy"] for name, m in
            ceiling_metrics(truth, keys[0::2], keys[1::2], "1").items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default="0.0:1.0,0.3:0.65,0.25:0.75,0.2:0.8",
                        help="severity pairs class0:class1 (default: NC/AD, the old and the "
                             "candidate sMCI/pMCI settings)")
    parser.add_argument("--n", type=int, default=128)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--n-large", type=int, default=4000)
    parser.add_argument("--out", default=None, help="write JSON here")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    print(f"default severities: {dict(GROUP_SEVERITY)}")
    print(f"{'class0:class1':14s} {'ceiling':14s} {'n=' + str(args.n) + ' fold 0 (mean +/- std)':>30s}"
          f" {'asymptotic':>11s}")
    for pair in args.pairs.split(","):
        severities = tuple(float(v) for v in pair.split(":"))
        small = protocol_size(severities, args.n, args.folds, seeds)
        large = asymptotic(severities, args.n_large, seed=1000)
        for name in CEILINGS:
            print(f"{pair:14s} {name:14s} {small[name]['mean']:23.3f} +/- {small[name]['std']:.3f}"
                  f" {large[name]:11.3f}")
        rows.append({"severities": list(severities), "protocol_size": small, "asymptotic": large})
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"args": vars(args), "results": rows}, indent=1)
                                  + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
