"""A DeepSpeed job's stderr holding only what killed it (a Slurm `--error` file, a pasted crash) is read as
DeepSpeed's, and its fp16 loss scaler's last word is where the run died: before, no parser claimed it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracelog import api, parsers
from tracelog.errors import TracelogError
from tracelog.parsers.base import head_text

# Invented, in the shape of DeepSpeed's loss scaler exiting an fp16 run (runtime/fp16/loss_scaler.py).
MIN_SCALE_DEATH = """\
[rank0]: Traceback (most recent call last):
[rank0]:   File "/workspace/finetune.py", line 212, in <module>
[rank0]:     main()
[rank0]:   File "/workspace/finetune.py", line 188, in main
[rank0]:     engine.step()
[rank0]:   File "/usr/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 2213, in step
[rank0]:     self._take_model_step(lr_kwargs)
[rank0]:   File "/usr/lib/python3.10/site-packages/deepspeed/runtime/zero/stage_1_and_2.py", line 1786, in step
[rank0]:     self._update_scale(self.overflow)
[rank0]:   File "/usr/lib/python3.10/site-packages/deepspeed/runtime/fp16/loss_scaler.py", line 175, in update_scale
[rank0]:     raise Exception(
[rank0]: Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.
"""
# Invented, modeled on deepspeedai/DeepSpeedExamples#419: two ranks' frames interleaved, the header cut off.
INTERLEAVED = """\
    File "/opt/conda/lib/python3.8/site-packages/deepspeed/runtime/zero/stage3.py", line 1694, in _overflow_check
if self._overflow_check():
  File "/opt/conda/lib/python3.8/site-packages/deepspeed/utils/nvtx.py", line 15, in wrapped_fn
    ret_val = func(*args, **kwargs)
  File "/opt/conda/lib/python3.8/site-packages/deepspeed/runtime/zero/stage3.py", line 1694, in _overflow_check
    self._update_scale(self.overflow)
"""


def test_the_scalers_exit_alone_is_a_run_that_died(tmp_path: Path) -> None:
    assert parsers.detect(head_text(MIN_SCALE_DEATH.encode()), "job.err").FORMAT == "deepspeed"
    log = tmp_path / "job.err"
    log.write_text(MIN_SCALE_DEATH)
    db = tmp_path / "t.duckdb"
    (result,) = api.ingest(db, [str(log)])
    assert result.format == "deepspeed"
    flags = api.flags(db)
    [died] = flags[flags["rule"] == "training_health"].to_dict("records")
    assert died["severity"] == "critical"
    assert "Current loss scale already at minimum" in died["message"] and "died" in died["message"]


def test_frames_whose_header_was_cut_off_are_a_traceback(tmp_path: Path) -> None:
    log = tmp_path / "paste.txt"
    log.write_text(INTERLEAVED)
    db = tmp_path / "t.duckdb"
    (result,) = api.ingest(db, [str(log)])
    assert result.format == "deepspeed"
    kinds = api.sql(db, "SELECT line_no, kind FROM events ORDER BY line_no").values.tolist()
    assert [k for _, k in kinds] == ["traceback"] * 5 and [n for n, _ in kinds] == [1, 3, 4, 5, 6]


@pytest.mark.parametrize(
    "text",
    [
        # one frame of DeepSpeed's, quoted in notes
        'see File "/x/deepspeed/runtime/engine.py", line 2213, in step\n',
        # a traceback through other code only
        'Traceback (most recent call last):\n  File "/w/train.py", line 3, in <module>\n'
        '  File "/w/lib/trainer.py", line 9, in step\nValueError: bad batch\n',
    ],
)
def test_other_tracebacks_are_not_claimed(text: str) -> None:
    with pytest.raises(TracelogError, match="no parser recognises"):
        parsers.detect(head_text(text.encode()), "notes.txt")


def test_a_traceback_through_megatron_stays_megatrons() -> None:
    text = MIN_SCALE_DEATH.replace(
        "/workspace/finetune.py", "/workspace/Megatron-DeepSpeed/megatron/training.py"
    )
    assert parsers.detect(head_text(text.encode()), "job.err").FORMAT == "megatron"
