"""The Megatron parser on the shapes real logs take: every era, ranks, warnings, restarts, bad bytes."""

from __future__ import annotations

import math
import re
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import SAMPLES, corpus_files, source_of
from tracelog import api, parsers
from tracelog.errors import TracelogError
from tracelog.parsers import deepspeed, megatron, nemo
from tracelog.parsers.base import head_text
from tracelog.parsers.deepspeed_config import SKIPPED_RUNNING
from tracelog.parsers.event_words import EVENT_KINDS, event_kind, event_kinds, kind_of

ARGS = """\
------------------------ arguments ------------------------
  bf16 ............................................ True
  fp16 ............................................ False
  global_batch_size ............................... 512
  group_query_attention ........................... True
  hidden_size ..................................... 8192
  micro_batch_size ................................ 1
  num_attention_heads ............................. 64
  num_layers ...................................... 80
  num_query_groups ................................ 8
  pipeline_model_parallel_size .................... 4
  recompute_granularity ........................... selective
  seq_length ...................................... 4096
  some_future_flag ................................ [1, 2, 3]
  swiglu .......................................... True
  tensor_model_parallel_size ...................... 8
  virtual_pipeline_model_parallel_size ............ 5
  world_size ...................................... 256
-------------------- end of arguments ---------------------
"""


def collect(text: str | bytes, block_bytes: int = 1 << 20) -> dict[str, pl.DataFrame | list]:
    """All batches of a parse, concatenated per table."""
    out: dict[str, list] = {}
    for batch in megatron.parse(source_of(text, block_bytes)):
        rows = batch.rows.to_dicts() if isinstance(batch.rows, pl.DataFrame) else list(batch.rows)
        out.setdefault(batch.table, []).extend(rows)
    return out


def one_iteration(line: str) -> dict:
    rows = collect(line + "\n")["iterations"]
    assert len(rows) == 1
    return rows[0]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            " iteration      100/  500000 | consumed samples:        51200 | elapsed time per iteration (ms): 1234.5 "
            "| learning rate: 1.500000E-04 | global batch size:   512 | lm loss: 3.456789E+00 | loss scale: 1.0 "
            "| grad norm: 0.789 | number of skipped iterations:   0 | number of nan iterations:   0 |",
            {
                "iteration": 100,
                "train_iters": 500000,
                "consumed_samples": 51200,
                "elapsed_s": 1.2345,
                "learning_rate": 1.5e-4,
                "global_batch_size": 512,
                "lm_loss": 3.456789,
                "loss_scale": 1.0,
                "grad_norm": 0.789,
                "skipped": 0,
                "nan": 0,
            },
        ),
        (
            " [2024-05-01 12:00:00] iteration       20/    5000 | consumed samples:        10240 | elapsed time per "
            "iteration (ms): 4710.2 | throughput per GPU (TFLOP/s/GPU): 402.5 | learning rate: 3.000000E-05 | "
            "global batch size:   512 | lm loss: 1.034567E+01 | loss scale: 1.0 | grad norm: 5.123 | "
            "number of skipped iterations:   0 | number of nan iterations:   0 |",
            {"iteration": 20, "elapsed_s": 4.7102, "tflops_reported": 402.5, "lm_loss": 10.34567},
        ),
        (
            " iteration     5000/   95367 | consumed samples:     10240000 | consumed tokens:  20971520000 | elapsed "
            "time per iteration (s): 114.11 | learning rate: 6.000E-05 | global batch size:  2048 | lm loss: "
            "2.345678E+00 | grad norm: 0.312 | num zeros: 0.0 | loss scale: 4096.0 | number of skipped iterations: "
            "  0 | number of nan iterations:   0 | samples per second: 17.948 | TFLOPs: 141.27 |",
            {
                "elapsed_s": 114.11,
                "consumed_tokens": 20971520000,
                "samples_per_s": 17.948,
                "tflops_reported": 141.27,
                "num_zeros": 0.0,
                "loss_scale": 4096.0,
            },
        ),
        (
            " iteration        1/    1000 | consumed samples:         1024 | elapsed time per iteration (ms): 159778.9 "
            "| learning rate: 1.875E-05 | global batch size:  1024 | lm-loss: 1.244238E+01 | loss scale: -1.0 | "
            "grad norm: 0.000 | num zeros: 0.0 | number of skipped iterations:   0 | number of nan iterations:   0 |",
            {"lm_loss": 12.44238, "loss_scale": -1.0, "elapsed_s": 159.7789},
        ),
        (
            "[rank7]: [2024-05-01 12:00:00] iteration 3/ 10 | elapsed time per iteration (ms): 10.0 | lm loss: nan |",
            {"rank": 7, "iteration": 3, "elapsed_s": 0.01},
        ),
        (
            "12:  iteration        3/      10 | elapsed time per iteration (ms): 10.0 | number of nan iterations:   1 |",
            {"rank": 12, "nan": 1},
        ),
    ],
    ids=[
        "megatron-lm-2021",
        "megatron-lm-2024",
        "bloom-meg-ds",
        "meg-ds-lm-loss-dash",
        "rank-bracket",
        "srun-l",
    ],
)
def test_iteration_line_eras(line: str, expected: dict) -> None:
    row = one_iteration(line)
    for key, value in expected.items():
        assert row[key] == pytest.approx(value), key


def test_timestamp_prefix_becomes_ts() -> None:
    row = one_iteration("[2024-05-01 12:34:56] iteration 1/ 2 | elapsed time per iteration (ms): 5.0 |")
    assert row["ts"].isoformat() == "2024-05-01T12:34:56"


def test_nan_loss_is_nan_not_dropped() -> None:
    row = one_iteration(" iteration 3/ 10 | elapsed time per iteration (ms): 10.0 | lm loss: nan |")
    assert math.isnan(row["lm_loss"])


def test_unknown_keys_are_kept_as_metrics() -> None:
    line = (
        " iteration 7/ 10 | consumed samples: 70 | elapsed time per iteration (ms): 10.0 | lm loss: 2.0 | "
        "mtp_1 loss: 2.5 | load_balancing_loss: 1.02E-02 | mem usage: 153.81GB | params norm: 312.4 | "
        "val loss: 2.4/2.6 |"
    )
    out = collect(line + "\n")
    metrics = {m["key"]: m for m in out["iteration_metrics"]}
    assert metrics["mtp_1 loss"]["value"] == 2.5
    assert metrics["load_balancing_loss"]["value"] == pytest.approx(0.0102)
    assert metrics["mem usage"]["value"] == pytest.approx(153.81)
    assert metrics["mem usage"]["text"] == "153.81GB"
    assert metrics["params norm"]["value"] == pytest.approx(312.4)
    assert metrics["val loss"]["value"] == 2.4
    assert metrics["val loss (average)"]["value"] == 2.6
    assert all(m["iteration"] == 7 for m in out["iteration_metrics"])
    assert "lm loss" not in metrics and "consumed samples" not in metrics


def test_arguments_block_maps_to_run_columns_and_keeps_every_argument() -> None:
    out = collect(ARGS + " iteration 1/ 2 | elapsed time per iteration (ms): 5.0 |\n")
    (run,) = out["runs"]
    assert (run["tp"], run["pp"], run["mbs"], run["gbs"], run["gpus"]) == (8, 4, 1, 512, 256)
    assert (run["layers"], run["hidden"], run["heads"], run["query_groups"], run["seq_len"]) == (
        80,
        8192,
        64,
        8,
        4096,
    )
    assert run["dp"] == 256 // (8 * 4)
    assert run["vp"] == 5
    assert run["precision"] == "bf16"
    assert run["recompute"] == "selective"
    assert run["swiglu"] is True
    params = {p["name"]: p["value"] for p in run["run_params"]}
    assert params["some_future_flag"] == "[1, 2, 3]"
    assert len([p for p in run["run_params"] if p["line_no"]]) == 17


