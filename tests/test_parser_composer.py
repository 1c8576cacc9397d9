"""MosaicML Composer's console output under llm-foundry: batch blocks, the config echoes, ranks, evaluations,
relaunches and the eras of its layout.

The sample and the lines written in these tests are invented, laid out as Composer's ConsoleLogger and
callbacks and llm-foundry's train.py print them (composer/loggers/console_logger.py, composer/callbacks/,
llmfoundry/command_utils/train.py), except the two published excerpts, whose sources are named beside them."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.conftest import SAMPLES, rows_by_table
from tracelog import api, parsers
from tracelog.parsers import composer
from tracelog.parsers.base import PARTLY_READ_EVENT, head_text

SAMPLE = SAMPLES / "composer_llmfoundry_mpt_7b_2x8xh100.log"
GB_MIB = 1e9 / 2**20


def collect(text: str) -> dict[str, list[dict]]:
    return rows_by_table(composer.parse, text)


def test_the_sample_is_detected_as_composer_and_nothing_else_claims_it() -> None:
    head = head_text(SAMPLE.read_bytes()[: parsers.HEAD_BYTES])
    assert parsers.detect(head, SAMPLE.name) is composer
    others = {p.FORMAT: p.detect(head) for p in parsers.PARSERS if p is not composer}
    assert max(others.values()) < composer.detect(head), others


@pytest.fixture(scope="module")
def landed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample read whole (`complete`: its last line, cut by the job's end, read as it is)."""
    db = tmp_path_factory.mktemp("composer") / "t.duckdb"
    (result,) = api.ingest(db, [str(SAMPLE)], complete=True)
    assert (result.format, result.runs) == ("composer", 2)
    return db


def test_the_config_echo_gives_each_launch_its_mpt_7b_layout(landed: Path) -> None:
    runs = api.sql(
        landed,
        "SELECT run_key, nodes, gpus, gpus_per_node, dp, tp, pp, mbs, gbs, seq_len, layers, hidden, heads, "
        "query_groups, ffn_hidden, vocab, swiglu, params, precision, zero_stage, recompute, train_iters "
        "FROM runs ORDER BY run_key",
    )
    # mpt-7b.yaml's shape, FULL_SHARD with activation checkpointing, amp_bf16; 6,658,859,008 parameters is
    # llm-foundry's own count for this shape (scripts/train/benchmarking/README.md)
    layout = (
        2,
        16,
        8,
        16,
        1,
        1,
        8,
        256,
        2048,
        32,
        4096,
        32,
        32,
        16384,
        50368,
        False,
        6_658_859_008,
        "bf16",
        3,
        "full",
        24,
    )
    assert [tuple(r)[1:] for r in runs.itertuples(index=False)] == [layout, layout]
    params = dict(
        api.sql(landed, "SELECT name, value FROM run_params WHERE run_id = 1").itertuples(index=False)
    )
    assert params["fsdp_config.sharding_strategy"] == "FULL_SHARD"
    assert params["attention_backend"] == "flash"  # `attn_impl: flash`, the name the model reads
    assert params["composer_version"] == "0.23.5"  # Composer's own Config block
    assert params["launch_command"].startswith("srun --nodes=2 ")  # `set -x`'s `+ ` taken off


