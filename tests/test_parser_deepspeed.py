"""The DeepSpeed parser on the lines DeepSpeed really prints: step and throughput-timer lines, wall-clock
timers, the configuration echo, memory reports, the flops profiler, ranks interleaving, restarts."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import SAMPLES, source_of
from tracelog import api, parsers
from tracelog.parsers import deepspeed, megatron
from tracelog.parsers.base import head_text

TS = "[2024-01-01 10:00:00,123]"
STEP = f"{TS} [INFO] [logging.py:96:log_dist] [Rank 0] step=20, skipped=2, lr=[0.00015, 0.00015], mom=[(0.9, 0.95), (0.9, 0.95)]"
TPUT = (
    f"{TS} [INFO] [timer.py:260:stop] epoch=0/micro_step=80/global_step=20, RunningAvgSamplesPerSec=25.02, "
    "CurrSamplesPerSec=25.7, MemAllocated=4.32GB, MaxMemAllocated=38.49GB"
)
ECHO = """\
[2024-01-01 10:00:00,001] [INFO] [config.py:999:print] DeepSpeedEngine configuration:
[2024-01-01 10:00:00,001] [INFO] [config.py:1003:print]   activation_checkpointing_config  {
    "partition_activations": false,
    "profile": false
}
[2024-01-01 10:00:00,001] [INFO] [config.py:1003:print]   bfloat16_enabled ............. {bf16}
[2024-01-01 10:00:00,001] [INFO] [config.py:1003:print]   checkpoint_parallel_write_pipeline  False
[2024-01-01 10:00:00,001] [INFO] [config.py:1003:print]   fp16_enabled ................. {fp16}
[2024-01-01 10:00:00,001] [INFO] [config.py:1003:print]   gradient_accumulation_steps .. 4
[2024-01-01 10:00:00,001] [INFO] [config.py:1003:print]   initial_dynamic_scale ........ 65536
[2024-01-01 10:00:00,001] [INFO] [config.py:1003:print]   train_batch_size ............. {tbs}
[2024-01-01 10:00:00,001] [INFO] [config.py:1003:print]   train_micro_batch_size_per_gpu  {mbs}
[2024-01-01 10:00:00,001] [INFO] [config.py:1003:print]   world_size ................... 16
[2024-01-01 10:00:00,001] [INFO] [config.py:1003:print]   zero_optimization_stage ...... 3
"""


def echo(mbs: int = 2, tbs: int = 128, bf16: bool = True) -> str:
    return (
        ECHO.replace("{mbs}", str(mbs))
        .replace("{tbs}", str(tbs))
        .replace("{bf16}", str(bf16))
        .replace("{fp16}", str(not bf16))
    )


def collect(text: str | bytes) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for batch in deepspeed.parse(source_of(text)):
        rows = batch.rows.to_dicts() if isinstance(batch.rows, pl.DataFrame) else list(batch.rows)
        out.setdefault(batch.table, []).extend(rows)
    return out


@pytest.mark.parametrize(
    "prefix",
    ["", "3: ", "gpu-node-01: ", "[rank0]: "],
    ids=["plain", "srun-label", "pdsh-host", "torchrun"],
)
@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_a_step_line_and_its_throughput_line_make_one_iteration(prefix: str, newline: str) -> None:
    text = echo() + newline.join(prefix + line for line in (STEP, TPUT)) + newline
    out = collect(text)
    (row,) = out["iterations"]
    assert row["iteration"] == 20
    assert row["learning_rate"] == 0.00015
    assert row["skipped"] == 2
    assert row["samples_per_s"] == 25.7
    assert row["elapsed_s"] == pytest.approx(128 / 25.7)  # train_batch_size / CurrSamplesPerSec
    assert row["global_batch_size"] == 128
    assert str(row["ts"]) == "2024-01-01 10:00:00.123000"  # the logger's milliseconds kept
    metrics = {m["key"]: m for m in out["iteration_metrics"]}
    assert metrics["RunningAvgSamplesPerSec"]["value"] == 25.02
    assert "lr" not in metrics  # one learning rate for every parameter group: no extra row
    (mem,) = out["memory"]
    assert (mem["allocated_mib"], mem["max_allocated_mib"]) == (4.32 * 1024, 38.49 * 1024)
    assert mem["iteration"] == 20


def test_the_old_throughput_format_attaches_to_the_last_step() -> None:
    old = (
        f"{TS} [INFO] [timer.py:198:stop] 0/20, RunningAvgSamplesPerSec=232.73, CurrSamplesPerSec=227.48, "
        "MemAllocated=0.36GB, MaxMemAllocated=15.06GB"
    )
    out = collect(echo() + STEP + "\n" + old + "\n")
    (row,) = out["iterations"]
    assert (row["iteration"], row["samples_per_s"]) == (20, 227.48)


def test_skipped_is_the_difference_of_the_running_count_and_overflows_set_the_loss_scale() -> None:
    lines = [
        f"{TS} [INFO] [logging.py:96:log_dist] [Rank 0] step=0, skipped=0, lr=[0.0], mom=[(0.9, 0.95)]",
        f"{TS} [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. "
        "Attempted loss scale: 65536, reducing to 32768",
        f"{TS} [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=1, lr=[1e-05], mom=[(0.9, 0.95)]",
        f"{TS} [INFO] [fused_optimizer.py:348:_update_scale] Reducing dynamic loss scale from 32768 to 16384",
        f"{TS} [INFO] [logging.py:96:log_dist] [Rank 0] step=20, skipped=3, lr=[2e-05], mom=[(0.9, 0.95)]",
        f"{TS} [INFO] [logging.py:96:log_dist] [Rank 0] step=30, skipped=3, lr=[3e-05], mom=[(0.9, 0.95)]",
    ]
    out = collect(echo(bf16=False) + "\n".join(lines) + "\n")
    rows = out["iterations"]
    assert [r["skipped"] for r in rows] == [1, 2, 0]
    assert [r["loss_scale"] for r in rows] == [32768.0, 16384.0, 16384.0]
    assert "unparsed" not in out
    # each overflow stays in the store, for a log with no step line to count it (steps_per_print off)
    assert [(e["kind"], e["line_no"]) for e in out["events"]] == [("overflow", 16), ("overflow", 18)]
    hysteresis = (
        f"{TS} [INFO] [loss_scaler.py:190:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted "
        "loss scale: 4294967296, but hysteresis is 2. Reducing hysteresis to 1"
    )
    assert [e["kind"] for e in collect(hysteresis + "\n")["events"]] == ["overflow"]


def test_a_bf16_run_has_no_loss_scale_and_an_fp16_run_starts_at_the_initial_scale() -> None:
    bf16 = collect(echo(bf16=True) + STEP + "\n")["iterations"][0]
    fp16 = collect(echo(bf16=False) + STEP + "\n")["iterations"][0]
    assert (bf16["loss_scale"], fp16["loss_scale"]) == (None, 65536.0)


@pytest.mark.parametrize(
    ("line", "rank", "timers", "step"),
    [
        (
            f"{TS} [INFO] [logging.py:96:log_dist] [Rank 0] time (ms) | fwd_microstep: 25341.72 | bwd_microstep: "
            "77707.38 | bwd_inner_microstep: 75751.84 | bwd_allreduce_microstep: 1955.54 | step_microstep: 2218.38",
            0,
            {"fwd_microstep": 25341.72, "bwd_microstep": 77707.38, "step_microstep": 2218.38},
            20,
        ),
        (
            f"{TS} [INFO] [logging.py:96:log_dist] [Rank 0] time (ms) | fwd: 6567.66 | bwd: 17950.35 | bwd_inner: "
            "17711.19 | bwd_allreduce: 239.11 | step: 1139.29",
            0,
            {"fwd": 6567.66, "bwd": 17950.35, "bwd_allreduce": 239.11, "step": 1139.29},
            20,
        ),
        (
            f"{TS} [INFO] [logging.py:96:log_dist] rank=3 time (ms) | optimizer_allgather: 884.11 | "
            "optimizer_gradients: 6.43 | optimizer_step: 23.44",
            3,
            {"optimizer_allgather": 884.11, "optimizer_step": 23.44},
            # the ZeRO optimizer prints its timers in its step(), before that step's `step=N` line: one after
            # step=20 is step 21's (runtime/zero/stage_1_and_2.py, runtime/engine.py)
            21,
        ),
        ("time (ms) | fwd_microstep: 54.76 | bwd_microstep: 122.95", None, {"fwd_microstep": 54.76}, 20),
    ],
    ids=["microstep", "step", "rank=N", "bare"],
)
def test_wall_clock_timers(line: str, rank: int | None, timers: dict[str, float], step: int) -> None:
    out = collect(echo() + STEP + "\n" + line + "\n")
    got = {t["name"]: t for t in out["timers"]}
    for name, value in timers.items():
        assert got[name]["time_ms"] == value
        assert got[name]["rank"] == rank
        assert got[name]["iteration"] == step


def test_a_timer_line_with_its_memory_breakdown() -> None:
    line = (
        f"{TS} [INFO] [logging.py:96:log_dist] [Rank 0] time (ms) | fwd: 100.00 | mem_allocated: 2.0000 GB | "
        "max_mem_allocated: 4.0000 GB | cache_allocated: 5.0000 GB | max_cache_allocated: 6.0000 GB"
    )
    out = collect(line + "\n")
    assert [t["name"] for t in out["timers"]] == ["fwd"]
    (mem,) = out["memory"]
    assert (mem["allocated_mib"], mem["max_allocated_mib"], mem["reserved_mib"], mem["max_reserved_mib"]) == (
        2048.0,
        4096.0,
        5120.0,
        6144.0,
    )


def test_see_memory_usage_lines_are_memory_rows() -> None:
    line = f"{TS} [INFO] [utils.py:782:see_memory_usage] MA 0.36 GB         Max_MA 0.36 GB         CA 0.54 GB         Max_CA 1 GB"
    (mem,) = collect(line + "\n")["memory"]
    assert (mem["allocated_mib"], mem["reserved_mib"], mem["max_reserved_mib"]) == (
        0.36 * 1024,
        0.54 * 1024,
        1024.0,
    )


def test_max_ca_rounded_to_whole_gb_never_reads_under_ca() -> None:
    # DeepSpeed prints Max_CA with no decimals (runtime/utils.py `see_memory_usage`); the line of
    # deepspeedai/DeepSpeed#2302 reads `CA 0.08 GB ... Max_CA 0 GB`: the peak is at least what is reserved.
    line = f"{TS} [INFO] [utils.py:828:see_memory_usage] MA 0.02 GB         Max_MA 0.02 GB         CA 0.08 GB         Max_CA 0 GB"
    (mem,) = collect(line + "\n")["memory"]
    assert (mem["reserved_mib"], mem["max_reserved_mib"]) == (0.08 * 1024, 0.08 * 1024)


@pytest.mark.parametrize(
    ("bf16", "precision"),
    [(True, "bf16"), (False, "fp16")],
)
def test_the_configuration_echo_feeds_the_run_columns(bf16: bool, precision: str) -> None:
    (run,) = collect(echo(mbs=2, tbs=128, bf16=bf16) + STEP + "\n")["runs"]
    assert (run["zero_stage"], run["mbs"], run["gbs"], run["dp"], run["precision"]) == (
        3,
        2,
        128,
        16,
        precision,
    )
    params = {p["name"]: p["value"] for p in run["run_params"]}
    assert params["gradient_accumulation_steps"] == "4"
    assert params["checkpoint_parallel_write_pipeline"] == "False"
    assert params["activation_checkpointing_config"] == '{ "partition_activations": false, "profile": false }'


@pytest.mark.parametrize(
    ("lines", "precision"),
    [
        # the echo cut before its precision lines (deepspeedai/DeepSpeed#2899, pasted up to `autotuning_config`):
        # apex AMP off says nothing of fp16 or bf16
        (["amp_enabled .................. False", "amp_params ................... False"], None),
        (
            [
                "amp_enabled .................. False",
                "bfloat16_enabled ............. False",
                "fp16_enabled ................. True",
            ],
            "fp16",
        ),
        (
            [
                "amp_enabled .................. False",
                "bfloat16_enabled ............. False",
                "fp16_enabled ................. False",
            ],
            "fp32",
        ),
        (["amp_enabled .................. True"], "fp16"),
    ],
)
def test_precision_comes_from_the_echo_s_fp16_and_bf16_lines(lines: list[str], precision: str | None) -> None:
    text = "\n".join(
        [f"{TS} [INFO] [config.py:1008:print] DeepSpeedEngine configuration:"]
        + [f"{TS} [INFO] [config.py:1012:print]   {line}" for line in lines]
    )
    (run,) = collect(text + "\n" + STEP + "\n")["runs"]
    assert run.get("precision") == precision


def test_the_users_json_config_fills_what_the_echo_does_not_print() -> None:
    text = """\
