"""Megatron-DeepSpeed logs whose DeepSpeed step line (`[Rank 0] step=200, skipped=4, lr=[...]`) counts
skipped steps that Megatron's own `number of skipped iterations` does not: the run's skipped count and the
skipped-steps flag take the larger; and `actual seqlen` as the run's sequence length."""

from __future__ import annotations

from pathlib import Path

from tracelog import api
from tracelog.parsers.deepspeed_config import SKIPPED_RUNNING


def iteration(i: int, seqlen: int = 4096) -> str:
    """Megatron-DeepSpeed's iteration line as argonne-lcf's fork prints it on Polaris (Sam Foreman's
    'Megatron-DeepSpeed @ ALCF' notes show `iteration 199/ 317892 | ... | loss scale: 8192.0 | actual
    seqlen:  4096 | number of skipped iterations:   0 | ...`); the figures are this test's."""
    return (
        f"iteration {i:8d}/  317892 | consumed samples: {i * 768:12d} | consumed tokens: {i * 3145728:12d} | "
        "elapsed time per iteration (ms): 14287.5 | learning rate: 2.407E-04 | global batch size:   768 | "
        f"lm loss: {6.5 - i * 0.003:.6E} | loss scale: 8192.0 | actual seqlen: {seqlen:5d} | "
        "number of skipped iterations:   0 | number of nan iterations:   0 | samples per second: 53.753 |"
    )


def step(i: int, skipped: int) -> str:
    return (
        f"[2024-03-07 15:27:15,063] [INFO] [logging.py:96:log_dist] [Rank 0] step={i}, skipped={skipped}, "
        "lr=[0.000240653265864008, 0.000240653265864008], mom=[(0.9, 0.999), (0.9, 0.999)]"
    )


def ingest(tmp_path: Path, lines: list[str]) -> Path:
    log = tmp_path / "run.log"
    log.write_text("\n".join(lines) + "\n")
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    return db


def skip_flags(db: Path) -> list[dict]:
    flags = api.flags(db).to_dict("records")
    return [f for f in flags if f["rule"] == "training_health" and "skipped" in f["message"]]


def test_deepspeeds_running_count_is_the_runs_skipped_count_where_megatrons_lines_say_0(
    tmp_path: Path,
) -> None:
    db = ingest(tmp_path, [iteration(199), step(200, 4), iteration(200)])
    metric = api.sql(
        db, f"SELECT iteration, value, line_no FROM iteration_metrics WHERE key = '{SKIPPED_RUNNING}'"
    )
    assert metric.to_dict("records") == [{"iteration": 200, "value": 4.0, "line_no": 2}]
    summary = api.sql(db, "SELECT skipped_iterations, seq_len FROM run_summary").to_dict("records")
    assert summary == [{"skipped_iterations": 4, "seq_len": 4096}]
    (flag,) = skip_flags(db)
    assert (flag["severity"], flag["row_ref"], flag["measured"]) == ("info", "line 2", 4.0)
    assert flag["message"] == (
        "4 skipped iteration(s) before the steady part by DeepSpeed's count (`step=200, skipped=4` at line 2; "
        "the iteration lines count 0): the fp16 loss scale calibrating."
    )


def test_skips_deepspeed_counts_during_the_steady_part_are_a_warning(tmp_path: Path) -> None:
    # the loss scale calibrates on the first steps (2 skipped by step 2, in warm-up); 5 more after it
    lines = [iteration(1), step(2, 2)]
    for i in range(2, 41):
        lines.append(iteration(i))
        if i % 10 == 0:
            lines.append(step(i + 1, {10: 2, 20: 2, 30: 5, 40: 7}[i]))
    db = ingest(tmp_path, lines)
    assert api.sql(db, "SELECT skipped_iterations FROM run_summary").iloc[0, 0] == 7
    (flag,) = skip_flags(db)
    assert (flag["severity"], flag["measured"]) == ("warning", 5.0)
    assert flag["message"].startswith(
        "5 skipped iteration(s) after warm-up (first near iteration 31) by DeepSpeed's count (`step=41, "
        "skipped=7` at line 45; the iteration lines count 0): the fp16 loss scaler hit overflows."
    )


def test_a_run_whose_lines_and_deepspeed_agree_keeps_its_count(tmp_path: Path) -> None:
    lines = [iteration(i) for i in range(1, 21)]
    lines.insert(10, step(11, 0))
    db = ingest(tmp_path, lines)
    assert api.sql(db, "SELECT skipped_iterations FROM run_summary").iloc[0, 0] == 0
    assert skip_flags(db) == []