def test_one_row_per_batch_with_the_seconds_its_figures_give(landed: Path) -> None:
    rows = api.sql(
        landed,
        "SELECT run_id, iteration, coalesce(rank, -1) AS rank, lm_loss, learning_rate, samples_per_s, "
        "tflops_reported, elapsed_s FROM iterations ORDER BY line_no",
    )
    assert [tuple(int(v) for v in tuple(r)[:3]) for r in rows.itertuples(index=False)] == [
        (1, 1, 0), (1, 2, 0), (1, 4, 0), (1, 6, 0), (1, 8, 0), (1, 10, 0),  # rank 8's copies: no rows
        (2, 9, -1), (2, 10, -1), (2, 12, -1), (2, 14, -1),  # the resumed launch prints no rank prefix
    ]  # fmt: skip
    by = {(r.run_id, r.iteration): r for r in rows.itertuples(index=False)}
    # before SpeedMonitor's window of 4 filled: time/train (hours, four decimals) over the batches between
    assert math.isnan(by[1, 1].elapsed_s)
    assert by[1, 2].elapsed_s == pytest.approx((0.0080 - 0.0069) * 3600)
    assert by[1, 4].elapsed_s == pytest.approx((0.0100 - 0.0080) * 3600 / 2)
    # then the samples per second over the global batch of 256 (`71.6084`, where batches_per_sec is 0.2797)
    assert by[1, 6].elapsed_s == pytest.approx(256 / 71.6084, abs=1e-6)
    assert (by[1, 6].samples_per_s, by[1, 6].tflops_reported) == pytest.approx((71.6084, 395.7309), abs=1e-4)
    # the learning rate prints 0.0000 in warm-up (1.2e-4 x batch / 100): below 5e-5, no 0
    assert rows.learning_rate.isna().all()
    metrics = api.sql(landed, "SELECT key, text FROM iteration_metrics WHERE run_id = 1 AND iteration = 6")
    named = dict(metrics.itertuples(index=False))
    assert named["lr-DecoupledAdamW/group0"] == "0.0000"
    assert (named["mfu (%)"], named["tokens per second per device"]) == ("0.3999", "9165.8741")
    steps = api.sql(landed, "SELECT value FROM run_params WHERE name = 'step_time_source' ORDER BY run_id")
    clock = "time/train differences (hours, four decimals): 2 rows; "
    assert steps["value"].tolist() == [
        clock + "throughput/samples_per_sec over global_train_batch_size: 3 rows",
        clock + "throughput/batches_per_sec: 1 row",  # batch 14's samples per second were cut
    ]


def test_nan_losses_and_the_block_the_job_cut(landed: Path) -> None:
    rows = api.sql(
        landed,
        "SELECT iteration, lm_loss, samples_per_s, elapsed_s FROM iterations WHERE run_id = 2 ORDER BY 1",
    )
    losses = dict(zip(rows.iteration, rows.lm_loss, strict=True))
    assert losses[10] == pytest.approx(8.8402) and math.isnan(losses[12]) and math.isnan(losses[14])
    # batch 14 ends in `Train throughput/samples_per_sec: 71.6` of 71.6xxx: not kept; its batches per second
    # (0.2797) give its seconds
    last = rows[rows.iteration == 14].iloc[0]
    assert math.isnan(last.samples_per_s) and last.elapsed_s == pytest.approx(1 / 0.2797)
    cut = api.sql(landed, f"SELECT text FROM events WHERE kind = '{PARTLY_READ_EVENT}'")
    assert len(cut) == 1
    flags = api.sql(landed, "SELECT message FROM flags WHERE subject_id = 2 AND rule = 'training_health'")
    assert any("NaN iteration" in m for m in flags.message)


def test_memory_rows_per_rank_in_megabytes_of_the_printed_gigabytes(landed: Path) -> None:
    memory = api.sql(
        landed,
        "SELECT run_id, iteration, rank, allocated_mib, reserved_mib, max_allocated_mib, max_reserved_mib "
        "FROM memory ORDER BY line_no",
    )
    ranks = [(r.run_id, r.iteration, r.rank) for r in memory.itertuples(index=False)][:4]
    assert ranks == [(1, 1, 0), (1, 1, 8), (1, 2, 0), (1, 2, 8)]  # rank 8's block of batch 2 interleaved
    first = memory.iloc[0]
    assert tuple(first[3:]) == pytest.approx(
        (9.6191 * GB_MIB, 58.116 * GB_MIB, 51.904 * GB_MIB, 58.116 * GB_MIB)
    )
    assert memory.iloc[3].max_reserved_mib == pytest.approx(63.454 * GB_MIB)


def test_the_evaluation_is_one_validation_loss_at_the_batch_it_followed(landed: Path) -> None:
    scores = api.sql(
        landed,
        "SELECT iteration, key, value FROM iteration_metrics WHERE key LIKE 'validation%' ORDER BY key",
    )
    # ranks 0 and 8 both print it: once
    assert scores.values.tolist() == [[8, "validation loss", 8.9512], [8, "validation loss PPL", 7717.1469]]


