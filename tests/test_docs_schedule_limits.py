"""docs/training.md and ``train --help``: a learning-rate schedule that cannot take
effect within ``--steps`` is refused: a constant warm-up past it, a cosine warm-up
that leaves no step to decay in (one as long as the run was refused too, while the
docs said "past it"), a step schedule's first decay at or after the last step."""
import pytest

from meshpar.cli import main
from meshpar.training.schedules import check_schedule


@pytest.mark.parametrize("name, warmup, decay_steps, refused", [
    ("constant", 10, None, False),   # the warm-up ends with the last step: the peak is reached
    ("constant", 11, None, True),
    ("cosine", 9, None, False),
    ("cosine", 10, None, True),      # no step left to decay in
    ("step", 4, 5, False),
    ("step", 5, 5, True),            # the first decay would be at step 10, after the last (9)
])
def test_a_schedule_is_refused_where_it_cannot_take_effect(name, warmup, decay_steps, refused):
    call = lambda: check_schedule(name, 1e-3, warmup, 10, decay_steps)  # noqa: E731
    if refused:
        with pytest.raises(ValueError):
            call()
    else:
        call()


def test_train_refuses_a_cosine_warmup_as_long_as_the_run(capsys):
    assert main(["train", "--synthetic", "--model", "resattnet3d-tiny", "--steps", "10",
                 "--lr-warmup-steps", "10", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "must exceed the warm-up steps (10)" in err[0], err
