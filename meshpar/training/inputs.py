"""Which subjects train, validate and test, and the ``input_fn`` s that stream them.

The held-out **test** set is chosen first and never trained on: fold ``fold``
of :func:`meshpar.data.person_folds` ``(subjects, folds, seed=fold_seed)``, or
a stratified ``test_fraction`` of the people (seeded by ``fold_seed`` too, so
changing the training ``seed`` never moves a subject into or out of the test
set). The validation split (``val_fraction``, seeded by ``seed``) is taken
from the rest. Without a test split the train/validation split is exactly
:func:`meshpar.data.split_subjects` of all subjects.

``input_fn`` s for ``tf.estimator``: training (shuffled, repeated, resumes
where its checkpoint left off), evaluation and prediction (every subject, the
last batch padded to the mesh's static batch; evaluation labels the padding
:data:`PAD_LABEL`, which the model's metrics and loss leave out, and
prediction drops it again).
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

import numpy as np

#: The label of the zero volumes that fill an evaluation's last batch up to the
#: mesh's static batch: the model's evaluation scores only labels >= 0.
PAD_LABEL = -1

__all__ = ["PAD_LABEL", "test_split", "check_split_request", "split_three_ways",
           "checkpoint_step", "train_input_fn", "eval_input_fn", "pad_last_batch",
           "predict_input_fn", "predict_probabilities", "synthetic_image_fns",
           "synthetic_class_counts", "stream_start"]


def test_split(subjects: Sequence, folds: Optional[int] = None, fold: Optional[int] = None,
               fold_seed: int = 0, test_fraction: Optional[float] = None):
    """``(rest, test)``: the held-out test subjects by person, or ``(subjects, [])``.

    ``folds``/``fold``: fold ``fold`` of :func:`meshpar.data.person_folds`;
    ``test_fraction``: a stratified share of the people. Both seeded by
    ``fold_seed``. ValueError for an incomplete or contradictory request.
    """
    from meshpar.data import fold_split, split_subjects

    check_split_request(folds, fold, test_fraction)
    if folds is not None:
        return fold_split(list(subjects), folds, fold, seed=fold_seed)
    if test_fraction is not None:
        return split_subjects(list(subjects), test_fraction, seed=fold_seed)
    return list(subjects), []


def check_split_request(folds: Optional[int] = None, fold: Optional[int] = None,
                        test_fraction: Optional[float] = None, **_) -> None:
    """ValueError for an incomplete or contradictory test-split request (see
    :func:`test_split`)."""
    if (folds is None) != (fold is None):
        raise ValueError("--folds and --fold go together (fold I of K is the test set)")
    if folds is not None and test_fraction is not None:
        raise ValueError("give --folds/--fold or --test-fraction, not both")
    if folds is not None:
        if folds < 2:
            raise ValueError(f"--folds must be >= 2, got {folds}")
        if not 0 <= fold < folds:
            raise ValueError(f"--fold must be in [0, {folds}), got {fold}")
    if test_fraction is not None and not 0.0 < test_fraction < 1.0:
        raise ValueError(f"--test-fraction must be in (0, 1), got {test_fraction}")


def split_three_ways(subjects: Sequence, val_fraction: float, seed: int, **test):
    """``(train, validation, test)`` subjects; ``test`` as for :func:`test_split`."""
    from meshpar.data import split_subjects

    rest, held_out = test_split(subjects, **test)
    train, val = split_subjects(rest, val_fraction, seed=seed)
    return train, val, held_out


def checkpoint_step(model_dir) -> int:
    """Global step of the latest checkpoint in ``model_dir`` (0 if none)."""
    if not model_dir or not os.path.isdir(model_dir):
        return 0
    import tensorflow.compat.v1 as tf

    latest = tf.train.latest_checkpoint(str(model_dir))
    return int(latest.rsplit("-", 1)[1]) if latest else 0


def stream_start(segments, step: int, batch: int) -> int:
    """The number of the training stream's first example at global ``step``.

    ``segments``: ``[(first_step, first_example, batch), ...]``, the run file's
    ``stream`` (meshpar.training.run.stream_segments): where each stretch of
    training with one batch began; a step after a stretch's first step takes
    that stretch's batch. Without segments (None or empty) every step took
    ``batch`` examples: ``step * batch``.
    """
    began = [s for s in (segments or ()) if int(s[0]) <= step]
    if not began:
        return int(step) * int(batch)
    first_step, first_example, stretch_batch = max(began, key=lambda s: int(s[0]))
    return int(first_example) + (int(step) - int(first_step)) * int(stretch_batch)


def train_input_fn(source, batch: int, seed: int, model_dir=None, augment: bool = False,
                   stream=None):
    """Shuffled, repeated whole batches of a :class:`~meshpar.data.NiftiDataset`.

    Called by each ``Estimator.train``, it starts where the latest checkpoint
    in ``model_dir`` left the stream (:func:`stream_start` of ``stream``, by
    default ``step * batch`` examples in), so a resumed or chunked run sees the
    batches of an uninterrupted one, also when it resumes with another batch
    (with ``skip_bad``, the bad subjects the stream passed are counted too:
    :meth:`~meshpar.data.NiftiDataset.stream_element`). ``augment``: the random steps of the dataset's transform draw from
    ``(seed, example number)``.
    """
    def input_fn():
        # the element the stream reached: with skip_bad, the bad subjects it passed too
        start = source.stream_element(stream_start(stream, checkpoint_step(model_dir), batch),
                                      seed, shuffle=True)
        return source.to_tf(batch, shuffle=True, augment=augment, seed=seed, repeat=True,
                            drop_remainder=True, start=start)

    return input_fn


def pad_last_batch(batch: int, labels: bool = True):
    """A ``Dataset.map`` function that fills a short batch up to ``batch`` with zero
    volumes (labelled :data:`PAD_LABEL` when ``labels``; features only when
    not) and gives it the static batch the mesh needs."""
    import tensorflow.compat.v1 as tf

    def pad_volume(x):
        missing = batch - tf.shape(x)[0]
        x = tf.pad(x, [[0, missing]] + [[0, 0]] * (len(x.shape) - 1))
        x.set_shape([batch] + x.shape.as_list()[1:])
        return x

    def pad(x, y):
        if not labels:
            return pad_volume(x)
        y = tf.pad(y, [[0, batch - tf.shape(y)[0]]], constant_values=PAD_LABEL)
        y.set_shape([batch])
        return pad_volume(x), y

    return pad


def eval_input_fn(source, batch: int):
    """One pass in file order over every subject, the last batch padded with
    :data:`PAD_LABEL` examples (the mesh needs a static batch; the model's
    evaluation leaves them out of its metrics and its loss)."""
    def input_fn():
        return source.to_tf(batch, shuffle=False, drop_remainder=False).map(
            pad_last_batch(batch))

    return input_fn


def predict_input_fn(source, batch: int):
    """One pass in file order over every subject; the last batch is padded with
    zero volumes to ``batch`` (the mesh needs a static batch). Features only."""
    def input_fn():
        return source.to_tf(batch, shuffle=False, drop_remainder=False).map(
            pad_last_batch(batch, labels=False))

    return input_fn


def predict_probabilities(estimator, source, batch: int,
                          checkpoint_path: Optional[str] = None):
    """``(subjects, probabilities [n, classes])`` for the subjects of ``source``, in its
    order, from ``checkpoint_path`` (default: the latest checkpoint).

    With ``skip_bad`` a subject whose voxels turn out bad is left out of both.
    Batch norm runs on its moving averages in prediction, so an example's
    probabilities do not depend on the padding in its batch.
    """
    import tensorflow.compat.v1 as tf

    try:
        rows = [p["probabilities"] for p in estimator.predict(
            predict_input_fn(source, batch), checkpoint_path=checkpoint_path,
            yield_single_examples=True)]
    except tf.errors.NotFoundError as err:
        mismatch = _another_models_checkpoint(err, checkpoint_path or estimator.model_dir)
        if mismatch is None:
            raise
        raise mismatch from None
    bad = {item.path for item in source.skipped}
    subjects = [s for s in source.subjects if s.path not in bad]
    return subjects, np.asarray(rows[:len(subjects)], dtype=np.float64)


def _another_models_checkpoint(error, checkpoint: str) -> Optional[ValueError]:
    """A ValueError naming ``checkpoint`` when TensorFlow's ``error`` says that it lacks
    a variable of the model: a checkpoint of another model. None for any other error."""
    import re

    text = str(getattr(error, "message", None) or error)
    missing = re.search(r"Key (\S+) not found in checkpoint", text)
    if missing:
        return ValueError(f"checkpoint {checkpoint} has no variable {missing.group(1)} of "
                          "this model: a checkpoint of another model")
    return None


def synthetic_validation_count(n: int, val_fraction: float) -> int:
    """How many of :func:`synthetic_image_fns`' ``n`` images validate (the first ones)."""
    return int(round(n * val_fraction))