def test_warnings_inside_a_block_leave_it_whole(landed: Path) -> None:
    events = api.sql(
        landed, "SELECT run_id, line_no, kind FROM events WHERE kind = 'warning' ORDER BY line_no"
    )
    assert len(events) == 2
    # rank 8's block of batch 2 and the resumed launch's batch 9 hold a warning between their lines, and every
    # figure after it still counts: batch 9's learning rate comes after
    after = api.sql(
        landed,
        "SELECT count(*) FROM iteration_metrics WHERE run_id = 2 AND iteration = 9 AND key LIKE 'lr-%'",
    )
    assert after.iloc[0, 0] == 1
    unparsed = api.sql(landed, "SELECT text FROM unparsed")["text"].tolist()
    assert sum("with device_autocast_ctx" in t for t in unparsed) == 2  # Python's echo of the warned line
    assert not any("Train " in t for t in unparsed[:-1])  # every whole metric line read


def test_the_crash_ends_the_first_launch(landed: Path) -> None:
    kinds = api.sql(landed, "SELECT kind FROM events WHERE run_id = 1")["kind"].tolist()
    assert {"timeout", "crash", "traceback"} <= set(kinds)


# Published: mosaicml/llm-foundry, scripts/train/README.md (lines 163-178 at 8c8dd48, first written in
# 300cc5c of 2023-05-03), what `composer train.py yamls/pretrain/mpt-125m.yaml` prints, verbatim (the README
# shows the tab as spaces).
README_EXCERPT = """\
[batch=1/100]:
         Train LanguageCrossEntropy: 10.9736
         Train Perplexity: 58312.0586
         Train loss/train/total: 10.9736
[batch=2/100]:
         Train LanguageCrossEntropy: 10.9724
         Train Perplexity: 58243.8086
         Train loss/train/total: 10.9724
[batch=3/100]:
         Train LanguageCrossEntropy: 10.9745
         Train Perplexity: 58365.8047
         Train loss/train/total: 10.9745
[batch=4/100]:
         Train LanguageCrossEntropy: 10.6459
         Train Perplexity: 42018.5508
         Train loss/train/total: 10.6459
"""


def test_the_llm_foundry_readme_excerpt() -> None:
    assert composer.detect(README_EXCERPT) > 0
    rows = collect(README_EXCERPT)
    assert [(r["iteration"], r["train_iters"], r["lm_loss"]) for r in rows["iterations"]] == [
        (1, 100, 10.9736), (2, 100, 10.9724), (3, 100, 10.9745), (4, 100, 10.6459)
    ]  # fmt: skip
    assert {m["key"] for m in rows["iteration_metrics"]} == {"LanguageCrossEntropy", "Perplexity"}
    assert "unparsed" not in rows


# Published: princeton-nlp/LLM-Shearing issue #24 (https://github.com/princeton-nlp/LLM-Shearing/issues/24),
# the first 27 lines of a block pasted by Longyichen, verbatim (tabs shown as spaces in the issue).
SHEARING_EXCERPT = """\
[batch=366/48000]:
         Train time/batch: 365
         Train time/sample: 93440
         Train time/batch_in_epoch: 365
         Train time/sample_in_epoch: 93440
         Train time/token: 382730240
         Train time/token_in_epoch: 382730240
         Train metrics/train/cc_weight: 0.2192
         Train metrics/train/github_weight: 0.0002
         Train metrics/train/book_weight: 0.0791
         Train metrics/train/stackexchange_weight: 0.0064
         Train metrics/train/wiki_weight: 0.0096
         Train metrics/train/arxiv_weight: 0.0010
         Train metrics/train/c4-rp_weight: 0.6845
         Train memory/current_allocated_mem: 9.7173
         Train memory/current_active_mem: 9.7173
         Train memory/current_inactive_mem: 0.6447
         Train memory/current_reserved_mem: 51.3280
         Train memory/peak_allocated_mem: 44.6420
         Train memory/peak_active_mem: 44.8020
         Train memory/peak_inactive_mem: 17.7940
         Train memory/peak_reserved_mem: 51.3280
         Train memory/alloc_retries: 0
         Train trainer/device_train_microbatch_size: 16
         Train loss/train/total: 10.3750
         Train loss/train/ce_loss: 10.3750
         Train metrics/train/LanguageCrossEntropy: 10.3750
"""