# Invented, in the shape of a 2021 Megatron-DeepSpeed log (BigScience meg_ds_3d outputs): no arguments
# block gives the pipeline depth or the global batch; DeepSpeed's partition, its configuration echo and its
# optimizer line do, among other ranks' lines.
DS_PIPE = """\
using world size: 16 and model-parallel size: 2
[2021-05-27 19:49:22,389] [INFO] [module.py:360:_partition_layers] Partitioning pipeline stages with method type:transformer
stage=0 layers=5
     0: _to_float16
     1: EmbeddingPipe
     2: <lambda>
     3: ParallelTransformerLayerPipe
     4: ParallelTransformerLayerPipe
stage=1 layers=2
     5: ParallelTransformerLayerPipe
     6: ParallelTransformerLayerPipe
stage=2 layers=2
     7: ParallelTransformerLayerPipe
     8: ParallelTransformerLayerPipe
stage=3 layers=6
     9: ParallelTransformerLayerPipe
    10: ParallelTransformerLayerPipe
    11: <lambda>
    12: MixedFusedLayerNorm
    13: EmbeddingPipe
    14: fp16_to_fp32
  loss: CrossEntropy
[2021-05-27 19:49:22,948] [INFO] [config.py:904:print]   pipeline ..................... {'stages': 'auto', 'partition': 'best'}
[2021-05-27 19:49:22,949] [INFO] [config.py:904:print]   train_batch_size ............. 1024
[2021-05-27 19:49:22,949] [INFO] [config.py:904:print]   train_micro_batch_size_per_gpu  4
[2021-05-27 19:49:23,105] [INFO] [logging.py:60:log_dist] [Rank 0] Creating fp16 unfused optimizer with dynamic loss scale
 iteration        1/    1000 | consumed samples:         1024 | elapsed time per iteration (ms): 159778.9 |
"""


def test_deepspeed_partition_gives_the_pipeline_depth_and_the_optimizer_is_kept() -> None:
    out = collect(DS_PIPE)
    (run,) = out["runs"]
    assert (run["tp"], run["pp"], run["gpus"], run["dp"]) == (2, 4, 16, 2)
    assert run["gbs"] == 1024  # DeepSpeed's configuration echo, as no argument gives the global batch
    params = {p["name"]: p["value"] for p in run["run_params"]}
    assert params["optimizer_wrapper"] == "fp16 unfused optimizer"
    assert [p["value"] for p in run["run_params"] if p["name"] == "deepspeed_pipe_stage"] == ["3"]
    unparsed = {r["text"].strip() for r in out.get("unparsed", [])}
    assert not any(t.startswith("stage=") or "Creating fp16" in t for t in unparsed)
    assert "0: _to_float16" in unparsed  # the partition's module lines stay kept, as nothing reads them
    # an arguments block that gives the depth wins over the partition
    (given,) = collect(DS_PIPE.replace("using world size: 16 and model-parallel size: 2\n",
        "using world size: 16, data-parallel-size: 8, tensor-model-parallel size: 2, "
        "pipeline-model-parallel size: 1 \n"))["runs"]  # fmt: skip
    assert given["pp"] == 1


def test_world_size_line_and_parameter_counts() -> None:
    text = (
        "using world size: 64, data-parallel-size: 1, tensor-model-parallel size: 4, pipeline-model-parallel size: 16 \n"
        + "".join(
            f" > number of parameters on (tensor, pipeline) model parallel rank ({t}, {p}): 1000\n"
            for t in range(4)
            for p in range(16)
        )
    )
    (run,) = collect(text)["runs"]
    assert (run["gpus"], run["dp"], run["tp"], run["pp"]) == (64, 1, 4, 16)
    assert run["params"] == 64 * 1000


def test_world_size_line_with_the_value_glued_to_the_next_key() -> None:
    """Megatron-LM 2024-2025 (megatron/training/arguments.py) printed the hierarchical context-parallel
    sizes with no separator before `tensor-model-parallel size`: None, or a list."""
    for sizes in ("None", "[2, 4]"):
        text = (
            "using world size: 64, data-parallel size: 4, context-parallel size: 2, hierarchical "
            f"context-parallel sizes: {sizes}tensor-model-parallel size: 4, encoder-tensor-model-parallel "
            "size: 0, pipeline-model-parallel size: 2, encoder-pipeline-model-parallel size: 0\n"
        )
        (run,) = collect(text)["runs"]
        assert (run["gpus"], run["dp"], run["tp"], run["pp"], run["cp"]) == (64, 4, 4, 2, 2)


def test_parameter_count_left_unknown_when_ranks_are_missing() -> None:
    text = (
        "using world size: 8, data-parallel-size: 1, tensor-model-parallel size: 4, pipeline-model-parallel size: 2\n"
        " > number of parameters on (tensor, pipeline) model parallel rank (0, 0): 1000\n"
    )
    (run,) = collect(text)["runs"]
    assert run.get("params") is None


def test_memory_lines_both_eras_attach_to_iterations() -> None:
    text = (
        " iteration 10/ 20 | elapsed time per iteration (ms): 5.0 |\n"
        "[Rank 3] (after 10 iterations) memory (MB) | allocated: 1.5 | max allocated: 2.5 | reserved: 3.0 | "
        "max reserved: 4.0\n"
        " iteration 11/ 20 | elapsed time per iteration (ms): 5.0 |\n"
        "after 11 iterations memory (MB) | allocated: 10.0 | max allocated: 20.0 | reserved: 30.0 | max reserved: 40.0\n"
    )
    memory = collect(text)["memory"]
    assert [(m["rank"], m["iteration"], m["max_reserved_mib"]) for m in memory] == [
        (3, 10, 4.0),
        (None, 11, 40.0),
    ]
    assert memory[0]["allocated_mib"] == 1.5 and memory[0]["reserved_mib"] == 3.0


def test_a_log_cut_before_its_first_iteration_is_still_megatrons(tmp_path: Path) -> None:
    # Invented, in the shape of Megatron-LM's setup output (2025-2026 `megatron/training/training.py`):
    # a job that died in its first step, or the tail of one, has no iteration line yet.
    text = (
        "> finished creating GPT datasets ...\n"
        "[after dataloaders are built] datetime: 2026-03-28 14:13:05.581210 \n"
        "done with setup ...\n"
        "training ...\n"
        "INFO:megatron.core.timers:(min, max) time across ranks (ms):\n"
        "    model-and-optimizer-setup ......................: (1020.90, 1022.97)\n"
        "    train/valid/test-data-iterators-setup ..........: (190.27, 292.00)\n"
        "[before the start of training step] datetime: 2026-03-28 14:13:05.589428 \n"
        "Theoretical memory footprints: weight and optimizer=35695.42 MB, activation=86554.12 MB, "
        "total=122249.54 MB\n"
        "[Rank 1] (after 1 iterations) memory (MB) | allocated: 38921.15 | max allocated: 47104.31 | "
        "reserved: 48934.00 | max reserved: 48934.00\n"
        "[Rank 0] (after 1 iterations) memory (MB) | allocated: 38921.15 | max allocated: 47104.31 | "
        "reserved: 48934.00 | max reserved: 48934.00\n"
    )
    head = head_text(text.encode())
    assert parsers.detect(head, "job.out").FORMAT == "megatron"
    assert nemo.detect(head) == 0 and deepspeed.detect(head) == 0
    path = tmp_path / "job.out"
    path.write_text(text)
    db = tmp_path / "t.duckdb"
    (result,) = api.ingest(db, [str(path)])
    assert result.format == "megatron"
    memory = api.sql(db, "SELECT rank, iteration, max_reserved_mib FROM memory ORDER BY rank")
    assert memory.values.tolist() == [[0, 1, 48934.0], [1, 1, 48934.0]]
    timers = api.sql(db, "SELECT name, time_ms FROM timers ORDER BY line_no")
    assert timers["name"].tolist() == ["model-and-optimizer-setup", "train/valid/test-data-iterators-setup"]
    # a file that only mentions one of these marks is not taken for a log
    with pytest.raises(TracelogError, match="no parser recognises"):
        parsers.detect(head_text(b"notes: the timer block says time across ranks (ms):\n"), "x.md")


