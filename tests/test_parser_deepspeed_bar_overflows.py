"""An HF Trainer run on DeepSpeed whose log is a tqdm bar with DeepSpeed's overflow lines glued to its end,
and nothing else in its head: DeepSpeed's, read as its steps and overflows, not a file no parser knows.

The lines are invented, in the shape of the ZeRO-2 log pasted in huggingface/transformers#9996 (a bar that
did not end its line, then `[date] [INFO] [stage2.py:N:step] [deepscale] OVERFLOW! ...`); the figures are
this test's."""

from __future__ import annotations

from pathlib import Path

from tracelog import api, parsers
from tracelog.parsers import deepspeed
from tracelog.parsers.base import head_text


def bar_then_overflow(step: int, scale: float) -> str:
    bar = " " * 180
    return (
        f"  1%|▌{bar}| {step}/2400 [00:{step * 4:02d}<2:31:40,  3.81s/it]"
        f"[2021-03-02 09:14:{step:02d},512] [INFO] [stage2.py:1357:step] [deepscale] OVERFLOW! Rank 0 Skipping "
        f"step. Attempted loss scale: {scale:.1f}, reducing to {scale / 2:.1f}"
    )


LOG = "\n".join(bar_then_overflow(step, 2.0**32 / 2**step) for step in range(3, 9)) + "\n"


def test_overflow_lines_after_a_bar_are_deepspeeds() -> None:
    head = head_text(LOG.encode())
    assert deepspeed.detect(head) > 0
    assert parsers.detect(head, "train.log").FORMAT == "deepspeed"
    # the bar alone is no DeepSpeed line
    assert deepspeed.detect(LOG.split("[2021")[0]) == 0


def test_the_bar_steps_and_the_overflows_are_read(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(LOG)
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    rows = api.sql(db, "SELECT iteration, elapsed_s FROM iterations ORDER BY line_no").to_dict("records")
    assert rows == [{"iteration": step, "elapsed_s": 3.81} for step in range(3, 9)]
    kinds = api.sql(db, "SELECT kind, count(*) AS n FROM events GROUP BY kind").to_dict("records")
    assert kinds == [{"kind": "overflow", "n": 6}]
