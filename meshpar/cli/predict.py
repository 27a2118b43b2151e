"""``meshpar predict``: per-subject class probabilities from a trained model, as CSV.

Reads ``meshpar_run.json`` from ``--model-dir`` (written by ``meshpar
train``) to rebuild the model and read the data as training did, restores the
latest checkpoint (``--checkpoint best``: the one ``--keep-best`` kept; or a
checkpoint path) on any mesh (``--speeds``/``--mesh``/``--plan``/
``--devices``/``--cluster`` as for ``train``) and writes one row per subject:
``path, subject_id, label, group, p_<class>..., predicted``. ``predicted`` is the
class of the highest probability; a tie (probabilities equal in float32, which
softmax gives for logits equal to about 1e-7) goes to the first of the tied
classes in the run's label order (class 0 of two), as evaluate's scoring (class 1
when its probability is above 0.5) counts it, and is noted on stderr (train's
test accuracy takes the argmax of the logits, which may differ in the last bit
where the probabilities tie).

``--folds K --fold I [--fold-seed S]`` or ``--test-fraction F`` predicts only
that test split of ``--data`` (the subjects ``train`` held out with the same
flags); without them, every subject, those of labels other than the run's (MCI for
an NC/AD model, or none: a scan to diagnose) included, with their labels as
given.

Example::

    meshpar predict --model-dir f0 --data adni --folds 5 --fold 0 --out f0.csv
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

from meshpar.cli.parsing import (path_text, positive_int, refuse_non_utf8_path,
                                 refuse_overwriting_inputs, refuse_replacing_another_kind,
                                 refuse_unwritable_directory, refuse_writing_over_run,
                                 thread_count)
from meshpar.cli.train_options import (add_mesh_options, add_split_options,
                                       check_batch_fits_mesh, check_mesh_args, cluster_client,
                                       mesh_arguments, mesh_batch_rows, split_request)

EPILOG = """examples:
  meshpar predict --model-dir runs/ad --data adni --out preds.csv
  meshpar predict --model-dir f0 --data adni --folds 5 --fold 0 --checkpoint best --out f0.csv
  meshpar predict --model-dir runs/ad --data adni --speeds 0.9,0.3 --out preds.csv