# Invented, in the shape of argonne-lcf/Megatron-DeepSpeed's `key=value` iteration line (megatron/
# training_log.py: ` iteration={:8d}/{:8d} |`, ` elapsed_time_per_iteration_ms={:.1f} |`, ...) behind its
# logger's prefix, with DeepSpeed's step and timer lines between them; the second line is of a release
# that prints both TFLOP counts (`[LM]TFLOPs`, `[DS]TFLOPs`).
KEY_VALUE_LOG = """\
[2025-11-10 09:43:36,149] [INFO] [logging.py:107:log_dist] [Rank 0] time (ms) | fwd: 715.40 | bwd: 2402.86 | step: 160.79
[2025-11-10 09:43:36,161992][I][megatron/training_log:402:training_log]  iteration=  136004/  136100 | \
consumed_samples=   835608576 | consumed_tokens=6845305454592 | elapsed_time_per_iteration_ms=3415.3 | \
learning_rate=2.0127e-05 | global_batch_size= 6144 | lm loss=12.316531 | loss_scale=1.0 | grad_norm=1020.352 | \
actual_seqlen= 8192 | number_of_skipped_iterations=  0 | number_of_nan_iterations=  0 | \
samples_per_second=1798.971 | tokens_per_gpu_per_second_tgs=4797.255 | TFLOPs=53.66 |
(min, max) time across ranks (ms):
    forward-backward ...............................: (3198.27, 3199.53)
[2025-11-10 09:43:39,573] [INFO] [logging.py:107:log_dist] [Rank 0] step=136005, skipped=0, lr=[2.0125e-05], mom=[(0.9, 0.95)]
[2025-11-10 09:43:39,582716][I][megatron/training_log:402:training_log]  iteration=  136005/  136100 | \
consumed_samples=   835614720 | consumed_tokens=6845355786240 | elapsed_time_per_iteration_ms=3420.2 | \
learning_rate=2.01257e-05 | global_batch_size= 6144 | lm loss=11.967899 | loss_scale=1.0 | grad_norm=735.534 | \
actual_seqlen= 8192 | number_of_skipped_iterations=  0 | number_of_nan_iterations=  1 | \
samples_per_second=1796.410 | tokens_per_gpu_per_second_tgs=4790.426 | [LM]TFLOPs=53.59 | [DS]TFLOPs=49.12 |
"""


@pytest.mark.parametrize("fast", [True, False], ids=["layout", "regex"])
def test_key_value_iteration_lines_read_as_the_classic_ones(fast: bool) -> None:
    out: dict[str, list] = {}
    for batch in megatron.parse(source_of(KEY_VALUE_LOG), fast=fast):
        rows = batch.rows.to_dicts() if isinstance(batch.rows, pl.DataFrame) else list(batch.rows)
        out.setdefault(batch.table, []).extend(rows)
    first, second = out["iterations"]
    assert (first["iteration"], first["train_iters"], first["line_no"]) == (136004, 136100, 2)
    assert first["elapsed_s"] == 3.4153  # to the digit printed, not 3.4153000000000002
    assert (first["lm_loss"], first["grad_norm"], first["global_batch_size"]) == (12.316531, 1020.352, 6144)
    assert (first["consumed_tokens"], first["samples_per_s"], first["tflops_reported"]) == (
        6845305454592,
        1798.971,
        53.66,
    )
    assert str(first["ts"]) == "2025-11-10 09:43:36"
    # `[LM]TFLOPs` is Megatron's count; the flops profiler's `[DS]TFLOPs` is not taken for it
    assert (second["tflops_reported"], second["nan"], second["learning_rate"]) == (53.59, 1, 2.01257e-05)
    metrics = {(m["iteration"], m["key"]): m["value"] for m in out["iteration_metrics"]}
    assert metrics == {
        (136004, "actual_seqlen"): 8192.0,
        (136004, "tokens_per_gpu_per_second_tgs"): 4797.255,
        (136005, "actual_seqlen"): 8192.0,
        (136005, "tokens_per_gpu_per_second_tgs"): 4790.426,
        (136005, SKIPPED_RUNNING): 0.0,  # DeepSpeed's `step=136005, skipped=0`
    }
    timers = {t["name"]: t for t in out["timers"]}
    assert timers["forward-backward"]["iteration"] == 136004


def test_validation_and_test_losses_are_metrics_at_their_iteration() -> None:
    # Invented, in the shapes Megatron's `evaluate_and_print_results` printed over the years: the
    # classic line, the 2024 one naming its set, BigScience's `valid loss` behind a launcher prefix, and
    # argonne-lcf's `key=value` spelling with its two figures glued together.
    iteration = " iteration {i:8d}/    1000 | elapsed time per iteration (ms): 812.5 | lm loss: 7.9E+00 |\n"
    text = (
        iteration.format(i=100)
        + " validation loss at iteration 100 | lm loss value: 8.095942E+00 | lm loss PPL: 3.281128E+03 | \n"
        + iteration.format(i=200)
        + " validation loss at iteration 200 on validation set | lm loss value: 7.645013E+00 | "
        "lm loss PPL: 2.090196E+03 |\n"
        " validation loss at iteration 200 on test set | lm loss value: 7.625707E+00 | "
        "lm loss PPL: 2.049226E+03 |\n"
        "[default7]:valid loss at iteration 300 | lm loss value: 2.327091E+00 | lm loss PPL: 1.024808E+01 |\n"
        "[2025-11-10 12:29:58,134910][I][megatron/training:1693:evaluate_and_print_results]  validation loss "
        "at iteration 400 on 122880-sample draw from validation set | lm loss value=2.697780lm loss PPL=14.846734\n"
        " validation loss at the end of training for val data | lm loss value: 2.6E+00 |\n"
    )
    out = collect(text)
    losses = [(m["iteration"], m["key"], m["value"], m["line_no"]) for m in out["iteration_metrics"]]
    assert sorted(losses, key=lambda m: m[3]) == [
        (100, "validation lm loss", 8.095942, 2),
        (100, "validation lm loss PPL", 3281.128, 2),
        (200, "validation lm loss", 7.645013, 4),
        (200, "validation lm loss PPL", 2090.196, 4),
        (200, "test lm loss", 7.625707, 5),
        (200, "test lm loss PPL", 2049.226, 5),
        (300, "validation lm loss", 2.327091, 6),
        (300, "validation lm loss PPL", 10.24808, 6),
        (400, "validation lm loss", 2.69778, 7),
        (400, "validation lm loss PPL", 14.846734, 7),
        # the end-of-training line names no iteration: it takes the last iteration line's, and says what it is
        (200, "validation (end of training) lm loss", 2.6, 8),
    ]
    assert "unparsed" not in out
    assert [i["iteration"] for i in out["iterations"]] == [100, 200]