[2024-01-01 10:00:00,001] [INFO] [config.py:999:print] DeepSpeedEngine configuration:
[2024-01-01 10:00:00,001] [INFO] [config.py:1003:print]   world_size ................... 8
[2024-01-01 10:00:00,001] [INFO] [config.py:989:print_user_config]   json = {
    "train_batch_size": 64,
    "train_micro_batch_size_per_gpu": 8,
    "zero_optimization": {
        "stage": 2
    },
    "bf16": {
        "enabled": true
    }
}
"""
    (run,) = collect(text)["runs"]
    assert (run["gbs"], run["mbs"], run["zero_stage"], run["precision"]) == (64, 8, 2, "bf16")
    params = {p["name"]: p["value"] for p in run["run_params"]}
    assert params["json.zero_optimization.stage"] == "2"


def test_the_launcher_gives_nodes_and_gpus() -> None:
    lines = [
        f"{TS} [INFO] [launch.py:152:main] nnodes=2, num_local_procs=8, node_rank=0",
        f"{TS} [INFO] [launch.py:164:main] dist_world_size=16",
    ]
    (run,) = collect("\n".join(lines) + "\n" + echo())["runs"]
    assert (run["nodes"], run["gpus_per_node"], run["gpus"]) == (2, 8, 16)


def test_a_second_configuration_echo_after_training_is_a_second_run() -> None:
    text = echo(mbs=8, tbs=512) + STEP + "\n" + TPUT + "\n" + echo(mbs=4, tbs=512) + STEP + "\n"
    out = collect(text)
    first, second = out["runs"]
    assert (first["mbs"], second["mbs"]) == (8, 4)
    assert first["line_end"] < second["line_start"]
    assert [r["run_key"] for r in out["iterations"]] == [0, 1]


def test_two_echoes_before_any_training_are_one_run() -> None:
    out = collect(echo() + echo() + STEP + "\n")
    assert len(out["runs"]) == 1


def test_every_rank_printing_the_throughput_line_gives_one_iteration_and_a_memory_row_per_rank() -> None:
    lines = [f"0: {STEP}"]
    for rank in (3, 0, 1, 2):
        lines.append(f"{rank}: " + TPUT.replace("CurrSamplesPerSec=25.7", f"CurrSamplesPerSec=25.{rank}"))
    out = collect(echo() + "\n".join(lines) + "\n")
    (row,) = out["iterations"]
    assert row["samples_per_s"] == 25.0  # rank 0's figure
    assert sorted(m["rank"] for m in out["memory"]) == [0, 1, 2, 3]
    assert [m["key"] for m in out["iteration_metrics"]].count("RunningAvgSamplesPerSec") == 1


def test_a_lagging_rank_does_not_duplicate_a_written_step() -> None:
    lines = []
    for step in range(10, 80, 10):
        lines.append(STEP.replace("step=20", f"step={step}"))
    lines.append("5: " + TPUT)  # step 20, long after it was written
    out = collect(echo() + "\n".join(lines) + "\n")
    assert [r["iteration"] for r in out["iterations"]] == list(range(10, 80, 10))
    assert out["memory"][0]["rank"] == 5


def test_tracebacks_of_interleaved_ranks_are_events() -> None:
    lines = [
        "11: Traceback (most recent call last):",
        "0: 2024-06-02 22:46:05.432 | INFO     | __main__:main:280 - [Rank 0] step 42 | loss 3.2811",
        '11:   File "/workspace/train.py", line 287, in main',
        "11:     engine.backward(loss)",
        "11: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "8: [2024-06-02 22:46:09,432] [ERROR] [launch.py:322:sigkill_handler] ['python', 'train.py'] exits with return code = 1",
        "3: /opt/conda/lib/python3.10/site-packages/torch/utils/checkpoint.py:429: UserWarning: pass use_reentrant",
        "3:   warnings.warn(",
    ]
    out = collect(echo() + "\n".join(lines) + "\n")
    kinds = {e["line_no"]: e["kind"] for e in out["events"]}
    base = echo().count("\n")
    assert [kinds.get(base + n) for n in range(1, 9)] == [
        "traceback",
        None,
        "traceback",
        "traceback",
        "oom",
        "error",
        "warning",
        "warning",
    ]
    assert [u["line_no"] for u in out["unparsed"]] == [base + 2]


def test_the_flops_profiler_summary() -> None:
    summary = (SAMPLES / "deepspeed_zero2_gpt2_1b3.log").read_text().split("\n")
    out = collect("\n".join(summary) + "\n")
    step10 = next(r for r in out["iterations"] if r["iteration"] == 10)
    assert step10["tflops_reported"] == 109.83
    timers = {t["name"]: t["time_ms"] for t in out["timers"] if t["name"].startswith("flops_profiler")}
    assert timers["flops_profiler: iter latency"] == 592.45
    assert timers["flops_profiler: fwd latency"] == 148.37
    metrics = {m["key"]: m["value"] for m in out["iteration_metrics"] if m["iteration"] == 10}
    assert metrics["flops_profiler: fwd flops per GPU"] == pytest.approx(21.69e12)
    assert metrics["flops_profiler: samples/second"] == 54.02
    (run,) = out["runs"]
    assert run["params"] == 1_310_000_000


@pytest.mark.parametrize(
    ("sample", "expected"),
    [
        ("deepspeed_zero2_gpt2_1b3.log", "deepspeed"),
        ("deepspeed_ugly_restart.log", "deepspeed"),
        ("megatron_deepspeed_bloom_ugly.log", "megatron"),
        ("megatron_lm_llama3_8b_h100.log", "megatron"),
        ("lab_notes_tr11_topology.md", "table"),
    ],
)
def test_detection(sample: str, expected: str) -> None:
    head = head_text((SAMPLES / sample).read_bytes()[: parsers.HEAD_BYTES])
    chosen = parsers.detect(head, sample).FORMAT
    assert chosen == expected


# Invented, in the layout of DeepSpeed's flops profiler summary (profiling/flops_profiler/profiler.py
# `print_model_profile`) as saved to its own `output_file`.
PROFILER_FILE = """\
-------------------------- DeepSpeed Flops Profiler --------------------------
Profile Summary at step 2:
Notations:
data parallel size (dp_size), model parallel size(mp_size),
number of parameters (params), number of multiply-accumulate operations(MACs),
number of floating-point operations (flops), floating-point operations per second (FLOPS),
fwd latency (forward propagation latency), bwd latency (backward propagation latency),
step (weights update latency), iter latency (sum of fwd, bwd and step latency)

