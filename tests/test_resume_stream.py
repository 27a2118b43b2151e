"""A run resumed with another --batch goes on with the examples an uninterrupted run
would have seen next (the run file's ``stream``), for the synthetic images of the
VGG nets and for NIfTI subjects alike."""
import json

import numpy as np
import pytest
from mtf_helpers import at_checkpoint

from meshpar.training.inputs import stream_start
from meshpar.training.run import RUN_FILE, load_run_info, stream_segments


def _batches(input_fn, count):
    """The first ``count`` batches of ``input_fn``'s dataset, as numpy arrays."""
    return [(x.numpy(), y.numpy()) for x, y in input_fn().take(count)]


def test_stream_start_counts_each_stretch_with_its_own_batch():
    stream = [[0, 0, 4], [10, 40, 2], [15, 50, 8]]
    assert stream_start(None, 7, 4) == 28
    assert stream_start(stream, 7, 2) == 28      # the first stretch's batch, not the new one
    assert stream_start(stream, 12, 2) == 44
    assert stream_start(stream, 20, 8) == 90


def test_segments_begin_where_the_batch_changes_and_forget_steps_not_yet_reached():
    first = stream_segments(None, 0, 4)
    assert first == [[0, 0, 4]]
    assert stream_segments({"batch": 4, "stream": first}, 10, 4) == first  # same batch
    second = stream_segments({"batch": 4, "stream": first}, 10, 2)
    assert second == [[0, 0, 4], [10, 40, 2]]
    third = stream_segments({"batch": 2, "stream": second}, 15, 8)
    assert third == [[0, 0, 4], [10, 40, 2], [15, 50, 8]]
    # resumed from an older checkpoint (step 12): the stretch begun at 15 never ran
    assert stream_segments({"batch": 8, "stream": third}, 12, 8) == [
        [0, 0, 4], [10, 40, 2], [12, 44, 8]]
    # a run file written before the stream was kept trained every step with its batch
    assert stream_segments({"batch": 4}, 10, 2) == [[0, 0, 4], [10, 40, 2]]
    # a checkpoint without a run file (trained through the API): step * batch, as before
    assert stream_segments(None, 10, 2) == [[10, 20, 2]]


@pytest.mark.parametrize("stream", [[[0, 0, 0]], [[0, 0]], [[5, 0, 2], [3, 9, 2]],
                                    "x", [[0, -1, 2]], [[0, 0, True]]])
def test_a_malformed_stream_in_the_run_file_is_refused_naming_it(tmp_path, stream):
    (tmp_path / RUN_FILE).write_text(json.dumps({
        "model": "vgg-cifar-small", "model_overrides": {}, "labels": ["0", "1"],
        "input_shape": [32, 32, 3], "channels": 3, "batch": 2, "stream": stream}))
    with pytest.raises(ValueError, match="malformed stream="):
        load_run_info(str(tmp_path))


def test_synthetic_images_resumed_with_another_batch_go_on_where_the_stream_stopped(tmp_path):
    from meshpar.training.inputs import synthetic_image_fns

    whole, _ = synthetic_image_fns(24, (4, 4, 3), 0.0, 4, 5)
    straight = _batches(whole, 5)  # steps 0..4 at batch 4: examples 0..19
    resumed, _ = synthetic_image_fns(24, (4, 4, 3), 0.0, 2, 5, at_checkpoint(tmp_path, 4),
                                     stream=[[0, 0, 4], [4, 16, 2]])
    went_on = _batches(resumed, 2)  # steps 4, 5 at batch 2: examples 16..19
    np.testing.assert_array_equal(np.concatenate([b[0] for b in went_on]), straight[4][0])
    np.testing.assert_array_equal(np.concatenate([b[1] for b in went_on]), straight[4][1])


def test_synthetic_images_visit_every_image_once_an_epoch():
    from meshpar.training.inputs import synthetic_image_fns

    train_fn, _ = synthetic_image_fns(12, (4, 4, 3), 0.0, 4, 3)
    batches = _batches(train_fn, 6)  # two epochs of 12
    for epoch in (batches[:3], batches[3:]):
        images = np.concatenate([b[0] for b in epoch]).reshape(12, -1)
        assert len({row.tobytes() for row in images}) == 12
    assert not np.array_equal(batches[0][0], batches[3][0])  # each epoch reshuffled


def test_nifti_subjects_resumed_with_another_batch_go_on_where_the_stream_stopped(tmp_path):
    from meshpar.data import NiftiDataset, write_dataset
    from meshpar.training.inputs import train_input_fn

    write_dataset(str(tmp_path / "d"), 10, shape=(8, 8, 8), seed=1)
    source = NiftiDataset(str(tmp_path / "d"), (8, 8, 8))
    straight = _batches(train_input_fn(source, 3, 7), 4)  # examples 0..11
    resumed = train_input_fn(source, 2, 7, at_checkpoint(tmp_path / "m", 2),
                             stream=[[0, 0, 3], [2, 6, 2]])
    went_on = _batches(resumed, 3)  # examples 6..11
    np.testing.assert_array_equal(np.concatenate([b[0] for b in went_on]),
                                  np.concatenate([straight[2][0], straight[3][0]]))


def test_train_records_the_stream_and_resumes_another_batch_from_where_it_stopped(
        tmp_path, capsys):
    from meshpar.cli import main

    base = ["train", "--synthetic", "--model", "vgg-cifar-small", "--n-synthetic", "16",
            "--no-progress", "--val-fraction", "0", "--model-dir", str(tmp_path / "m")]
    assert main(base + ["--steps", "3", "--batch", "4"]) == 0
    assert load_run_info(str(tmp_path / "m"))["stream"] == [[0, 0, 4]]
    capsys.readouterr()
    assert main(base + ["--steps", "5", "--batch", "2"]) == 0
    assert "going on from example 12 of the data stream" in capsys.readouterr().err
    info = load_run_info(str(tmp_path / "m"))
    assert info["stream"] == [[0, 0, 4], [3, 12, 2]] and info["batch"] == 2
