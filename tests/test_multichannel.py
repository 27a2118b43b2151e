"""Several co-registered volumes per subject: a 4-D NIfTI (channels last) reads as a
multi-channel example, every channel moved by the same augmentation, and a
2-channel network trains on an uneven mesh like on one device."""
import numpy as np
import pytest

from mtf_helpers import fresh_tf_graph, session, tf
from nifti_helpers import blob, save_nifti

from meshpar.data import BadSubjectError, NiftiDataset, Subject, default_transform
from meshpar.models import ResAttNet3DConfig


@pytest.fixture
def two_channel_dir(tmp_path):
    """Two subjects whose second channel is 3 * first + 7 (same anatomy, other contrast)."""
    for i in range(2):
        t1 = blob(seed=i)
        save_nifti(tmp_path / f"s{i}.nii.gz", np.stack([t1, 3 * t1 + 7], axis=-1))
    save_nifti(tmp_path / "flat.nii.gz", blob(seed=5))
    (tmp_path / "labels.csv").write_text("subject,label\ns0.nii.gz,NC\ns1.nii.gz,AD\n")
    return tmp_path


def test_four_d_file_reads_as_channels_each_normalised_and_augmented_alike(two_channel_dir):
    ds = NiftiDataset(two_channel_dir, (10, 10, 10), channels=2,
                      transform=default_transform((10, 10, 10), augment=True))
    x, y = ds.load(1)
    assert x.shape == (10, 10, 10, 2) and y == 1
    np.testing.assert_allclose(x[..., 1], x[..., 0], atol=1e-4)  # z-scored per channel
    rng = np.random.default_rng(0)
    moved, _ = ds.load(1, rng)
    assert np.abs(moved[..., 0] - x[..., 0]).max() > 0.1  # the augmentation acts
    np.testing.assert_allclose(moved[..., 1], moved[..., 0], atol=1e-4)  # on both alike
    again, _ = ds.load(1, np.random.default_rng(0))
    np.testing.assert_array_equal(again, moved)  # seeded: deterministic


def test_channel_count_must_match_the_file(two_channel_dir):
    flat = Subject(two_channel_dir / "flat.nii.gz", "NC", subject_id="flat")
    with pytest.raises(BadSubjectError, match=r"flat.nii.gz: has shape \(12, 12, 12\), "
                                              r"expected 2 channels"):
        NiftiDataset(two_channel_dir, (10, 10, 10), channels=2, subjects=[flat])
    with pytest.raises(BadSubjectError, match="2 volumes, expected one 3-D volume"):
        NiftiDataset(two_channel_dir, (10, 10, 10))  # one channel: a 4-D file is refused


def _train(mesh, steps=2):
    """SGD ``steps`` on a 2-channel tiny network through the estimator's lowering."""
    from meshpar import models
    from meshpar.training.estimator import lower_model

    config = ResAttNet3DConfig.small(input_shape=(8, 8, 8), in_channels=2, stem_filters=4,
                                     stage_filters=(6,), attention_stages=(0,), name="tiny2")
    spec = models.ModelSpec("tiny2", models.resattnet3d, config)
    fresh_tf_graph()
    rng = np.random.RandomState(0)
    x = rng.randn(6, 8, 8, 8, 2).astype(np.float32)
    y = (np.arange(6) % 2).astype(np.int32)
    x[y == 1, 2:6, 2:6, 2:6, 1] += 1.0  # class 1: a blob in the second channel only
    lowering, logits, loss, updates = lower_model(spec, tf.constant(x), tf.constant(y), mesh,
                                                  True, "sgd", 0.1)
    tf_loss = lowering.export_to_tf_tensor(loss)
    tf_logits = lowering.export_to_tf_tensor(logits)
    step = tf.group(updates)
    out = []
    with session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(lowering.copy_masters_to_slices())
        for _ in range(steps):
            out.append(sess.run([tf_loss, tf_logits]))
            sess.run(step)
    return out


def test_two_channel_network_on_an_uneven_hybrid_mesh_trains_like_one_device():
    from meshpar.training.estimator import MeshSpec

    one = _train(MeshSpec("all:1"))
    uneven = _train(MeshSpec("batch:2;model:2", split_weights={"batch": [2, 1],
                                                                "model": [3, 1]}))
    for (loss_a, logits_a), (loss_b, logits_b) in zip(one, uneven):
        assert loss_b == pytest.approx(loss_a, abs=1e-5)
        np.testing.assert_allclose(logits_b, logits_a, atol=1e-5)
    assert one[1][0] != pytest.approx(one[0][0], abs=1e-6)  # the step changed the weights


def test_augmented_loads_reuse_the_fixed_steps_and_give_the_same_examples(two_channel_dir):
    def dataset(cache_bytes):
        return NiftiDataset(two_channel_dir, (10, 10, 10), channels=2, cache_bytes=cache_bytes,
                            transform=default_transform((10, 10, 10), augment=True))

    cached, fresh = dataset(2**20), dataset(0)
    for draw in range(2):  # the second draw starts from the kept re-oriented, resampled volumes
        a, _ = cached.load(0, np.random.default_rng(draw))
        b, _ = fresh.load(0, np.random.default_rng(draw))
        np.testing.assert_array_equal(a, b)
    assert list(cached._fixed_cache) == [0] and not fresh._fixed_cache


def test_data_check_reads_four_d_files_as_channels_when_told(two_channel_dir, capsys):
    from meshpar.cli import main

    argv = ["data", "check", str(two_channel_dir), "--shape", "10,10,10"]
    assert main(argv) == 2  # as one-channel volumes nothing is usable
    assert "expected one 3-D volume" in capsys.readouterr().err
    assert main(argv + ["--channels", "2"]) == 0
    assert "2 subjects (NC 1, AD 1); 0 bad" in capsys.readouterr().out