"""


def register(subparsers) -> None:
    """Add ``meshpar predict`` to ``subparsers``."""
    parser = subparsers.add_parser(
        "predict", help="per-subject probabilities of a trained model, to CSV",
        description="Predict class probabilities per subject from a `meshpar train` model "
                    "directory, on any mesh.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=path_text, required=True,
                        help="model directory written by `meshpar train` (meshpar_run.json + "
                             "checkpoints)")
    parser.add_argument("--data", type=path_text, required=True,
                        help="NIfTI dataset directory (with labels.csv)")
    parser.add_argument("--out", type=path_text, required=True,
                        help="CSV file to write: one row per subject, its class probabilities "
                             "and the predicted class (the most probable; a tie, noted, goes "
                             "to the first class of the run's labels)")
    parser.add_argument("--force", action="store_true", help="replace --out if it exists (an earlier predictions CSV; "
                                                      "any other file is kept)")
    parser.add_argument("--checkpoint", type=path_text, default="latest",
                        help="latest, best (kept by train --keep-best) or a checkpoint path; "
                             "a relative one not found here is looked for in --model-dir "
                             "(model.ckpt-200, as train and predict name it) (default: latest)")
    parser.add_argument("--batch", type=positive_int, default=None,
                        help="prediction batch (default: the training batch)")
    parser.add_argument("--skip-bad", action="store_true",
                        help="leave out unreadable or NaN subjects instead of stopping")
    parser.add_argument("--threads", type=thread_count, default=1, help="TF threads (default: 1)")
    add_mesh_options(parser)
    add_split_options(parser)
    parser.set_defaults(fold_seed=None)  # None: not given (resolve_fold_seed: then 0)
    parser.set_defaults(func=run, command="predict")  # its notes' prefix, as main names it


def run(args) -> int:
    """Write the predictions CSV; print where and how many rows. Returns 0."""
    from meshpar.training.run import (load_run_info, refuse_incomplete_checkpoint,
                                      refuse_pattern_path, run_model)

    from meshpar.cli.train_data import resolve_fold_seed

    resolve_fold_seed(args)
    refuse_non_utf8_path(args.model_dir, "--model-dir")  # TF's error after the volumes
    refuse_pattern_path(args.model_dir, "--model-dir")
    if args.checkpoint not in ("latest", "best"):
        refuse_non_utf8_path(args.checkpoint, "--checkpoint")
        refuse_pattern_path(args.checkpoint, "--checkpoint")
    check_mesh_args(args)
    refuse_overwriting_inputs(args, ["out"], ["plan", "cluster", (
        "--data labels", os.path.join(args.data, "labels.csv"))])
    refuse_writing_over_run("--out", args.out, args.data, args.model_dir)
    if os.path.exists(args.out) and not args.force:
        raise FileExistsError(f"{args.out} exists; give --force to replace it")
    # --force replaces an earlier predictions CSV; a file of another kind (a plan, notes:
    # `--out plan.json` for `--out plan.csv`) was replaced by the CSV, and lost
    refuse_replacing_another_kind(args.out, _read_predictions_header,
                                  "predictions CSV (`meshpar predict --out`)")
    above = os.path.dirname(os.path.abspath(args.out))
    while not os.path.exists(above):  # the CSV's directory is made; ends at the root
        above = os.path.dirname(above)
    if not os.path.isdir(above):  # was '[Errno 17] File exists' once every subject was predicted
        raise NotADirectoryError(f"--out {args.out}: {above} is a file, so the CSV cannot be "
                                 "written under it")
    refuse_unwritable_directory(above, f"--out {args.out}: its directory {above}")
    os.environ.setdefault("TF_DETERMINISTIC_OPS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    info = load_run_info(args.model_dir)
    spec = run_model(args.model_dir, info)
    if len(spec.input_shape) != 4:  # (D, H, W, C)
        raise ValueError(f"{spec.name} was trained on synthetic images; predict reads NIfTI "
                         "volumes (3-D models)")
    batch = args.batch or int(info.get("batch", 1))
    if batch < 1:
        raise ValueError("--batch must be >= 1")
    _refuse_another_split(args, info)
    checkpoint = _checkpoint(args.model_dir, args.checkpoint, info)
    refuse_incomplete_checkpoint(checkpoint, "copy its files back whole, or give "
                                 "--checkpoint another of the run's checkpoints")
    client = cluster_client(args)
    mesh_kwargs = mesh_arguments(args, spec, client)
    check_batch_fits_mesh(batch, mesh_kwargs, None if args.batch else
                          f"the training batch {batch} (predict's default --batch)")
    subjects, probs, labels = _predict(args, spec, info, batch, checkpoint, mesh_kwargs, client)
    from meshpar.training.run import write_predictions

    write_predictions(args.out, subjects, probs, labels)
    tied = tie_note(probs, labels)
    if tied:
        print(f"meshpar predict: note: {tied}", file=sys.stderr)
    print(f"{len(subjects)} subjects -> {args.out} (checkpoint {os.path.basename(checkpoint)}, "
          f"mesh {mesh_kwargs.get('mesh_shape') or 'of the plan'})")
    return 0


def tie_note(probabilities, labels) -> str:
    """What the predictions' ties are, in one line ('' when there are none): subjects
    whose highest probability is held by two or more classes, for which ``predicted``
    (an argmax) is the first of them in ``labels``' order."""
    import numpy as np

    p = np.asarray(probabilities, dtype=np.float64).reshape(len(probabilities), -1)
    if p.size == 0:
        return ""
    tied = (p == p.max(axis=1, keepdims=True)).sum(axis=1) > 1
    if not tied.any():
        return ""
    first = Counter(labels[int(np.argmax(row))] for row in p[tied])
    return (f"{int(tied.sum())} of {len(p)} subjects have two or more classes of equal "
            f"highest probability (equal in float32): each is predicted as the first of "
            f"them in the label order ({', '.join(f'{k} {v}' for k, v in first.items())}), "
            "as evaluate's scoring counts it")


