"""Can a small 3-D CNN tell AD from NC phantoms at 32^3, and can mean intensity?

A proxy for ``resattnet3d-small``: a tiny tf.keras 3-D CNN (conv3d 8-16-32
with max pooling, global average pooling, one logit; Adam 1e-3) is trained
on synthetic phantoms (:func:`meshpar.data.phantoms.write_dataset`) read back
through the standard pre-processing (:class:`meshpar.data.NiftiDataset`:
reorient, resample, z-score), then scored on held-out phantoms written with
another seed. The baseline is a logistic regression on the z-scored mean
intensity of the raw volume, and of the pre-processed one. Each repeat draws
new train/test cohorts and a new network initialisation.

Prints one row per model (held-out accuracy and AUC, mean and range over
repeats) and writes JSON with --out.

    python benchmarks/phantom_learnability.py [--quick] [--repeats 3] [--out learnability.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from meshpar.data import NiftiDataset, load_volume  # noqa: E402
from meshpar.data.phantoms import write_dataset  # noqa: E402


def auc(score: np.ndarray, y: np.ndarray) -> float:
    """Probability that a random positive scores above a random negative (ties count half)."""
    score, y = np.asarray(score, float), np.asarray(y)
    pos, neg = score[y == 1][:, None], score[y == 0][None, :]
    return float((pos > neg).mean() + 0.5 * (pos == neg).mean())


def logistic_1d(x_train, y_train, x_test, steps: int = 50):
    """Fit ``sigmoid(a * z + b)`` on z-scored ``x_train`` by Newton's method; probabilities for ``x_test``."""
    mean, std = float(np.mean(x_train)), float(np.std(x_train)) or 1.0
    z = (np.asarray(x_train, float) - mean) / std
    design = np.stack([z, np.ones_like(z)], axis=1)
    w = np.zeros(2)
    for _ in range(steps):
        p = 1 / (1 + np.exp(-design @ w))
        grad = design.T @ (p - y_train)
        hess = design.T @ (design * (p * (1 - p))[:, None]) + 1e-6 * np.eye(2)
        w -= np.linalg.solve(hess, grad)
    zt = (np.asarray(x_test, float) - mean) / std
    return 1 / (1 + np.exp(-(w[0] * zt + w[1])))


def load_cohort(directory: Path, shape):
    """Pre-processed arrays ``[N, *shape, 1]``, labels, and each raw volume's mean intensity."""
    ds = NiftiDataset(directory, shape)
    xs, ys = zip(*(ds[i] for i in range(len(ds))))
    raw_mean = np.array([float(load_volume(s.path).data.mean()) for s in ds.subjects])
    return np.stack(xs), np.array(ys, np.int32), raw_mean


def proxy_cnn(shape, seed: int):
    """conv3d 8-16-32 (3^3, ReLU) each followed by 2^3 max pooling, GAP, one logit."""
    import tensorflow as tf

    tf.keras.utils.set_random_seed(seed)
    layers = tf.keras.layers
    model = tf.keras.Sequential([tf.keras.Input(shape=tuple(shape) + (1,))])
    for filters in (8, 16, 32):
        model.add(layers.Conv3D(filters, 3, padding="same", activation="relu"))
        model.add(layers.MaxPooling3D(2))
    model.add(layers.GlobalAveragePooling3D())
    model.add(layers.Dense(1))
    model.compile(optimizer=tf.keras.optimizers.Adam(1e-3),
                  loss=tf.keras.losses.BinaryCrossentropy(from_logits=True))
    return model


def run_once(args, repeat: int, workdir: Path) -> dict:
    shape = (args.size,) * 3
    seed = args.seed + 1000 * repeat
    t0 = time.perf_counter()
    train_dir, test_dir = workdir / f"train{repeat}", workdir / f"test{repeat}"
    write_dataset(train_dir, args.n_train, shape=shape, seed=seed)
    write_dataset(test_dir, args.n_test, shape=shape, seed=seed + 1)
    x_train, y_train, raw_train = load_cohort(train_dir, shape)
    x_test, y_test, raw_test = load_cohort(test_dir, shape)
    t_data = time.perf_counter() - t0

    result = {"repeat": repeat, "seed": seed, "data_seconds": round(t_data, 1)}
    for name, f_train, f_test in (
        ("mean intensity (raw)", raw_train, raw_test),
        ("mean intensity (pre-processed)", x_train.mean(axis=(1, 2, 3, 4)), x_test.mean(axis=(1, 2, 3, 4))),
    ):
        p = logistic_1d(f_train, y_train, f_test)
        result[name] = {"acc": float(((p > 0.5) == y_test).mean()), "auc": auc(p, y_test)}

    t0 = time.perf_counter()
    model = proxy_cnn(shape, seed)
    history = []
    for epoch in range(args.epochs):
        model.fit(x_train, y_train, batch_size=args.batch, epochs=1, shuffle=True, verbose=0)
        if args.verbose or epoch == args.epochs - 1:
            logits = model.predict(x_test, batch_size=32, verbose=0)[:, 0]
            history.append({"epoch": epoch + 1, "acc": float(((logits > 0) == y_test).mean()),
                            "auc": auc(logits, y_test)})
            if args.verbose:
                print(f"  repeat {repeat} epoch {epoch + 1:3d}: held-out acc {history[-1]['acc']:.3f} "
                      f"auc {history[-1]['auc']:.3f}", file=sys.stderr)
    result["proxy CNN"] = {"acc": history[-1]["acc"], "auc": history[-1]["auc"]}
    result["train_seconds"] = round(time.perf_counter() - t0, 1)
    result["history"] = history
    return result


MODELS = ("proxy CNN", "mean intensity (raw)", "mean intensity (pre-processed)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat instead of three")
    parser.add_argument("--n-train", type=int, default=160)
    parser.add_argument("--n-test", type=int, default=60)
    parser.add_argument("--size", type=int, default=32, help="cubic grid size (default 32)")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="TensorFlow CPU threads (default 2)")
    parser.add_argument("--verbose", action="store_true", help="held-out scores after every epoch")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = 1

    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    runs = []
    with tempfile.TemporaryDirectory(prefix="phantom_learnability_") as tmp:
        for repeat in range(args.repeats):
            runs.append(run_once(args, repeat, Path(tmp)))
            r = runs[-1]
            print(f"repeat {repeat}: CNN acc {r['proxy CNN']['acc']:.3f} auc {r['proxy CNN']['auc']:.3f} | "
                  f"data {r['data_seconds']}s, training {r['train_seconds']}s", flush=True)

    print(f"\n{args.n_train} train / {args.n_test} held-out phantoms at {args.size}^3, "
          f"{args.epochs} epochs, {args.repeats} repeat(s)")
    print(f"{'model':32s} {'acc mean':>9s} {'acc min':>8s} {'acc max':>8s} {'AUC mean':>9s}")
    summary = {}
    for name in MODELS:
        accs = np.array([r[name]["acc"] for r in runs])
        aucs = np.array([r[name]["auc"] for r in runs])
        summary[name] = {"acc_mean": float(accs.mean()), "acc_min": float(accs.min()),
                         "acc_max": float(accs.max()), "auc_mean": float(aucs.mean())}
        print(f"{name:32s} {accs.mean():9.3f} {accs.min():8.3f} {accs.max():8.3f} {aucs.mean():9.3f}")
    train_s = [r["train_seconds"] for r in runs]
    print(f"CNN training time per repeat: {np.mean(train_s):.0f} s (CPU, {args.threads} threads)")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"args": vars(args), "summary": summary, "runs": runs}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
