"""Megatron-LM's newest iteration keys (throughput, energy, power, MoE auxiliary losses, skipped samples,
sequence-packing bins) and its timer blocks at every `--timing-log-option` (minmax, max, all), read alike
by the fast layout path and the regex path."""

from __future__ import annotations

import polars as pl
import pytest

from tests.conftest import SAMPLES, source_of
from tests.test_parser_megatron_fast import canonical
from tracelog import hardware
from tracelog.parsers import megatron
from tracelog.parsers.megatron_bridge import NO_GPU_REACHES_TFLOPS

SAMPLE = SAMPLES / "megatron_lm_moe_energy_timers.log"


def collect(text: str | bytes, fast: bool = True) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for batch in megatron.parse(source_of(text), fast=fast):
        rows = batch.rows.to_dicts() if isinstance(batch.rows, pl.DataFrame) else list(batch.rows)
        out.setdefault(batch.table, []).extend(rows)
    return out


@pytest.mark.parametrize("fast", [True, False])
def test_throughput_goes_to_its_column_and_the_rest_to_metrics(fast: bool) -> None:
    out = collect(SAMPLE.read_bytes(), fast)
    by_it = {r["iteration"]: r for r in out["iterations"]}
    assert by_it[10]["tflops_reported"] == pytest.approx(301.2)
    assert by_it[10]["elapsed_s"] == pytest.approx(9.1204)
    assert by_it[10]["lm_loss"] == pytest.approx(10.41)
    metrics = {(m["iteration"], m["key"]): m["value"] for m in out["iteration_metrics"]}
    assert metrics[(10, "energy per GPU (J/iter/GPU)")] == pytest.approx(5835.5)
    assert metrics[(10, "power per GPU (W/GPU)")] == pytest.approx(639.8)
    assert metrics[(10, "load_balancing_loss")] == pytest.approx(1.0312)
    assert metrics[(30, "z_loss")] == pytest.approx(0.0352)
    assert metrics[(20, "skipped samples")] == 512
    assert (10, "skipped samples") not in metrics  # printed only once samples were skipped
    assert not any("throughput" in key or "TFLOP" in key for _, key in metrics)


@pytest.mark.parametrize("fast", [True, False])
def test_timers_in_every_layout(fast: bool) -> None:
    timers = collect(SAMPLE.read_bytes(), fast)["timers"]
    rows = [(t["iteration"], t["rank"], t["name"], t["time_min_ms"], t["time_ms"]) for t in timers]
    assert rows[0] == (10, None, "forward-backward", 8801.12, 9010.55)  # (min, max)
    assert (20, None, "optimizer", None, 90.12) in rows  # max only
    per_rank = [(r[1], r[4]) for r in rows if r[0] == 30 and r[2] == "forward-backward"]
    assert per_rank == [(0, 8410.55), (1, 8433.10), (2, 8391.02), (3, 8502.77)]  # all ranks
    assert len(rows) == 4 + 2 + 8


def test_the_all_ranks_layout_leaves_nothing_unparsed() -> None:
    out = collect(SAMPLE.read_bytes())
    texts = [u["text"] for u in out["unparsed"]]
    assert texts == ['  File "pretrain_gpt.py", line 310, in <module>']


def test_sequence_packing_and_rl_keys_are_metrics() -> None:
    line = (
        " [2026-03-02 09:10:00.123456] iteration       10/    1000 | consumed samples:         5120 |"
        " consumed bins:          640 | elapsed time per iteration (ms): 2210.4 | learning rate: 1.000000E-06 |"
        " global batch size:   512 | lm loss: 1.234000E+00 | loss scale: 1.0 | grad norm: 0.412 |"
        " number of skipped iterations:   0 | number of nan iterations:   0 | toks/s: 950123 | toks/s/gpu: 14846 |\n"
    )
    for fast in (True, False):
        out = collect(line, fast)
        metrics = {m["key"]: m["value"] for m in out["iteration_metrics"]}
        assert metrics == {"consumed bins": 640, "toks/s": 950123, "toks/s/gpu": 14846}
        assert out["iterations"][0]["consumed_samples"] == 5120


@pytest.mark.parametrize("block_bytes", [1 << 20, 700, 300])
def test_fast_and_regex_paths_agree_across_blocks(block_bytes: int) -> None:
    data = SAMPLE.read_bytes()
    assert canonical(data, block_bytes, fast=True) == canonical(data, block_bytes, fast=False)