def _read_predictions_header(path) -> None:
    """ValueError unless ``path`` starts with the header of a predictions CSV
    (:func:`meshpar.training.run.write_predictions`)."""
    import csv

    with open(path, newline="", encoding="utf-8", errors="surrogateescape") as f:
        header = next(csv.reader(f), [])  # (its paths may be of non-UTF-8 bytes)
    if header[:4] != ["path", "subject_id", "label", "group"] or header[-1:] != ["predicted"]:
        raise ValueError(f"{path} is not a predictions CSV")


def _split_flags(split: dict) -> str:
    """A split request as the flags that ask for it."""
    names = {"folds": "--folds", "fold": "--fold", "fold_seed": "--fold-seed",
             "test_fraction": "--test-fraction"}
    shown = " ".join(f"{flag} {split[key]:g}" if isinstance(split.get(key), float)
                     else f"{flag} {split[key]}"
                     for key, flag in names.items() if split.get(key) is not None)
    return shown if split.get("folds") or split.get("test_fraction") else "no test split"


def _refuse_another_split(args, info: dict) -> None:
    """ValueError when the split flags ask for a test set of the training's own dataset
    other than the one the run held out: it would hold subjects the model trained on."""
    from meshpar.training.inputs import check_split_request
    from meshpar.training.run import RUN_FILE

    split = split_request(args)
    check_split_request(**split)  # a bad request is named as such first
    asked = any(split[k] is not None for k in ("folds", "fold", "test_fraction"))
    recorded = info.get("split")
    if not asked or recorded is None or not _same_directory(info.get("data"), args.data):
        return
    if {k: recorded.get(k) for k in split} != split:
        raise ValueError(
            f"{_split_flags(split)} is not the test split {args.model_dir} was trained with "
            f"({_split_flags(recorded)}, {os.path.join(args.model_dir, RUN_FILE)}): "
            f"on {args.data} it would hold subjects the model trained on; "
            "give the training's split flags, or none to predict every subject")


def _same_directory(recorded, given: str) -> bool:
    """Whether the run file's ``data`` (an absolute path, or "synthetic") is the directory
    ``given`` names, under any path to it: a link to the dataset was another directory,
    and another fold of the training's own subjects was predicted in silence."""
    if not isinstance(recorded, str) or not os.path.isabs(recorded):
        return False
    if os.path.abspath(given) == recorded:
        return True
    try:
        return os.path.samefile(recorded, given)
    except OSError:  # the recorded one is gone (moved): not provably the same
        return False


def _checkpoint(model_dir: str, which: str, info: dict) -> str:
    """The checkpoint path ``--checkpoint`` names (ValueError when there is none);
    ``info``: ``model_dir``'s run description."""
    import tensorflow.compat.v1 as tf

    from meshpar.training.run import best_checkpoint, unfound_checkpoints

    if which == "latest":
        unfound = unfound_checkpoints(model_dir, "predict finds no latest checkpoint",
                                      "give --checkpoint one of them")
        if unfound:  # before TF's own reading: 'Invalid checkpoint state loaded from'
            raise ValueError(unfound)
        path = tf.train.latest_checkpoint(model_dir)
        if path is None:
            raise ValueError(f"{model_dir}: no checkpoint to predict from")
        return path
    if which == "best":
        path = best_checkpoint(model_dir)
        if path is None:
            raise ValueError(f"{model_dir}: no best checkpoint was kept (trained without "
                             "--keep-best, or without validation subjects); "
                             "use --checkpoint latest")
        return path
    inside = os.path.join(model_dir, which)  # a name as predict and train print it
    if (not tf.io.gfile.exists(which + ".index") and not os.path.isabs(which)
            and tf.io.gfile.exists(inside + ".index")):
        which = inside
    if not tf.io.gfile.exists(which + ".index"):
        raise ValueError(f"--checkpoint {which}: no such checkpoint ({which}.index missing)")
    _refuse_another_models_checkpoint(which, model_dir, info)
    return which


def _refuse_another_models_checkpoint(path: str, model_dir: str, ours: dict) -> None:
    """ValueError when ``path`` is a checkpoint of another ``meshpar train`` run whose
    model differs from ``ours`` (``model_dir``'s run description: its variables
    would not load). A checkpoint with no run file beside it is taken as it is."""
    from meshpar.training.run import BEST_DIR, RUN_FILE, load_run_info, model_differences

    home = os.path.dirname(os.path.abspath(path))
    if os.path.basename(home) == BEST_DIR:
        home = os.path.dirname(home)
    if home == os.path.abspath(model_dir) or not os.path.isfile(os.path.join(home, RUN_FILE)):
        return
    theirs = load_run_info(home)
    differ = model_differences(theirs, ours)
    if differ:
        raise ValueError(f"--checkpoint {path} is a checkpoint of another model ("
                         + ", ".join(f"{k}={theirs.get(k)!r}" for k in differ)
                         + f") than {model_dir}'s {ours['model']}")


