"""What a training run leaves in its model directory besides checkpoints.

* ``meshpar_run.json`` (:data:`RUN_FILE`): what prediction needs to rebuild
  the model and read data the same way (model name, reference (``model_ref``)
  and config overrides, class names, input shape and channels, pre-processing,
  the data split), and what a resumed run must match or goes on from (the
  subjects, the optimizer; ``stream``: where each batch began in the data
  stream).
* ``best/`` (:data:`BEST_DIR`): with ``keep_best``, a copy of the checkpoint
  with the lowest validation loss so far and ``best/best.json``
  (``{"step", "val_loss"}``); :func:`train_keeping_best` trains in chunks
  of ``every`` steps and scores each checkpoint on the validation set.
* :func:`write_predictions` writes per-subject probabilities as CSV.
"""
from __future__ import annotations

import csv
import glob
import json
import math
import os
import shutil
from typing import Optional, Sequence

__all__ = ["RUN_FILE", "BEST_DIR", "save_run_info", "check_run_info", "load_run_info",
           "estimator_files", "is_run_file", "best_checkpoint", "best_record", "keep_if_best",
           "train_keeping_best", "write_predictions", "schedule_change_note"]

RUN_FILE = "meshpar_run.json"
BEST_DIR = "best"
_FORMAT = 1
# Fields that must match when a run resumes in a model directory.
_IDENTITY = ("model", "model_overrides", "labels", "input_shape", "channels")
# Also compared on resuming, where the directory's run file records them (files
# written before a field was recorded resume as before): the held-out subjects
# (the test split, and the validation set that --seed and --val-fraction draw)
# and the optimizer, whose slot variables are in the checkpoint. Resuming under
# another split trains on subjects the new split holds out. "subjects" (the
# files each part holds, cli/train_data.py subjects_record) catches the same through
# the data: a dataset with subjects added or removed reshuffles the folds.
# "model_ref": a network of one's own, the reference that finds it (meshpar.models.reference).
_COMPARED_WHEN_RECORDED = ("split", "val_fraction", "seed", "optimizer", "subjects",
                           "model_ref")


def save_run_info(model_dir: str, info: dict) -> str:
    """Write ``info`` to ``model_dir/meshpar_run.json`` once :func:`check_run_info`
    accepts it; returns the path."""
    os.makedirs(model_dir, exist_ok=True)
    path = os.path.join(model_dir, RUN_FILE)
    info = {"format": _FORMAT, **info}
    check_run_info(model_dir, info)
    from meshpar.planning.jsonio import write_text_atomic

    # a temporary file of its own (not a fixed RUN_FILE.tmp a user's file may hold)
    write_text_atomic(path, json.dumps(info, indent=1, sort_keys=True))
    return path


def check_run_info(model_dir: str, info: dict) -> None:
    """ValueError unless a run described by ``info`` may use ``model_dir``.

    A directory that already holds a run of another model (name, overrides,
    labels, input shape or channels differ), of another split of the subjects
    (test split, validation fraction, seed) or of another optimizer is refused,
    so resuming never mixes two models' checkpoints nor trains on subjects the
    earlier run held out. A directory with a TF estimator's files (checkpoints,
    graph, events) but no run file is refused too: training there would
    overwrite them.
    """
    path = os.path.join(model_dir, RUN_FILE)
    refuse_foreign_model_dir(model_dir)
    if os.path.exists(path):
        old = load_run_info(model_dir)
        _refuse_differences(model_dir, old, model_differences(old, info) + [
            k for k in _COMPARED_WHEN_RECORDED if k in old and _differs(old, info, k)])


def check_recorded_fields(model_dir: str, fields: dict) -> None:
    """:func:`check_run_info` of the ``fields`` known before any data is read (model,
    overrides, seed, optimizer, the split flags): a resume that would be refused for
    them is refused before ``meshpar train --synthetic`` writes its phantoms."""
    refuse_foreign_model_dir(model_dir)
    if not os.path.exists(os.path.join(model_dir, RUN_FILE)):
        return
    old = load_run_info(model_dir)
    _refuse_differences(model_dir, old, [
        k for k in _IDENTITY + _COMPARED_WHEN_RECORDED
        if k in fields and k in old and _differs(old, fields, k)])


