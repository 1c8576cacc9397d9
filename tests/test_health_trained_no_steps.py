"""A Megatron run resumed at its last iteration: it loads the checkpoint, its training loop runs no step,
and it evaluates at the end of training. The evaluation is kept like the periodic ones, marked as the end
of training's; the run gets an info flag."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracelog import api


def resumed_log(saved_at: int = 5000, steps: list[int] | None = None) -> str:
    """A single-GPU GPT-345M run that loads iteration 5000, in the shape of a 2023 Megatron-LM notes file
    (`successfully loaded checkpoint ... at iteration 5000`, `[before the start of training step]` right
    before `[after training is done]`, `validation loss at the end of training for val data | ...`, a
    save and the test data's line); paths and figures are this test's."""
    iterations = "".join(
        f" iteration {i:8d}/    5010 | consumed samples: {i * 8:10d} | elapsed time per iteration (ms): 310.2 | "
        f"learning rate: 1.500E-04 | global batch size:     8 | lm loss: {5.9 - i * 1e-5:.6E} | loss scale: 1.0 | "
        "number of skipped iterations:   0 | number of nan iterations:   0 |\n"
        for i in steps or []
    )
    return (
        " > number of parameters on (tensor, pipeline) model parallel rank (0, 0): 354871296\n"
        " loading checkpoint from /data/ckpt/gpt345m at iteration 5000\n"
        "  successfully loaded checkpoint from /data/ckpt/gpt345m at iteration 5000\n"
        "training ...\n"
        "[before the start of training step] datetime: 2023-07-16 10:57:01 \n"
        + iterations
        + "[after training is done] datetime: 2023-07-16 10:57:01 \n"
        "-----------------------------------------------------------------------------------------\n"
        " validation loss at the end of training for val data | lm loss value: 5.741563E+00 | "
        "lm loss PPL: 3.115511E+02 | \n"
        "-----------------------------------------------------------------------------------------\n"
        f"saving checkpoint at iteration {saved_at:7d} to /data/ckpt/gpt345m\n"
        f"  successfully saved checkpoint at iteration {saved_at:7d} to /data/ckpt/gpt345m\n"
        " validation loss at the end of training for test data | lm loss value: 6.015863E+00 | "
        "lm loss PPL: 4.098796E+02 | \n"
    )


def ingest(tmp_path: Path, text: str) -> Path:
    log = tmp_path / "run.log"
    log.write_text(text)
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    return db


def no_steps_flags(db: Path) -> list[dict]:
    return [f for f in api.flags(db).to_dict("records") if "trained no steps" in f["message"]]


def test_the_end_of_trainings_evaluation_is_kept_and_marked(tmp_path: Path) -> None:
    db = ingest(tmp_path, resumed_log())
    scored = api.sql(db, "SELECT key, value, text, line_no FROM iteration_metrics ORDER BY line_no, key")
    assert scored.to_dict("records") == [
        {
            "key": "validation (end of training) lm loss",
            "value": 5.741563,
            "text": "5.741563E+00",
            "line_no": 8,
        },
        {
            "key": "validation (end of training) lm loss PPL",
            "value": 311.5511,
            "text": "3.115511E+02",
            "line_no": 8,
        },
        {"key": "test (end of training) lm loss", "value": 6.015863, "text": "6.015863E+00", "line_no": 12},
        {
            "key": "test (end of training) lm loss PPL",
            "value": 409.8796,
            "text": "4.098796E+02",
            "line_no": 12,
        },
    ]


def test_a_run_resumed_at_its_last_iteration_is_told_it_trained_no_steps(tmp_path: Path) -> None:
    (flag,) = no_steps_flags(ingest(tmp_path, resumed_log()))
    assert (flag["severity"], flag["rule"], flag["row_ref"]) == ("info", "training_health", "line 6")
    assert flag["message"] == (
        "Resumed at its last iteration: trained no steps. It loaded the checkpoint of iteration 5000 (line 3), "
        "and `[after training is done]` at line 6 follows `[before the start of training step]` at line 5 with "
        "no iteration line between; it saved iteration 5000 again at line 11."
    )


@pytest.mark.parametrize(
    ("saved_at", "steps"),
    [(5003, None), (5010, [5005, 5010])],
    ids=["fewer-steps-than-the-log-interval", "trained-on"],
)
def test_a_resumed_run_that_trained_gets_no_such_flag(
    tmp_path: Path, saved_at: int, steps: list[int] | None
) -> None:
    assert no_steps_flags(ingest(tmp_path, resumed_log(saved_at, steps))) == []
