"""``meshpar data``: write a synthetic NIfTI dataset, or check one.

    meshpar data synth --out phantoms --n 400 [--shape 32,32,32] [--seed 0] [--ad-fraction 0.5]
    meshpar data check phantoms [--labels NC,AD] [--shape 32,32,32] [--content]
"""
from __future__ import annotations

import argparse
import time

from meshpar.cli.parsing import (float_text, int_text, label_names, non_negative_int,
                                 path_text, positive_float, positive_int,
                                 refuse_file_as_directory)


def _ints(text: str) -> tuple:
    try:
        values = tuple(int_text(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if len(values) != 3 or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected three positive sizes like 32,32,32, got {text!r}")
    return values


def _fraction(text: str) -> float:
    try:
        value = float_text(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value


EPILOG = """examples:
  meshpar data synth --out phantoms --n 400      400 phantoms, half NC and half AD
  meshpar data check phantoms --content          validate labels.csv and every file
"""


def register(subparsers) -> None:
    """Add ``meshpar data`` with its ``synth`` and ``check`` actions to ``subparsers``."""
    parser = subparsers.add_parser("data", help="synthetic MRI phantoms and NIfTI dataset checks",
                                   description=__doc__, epilog=EPILOG,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="data_command", metavar="ACTION")

    synth = sub.add_parser("synth", help="write brain-like phantoms as .nii.gz files with labels.csv",
                           description="Write brain-like synthetic subjects (one label per diagnostic "
                                       "group) as .nii.gz files with labels.csv. Refused before "
                                       "anything is written when one subject would need more "
                                       "memory than is available while it is drawn (about 48 "
                                       "bytes a voxel) or the subjects more disk than is free "
                                       "(4 bytes a voxel: float32).",
                           epilog="example:\n"
                                  "  meshpar data synth --out phantoms --n 400 --shape 32,32,32\n",
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    synth.add_argument("--out", type=path_text, required=True, help="dataset directory to create")
    synth.add_argument("--n", type=int, default=400, help="number of subjects (default 400)")
    synth.add_argument("--shape", type=_ints, default=(32, 32, 32), help="voxel grid, e.g. 32,32,32 (default)")
    synth.add_argument("--seed", type=non_negative_int, default=0, help="random seed (default 0)")
    synth.add_argument("--labels", type=label_names, default=("NC", "AD"),
                       help="label set, e.g. NC,AD (default) or sMCI,pMCI; names other "
                            "than NC/CN, sMCI, MCI, pMCI, AD get atrophy by position "
                            "(first none, last as AD)")
    synth.add_argument("--ad-fraction", type=_fraction, default=None,
                       help="share of the second label (patients) for two labels (default: equal shares)")
    synth.add_argument("--voxel-mm", type=positive_float, default=None,
                       help="voxel size in mm, at least 0.001 and at most a 600 mm field of view "
                            "(default: a 200 mm field of view)")
    synth.add_argument("--force", action="store_true",
                       help="write into a non-empty directory (replaces only files this command writes, "
                            "and only over an earlier data synth's: another dataset's "
                            "labels.csv is kept)")
    synth.set_defaults(func=run)

    check = sub.add_parser("check", help="validate a NIfTI dataset directory (labels.csv + files)",
                           description="Validate a NIfTI dataset directory: labels.csv, the files it "
                                       "names and their headers (--content: voxels too). "
                                       "Lists bad subjects; exit code 1 if there are any.",
                           epilog="example:\n  meshpar data check phantoms --labels NC,AD --content\n",
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("directory", type=path_text,
                       help="the dataset directory: labels.csv and the NIfTI files it names")
    check.add_argument("--labels", type=label_names, default=("NC", "AD"),
                       help="label set (default NC,AD)")
    check.add_argument("--shape", type=_ints, default=(32, 32, 32), help="model grid (default 32,32,32)")
    check.add_argument("--content", action="store_true", help="also read every file's voxels (slower)")
    check.add_argument("--channels", type=positive_int, default=1,
                       help="channels per subject, as `train --channels` reads them: 1 (a 3-D "
                            "volume, default) or C (a 4-D file with C volumes)")
    check.set_defaults(func=run)

    parser.set_defaults(func=lambda args: parser.print_help() or 2)


def run(args) -> int:
    """Run the chosen ``meshpar data`` action (``synth`` or ``check``); returns the exit code."""
    if args.data_command == "synth":
        return _synth(args)
    return _check(args)


def _synth(args) -> int:
    from meshpar.data.phantoms import write_dataset

    from meshpar.dir_lock import hold_directory

    refuse_file_as_directory(args.out)
    start = time.perf_counter()
    # a second synth into it at once is refused: the two mixed their subjects
    with hold_directory(args.out, "--out", "meshpar data synth"):
        labels_csv = write_dataset(args.out, args.n, shape=args.shape, seed=args.seed,
                                   label_set=args.labels, ad_fraction=args.ad_fraction,
                                   voxel_mm=args.voxel_mm, force=args.force)
    print(f"wrote {args.n} subjects {'x'.join(map(str, args.shape))} to {labels_csv.parent} "
          f"({labels_csv.name}) in {time.perf_counter() - start:.1f} s")
    return 0


def _check(args) -> int:
    import logging

    from meshpar.data.nifti import NiftiDataset, unoriented_note

    if min(args.shape) < 2:  # a one-voxel grid is constant: each good subject was listed bad
        raise ValueError(f"--shape {','.join(map(str, args.shape))}: each size of the grid "
                         "must be at least 2")
    # the report below lists every bad subject once; the readers' "skipping" warnings
    # (for train --skip-bad) would list each a second time
    quiet = logging.getLogger("meshpar.data")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        ds = NiftiDataset(args.directory, args.shape, args.labels, skip_bad=True,
                          channels=args.channels)
        if args.content:
            ds.check_content()
    finally:
        quiet.setLevel(level)
    # the usable subjects: one whose voxels --content found bad was counted too (a file
    # missing was not), so '7 subjects (NC 3, AD 4); 2 bad' had 6 usable of 8 rows
    bad = {item.path for item in ds.skipped}
    good = [s for s in ds.subjects if s.path not in bad]
    counts = ", ".join(f"{k} {sum(s.label == k for s in good)}" for k in ds.label_set)
    print(f"{args.directory}: {len(good)} subjects ({counts}); {ds.n_skipped} bad")
    for item in ds.skipped:
        print(f"  bad: {item.path}: {item.reason}")
    if ds.unoriented:  # usable, but the side is the file's as stored
        print(f"  note: {unoriented_note(ds.unoriented, len(ds.subjects))}")
    return 1 if ds.n_skipped else 0
