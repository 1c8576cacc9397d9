"""NeMo Automodel's training log: step lines behind its logger's prefix, seconds per step from a
whole-second clock, the recipe's YAML, validation lines, relaunches.

The lines written in these tests are invented, laid out as Automodel's recipes print them
(nemo_automodel/recipes/llm/train_ft.py, recipes/base_recipe.py, components/loggers/log_utils.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.conftest import SAMPLES, rows_by_table
from tracelog import api, parsers
from tracelog.parsers import automodel
from tracelog.parsers.base import head_text

SAMPLE = SAMPLES / "nemo_automodel_llama3_2_1b_sft_h100.log"


def collect(text: str) -> dict[str, list[dict]]:
    return rows_by_table(automodel.parse, text)


def test_the_sample_is_detected_as_automodel_and_nothing_else_claims_it() -> None:
    head = head_text(SAMPLE.read_bytes()[: parsers.HEAD_BYTES])
    assert parsers.detect(head, SAMPLE.name) is automodel
    others = {p.FORMAT: p.detect(head) for p in parsers.PARSERS if p is not automodel}
    assert max(others.values()) < automodel.detect(head), others


def test_the_sample_lands_as_one_run_with_its_steps_memory_and_validation(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    (result,) = api.ingest(db, [str(SAMPLE)])
    assert (result.format, result.runs) == ("nemo_automodel", 1)
    run = api.sql(
        db, "SELECT framework, gpus, dp, tp, cp, mbs, gbs, seq_len, train_iters, params FROM runs"
    ).iloc[0]
    assert tuple(run) == ("nemo-automodel", 8, 8, 1, 1, 8, 64, 2048, 150, 1_235_814_400)
    steps = api.sql(
        db, "SELECT iteration, lm_loss, grad_norm, learning_rate, elapsed_s FROM iterations ORDER BY line_no"
    )
    assert steps.iteration.tolist() == list(range(150))
    # the sample's step 121 logged `loss nan | grad_norm nan`
    nan_row = steps[steps.iteration == 121].iloc[0]
    assert math.isnan(nan_row.lm_loss) and math.isnan(nan_row.grad_norm)
    assert steps.learning_rate.eq(1e-05).all()
    # about 1.37 s a step, printed by a whole-second clock: the windowed median lands within 5 %
    assert steps.elapsed_s.median() == pytest.approx(1.37, rel=0.05)
    assert math.isnan(steps.elapsed_s.iloc[0])  # the first line has nothing before it
    validation = api.sql(
        db, "SELECT iteration FROM iteration_metrics WHERE key = 'validation loss' ORDER BY iteration"
    )
    assert validation.iteration.tolist() == [49, 99, 149]
    memory = api.sql(db, "SELECT count(*) AS n, min(max_allocated_mib) AS low FROM memory").iloc[0]
    assert memory.n == 150 and memory.low > 22 * 1024
    events = api.sql(db, "SELECT kind, count(*) AS n FROM events GROUP BY kind ORDER BY kind")
    assert dict(zip(events.kind, events.n, strict=True)) == {"checkpoint_saved": 2, "warning": 1}
    flags = api.sql(db, "SELECT rule, severity, message FROM flags")
    assert any(
        "NaN iteration" in m and s == "critical" for m, s in zip(flags.message, flags.severity, strict=True)
    )


TEXT = """\
2026-08-10 16:00:42 | INFO | root | World size: 16
tp_size line outside any section: 4
distributed:
  strategy: fsdp2
  dp_size: none
  tp_size: 2
  cp_size: 2
dataset:
  seq_len: 4096