world size:                                                             32
data parallel size:                                                     4
model parallel size:                                                    8
batch size per GPU:                                                     2
params per GPU:                                                         1.02 B
params of model = params per GPU * mp_size:                             8.16 B
fwd MACs per GPU:                                                       8.4 TMACs
fwd flops per GPU:                                                      16.8 T
fwd latency:                                                            910.2 ms
fwd FLOPS per GPU = fwd flops per GPU / fwd latency:                    18.46 TFLOPS
bwd latency:                                                            2.71 s
iter latency:                                                           4.02 s
FLOPS per GPU = 3 * fwd flops per GPU / iter latency:                   12.54 TFLOPS
samples/second:                                                         15.92
"""


def test_a_flops_profiler_summary_saved_on_its_own_is_deepspeeds(tmp_path: Path) -> None:
    # The profiler writes its summary to a file of its own when given `output_file`: no engine line in it.
    assert parsers.detect(head_text(PROFILER_FILE.encode()), "profile.txt").FORMAT == "deepspeed"
    path = tmp_path / "profile.txt"
    path.write_text(PROFILER_FILE)
    db = tmp_path / "t.duckdb"
    (result,) = api.ingest(db, [str(path)])
    assert result.format == "deepspeed"
    run = api.sql(db, "SELECT gpus, dp, tp, mbs FROM runs").iloc[0]
    assert (run["gpus"], run["dp"], run["tp"], run["mbs"]) == (32, 4, 8, 2)
    timers = api.sql(db, "SELECT name, time_ms FROM timers WHERE iteration = 2 ORDER BY line_no")
    assert dict(zip(timers["name"], timers["time_ms"], strict=True)) == pytest.approx(
        {
            "flops_profiler: fwd latency": 910.2,
            "flops_profiler: bwd latency": 2710.0,
            "flops_profiler: iter latency": 4020.0,
        }
    )


def test_a_megatron_deepspeed_log_stays_megatrons_even_with_deepspeed_lines() -> None:
    iteration = (
        " iteration      199/  317892 | consumed samples:       152832 | elapsed time per iteration (ms): 14287.5 "
        "| learning rate: 2.407E-04 | global batch size:   768 | lm loss: 5.905366E+00 | loss scale: 8192.0 |"
    )
    head = echo() + STEP + "\n" + TPUT + "\n" + iteration + "\n"
    assert megatron.detect(head) > 0
    assert deepspeed.detect(head) == 0
    assert deepspeed.detect(echo() + STEP + "\n" + TPUT + "\n") > 0


# Invented, in DeepSpeed's logger format (utils/logging.py) with `see_memory_usage` (runtime/utils.py) around
# the engine's forward, as a user script calls it: a log with nothing else of DeepSpeed's in it.
SEE_MEMORY_ONLY = """\
[2023-01-15 19:09:50,939] [INFO] [utils.py:827:see_memory_usage] Engine before forward
[2023-01-15 19:09:50,940] [INFO] [utils.py:828:see_memory_usage] MA 1.52 GB         Max_MA 1.52 GB         CA 1.6 GB         Max_CA 2 GB
[2023-01-15 19:09:50,940] [INFO] [utils.py:836:see_memory_usage] CPU Virtual Memory:  used = 4.05 GB, percent = 31.9%
[2023-01-15 19:09:51,168] [INFO] [utils.py:827:see_memory_usage] Engine after forward
[2023-01-15 19:09:51,168] [INFO] [utils.py:828:see_memory_usage] MA 6.25 GB         Max_MA 7.5 GB         CA 8.1 GB         Max_CA 8 GB
"""


def test_a_log_of_deepspeeds_logger_alone_is_deepspeeds_but_anything_surer_wins(tmp_path: Path) -> None:
    head = head_text(SEE_MEMORY_ONLY.encode())
    assert parsers.detect(head, "mem.log").FORMAT == "deepspeed"
    assert 0 < deepspeed.detect(head) < deepspeed.detect(echo())
    # one such line is not enough, and a Trainer's logged dicts beside them make the log the Trainer's
    assert deepspeed.detect(SEE_MEMORY_ONLY.splitlines()[0]) == 0
    trainer = "{'loss': 2.31, 'learning_rate': 1e-05, 'epoch': 0.01}\n{'loss': 2.2, 'learning_rate': 1e-05, 'epoch': 0.02}\n"
    assert parsers.detect(head_text((SEE_MEMORY_ONLY + trainer).encode()), "t.log").FORMAT == "hf_trainer"
    path = tmp_path / "mem.log"
    path.write_text(SEE_MEMORY_ONLY)
    (result,) = api.ingest(tmp_path / "t.duckdb", [str(path)])
    memory = api.sql(
        tmp_path / "t.duckdb", "SELECT allocated_mib, max_allocated_mib FROM memory ORDER BY line_no"
    )
    assert memory.values.tolist() == [[1.52 * 1024, 1.52 * 1024], [6.25 * 1024, 7.5 * 1024]]
    assert (result.format, result.lines_total, result.lines_unparsed) == ("deepspeed", 5, 3)


# ---- the samples, through the library ---------------------------------------------------------------


def test_the_plain_sample_lands_in_the_database(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    (result,) = api.ingest(db, [str(SAMPLES / "deepspeed_zero2_gpt2_1b3.log")])
    assert (result.format, result.runs) == ("deepspeed", 1)
    run = api.sql(db, "SELECT * FROM runs r JOIN run_summary s USING (run_id)").iloc[0]
    assert (run["framework"], run["zero_stage"], run["precision"]) == ("deepspeed", 2, "bf16")
    assert (run["nodes"], run["gpus"], run["dp"], run["mbs"], run["gbs"]) == (1, 8, 8, 4, 128)
    assert run["iterations_logged"] == 10 and run["last_iteration"] == 100
    assert 48 < run["samples_per_s"] < 50 and 2.5 < run["sec_per_it"] < 2.7
    timers = api.sql(db, "SELECT DISTINCT name FROM timers WHERE name NOT LIKE 'flops%' ORDER BY 1")
    assert {"fwd", "bwd", "step", "fwd_microstep", "bwd_allreduce_microstep"} <= set(timers["name"])
    peak = api.sql(db, "SELECT max(max_allocated_mib) AS peak FROM memory").iloc[0]["peak"]
    assert peak == pytest.approx(31.42 * 1024)
    # line 23, `[stage_1_and_2.py:148:__init__] Reduce bucket size 500000000`: kept for the memory model
    bucket = api.sql(db, "SELECT value, line_no FROM run_params WHERE name = 'reduce_bucket_size'").iloc[0]
    assert (bucket["value"], bucket["line_no"]) == ("500000000", 23)
    # the engine's `zero_config ... overlap_comm=True` echo reaches the model: gradients reduced during
    # the backward pass (and two buckets in memory, `buf_0`/`buf_1`, without a pipeline)
    from tracelog.analysis import inputs as run_inputs
    from tracelog.store import Store

    with Store(db) as store:
        ((row, params),) = run_inputs.load_rows(store, "run_id = 1")
    built = run_inputs.build(row, params)
    assert built.zero_option("overlap_comm") == "True" and built.zero_option("stage") == "2"
    assert built.train is not None and built.train.overlap_grad_reduce


def test_the_ugly_sample_has_two_runs_a_crash_and_every_rank(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    (result,) = api.ingest(db, [str(SAMPLES / "deepspeed_ugly_restart.log")])
    assert (result.format, result.runs, result.lines_unparsed) == ("deepspeed", 2, 4)
    runs = api.sql(db, "SELECT run_id, mbs, gbs, precision, gpus, nodes FROM runs ORDER BY run_id")
    assert runs["mbs"].tolist() == [8, 4]
    assert set(runs["precision"]) == {"fp16"} and set(runs["gpus"]) == {16} and set(runs["nodes"]) == {2}
    ranks = api.sql(db, "SELECT run_id, count(DISTINCT rank) AS n FROM memory GROUP BY 1 ORDER BY 1")
    assert ranks["n"].tolist() == [16, 16]
    events = api.sql(db, "SELECT kind, count(*) AS n FROM events WHERE run_id = 1 GROUP BY 1")
    counts = dict(zip(events["kind"], events["n"], strict=True))
    assert counts["oom"] == 1 and counts["traceback"] == 7 and counts["error"] == 1
    scales = api.sql(db, "SELECT loss_scale FROM iterations WHERE run_id = 1 ORDER BY iteration")
    assert scales["loss_scale"].tolist() == [8192.0, 8192.0, 4096.0, 4096.0]


# ---- hostile input ---------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.sampled_from(
                [STEP, TPUT, *echo().split("\n"), "Traceback (most recent call last):", "  x", "}", "{"]
            ),
            st.text(max_size=60),
        ),
        max_size=40,
    )
)
def test_any_mix_of_deepspeed_lines_parses_without_error(lines: list[str]) -> None:
    collect("\n".join(lines))


@pytest.mark.parametrize(
    ("params", "overlap", "bucket"),
    [
        # DeepSpeed 0.9 on: the pydantic echo, every setting with its default
        (
            {
                "zero_config": "stage=1 contiguous_gradients=True reduce_bucket_size=50000000 overlap_comm=False"
            },
            False,
            5e7,
        ),
        # DeepSpeed 0.10 (2023) groups its integers by commas, in the echo as on its own bucket line
        (
            {
                "zero_config": "stage=1 contiguous_gradients=True reduce_scatter=True "
                "reduce_bucket_size=500,000,000 allgather_partitions=True allgather_bucket_size=500,000,000 "
                "overlap_comm=False load_from_fp32_weights=True"
            },
            False,
            5e8,
        ),
        ({"reduce_bucket_size": "200,000,000"}, False, 2e8),
        # 2021-2022: the echo is a JSON dict
        (
            {"zero_config": '{"stage": 1, "overlap_comm": true, "reduce_bucket_size": 6.710886e+07}'},
            True,
            6.710886e7,
        ),
        # only the user's JSON: what it sets, the rest DeepSpeed's defaults
        ({"json.zero_optimization.overlap_comm": "true"}, True, 5e8),
        ({}, False, 5e8),
    ],
)
def test_deepspeed_zero_settings_reach_the_model(
    params: dict[str, str], overlap: bool, bucket: float
) -> None:
    from tracelog.analysis.inputs import build
    from tracelog.analysis.predictions import memory_options

    row = {
        "run_id": 1, "framework": "deepspeed", "gpu_model": "a100-sxm4-80gb", "layers": 24, "hidden": 2048,
        "heads": 16, "seq_len": 1024, "vocab": 50257, "dp": 8, "mbs": 4, "gbs": 128, "zero_stage": 1,
        "precision": "fp16",
    }  # fmt: skip
    built = build(row, params)
    assert built.train is not None and built.train.overlap_grad_reduce is overlap
    assert memory_options(built).reduce_bucket_size == pytest.approx(bucket)


def test_a_bucket_printed_with_thousands_separators_is_read_whole() -> None:
    # Invented, in the shape of DeepSpeed 0.10's ZeRO-1 lines (stage_1_and_2.py), which print the bucket
    # sizes grouped by commas: `Reduce bucket size 500,000,000` had been kept as 500.
    text = (
        "[2023-08-02 00:41:16,837] [INFO] [logging.py:96:log_dist] [Rank 0] Creating torch.float16 ZeRO "
        "stage 1 optimizer\n"
        "[2023-08-02 00:41:16,837] [INFO] [stage_1_and_2.py:133:__init__] Reduce bucket size 200,000,000\n"
        "[2023-08-02 00:41:16,837] [INFO] [stage_1_and_2.py:134:__init__] Allgather bucket size 500,000,000\n"
        "[2023-08-02 00:41:17,455] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=0, "
        "lr=[0.0001], mom=[(0.9, 0.999)]\n"
    )
    out = collect(text)
    (run,) = out["runs"]
    params = {p["name"]: p["value"] for p in run["run_params"]}
    assert params["reduce_bucket_size"] == "200,000,000"
    from tracelog.analysis.predictions import _elements

    assert _elements(params["reduce_bucket_size"]) == 2e8


def test_the_first_step_line_of_a_tail_does_not_take_every_earlier_skip() -> None:
    # Invented, in the shape of `kubectl logs --tail` of a DeepSpeed-Chat worker (host prefix, no engine
    # echo): DeepSpeed's `skipped=19` counts every step since the start, not the ten before this line.
    prefix = "actor-multi-node-worker-0: [2023-06-21 03:46:19,251] [INFO] [logging.py:96:log_dist] [Rank 0] "
    lines = [
        f"{prefix}step={step}, skipped={skipped}, lr=[9.2e-08, 9.2e-08], mom=[(0.9, 0.95), (0.9, 0.95)]"
        for step, skipped in ((1890, 19), (1900, 19), (1910, 21))
    ]
    out = collect("% k logs actor-multi-node-worker-0 --tail=100\n" + "\n".join(lines) + "\n")
    assert [(r["iteration"], r["skipped"]) for r in out["iterations"]] == [(1890, None), (1900, 0), (1910, 2)]
    (kept,) = [m for m in out["iteration_metrics"] if m["key"].startswith("skipped")]
    assert (kept["iteration"], kept["value"], kept["line_no"]) == (1890, 19, 2)
    # from the start of a run (step 10, the first interval) the count is the interval's
    start = collect(lines[0].replace("step=1890, skipped=19", "step=10, skipped=7") + "\n")
    assert [r["skipped"] for r in start["iterations"]] == [7]


def test_the_throughput_lines_of_older_releases() -> None:
    # Invented, in the shapes DeepSpeed's ThroughputTimer printed before 0.7 (`0/40, SamplesPerSec=...,
    # MemAllocated=...`, the running average only) and in 2020 behind its own logger prefix.
    text = (
        "[2022-03-01 10:00:00,100] [INFO] [logging.py:69:log_dist] [Rank 0] step=40, skipped=0, lr=[5e-05]\n"
        "[2022-03-01 10:00:00,200] [INFO] [timer.py:189:stop] 0/40, SamplesPerSec=83.48609168106144, "
        "MemAllocated=0.26GB, MaxMemAllocated=9.02GB\n"
    )
    out = collect(text)
    (row,) = out["iterations"]
    assert (row["iteration"], row["samples_per_s"]) == (40, 83.48609168106144)
    (memory,) = out["memory"]
    assert (memory["iteration"], memory["max_allocated_mib"]) == (40, 9.02 * 1024)
    old = (
        "[INFO 2020-06-08 06:02:19] 0/450, SamplesPerSec=7.458824487454903\n"
        "time (ms) | forward_microstep: 193.65 | backward_microstep: 329.25 | step_microstep: 0.92\n"
    )
    assert parsers.detect(head_text(old.encode()), "ds.log").FORMAT == "deepspeed"
    (first,) = collect(old)["iterations"]
    assert (first["iteration"], first["samples_per_s"]) == (450, 7.458824487454903)


def test_the_pipeline_engines_own_line_is_an_iteration() -> None:
    # Invented, in the words of runtime/pipe/engine.py (`steps: {global_steps} loss: {agg_train_loss:0.4f}
    # ` + each extra loss + `iter time (s): {:0.3f} samples/sec: {:0.3f}`).
    text = (
        "steps: 190 loss: 5.6120 iter time (s): 0.941 samples/sec: 135.984\n"
        "steps: 200 loss: 5.5508 lm loss: 5.5103 moe loss: 0.0405 iter time (s): 0.936 samples/sec: 136.706\n"
    )
    assert parsers.detect(head_text(text.encode()), "pipe.log").FORMAT == "deepspeed"
    out = collect(text)
    rows = [(r["iteration"], r["lm_loss"], r["elapsed_s"], r["samples_per_s"]) for r in out["iterations"]]
    assert rows == [(190, 5.612, 0.941, 135.984), (200, 5.5508, 0.936, 136.706)]
    extra = {(m["iteration"], m["key"]): m["value"] for m in out["iteration_metrics"]}
    assert extra == {(200, "lm loss"): 5.5103, (200, "moe loss"): 0.0405}


def test_timers_take_their_own_step_whatever_steps_per_print_is() -> None:
    # steps_per_print 2 (invented, in the shape of DeepSpeed's log_dist lines): the optimizer's timers at
    # every step before that step's line, the engine's after it.
    def timer(lead: str) -> str:
        return f"{TS} [INFO] [logging.py:96:log_dist] [Rank 0] time (ms) | {lead}: 10.0 | other: 1.0"

    def step(n: int) -> str:
        return f"{TS} [INFO] [logging.py:96:log_dist] [Rank 0] step={n}, skipped=0, lr=[1e-05], mom=[(0.9, 0.999)]"

    lines = [timer("optimizer_allgather"), timer("fwd")]  # step 1, before any step line
    lines += [timer("optimizer_allgather"), step(2), timer("fwd")]  # step 2
    lines += [timer("optimizer_allgather"), timer("fwd")]  # step 3
    lines += [timer("optimizer_allgather"), step(4), timer("fwd")]  # step 4
    out = collect(echo() + "\n".join(lines) + "\n")
    got = [(t["name"], t["iteration"]) for t in out["timers"] if t["name"] != "other"]
    assert got == [
        ("optimizer_allgather", 1),
        ("fwd", None),  # an engine line before any step line: no step to count from
        ("optimizer_allgather", 2),
        ("fwd", 2),
        ("optimizer_allgather", 3),
        ("fwd", 3),
        ("optimizer_allgather", 4),
        ("fwd", 4),
    ]


def test_deepspeed_chats_throughput_line_gives_the_runs_size_and_its_figures() -> None:
    # Invented, in the words of DeepSpeed-Chat's `print_throughput` (dschat/utils/perf.py), which prints
    # once per micro-batch between the engine's step lines.
    chat = "Model Parameters: 0.331 B, Latency: {0}s, TFLOPs: 1.02, Samples/sec: 7.28, Time/seq 0.14s, Batch Size: 2, Sequence Length: 512"
    out = collect(chat.format("0.27") + "\n" + STEP + "\n" + chat.format("0.49") + "\n")
    (run,) = out["runs"]
    assert (run["params"], run["mbs"], run["seq_len"]) == (331_000_000, 2, 512)
    latency = [
        (m["iteration"], m["value"]) for m in out["iteration_metrics"] if m["key"].startswith("latency")
    ]
    assert latency == [(None, 0.27), (20, 0.49)]
    assert "unparsed" not in out


def glued_bar_log() -> str:
    """The Hugging Face Trainer on DeepSpeed with `wall_clock_breakdown`: tqdm redraws its bar without a
    newline, so the ZeRO optimizer's timer line of the next step lands on the bar's line (the shape of
    DeepSpeed issue 1436; invented figures). The last bar has earlier redraws before it and a rate in it/s."""
    log = "[2021-10-08 20:18:{s}] [INFO] [logging.py:68:log_dist] [Rank 0] rank=0 time (ms) | "
    bar = "{p}%|███████▊       | {n}/800 [10:31<16:30,  {rate}]"
    engine = (
        log + "forward_microstep: 301.10 | backward_microstep: 702.40 | step_microstep: 640.20\n"
        "" + log + "forward: 301.00 | backward: 702.30 | step: 640.10\n"
    )
    optimizer = log + "optimizer_allgather: 3.10 | optimizer_gradients: 70.50 | optimizer_step: 560.20\n"
    return (
        engine.format(s="44,102")
        + " " + bar.format(p=39, n=311, rate="2.04s/it") + optimizer.format(s="46,140")
        + engine.format(s="46,140")
        + "\r " + bar.format(p=39, n=311, rate="2.04s/it") + "\r " + bar.format(p=39, n=312, rate="0.50it/s")
        + optimizer.format(s="48,181")
    )  # fmt: skip


def test_a_trainers_bar_glued_before_a_timer_line_gives_its_step_time_and_the_timers_the_next_step() -> None:
    """The Trainer moves its bar once a step's timers are printed: the bar's step gets the bar's rate as
    its step time, the timer lines after it are the step after the bar's."""
    out = collect(glued_bar_log())
    assert [(r["iteration"], r["elapsed_s"], r["line_no"]) for r in out["iterations"]] == [
        (311, 2.04, 3),
        (312, 2.0, 6),
    ]
    timers = {(t["line_no"], t["iteration"]) for t in out["timers"]}
    assert sorted(timers) == [(1, None), (2, None), (3, 312), (4, 312), (5, 312), (6, 313)]
    assert {t["name"] for t in out["timers"] if t["line_no"] in (3, 6)} == {
        "optimizer_allgather",
        "optimizer_gradients",
        "optimizer_step",
    }
    assert "unparsed" not in out


