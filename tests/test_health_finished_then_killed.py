"""A job killed after its training had finished: Megatron printed its last iteration and `[after training
is done]`, then the process hung on its way out (process-group teardown, CUDA graphs, a profiler's
shutdown) until Slurm cancelled the step at its time limit. Megatron-Bridge performance runs do this
(NVIDIA-NeMo/Megatron-Bridge#1500, #1656, #3427): the run's figures are complete, the kill cost only the
idle allocation, and it is no crash that ended training early."""

from __future__ import annotations

from pathlib import Path

import pytest

import tracelog
from tracelog import api


def iteration_line(i: int, total: int = 50) -> str:
    """An iteration line of a Megatron-Bridge run (invented figures, 2025 layout)."""
    return (
        f" [2025-11-24 21:52:{i:02d}] iteration {i:8d}/{total:8d} | consumed samples: {i * 192:12d} | "
        "elapsed time per iteration (ms): 5221.1 | learning rate: 3.000000E-05 | global batch size:   192 | "
        f"lm loss: {3.0 - i * 0.01:.6E} | loss scale: 1.0 | grad norm: 0.055 | "
        "number of skipped iterations:   0 | number of nan iterations:   0 |"
    )


CANCELLED = "slurmstepd: error: *** STEP 1250740.1 ON ptyche0181 CANCELLED AT 2025-11-24T22:14:50 DUE TO TIME LIMIT ***"


def flags_of(tmp_path: Path, lines: list[str]) -> list[dict]:
    log = tmp_path / "run.log"
    log.write_text("\n".join(lines) + "\n")
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    return [f for f in tracelog.api.flags(db).to_dict("records") if f["rule"] == "training_health"]


@pytest.mark.parametrize("glued", [False, True])
def test_a_step_cancelled_after_training_is_done_is_a_warning_with_the_idle_time(
    tmp_path: Path, glued: bool
) -> None:
    done = "[after training is done] datetime: 2025-11-24 21:52:53"
    # as NVIDIA-NeMo/Megatron-Bridge#1500 pasted it, Slurm's line glued behind the mark
    tail = [f"{done} [2025-11-24T22:14:50.004] error: {CANCELLED[20:]}"] if glued else [done, CANCELLED]
    (flag,) = flags_of(tmp_path, [*(iteration_line(i) for i in range(48, 51)), *tail])
    assert flag["severity"] == "warning"
    assert flag["row_ref"] == ("line 4" if glued else "line 5")
    message = flag["message"]
    assert (
        "Training had finished before it" in message
        and "at line 4, after its last iteration (line 3)" in message
    )
    assert "21 min 57 s after training was done" in message
    assert "No checkpoint saved" not in message and "died" not in message


def test_the_done_mark_is_found_when_every_run_is_refreshed_at_once(tmp_path: Path) -> None:
    """The done mark is looked for after the earliest last step of the runs refreshed together (a literal
    range of line numbers): a short log's mark, at line 4, is still found beside a run whose last step is at
    line 50 of its own file."""
    done = "[after training is done] datetime: 2025-11-24 21:52:53"
    short, long = tmp_path / "short.log", tmp_path / "long.log"
    short.write_text("\n".join([*(iteration_line(i) for i in range(48, 51)), done, CANCELLED]) + "\n")
    long.write_text("\n".join(iteration_line(i) for i in range(1, 51)) + "\n")
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(short), str(long)])
    api.refresh(db)  # both runs in one scope
    (flag,) = [f for f in api.flags(db).to_dict("records") if f["rule"] == "training_health"]
    assert (flag["severity"], flag["row_ref"]) == ("warning", "line 5")
    assert "Training had finished before it" in flag["message"]


def test_a_step_cancelled_before_training_is_done_stays_critical(tmp_path: Path) -> None:
    (flag,) = flags_of(tmp_path, [*(iteration_line(i) for i in range(48, 51)), CANCELLED])
    assert (flag["severity"], flag["row_ref"]) == ("critical", "line 4")
    assert "Training had finished" not in flag["message"]