def _refuse_differences(model_dir: str, old: dict, differ: list) -> None:
    """ValueError naming the recorded fields ``differ`` of the run in ``model_dir``."""
    if differ:
        other = "other" if differ[0].endswith("s") else "another"  # "other subjects"
        flags = [_resume_flags(k, old) for k in differ]
        given = [" ".join(dict.fromkeys(f for f in flags if f))] if any(flags) else []
        with_ = " and ".join(given + ["the data it trained on"] * (not all(flags)))
        raise ValueError(f"{model_dir} holds a run with {other} {', '.join(differ)} "
                         f"({', '.join(_recorded(k, old.get(k)) for k in differ)}); resume it "
                         f"with {with_}, or use a new --model-dir")


def _resume_flags(key: str, old: dict) -> str:
    """The ``meshpar train`` flags that give the run file ``old``'s recorded ``key`` (so
    resume it); empty where the data decides it (input shape, subjects)."""
    value = old.get(key)
    if key == "labels" and isinstance(value, list):  # train's --labels (class 0 first)
        return f"--labels {','.join(map(str, value))}"
    if key in ("model", "model_ref"):  # a network of one's own is found by its reference
        return f"--model {old.get('model_ref') or old.get('model')}"
    if key == "model_overrides" and isinstance(value, dict):
        channels = value.get("in_channels")
        return "no --channels" if channels is None else f"--channels {channels}"
    if key == "split" and isinstance(value, dict):
        given = [f"--{k.replace('_', '-')} {value[k]}" for k in ("folds", "fold", "test_fraction")
                 if value.get(k) is not None]
        if given and value.get("fold_seed"):
            given.append(f"--fold-seed {value['fold_seed']}")
        return " ".join(given) or "no --folds, --fold or --test-fraction"
    flag = {"seed": "--seed", "val_fraction": "--val-fraction", "optimizer": "--optimizer"}
    return f"{flag[key]} {value}" if key in flag and value is not None else ""


def refuse_foreign_model_dir(model_dir: str) -> None:
    """ValueError for a ``model_dir`` with a TF estimator's files (checkpoints, graph,
    events) but no run file: not a run of ``meshpar train``, and training there would
    overwrite them. Needs nothing but the directory, so ``meshpar train`` says it
    before any data is read or written."""
    foreign = [] if os.path.exists(os.path.join(model_dir, RUN_FILE)) else \
        estimator_files(model_dir)
    if foreign:
        raise ValueError(f"{model_dir} holds {', '.join(foreign[:3])}"
                         f"{' ...' if len(foreign) > 3 else ''} but no {RUN_FILE}: not a run of "
                         "`meshpar train`, and training there would overwrite those files; use "
                         "a new --model-dir")


def _recorded(key: str, value) -> str:
    if key == "subjects" and isinstance(value, dict):  # the digest says nothing to a user
        return (f"subjects: {value.get('train')} training / {value.get('validation')} "
                f"validation / {value.get('test')} test, other files or labels")
    return f"{key}={value!r}"


def estimator_files(model_dir: str) -> list:
    """Names in ``model_dir`` that a TF estimator writes (checkpoints, the graph,
    event files, a kept best checkpoint), sorted."""
    names = sorted(os.listdir(model_dir)) if os.path.isdir(model_dir) else []
    return [n for n in names if is_run_file(n) and n != RUN_FILE]


#: characters TensorFlow's checkpoint lookup reads as a glob pattern (it finds
#: ``model.ckpt-N.index`` with ``get_matching_files``)
PATTERN_CHARACTERS = "*?[\\"