def test_all_ranks_timers_survive_any_block_boundary() -> None:
    """A block may end between a timer's `  name:` line and its `rank N:` lines."""
    data = SAMPLE.read_bytes()
    start = data.index(b"times across ranks")
    whole = collect(data)["timers"]
    for cut in range(start, start + 260, 13):
        out: dict[str, list[dict]] = {}
        source = source_of(data, block_bytes=cut)
        for batch in megatron.parse(source):
            rows = batch.rows.to_dicts() if isinstance(batch.rows, pl.DataFrame) else list(batch.rows)
            out.setdefault(batch.table, []).extend(rows)
        key = [(t["line_no"], t["rank"], t["name"], t["time_ms"]) for t in out["timers"]]
        assert sorted(key) == sorted((t["line_no"], t["rank"], t["name"], t["time_ms"]) for t in whole), cut


def test_a_rank_past_what_polars_holds_is_an_event_not_a_crash() -> None:
    """Found by the fuzzer: a per-rank timer line whose rank has 40 digits failed the frame (OverflowError
    from polars) and the whole file with it."""
    text = (
        " [2026-03-02 09:13:30] iteration       30/    1000 | elapsed time per iteration (ms): 8536.2 | "
        "lm loss: 9.120000E+00 |\n"
        "times across ranks (ms):\n"
        "  forward-backward:\n"
        "     rank  0: 8410.55\n"
        "     rank  9999999999999999999999999999999999999999: 8433.10\n"
    )
    out: dict[str, list[dict]] = {}
    for batch in megatron.parse(source_of(text)):
        rows = batch.rows.to_dicts() if isinstance(batch.rows, pl.DataFrame) else list(batch.rows)
        out.setdefault(batch.table, []).extend(rows)
    ranks = sorted((r["rank"] is None, r["time_ms"]) for r in out["timers"])
    assert ranks == [(False, 8410.55), (True, 8433.10)]  # the huge rank is NULL, its time kept
    assert any(e["kind"] == "bad_value" for e in out["events"])


# Invented, in the shape argonne-lcf's Megatron-DeepSpeed prints with DeepSpeed's `wall_clock_breakdown`
# (logging.py's log_dist, timer.py's throughput line): the engine's timers come inside each step, before
# Megatron's iteration line of that step, the optimizer's before its `step=N` line.
DS_TIMERS_LOG = """\
[2024-04-19 13:26:38,107] [INFO] [logging.py:96:log_dist] [Rank 0] time (ms) | optimizer_allgather: 495.69 | optimizer_step: 14.20
[2024-04-19 13:26:38,108] [INFO] [logging.py:96:log_dist] [Rank 0] step=1, skipped=0, lr=[2e-06, 2e-06], mom=[(0.9, 0.999), (0.9, 0.999)]
[2024-04-19 13:26:38,109] [INFO] [logging.py:96:log_dist] [Rank 0] time (ms) | fwd_microstep: 32390.78 | bwd_microstep: 56173.28
[2024-04-19 13:26:38,109] [INFO] [logging.py:96:log_dist] [Rank 0] time (ms) | fwd: 32390.69 | bwd: 56173.16
[2024-04-19 13:26:38][INFO][training:1251] -  iteration=       1/   10000 | consumed_samples=        1152 | elapsed_time_per_iteration_ms=101182.7 | learning_rate=0.000002 | global_batch_size=  1152 | lm loss=11.1 |
 time (ms) | forward-backward: 88564.1 | optimizer: 14.3
[2024-04-19 13:27:45,502] [INFO] [logging.py:96:log_dist] [Rank 0] time (ms) | optimizer_allgather: 126.72 | optimizer_step: 14.14
[2024-04-19 13:27:45,503] [INFO] [logging.py:96:log_dist] [Rank 0] step=2, skipped=0, lr=[4e-06, 4e-06], mom=[(0.9, 0.999), (0.9, 0.999)]
[2024-04-19 13:27:45,503] [INFO] [timer.py:260:stop] epoch=0/micro_step=2/global_step=2, RunningAvgSamplesPerSec=151.5, CurrSamplesPerSec=151.5, MemAllocated=5.56GB, MaxMemAllocated=17.0GB
[2024-04-19 13:27:45,504] [INFO] [logging.py:96:log_dist] [Rank 0] time (ms) | fwd_microstep: 9695.97 | bwd_microstep: 48449.79
[2024-04-19 13:27:45][INFO][training:1251] -  iteration=       2/   10000 | consumed_samples=        2304 | elapsed_time_per_iteration_ms=67212.1 | learning_rate=0.000004 | global_batch_size=  1152 | lm loss=10.9 |
 time (ms) | forward-backward: 58145.8 | optimizer: 14.1
[2024-04-19 13:28:48,886] [INFO] [logging.py:96:log_dist] [Rank 0] time (ms) | optimizer_allgather: 131.61 | optimizer_step: 14.29
[2024-04-19 13:28:48,887] [INFO] [logging.py:96:log_dist] [Rank 0] step=3, skipped=0, lr=[6e-06, 6e-06], mom=[(0.9, 0.999), (0.9, 0.999)]
[2024-04-19 13:28:48,888] [INFO] [logging.py:96:log_dist] [Rank 0] time (ms) | fwd_microstep: 9288.12 | bwd_microstep: 47613.86
[2024-04-19 13:29:51,358] [INFO] [logging.py:96:log_dist] [Rank 0] time (ms) | optimizer_allgather: 127.93 | optimizer_step: 14.37
[2024-04-19 13:29:51,359] [INFO] [logging.py:96:log_dist] [Rank 0] step=4, skipped=0, lr=[8e-06, 8e-06], mom=[(0.9, 0.999), (0.9, 0.999)]
[2024-04-19 13:29:51,361] [INFO] [logging.py:96:log_dist] [Rank 0] time (ms) | fwd_microstep: 9294.96 | bwd_microstep: 47634.93
[2024-04-19 13:29:51][INFO][training:1251] -  iteration=       4/   10000 | consumed_samples=        4608 | elapsed_time_per_iteration_ms=62472.7 | learning_rate=0.000008 | global_batch_size=  1152 | lm loss=10.5 |
 time (ms) | forward-backward: 56929.9 | optimizer: 14.4
"""


