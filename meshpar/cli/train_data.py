"""What ``meshpar train`` trains on: the input functions, the held-out test set
and what the run file records about the data (synthetic images, synthetic
phantoms or a NIfTI directory, split by person). What a network takes follows
from its per-sample input shape: ``(H, W, C)`` images (random, ``--synthetic``
only), ``(D, H, W, C)`` volumes (phantoms of one channel, or NIfTI ``--data``)."""
from __future__ import annotations

import hashlib
import os

from meshpar.cli.train_options import augmentations, split_request

#: ``--labels``' default: the class names of labels.csv, class 0 first
DEFAULT_LABELS = ("NC", "AD")


def on_device(input_fn, device):
    """The input pipeline runs in this process (job ``client``), next to its
    Python readers; the mesh's slices run on the workers."""
    if input_fn is None:
        return None

    def placed():
        import tensorflow.compat.v1 as tf

        with tf.device(device):
            return input_fn()

    return placed


def resolve_fold_seed(args) -> None:
    """``--fold-seed`` (default None: not given, then 0) without ``--folds``/``--fold`` or
    ``--test-fraction`` is a ValueError: there is no test split for it to seed, and it
    was ignored in silence."""
    if args.fold_seed is None:
        args.fold_seed = 0
    elif args.folds is None and args.fold is None and args.test_fraction is None:
        raise ValueError(f"--fold-seed {args.fold_seed} goes with --folds/--fold or "
                         "--test-fraction: it seeds the test split, and none is asked for")


def check_augment(text) -> None:
    """ValueError when ``--augment`` names an augmentation twice (``flip,flip``): each
    is applied once, so the repeat would be ignored in silence."""
    names = augmentations(text)
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"--augment: {', '.join(twice)} given twice; each augmentation is "
                         "applied once (give it once)")


def prepare_data(args, spec, scratch, model_dir, stream=None) -> dict:
    """Input functions, the test set and what the run file records about the data;
    ``stream``: where the training stream stands (meshpar.training.run.stream_segments;
    None: ``step * batch`` examples in), kept as the record's ``stream``."""
    from meshpar.models import num_classes
    from meshpar.training import inputs

    shape = spec.input_shape  # a network of one's own: its module's input_shape(config)
    if len(shape) not in (3, 4):
        raise ValueError(f"{spec.name} takes inputs of shape {tuple(shape)}; meshpar train "
                         "reads 2-D images (H, W, C) or 3-D volumes (D, H, W, C)")
    if len(shape) == 3:
        if args.data:
            raise ValueError(f"{spec.name} trains on --synthetic images only")
        if (args.folds is not None or args.test_fraction is not None
                or args.augment is not None and augmentations(args.augment)):
            raise ValueError(f"{spec.name}'s synthetic images have no people to fold or "
                             "volumes to augment: --folds/--test-fraction/--augment need NIfTI")
        if args.labels is not None:  # was ignored: the images are classes 0 and 1
            raise ValueError(f"{spec.name}'s synthetic images are of classes 0 and 1 of its "
                             f"{num_classes(spec)}: --labels names the classes of "
                             "labels.csv (NIfTI data)")
        held_out = inputs.synthetic_validation_count(args.n_synthetic, args.val_fraction)
        if args.n_synthetic - held_out < args.batch:
            raise ValueError(f"--batch {args.batch} is larger than the "
                             f"{args.n_synthetic - held_out} training images (--n-synthetic "
                             f"{args.n_synthetic}, --val-fraction {args.val_fraction})")
        train_fn, eval_fn = inputs.synthetic_image_fns(
            args.n_synthetic, shape, args.val_fraction, args.batch, args.seed, model_dir,
            stream=stream)
        if num_classes(spec) < 2:
            raise ValueError(f"--synthetic images are of two classes; {spec.name} has "
                             f"{num_classes(spec)}")
        counts = inputs.synthetic_class_counts(args.n_synthetic, args.val_fraction,
                                               num_classes(spec))
        # the images --n-synthetic draws: a resume on another set is refused, as for files
        digest = hashlib.sha256(f"synthetic images {args.n_synthetic}".encode()).hexdigest()
        return dict(train_fn=train_fn, eval_fn=eval_fn, test=None, labels=["0", "1"],
                    note=f"{args.n_synthetic} synthetic images",
                    validation_samples=held_out,
                    class_counts=counts, stream=stream,
                    subjects={"train": args.n_synthetic - held_out, "validation": held_out,
                              "test": 0, "digest": digest[:16]})
    return _nifti_data(args, spec, scratch, model_dir, stream)