def test_the_pipeline_engines_start_lines_give_the_models_size_and_its_stages() -> None:
    """A job that stops in the pipeline engine's start (GPT-NeoX 20B under pdsh, EleutherAI/gpt-neox#988:
    stuck before its first step) had every line unparsed and was reported as maybe not DeepSpeed's. Its
    lines say the micro-batch, the accumulation, each stage's layers and parameters and the model's size.
    Invented figures in the shape of that log (host prefixes, two ranks per stage printing)."""
    head = "gpu250: [2023-07-05 15:08:30,157] [INFO] [engine.py:{at}:__init__] "
    stage = (
        "RANK={rank} STAGE={stage} LAYERS={layers} [{first}, {stop}) STAGE_PARAMS={params} "
        "({millions:.3f}M) TOTAL_PARAMS=20553056256 (20553.056M) UNIQUE_PARAMS=20553056256 (20553.056M)"
    )
    lines = [
        "gpu250: Time to load utils op: 0.003278970718383789 seconds",
        head.format(at=83) + "CONFIG: micro_batches=6 micro_batch_size=1",
        *(
            head.format(at=138)
            + stage.format(rank=r, stage=s, layers=n, first=a, stop=a + n, params=p, millions=p / 1e6)
            for r, s, n, a, p in (
                (0, 0, 13, 0, 2646199296),
                (1, 0, 13, 0, 2646199296),
                (4, 1, 12, 13, 2718609408),
                (5, 1, 12, 13, 2718609408),
            )
        ),
    ]
    out = collect("\n".join(lines) + "\n")
    (run,) = out["runs"]
    assert (run["params"], run["mbs"]) == (20_553_056_256, 1)
    params = [(p["name"], p["value"]) for p in run["run_params"]]
    assert params == [
        ("pipeline micro_batches", "6"),
        ("pipeline stage 0 layers", "[0, 13)"),
        ("pipeline stage 0 parameters", "2646199296"),
        ("pipeline stage 1 layers", "[13, 25)"),
        ("pipeline stage 1 parameters", "2718609408"),
    ]
    assert [u["line_no"] for u in out["unparsed"]] == [1]