@pytest.mark.parametrize("fast", [True, False])
def test_deepspeeds_timers_belong_to_the_step_they_were_printed_in(fast: bool) -> None:
    # Step 3's iteration line is not printed (a log interval of 2 from there): its DeepSpeed timers still
    # belong to step 3, by the `step=3` line printed with them.
    timers = collect(DS_TIMERS_LOG, fast)["timers"]
    by_name = {}
    for t in timers:
        by_name.setdefault(t["name"], []).append((t["line_no"], t["iteration"]))
    assert by_name["optimizer_allgather"] == [(1, 1), (7, 2), (13, 3), (16, 4)]
    assert by_name["fwd_microstep"] == [(3, 1), (10, 2), (15, 3), (18, 4)]
    assert by_name["fwd"] == [(4, 1)]
    # Megatron's own timers follow their iteration line, as before
    assert by_name["forward-backward"] == [(6, 1), (12, 2), (20, 4)]


def test_deepspeeds_timers_without_a_step_line_keep_the_iteration_before_them() -> None:
    text = "\n".join(line for line in DS_TIMERS_LOG.splitlines() if "skipped=" not in line) + "\n"
    timers = collect(text)["timers"]
    assert [(t["line_no"], t["iteration"]) for t in timers if t["name"] == "optimizer_allgather"] == [
        (1, None),
        (6, 1),
        (11, 2),
        (13, 2),
    ]


