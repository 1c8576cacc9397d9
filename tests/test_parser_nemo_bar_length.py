"""NeMo's training bar for a run of unknown length (`max_steps=-1`): tqdm prints its total as `?`."""

from __future__ import annotations

from tests.test_parser_nemo import collect
from tracelog import parsers
from tracelog.parsers import nemo

# Verbatim, NVIDIA-NeMo/Speech#11900, filed as NVIDIA/NeMo#11900 (January 2025, `trainer.max_steps=-1
# trainer.max_epochs=1`): the bar with no total, every value blank.
BLANK = (
    "Epoch 0: :   0%|          | 614/? [23:53<00:00, v_num=, reduced_train_loss=, global_step=, "
    "consumed_samples=, train_step_timing in s=, val_loss=]\n"
)

# Invented, in that bar's shape once the run logs its values: two redraws a carriage return apart.
VALUED = (
    "Epoch 0: :   0%|          | 614/? [23:53<00:00, v_num=, reduced_train_loss=3.090, global_step=613.0, "
    "consumed_samples=9.82e+4, train_step_timing in s=2.310, val_loss=]\r"
    "Epoch 0: :   0%|          | 615/? [23:55<00:00, v_num=, reduced_train_loss=3.070, global_step=614.0, "
    "consumed_samples=9.84e+4, train_step_timing in s=2.290, val_loss=]\n"
)


def test_a_bar_of_unknown_length_is_nemos() -> None:
    assert parsers.detect(BLANK, "job.out") is nemo
    assert parsers.detect(VALUED, "job.out") is nemo


def test_its_steps_are_read_with_no_total() -> None:
    rows = collect(VALUED)["iterations"]
    assert [(r["iteration"], r["train_iters"], r["lm_loss"], r["elapsed_s"]) for r in rows] == [
        (613, None, 3.09, 2.31),
        (614, None, 3.07, 2.29),
    ]


def test_a_bar_whose_every_value_is_blank_is_progress_only() -> None:
    """No figure: no row (a step of nothing but its number), and no line left unread."""
    out = collect(BLANK)
    assert "iterations" not in out
    assert "unparsed" not in out