def _nifti_data(args, spec, scratch, model_dir, stream=None) -> dict:
    """Input functions and records of a NIfTI run (``--data`` or ``--synthetic`` phantoms)."""
    from meshpar.data import default_transform, nifti, write_dataset
    from meshpar.models import num_classes
    from meshpar.training import inputs

    shape, channels = tuple(spec.input_shape[:-1]), int(spec.input_shape[-1])
    label_set = tuple(args.labels or DEFAULT_LABELS)
    if len(label_set) != num_classes(spec):
        raise ValueError(f"--labels names {len(label_set)} classes but {spec.name} has "
                         f"{num_classes(spec)}")
    directory = args.data
    if args.synthetic:
        if channels != 1:
            raise ValueError(f"--synthetic phantoms have one channel; {spec.name} takes "
                             f"{channels} (--channels > 1 needs --data)")
        if min(shape) < 8:
            raise ValueError(f"--synthetic phantoms are at least 8 voxels a side; {spec.name} "
                             f"takes {shape}: give --data")
        directory = os.path.join(scratch, "phantoms")
        write_dataset(directory, args.n_synthetic, shape=shape, seed=args.seed,
                      label_set=label_set)
    skipped = []  # with --skip-bad: subjects dropped before training starts
    subjects = nifti.read_labels(directory, label_set, skip_bad=args.skip_bad, skipped=skipped)
    if len(subjects) < 2:
        raise ValueError(f"{directory}: need at least 2 subjects, found {len(subjects)}")
    parts = inputs.split_three_ways(subjects, args.val_fraction, args.seed, **split_request(args))
    # every part in the order of its files, not of labels.csv's rows: one dataset listed
    # in two orders then trains, validates and tests alike with one --seed (the test
    # loss, a mean, summed its subjects in row order; the split was already order-free)
    parts = [sorted(part, key=lambda s: os.path.relpath(s.path, directory))
             for part in parts]
    if len(parts[0]) < args.batch:
        raise ValueError(f"--batch {args.batch} is larger than the {len(parts[0])} "
                         "training subjects")
    augment = augmentations(args.augment)
    transform = default_transform(shape, augment=augment or False)
    sources = part_datasets(directory, shape, label_set, args, parts, channels, transform)
    args.skipped_report = lambda: skipped + [item for src in sources if src for item in src.skipped]
    held = {name: sum(s.label == name for s in sources[0].subjects) for name in label_set}
    if not all(held.values()):  # counted after --skip-bad dropped the unreadable ones
        raise ValueError(f"{directory}: the training subjects hold no "
                         f"{' or '.join(n for n, c in held.items() if not c)} subject ("
                         + ", ".join(f"{n} {c}" for n, c in held.items())
                         + "): a classifier learns nothing from one class; check labels.csv "
                         "and --labels")
    train_fn = inputs.train_input_fn(sources[0], args.batch, args.seed, model_dir,
                                     augment=bool(augment), stream=stream)
    eval_fn = inputs.eval_input_fn(sources[1], args.batch) if parts[1] else None
    counts = list(held.values())
    test_note = f" / {len(parts[2])} test" if parts[2] else ""
    note = (f"{len(parts[0])} training / {len(parts[1])} validation{test_note} subjects "
            f"from {'synthetic phantoms' if args.synthetic else directory}")
    return dict(train_fn=train_fn, eval_fn=eval_fn, test=sources[2], labels=list(label_set),
                note=note, validation_samples=len(sources[1].subjects) if sources[1] else 0,
                class_counts=counts,
                directory=directory, augment=list(augment), stream=stream,
                subjects=subjects_record(parts, directory))


def part_datasets(directory, shape, label_set, args, parts, channels, transform,
                  build_empty: bool = False) -> list:
    """A NiftiDataset of each part (None for an empty one, unless ``build_empty``: then
    it is built too, and refused as having no subjects); files without an orientation
    noted once for the whole dataset on stderr (each part warned of its own share)."""
    import logging
    import sys

    from meshpar.data import nifti

    quiet = nifti.orientation_log
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        sources = [nifti.NiftiDataset(directory, shape, label_set, skip_bad=args.skip_bad,
                                      subjects=part, channels=channels, transform=transform)
                   if part or build_empty else None for part in parts]
    finally:
        quiet.setLevel(level)
    unoriented = sorted(path for src in sources if src for path in src.unoriented)
    if unoriented:
        checked = sum(len(src.subjects) for src in sources if src)
        print(f"meshpar {getattr(args, 'command', 'train')}: note: "
              f"{nifti.unoriented_note(unoriented, checked)}", file=sys.stderr)
    return sources


def subjects_record(parts, directory) -> dict:
    """What the run file records of the subjects each part holds: counts and a digest of
    their files (relative to the dataset, so a moved dataset still matches) and labels;
    resuming on other subjects is refused (training/run.py)."""
    import hashlib

    digest = hashlib.sha256()
    for name, part in zip(("train", "validation", "test"), parts):
        for s in sorted(part, key=lambda s: str(s.path)):
            digest.update(f"{name}\t{os.path.relpath(s.path, directory)}\t{s.label}\n"
                          .encode())
    return {"train": len(parts[0]), "validation": len(parts[1]), "test": len(parts[2]),
            "digest": digest.hexdigest()[:16]}