def refuse_pattern_path(path, what: str) -> None:
    """ValueError for a model directory or checkpoint path (``what`` names it) holding
    a character of :data:`PATTERN_CHARACTERS`: TensorFlow looked ``run[1]``'s checkpoints
    up as a pattern and found none of them, so a first run reported 0 steps trained and
    a resumed one failed with 'The passed save_path is not a valid checkpoint' (and
    ``run*`` could match another run's)."""
    if path is None:
        return
    text = os.fsdecode(os.fspath(path))
    found = sorted({c for c in text if c in PATTERN_CHARACTERS})
    if found:
        raise ValueError(f"{what} {text} holds {' and '.join(repr(c) for c in found)}, which "
                         "TensorFlow reads as a glob pattern when it looks for the run's "
                         "checkpoints (it would not find them); give a path without them")


def is_run_file(name: str) -> bool:
    """Whether ``name`` (an entry of a model directory) is one of the run's own files:
    its run description, checkpoints, graph, event files (``eval/`` holds the
    validation's) or kept best checkpoint."""
    return (name in (RUN_FILE, "checkpoint", "graph.pbtxt", BEST_DIR, "eval")
            or name.startswith(("model.ckpt-", "events.out.tfevents.")))


def model_differences(a: dict, b: dict) -> list:
    """The model fields (name, overrides, labels, input shape, channels) in which
    run descriptions ``a`` and ``b`` differ: empty when their checkpoints hold the
    same variables."""
    return [k for k in _IDENTITY if _differs(a, b, k)]


def _differs(a: dict, b: dict, key: str) -> bool:
    """Whether ``a`` and ``b`` record ``key`` otherwise (``model_ref``: references to
    different networks, not other spellings of one: ``same_reference``)."""
    if key == "model_ref":
        from meshpar.models.reference import same_reference

        return not same_reference(a.get(key), b.get(key))
    return json.loads(json.dumps(a.get(key))) != json.loads(json.dumps(b.get(key)))


def load_run_info(model_dir: str) -> dict:
    """The run description of ``model_dir``; ValueError naming the file when it is
    missing or unreadable."""
    path = os.path.join(model_dir, RUN_FILE)
    if not os.path.isfile(path):
        raise ValueError(f"{path} not found: not a model directory written by `meshpar train`")
    try:
        with open(path, encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: cannot be read ({err})") from None
    if not isinstance(info, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(info).__name__}")
    missing = [k for k in _IDENTITY if k not in info]
    if missing:
        raise ValueError(f"{path}: missing {', '.join(missing)}")
    wrong = [k for k, kind in (("model", str), ("model_overrides", dict), ("labels", list))
             if not isinstance(info[k], kind)]
    if wrong:
        raise ValueError(f"{path}: malformed {', '.join(f'{k}={info[k]!r}' for k in wrong)}")
    if not isinstance(info.get("model_ref", ""), str):
        raise ValueError(f"{path}: malformed model_ref={info['model_ref']!r} (a file or "
                         "module reference, as meshpar train --model took it)")
    labels = info["labels"]  # a repeated name was read as a label set; 'a' as 'a'
    if not all(isinstance(x, str) and x for x in labels) or len(set(labels)) != len(labels):
        raise ValueError(f"{path}: malformed labels={labels!r} (class names, each once)")
    spacing = info.get("spacing")  # was float()'s "could not convert string to float"
    if spacing is not None and not _is_spacing(spacing):
        raise ValueError(f"{path}: malformed spacing={spacing!r} (null, or a voxel size in "
                         "mm > 0, one or one per axis)")
    batch = info.get("batch", 1)  # predict's default batch: was int()'d, null a TypeError
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"{path}: malformed batch={batch!r} (a whole number >= 1)")
    wrong = _malformed_settings(info)  # "5" was refused as another seed than --seed 5
    if wrong:
        raise ValueError(f"{path}: malformed {wrong} (as meshpar train writes it: seed and "
                         "the split's counts whole numbers, val_fraction and test_fraction "
                         "numbers, optimizer a name)")
    if "stream" in info and not _is_stream(info["stream"]):
        raise ValueError(f"{path}: malformed stream={info['stream']!r} (a list of [first step, "
                         "first example, batch], first steps rising, the batch >= 1)")
    return info