def synthetic_class_counts(n: int, val_fraction: float, classes: int) -> list:
    """Training images per class of :func:`synthetic_image_fns` (``classes`` entries:
    image i is of class ``i % 2``; the first :func:`synthetic_validation_count`
    validate)."""
    labels = np.arange(synthetic_validation_count(n, val_fraction), n) % 2
    return [int(c) for c in np.bincount(labels, minlength=classes)]


def synthetic_image_fns(n: int, shape: Sequence[int], val_fraction: float, batch: int,
                        seed: int, model_dir=None, stream=None):
    """``(train_fn, eval_fn or None)`` of two-class random images: class 1 has a
    brighter centre. The first :func:`synthetic_validation_count` images validate.
    Training streams the rest as :func:`train_input_fn` streams subjects: epoch
    ``e`` in :func:`meshpar.data.nifti.epoch_order` ``(n, seed, e)``, from the example
    :func:`stream_start` names for the latest checkpoint in ``model_dir``."""
    import tensorflow.compat.v1 as tf

    from meshpar.data.nifti import epoch_order

    rng = np.random.RandomState(seed)
    x = rng.randn(n, *shape).astype(np.float32)
    y = (np.arange(n) % 2).astype(np.int32)
    h, w = shape[0], shape[1]
    x[y == 1, h // 4:3 * h // 4, w // 4:3 * w // 4] += 1.0
    n_val = synthetic_validation_count(n, val_fraction)
    xt, yt, xv, yv = x[n_val:], y[n_val:], x[:n_val], y[:n_val]

    def take(numbers):  # a batch of example numbers -> its images and labels
        epochs, positions = np.divmod(numbers, len(xt))
        index = np.empty_like(positions)
        for e in np.unique(epochs):  # a batch straddles at most two epochs
            index[epochs == e] = epoch_order(len(xt), seed, int(e))[positions[epochs == e]]
        return xt[index], yt[index]

    def train_fn():
        start = stream_start(stream, checkpoint_step(model_dir), batch)

        def images(numbers):
            x, y = tf.numpy_function(take, [numbers], (tf.float32, tf.int32), stateful=False)
            x.set_shape([batch, *shape])
            y.set_shape([batch])
            return x, y

        # prefetch: the next batch is made while the step runs, not inside it
        return tf.data.Dataset.range(start, 2**62).batch(batch).map(images).prefetch(2)

    def eval_fn():
        return tf.data.Dataset.from_tensor_slices((xv, yv)).batch(batch).map(
            pad_last_batch(batch))

    return train_fn, (eval_fn if n_val else None)