@pytest.mark.parametrize(
    ("pipe_arg", "layout"),
    [("", (4, 1, 16)), ("  pipe_parallel_size .............. 16\n", (4, 16, 1))],
    ids=["zero3-no-pipeline", "deepspeed-3d"],
)
def test_megatron_v1_world_line_and_deepspeeds_pipeline_argument(pipe_arg: str, layout: tuple) -> None:
    # Invented, in the shape of Megatron-LM v1.1.5 as DeepSpeedExamples ran it (2020-2021): the world line
    # names only the model-parallel (tensor) size; its ZeRO-3 variant has no pipeline, its 3D variant
    # takes DeepSpeed's `--pipe-parallel-size`.
    text = (
        "using world size: 64 and model-parallel size: 4 \n"
        "------------------------ arguments ------------------------\n"
        "  batch_size ...................... 48\n"
        "  model_parallel_size ............. 4\n"
        f"{pipe_arg}"
        "---------------- end of arguments ----------------\n"
        " iteration       10/   10000 | elapsed time per iteration (ms): 12374.2 | learning rate: 1.5E-04 |\n"
    )
    (run,) = collect(text)["runs"]
    assert (run["tp"], run["pp"], run["dp"], run["gpus"]) == (*layout, 64)


def test_the_tail_of_a_job_that_evaluated_then_died_is_megatrons(tmp_path: Path) -> None:
    # Invented, in the shape of the last lines of a Megatron-LM job (2024): its last evaluation, PyTorch's
    # warnings behind torchrun's rank prefixes, and the elastic agent reporting the abort.
    rule = "-" * 100 + "\n"
    text = (
        "WARNING:megatron.core.rerun_state_machine:Setting RerunStateMachine mode RerunMode.DISABLED\n"
        + rule
        + " validation loss at iteration 150 on test set | lm loss value: 1.177732E+01 | "
        "lm loss PPL: 1.302641E+05 | \n"
        + rule
        + "[rank0]:[W1019 08:16:22.397556647 ProcessGroupNCCL.cpp:1477] Warning: WARNING: destroy_process_group() "
        "was not called before program exit, which can leak resources.\n"
        "pure virtual method called\n"
        "terminate called without an active exception\n"
        "E1019 08:21:39.599000 3036 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: -6) "
        "local_rank: 0 (pid: 3042) of binary: /usr/bin/python\n"
    )
    assert parsers.detect(head_text(text.encode()), "job.err").FORMAT == "megatron"
    path = tmp_path / "job.err"
    path.write_text(text)
    db = tmp_path / "t.duckdb"
    (result,) = api.ingest(db, [str(path)])
    assert result.format == "megatron"
    kinds = dict(api.sql(db, "SELECT line_no, kind FROM events").values.tolist())
    assert (kinds[6], kinds[7], kinds[8]) == ("crash", "error", "crash")
    scored = api.sql(db, "SELECT iteration, key, value FROM iteration_metrics ORDER BY key").values.tolist()
    assert scored == [[150, "test lm loss", 11.77732], [150, "test lm loss PPL", 130264.1]]


def test_megatrons_theoretical_parameter_counts_are_run_parameters() -> None:
    # Invented, in the words of megatron/training/theoretical_memory_usage.py (2024 on), printed after the
    # first iteration of an MoE run.
    text = (
        " iteration        1/     100 | elapsed time per iteration (ms): 79490.1 | lm loss: 1.2E+01 |\n"
        "Number of parameters in transformer block in billions:  64.43\n"
        "Number of active parameters in transformer block in billions:  12.08\n"
        "Number of parameters in embedding layers in billions: 0.26\n"
        "Total number of parameters in billions: 64.69\n"
        "Total number of active parameters in billions: 12.34\n"
        "Number of parameters in most loaded shard in billions: 2.0794\n"
        "Theoretical memory footprints: weight and optimizer=35695.42 MB\n"
    )
    out = collect(text)
    (run,) = out["runs"]
    params = {p["name"]: (p["value"], p["line_no"]) for p in run["run_params"] if "theoretical" in p["name"]}
    assert params == {
        "theoretical_params_billions_transformer_block": ("64.43", 2),
        "theoretical_params_billions_active_transformer_block": ("12.08", 3),
        "theoretical_params_billions_embedding_layers": ("0.26", 4),
        "theoretical_params_billions_total": ("64.69", 5),
        "theoretical_params_billions_total_active": ("12.34", 6),
        "theoretical_params_billions_most_loaded_shard": ("2.0794", 7),
        "theoretical_weight_and_optimizer_mib": ("35695.42", 8),
    }
    assert "unparsed" not in out
    assert run["params"] == 64_690_000_000  # the total, where no other count was printed


def test_primus_logger_prefix_and_pythons_warning_echo() -> None:
    # Lines of a published AMD Primus log (Mixtral 8x7B on MI325X, hisohara/ai-scripts), colour codes
    # removed as the line source does: the parameter count behind Primus's logger prefix is read, and the
    # source line Python echoes under a warning is not a second warning.
    text = (
        "/opt/venv/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py:4814: UserWarning: No "
        "device id is provided via `init_process_group` or `barrier `. Using the current device set by the user. \n"
        "  warnings.warn(  # warn only once\n"
        "[20251115 12:57:43][rank-0/64][DEBUG] [theoretical_memory_usage.py:149] : Total number of parameters "
        "in billions: 46.70\n"
    )
    out = collect(text)
    (run,) = out["runs"]
    assert run["params"] == 46_700_000_000
    assert [e["line_no"] for e in out["events"]] == [1]
    assert [u["line_no"] for u in out["unparsed"]] == [2]


def test_a_log_without_its_arguments_takes_the_global_batch_its_lines_print() -> None:
    # Invented: a log cut after its arguments block, with a batch-size ramp (the lines say 64, then 128);
    # the run's global batch is the last its lines printed, its length the `/ 2000` they count to.
    line = (
        " iteration {i:8d}/    2000 | elapsed time per iteration (ms): 1118.0 | global batch size: {g:5d} |\n"
    )
    text = "".join(line.format(i=i, g=64 if i < 3 else 128) for i in range(1, 6))
    (run,) = collect(text)["runs"]
    assert (run["gbs"], run["train_iters"]) == (128, 2000)
    args = (
        "------------------------ arguments ------------------------\n"
        "  global_batch_size ............................... 256\n"
        "  train_iters ..................................... 5000\n"
        "-------------------- end of arguments ---------------------\n"
    )
    (given,) = collect(args + text)["runs"]
    assert (given["gbs"], given["train_iters"]) == (256, 5000)  # the arguments say what was asked


@pytest.mark.parametrize("fast", [True, False], ids=["layout", "regex"])
def test_gpt_neox_leads_its_iteration_line_with_samples_per_second(fast: bool) -> None:
    # Invented, in the shape of GPT-NeoX's training log (megatron/training.py `training_log`): samples/sec
    # first, FLOPs in human units (a rate in TFLOPS is the line's TFLOPs; another unit stays a metric).
    line = (
        " samples/sec: {s} | iteration {i:8d}/   10000 | elapsed time per iteration (ms): 4103.1 | "
        "learning rate: 2.111E-06 | approx flops per GPU: 112.9TFLOPS | lm_loss: 1.118665E+01 | "
        "number of skipped iterations:   0 | number of nan iterations:   0 |\n"
    )
    text = line.format(s="7.799", i=34) + line.format(s="7.812", i=35)
    out: dict[str, list] = {}
    for batch in megatron.parse(source_of(text), fast=fast):
        rows = batch.rows.to_dicts() if isinstance(batch.rows, pl.DataFrame) else list(batch.rows)
        out.setdefault(batch.table, []).extend(rows)
    rows = [
        (r["iteration"], r["samples_per_s"], r["lm_loss"], r["elapsed_s"], r["tflops_reported"])
        for r in out["iterations"]
    ]
    assert rows == [(34, 7.799, 11.18665, 4.1031, 112.9), (35, 7.812, 11.18665, 4.1031, 112.9)]
    assert "iteration_metrics" not in out