def _malformed_settings(info: dict) -> str:
    """``key=value`` of the first recorded setting a resume compares (seed, val_fraction,
    optimizer, split) that is not of the type ``meshpar train`` writes, or ''."""
    def whole(x):
        return isinstance(x, int) and not isinstance(x, bool) and x >= 0

    def fraction(x):
        return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x < 1

    split = info.get("split", {})
    checks = [("seed", whole), ("val_fraction", fraction),
              ("optimizer", lambda x: isinstance(x, str) and x),
              ("split", lambda x: isinstance(x, dict))]
    if isinstance(split, dict):
        checks += [(f"split.{k}", lambda x: x is None or whole(x))
                   for k in ("folds", "fold", "fold_seed")]
        checks.append(("split.test_fraction", lambda x: x is None or fraction(x)))
    for key, ok in checks:
        _, _, field = key.partition(".")
        holder = split if field else info
        name = field or key
        if name in holder and not ok(holder[name]):
            return f"{key}={holder[name]!r}"
    return ""


def _is_spacing(spacing) -> bool:
    """Whether ``spacing`` is a run file's voxel size: a number > 0, or a list of one or
    three (finite)."""
    values = spacing if isinstance(spacing, list) and len(spacing) in (1, 3) else [spacing]
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
               and v > 0 for v in values)


def _is_stream(stream) -> bool:
    """Whether ``stream`` is a run file's ``stream`` (:func:`stream_segments`)."""
    def whole(x, least):
        return isinstance(x, int) and not isinstance(x, bool) and x >= least

    return (isinstance(stream, list) and all(
        isinstance(s, list) and len(s) == 3 and whole(s[0], 0) and whole(s[1], 0)
        and whole(s[2], 1) for s in stream)
        and all(a[0] < b[0] for a, b in zip(stream, stream[1:])))


def stream_segments(resumed: Optional[dict], step: int, batch: int) -> list:
    """The run file's ``stream`` for a run that starts at global ``step`` with ``batch``:
    ``[[first_step, first_example, batch], ...]``, where each stretch of training with
    one batch began in the training data's stream (meshpar.training.inputs.stream_start
    reads it). ``resumed``: the run file of the run this one resumes (None for a new
    run). Its stretches that began before ``step`` are kept, and a new one begins at
    ``step`` where the batch changes, at the example the stream had reached, so a run
    resumed with another ``--batch`` goes on with the examples an uninterrupted run
    would have seen next. A run file without ``stream`` (written before it was kept)
    trained every step with its ``batch``."""
    from meshpar.training.inputs import stream_start

    recorded = (resumed or {}).get("stream")
    if resumed is not None and recorded is None:
        recorded = [[0, 0, int(resumed.get("batch", batch))]]
    kept = [list(s) for s in (recorded or []) if s[0] < step] if step > 0 else []
    if kept and kept[-1][2] == batch:
        return kept
    return kept + [[int(step), stream_start(kept, step, batch), int(batch)]]


def run_model(model_dir: str, info: dict):
    """The :class:`~meshpar.models.ModelSpec` a run file ``info`` (of ``model_dir``)
    describes: its registered ``model``, or the network of one's own its
    ``model_ref`` finds (:func:`meshpar.models.resolve`), which must still be named
    ``model``. ValueError naming the file for a model or override that does not
    build (an override the model has no field for was a TypeError traceback in
    predict)."""
    from meshpar import models

    where = os.path.join(model_dir, RUN_FILE)
    ref = info.get("model_ref")
    try:
        spec = models.resolve(ref if ref else info["model"], **info["model_overrides"])
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: model {info['model']!r} with "
                         f"model_overrides {info['model_overrides']!r}: {err}") from None
    if ref and spec.name != info["model"]:
        raise ValueError(f"{where}: model {info['model']!r} of {ref}: that network is now "
                         f"named {spec.name!r}; its checkpoints may not be this one's")
    # what the run trained on: an edited run file, or a network of one's own whose config
    # changed since, predicted volumes of another size with the checkpoint in silence
    shape, channels = info.get("input_shape"), info.get("channels")
    built = [int(s) for s in spec.input_shape]
    if (shape is not None and shape != built) or (channels is not None
                                                  and channels != built[-1]):
        raise ValueError(f"{where}: the run trained {info['model']} on input_shape {shape}, "
                         f"channels {channels}, but it builds with input_shape {built} now: "
                         "the run file or the network's config changed since training")
    classes = getattr(spec.config, "num_classes", None)
    # a run on synthetic images (a 2-D net) records the images' labels 0 and 1 whatever
    # the net's class count (vgg-cifar: 10); only volumes' labels name every class
    volumes = len(spec.input_shape) == 4
    if volumes and classes is not None and len(info["labels"]) != int(classes):  # predict's IndexError
        raise ValueError(f"{where}: labels {info['labels']} name {len(info['labels'])} "
                         f"classes, but {spec.name} has {classes}")
    return spec


