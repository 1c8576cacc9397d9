"""nanotron's training log: iteration lines in `human_format`, the pretty-printed `Config:` block, the
start line, `log_memory`, relaunches and the older (2024) line layout.

The lines written in these tests are invented, laid out as nanotron's `LoggerWriter` and `log_rank`
print them (nanotron/logging/base.py, nanotron/trainer.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.conftest import SAMPLES, rows_by_table
from tracelog import api, parsers
from tracelog.parsers import nanotron
from tracelog.parsers.base import head_text

SAMPLE = SAMPLES / "nanotron_smollm2_1b7_2x8xh100.log"


def collect(text: str) -> dict[str, list[dict]]:
    return rows_by_table(nanotron.parse, text)


def test_the_sample_is_detected_as_nanotron_and_nothing_else_claims_it() -> None:
    head = head_text(SAMPLE.read_bytes()[: parsers.HEAD_BYTES])
    assert parsers.detect(head, SAMPLE.name) is nanotron
    others = {p.FORMAT: p.detect(head) for p in parsers.PARSERS if p is not nanotron}
    assert max(others.values()) < nanotron.detect(head), others


@pytest.mark.parametrize(
    ("text", "value"),
    [(("506", ""), 506.0), (("1.23", "K"), 1230.0), (("262", "K"), 262e3), (("1.71", "B"), 1.71e9),
     (("312", "G"), 312e9), (("0.000338", ""), 0.000338), (("1e-05", ""), 1e-05)],
)  # fmt: skip
def test_human_format_numbers(text: tuple[str, str], value: float) -> None:
    assert nanotron.human(*text) == pytest.approx(value)


def test_the_sample_lands_as_two_runs_with_its_shape_and_steps(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    (result,) = api.ingest(db, [str(SAMPLE)])
    assert (result.format, result.runs) == ("nanotron", 2)
    runs = api.sql(
        db,
        "SELECT framework, gpus, dp, tp, pp, cp, mbs, gbs, seq_len, layers, hidden, heads, query_groups, "
        "ffn_hidden, vocab, swiglu, precision, recompute, zero_stage, params, train_iters FROM runs ORDER BY run_id",
    )
    assert [tuple(r) for r in runs.itertuples(index=False)] == [
        ("nanotron", 16, 16, 1, 1, 1, 4, 128, 2048, 24, 2048, 32, 32, 8192, 49152, True, "bf16", "none", 0,
         1_710_000_000, 120)
    ] * 2  # fmt: skip
    steps = api.sql(
        db,
        "SELECT run_id, min(iteration), max(iteration), count(*) FROM iterations GROUP BY run_id ORDER BY run_id",
    )
    assert steps.values.tolist() == [[1, 1, 72, 72], [2, 61, 120, 60]]  # the relaunch from step 60
    # line 118: `iteration: 10 / 120 | consumed_tokens: 2.62M | time_per_iteration_ms: 506 | ... |
    # global_batch_size: 262K | grad_norm: 0.48 | lm_loss: 8.25 | lr: 0.00025 | model_tflops_per_gpu: 371`
    row = api.sql(
        db,
        "SELECT elapsed_s, lm_loss, grad_norm, learning_rate, tflops_reported, consumed_tokens, "
        "global_batch_size, train_iters FROM iterations WHERE run_id = 1 AND iteration = 10",
    ).iloc[0]
    assert tuple(row.iloc[:6]) == pytest.approx((0.506, 8.25, 0.48, 0.00025, 371.0, 2_620_000))
    # 262K tokens is the start line's 128 samples x 2048: a batch in tokens, not put in the column
    assert row.isna()["global_batch_size"] and row["train_iters"] == 120
    metrics = api.sql(
        db, "SELECT key, value FROM iteration_metrics WHERE run_id = 1 AND iteration = 10 ORDER BY key"
    )
    assert metrics.values.tolist() == [["tokens per second", 518e3], ["tokens per second per device", 32.4e3]]
    facts = api.sql(db, "SELECT DISTINCT value FROM hardware_sources WHERE fact = 'nccl_version'")
    assert facts["value"].tolist() == ["2.21.5"]


def test_memory_lines_go_to_the_step_being_run(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(SAMPLE)])
    memory = api.sql(
        db,
        "SELECT run_id, iteration, allocated_mib, max_allocated_mib, max_reserved_mib FROM memory "
        "ORDER BY line_no",
    )
    first = memory[memory.run_id == 1].values.tolist()
    assert memory.iteration.isna().tolist()[0]  # after model building: no step yet
    assert first[0][2:] == [3264.12, 5120.0, 5378.0]
    assert [r[1] for r in first[1:]] == [1, 1, 2, 2]
    assert first[2][2:] == [16322.61, 45876.40, 49152.0]
    assert [r[1] for r in memory[memory.run_id == 2].values.tolist()[1:]] == [61, 61, 62, 62]


def test_events_and_unparsed_lines(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(SAMPLE)])
    events = api.sql(db, "SELECT run_id, kind, count(*) FROM events GROUP BY ALL ORDER BY run_id, kind")
    assert ("checkpoint_saved" in events.kind.tolist()) and ("checkpoint_loaded" in events.kind.tolist())
    kinds = dict(zip(events.kind, events["count_star()"], strict=False))
    assert kinds["timeout"] >= 1
    unparsed = api.sql(db, "SELECT text FROM unparsed ORDER BY line_no")["text"].tolist()
    assert any("torch/distributed/run.py" in t for t in unparsed)
    assert any(
        "general=GeneralArgs(project='smollm2'" in t for t in unparsed
    )  # a config line with no key of ours
    assert not any("iteration: " in t for t in unparsed)


OLD = """\
03/02/2024 10:00:01 [INFO|DP=0|PP=0|TP=0|gpu-node-07]: Config:
03/02/2024 10:00:01 [INFO|DP=0|PP=0|TP=0|gpu-node-07]: Config(general=GeneralArgs(project='debug', run='tiny'),
       parallelism=ParallelismArgs(dp=2,
                                   pp=2,
                                   tp=2,
                                   recompute_layer=True),
       model=ModelArgs(model_config=LlamaConfig(hidden_size=512, num_attention_heads=8, num_hidden_layers=4,
                                                num_key_value_heads=8, intermediate_size=1376, vocab_size=32000),
                       dtype=torch.float16),
       tokens=TokensArgs(sequence_length=256, train_steps=50, micro_batch_size=2, batch_accumulation_per_replica=4))
