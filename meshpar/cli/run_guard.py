"""Keeping a run honest: its progress line, and one line instead of a traceback
when a worker is lost, a data file is bad or the loss diverges (``meshpar train``
and ``meshpar predict``)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading


def progress_hook(args):
    """``(LossHistoryHook, bar)``: a bar on a terminal; piped output gets one plain line
    every tenth of the run."""
    from tqdm import tqdm

    from meshpar.training.estimator import LossHistoryHook

    live = not args.no_progress and sys.stderr.isatty()
    bar = tqdm(total=args.steps, desc="train", unit="step", disable=not live,
               file=sys.stderr, dynamic_ncols=True)
    every = max(1, args.steps // 10)

    def progress(step, loss):
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.4f}")
        if not live and not args.no_progress and step % every == 0:
            print(f"train: step {step} of this run, loss {loss:.4f}", file=sys.stderr,
                  flush=True)

    return LossHistoryHook(progress), bar


def exit_now(scratch, code: int = 1):
    """Report a lost worker and end the process: TF is blocked in C on the dead
    worker and cannot be interrupted. Checkpoints on disk are complete (TF
    writes them atomically); rerunning the command resumes from the last one.
    ``code=0``: a run that finished while an abandoned thread is still blocked."""

    def stuck(failure):
        import shutil

        if failure is not None:
            print(f"meshpar train: failed: {failure}; rerun the same command (same "
                  "--model-dir) to resume from the last checkpoint", file=sys.stderr, flush=True)
        sys.stdout.flush()
        sys.stderr.flush()
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        os._exit(code)

    return stuck


def no_divergence_log(record) -> bool:
    """Logging filter: drop TF's "Model diverged with loss = NaN." (the error
    :func:`guard` raises for it is the one line the user sees)."""
    return "Model diverged with loss" not in record.getMessage()


def guard(client, run, on_stuck=None):
    """Run ``run()``; on a cluster, turn a runtime error into a ClusterFailure
    that names the workers that stopped answering. A bad data file met while
    streaming becomes its BadSubjectError (one line naming the file); a NaN loss
    (diverged training) a ValueError saying so."""
    import tensorflow.compat.v1 as tf

    from meshpar.data.types import bad_data_in
    from meshpar.training.estimator import diverged_in

    try:
        if client is None:
            return run()
        with client.watch(on_stuck=on_stuck):
            return run()
    except tf.train.NanLossDuringTrainingError as err:
        raise diverged_in(err) from None
    except tf.errors.OpError as err:
        bad = bad_data_in(err) or diverged_in(err)
        if bad is not None:
            raise bad from None
        if client is None:
            raise
        raise client.failure(err) from None


class Terminated(BaseException):
    """SIGTERM during ``meshpar train``, raised in the main thread (as Ctrl-C's
    KeyboardInterrupt is) so that the run's scratch directory is removed on the way out."""


@contextlib.contextmanager
def terminated_as_an_exception():
    """Within the block, SIGTERM raises :class:`Terminated` in the main thread instead
    of ending the process where it stands: the default action had left ``meshpar
    train``'s scratch directory (``/tmp/meshpar-train-*``: the synthetic phantoms, the
    checkpoints of a run without --model-dir) behind. TensorFlow's step cannot be
    interrupted, so it takes effect once the step running ends; the checkpoints
    already in --model-dir are kept (TF writes each whole), later steps are not saved.
    A second SIGTERM ends the process at once, as before. SIGTERM ignored by whoever
    started the process stays ignored; off the main thread nothing changes."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def raise_terminated(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one: at once
        raise Terminated()

    signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