def best_checkpoint(model_dir: str) -> Optional[str]:
    """Path prefix of the kept best checkpoint (``best/model.ckpt-N``), or None."""
    record = best_record(model_dir)
    if record is None:
        return None
    prefix = os.path.join(model_dir, BEST_DIR, f"model.ckpt-{record['step']}")
    return prefix if os.path.isfile(prefix + ".index") else None


def refuse_incomplete_checkpoint(prefix: str, advice: str) -> None:
    """ValueError naming checkpoint ``prefix`` when a file TensorFlow restores it from is
    missing (its ``.index``, or a ``.data-NNNNN-of-MMMMM`` shard: a copy or a clean-up
    that kept only some) or cannot be read whole (a truncated shard, a damaged index):
    every tensor is read once. TF's restore failed with a traceback ('Restoring from
    checkpoint failed ... No such file or directory', 'Read less bytes than requested',
    'file is too short to be an sstable'). ``advice``: what to do then."""
    name = os.path.basename(prefix)
    if not os.path.isfile(prefix + ".index"):
        raise ValueError(f"checkpoint {prefix} is incomplete: {name}.index is missing; "
                         f"{advice}")
    have = {}  # shard count -> shard numbers present
    for path in glob.glob(glob.escape(prefix) + ".data-*-of-*"):
        number, _, count = path[len(prefix) + len(".data-"):].partition("-of-")
        if number.isascii() and number.isdigit() and count.isascii() and count.isdigit():
            have.setdefault(int(count), set()).add(int(number))
    if any(set(range(count)) <= numbers for count, numbers in have.items()):
        return _refuse_unreadable_checkpoint(prefix, advice)  # every shard of one save
    count, numbers = max(have.items(), key=lambda kv: len(kv[1]), default=(1, set()))
    missing = sorted(set(range(count)) - numbers)
    raise ValueError(f"checkpoint {prefix} is incomplete: {name}.data-{missing[0]:05d}-of-"
                     f"{count:05d} is missing ({len(missing)} of its {count} data files); "
                     f"{advice}")


def unfound_checkpoints(model_dir: str, consequence: str, advice: str) -> str:
    """The message when TensorFlow finds no latest checkpoint in ``model_dir`` although
    it holds saves (``model.ckpt-N.index``): its ``checkpoint`` file is missing,
    unreadable, or names a save whose files are gone (``latest_checkpoint`` is then None:
    training there began again at step 0 and wrote over the saves). ``consequence``: what
    the command would do; ``advice``: what else to do. Empty when there are no saves or
    the latest is found."""
    steps = sorted(int(n) for n in (os.path.basename(p)[len("model.ckpt-"):-len(".index")]
                                    for p in glob.glob(os.path.join(
                                        glob.escape(model_dir), "model.ckpt-*.index")))
                   if n.isascii() and n.isdigit())
    if not steps:
        return ""
    import tensorflow.compat.v1 as tf

    state = os.path.join(model_dir, "checkpoint")
    try:
        if not os.path.isfile(state):
            why = "no 'checkpoint' file (TensorFlow's list of the saves)"
        elif tf.train.latest_checkpoint(model_dir) is not None:
            return ""
        else:
            named = tf.train.get_checkpoint_state(model_dir)
            why = (f"a 'checkpoint' file naming {named.model_checkpoint_path}, whose files "
                   "are gone" if named and named.model_checkpoint_path else
                   "an empty 'checkpoint' file")
    except Exception as err:  # a damaged file: TF's 'Invalid checkpoint state', a ParseError
        why = (f"a 'checkpoint' file that cannot be read "
               f"({(str(err) or type(err).__name__).strip().splitlines()[0]})")
    shown = ", ".join(f"model.ckpt-{s}" for s in steps[-3:])
    return (f"{model_dir} holds checkpoints ({shown}) but {why}: {consequence}; restore it "
            f"(the line model_checkpoint_path: \"model.ckpt-{steps[-1]}\" names the last), "
            f"or {advice}")