03/02/2024 10:00:05 [INFO|DP=0|PP=0|TP=0|gpu-node-07]: Total number of parameters: 40.3M (76.88MiB)
03/02/2024 10:00:09 [INFO|DP=0|PP=0|TP=0|gpu-node-07]: iteration: 1 / 50 | consumed_tokens: 4.1K | elapsed_time_per_iteration_ms: 1.21K | tokens_per_sec: 3.39K | tokens_per_sec_per_gpu: 423 | global_batch_size: 16 | lm_loss: 10.4 | lr: 1e-05 | model_tflops_per_gpu: 0.148 | hardware_tflops_per_gpu: 0.197 | grad_norm: 3.31 | cuda_memory_allocated: 410M | cuda_max_memory_reserved: 1.88G | hd_total_memory_tb: 312G | hd_used_memory_tb: 61.8G | hd_free_memory_tb: 250G
03/02/2024 10:00:09 [INFO|DP=0|PP=0|TP=0|gpu-node-07]: iteration: 2 / 50 | consumed_tokens: 8.19K | elapsed_time_per_iteration_ms: 92.4 | tokens_per_sec: 44.3K | tokens_per_sec_per_gpu: 5.54K | global_batch_size: 16 | lm_loss: nan | lr: 2e-05 | model_tflops_per_gpu: 1.94 | hardware_tflops_per_gpu: 2.58 | grad_norm: nan
03/02/2024 10:00:10 [INFO|DP=0|PP=0|TP=0|gpu-node-07]: iteration: 1 / 50 | consumed_tokens: 4.1K | elapsed_time_per_iteration_ms: 1.19K | tokens_per_sec: 3.44K | tokens_per_sec_per_gpu: 430 | global_batch_size: 16 | lm_loss: 10.4 | lr: 1e-05 | model_tflops_per_gpu: 0.15 | hardware_tflops_per_gpu: 0.2 | grad_norm: 3.3
"""


def test_the_2024_layout_its_memory_fields_a_nan_and_a_step_going_back() -> None:
    rows = collect(OLD)
    runs = rows["runs"]
    assert [(r["run_key"], r.get("gpus"), r.get("tp"), r.get("pp"), r.get("dp")) for r in runs] == [
        (0, 8, 2, 2, 2),
        (1, 8, None, None, None),  # the relaunch's steps: no configuration again, the GPUs from its rates
    ]
    first = runs[0]
    assert (first["recompute"], first["precision"], first["layers"], first["ffn_hidden"]) == (
        "full",
        "fp16",
        4,
        1376,
    )
    assert (first["mbs"], first["seq_len"], first["train_iters"], first["params"]) == (2, 256, 50, 40_300_000)
    iterations = rows["iterations"]
    assert [(r["run_key"], r["iteration"]) for r in iterations] == [(0, 1), (0, 2), (1, 1)]
    assert iterations[0]["elapsed_s"] == pytest.approx(1.21)
    # before nanotron renamed its time key (2025-03) the batch was in samples, since then in tokens
    assert [r.get("global_batch_size") for r in iterations] == [16, 16, 16]
    assert iterations[0]["ts"].isoformat() == "2024-03-02T10:00:09"
    assert math.isnan(iterations[1]["lm_loss"]) and math.isnan(iterations[1]["grad_norm"])
    (memory,) = rows["memory"]
    assert memory["allocated_mib"] == pytest.approx(410e6 / 2**20)
    assert memory["max_reserved_mib"] == pytest.approx(1.88e9 / 2**20)
    hardware = [r for r in rows["iteration_metrics"] if r["key"] == "hardware tflops per gpu"]
    assert [r["value"] for r in hardware] == pytest.approx([0.197, 2.58, 0.2])


def test_start_line_sets_the_batch_and_samples_per_step() -> None:
    text = (
        "11/25 09:14:07 [INFO|DP=0]: mbs: 4 | grad_accum: 2 | cp: 1 | sequence_length: 2048 | "
        "global_batch_size: 64 | train_steps: 10 | start_iteration_step: 0 | consumed_tokens_total: 0\n"
        "11/25 09:14:09 [INFO|DP=0]: iteration: 1 / 10 | consumed_tokens: 131K | time_per_iteration_ms: 512 | "
        "tokens_per_sec: 256K | tokens_per_sec_per_gpu: 32K | global_batch_size: 64 | lm_loss: 10.9 | lr: 5e-05 | "
        "model_tflops_per_gpu: 301 | eta: 0:00:04\n"
        "11/25 09:14:10 [INFO|DP=0]: iteration: 2 / 10 | consumed_tokens: 262K | time_per_iteration_ms: 508 | "
        "tokens_per_sec: 258K | tokens_per_sec_per_gpu: 32.3K | global_batch_size: 131K | lm_loss: 10.7 | lr: 0.0001 | "
        "model_tflops_per_gpu: 303 | eta: 0:00:04\n"
    )
    rows = collect(text)
    (run,) = rows["runs"]
    assert (run["mbs"], run["gbs"], run["dp"], run["seq_len"], run["cp"]) == (4, 64, 8, 2048, 1)
    # 64 is the start line's batch in samples; 131K is the same batch in tokens (2025 and later)
    assert [r.get("global_batch_size") for r in rows["iterations"]] == [64, None]


EVERY_LINE_PREFIXED = """\
[2;3m08/31/2024 14:37:22 [INFO|DP=0|PP=0|TP=0][0m: Config:
08/31/2024 14:37:22 [INFO|DP=0|PP=0|TP=0]: Config(general=GeneralArgs(project='debug',
08/31/2024 14:37:22 [INFO|DP=0|PP=0|TP=0]:                            seed=42),
08/31/2024 14:37:22 [INFO|DP=0|PP=0|TP=0]:        parallelism=ParallelismArgs(dp=2,
08/31/2024 14:37:22 [INFO|DP=0|PP=0|TP=0]:                                    pp=1,
08/31/2024 14:37:22 [INFO|DP=0|PP=0|TP=0]:                                    tp=4),
08/31/2024 14:37:22 [INFO|DP=0|PP=0|TP=0]:        model=ModelArgs(model_config=LlamaConfig(hidden_size=3072,
08/31/2024 14:37:22 [INFO|DP=0|PP=0|TP=0]:                                                 num_hidden_layers=28,
08/31/2024 14:37:22 [INFO|DP=0|PP=0|TP=0]:                                                 vocab_size=128256),
08/31/2024 14:37:22 [INFO|DP=0|PP=0|TP=0]:                        dtype=torch.bfloat16)
08/31/2024 14:37:23 [INFO|DP=0|PP=0|TP=0]: Building model..
08/31/2024 14:37:26 [INFO|DP=0|PP=0|TP=0]: [Start training] datetime: 2024-08-31 14:37:26.889276 | mbs: 2 | grad_accum: 4 | global_batch_size: 16 | sequence_length: 4096 | train_steps: 15 | start_iteration_step: 0 | consumed_train_samples: 0
08/31/2024 14:37:27 [INFO|DP=0|PP=0|TP=0]: [After train batch iter] Memory usage: 18459.78MB. Peak reserved memory: 69208.00MB
08/31/2024 14:37:28 [INFO|DP=0|PP=0|TP=0]: iteration: 1 / 15 | consumed_samples:         16 | elapsed_time_per_iteration_ms: 5.87E+03 | lm_loss: 1.130280E+01 | lr: 5.333E-07 | model_tflops_per_gpu: 185.96 | grad_norm: 1.618
"""


def test_a_config_block_with_the_prefix_on_every_line_and_the_2024_start_line() -> None:
    """Before 2025 every line of a multi-line message carried the logger's prefix, the start line led
    with `[Start training] datetime:` and put the batch before the sequence, and the first releases
    printed memory in `MB` and `consumed_samples` (`ESC` lost from the colour codes on the first line,
    as a paste into a web page leaves them)."""
    rows = collect(EVERY_LINE_PREFIXED)
    (run,) = rows["runs"]
    assert (run["tp"], run["pp"], run["dp"], run["gpus"]) == (4, 1, 2, 8)
    assert (run["hidden"], run["layers"], run["vocab"], run["precision"]) == (3072, 28, 128256, "bf16")
    assert (run["mbs"], run["gbs"], run["seq_len"], run["train_iters"]) == (2, 16, 4096, 15)
    (memory,) = rows["memory"]
    assert (memory["iteration"], memory["allocated_mib"], memory["max_reserved_mib"]) == (
        1,
        18459.78,
        69208.0,
    )
    (step,) = rows["iterations"]
    assert (step["consumed_samples"], step["elapsed_s"], step["lm_loss"]) == (16, 5.87, 11.3028)
    unparsed = [r["text"] for r in rows["unparsed"]]
    assert any("Building model.." in t for t in unparsed)
    assert not any("hidden_size=3072" in t for t in unparsed)


def test_a_log_of_its_logger_before_any_step_is_still_nanotron() -> None:
    head = (
        "[2;3m12/06 14:46:02 [INFO|CP=0|TP=0|nid006683][0m: [After model building] Memory usage: 18787.00MiB. "
        "Peak allocated: 19415.07MiB Peak reserved: 20170.00MiB\n"
    )
    assert nanotron.detect(head) == 30
    assert parsers.detect(head, "x.log") is nanotron
    (memory,) = collect(head)["memory"]
    assert (memory["allocated_mib"], memory["max_allocated_mib"], memory["max_reserved_mib"]) == (
        18787.0, 19415.07, 20170.0
    )  # fmt: skip


def test_a_resumed_launch_is_its_own_run_from_its_first_line() -> None:
    """Since 2025 a launch prints its checkpoint load (`Loading checkpoint from ...`, `parse_ckpt_path`), the
    parameter count, a memory report and the loaded `CheckpointMetadata(...)` before its `Config:` banner:
    they were the last launch's (its load event, its parameter count, a memory report at its step 5). They
    start the resumed run, which keeps the checkpoint's `last_train_step`. Invented lines in that order."""
    p = "11/25 09:{m:02d}:00 [INFO|DP=0|h100-node-01]: "

    def step(n: int, total: int, loss: str) -> str:
        return p.format(m=n) + (
            f"iteration: {n} / {total} | consumed_tokens: {262 * n}K | time_per_iteration_ms: 505 | "
            f"global_batch_size: 262K | grad_norm: 0.3 | lm_loss: {loss} | lr: 0.0003 | model_tflops_per_gpu: 371"
        )

    start = (
        "mbs: 4 | grad_accum: 2 | cp: 1 | sequence_length: 2048 | global_batch_size: 128 | train_steps: {t} | "
        "start_iteration_step: {s} | consumed_tokens_total: {c}"
    )
    lines = [
        p.format(m=0) + "No checkpoint path provided.",
        p.format(m=0) + "Start training",
        p.format(m=0) + start.format(t=100, s=0, c=0),
        step(1, 100, "10.9"),
        step(2, 100, "10.1"),
        p.format(m=3) + "Saving checkpoint at checkpoints/2",
        step(3, 100, "9.5"),
        step(4, 100, "9.3"),
        p.format(m=30) + "Loading checkpoint from checkpoints/2",
        p.format(m=30) + "Total number of parameters: 1.71B (3264.09MiB)",
        p.format(m=30) + "[After model building] Memory usage: 3264.12MiB. Peak allocated: 5120.00MiB "
        "Peak reserved: 5378.00MiB",
        p.format(m=30) + "CheckpointMetadata(version=<Version('1.4')>, tp=1, dp=16, metas=TrainingMetadata("
        "consumed_train_samples=256, last_train_step=2, consumed_tokens_total=524288, last_stage_idx=0), cp=1)",
        p.format(m=30) + "Start training",
        p.format(m=30) + start.format(t=100, s=2, c=524288),
        step(3, 100, "9.52"),
    ]
    out = collect("\n".join(lines) + "\n")
    runs = out["runs"]
    assert [(r["run_key"], r["line_start"], r["line_end"], r.get("params")) for r in runs] == [
        (0, 1, 8, None),
        (1, 9, 15, 1_710_000_000),
    ]
    assert [(e["run_key"], e["kind"], e["line_no"]) for e in out["events"]] == [
        (0, "checkpoint_saved", 6),
        (1, "checkpoint_loaded", 9),
    ]
    assert [(m["run_key"], m["iteration"]) for m in out["memory"]] == [(1, None)]  # the model built, no step
    resumed = {p["name"]: p["value"] for p in runs[1]["run_params"]}
    assert (resumed["checkpoint last_train_step"], resumed["start_iteration_step"]) == ("2", "2")
    assert "unparsed" not in out


def test_a_step_total_that_changes_is_the_next_launch() -> None:
    """nanotron's `iteration: N / T` prints the launch's `train_steps`: a resume that trains further counts
    on from the checkpoint's step (here with nothing of its start pasted between, as in a 2026 report on a
    Qwen2-MoE smoke test, whose lines these follow in shape), so the step alone does not say it is another
    launch; its total does."""
    lines = [
        "iteration: 91 / 100 | consumed_tokens: 93.2K | time_per_iteration_ms: 90.4 | grad_norm: 1.4M | "
        "lr: 3.3e-05 | lm_loss: 9.2 | model_tflops_per_gpu: 0.784",
        "iteration: 120 / 120 | consumed_tokens: 123K | time_per_iteration_ms: 96.9 | grad_norm: 5.99M | "
        "lr: 0.00019 | lm_loss: 9.16 | model_tflops_per_gpu: 0.731",
    ]
    out = collect("\n".join(lines) + "\n")
    assert [(r["run_key"], r["iteration"], r["train_iters"]) for r in out["iterations"]] == [
        (0, 91, 100),
        (1, 120, 120),
    ]
    assert [(r["run_key"], r["train_iters"]) for r in out["runs"]] == [(0, 100), (1, 120)]


def test_the_gpu_count_from_the_two_token_rates_where_no_config_gives_it() -> None:
    """An excerpt of step lines alone (the shape of huggingface/nanotron#390, 2025: `tokens_per_sec: 22.8K |
    tokens_per_sec_per_gpu: 11.4K`): nanotron divides the first by the world size for the second, so their
    ratio is the GPU count, here 182K / 11.4K = 15.96, within 1 % of 16. A ratio 1 % or more off a whole
    number (a rate cut short) gives none, as does one whose three printed digits allow two whole numbers,
    and a `Config:` block's degrees win over the rates. Invented lines
    in that shape."""

    def step(n: int, rate: str, per_gpu: str) -> str:
        return (
            f"10/17/2025 16:31:56 [INFO|DP=0|PP=0|TP=0]: iteration: {n} / 378950 | consumed_tokens: 85.8G | "
            f"elapsed_time_per_iteration_ms: 1.44K | tokens_per_sec: {rate} | tokens_per_sec_per_gpu: {per_gpu} | "
            "global_batch_size: 64 | lm_loss: 2.38 | lr: 1e-05 | model_tflops_per_gpu: 38.3 | grad_norm: 1.25"
        )

    def gpus(*lines: str) -> int | None:
        (run,) = collect("\n".join(lines) + "\n")["runs"]
        return run.get("gpus")

    assert gpus(step(327281, "182K", "11.4K"), step(327282, "182K", "11.4K")) == 16
    assert gpus(step(327281, "22.8K", "11.4K")) == 2
    assert gpus(step(327281, "25.1K", "11.4K")) is None  # 2.2: no whole number of GPUs
    assert gpus(step(327281, "182K", "699")) is None  # 260.4, but 181.5K / 699.5 to 182.5K / 698.5 allows 261
    config = (
        "10/17/2025 16:31:50 [INFO|DP=0|PP=0|TP=0]: Config(parallelism=ParallelismArgs(dp=4, pp=1, tp=2))"
    )
    banner = "10/17/2025 16:31:50 [INFO|DP=0|PP=0|TP=0]: Config:"
    assert gpus(banner, config, step(1, "182K", "11.4K")) == 8