def test_the_llm_shearing_excerpt() -> None:
    rows = collect(SHEARING_EXCERPT)
    ((row,),) = [rows["iterations"]]
    assert (row["iteration"], row["train_iters"], row["lm_loss"]) == (366, 48000, 10.375)
    ((memory,),) = [rows["memory"]]
    assert memory["max_reserved_mib"] == pytest.approx(51.328 * GB_MIB)
    assert memory["max_allocated_mib"] == pytest.approx(44.642 * GB_MIB)
    metrics = {m["key"]: m["value"] for m in rows["iteration_metrics"]}
    assert metrics["metrics/train/c4-rp_weight"] == 0.6845 and metrics["loss/train/ce_loss"] == 10.375
    assert rows["runs"][0]["mbs"] == 16  # auto microbatching: the size it settled on
    assert "unparsed" not in rows


# Invented, in the layout of llm-foundry's train.py of mid-2023 (bare prints, `print(f'{cfg.n_params=:.2e}')`,
# `Logging config...` then `print(om.to_yaml(cfg))` with its interpolations unresolved) and Composer 0.13
# (memory in gigabytes under `allocated_mem`, `wall_clock/train`), for a Llama-2-7B fine-tune through
# `hf_causal_lm` with HYBRID_SHARD.
LLAMA_2023 = """\
Initializing model...
cfg.n_params=6.74e+09
Building train loader...
Building trainer...
Logging config...
max_seq_len: 4096
global_seed: 17
model:
  name: hf_causal_lm
  pretrained_model_name_or_path: meta-llama/Llama-2-7b-hf
  pretrained: true
  max_seq_len: ${max_seq_len}
global_train_batch_size: 64
device_train_microbatch_size: auto
precision: amp_bf16
fsdp_config:
  sharding_strategy: HYBRID_SHARD
  mixed_precision: PURE
  activation_checkpointing: false
n_gpus: 16

Starting training...
[batch=1/500]:
\t Train memory/allocated_mem: 14.5230
\t Train memory/reserved_mem: 61.0020
\t Train trainer/device_train_microbatch_size: 2
\t Train loss/train/total: 1.4512
\t Train wall_clock/train: 0.0102
[batch=2/500]:
\t Train memory/allocated_mem: 14.5230
\t Train loss/train/total: 1.3977
Done.
"""


def test_a_2023_llama_fine_tune_through_hugging_face() -> None:
    rows = collect(LLAMA_2023)
    (run,) = rows["runs"]
    assert (run["seq_len"], run["gbs"], run["mbs"], run["gpus"], run["precision"]) == (
        4096,
        64,
        2,
        16,
        "bf16",
    )
    assert (run["zero_stage"], run["recompute"], run["params"]) == (3, "none", 6_740_000_000)
    # the checkpoint's name gives its shape (parsers.checkpoints): Llama 2 7B, untied, 32 KV heads
    shape = ("layers", "hidden", "heads", "query_groups", "ffn_hidden", "vocab", "swiglu")
    assert tuple(run[k] for k in shape) == (32, 4096, 32, 32, 11008, 32000, True)
    params = {p["name"]: p["value"] for p in run["run_params"]}
    assert params["model.pretrained_model_name_or_path"] == "meta-llama/Llama-2-7b-hf"
    assert params["shape_from"].startswith("checkpoint meta-llama/Llama-2-7b-hf")
    assert params["untie_embeddings_and_output_weights"] == "True"
    assert params["model.max_seq_len"] == "${max_seq_len}"
    (memory, _) = rows["memory"]
    assert (memory["allocated_mib"], memory["reserved_mib"]) == pytest.approx(
        (14.523 * GB_MIB, 61.002 * GB_MIB)
    )
    assert [e["kind"] for e in rows["events"]] == ["training_done"]
    assert "unparsed" not in rows