def _refuse_unreadable_checkpoint(prefix: str, advice: str) -> None:
    """ValueError when a tensor of checkpoint ``prefix`` cannot be read."""
    import tensorflow.compat.v1 as tf

    try:
        reader = tf.train.load_checkpoint(prefix)
        for name in sorted(reader.get_variable_to_shape_map()):
            reader.get_tensor(name)
    except Exception as err:  # OpError for the index; IndexError for a short shard
        first = (str(err) or type(err).__name__).strip().splitlines()[0]
        raise ValueError(f"checkpoint {prefix} cannot be read whole ({type(err).__name__}: "
                         f"{first}); {advice}") from None


def best_record(model_dir: str) -> Optional[dict]:
    """``{"step", "val_loss"}`` of the kept best checkpoint, or None."""
    path = os.path.join(model_dir, BEST_DIR, "best.json")
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: cannot be read ({err})") from None
    if not (isinstance(record, dict) and isinstance(record.get("step"), int)
            and isinstance(record.get("val_loss"), (int, float))):
        raise ValueError(f"{path}: expected {{\"step\": N, \"val_loss\": X}}, got {record!r}")
    return record


def keep_if_best(model_dir: str, step: int, val_loss: float) -> bool:
    """Copy checkpoint ``step`` to ``best/`` if ``val_loss`` is below the kept one's.

    The previous best copy is removed only after the new one is complete.
    Returns True if this checkpoint is now the best.
    """
    record = best_record(model_dir)
    if record is not None and not _lower_loss(val_loss, record["val_loss"]):
        return False
    best = os.path.join(model_dir, BEST_DIR)
    os.makedirs(best, exist_ok=True)
    files = glob.glob(os.path.join(glob.escape(model_dir), f"model.ckpt-{step}.*"))
    if not files:
        raise ValueError(f"{model_dir}: no checkpoint of step {step} to keep")
    for f in files:
        shutil.copy2(f, best)
    with open(os.path.join(best, "best.json.tmp"), "w", encoding="utf-8") as f:
        json.dump({"step": int(step), "val_loss": float(val_loss)}, f)
    os.replace(os.path.join(best, "best.json.tmp"), os.path.join(best, "best.json"))
    if record is not None and record["step"] != step:
        for old in glob.glob(os.path.join(glob.escape(best), f"model.ckpt-{record['step']}.*")):
            os.remove(old)
    return True


def _lower_loss(new: float, kept: float) -> bool:
    """Whether loss ``new`` beats ``kept``; NaN beats nothing and anything beats a NaN
    (``x < nan`` is always False: a NaN kept first would never have been replaced)."""
    if math.isnan(new):
        return False
    return math.isnan(kept) or new < kept


