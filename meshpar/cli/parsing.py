"""Parsing helpers the subcommands share: one parser per notion on the command line."""
from __future__ import annotations

import argparse
import math
import os
import re
from typing import Sequence

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def int_text(text: str) -> int:
    """``int(text)`` for an integer as one is written on a command line: ASCII digits,
    an optional sign, blanks around. Python's ``int`` also read ``1_0`` as 10 (a typo
    of ``1,0`` or ``1.0`` as often as a grouping) and other scripts' digits
    (full-width ``５``): ValueError for those, as for any other non-integer."""
    stripped = str(text).strip()
    if not _INT.fullmatch(stripped):
        raise ValueError(f"invalid int value: {text!r}")
    return int(stripped)


def float_text(text: str) -> float:
    """``float(text)`` for a number as one is written on a command line: ASCII digits
    with an optional sign, point and exponent, blanks around, or the words ``nan`` and
    ``inf``, which each flag's own range check refuses with its range. Python's
    ``float`` also read ``1_0`` as 10 and other scripts' digits: ValueError for those."""
    stripped = str(text).strip()
    if not (_FLOAT.fullmatch(stripped) or non_finite_word(stripped)):
        raise ValueError(f"invalid float value: {text!r}")
    return float(stripped)


def non_finite_word(text: str) -> bool:
    """Whether ``text`` is a word ``float`` reads as NaN or an infinity (``nan``, ``-inf``)."""
    return str(text).strip().lower().lstrip("+-") in ("nan", "inf", "infinity")


def strict_number_types(parser: argparse.ArgumentParser) -> None:
    """Make ``type=int`` and ``type=float`` of ``parser`` (and of its argument groups)
    read values with :func:`int_text` and :func:`float_text`; argparse's message for a
    refused one stays ``argument --batch: invalid int value: '1_0'``."""
    parser.register("type", int, int_text)
    parser.register("type", float, float_text)


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0 (seeds; thread counts, where 0 is TF's default)."""
    try:
        value = int_text(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


#: The largest seed TensorFlow keeps apart from the others: it takes graph seeds modulo
#: 2**31 - 1, so ``--seed 2147483647`` initialised the same weights as ``--seed 0``
MAX_SEED = 2**31 - 2


def seed_int(text: str) -> int:
    """argparse type: a seed that reaches TensorFlow, 0 to :data:`MAX_SEED`."""
    value = non_negative_int(text)
    if value > MAX_SEED:
        raise argparse.ArgumentTypeError(seed_too_large(value))
    return value


def seed_too_large(value: int) -> str:
    """Why ``value`` (> :data:`MAX_SEED`) is no seed for a TF graph."""
    return (f"must be at most {MAX_SEED}, got {value}: TensorFlow takes seeds modulo "
            f"2**31 - 1, so it would be seed {value % (MAX_SEED + 1)}")


#: more TF threads than any machine has cores; TensorFlow's own message for a count past
#: its int32 field ("Value out of range") named no option
MAX_THREADS = 4096


def thread_count(text: str) -> int:
    """argparse type: a TF thread count, 0 (TF's default) to :data:`MAX_THREADS`."""
    value = non_negative_int(text)
    if value > MAX_THREADS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_THREADS} threads, got {value}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (batch sizes)."""
    value = non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def path_text(text: str) -> str:
    """argparse type: a path, not empty or blank. An empty one read as none: train's
    checkpoints went to a temporary directory, predict wrote ``.tmp``, and an empty
    --cluster, --plan or --replay-replans ran on this machine, unplanned, in silence.
    Nor one with a line break: a one-line error naming the path was cut at it (a
    missing directory of ``--out 'runs\\nold/plan.json'`` was said as 'error: runs')."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a path, got {text!r}")
    if "\n" in text or "\r" in text:
        raise argparse.ArgumentTypeError(f"expected a path on one line, got {text!r} (a line "
                                         "break in the name)")
    return text


