"""An error line glued to the end of the last step's line (a progress bar that did not end its line before
the NCCL watchdog wrote): the run died there, at that line, not at the next error line.

The lines are invented, in the shape of the NeMo 1.x log pasted in NeMo issue #8441
(github.com/NVIDIA-NeMo/Speech/issues/8441): a Lightning bar `Epoch 0: ... reduced_train_loss=...,
global_step=..., consumed_samples=...]` with `[E ProcessGroupNCCL.cpp:N] [Rank 0] Watchdog caught collective
operation timeout: ...` right after its `]`; the figures are this test's."""

from __future__ import annotations

from pathlib import Path

from tracelog import api


def bar(step: int) -> str:
    return (
        f"Epoch 0:   1%|▏         | {step}/90000 [1:02:{step % 60:02d}<93:10:07,  1.41it/s, loss=3.1, v_num=7a2c, "
        f"reduced_train_loss=3.080, global_step={step - 1}.0, consumed_samples={step * 256}.0]"
    )


def watchdog(rank: int, seq: int) -> str:
    return (
        f"[E ProcessGroupNCCL.cpp:458] [Rank {rank}] Watchdog caught collective operation timeout: "
        f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800731 milliseconds before "
        "timing out."
    )


def test_a_watchdog_line_glued_to_the_last_bar_is_where_the_run_died(tmp_path: Path) -> None:
    lines = [bar(step) for step in range(5200, 5206)]
    lines[-1] += watchdog(0, 15611)
    lines += [watchdog(0, 15612), watchdog(3, 15610)]
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    (flag,) = [f for f in api.flags(db).to_dict("records") if "error line" in f["message"]]
    assert flag["severity"] == "critical"
    assert "It died at line 6: [E ProcessGroupNCCL.cpp:458] [Rank 0] Watchdog caught" in flag["message"]
    assert "SeqNum=15611" in flag["message"]