def train_keeping_best(estimator, train_fn, eval_fn, max_steps: int, every: int,
                       hooks: Sequence = (), guard=lambda run: run()) -> list:
    """Train to ``max_steps`` in chunks of ``every`` steps, scoring each checkpoint on
    ``eval_fn`` and keeping the best (lowest loss) in ``best/``.

    ``guard(run)`` wraps each call into TensorFlow (the CLI's cluster and bad
    data handling). Returns ``[(step, validation loss), ...]`` of this run.
    A run resumed from a checkpoint on the ``every`` cadence that ``best/`` does
    not hold scores it first: the run before may have stopped before scoring it
    (or trained without keep-best), and one uninterrupted run scores it too.
    """
    from meshpar.training.inputs import checkpoint_step

    if every < 1:
        raise ValueError(f"keep-best evaluates every N steps: N must be >= 1, got {every}")
    model_dir = estimator.model_dir
    scores = []
    step = checkpoint_step(model_dir)
    record = best_record(model_dir)
    if 0 < step < max_steps and step % every == 0 and (record is None or
                                                       record["step"] != step):
        loss = float(guard(lambda: estimator.evaluate(eval_fn))["loss"])
        keep_if_best(model_dir, step, loss)  # a loss scored before is not lower: kept once
        scores.append((step, loss))
    while step < max_steps:
        target = min((step // every + 1) * every, max_steps)
        guard(lambda: estimator.train(train_fn, max_steps=target, hooks=list(hooks)))
        step = checkpoint_step(model_dir)
        loss = float(guard(lambda: estimator.evaluate(eval_fn))["loss"])
        keep_if_best(model_dir, step, loss)
        scores.append((step, loss))
    return scores


def write_predictions(path: str, subjects: Sequence, probabilities, label_set: Sequence[str]):
    """CSV of one row per subject: ``path, subject_id, label, group, p_<class>...,
    predicted`` (class names; each probability as the shortest decimal that reads back
    as the same number of its dtype: rounded to 6 decimals, 0.5000004 read as 0.5 and
    scored as the other class than ``predicted``, and 0.9999996 tied 0.9999999 in an AUC)."""
    import numpy as np

    label_set = list(label_set)
    if len(probabilities) != len(subjects):
        raise ValueError(f"{len(probabilities)} predictions for {len(subjects)} subjects")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

    def write(tmp):  # a subject path of non-UTF-8 bytes is written as those bytes (it
        # failed after every subject was predicted): the CSV names the file the disk has
        with open(tmp, "w", newline="", encoding="utf-8", errors="surrogateescape") as f:
            out = csv.writer(f)
            out.writerow(["path", "subject_id", "label", "group"]
                         + [f"p_{name}" for name in label_set] + ["predicted"])
            for s, p in zip(subjects, probabilities):
                p = np.asarray(p)  # a numpy scalar's str is its shortest round-trip form
                p = p if p.dtype in (np.float32, np.float64) else p.astype(np.float64)
                best = max(range(len(label_set)), key=lambda c: p[c])
                out.writerow([str(s.path), s.subject_id, s.label, s.group or ""]
                             + [str(v) for v in p] + [label_set[best]])

    # renamed over the old file (a hard link to it is not written through), from a
    # temporary name of its own: 'PATH.tmp' was written over, a file the user kept there
    from meshpar.planning.jsonio import write_atomic

    write_atomic(path, write)


#: the recipe fields of the learning-rate schedule (:func:`schedule_change_note`)
SCHEDULE_FIELDS = ("lr_schedule", "warmup_steps", "total_steps")


def schedule_change_note(model_dir: str, params: dict, step: Optional[int] = None) -> str:
    """A note when a resumed run's learning-rate schedule spans other steps than the
    run it resumes (``--steps`` changed): the rate at the checkpoint's step moves.
    Empty otherwise, and for a constant schedule whose warm-ups (old and new) both
    end by the checkpoint's ``step``: its rate no longer moves."""
    if not os.path.isfile(os.path.join(model_dir, RUN_FILE)):
        return ""
    old = (load_run_info(model_dir).get("recipe") or {})
    keys = SCHEDULE_FIELDS
    past_warmups = old.get("lr_schedule") == "constant" and step is not None and step >= max(
        int(params.get("warmup_steps") or 0), int(old.get("warmup_steps") or 0))
    if params.get("lr_schedule") == "constant" and (not params.get("warmup_steps")
                                                    or past_warmups):
        return ""
    if not (all(k in old for k in keys) and any(old[k] != params.get(k) for k in keys)):
        return ""
    return (f"meshpar train: note: the learning-rate schedule now runs over {params['total_steps']}"
            f" steps with {params['warmup_steps']} of warm-up ({params['lr_schedule']}); "
            f"the run it resumes planned {old['total_steps']} with {old['warmup_steps']} "
            f"({old['lr_schedule']}), so the rate moves from the checkpoint's step on")