def test_deepspeeds_memory_figures_in_a_megatron_deepspeed_log_are_memory_rows() -> None:
    # Invented, in the shape of a Megatron-DeepSpeed log (2024): DeepSpeed's step and throughput lines
    # before each of Megatron's iteration lines; the throughput line's memory is the run's at that step.
    ds = "[2024-03-07 15:27:02,646] [INFO] [timer.py:260:stop] epoch=0/micro_step={i}/global_step={i}, "
    ds += (
        "RunningAvgSamplesPerSec=58.73, CurrSamplesPerSec=61.35, MemAllocated=6.01GB, MaxMemAllocated={m}GB\n"
    )
    it = " iteration {i:8d}/ 1000 | elapsed time per iteration (ms): 14287.5 | lm loss: 5.905366E+00 |\n"
    text = "".join(ds.format(i=i, m=m) + it.format(i=i) for i, m in ((199, 19.52), (200, 19.61)))
    out = collect(text)
    memory = [(m["iteration"], m["allocated_mib"], m["max_allocated_mib"]) for m in out["memory"]]
    assert memory == [(199, 6.01 * 1024, 19.52 * 1024), (200, 6.01 * 1024, 19.61 * 1024)]
    assert [i["iteration"] for i in out["iterations"]] == [199, 200]
    assert "unparsed" not in out


def test_a_resumed_runs_throughput_timer_counts_from_the_restart_and_see_memory_usage_is_memory() -> None:
    """DeepSpeed's ThroughputTimer counts `global_step` from the process's start, so a run resumed at
    iteration 136004 prints `global_step=5` before iteration 136005 (argonne-lcf Megatron-DeepSpeed's
    layout; invented figures). `see_memory_usage` before training is a memory row without a step."""
    text = (
        "[2025-11-10 09:56:45,484] [INFO] [utils.py:781:see_memory_usage] After Building Model\n"
        "[2025-11-10 09:56:45,485] [INFO] [utils.py:782:see_memory_usage] MA 3.71 GB         Max_MA 3.71 GB"
        "         CA 3.72 GB         Max_CA 4 GB\n"
        " iteration=  136004/  136100 | consumed_samples=   835608576 | elapsed_time_per_iteration_ms=3415.3 |"
        " learning_rate=2.0127e-05 | global_batch_size= 6144 | lm loss=2.6978 |\n"
        "[2025-11-10 09:43:39,573] [INFO] [timer.py:264:stop] epoch=0/micro_step=5/global_step=5, "
        "RunningAvgSamplesPerSec=2443.95, CurrSamplesPerSec=2553.44, MemAllocated=3.71GB, MaxMemAllocated=39.0GB\n"
        " iteration=  136005/  136100 | consumed_samples=   835614720 | elapsed_time_per_iteration_ms=3420.2 |"
        " learning_rate=2.01257e-05 | global_batch_size= 6144 | lm loss=2.6951 |\n"
    )
    out = collect(text)
    memory = [(m["iteration"], m["allocated_mib"], m["max_reserved_mib"]) for m in out["memory"]]
    assert memory == [(None, 3.71 * 1024, 4 * 1024), (136005, 3.71 * 1024, None)]
    assert [i["iteration"] for i in out["iterations"]] == [136004, 136005]


def test_the_straggler_detectors_report_is_kept_at_its_iteration() -> None:
    # Invented, in the shape of Megatron-core's StragglerDetector report (megatron/core/utils.py) behind
    # srun's label, after an iteration line.
    text = (
        " iteration      100/    1000 | elapsed time per iteration (ms): 3460.1 | lm loss: 5.1E+00 |\n"
        " 0: INFO:megatron.core.utils:[2024-03-14 23:07:56] | MnRtt/Rnk: 3453.08ms/8 | MxRtt/Rnk: 3468.20ms/0 | "
        "MnPwr/Rnk: 601796W/8 | MxTmp/Rnk: 65C/21 | MnUtl/Rnk: 97%/8 | MnEtpt/Rnk: 296.02TF/0 | "
        "MxEtpt/Rnk: 297.32TF/8\n"
    )
    out = collect(text)
    kept = {m["key"]: (m["iteration"], m["value"], m["text"]) for m in out["iteration_metrics"]}
    assert kept == {
        "straggler MnRtt/Rnk": (100, 3453.08, "3453.08ms/8"),
        "straggler MxRtt/Rnk": (100, 3468.2, "3468.20ms/0"),
        "straggler MnPwr/Rnk": (100, 601796.0, "601796W/8"),
        "straggler MxTmp/Rnk": (100, 65.0, "65C/21"),
        "straggler MnUtl/Rnk": (100, 97.0, "97%/8"),
        "straggler MnEtpt/Rnk": (100, 296.02, "296.02TF/0"),
        "straggler MxEtpt/Rnk": (100, 297.32, "297.32TF/8"),
    }
    assert "unparsed" not in out


def test_memory_reports_of_two_ranks_on_one_line_are_two_rows() -> None:
    # Invented, in the shape of what ranks printing at once leave in one stream (seen in published 2025
    # Megatron-LM logs): one rank's report lost its newline to the next, and a launcher prefix.
    text = (
        " [2025-08-01 10:00:05] iteration        1/     100 | consumed samples:           32 | "
        "elapsed time per iteration (ms): 4051.2 | learning rate: 1.000000E-06 | global batch size:    32 |\n"
        "[Rank 4] (after 1 iterations) memory (MB) | allocated: 9334.37 | max allocated: 10606.50 | "
        "reserved: 10998.0 | max reserved: 10998.0\n"
        "[Rank 2] (after 1 iterations) memory (MB) | allocated: 9334.37 | max allocated: 12680.63 | "
        "reserved: 13236.0 | max reserved: 13236.0[Rank 6] (after 1 iterations) memory (MB) | "
        "allocated: 10850.67 | max allocated: 10850.70 | reserved: 11000.0 | max reserved: 11000.0\n"
        "[default0]:[Rank 0] (after 1 iterations) memory (MB) | allocated: 10770.37 | max allocated: "
        "15754.88 | reserved: 16334.0 | max reserved: 16334.0\n"
    )
    out = collect(text)
    memory = sorted((m["rank"], m["line_no"], m["iteration"], m["max_reserved_mib"]) for m in out["memory"])
    assert memory == [(0, 4, 1, 16334.0), (2, 3, 1, 13236.0), (4, 2, 1, 10998.0), (6, 3, 1, 11000.0)]
    glued = next(m for m in out["memory"] if m["rank"] == 6)
    assert (glued["allocated_mib"], glued["reserved_mib"]) == (10850.67, 11000.0)
    assert not out.get("unparsed")


def test_timers_both_styles_attach_to_the_iteration_before_them() -> None:
    text = (
        " iteration 10/ 20 | elapsed time per iteration (ms): 5.0 |\n"
        "time (ms) | forward-compute: 32054.16 | backward-compute: 87380.53 | optimizer: 342.01\n"
        " iteration 20/ 20 | elapsed time per iteration (ms): 5.0 |\n"
        "(min, max) time across ranks (ms):\n"
        "    forward-backward ...............................: (1187.12, 1187.65)\n"
        "    optimizer ......................................: (40.10, 41.50)\n"
    )
    timers = {(t["name"], t["iteration"]): t for t in collect(text)["timers"]}
    assert timers[("forward-compute", 10)]["time_ms"] == pytest.approx(32054.16)
    assert timers[("optimizer", 10)]["time_ms"] == pytest.approx(342.01)
    assert timers[("forward-backward", 20)]["time_ms"] == pytest.approx(1187.65)
    assert timers[("forward-backward", 20)]["time_min_ms"] == pytest.approx(1187.12)
    assert len(timers) == 5


