"""What ``meshpar train`` reports: the metrics table it prints and the JSON summary
(``--json``, the last line of stdout) it builds, row by row, as the run's parts
(training, the best checkpoint, re-plans, evaluation, the traced step) end."""
from __future__ import annotations

import os

from meshpar import _onednn


def run_summary(spec, mesh, losses, steps: int, seconds: float, speed: dict,
                on_cluster: bool) -> tuple:
    """``(summary, rows)`` of a finished training run: the JSON summary and the
    table's rows. ``losses``: the loss of every step run; ``steps``: the global
    steps the run advanced (fewer than the step runs when a lost worker made the
    steps after the last checkpoint run again); ``speed``: the steady-state
    throughput (:func:`meshpar.training.throughput.steady_state`)."""
    runs = len(losses)
    if runs == 0:  # a model directory already at --steps: no step ran, none warmed up
        speed = {**speed, "warmup_steps": 0}
    summary = {"model": spec.name, "mesh_shape": mesh.mesh_shape, "devices": list(mesh.devices),
               "split_weights": mesh.split_weights,
               # a plan's per-layer ratios override the axis weights of their dimensions
               "dim_split_weights": getattr(mesh, "dim_split_weights", None) or {},
               "steps": steps,
               **({"step_runs": runs} if runs != steps else {}),
               "first_loss": losses[0] if losses else None,
               "last_loss": losses[-1] if losses else None,
               "train_seconds": seconds, **speed, "onednn": _onednn.enabled()}
    rows = [("steps", f"{steps}" if runs == steps else
             f"{steps} ({runs} step runs: the steps after the last checkpoint ran again)"),
            ("first loss", f"{losses[0]:.4f}" if losses else "-"),
            ("last loss", f"{losses[-1]:.4f}" if losses else "-"),
            ("train time", f"{seconds:.1f} s (graph build included)"),
            ("samples/s", _format_speed(speed) if runs else "- (no step ran in this run)"),
            # the workers are other processes: they decide for themselves (meshpar worker
            # imports meshpar, so it turns oneDNN on unless its own environment says no)
            ("cpu kernels" + (" (this process)" if on_cluster else ""),
             "oneDNN" if summary["onednn"] else
             f"Eigen ({_onednn.ENV}={os.environ.get(_onednn.ENV, 'unset')})")]
    return summary, rows


def evaluate(args, est, data, guard, rows, summary) -> None:
    """Validation metrics (the last checkpoint), then the test set's (the best one with
    --keep-best), into the table rows and the JSON summary."""
    from meshpar.training.metrics import METRIC_NAMES, classification_metrics
    from meshpar.training.inputs import predict_probabilities
    from meshpar.training.run import best_checkpoint

    if data["eval_fn"] is not None:
        _validation_coverage(data.get("validation_samples"), rows, summary)
        results = guard(lambda: est.evaluate(data["eval_fn"]))
        for key in ("loss", "accuracy", "auc", "sensitivity", "specificity"):
            if key in results:
                rows.append((f"eval {key}", f"{float(results[key]):.4f}"))
                summary[f"eval_{key}"] = float(results[key])
    else:
        rows.append(("eval", "skipped (no validation samples)"))
    test = data.get("test")
    if test is None:
        return
    best = best_checkpoint(est.model_dir) if args.keep_best else None
    subjects, probs = guard(lambda: predict_probabilities(est, test, args.batch, best))
    labels = [test.label_index(s) for s in subjects]
    scores = classification_metrics(labels, probs)
    scores["checkpoint"] = os.path.basename(best or est.latest_checkpoint())
    summary["test"] = scores
    rows.append(("test subjects", f"{scores['n']} ({scores['checkpoint']})"))
    for key in METRIC_NAMES:
        if scores[key] is not None:
            rows.append((f"test {key}", f"{scores[key]:.4f}"))

def _validation_coverage(count, rows, summary) -> None:
    """How many validation samples the eval metrics (and --keep-best's choice) are
    over: all ``count`` of them (the last batch is padded, the padding not scored)."""
    if count is not None:
        summary.update(eval_samples=count, validation_samples=count)
        rows.append(("eval samples", f"{count}"))


def report_best(model_dir, scores, rows, summary) -> None:
    """The validation losses of this run's checkpoints and the kept best one."""
    from meshpar.training.run import best_record

    summary["val_losses"] = [[step, loss] for step, loss in scores]
    best = best_record(model_dir)
    if best is not None:
        summary["best"] = best
        rows.append(("best checkpoint", f"step {best['step']} (val loss {best['val_loss']:.4f})"))

def report_rebalancing(result, rows, summary) -> None:
    """Re-plans and the measuring overhead into the table and the JSON summary."""
    monitor = result["monitor"]
    summary.update(replans=result["replans"], rebalance_samples=result["samples"],
                   rebalance_monitor=monitor, step_times=result["step_times"])
    rows.append(("re-plans", str(len(result["replans"]))))
    if result["replans"]:  # the top-level mesh fields are the mesh the run started on
        final = result["replans"][-1]["new"]
        summary["final_mesh"] = final
        weights = format_weights(final["split_weights"], final.get("dim_split_weights"))
        rows.append(("final mesh", f"{final['mesh_shape']} on {', '.join(final['devices'])}, "
                                   f"split weights {weights}"))
    if monitor["overhead_fraction"] is not None:
        rows.append(("measuring overhead", f"{monitor['overhead_fraction']:.2%} of step time "
                                           f"({monitor['traced_steps']} steps measured)"))


def format_weights(weights: dict, dim_weights: "dict | None" = None) -> str:
    """Split weights for a person to read, 4 significant digits (``3`` rather than
    ``2.9999999999999996``); the JSON summary keeps them whole. ``even`` for none.
    ``dim_weights`` (a plan's per-layer ratios, which override the axis weights of
    their dimensions) follow as ``per dimension {...}``."""
    def braces(table: dict) -> str:
        return "{" + ", ".join(f"{name}: [{', '.join(f'{w:.4g}' for w in ws)}]"
                               for name, ws in table.items()) + "}"

    text = braces(weights) if weights else "even"
    return f"{text}, per dimension {braces(dim_weights)}" if dim_weights else text


def report_trace(hook) -> dict:
    """Print the traced step's breakdown; return it for the JSON summary."""
    from meshpar.runtime.step_trace import format_breakdown

    if hook.breakdown is None:
        print(f"trace: step {hook.step} was not reached in this run")
        return {}
    print(f"trace of step {hook.step}:")
    print(format_breakdown(hook.breakdown, hook.wall_seconds))
    return {"trace_step": hook.step, "trace_step_seconds": hook.wall_seconds,
            "step_breakdown": hook.breakdown}

def _format_speed(speed: dict) -> str:
    if speed["samples_per_second"] is None:
        return f"- (too few steps after {speed['warmup_steps']} warm-up steps)"
    lo, hi = speed["samples_per_second_p25_p75"]
    return (f"{speed['samples_per_second']:.2f} (median step; p25-p75 {lo:.2f}-{hi:.2f}; "
            f"steps {speed['warmup_steps'] + 1}-{speed['warmup_steps'] + speed['steady_steps']})")

def print_table(rows) -> None:
    """Print the metrics table: one ``key  value`` line per row."""
    width = max(len(k) for k, _ in rows)
    print(f"{'metric'.ljust(width)}  value")
    print(f"{'-' * width}  {'-' * 5}")
    for key, value in rows:
        print(f"{key.ljust(width)}  {value}")