# Invented, in the layout of Composer between August and November 2022 (ProgressBarLogger's console lines:
# a metric per line behind its header, the epoch counted from 0, memory in bytes).
ONE_LINE_2022 = """\
[epoch=0][batch=16/100]: trainer/global_step: 15
[epoch=0][batch=16/100]: loss/train/total: 2.3012
[epoch=0][batch=16/100]: memory/reserved_mem: 21474836480
[epoch=0][batch=17/100]: trainer/global_step: 16
[epoch=0][batch=17/100]: loss/train/total: 2.29
"""


def test_the_2022_one_metric_per_line_layout() -> None:
    rows = collect(ONE_LINE_2022)
    assert [(r["iteration"], r["lm_loss"]) for r in rows["iterations"]] == [(16, 2.3012), (17, None)]
    assert rows["memory"][0]["reserved_mib"] == 20480.0  # bytes, printed as an int
    # the last figure lost digits (Composer prints four decimals): its line unparsed, an event says why
    assert [u["line_no"] for u in rows["unparsed"]] == [5]
    assert [e["kind"] for e in rows["events"]] == [PARTLY_READ_EVENT]


# Invented: a block of an epoch-based run (`[epoch=2][batch=3/5]`, the batch within the epoch), and Composer's
# launcher printing a failed rank's captured output (composer/cli/launcher.py `_print_process_exit_status`).
LAUNCHER_DUMP = """\
global_train_batch_size: 32
[epoch=1][batch=5/5]:
\t Train time/batch: 4
\t Train memory/peak_reserved_mem: 30.0000
\t Train loss/train/total: 3.0000
[epoch=2][batch=1/5]:
\t Train time/batch: 5
\t Train memory/peak_reserved_mem: 30.1000
\t Train loss/train/total: 2.9000
Global rank 5 (PID 8812) exited with code -9
----------Begin global rank 5 STDOUT----------
Building trainer...
global_train_batch_size: 32

[epoch=1][batch=5/5]:
\t Train time/batch: 4
\t Train memory/peak_reserved_mem: 31.2500
\t Train loss/train/total: 3.0000
----------End global rank 5 STDOUT----------
"""


def test_a_failed_ranks_output_is_that_ranks_memory_not_a_relaunch() -> None:
    rows = collect(LAUNCHER_DUMP)
    assert len(rows["runs"]) == 1
    assert [(r["iteration"], r["lm_loss"]) for r in rows["iterations"]] == [(5, 3.0), (6, 2.9)]
    memory = [(m["iteration"], m["rank"], m["max_reserved_mib"]) for m in rows["memory"]]
    assert memory == [(5, None, 30 * GB_MIB), (6, None, 30.1 * GB_MIB), (5, 5, 31.25 * GB_MIB)]
    assert [e["kind"] for e in rows["events"]] == ["crash"]


# Invented: a run printing every 10 batches and evaluating every 25 (`eval_interval: 25ba`), its speed
# monitor's clock in seconds, then a relaunch that resumes at batch 21 without printing its start lines.
EVAL_INTERVAL = """\
Logging config
eval_interval: 25ba
callbacks:
  speed_monitor:
    time_unit: seconds

[batch=10/100]:
\t Train time/train: 40.0000
[batch=20/100]:
\t Train time/train: 80.5000
[Eval batch=1/2] Eval on eval data
[Eval batch=2/2] Eval on eval data:
\t Eval metrics/eval/LanguageCrossEntropy: 2.5000
[Eval batch=1/1] Eval on code data:
\t Eval metrics/code/LanguageCrossEntropy: 1.2500
[batch=21/100]:
\t Train time/train: 84.0000
"""


def test_an_evaluation_between_printed_batches_and_a_bare_resume() -> None:
    rows = collect(EVAL_INTERVAL)
    scores = [(m["iteration"], m["key"], m["value"]) for m in rows["iteration_metrics"] if "loss" in m["key"]]
    assert scores == [(25, "validation loss", 2.5), (25, "validation loss (code)", 1.25)]
    # batch 21 after 20 is no resume; the seconds of 20 are its clock's over the 10 batches since 10
    assert [(r["run_key"], r["iteration"], r["elapsed_s"]) for r in rows["iterations"]] == [
        (0, 10, None), (0, 20, 4.05), (0, 21, 3.5)
    ]  # fmt: skip
    resumed = collect(EVAL_INTERVAL + "[batch=12/100]:\n\t Train time/train: 99.0000\n")
    assert [r["run_key"] for r in resumed["iterations"]] == [0, 0, 0, 1]