2026-08-10 16:00:44 | INFO | root | step 8 | epoch 0 | loss 0.7839 | grad_norm 1.7024 | lr 1.00e-05 | mem 24.06 GiB | tps 31346.32(3918.29/gpu) | num_label_tokens 45579
2026-08-10 16:00:46 | INFO | root | step 9 | epoch 0 | loss 0.7100 | grad_norm 1.5766 | lr 1.00e-05 | mem 24.69 GiB | tps 31686.41(3960.80/gpu) | num_label_tokens 43985
2026-08-10 16:00:49 | INFO | root | step 10 | epoch 0 | loss 0.7062 | accuracy 0.8125 | grad_norm 1.4435 | lr 1.00e-05 | mem 25.12 GiB | time 2.31s
2026-08-10 16:05:01 | INFO | root | step 1 | epoch 0 | loss 1.2034 | grad_norm 3.0021 | lr 1.00e-05 | mem 23.90 GiB | tps 30011.00(1875.69/gpu) | num_label_tokens 40001
"""


def test_pairs_config_sections_a_printed_time_and_a_relaunch() -> None:
    rows = collect(TEXT)
    first = rows["runs"][0]
    # `dp_size: none`: the data-parallel size is what the world leaves after TP and CP
    assert (first["gpus"], first["tp"], first["cp"], first["dp"], first["seq_len"]) == (16, 2, 2, 4, 4096)
    assert [(r["run_key"], r["iteration"]) for r in rows["iterations"]] == [(0, 8), (0, 9), (0, 10), (1, 1)]
    assert [r["elapsed_s"] for r in rows["iterations"]] == [None, 2.0, 2.31, None]  # `time 2.31s` as printed
    metrics = {(m["iteration"], m["key"]): m["value"] for m in rows["iteration_metrics"] if m["run_key"] == 0}
    assert metrics[(8, "tokens per second")] == 31346.32
    assert metrics[(8, "tokens per second per device")] == 3918.29
    assert metrics[(8, "label tokens")] == 45579
    assert metrics[(10, "accuracy")] == 0.8125
    assert [m["max_allocated_mib"] for m in rows["memory"]] == pytest.approx(
        [24.06 * 1024, 24.69 * 1024, 25.12 * 1024, 23.90 * 1024]
    )
    params = {p["name"]: p["value"] for p in first["run_params"]}
    assert params["distributed.strategy"] == "fsdp2"
    unparsed = [r["text"] for r in rows["unparsed"]]
    assert "tp_size line outside any section: 4" in unparsed


# Verbatim: the "Sample Output" of NVIDIA-NeMo/Automodel's docs/guides/llm/finetune.mdx (lines 377-389 at
# commit 36044ad3d139363fb6c73c24af2e7c6b65ec52f6): Python's default logging prefix and `mem:` with a colon.
DOCS_OUTPUT = """\
$ automodel finetune_config.yaml
INFO:nemo_automodel.cli.app:Config: finetune_config.yaml
INFO:nemo_automodel.cli.app:Recipe: nemo_automodel.recipes.llm.train_ft.TrainFinetuneRecipeForNextTokenPrediction
INFO:nemo_automodel.cli.app:Launching job interactively (local)
cfg-path: finetune_config.yaml
INFO:root:step 4 | epoch 0 | loss 1.5514 | grad_norm 102.0000 | mem: 11.66 GiB | tps 6924.50
INFO:root:step 8 | epoch 0 | loss 0.7913 | grad_norm 46.2500 | mem: 14.58 GiB | tps 9328.79
Saving checkpoint to checkpoints/epoch_0_step_10
INFO:root:step 12 | epoch 0 | loss 0.4358 | grad_norm 23.8750 | mem: 15.48 GiB | tps 9068.99
INFO:root:step 16 | epoch 0 | loss 0.2057 | grad_norm 12.9375 | mem: 16.47 GiB | tps 9148.28
INFO:root:step 20 | epoch 0 | loss 0.2557 | grad_norm 13.4375 | mem: 12.35 GiB | tps 9196.97
Saving checkpoint to checkpoints/epoch_0_step_20
INFO:root:[val] step 20 | epoch 0 | loss 0.2469
"""


def test_the_output_automodels_own_docs_show() -> None:
    assert parsers.detect(head_text(DOCS_OUTPUT.encode()), "run.log").FORMAT == "nemo_automodel"
    rows = collect(DOCS_OUTPUT)
    assert [(r["iteration"], r["lm_loss"], r["grad_norm"]) for r in rows["iterations"]] == [
        (4, 1.5514, 102.0), (8, 0.7913, 46.25), (12, 0.4358, 23.875), (16, 0.2057, 12.9375), (20, 0.2557, 13.4375)
    ]  # fmt: skip
    assert [m["max_allocated_mib"] for m in rows["memory"]] == pytest.approx(
        [11.66 * 1024, 14.58 * 1024, 15.48 * 1024, 16.47 * 1024, 12.35 * 1024]
    )
    metrics = {(m["iteration"], m["key"]): m["value"] for m in rows["iteration_metrics"]}
    assert metrics[(4, "tokens per second")] == 6924.50 and metrics[(20, "validation loss")] == 0.2469
    assert [e["kind"] for e in rows["events"]] == ["checkpoint_saved", "checkpoint_saved"]


def test_the_step_scheduler_lr_scheduler_and_optimizer_blocks_are_run_parameters() -> None:
    """The blocks base_recipe.py logs before training (`Step scheduler:` items, the `OptimizerParamScheduler`
    and torch optimizer reprs) as run parameters, the step total as `train_iters`; the global batch of the
    recipe's YAML over its local batch and the accumulation gives the data-parallel size, and the step
    line's `tps 2000.00(500.00/gpu)` the data-parallel times context-parallel ranks, the GPUs where the
    YAML says every degree (figures invented)."""
    stamp = "2025-09-01 07:13:29 | INFO | root | "
    blocks = [
        "Optimizer:", "AdamW (", "Parameter Group 0", "    lr: 0.0003", "    weight_decay: 0.01", ")",
        "LR scheduler:", "OptimizerParamScheduler(", "    optimizer: AdamW", "    learning_rate:",
        "        max_lr: 0.0003", "        warmup_steps: 100", "        decay_style: cosine",
        "    current_step: 0", ")",
        "Step scheduler:", "- Gradient accumulation steps: 4", "- Checkpoint every steps: 500",
        "- Validation every steps: 100", "- Max train steps: 2000",
    ]  # fmt: skip
    yaml = "step_scheduler:\n  global_batch_size: 64\n  local_batch_size: 4\ndistributed:\n  tp_size: 1\n  cp_size: 1\n  pp_size: 1\n"
    step = (
        "2025-09-01 07:13:33 | INFO | root | step 1 | epoch 0 | loss 10.9521 | grad_norm 12.9375 | lr 3.00e-06 "
        "| mem 38.39 GiB | tps 2000.00(500.00/gpu) | num_label_tokens 262144\n"
    )
    out = collect(yaml + "".join(stamp + line + "\n" for line in blocks) + step)
    assert [u["text"] for u in out["unparsed"]] == ["step_scheduler:", "distributed:"]  # YAML headers alone
    (run,) = out["runs"]
    params = {p["name"]: p["value"] for p in run["run_params"]}
    assert (params["gradient_accumulation_steps"], params["step_scheduler.validation_every_steps"]) == (
        "4",
        "100",
    )
    assert (params["lr_scheduler.learning_rate.warmup_steps"], params["lr_scheduler"]) == (
        "100",
        "OptimizerParamScheduler",
    )
    assert (params["optimizer"], params["optimizer.lr"]) == ("AdamW", "0.0003")
    assert params["dp_x_cp_from_tps"] == "4"
    assert (run["train_iters"], run["dp"], run["gpus"]) == (2000, 4, 4)  # 64 = 4 x 4 x 4; 2000 / 500 = 4 x 1
    # without the YAML's degrees the throughput says the data-parallel x context-parallel ranks only
    (bare,) = collect("".join(stamp + line + "\n" for line in blocks) + step)["runs"]
    assert (
        "gpus" not in bare and {p["name"]: p["value"] for p in bare["run_params"]}["dp_x_cp_from_tps"] == "4"
    )