def test_restart_with_new_arguments_block_is_a_new_run() -> None:
    iteration = " iteration {i}/ 100 | elapsed time per iteration (ms): 5.0 |\n"
    world = "using world size: 256, data-parallel size: 8, tensor-model-parallel size: 8, pipeline-model-parallel size: 4\n"
    text = world + ARGS + iteration.format(i=1) + iteration.format(i=2) + world + ARGS + iteration.format(i=3)
    out = collect(text)
    assert sorted(r["run_key"] for r in out["runs"]) == [0, 1]
    assert [(r["run_key"], r["iteration"]) for r in out["iterations"]] == [(0, 1), (0, 2), (1, 3)]
    second = next(r for r in out["runs"] if r["run_key"] == 1)
    assert second["line_start"] == len((world + ARGS + iteration * 2).splitlines()) + 1


@pytest.mark.parametrize("block_bytes", [64, 200, 1 << 20])
def test_block_size_does_not_change_the_result(block_bytes: int) -> None:
    text = (SAMPLES / "megatron_lm_llama3_8b_h100.log").read_bytes()
    whole = collect(text)
    split = collect(text, block_bytes)
    for table in ("iterations", "timers", "memory", "iteration_metrics", "unparsed", "events"):
        key = "line_no"
        assert sorted(r[key] for r in split[table]) == sorted(r[key] for r in whole[table]), table
    assert [r["iteration"] for r in split["timers"]] == [r["iteration"] for r in whole["timers"]]
    assert {r["run_key"]: r["gbs"] for r in split["runs"]} == {r["run_key"]: r["gbs"] for r in whole["runs"]}


def test_ugly_log_crlf_ansi_ranks_bad_bytes_and_truncated_last_line() -> None:
    raw = (SAMPLES / "megatron_deepspeed_bloom_ugly.log").read_bytes()
    assert b"\r\n" in raw and b"\x1b[" in raw and b"\xff" in raw and not raw.endswith(b"\n")
    out = collect(raw)
    iterations = out["iterations"]
    assert len(iterations) == len(
        re.findall(rb"iteration\s+\d+/\s*\d+ \|.*elapsed time per iteration \(s\)", raw)
    )
    assert [r["iteration"] for r in iterations] == list(range(1, 41))
    assert sum(r["skipped"] for r in iterations) == 3
    assert [r["iteration"] for r in iterations if r["nan"]] == [27]
    (run,) = out["runs"]
    assert (run["dp"], run["tp"], run["pp"], run["mbs"], run["gbs"]) == (8, 4, 12, 2, 2048)
    assert run["framework"] == "megatron-deepspeed" and run["params"] == 176_247_271_424
    kinds = {e["kind"] for e in out["events"]}
    assert {"traceback", "timeout", "warning"} <= kinds
    # the RuntimeError that ends the traceback is the NCCL watchdog's timeout
    (aborted,) = [e for e in out["events"] if "communicator was aborted" in e["text"]]
    assert (aborted["line_no"], aborted["kind"]) == (120, "timeout")
    unparsed = {u["line_no"]: u["text"] for u in out["unparsed"]}
    total_lines = raw.count(b"\n") + 1
    assert max(unparsed) == total_lines  # the cut-off last line is kept, not lost
    assert "elapsed time per iter" in unparsed[total_lines]
    assert not any("\x1b" in text or text.endswith("\r") for text in unparsed.values())


def test_every_line_is_accounted_for() -> None:
    raw = (SAMPLES / "megatron_lm_llama3_8b_h100.log").read_text()
    out = collect(raw)
    understood = {r["line_no"] for t in ("iterations", "timers", "memory", "events") for r in out.get(t, [])}
    unparsed = {r["line_no"] for r in out["unparsed"]}
    assert not understood & unparsed
    config_lines = {p["line_no"] for r in out["runs"] for p in r["run_params"] if p["line_no"]}
    assert config_lines.isdisjoint(unparsed)
    assert len(raw.splitlines()) >= len(understood | unparsed | config_lines)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=80), max_size=30))
def test_hostile_lines_never_crash_and_are_kept(lines: list[str]) -> None:
    text = "\n".join(line.replace("\n", " ").replace("\r", " ") for line in lines)
    out = collect(text)
    kept = {
        r["line_no"] for t in ("unparsed", "events", "iterations", "timers", "memory") for r in out.get(t, [])
    }
    assert all(1 <= n <= max(1, len(text.split("\n"))) for n in kept)


CORPUS = corpus_files("megatron")


@pytest.mark.skipif(
    not CORPUS, reason="the shared corpus of published Megatron logs is not beside this checkout"
)
@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_published_logs_yield_every_iteration_line(path) -> None:
    raw = path.read_bytes()
    expected = len(re.findall(rb"(?m)^.*iteration\s+\d+\s*/\s*\d+\s*\|.*elapsed time per iteration", raw))
    out = collect(raw)
    assert len(out.get("iterations", [])) == expected
    assert all(r["elapsed_s"] > 0 for r in out.get("iterations", []))


def test_zero_reduce_bucket_is_kept_for_the_memory_model() -> None:
    # Invented, in the shape of DeepSpeed's ZeRO-1/2 optimizer lines inside a Megatron-DeepSpeed log.
    text = (
        "using world size: 16, data-parallel-size: 4, tensor-model-parallel size: 4, "
        "pipeline-model-parallel size: 1 \n"
        "[2024-05-13 09:14:33,301] [INFO] [logging.py:96:log_dist] [Rank 0] Creating fp16 ZeRO stage 1 optimizer\n"
        "[2024-05-13 09:14:33,318] [INFO] [stage_1_and_2.py:148:__init__] Reduce bucket size 50000000\n"
        "[2024-05-13 09:14:33,318] [INFO] [stage_1_and_2.py:149:__init__] Allgather bucket size 500000000\n"
        " iteration        1/    1000 | elapsed time per iteration (ms): 1597.9 |\n"
    )
    out = collect(text)
    (run,) = out["runs"]
    params = {p["name"]: p["value"] for p in run["run_params"]}
    assert params["reduce_bucket_size"] == "50000000"
    assert params["optimizer_wrapper"] == "fp16 ZeRO stage 1 optimizer"
    assert [r["text"] for r in out["unparsed"]] == [
        "[2024-05-13 09:14:33,318] [INFO] [stage_1_and_2.py:149:__init__] Allgather bucket size 500000000"
    ]


def test_neox_flops_with_their_unit_and_modellinks_spelling_of_the_batch_size() -> None:
    """GPT-NeoX glues the unit to its FLOP rate (`approx flops per GPU: 112.9TFLOPS`, line as quoted in
    deepspeedai/DeepSpeed#3742); ModelLink's sample output spells `gloabl batch size` (its LLaMA-33B/65B
    README). The lines below are written after those two, with invented values."""
    neox = (
        " samples/sec: 7.801 | iteration       35/   10000 | elapsed time per iteration (ms): 4101.7 | "
        "learning rate: 2.173E-06 | approx flops per GPU: {flops} | lm_loss: 1.117210E+01 | number of "
        "skipped iterations:   0 | number of nan iterations:   0 |\n"
    )
    modellink = (
        " iteration  4/50000 | consumed samples: 1024 | consumed tokens:  2097152 | elapsed time per "
        "iteration (ms):  33790.5 | learning rate:    1.875E-07 | gloabl batch size:  256 | lm loss:  "
        "1.198410E+01 | loss scale:  1.0 | grad norm:    8.902 | number of skipped iterations: 0 | number of "
        "nan iterations:   0 | samples per second: 7.576 | TFLOPs: 107.18 |\n"
    )
    out = collect(neox.format(flops="112.9TFLOPS") + neox.format(flops="901.3GFLOPS").replace("35/", "36/"))
    first, second = out["iterations"]
    assert (first["tflops_reported"], first["samples_per_s"], first["elapsed_s"]) == (112.9, 7.801, 4.1017)
    assert second["tflops_reported"] is None  # another unit: kept as the metric it printed
    kept = {(m["iteration"], m["key"]): m["value"] for m in out["iteration_metrics"]}
    assert kept == {(36, "approx flops per GPU"): 901.3}
    (row,) = collect(modellink)["iterations"]
    assert (row["global_batch_size"], row["tflops_reported"]) == (256, 107.18)
    assert "iteration_metrics" not in collect(modellink) or not any(
        "batch" in m["key"] for m in collect(modellink)["iteration_metrics"]
    )