@pytest.mark.parametrize(
    ("fsdp", "stage"),
    [("fsdp_config:\n  sharding_strategy: SHARD_GRAD_OP\n", 2),
     ("fsdp_config:\n  sharding_strategy: _HYBRID_SHARD_ZERO2\n", 2),
     ("fsdp_config:\n  mixed_precision: PURE\n", 3),  # Composer's default strategy: FULL_SHARD
     ("fsdp_config: null\n", 0)],  # DDP
)  # fmt: skip
def test_fsdp_sharding_as_a_zero_stage(fsdp: str, stage: int) -> None:
    text = (
        "Logging config\nprecision: amp_fp8\n" + fsdp + "\n[batch=1/10]:\n\t Train loss/train/total: 2.0000\n"
    )
    (run,) = collect(text)["runs"]
    assert (run["zero_stage"], run["precision"]) == (stage, "fp8")


def test_an_mpt_with_grouped_query_attention_and_a_gated_mlp() -> None:
    text = (
        "Logging config\nmodel:\n  name: mpt_causal_lm\n  d_model: 2048\n  n_heads: 16\n  n_layers: 24\n"
        "  expansion_ratio: 2.75\n  attn_config:\n    attn_type: grouped_query_attention\n    kv_n_heads: 4\n"
        "  ffn_config:\n    ffn_type: mptglu\n\n[batch=1/10]:\n\t Train loss/train/total: 2.0000\n"
    )
    (run,) = collect(text)["runs"]
    assert (run["hidden"], run["heads"], run["query_groups"], run["ffn_hidden"], run["swiglu"]) == (
        2048, 16, 4, 5632, True
    )  # fmt: skip
    assert run["vocab"] == 50368  # MPTConfig's default, the echo printing none


# Verbatim, mosaicml/llm-foundry PR 884 (https://github.com/mosaicml/llm-foundry/pull/884), the start of a finetuning
# run as its author pasted it: Composer's own loggers in llm-foundry's format, then the YAML echo, no batch yet.
STARTED_NO_BATCH = """\
2024-01-19 15:51:44,402: rank0[11406][MainThread]: INFO: composer.trainer.trainer: Run name: interactive-il0GeA
2024-01-19 15:51:45,555: rank0[11406][MainThread]: INFO: composer.trainer.trainer: Stepping schedulers every batch. To step schedulers every epoch, set `step_schedulers_every_batch=False`.
2024-01-19 15:51:45,556: rank0[11406][MainThread]: DEBUG: composer.loggers.mosaicml_logger: Logging model initialized time to metadata
2024-01-19 15:51:45,566: rank0[11406][MainThread]: INFO: composer.loggers.mosaicml_logger: Logged 1 metadata to MosaicML, waiting on 1
2024-01-19 15:51:45,566: rank0[11406][MainThread]: INFO: composer.trainer.trainer: Setting seed to 17
2024-01-19 15:51:45,566: rank0[11406][MainThread]: INFO: composer.utils.reproducibility: Setting seed to 17
max_seq_len: 2048
global_seed: 17
model:
  name: mpt_causal_lm
  init_device: meta
  d_model: 768
  n_heads: 12
  n_layers: 12
  expansion_ratio: 4
  max_seq_len: 2048
  vocab_size: 50368
  attn_config:
    attn_impl: triton
"""


def test_a_start_logged_by_composers_own_loggers_is_composers() -> None:
    head = head_text(STARTED_NO_BATCH.encode())
    assert parsers.detect(head, "train.log") is composer
    (run,) = collect(STARTED_NO_BATCH)["runs"]
    assert (run["seq_len"], run["layers"], run["hidden"], run["heads"], run["vocab"]) == (
        2048,
        12,
        768,
        12,
        50368,
    )


def test_one_line_of_llm_foundrys_format_is_not_enough() -> None:
    # invented: a single logger line of this shape in another tool's output claims nothing
    line = "2024-01-19 15:51:44,402: rank0[11406][MainThread]: INFO: composer.trainer.trainer: Run name: x\n"
    assert composer.detect(line) == 0
