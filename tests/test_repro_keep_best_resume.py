"""Keep-best resumed from a checkpoint it never scored keeps what one run keeps.

``train_keeping_best`` scored only the checkpoints its own run wrote. A run that
stopped at a checkpoint before scoring it (killed between the save and the
evaluation, or an earlier ``meshpar train --steps 3`` with keep-best off because
one checkpoint left nothing to choose from) and was then resumed never scored that
checkpoint: with ``--checkpoint-every 3`` a run to 6 steps in one go kept step 3
(validation loss 0.734) in ``best/``, the same run in two chunks kept step 6
(0.793), so the test set and ``predict --checkpoint best`` used other weights. A
resumed run now scores the checkpoint it starts from when it lies on the
``every`` cadence (the one run scored it too); a checkpoint scored already is not
kept twice (keep_if_best keeps only a strictly lower loss).
"""
import numpy as np
import tensorflow.compat.v1 as tf

from meshpar.models import ResAttNet3DConfig
from meshpar.training import estimator as E
from meshpar.training.run import best_record, train_keeping_best
from mtf_helpers import tiny_volumes

TINY = ResAttNet3DConfig.small(input_shape=(8, 8, 8), stem_filters=4, stage_filters=(6,),
                               attention_stages=(0,), name="tiny-resattnet3d")
EVERY, STEPS, BATCH = 2, 4, 4


def _estimator(model_dir):
    return E.make_estimator(TINY, str(model_dir), optimizer="sgd", learning_rate=0.5, seed=3)


def _train_fn():
    x, y = tiny_volumes()
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH, drop_remainder=True).repeat()


def _eval_fn():
    # the training volumes with their labels swapped: the more the model learns, the
    # higher this loss, so the earlier checkpoint is the best one
    x, y = tiny_volumes()
    return tf.data.Dataset.from_tensor_slices((x, 1 - y)).batch(BATCH, drop_remainder=True)


def _best_weights(model_dir):
    step = best_record(str(model_dir))["step"]
    reader = tf.train.load_checkpoint(str(model_dir / "best" / f"model.ckpt-{step}"))
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}


def test_a_resumed_keep_best_run_scores_its_unscored_first_checkpoint(tmp_path):
    scores = train_keeping_best(_estimator(tmp_path / "one"), _train_fn, _eval_fn, STEPS, EVERY)
    assert [step for step, _ in scores] == [2, 4]
    # what makes the comparison below mean something: one run keeps the first checkpoint
    assert scores[0][1] < scores[1][1] and best_record(str(tmp_path / "one"))["step"] == 2

    # the same run stopped at its first checkpoint before scoring it, then resumed
    chunked = _estimator(tmp_path / "two")
    chunked.train(_train_fn, max_steps=EVERY)
    resumed = train_keeping_best(chunked, _train_fn, _eval_fn, STEPS, EVERY)
    assert resumed == scores
    assert best_record(str(tmp_path / "two")) == best_record(str(tmp_path / "one"))
    one, two = _best_weights(tmp_path / "one"), _best_weights(tmp_path / "two")
    assert sorted(one) == sorted(two)
    for name in one:
        np.testing.assert_array_equal(one[name], two[name], err_msg=name)

    # resumed again from a checkpoint it scored: nothing scored twice, nothing trained
    assert train_keeping_best(_estimator(tmp_path / "two"), _train_fn, _eval_fn, STEPS,
                              EVERY) == []
