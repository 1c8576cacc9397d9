"""A Trainer log pasted from a log viewer that puts each line's number in brackets in front of it: read as
the Trainer's bars and logged dicts, the numbers taken off, not a file no parser knows.

The lines are invented, in the shape of the LLaMA-Factory log pasted in hiyouga/LLaMA-Factory#8261
(`[1745]   1%|          | 10/1752 [00:29<1:22:01,  2.83s/it]`, `[1757] {'loss': ..., 'grad_norm': ...,
'learning_rate': ..., 'epoch': ...}`, an empty line as `[1758] `); the figures are this test's."""

from __future__ import annotations

from pathlib import Path

from tracelog import api, parsers
from tracelog.parsers import hf_trainer
from tracelog.parsers.base import head_text


def numbered(lines: list[str], first: int = 2210) -> str:
    return "".join(f"[{first + i}] {line}\n" for i, line in enumerate(lines))


def bar(step: int, seconds: float) -> str:
    return f"  1%|          | {step}/1500 [00:{step * 3:02d}<1:10:31,  {seconds:.2f}s/it]"


def logged(loss: float, step: int) -> str:
    return f"{{'loss': {loss}, 'grad_norm': 0.8125, 'learning_rate': {step * 1e-7:.4e}, 'epoch': 0.01}}"


LINES = (
    [bar(step, 2.91) for step in range(1, 11)]
    + ["", logged(1.9342, 10), ""]
    + [bar(step, 2.94) for step in range(10, 21)]
    + ["", logged(1.8817, 20), ""]
)


def test_a_paste_with_a_viewers_line_numbers_is_the_trainers() -> None:
    head = head_text(numbered(LINES).encode())
    assert hf_trainer.detect(head) > 0
    assert parsers.detect(head, "train.log").FORMAT == "hf_trainer"


def test_its_dicts_and_bars_are_read_and_nothing_is_left_over(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(numbered(LINES))
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    rows = api.sql(db, "SELECT iteration, lm_loss, elapsed_s FROM iterations ORDER BY iteration").to_dict(
        "records"
    )
    assert rows == [
        {"iteration": 10, "lm_loss": 1.9342, "elapsed_s": 2.91},
        {"iteration": 20, "lm_loss": 1.8817, "elapsed_s": 2.94},
    ]
    assert api.sql(db, "SELECT lines_unparsed FROM sources").iloc[0, 0] == 0