def test_a_scripts_step_lines_place_the_bare_timers_and_give_their_time() -> None:
    """A benchmark script printing DeepSpeed's timers without the logger's prefix and its own `Step N time:`
    after each step (DeepSpeedExamples' ZenFlow benchmark; lines in that shape, figures invented): the
    timers before a step line are its step's, those after the last one the next step's; the step time is
    the step's seconds; the launcher's `--num_gpus` is the GPUs per node and `[Summary]` run parameters."""
    text = (
        "$ deepspeed --num_gpus=2 zf_benchmark.py --hidden_dim 2048 --iteration 3\n"
        "time (ms) | fwd_microstep: 50.10 | bwd_microstep: 120.00 | step_microstep: 0.30\n"
        "Step 0 time: 170.40ms\n"
        "time (ms) | optimizer_allgather: 20.00 | optimizer_step: 110.00\n"
        "time (ms) | fwd_microstep: 0.40 | bwd_microstep: 55.00 | step_microstep: 180.20\n"
        "time (ms) | fwd: 50.50 | bwd: 175.00 | step: 180.50\n"
        "Step 1 time: 236.00ms\n"
        "time (ms) | fwd_microstep: 0.30 | bwd_microstep: 16.00 | step_microstep: 0.20\n"
        "[Summary] topk_ratio=0.1 update_interval=2 avg_update_step=171.38ms\n"
    )
    out = collect(text)
    assert [(r["iteration"], r["elapsed_s"]) for r in out["iterations"]] == [(0, 0.1704), (1, 0.236)]
    by_line = {}
    for t in out["timers"]:
        by_line.setdefault(t["line_no"], set()).add(t["iteration"])
    assert by_line == {2: {0}, 4: {1}, 5: {1}, 6: {1}, 8: {2}}
    (run,) = out["runs"]
    assert run["gpus_per_node"] == 2 and run.get("nodes") is None
    params = {p["name"]: p["value"] for p in run["run_params"]}
    assert params["launch_command"].startswith("deepspeed --num_gpus=2 zf_benchmark.py")
    assert (params["summary.update_interval"], params["summary.avg_update_step"]) == ("2", "171.38ms")
    assert "unparsed" not in out