def _refuse_a_batch_of_blanks(batch, subjects: int, trained: int, mesh_kwargs) -> None:
    """ValueError for a ``--batch`` above the subjects to predict, the training batch and
    the mesh's batch rows (which each need a sample): a short batch is filled up with
    blank volumes, so it only costs memory (``--batch 100000000``: an out-of-memory
    traceback)."""
    most = max(subjects, trained, mesh_batch_rows(mesh_kwargs))
    if batch and batch > most:
        raise ValueError(f"--batch {batch} is larger than the {subjects} subjects to predict "
                         f"(and the training batch {trained}): a short batch is filled up to "
                         f"it with blank volumes; give at most {most}")


def _predict(args, spec, info, batch, checkpoint, mesh_kwargs, client):
    """``(subjects, probabilities, class names)`` on the flags' mesh."""
    import tensorflow.compat.v1 as tf

    from meshpar.data import default_transform, nifti
    from meshpar.training import estimator as E
    from meshpar.training.inputs import predict_probabilities, test_split

    tf.logging.set_verbosity(tf.logging.ERROR)
    labels = tuple(info["labels"])
    split = split_request(args)
    asked = split["folds"] is not None or split["fold"] is not None or \
        split["test_fraction"] is not None
    # a test split is of the training's classes; without one every row is predicted
    subjects = nifti.read_labels(args.data, labels if asked else None, skip_bad=args.skip_bad)
    subjects, own = _stand_ins(subjects, labels)
    chosen = test_split(subjects, **split)[1] if asked else subjects
    _refuse_a_batch_of_blanks(args.batch, len(chosen), int(info.get("batch", 1)), mesh_kwargs)
    shape = tuple(spec.input_shape[:-1])
    from meshpar.cli.train_data import part_datasets

    source = part_datasets(args.data, shape, labels, args, [chosen],
                            int(spec.input_shape[-1]),
                            default_transform(shape, info.get("spacing"), augment=False),
                            build_empty=True)[0]
    model_fn = E.build_model_fn(spec, **mesh_kwargs)
    est = tf.estimator.Estimator(model_fn, model_dir=args.model_dir,
                                 config=E.run_config(args.model_dir, threads=args.threads,
                                                     cluster_client=client))
    from meshpar.cli.run_guard import guard

    found, probs = guard(client, lambda: predict_probabilities(est, source, batch, checkpoint))
    for item in source.skipped:
        print(f"skipped {item.path}: {item.reason}", file=sys.stderr)
    return [own.get(s.path, s) for s in found], probs, labels


def _stand_ins(subjects, labels):
    """``(subjects, own)``: a subject of a label outside ``labels`` (MCI for an NC/AD
    model; none, for a scan to diagnose) stands in as one of ``labels[0]`` to be
    loaded, and ``own`` maps its path back to it, its label as labels.csv gives it.
    Such rows were refused ('label MCI is not in the label set'), so a scan without a
    diagnosis could not be predicted. Noted on stderr."""
    import dataclasses

    others = [s for s in subjects if s.label not in labels]
    if not others:
        return list(subjects), {}
    counts = Counter(s.label or "(none)" for s in others)
    hint = [f"{k!r} is {n!r} in other letters" for k in counts for n in labels
            if k.casefold() == n.casefold()]
    print(f"meshpar predict: note: {len(others)} of {len(subjects)} subjects have labels "
          f"other than the model's {', '.join(labels)} ("
          + ", ".join(f"{k} {v}" for k, v in counts.items()) + "): predicted too, each "
          "with its label as labels.csv gives it" + (f" ({'; '.join(hint)}?)" if hint else ""),
          file=sys.stderr)
    own = {s.path: s for s in others}
    return [dataclasses.replace(s, label=labels[0]) if s.path in own else s
            for s in subjects], own
