"""With ``--skip-bad``, a run resumed (or trained in chunks) goes on with the examples an
uninterrupted run would see: the bad subjects the stream passed before the checkpoint
count too (``NiftiDataset.stream_element``). Before, the resumed stream started at
``step * batch`` elements, as if no subject had been left out, and saw again examples
the uninterrupted run had already trained on."""
import json

import numpy as np
import pytest
from mtf_helpers import at_checkpoint

N, SHAPE = 7, (8, 8, 8)


def _spoil(path):
    """Make one subject's voxels NaN (found only when its voxels are read)."""
    import nibabel as nib

    image = nib.load(str(path))
    data = np.full(image.shape, np.nan, np.float32)
    nib.save(nib.Nifti1Image(data, image.affine), str(path))


@pytest.fixture(scope="module")
def spoilt(tmp_path_factory):
    """Seven phantoms, two of them NaN."""
    from meshpar.data import write_dataset

    root = tmp_path_factory.mktemp("spoilt") / "d"
    write_dataset(str(root), N, shape=SHAPE, seed=3)
    subjects = sorted((root / "subjects").iterdir())
    for bad in (subjects[1], subjects[4]):
        _spoil(bad)
    return root


def _source(root):
    from meshpar.data import NiftiDataset

    return NiftiDataset(str(root), SHAPE, skip_bad=True)


def _examples(input_fn, count):
    """The first ``count`` batches' volumes of ``input_fn``'s dataset, one row a volume."""
    return np.concatenate([x.numpy().reshape(len(x), -1)
                           for x, _ in input_fn().take(count)])


@pytest.mark.parametrize("step", [1, 2, 3, 4, 5, 7])
def test_a_resumed_skip_bad_stream_goes_on_with_the_uninterrupted_examples(
        spoilt, tmp_path, step):
    from meshpar.training.inputs import train_input_fn

    batch = 2  # five usable subjects: examples straddle epochs at every step
    straight = _examples(train_input_fn(_source(spoilt), batch, 7), step + 3)
    resumed = train_input_fn(_source(spoilt), batch, 7, at_checkpoint(tmp_path / "m", step))
    np.testing.assert_array_equal(_examples(resumed, 3), straight[step * batch:])


def test_a_skip_bad_stream_resumed_with_another_batch(spoilt, tmp_path):
    from meshpar.training.inputs import train_input_fn

    straight = _examples(train_input_fn(_source(spoilt), 1, 7), 20)
    # steps 0..2 at batch 3 (examples 0..8), then steps 3.. at batch 2 (9, 10, ...)
    resumed = train_input_fn(_source(spoilt), 2, 7, at_checkpoint(tmp_path / "m", 3),
                             stream=[[0, 0, 3], [3, 9, 2]])
    np.testing.assert_array_equal(_examples(resumed, 4), straight[9:17])


def test_stream_element_counts_the_bad_subjects_passed(spoilt):
    from meshpar.data.nifti import epoch_order

    source = _source(spoilt)
    assert source.stream_element(0, 7) == 0
    usable = [source._usable(i) for i in range(N)]
    bad = {i for i, ok in enumerate(usable) if not ok}
    assert len(bad) == 2 and len(source.skipped) == 2
    elements = [e for e in range(5 * N) if int(epoch_order(N, 7, e // N)[e % N]) not in bad]
    for examples in range(1, 20):  # the element after the examples-th usable one
        assert source.stream_element(examples, 7) == elements[examples - 1] + 1
    clean = _source(spoilt)
    clean.skip_bad = False
    assert clean.stream_element(9, 7) == 9


def test_chunked_skip_bad_training_on_an_uneven_mesh_equals_one_run(spoilt, tmp_path, capsys):
    """``meshpar train --skip-bad`` to step 6 in one run and in two (resumed at step 3)
    on two uneven emulated devices: the same weights."""
    import tensorflow.compat.v1 as tf

    from meshpar.cli import main

    tiny = tmp_path / "tiny3d.py"
    from test_custom_model_cli import TINY3D

    tiny.write_text(TINY3D, encoding="utf-8")
    base = ["train", "--data", str(spoilt), "--model", str(tiny), "--batch", "2",
            "--val-fraction", "0", "--no-progress", "--json", "--skip-bad",
            "--augment", "none", "--lr-schedule", "constant", "--lr-warmup-steps", "0",
            "--speeds", "0.7,0.3", "--mesh", "batch:2"]
    assert main(base + ["--steps", "6", "--model-dir", str(tmp_path / "one")]) == 0
    for steps in ("3", "6"):
        assert main(base + ["--steps", steps, "--model-dir", str(tmp_path / "two")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["skipped_subjects"] == 2
    one, two = (tf.train.load_checkpoint(str(tmp_path / d)) for d in ("one", "two"))
    for name in ("conv1/kernel", "conv2/kernel", "head/kernel"):
        np.testing.assert_allclose(two.get_tensor(name), one.get_tensor(name),
                                   rtol=0, atol=1e-7, err_msg=name)


def test_subjects_the_stream_has_read_are_not_read_again(spoilt, monkeypatch):
    """In one process (keep-best, --rebalance and --elastic chunks), the subjects the
    training stream has read already tell which are usable: counting them reads no
    file again."""
    from meshpar.training.inputs import train_input_fn

    source = _source(spoilt)
    _examples(train_input_fn(source, 2, 7), 6)  # 12 examples: every subject met

    def no_reading(*args, **kwargs):
        raise AssertionError("read again")

    monkeypatch.setattr(source, "load", no_reading)
    fresh = _source(spoilt)
    assert [source.stream_element(k, 7) for k in range(1, 12)] == [
        fresh.stream_element(k, 7) for k in range(1, 12)]
