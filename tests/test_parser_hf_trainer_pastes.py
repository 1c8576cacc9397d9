"""Trainer logs as people paste them from a terminal or a logger's file: the logger's clock to the
millisecond where its prefix prints them, and a dict printed over the bar's last redraw, its step told by the
DeepSpeed step line between."""

from __future__ import annotations

import pytest

from tests.conftest import rows_by_table
from tracelog.parsers import hf_trainer


def collect(text: str) -> dict[str, list[dict]]:
    return rows_by_table(hf_trainer.parse, text)


# Verbatim, huggingface/transformers PR 9613 (TFTrainer with transformers' explicit logger format,
# `[%(levelname)s|%(filename)s:%(lineno)s] %(asctime)s >> %(message)s`), its excerpt cut inside the last dict.
TF_TRAINER = """\
[INFO|trainer_tf.py:522] 2021-01-15 10:27:59,116 >> ***** Running training *****
[INFO|trainer_tf.py:523] 2021-01-15 10:27:59,123 >>   Num examples = 3668
[INFO|trainer_tf.py:525] 2021-01-15 10:27:59,124 >>   Num Epochs = 4
[INFO|trainer_tf.py:526] 2021-01-15 10:27:59,124 >>   Instantaneous batch size per device = 16
[INFO|trainer_tf.py:527] 2021-01-15 10:27:59,124 >>   Total train batch size (w. parallel, distributed & accumulation) = 32
[INFO|trainer_tf.py:530] 2021-01-15 10:27:59,125 >>   Gradient Accumulation steps = 2
[INFO|trainer_tf.py:531] 2021-01-15 10:27:59,136 >>   Steps per epoch = 115
[INFO|trainer_tf.py:532] 2021-01-15 10:27:59,137 >>   Total optimization steps = 460
[INFO|trainer_tf.py:398] 2021-01-15 10:28:50,371 >> {'loss': 0.6347228, 'learning_rate': 4.891304e-05, 'epoch': 0.08695652173913043, 'step': 10}
[INFO|trainer_tf.py:398] 2021-01-15 10:28:56,791 >> {'loss': 0.604829, 'learning_rate': 4.7826084e-05, 'epoch': 0.17391304347826086, 'step': 20}
[INFO|trainer_tf.py:398] 2021-01-15 10:29:03,192 >> {'loss': 0.
"""


def test_the_loggers_milliseconds_time_the_steps_between_two_dicts() -> None:
    out = collect(TF_TRAINER)
    rows = [(r["iteration"], r["lm_loss"], r["elapsed_s"]) for r in out["iterations"]]
    # 10:28:50,371 to 10:28:56,791 over steps 10 to 20: 0.642 s a step (0.6 from the whole seconds alone)
    assert rows == [(10, 0.6347228, None), (20, 0.604829, pytest.approx(0.642))]
    assert [u["line_no"] for u in out["unparsed"]] == [7, 11]  # TFTrainer's steps per epoch; the cut dict


def test_a_prefix_without_milliseconds_keeps_its_whole_seconds() -> None:
    # invented, in LLaMA-Factory's logger format, which prints none
    lines = [
        "[INFO|2024-11-26 22:09:01] logging.py:157 >> {'loss': 2.2818, 'learning_rate': 2.5e-06, 'epoch': 0.29, 'step': 5}",
        "[INFO|2024-11-26 22:10:54] logging.py:157 >> {'loss': 2.2647, 'learning_rate': 5.0e-06, 'epoch': 0.59, 'step': 10}",
    ]
    rows = collect("\n".join(lines) + "\n")["iterations"]
    assert [r["elapsed_s"] for r in rows] == [None, 22.6]


# Verbatim, huggingface/transformers issue 14531 (T5-11B on DeepSpeed, copied from a terminal): the dicts padded
# to the terminal's width by tqdm's `write`, the bar as last drawn (step 1999) with DeepSpeed's step-2000 line
# glued behind it, then the dict logged at step 2000 over the bar's redraw.
T5_DEEPSPEED = (
    "{'loss': 0.0, 'learning_rate': 0.001, 'epoch': 0.06}" + " " * 152 + "\n"
    "  8%|" + "█" * 13 + " " * 144 + "| 1999/24128 [1:52:09<20:27:23,  3.33s/it]"
    "[2021-11-26 03:07:16,494] [INFO] [logging.py:69:log_dist] [Rank 0] step=2000, skipped=1995, lr=[0.001, "
    "0.001], mom=[0.0, 0.0]\n"
    "[2021-11-26 03:07:16,494] [INFO] [timer.py:181:stop] 0/2000, SamplesPerSec=9.526738918021234\n"
    "{'loss': 0.0, 'learning_rate': 0.001, 'epoch': 0.08}" + " " * 152 + "\n"
)


def test_a_dict_after_deepspeeds_step_line_is_that_steps_not_the_bars_before_it() -> None:
    out = collect(T5_DEEPSPEED)
    steps = [(r["iteration"], r["line_no"]) for r in out["iterations"]]
    # the first dict, before any bar, is counted (no interval is known); the one after `step=2000` is 2000
    assert steps == [(1, 1), (2000, 4)]
    rate = [m for m in out["iteration_metrics"] if m["key"] == "samples per second (DeepSpeed)"]
    assert [(m["iteration"], m["value"]) for m in rate] == [(2000, 9.526738918021234)]


def test_a_bar_redrawn_at_deepspeeds_step_is_read_as_before() -> None:
    # invented: a file keeps the bar's redraw at 2000 before the dict; DeepSpeed's line says the same step
    text = (
        "  8%|█         | 1999/24128 [1:52:09<20:27:23,  3.33s/it]"
        "[2021-11-26 03:07:16,494] [INFO] [logging.py:69:log_dist] [Rank 0] step=2000, skipped=0, lr=[0.001], mom=[0.0]\n"
        "  8%|█         | 2000/24128 [1:52:12<20:27:20,  3.33s/it]\r{'loss': 0.5, 'learning_rate': 0.001, 'epoch': 0.08}\n"
        "  8%|█         | 2001/24128 [1:52:15<20:27:17,  3.33s/it]"
        "[2021-11-26 03:07:19,494] [INFO] [logging.py:69:log_dist] [Rank 0] step=2002, skipped=0, lr=[0.001], mom=[0.0]\n"
        "  8%|█         | 2002/24128 [1:52:18<20:27:14,  3.33s/it]\n"
        "  8%|█         | 2003/24128 [1:52:21<20:27:11,  3.33s/it]\r{'loss': 0.4, 'learning_rate': 0.001, 'epoch': 0.08}\n"
    )
    rows = collect(text)["iterations"]
    assert [(r["iteration"], r["elapsed_s"]) for r in rows] == [(2000, 3.33), (2003, 3.33)]
