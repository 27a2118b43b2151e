"""The run file of ``meshpar train`` (``meshpar_run.json`` in the model directory):
writing it, and reading the one a resumed run left, to say what changed since."""

from __future__ import annotations

import os

from meshpar.cli.train_options import split_request


def resumed_run_info(model_dir: str, step: int):
    """The run file of the run this one resumes at ``step`` (None for a new run)."""
    from meshpar.training.run import RUN_FILE, load_run_info

    if step <= 0 or not os.path.isfile(os.path.join(model_dir, RUN_FILE)):
        return None
    return load_run_info(model_dir)


def batch_change_note(resumed, batch: int, step: int, stream=None) -> str:
    """A note when the run this one resumes (its run file ``resumed``, None for a new
    run) trained with another ``--batch`` (accepted: the data stream goes on from the
    example it had reached, :func:`meshpar.training.inputs.stream_start` of ``stream``,
    the stretches of this run's record); empty otherwise."""
    from meshpar.training.inputs import stream_start

    if resumed is None:
        return ""
    old = resumed.get("batch")
    if old is None or int(old) == int(batch):
        return ""
    return (f"meshpar train: note: the run this resumes trained with --batch {old}; from "
            f"step {step} on it trains with --batch {batch}, going on from example "
            f"{stream_start(stream, step, batch)} of the data stream, where the old batch "
            "had left it")


def recipe_change_note(resumed, params: dict, lr: float, augment, step: int) -> str:
    """A note when the run this one resumes (its run file ``resumed``, None for a new
    run) trained with another recipe (loss, weight decay, clipping, ...), learning rate
    or augmentation: accepted, but the run file then describes only the steps from
    ``step`` on (it was rewritten in silence); empty otherwise. The schedule's fields
    are schedule_change_note's."""
    from meshpar.training.run import SCHEDULE_FIELDS

    if resumed is None:
        return ""
    old = dict(resumed.get("recipe") or {}, augment=resumed.get("augment"),
               lr=resumed.get("lr"))
    new = dict(recorded_recipe(params), augment=list(augment), lr=lr)
    changed = [k for k in sorted(set(old) | set(new)) if k not in SCHEDULE_FIELDS
               and old.get(k) is not None and old.get(k) != new.get(k)]
    if not changed:
        return ""
    return (f"meshpar train: note: the run this resumes trained with "
            f"{', '.join(f'{k}={old.get(k)!r}' for k in changed)}; from step {step} on it "
            f"trains with {', '.join(f'{k}={new.get(k)!r}' for k in changed)}")


def recorded_recipe(params: dict) -> dict:
    """The recipe fields the run file keeps."""
    return {k: v for k, v in params.items() if isinstance(v, (int, float, str, list))}


def recorded_identity(args, spec, overrides: dict) -> dict:
    """The run file's fields the flags alone give (model and its reference, config
    ``overrides``, seed, validation fraction, optimizer, split): what a resume is
    checked against before any data is read, and part of what :func:`save_run`
    writes."""
    return {"model": spec.name, **({"model_ref": spec.reference} if spec.reference else {}),
            "model_overrides": overrides, "seed": args.seed,
            "val_fraction": args.val_fraction, "optimizer": args.optimizer,
            "split": split_request(args)}


def save_run(args, spec, model_dir, data, params, overrides: dict, lr: float,
             write: bool = True) -> None:
    """Write the run file (or, ``write=False``, only check that this run may use the
    directory: the same model, split of the subjects and optimizer); ``overrides``:
    the model's config overrides, ``lr``: the learning rate."""
    from meshpar.training.run import check_run_info, save_run_info

    (save_run_info if write else check_run_info)(model_dir, {
        **recorded_identity(args, spec, overrides),
        "labels": data["labels"], "input_shape": list(spec.input_shape),
        "channels": int(spec.input_shape[-1]), "spacing": None,
        "batch": args.batch, "augment": data.get("augment", []),
        "data": "synthetic" if args.synthetic else os.path.abspath(args.data),
        **({"subjects": data["subjects"]} if "subjects" in data else {}),
        "keep_best": bool(args.keep_best),
        **({"stream": data["stream"]} if data.get("stream") else {}),
        "recipe": recorded_recipe(params), "lr": lr,
    })