def test_deepspeeds_timers_between_sparser_step_lines_count_their_steps() -> None:
    # steps_per_print 2: the optimizer and the engine print their timers at every step, `step=N` every
    # second one (invented, in DS_TIMERS_LOG's shape).
    def timer(second: int, lead: str) -> str:
        return (
            f"[2024-04-19 13:26:{second:02d},107] [INFO] [logging.py:96:log_dist] [Rank 0] time (ms) | "
            f"{lead}: 100.0 | other: 1.0"
        )

    def step(second: int, n: int) -> str:
        return (
            f"[2024-04-19 13:26:{second:02d},108] [INFO] [logging.py:96:log_dist] [Rank 0] step={n}, skipped=0, "
            "lr=[2e-06], mom=[(0.9, 0.999)]"
        )

    lines = [
        timer(1, "optimizer_allgather"),
        timer(2, "fwd_microstep"),
        timer(3, "optimizer_allgather"),
        step(4, 2),
        timer(5, "fwd_microstep"),
        timer(6, "optimizer_allgather"),
        timer(7, "fwd_microstep"),
        timer(8, "optimizer_allgather"),
        step(9, 4),
        timer(10, "fwd_microstep"),
    ]
    timers = collect("\n".join(lines) + "\n")["timers"]
    steps = {(t["name"], t["line_no"]): t["iteration"] for t in timers if t["name"] != "other"}
    assert [steps[("optimizer_allgather", n)] for n in (1, 3, 6, 8)] == [1, 2, 3, 4]
    # the first engine line has no step line before it in the log: it keeps what was before (none)
    assert [steps[("fwd_microstep", n)] for n in (2, 5, 7, 10)] == [None, 2, 3, 4]


@pytest.mark.parametrize("fast", [True, False])
def test_the_memory_report_in_gigabytes_is_a_memory_row(fast: bool) -> None:
    """Megatron-LM's report over `torch.cuda.memory_stats()` since 2025 prints GB under its own keys (an
    invented line in its shape, two ranks' reports glued as ranks print them at once)."""
    report = (
        "[Rank {r}] (after 1 iterations) memory (GB) | mem-allocated-gigabytes: 51.072 | "
        "mem-active-gigabytes: 51.072 | mem-inactive-gigabytes: 10.971 | mem-reserved-gigabytes: 216.89 | "
        "mem-max-allocated-gigabytes: {peak} | mem-max-active-gigabytes: 195.46 | mem-max-inactive-gigabytes: "
        "14.369 | mem-max-reserved-gigabytes: 216.89 | mem-alloc-retires: 0 | mem-allocated-count: 571"
    )
    text = (
        " [2025-12-19 10:48:02] iteration        1/      50 | consumed samples:          128 | elapsed time per "
        "iteration (ms): 41290.3 | learning rate: 1.000000E-06 | global batch size:   128 | lm loss: 1.20E+01 |"
        " loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
        + report.format(r=0, peak="194.41")
        + report.format(r=4, peak="194.5")
        + "\n"
    )
    out = collect(text, fast)
    rows = sorted(out["memory"], key=lambda r: r["rank"])
    assert [(r["rank"], r["iteration"]) for r in rows] == [(0, 1), (4, 1)]
    assert rows[0]["allocated_mib"] == pytest.approx(51.072 * 1024)
    assert rows[0]["max_allocated_mib"] == pytest.approx(194.41 * 1024)
    assert rows[1]["max_allocated_mib"] == pytest.approx(194.5 * 1024)
    assert rows[0]["max_reserved_mib"] == pytest.approx(216.89 * 1024)
    assert "unparsed" not in out


@pytest.mark.parametrize("fast", [True, False])
def test_primus_and_torchrun_prefixes_give_the_rank_and_time(fast: bool) -> None:
    """AMD Primus's logger prefixes `[YYYYMMDD HH:MM:SS][rank-R/W][LEVEL] [---file:line] :` and prints
    `current/average` pairs (primus/core/utils/logger.py, training_log/print_rank_last_patches.py);
    torchrun's `--tee` prefixes `[defaultR]:`. Invented lines in those shapes."""
    primus = (
        "[20251202 09:12:{s}][rank-7/8][INFO ] [--------trainer.py:2560] : iteration {i}/ 5000 | consumed "
        "samples: {c} | elapsed time per iteration (ms): 13372.8/13364.7 | hip mem usage/free/total/usage_ratio: "
        "153.81GB/102.17GB/255.98GB/60.09% | throughput per GPU (TFLOP/s/GPU): 567.6/568.0 | tokens per GPU "
        "(tokens/s/GPU): 9801.4/9807.3 | learning rate: 9.984820E-06 | global batch size: 128 | lm loss: "
        "6.548988E-03 | loss scale: 1.0 | grad norm: 0.061 | number of skipped iterations: 0 | number of nan "
        "iterations: 0 |\n"
    )
    tee = (
        "[default3]: iteration       10/     100 | consumed samples:         1280 | elapsed time per iteration "
        "(ms): 900.1 | learning rate: 1.000000E-04 | global batch size:   128 | lm loss: 9.100000E+00 | loss "
        "scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
    )
    out = collect(primus.format(s="08", i=126, c=16128) + primus.format(s="21", i=127, c=16256), fast)
    rows = out["iterations"]
    assert [(r["iteration"], r["rank"], str(r["ts"])) for r in rows] == [
        (126, 7, "2025-12-02 09:12:08"), (127, 7, "2025-12-02 09:12:21")
    ]  # fmt: skip
    assert (rows[0]["elapsed_s"], rows[0]["tflops_reported"]) == (pytest.approx(13.3728), 567.6)
    metrics = {m["key"]: m["value"] for m in out["iteration_metrics"] if m["iteration"] == 126}
    assert metrics["hip mem usage/free/total/usage_ratio"] == pytest.approx(153.81)
    (row,) = collect(tee, fast)["iterations"]
    assert (row["iteration"], row["rank"], row["lm_loss"]) == (10, 3, 9.1)


