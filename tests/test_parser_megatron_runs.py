"""Where a Megatron log's runs begin when no arguments block says so: the same iteration printed again with
other figures once the pass over it had ended (two runs pasted one after the other), and what stays one run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_parser_megatron import collect
from tracelog import api

LINE = (
    "{rank}iteration     {i}/   20000 | consumed samples:       {samples} | elapsed time per iteration (ms): "
    "{ms} | throughput per GPU (TFLOP/s/GPU): {tflops} | learning rate: 9.999946E-05 | global batch size:   "
    "256 | lm loss: {loss} | loss scale: 1.0 | grad norm: 0.514 | num zeros: 0.0 | number of skipped "
    "iterations:   0 | number of nan iterations:   0 |\n"
)


def line(i: int, ms: float, loss: str, tflops: float = 250.1, rank: str = "") -> str:
    return LINE.format(rank=rank, i=i, samples=i * 256, ms=ms, tflops=tflops, loss=loss)


# Invented, in the shape of Megatron-LM#1152's comment: an FP8 and a BF16 run of one MoE model pasted in
# one block under `# ...` comments, each at iteration 1000, the first run's validation losses after it.
PASTED = (
    "# fp8 run\n"
    + line(990, 5502.3, "3.151920E+00")
    + line(1000, 5484.6, "3.147666E+00")
    + "\n"
    + "validation loss at iteration 1000 | lm loss value: 3.846950E+00 | lm loss PPL: 4.684997E+01 |\n"
    + "\n"
    + "# bf16 run\n"
    + line(1000, 5770.8, "3.054385E+00", tflops=237.7)
    + line(1010, 5768.1, "3.050012E+00", tflops=237.8)
)


@pytest.mark.parametrize("block_bytes", [64, 400, 1 << 20])
def test_two_pasted_runs_at_the_same_iteration_are_two_runs(block_bytes: int) -> None:
    out = collect(PASTED, block_bytes)
    by_run = sorted((r["run_key"], r["iteration"], r["elapsed_s"]) for r in out["iterations"])
    assert by_run == [(0, 990, 5.5023), (0, 1000, 5.4846), (1, 1000, 5.7708), (1, 1010, 5.7681)]
    (restart,) = [e for e in out["events"] if e["kind"] == "restart"]
    assert restart["line_no"] == 8
    assert restart["text"].startswith("iteration 1000 again (line 3 printed it) with other figures, after ")
    if block_bytes == 1 << 20:  # the line that ended the pass is named where it is in the same block
        assert "`# bf16 run` at line 7" in restart["text"]


def test_the_pasted_runs_have_their_own_medians_and_last_loss(tmp_path: Path) -> None:
    log = tmp_path / "fp8_vs_bf16.log"
    log.write_text(PASTED)
    db = tmp_path / "t.duckdb"
    (result,) = api.ingest(db, [str(log)])
    assert result.runs == 2
    runs = api.sql(db, "SELECT run_id, line_start, line_end FROM runs ORDER BY run_id")
    assert list(runs.itertuples(index=False, name=None)) == [(1, 1, 7), (2, 8, 9)]
    losses = api.sql(
        db,
        "SELECT run_id, arg_max(lm_loss, iteration) AS last FROM iterations GROUP BY run_id ORDER BY run_id",
    )
    assert list(losses["last"]) == pytest.approx([3.147666, 3.050012])


@pytest.mark.parametrize(
    "between",
    [
        "",  # ranks printing the same iteration one after the other
        "[2025-01-07 10:00:00] saving checkpoint at iteration    1000 to /ckpt in torch_dist format\n",
    ],
    ids=["nothing", "a checkpoint save"],
)
def test_the_same_iteration_again_with_nothing_ending_the_pass_stays_one_run(between: str) -> None:
    text = line(990, 5502.3, "3.151920E+00") + line(1000, 5484.6, "3.147666E+00") + between
    text += line(1000, 5486.0, "3.147666E+00") + line(1010, 5490.2, "3.140007E+00")
    out = collect(text)
    assert {r["run_key"] for r in out["iterations"]} == {0}
    assert not [e for e in out.get("events", []) if e["kind"] == "restart"]


def test_two_ranks_at_the_same_iteration_around_a_validation_line_stay_one_run() -> None:
    """torchrun's `[rankN]:` prefixes: the other rank's line of the same iteration is no second pass."""
    text = (
        line(1000, 5484.6, "3.147666E+00", rank="[rank7]: ")
        + "[rank7]: validation loss at iteration 1000 | lm loss value: 3.846950E+00 | lm loss PPL: 4.684997E+01 |\n"
        + line(1000, 5485.9, "3.147666E+00", rank="[rank15]: ")
    )
    out = collect(text)
    assert {r["run_key"] for r in out["iterations"]} == {0}


def test_a_restart_from_a_checkpoint_that_prints_the_last_iteration_again_is_a_new_run() -> None:
    """As when the counter goes back (README, Ingest): the job died after logging 1000 but before saving it,
    resumed from 990 and logged 1000 again: a second pass, whose figures are not the first's."""
    text = (
        line(990, 5502.3, "3.151920E+00")
        + line(1000, 5484.6, "3.147666E+00")
        + "  successfully loaded checkpoint from /ckpt/moe [ t 1/2, p 1/1 ] at iteration 990\n"
        + line(1000, 6120.4, "3.147702E+00")
    )
    out = collect(text)
    assert [(r["run_key"], r["iteration"]) for r in out["iterations"]] == [(0, 990), (0, 1000), (1, 1000)]
    (restart,) = [e for e in out["events"] if e["kind"] == "restart"]
    assert "`successfully loaded checkpoint from /ckpt/moe" in restart["text"]