def device_strings(text: str) -> str:
    """argparse type: comma-separated device strings, none empty. An empty --devices
    read as none (the run went to emulated local devices in silence), and an empty
    entry ('a,,b') is a typo, not a device."""
    names = [d.strip() for d in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected comma-separated device strings, none "
                                         f"empty, got {text!r}")
    return text


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (sizes in mm)."""
    try:
        value = float_text(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be finite and > 0, got {text}")
    return value


MESH_AXES = ("batch", "model")


def cli_mesh_axes(text: str, flag: str = "--mesh") -> tuple:
    """``--mesh``'s axes as ``plan`` and ``train`` both read them: ``batch`` (the samples)
    and ``model`` (the filters), alone or together in either order, or ``all:N`` alone,
    the same as ``model:N`` (returned so). ValueError naming any other axis."""
    from meshpar.planning.plan import parse_mesh_shape

    axes = parse_mesh_shape(text, flag)
    if len(axes) == 1 and axes[0][0] == "all":
        return (("model", axes[0][1]),)
    other = [name for name, _ in axes if name not in MESH_AXES]
    if other:
        raise ValueError(f"{flag} {text}: axis {other[0]!r}; the mesh's axes are batch (the "
                         "samples) and model (the filters), e.g. batch:2;model:2, or all:N "
                         "alone, the same as model:N")
    return axes


def parse_positive_list(text: str, flag: str, what: str, whats: str) -> list:
    """``"0.9,0.3"`` -> ``[0.9, 0.3]``: a comma-separated list of finite numbers > 0.

    ValueError naming ``flag`` (``what`` each item is, ``whats`` the plural) for
    an empty list or item, a non-number, or a value that is not finite and > 0.
    """
    parts = [p.strip() for p in str(text).split(",")]
    if any(not p for p in parts):
        raise ValueError(f"{flag} must be comma-separated numbers, got {text!r}")
    values = []
    for i, p in enumerate(parts):
        try:
            v = float_text(p)
        except ValueError:
            raise ValueError(f"{flag}: {p!r} is not a number") from None
        if not math.isfinite(v) or v <= 0:
            raise ValueError(f"{flag}: {what} {i} is {p}; {whats} must be finite and > 0")
        values.append(v)
    return values


#: the widest spread of relative speeds a cluster may have (and the largest speed, in
#: units of 1e11 FLOP/s): beyond it the cost model's times overflow, and a device a
#: million times slower than another has nothing to contribute
MAX_SPEED_RATIO = 1e6


def parse_speeds(text: str, flag: str = "--speeds") -> list:
    """``"0.9,0.3"`` -> ``[0.9, 0.3]`` (:func:`parse_positive_list` of speeds), each at
    most :data:`MAX_SPEED_RATIO` and at most that many times slower than the fastest."""
    speeds = parse_positive_list(text, flag, "speed", "speeds")
    fastest = max(speeds)
    if fastest > MAX_SPEED_RATIO:
        raise ValueError(f"{flag}: speed {speeds.index(fastest)} is {fastest:g}; speeds are "
                         f"relative (1.0 = 1e11 FLOP/s) and at most {MAX_SPEED_RATIO:g}")
    slowest = min(speeds)
    if fastest / slowest > MAX_SPEED_RATIO:
        raise ValueError(f"{flag}: speed {speeds.index(slowest)} ({slowest:g}) is over "
                         f"{MAX_SPEED_RATIO:g} times slower than the fastest ({fastest:g}); "
                         f"leave that device out")
    return speeds


def parse_memory_mib(text: str, flag: str = "--memory-mib") -> list:
    """``"64"`` or ``"64,32"`` (MiB) -> bytes per device: one value for every
    device, or one per device in order (:meth:`ClusterSpec.with_memory`)."""
    values = parse_positive_list(text, flag, "memory", "memory budgets")
    for i, v in enumerate(values):
        if v * 2**20 < 1:
            raise ValueError(f"{flag}: memory {i} is {v:g} MiB, less than a byte")
        if not math.isfinite(v * 2**20):  # was inf bytes, refused later or not at all
            raise ValueError(f"{flag}: memory {i} is {v:g} MiB, too many bytes to count")
    return [v * 2**20 for v in values]


#: ``--memory-headroom``'s help, the same on every command that plans under a budget.
MEMORY_HEADROOM_HELP = ("share of each device's memory a plan's count may not use, for the "
                        "count's error (default 0.25: the count has been up to 23%% under a "
                        "measured need; lower it for a workload measured with "
                        "`meshpar bench memory --enforce`)")


def memory_terms(headroom, flag: str = "--memory-headroom"):
    """The planner's memory terms (:data:`meshpar.planning.memory.MEASURED`) with
    ``headroom`` in place of its default when given (None: the default).
    ValueError naming ``flag`` for a share outside [0, 1)."""
    import dataclasses

    from meshpar.planning.memory import MEASURED

    if headroom is None:
        return MEASURED
    if not 0.0 <= headroom < 1.0:
        raise ValueError(f"{flag} must be in [0, 1), got {headroom}")
    return dataclasses.replace(MEASURED, headroom=float(headroom))


def refuse_non_utf8_path(path, flag: str) -> None:
    """ValueError for a path TensorFlow reads or writes (a model directory, a
    checkpoint) that is not UTF-8 text: bytes of another encoding, which Python holds
    as lone surrogates. TF names its files in UTF-8 and failed on it once training or
    prediction began ("'utf-8' codec can't encode character '\\udcff'")."""
    if not isinstance(path, str):
        return
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{flag} {path!r} is not UTF-8 text (bytes of another encoding); "
                         "TensorFlow keeps its checkpoints under UTF-8 names: give another "
                         "path") from None


def label_names(text: str) -> tuple:
    """``"NC,AD"`` -> ``("NC", "AD")``: the class names of a ``--labels`` flag, class 0
    first (an ``argparse`` type; every command's ``--labels`` reads them here).
    An empty or repeated name is refused: it would silently make fewer classes."""
    names = tuple(v.strip() for v in str(text).split(","))
    if not any(names):
        raise argparse.ArgumentTypeError("expected comma-separated class names, e.g. NC,AD")
    if not all(names):
        raise argparse.ArgumentTypeError(f"a class name is empty in {text!r}")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(f"class name {repeated[0]!r} is given twice in {text!r}")
    for name in names:  # bytes that are not UTF-8 (a shell in another encoding): the
        try:  # dataset's files were written before labels.csv failed on them
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise argparse.ArgumentTypeError(
                f"class name {name!r} is not UTF-8 text (labels.csv and the run file are "
                "UTF-8); give the name in UTF-8") from None
    broken = [n for n in names if not n.isprintable()]  # a line break, a tab, an escape:
    if broken:  # data synth wrote it, and data check's counts and predict's rows broke
        raise argparse.ArgumentTypeError(f"class name {broken[0]!r} holds a control "
                                         "character (a line break, a tab); give printable "
                                         "names")
    return names


def refuse_overwriting_inputs(args, outputs: Sequence[str], inputs: Sequence) -> None:
    """ValueError when an output flag of ``args`` names a file an input reads: writing
    it would replace what the user saved, e.g. a measured profile or a plan.
    ``outputs``: attribute names (``"out"``); ``inputs``: attribute names
    (``"profile"``) or ``(what, path)`` pairs for files read that no flag names."""
    for out_name in outputs:
        out = getattr(args, out_name, None)
        if not out or not os.path.exists(out):
            continue
        for source in inputs:
            what, path = ((_flag(source), getattr(args, source, None))
                          if isinstance(source, str) else source)
            if path and os.path.exists(path) and os.path.samefile(out, path):
                raise ValueError(f"{_flag(out_name)} {out} is the {what} file: writing it "
                                 f"would replace that input; give another path")


def refuse_writing_over_run(flag: str, out, data_dir=None, model_dir=None) -> None:
    """ValueError when output ``out`` (of ``flag``) would replace an existing file of
    the ``data_dir`` dataset (volumes, labels) or is one of ``model_dir``'s run
    files (run description, checkpoints, graph, events; training.run.is_run_file),
    whether or not it or the model directory exists yet, or is a directory. A
    file beside the dataset that is not part of it is fine."""
    from meshpar.training.run import is_run_file

    if not out:
        return
    target = os.path.realpath(out)
    if os.path.isdir(target):
        raise ValueError(f"{flag} {out} is a directory; give a file's path")
    if data_dir and os.path.isdir(data_dir) and os.path.exists(target) and _inside(
            target, data_dir) and _dataset_file(target, data_dir):
        raise ValueError(f"{flag} {out} is a file of the --data directory {data_dir}: writing "
                         "it would replace part of the dataset; give another path")
    if model_dir and _inside(target, model_dir):  # a --model-dir the run will make too
        first = os.path.relpath(target, os.path.realpath(model_dir)).split(os.sep)[0]
        if is_run_file(first):
            raise ValueError(f"{flag} {out} is the run's own {first} in --model-dir "
                             f"{model_dir}: writing it would break the run; give another path")


def _dataset_file(path: str, data_dir: str) -> bool:
    """Whether ``path`` is part of the dataset in ``data_dir``: its labels file, a
    NIfTI volume, a file labels.csv names, or the phantoms' description (an
    earlier prediction CSV beside them is not)."""
    import csv

    name = os.path.basename(path)
    if name in ("labels.csv", "phantoms.json") or name.endswith((".nii", ".nii.gz")):
        return True
    try:
        with open(os.path.join(data_dir, "labels.csv"), newline="", encoding="utf-8") as f:
            listed = {os.path.realpath(os.path.join(data_dir, row[0].strip()))
                      for row in csv.reader(f) if row}
    except (OSError, UnicodeDecodeError, csv.Error):
        return True  # unreadable: assume the worst
    return path in listed


def _inside(path: str, directory: str) -> bool:
    root = os.path.realpath(directory)
    return os.path.commonpath([root, path]) == root and path != root


def refuse_missing_directories(*paths) -> None:
    """FileNotFoundError for an output file whose directory does not exist, and
    IsADirectoryError for one that is a directory: said before the work (a
    profile, a plan, a training run), not after it."""
    for path in paths:
        directory = os.path.dirname(os.path.abspath(path)) if path else None
        if directory and os.path.exists(directory) and not os.path.isdir(directory):
            raise NotADirectoryError(f"{path}: {directory} is a file, so no file can be made "
                                     "in it")  # was "its directory ... does not exist"
        if directory and not os.path.isdir(directory):
            raise FileNotFoundError(f"{path}: its directory {directory} does not exist")
        if path and os.path.isdir(path):
            raise IsADirectoryError(f"{path} is a directory; give a file name")
        if directory:
            refuse_unwritable_directory(directory, f"{path}: its directory {directory}")


def refuse_unwritable_directory(directory: str, named: str) -> None:
    """PermissionError when no file can be made in the existing ``directory`` (``named``
    as the message starts: ``"--out x.csv: its directory d"``): a read-only file system,
    or a directory this user may not write. Said before the work; it was '[Errno 30]
    Read-only file system' once a plan was made, every subject predicted or a trace
    taken."""
    if os.access(directory, os.W_OK | os.X_OK):
        return
    try:
        read_only = bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # no statvfs here: say it the general way
        read_only = False
    why = "is on a read-only file system" if read_only else "is not writable by this user"
    raise PermissionError(f"{named} {why}; give a path elsewhere")


def refuse_file_as_directory(path, flag: str = "--out") -> None:
    """NotADirectoryError for an output directory that is an existing file, or that
    lies under one: said before any work, not when the results are written."""
    if path and os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(f"{flag} {path} is a file; it names a directory for the "
                                 "results")
    if not path:
        return
    above = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(above):  # ends at the root at the latest
        above = os.path.dirname(above)
    if not os.path.isdir(above):
        raise NotADirectoryError(f"{flag} {path}: {above} is a file, so no directory can be "
                                 "made under it")
    existing = os.path.abspath(path)  # the directory itself, or the one it is made in
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    refuse_unwritable_directory(existing, f"{flag} {path}" if existing == os.path.abspath(
        path) else f"{flag} {path}: {existing}, where it would be made,")


def _flag(attribute: str) -> str:
    return "--" + attribute.replace("_", "-")


def replaced_note(path, command: str) -> str:
    """The note ``meshpar <command>`` prints after writing ``path`` over a file that was
    there (``plan`` and ``profile`` replace their outputs, atomically; an earlier one is
    a regenerable result, not an input): empty when there was none."""
    return (f"meshpar {command}: note: replaced the earlier {path}"
            if path and os.path.isfile(path) else "")


def refuse_replacing_another_kind(path, load, what: str, flag: str = "--out") -> None:
    """``plan`` and ``profile`` replace an earlier output of theirs (:func:`replaced_note`),
    but a file at ``path`` (of ``flag``) that ``load`` cannot read as a ``what`` is
    something else the user saved: FileExistsError, said before any work, and the file
    is kept."""
    if not path or not os.path.isfile(path):
        return
    try:
        load(path)
    except Exception:  # any reason it is not one of ours
        raise FileExistsError(f"{path} exists and is not a {what}; it is kept (remove it, "
                              f"or give another {flag})") from None