# A Slurm job's `--error` file when NCCL hung (invented, in the shape of PyTorch 2.3's ProcessGroupNCCL
# watchdog and torchrun's messages as quoted in NVIDIA/Megatron-LM#735): nothing of Megatron's own in it.
DIED_STDERR = """\
/usr/local/lib/python3.10/dist-packages/torch/utils/checkpoint.py:91: UserWarning: None of the inputs have requires_grad=True. Gradients will be None
  warnings.warn(
[rank5]:[E ProcessGroupNCCL.cpp:563] [Rank 5] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=81207, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600045 milliseconds before timing out.
[rank5]:[E ProcessGroupNCCL.cpp:1537] [PG 0 Rank 5] Timeout at NCCL work: 81207, last enqueued NCCL work: 81207, last completed NCCL work: 81206.
[rank5]:[E ProcessGroupNCCL.cpp:577] [Rank 5] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.
W0607 03:12:44.123000 140213 torch/distributed/elastic/multiprocessing/api.py:851] Sending process 8812 closing signal SIGTERM
E0607 03:12:45.456000 140213 torch/distributed/elastic/multiprocessing/api.py:826] failed (exitcode: -6) local_rank: 5 (pid: 8817) of binary: /usr/bin/python
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
"""


def test_a_dying_jobs_stderr_is_read_for_what_killed_it(tmp_path: Path) -> None:
    assert megatron.detect(DIED_STDERR) == 1  # the lowest claim: any parser that knows the file wins
    assert megatron.detect('Traceback (most recent call last):\n  File "x.py", line 1\nValueError: no\n') == 0
    path = tmp_path / "job-81207.err"
    path.write_text(DIED_STDERR)
    (result,) = api.ingest(tmp_path / "t.duckdb", [str(path)])
    assert (result.status, result.format, result.runs) == ("ingested", "megatron", 1)
    flags = api.flags(tmp_path / "t.duckdb")
    (flag,) = flags[flags["rule"] == "training_health"].to_dict("records")
    assert (
        flag["severity"] == "critical" and "Watchdog caught collective operation timeout" in flag["message"]
    )


# GPT-NeoX's traceback as pasted in EleutherAI/gpt-neox#482 (2021-12, the markdown's `\~` kept): its
# OverflowMonitor stopped the job after 50 fp16 overflows in a row. Nothing else of the log was pasted.
NEOX_OVERFLOW = """\
Traceback (most recent call last):
  File "train.py", line 27, in <module>
    pretrain(neox_args=neox_args)
  File "\\~/gpt-neox/megatron/training.py", line 103, in pretrain
    iteration = train(
  File "\\~/gpt-neox/megatron/training.py", line 562, in train
    overflow_monitor.check(skipped_iter)  # check for repeated overflow
  File "\\~/gpt-neox/megatron/utils.py", line 353, in check
    raise Exception(
Exception: Skipped 50 iterations in a row due to Overflow - Exiting training.
"""


def test_a_pasted_traceback_through_megatrons_code_is_a_dying_job(tmp_path: Path) -> None:
    """A traceback whose frames are in Megatron's package (GPT-NeoX's here), or NeoX's overflow message
    alone, was refused as no format's: it is read as the crash it is, with its critical flag."""
    assert megatron.detect(NEOX_OVERFLOW) == 1
    assert megatron.detect(NEOX_OVERFLOW.splitlines()[-1]) == 1
    elsewhere = NEOX_OVERFLOW.replace("gpt-neox/megatron/", "gpt-neox/trainer/")
    assert megatron.detect(elsewhere.replace("Skipped 50 iterations in a row", "Stopped")) == 0
    path = tmp_path / "neox.log"
    path.write_text(NEOX_OVERFLOW)
    db = tmp_path / "t.duckdb"
    (result,) = api.ingest(db, [str(path)])
    assert (result.status, result.format, result.runs) == ("ingested", "megatron", 1)
    events = api.sql(db, "SELECT line_no, kind FROM events ORDER BY line_no").values.tolist()
    assert events == [[1, "traceback"], [9, "traceback"], [10, "error"]]
    (flag,) = api.flags(db).to_dict("records")
    assert flag["severity"] == "critical" and flag["row_ref"] == "line 10"
    assert (
        "the last: Exception: Skipped 50 iterations in a row due to Overflow - Exiting training. The"
        in (flag["message"])
    )


@pytest.mark.parametrize(
    "last",
    [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.35 GiB total capacity)",
        "[rank0]: RuntimeError: CUDA error: out of memory",
    ],
    ids=["since-1.13", "before-1.13", "in-a-kernel-launch"],
)
def test_every_pytorch_wording_of_out_of_memory_is_a_dying_job(tmp_path: Path, last: str) -> None:
    """The out-of-memory a stderr file ends in, as each PyTorch era words it (invented tracebacks)."""
    path = tmp_path / "job.err"
    path.write_text(
        'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n' + last + "\n"
    )
    assert megatron.detect(path.read_text()) == 1
    (result,) = api.ingest(tmp_path / "t.duckdb", [str(path)])
    assert result.format == "megatron"
    (flag,) = api.flags(tmp_path / "t.duckdb").to_dict("records")
    assert flag["severity"] == "critical" and "out of memory" in flag["message"]


def test_checkpoint_lines_of_both_eras_are_events_with_their_iteration(tmp_path: Path) -> None:
    """Megatron-LM prints `successfully saved checkpoint from iteration N to PATH` (before 2023, and
    Megatron-DeepSpeed: `at iteration N`), and on a restart `successfully loaded checkpoint from PATH [ t
    1/4, p 1/1 ] at iteration N` (megatron/training/checkpointing.py). Lines written after those, invented
    paths; then the NCCL watchdog kills the job: its flag says where it can go on from."""
    log = tmp_path / "restarted.log"
    log.write_text(
        "  successfully loaded checkpoint from /ckpt/gpt [ t 1/4, p 1/1 ] at iteration 1200\n"
        " iteration     1210/   50000 | elapsed time per iteration (ms): 5120.4 | lm loss: 2.412E+00 |\n"
        "saving checkpoint at iteration    1250 to /ckpt/gpt in torch_dist format\n"
        "  successfully saved checkpoint from iteration    1250 to /ckpt/gpt [ t 1/4, p 1/1 ]\n"
        " iteration     1260/   50000 | elapsed time per iteration (ms): 5118.9 | lm loss: 2.405E+00 |\n"
        "  successfully saved checkpoint at iteration    1300 to /ckpt/gpt\n"
        " iteration     1310/   50000 | elapsed time per iteration (ms): 5121.0 | lm loss: 2.398E+00 |\n"
        "[rank3]:[E ProcessGroupNCCL.cpp:563] [Rank 3] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=9012, OpType=ALLREDUCE) ran for 600031 milliseconds before timing out.\n"
    )
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    events = api.sql(db, "SELECT line_no, kind FROM events ORDER BY line_no")
    assert list(events.itertuples(index=False, name=None)) == [
        (1, "checkpoint_loaded"),
        (3, "checkpoint_saving"),
        (4, "checkpoint_saved"),
        (6, "checkpoint_saved"),
        (8, "timeout"),
    ]
    (message,) = api.sql(db, "SELECT message FROM flags WHERE rule = 'training_health'")["message"]
    assert message.endswith("The last checkpoint saved before it: iteration 1300 (line 6).")
    shown = api.show_run(db, 1)["checkpoints"]
    assert list(shown.itertuples(index=False, name=None)) == [
        ("checkpoint_saved", 2, 1300, 6),
        ("checkpoint_loaded", 1, 1200, 1),
    ]
    # a job that died before its first checkpoint says so
    log.write_text("\n".join(log.read_text().splitlines()[6:]) + "\n")
    api.ingest(tmp_path / "early.duckdb", [str(log)])
    (message,) = api.sql(
        tmp_path / "early.duckdb", "SELECT message FROM flags WHERE rule = 'training_health'"
    )["message"]
    assert message.endswith("No checkpoint saved before it in this log.")