def test_a_traceback_at_teardown_after_training_is_done_is_a_warning(tmp_path: Path) -> None:
    """Invented, in the shape of NVIDIA-NeMo/Megatron-Bridge#3488: the cleanup after training raised."""
    tail = [
        "[after training is done] datetime: 2026-04-22 10:01:07",
        "Traceback (most recent call last):",
        '  File "/opt/Megatron-Bridge/src/megatron/bridge/training/train.py", line 1437, in _delete_cuda_graphs',
        "    cuda_graph_helper.delete_cuda_graphs()",
        "AssertionError: No CUDA Graphs were created to delete.",
    ]
    (flag,) = flags_of(tmp_path, [*(iteration_line(i, 3) for i in range(1, 4)), *tail])
    assert (flag["severity"], flag["row_ref"]) == ("warning", "line 8")
    assert "Training had finished before it: `[after training is done]` at line 4" in flag["message"]
    assert "after training was done" not in flag["message"]  # no time on the exception's line


def titan_line(step: int, second: int) -> str:
    """A torchtitan metrics line as a fork prints it, the steps out of the total (invented figures)."""
    return (
        f"[rank0]:2025-04-01 00:25:{second:02d},084 - root - INFO - step: {step}/644 = {step / 6.44:.4f}%  "
        f"loss:  6.{step % 10}116  memory: 70.04GiB(75.20%)  tps: 52,142  mfu: 3.09%"
    )


def test_torchtitan_aborting_after_training_completed_is_a_warning(tmp_path: Path) -> None:
    """Invented, in the shape of AICrossSim/NewComputeBench's pretraining notes: torchtitan logged its
    last step, saved, said `Training completed`, then a rank aborted destroying the process group and
    torchrun reported the failure. The steps are complete: no crash that ended training."""
    tail = [
        "[rank0]:2025-04-01 00:25:54,090 - root - INFO - Saving a full checkpoint at last step, step 644.",
        "[rank0]:2025-04-01 00:26:01,706 - root - INFO - Training completed",
        "[rank0]:terminate called without an active exception",
        "[rank0]:Fatal Python error: Aborted",
        "E0401 00:26:08.212000 3016633 site-packages/torch/distributed/elastic/multiprocessing/api.py:869] "
        "failed (exitcode: -6) local_rank: 1 (pid: 3016739) of binary: /usr/bin/python3.11",
    ]
    log = tmp_path / "run.log"
    log.write_text("\n".join([titan_line(620, 27), titan_line(640, 47), *tail]) + "\n")
    db = tmp_path / "t.duckdb"
    (result,) = api.ingest(db, [str(log)])
    assert result.format == "torchtitan"
    steps = api.sql(db, "SELECT iteration, lm_loss FROM iterations ORDER BY line_no")
    assert [tuple(r) for r in steps.itertuples(index=False)] == [(620, 6.0116), (640, 6.0116)]
    (flag,) = [f for f in api.flags(db).to_dict("records") if f["rule"] == "training_health"]
    assert (flag["severity"], flag["row_ref"]) == ("warning", "line 7")
    assert "Training had finished before it: `Training completed` at line 4" in flag["message"]


def test_torchtitan_dying_before_training_completed_stays_critical(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    crash = (
        "E0401 00:26:08.212000 3016633 site-packages/torch/distributed/elastic/multiprocessing/api.py:869] "
        "failed (exitcode: -6) local_rank: 1 (pid: 3016739) of binary: /usr/bin/python3.11"
    )
    log.write_text("\n".join([titan_line(620, 27), titan_line(640, 47), crash]) + "\n")
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    (flag,) = [f for f in api.flags(db).to_dict("records") if f["rule"] == "training_health"]
    assert flag["severity"] == "critical"