def test_arguments_with_names_too_long_for_their_dots_are_kept() -> None:
    """Megatron pads a name with `48 - len(name)` dots: from 47 characters on, one dot or none
    (megatron/training/arguments.py `_print_args`; names of Megatron-Core 2025)."""
    text = "\n".join(
        [
            "------------------------ arguments ------------------------",
            "  inference_dynamic_batching_buffer_guaranteed_fraction  0.2",
            "  keep_fp8_transpose_cache_when_using_custom_fsdp . False",
            "  micro_batch_size ................................ 4",
            "-------------------- end of arguments ---------------------",
            "",
        ]
    )
    out = collect(text)
    params = {p["name"]: p["value"] for r in out["runs"] for p in r["run_params"]}
    assert params["inference_dynamic_batching_buffer_guaranteed_fraction"] == "0.2"
    assert params["keep_fp8_transpose_cache_when_using_custom_fsdp"] == "False"
    assert params["micro_batch_size"] == "4"
    assert "unparsed" not in out


@pytest.mark.parametrize("fast", [True, False])
def test_megatron_bridges_step_time_line_belongs_to_the_iteration_after_it(fast: bool) -> None:
    """Megatron-Bridge's `training_log` prints `Step Time : 14.26s GPU utilization: 58.2TFLOP/s/GPU`
    (`MODEL_TFLOP/s/GPU` in later releases) and then the iteration line of the same interval
    (megatron/bridge/training/utils/train_utils.py); invented figures in that shape. Without
    `--log-throughput` the iteration line has no TFLOP/s of its own and takes the step line's."""
    iteration = (
        " [2025-10-02 22:52:07] iteration       {i}/      50 | consumed samples:         {c} | elapsed time per "
        "iteration (ms): {ms} | learning rate: 3.000000E-04 | global batch size:   512 | lm loss: 4.474437E+00 |"
        " loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
    )
    text = (
        "Step Time : 14.26s GPU utilization: 58.2TFLOP/s/GPU\n"
        + iteration.format(i=10, c=5120, ms="14260.3")
        + "Step Time : 16.85s GPU utilization: 49.3MODEL_TFLOP/s/GPU\n"
        + iteration.format(i=20, c=10240, ms="16851.0")
    )
    out = collect(text, fast)
    assert sorted((m["iteration"], m["key"], m["value"]) for m in out["iteration_metrics"]) == [
        (10, "GPU utilization (TFLOP/s/GPU)", 58.2),
        (10, "step time (s)", 14.26),
        (20, "GPU utilization (TFLOP/s/GPU)", 49.3),
        (20, "step time (s)", 16.85),
    ]
    assert [(r["iteration"], r["elapsed_s"], r["tflops_reported"]) for r in out["iterations"]] == [
        (10, 14.2603, 58.2),
        (20, 16.851, 49.3),
    ]
    assert "unparsed" not in out