@pytest.mark.parametrize(
    ("lines", "stage", "precision"),
    [
        # since 0.8.1 the engine prints the model's dtype; stage 3's first line still says "fp16"
        (
            [
                "Creating fp16 ZeRO stage 3 optimizer, MiCS is enabled False, Hierarchical params gather False",
                "Creating torch.float32 ZeRO stage 3 optimizer",
            ],
            3,
            "fp32",
        ),
        (["Creating torch.bfloat16 ZeRO stage 2 optimizer"], 2, "bf16"),
        # before 0.8.1, "fp16" whatever the precision: the stage alone
        (["Creating fp16 ZeRO stage 1 optimizer"], 1, None),
    ],
)
def test_the_engine_s_zero_optimizer_line_gives_the_stage_and_its_dtype(
    lines: list[str], stage: int, precision: str | None
) -> None:
    """Invented lines in the shape of a ZeRO-3 start with CPU offload (Liuziyu77/Visual-RFT#7), whose log was
    cut before the configuration echo."""
    text = "\n".join(f"{TS} [INFO] [logging.py:128:log_dist] [Rank 0] {line}" for line in lines)
    (run,) = collect(text + "\n" + STEP + "\n")["runs"]
    assert (run.get("zero_stage"), run.get("precision")) == (stage, precision)


def test_the_configuration_echo_and_the_optimizer_line_agree() -> None:
    text = (
        f"{TS} [INFO] [logging.py:96:log_dist] [Rank 0] Creating torch.bfloat16 ZeRO stage 3 optimizer\n"
        + echo(mbs=2, tbs=128, bf16=True)
    )
    (run,) = collect(text + STEP + "\n")["runs"]
    assert (run["zero_stage"], run["precision"]) == (3, "bf16")
