"""A training log that ends in its run's setup: no step, no error. The ingest reads the setup (a run of the
model's size and layout) and the `no_step_logged` rule says that no step followed it; a run that died, or
one that logged steps, is left to the other rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracelog import api

# Invented, in the shape of GPT-NeoX 20B stuck before its first step (EleutherAI/gpt-neox#988): pdsh's host
# prefix, DeepSpeed's pipeline engine start lines, then nothing.
STUCK = """\
gpu250: Time to load utils op: 0.003278970718383789 seconds
gpu250: [2023-07-05 15:08:29,918] [INFO] [engine.py:83:__init__] CONFIG: micro_batches=6 micro_batch_size=1
gpu250: [2023-07-05 15:08:30,157] [INFO] [engine.py:138:__init__] RANK=0 STAGE=0 LAYERS=13 [0, 13) STAGE_PARAMS=2646199296 (2646.199M) TOTAL_PARAMS=20553056256 (20553.056M) UNIQUE_PARAMS=20553056256 (20553.056M)
gpu273: [2023-07-05 15:08:30,157] [INFO] [engine.py:138:__init__] RANK=8 STAGE=2 LAYERS=12 [25, 37) STAGE_PARAMS=2718609408 (2718.609M) TOTAL_PARAMS=20553056256 (20553.056M) UNIQUE_PARAMS=20553056256 (20553.056M)
"""
STEP = (
    "gpu250: [2023-07-05 15:09:30,001] [INFO] [logging.py:60:log_dist] [Rank 0] step=1, skipped=0, "
    "lr=[6e-05], mom=[(0.9, 0.999)]\n"
)
DIED = (
    "gpu250: [2023-07-05 15:38:30,157] [E ProcessGroupNCCL.cpp:828] [Rank 0] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, Timeout(ms)=1800000) ran for 1800324 milliseconds "
    "before timing out.\n"
)

TIMERS = (
    "gpu250: [2023-07-05 15:09:30,001] [INFO] [logging.py:60:log_dist] [Rank 0] rank=0 time (ms) | "
    "forward: 316.00 | backward: 747.31 | step: 663.59\n"
)


def flags_of(tmp_path: Path, text: str) -> list[dict]:
    log = tmp_path / "neox.log"
    log.write_text(text)
    db = tmp_path / "t.duckdb"
    (result,) = api.ingest(db, [str(log)])
    assert (result.format, result.runs) == ("deepspeed", 1)
    return api.flags(db).to_dict("records")


def test_a_log_that_ends_in_its_setup_says_no_step_followed(tmp_path: Path) -> None:
    (flag,) = flags_of(tmp_path, STUCK)
    assert (flag["rule"], flag["severity"], flag["row_ref"]) == ("no_step_logged", "warning", "line 4")
    assert flag["message"].startswith("No training step in the log: the run's lines 2 to 4 are its setup")


@pytest.mark.parametrize(
    ("tail", "rule"),
    [(STEP, None), (TIMERS, None), (DIED, "training_health")],
    ids=["step", "timers", "died"],
)
def test_a_step_its_timers_or_an_error_after_the_setup_are_other_rules_word(
    tmp_path: Path, tail: str, rule: str
) -> None:
    flags = flags_of(tmp_path, STUCK + tail)
    assert "no_step_logged" not in {f["rule"] for f in flags}
    assert {f["rule"] for f in flags} == ({rule} if rule else set())


# Invented, in the shapes of deepspeedai/DeepSpeed#5779 (a paste of the loss scaler's lines alone) and of a
# Megatron-DeepSpeed log whose step lines were cut away but whose memory report after step 1 stayed.
OVERFLOWS = (
    "gpu250: [2024-07-17 19:44:06,945] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 "
    "Skipping step. Attempted loss scale: 65536, reducing to 32768\n"
    "gpu250: [2024-07-17 19:44:07,064] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 "
    "Skipping step. Attempted loss scale: 32768, reducing to 16384\n"
)
MEMORY_AFTER_A_STEP = (
    "gpu250: [Rank 0] (after 1 iterations) memory (MB) | allocated: 882.5 | max allocated: 13808.2 | "
    "reserved: 14718.0 | max reserved: 14718.0\n"
)


@pytest.mark.parametrize("tail", [OVERFLOWS, MEMORY_AFTER_A_STEP], ids=["overflows", "memory-after-step"])
def test_steps_that_left_no_line_of_their_own_are_not_a_stuck_setup(tmp_path: Path, tail: str) -> None:
    assert "no_step_logged" not in {f["rule"] for f in flags_of(tmp_path, STUCK + tail)}