@pytest.mark.parametrize("fast", [True, False])
def test_a_step_time_line_glued_in_front_of_its_iteration_line_is_read_with_it(fast: bool) -> None:
    """Pasted without its newline, Bridge's step line sits in front of the iteration line it belongs to
    (Megatron-Bridge#1500 shows one, `GPU utilization: 0.0MODEL_TFLOP/s/GPU`); invented figures in that
    shape. Both are read; a 0.0 TFLOP/s stays a metric and is not the iteration's TFLOP/s."""
    iteration = (
        "[2025-11-24 21:40:12] iteration       {i}/      50 | consumed samples:         {c} | elapsed time per "
        "iteration (ms): {ms} | learning rate: 3.000000E-05 | global batch size:   192 | lm loss: 3.118804E-02 |"
        " loss scale: 1.0 | grad norm: 0.061 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
    )
    text = (
        "Step Time : 5.31s GPU utilization: 212.4MODEL_TFLOP/s/GPU "
        + iteration.format(i=40, c=7680, ms="5307.9")
        + "Step Time : 5.24s GPU utilization: 0.0MODEL_TFLOP/s/GPU "
        + iteration.format(i=50, c=9600, ms="5238.2")
        + "[after training is done] datetime: 2025-11-24 21:41:05\n"
    )
    out = collect(text, fast)
    assert sorted((m["iteration"], m["key"], m["value"]) for m in out["iteration_metrics"]) == [
        (40, "GPU utilization (TFLOP/s/GPU)", 212.4),
        (40, "step time (s)", 5.31),
        (50, "GPU utilization (TFLOP/s/GPU)", 0.0),
        (50, "step time (s)", 5.24),
    ]
    assert [
        (r["iteration"], r["elapsed_s"], r["tflops_reported"], r["grad_norm"]) for r in out["iterations"]
    ] == [
        (40, 5.3079, 212.4, 0.061),
        (50, 5.2382, None, 0.061),
    ]
    assert "unparsed" not in out


@pytest.mark.parametrize("fast", [True, False])
def test_a_step_line_tflops_above_every_gpus_peak_is_not_the_iterations(fast: bool) -> None:
    """A NeMo 25.09 Megatron-Bridge run (Llama 3.2 1B shape, 8 GPUs) printed `GPU utilization:
    59892.5TFLOP/s/GPU`, its FLOPs counted at the model's seq_length of 131072 where the data's sequences
    were 1024: above every GPU's dense peak in the catalog, it stays a metric; invented figures in that shape."""
    text = (
        "Step Time : 4.65s GPU utilization: 59892.5TFLOP/s/GPU\n"
        " [2025-10-06 03:27:07] iteration       10/      10 | consumed samples:         5120 | elapsed time per "
        "iteration (ms): 4647.8 | learning rate: 1.500000E-06 | global batch size:   512 | lm loss: 9.763827E+00 |"
        " loss scale: 1.0 | grad norm: 33.055 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
    )
    out = collect(text, fast)
    assert (10, "GPU utilization (TFLOP/s/GPU)", 59892.5) in {
        (m["iteration"], m["key"], m["value"]) for m in out["iteration_metrics"]
    }
    assert [(r["iteration"], r["elapsed_s"], r["tflops_reported"]) for r in out["iterations"]] == [
        (10, 4.6478, None)
    ]
    assert max(p for gpu in hardware.gpus() for p in gpu.peak_tflops.values()) < NO_GPU_REACHES_TFLOPS


@pytest.mark.parametrize("fast", [True, False])
def test_a_parameter_count_glued_to_an_iteration_line_is_a_run_parameter(fast: bool) -> None:
    """Megatron-Bridge may print `Number of parameters in transformer layers in billions:  6.98` right
    after an iteration line's last `|` with no newline (invented figures in that shape)."""
    text = (
        " [2025-12-19 10:02:11] iteration        1/     100 | consumed samples:          128 | elapsed time per "
        "iteration (ms): 5121.3 | learning rate: 1.000000E-05 | global batch size:   128 | lm loss: 1.154E+01 |"
        " loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |Number of "
        "parameters in transformer layers in billions:  6.98\n"
        " [2025-12-19 10:02:16] iteration        2/     100 | consumed samples:          256 | elapsed time per "
        "iteration (ms): 5093.8 | learning rate: 1.000000E-05 | global batch size:   128 | lm loss: 1.149E+01 |"
        " loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
    )
    out = collect(text, fast)
    params = {p["name"]: p["value"] for r in out["runs"] for p in r["run_params"]}
    assert params["theoretical_params_billions_transformer_layers"] == "6.98"
    assert [r["iteration"] for r in out["iterations"]] == [1, 2]
    assert not any("billions" in m["key"] for m in out.get("iteration_metrics", []))