def test_the_rerun_state_machines_nan_is_a_critical_flag(tmp_path: Path) -> None:
    """Megatron-Core's rerun state machine (`--rerun-mode validate_results`) reports a NaN in its own line
    and stops the job (the line's shape from Megatron-LM#5026; invented rank, node and message tail)."""
    path = tmp_path / "job.err"
    path.write_text(
        "ERROR:megatron.core.rerun_state_machine:Unexpected result nan on rank 3 at iteration #3 invocation #2 "
        "(message='found NaN in local grad norm for bucket #0 in backward pass')\n"
    )
    assert megatron.detect(path.read_text()) == 1
    db = tmp_path / "t.duckdb"
    (result,) = api.ingest(db, [str(path)])
    assert result.format == "megatron"
    (flag,) = api.sql(db, "SELECT severity, message FROM flags WHERE message LIKE '%NaN check%'").values
    assert flag[0] == "critical" and "first at iteration 3" in flag[1]


def test_a_tails_parameter_counts_give_the_model_parallel_grid(tmp_path: Path) -> None:
    """Without an arguments block, each (tensor, pipeline) rank's `number of parameters` line (invented
    counts) names the grid when every cell of it printed; a grid with a hole says nothing."""
    lines = [
        f" > number of parameters on (tensor, pipeline) model parallel rank ({tp}, {pp}): 3513341952"
        for tp in range(4)
        for pp in range(2)
    ]
    iteration = (
        " iteration       10/     100 | consumed samples:          640 | elapsed time per iteration (ms): 9000.1 |"
        " learning rate: 1.0E-04 | global batch size:    64 | lm loss: 9.1E+00 | loss scale: 1.0 |\n"
    )
    for name, shown, want in (("whole", lines, (4, 2)), ("holed", lines[:5], (None, None))):
        log = tmp_path / f"{name}.log"
        log.write_text("\n".join(shown) + "\n" + iteration)
        db = tmp_path / f"{name}.duckdb"
        api.ingest(db, [str(log)])
        (row,) = api.sql(
            db, "SELECT coalesce(tp, -1) AS tp, coalesce(pp, -1) AS pp FROM runs"
        ).values.tolist()
        assert tuple(row) == tuple(-1 if v is None else v for v in want)


# Lines of published logs (NVIDIA/NeMo's resiliency example, torchrun's ChildFailedError report,
# BigScience's tr1-13B ECC failure), each with the event kind it is.
@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (
            "[NeMo W 2025-03-07 22:39:46 nemo_logger:212] The checkpoint callback was told to monitor a "
            "validation value ... to ensure that checkpointing will not error out.",
            "warning",
        ),
        ("  error_file: /tmp/torchelastic_x7w2/none_5a8k/attempt_0/6/error.json", "warning"),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", "error"),
        ("[rank0]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970", "error"),
        ("terminate called after throwing an instance of 'c10::Error'", "crash"),
        (
            "RuntimeError: transform: failed to synchronize: cudaErrorECCUncorrectable: uncorrectable ECC "
            "error encountered",
            "crash",
        ),
        ("2024-06-01 10:00:00,000 - root - WARNING - error rate limiter engaged", "warning"),
        ("UserWarning: this will raise an error in a future release", "warning"),
        (
            "[rank0]:[W522 18:16:36.415246 CUDACachingAllocator.cpp:495] expandable_segments: memory mapping "
            "failed with OOM",
            "warning",
        ),
        (
            "[rank0]:[E328 00:21:12.921013299 ProcessGroupNCCL.cpp:2241] [PG ID 1 PG GUID 1 Rank 0]  failure "
            "detected by watchdog at work sequence id: 2",
            "error",
        ),
        # a traceback's own lines: the source lines it quotes, rich's box, the words between chained ones
        ("    raise Exception(", "traceback"),
        ('    raise AttributeError(f"{name!r} object has no attribute")', "traceback"),
        ("│   2034 │   │   │   │   except TypeError:                       │", "traceback"),
        ("> │ ❱ 2033 │   │   │   │   │   self.lr_scheduler.step(**(lr_kwargs or {}))  │", "traceback"),
        ("During handling of the above exception, another exception occurred:", "traceback"),
        ("> During handling of the above exception, another exception occurred:", "traceback"),
        ("The above exception was the direct cause of the following exception:", "traceback"),
        ("> TypeError: WarmupLR.step() got an unexpected keyword argument 'increment'", "error"),
    ],
)
def test_a_lines_event_kind_by_its_words_and_its_loggers_level(line: str, kind: str) -> None:
    assert kind_of(line) == kind
    assert pl.DataFrame({"line": [line]}).select(event_kind().alias("kind"))["kind"][0] == kind
    # as the parser calls it: the lines lower-cased once, the kinds worked out where a word may say one
    lowered = pl.DataFrame({"line": [line]}).with_columns(pl.col("line").str.to_lowercase().alias("_lowered"))
    assert lowered.select(event_kind(pl.col("_lowered")).alias("kind"))["kind"][0] == kind
    assert event_kinds(pl.Series([line, "UserWarning: nothing else", line]).str.to_lowercase()).to_list() == [
        kind,
        "warning",
        kind,
    ]


EVENT_PIECES = [
    *(word for _, word in EVENT_KINDS),
    "Error",
    "error_file",
    "ERROR.",
    "[E328 00:21:12",
    "[W522 18:16:36",
    "WARNING:",
    " - WARNING - ",
    "UserWarning:",
    "frame #0:",
    "    raise ",
    "> ",
    "│",
    "checkpoint",
    "NaN",
    " ",
    "x",
    "_",
    "/",
    ".",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.sampled_from(EVENT_PIECES), max_size=6).map("".join), min_size=1, max_size=20))
def test_event_kinds_of_a_column_are_each_lines_event_kind(lines: list[str]) -> None:
    """Working out the kinds only where a word of another kind than a warning is changes no kind."""
    lowered = pl.Series(lines).str.to_lowercase()
    whole = lowered.to_frame("_lowered").select(event_kind(pl.col("_lowered")).alias("kind"))["kind"]
    assert event_kinds(lowered).to_list() == whole.to_list()


def test_the_arguments_dump_behind_rays_worker_prefix_is_read(tmp_path: Path) -> None:
    """Under Ray (SkyPilot) every line starts `(task, pid=N) `: the arguments dump's lines still give the run's
    parameters and layout, as in the plain log (they gave 9 of the Llama sample's 75 parameters)."""
    plain = (SAMPLES / "megatron_lm_llama3_8b_h100.log").read_text()
    ray = tmp_path / "ray.log"
    ray.write_text("".join(f"(task, pid=6679) {line}" for line in plain.splitlines(keepends=True)))
    counts = []
    for path in (SAMPLES / "megatron_lm_llama3_8b_h100.log", ray):
        db = tmp_path / f"{path.stem}.duckdb"
        api.ingest(db, [str(path)])
        counts.append(
            api.sql(
                db,
                "SELECT (SELECT count(*) FROM run_params) AS params, (SELECT count(*) FROM iterations) "
                "AS its, (SELECT max(tp) FROM runs) AS tp, (SELECT max(layers) FROM runs) AS layers",
            )
            .iloc[0]
            .tolist()
        )
    assert counts[0][0] > 60 and counts[1] == counts[0]
