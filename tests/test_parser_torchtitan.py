"""torchtitan's training log: steps, memory per rank, seconds per step from the lines' times, the run's
layout from its start lines, restarts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SAMPLES, rows_by_table
from tracelog import api, parsers
from tracelog.parsers import torchtitan
from tracelog.parsers.base import head_text

SAMPLE = SAMPLES / "torchtitan_llama3_8b_h100.log"


def collect(text: str) -> dict[str, list[dict]]:
    return rows_by_table(torchtitan.parse, text)


def test_the_sample_is_detected_as_torchtitan_and_nothing_else_claims_it() -> None:
    head = head_text(SAMPLE.read_bytes()[: parsers.HEAD_BYTES])
    assert parsers.detect(head, SAMPLE.name) is torchtitan
    others = {p.FORMAT: p.detect(head) for p in parsers.PARSERS if p is not torchtitan}
    assert max(others.values()) < torchtitan.detect(head), others


def test_the_sample_lands_as_two_runs_with_one_row_per_step(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    (result,) = api.ingest(db, [str(SAMPLE)])
    assert (result.format, result.runs, result.bytes_pending) == ("torchtitan", 2, 97)  # step 64 cut off
    rows = api.sql(
        db,
        "SELECT run_id, iteration, rank, lm_loss, grad_norm, tflops_reported, elapsed_s FROM iterations ORDER BY line_no",
    )
    # ranks 0 and 1 print every step: one row each, the first printed; the relaunch logs step 50 again
    assert [tuple(r)[:3] for r in rows.itertuples(index=False)] == [
        (1, 1, 0), (1, 10, 0), (1, 20, 0), (1, 30, 0), (1, 40, 0), (1, 50, 0), (2, 50, 0), (2, 60, 0)
    ]  # fmt: skip
    first = rows.iloc[1]
    assert (first.lm_loss, first.grad_norm, first.tflops_reported) == (9.88124, 4.2104, 391.58)
    # seconds per step: 09:14:25,473 to 09:14:36,971 over steps 1 to 10; none for a run's first line
    assert first.elapsed_s == pytest.approx(11.498 / 9)
    assert rows.elapsed_s.isna().tolist() == [True, False, False, False, False, False, True, False]
    runs = api.sql(
        db,
        "SELECT run_id, framework, gpus, dp, tp, pp, cp, params, seq_len, gbs, train_iters FROM runs ORDER BY run_id",
    )
    assert [tuple(r)[1:] for r in runs.itertuples(index=False)] == [
        ("torchtitan", 8, 8, 1, 1, 1, 8030261248, 8192, 8, 1000)
    ] * 2
    memory = api.sql(
        db, "SELECT rank, max(max_reserved_mib) FROM memory WHERE run_id = 1 GROUP BY rank ORDER BY rank"
    )
    assert memory.values.tolist() == [[0, pytest.approx(60.13 * 1024)], [1, pytest.approx(60.12 * 1024)]]
    metrics = api.sql(
        db,
        "SELECT iteration, key, value FROM iteration_metrics WHERE run_id = 1 AND iteration = 40 ORDER BY key",
    )
    assert metrics.values.tolist() == [
        [40, "mfu (%)", 40.0],
        [40, "tokens per second per device", 6478.0],
        [40, "validation loss", 7.0518],
    ]
    # the hardware scan reads the GPU from the `CUDA capacity` line; the watchdog kills run 1
    assert set(api.sql(db, "SELECT gpu_model FROM runs")["gpu_model"]) == {"h100-sxm5-80gb"}
    # the checkpointer's save at step 40 (begun, then on disk), and the relaunch loading it
    kinds = api.sql(db, "SELECT run_id, kind FROM events ORDER BY line_no").values.tolist()
    assert kinds == [
        [1, "warning"], [1, "checkpoint_saving"], [1, "checkpoint_saved"], [1, "timeout"], [2, "checkpoint_loaded"]
    ]  # fmt: skip


def test_older_lines_colours_and_the_2024_start_lines() -> None:
    """torchtitan before 2025 printed `wps`, no grad norm, `Building 2-D device mesh with [...], [...]` and
    `Training starts at step 1, with local batch size ...`; on a terminal its metrics line is coloured
    (ANSI escapes), and `mfu` is `N/A` with FP8. Lines written after metrics.py and train.py of that time;
    values invented."""
    red, green, reset = "\x1b[31m", "\x1b[32m", "\x1b[39m"
    text = (
        "[titan] 2024-09-02 11:00:00,010 - root - INFO - Building 2-D device mesh with ['dp_shard', 'tp'], [4, 2]\n"
        "[titan] 2024-09-02 11:00:09,500 - root - INFO - Training starts at step 1, with local batch size 2, "
        "global batch size 8, sequence length 4096, total steps 500 (warmup 50)\n"
        f"[titan] 2024-09-02 11:00:20,000 - root - INFO - {red}step:  1  {green}loss: 10.9311  "
        f"memory: 30.21GiB(38.19%)  wps: 1,002  mfu: 4.12%{reset}\n"
        f"[titan] 2024-09-02 11:00:31,000 - root - INFO - {red}step: 10  {green}loss:  8.2250  "
        f"memory: 35.50GiB(44.88%)  wps: 6,702  mfu: N/A{reset}\n"
    )
    out = collect(text)
    (run,) = out["runs"]
    assert {k: run[k] for k in ("gpus", "dp", "tp", "mbs", "gbs", "seq_len", "train_iters")} == {
        "gpus": 8, "dp": 4, "tp": 2, "mbs": 2, "gbs": 8, "seq_len": 4096, "train_iters": 500
    }  # fmt: skip
    assert [(r["iteration"], r["lm_loss"], r["grad_norm"], r["elapsed_s"]) for r in out["iterations"]] == [
        (1, 10.9311, None, None),
        (10, 8.225, None, pytest.approx(11 / 9)),
    ]
    metrics = {(m["iteration"], m["key"]): (m["value"], m["text"]) for m in out["iteration_metrics"]}
    assert metrics[(10, "tokens per second per device")] == (6702.0, "6,702")
    assert metrics[(10, "mfu (%)")] == (None, "N/A")  # kept as printed
    assert "unparsed" not in out


def test_a_megatron_log_is_not_torchtitans() -> None:
    megatron_head = head_text((SAMPLES / "megatron_lm_llama3_8b_h100.log").read_bytes()[: parsers.HEAD_BYTES])
    assert torchtitan.detect(megatron_head) == 0


def test_the_2025_start_lines_and_ranks_printing_without_a_prefix() -> None:
    """torchtitan since late 2025 says `Trainer is initialized with local batch size ..., sequence length
    ..., total steps ...`, and names the model's shape in its `TransformerModelArgs(...)`; ranks launched
    without `--local-ranks-filter` print every line, validations included (invented lines in that shape)."""
    stamp = "[titan] 2026-01-16 02:41:43,288 - root - INFO - "
    start = [
        stamp
        + "Building llama3 8B with TransformerModelArgs(_enforced='x', dim=4096, n_layers=32, n_heads=32, "
        "n_kv_heads=8, vocab_size=128256, multiple_of=1024, ffn_dim_multiplier=1.3, norm_eps=1e-05, max_seq_len=8192)",
        stamp
        + "Trainer is initialized with local batch size 6, global batch size 48, gradient accumulation steps 1, "
        "sequence length 4096, total steps 150000 (warmup 200)",
    ]
    step = (
        stamp
        + "step: 10  loss:  7.1234  grad_norm:  1.2000  memory: 60.10GiB(75.99%)  tps: 5,210  tflops: 301.2  mfu: 30.46%"
    )
    validate = stamp + "validate step: 10  loss:  7.0001"
    out = collect("\n".join(start * 2 + [step] * 2 + [validate] * 2) + "\n")
    (run,) = out["runs"]
    assert (run["mbs"], run["gbs"], run["seq_len"], run["train_iters"]) == (6, 48, 4096, 150000)
    assert run["dp"] == 8  # global 48 = local 6 x data-parallel 8 x accumulation 1
    # Llama 3 8B's FFN: 2/3 of 4 x 4096 = 10922, x 1.3 = 14198, rounded up to a multiple of 1024 = 14336
    assert (run["layers"], run["hidden"], run["heads"], run["query_groups"], run["ffn_hidden"], run["vocab"]) == (
        32, 4096, 32, 8, 14336, 128256
    )  # fmt: skip
    assert [p["name"] for p in run["run_params"]].count("gradient_accumulation_steps") == 1
    assert len([m for m in out["iteration_metrics"] if m["key"] == "validation loss"]) == 1


def test_an_env_warning_naming_error_handling_is_no_error_line(tmp_path: Path) -> None:
    """torchtitan warns at every start that `ENV[TORCH_NCCL_ASYNC_ERROR_HANDLING] = 1 will be overridden`:
    `error` inside a variable's name is no error line, so no health flag; a C++ stack frame naming
    `c10::Error::Error` belongs to its traceback."""
    from tracelog.parsers.event_words import kind_of

    line = (
        "[rank0]:[titan] 2025-11-25 19:44:55,284 - root - WARNING - ENV[TORCH_NCCL_ASYNC_ERROR_HANDLING] = 1 "
        "will be overridden to 3 based on job config"
    )
    assert kind_of(line) == "warning"
    assert kind_of("frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x99") == "traceback"
    assert kind_of("ValueError: invalid literal") == "error"
    log = tmp_path / "titan.log"
    log.write_text(SAMPLE.read_text().split("\n", 1)[0] + "\n" + line + "\n")
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)], parser="torchtitan")
    assert api.sql(db, "SELECT kind FROM events").kind.tolist() == ["warning"]
    assert api.sql(db, "SELECT count(*) AS n FROM flags WHERE rule = 'training_health'").n[0] == 0


def test_the_ezpz_loggers_microsecond_times_give_the_seconds_per_step() -> None:
    """Some forks run torchtitan under the `ezpz` logger, whose prefix carries microseconds
    (`[2025-09-11 14:09:46,954794][I][components/metrics:437:log] step: 1 ...`); invented figures."""
    line = (
        "[2025-09-11 14:09:{t}][I][components/metrics:437:log] step:  {s}  loss: 10.8595  grad_norm:  3.2105"
        "  memory:  8.44GiB(13.20%)  tps: 6,697  tflops: 62.15  mfu: 20.84%\n"
    )
    text = line.format(t="46,954794", s=1) + line.format(t="47,568581", s=2) + line.format(t="48,193890", s=3)
    rows = collect(text)["iterations"]
    assert [r["elapsed_s"] for r in rows] == [None, pytest.approx(0.613787), pytest.approx(0.625309)]
    assert rows[0]["ts"].microsecond == 954794


def test_the_memory_share_gives_the_devices_capacity_for_the_oom_rule(tmp_path: Path) -> None:
    """torchtitan prints its peak reserved memory with its share of the device: where no line names the
    GPU, that share gives the capacity, and 96 % of it is close to out-of-memory (invented lines in the
    shape of a published MoE run's, torchtitan `metrics.py`)."""
    line = (
        "[titan] 2026-02-24 19:41:0{0},031 - root - INFO - step:  {0}  loss:  4.84441  grad_norm: 17.2500  "
        "memory: {1}GiB({2}%)  tps: 10,917  tflops: 341.86  mfu: 15.19%"
    )
    log = tmp_path / "titan.log"
    log.write_text("\n".join([line.format(7, "170.22", "95.44"), line.format(8, "171.75", "96.29")]) + "\n")
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    (capacity,) = api.sql(db, "SELECT value FROM run_params WHERE name = 'device_memory_mib'").value
    assert int(capacity) == round(170.22 / 95.44 * 102400)  # the first share read: 182,633 MiB
    (flag,) = api.sql(db, "SELECT severity, message FROM flags WHERE rule = 'oom_proximity'").itertuples(
        index=False
    )
    assert flag.severity == "critical" and "171.8 GiB is 96%" in flag.message


def test_each_launch_is_its_own_run_even_when_its_steps_go_on() -> None:
    """Launches pasted one after another (a baseline, then a float8 run) are two runs although the
    second's step 30 comes after the first's step 20: the command starts a run, as pytorch/torchtitan#808
    pastes them (`> ... ./run_train.sh ...`, `...`, one bare metrics line; figures invented)."""
    text = (
        "// baseline (bf16 + compile)\n"
        '> CONFIG_FILE="./train_configs/llama3_8b.toml" ./run_train.sh --training.compile\n'
        "...\n"
        "step: 20  loss:  8.5012  memory: 47.60GiB(50.11%)  tps: 5,701  mfu: 33.40%\n"
        "// rowwise float8\n"
        '> CONFIG_FILE="./train_configs/llama3_8b.toml" ./run_train.sh --model.converters float8 '
        "--training.compile --float8.recipe_name rowwise\n"
        "...\n"
        "step: 30  loss:  7.7001  memory: 47.70GiB(50.21%)  tps: 6,410  mfu: 37.55%\n"
    )
    out = collect(text)
    runs = sorted(out["runs"], key=lambda r: r["run_key"])
    assert [(r["line_start"], r["line_end"], r.get("precision")) for r in runs] == [
        (2, 4, None),
        (6, 8, "fp8"),
    ]
    assert [(r["run_key"], r["iteration"], r["lm_loss"]) for r in out["iterations"]] == [
        (0, 20, 8.5012), (1, 30, 7.7001)
    ]  # fmt: skip
    mfu = [(m["run_key"], m["value"]) for m in out["iteration_metrics"] if m["key"] == "mfu (%)"]
    assert mfu == [(0, 33.4), (1, 37.55)]
    commands = [p["value"] for r in runs for p in r["run_params"] if p["name"] == "launch_command"]
    assert commands[1].startswith(
        'CONFIG_FILE="./train_configs/llama3_8b.toml" ./run_train.sh --model.converters'
    )
    assert [u["line_no"] for u in out["unparsed"]] == [1, 3, 5, 7]  # the comments and the `...`


def test_the_scripts_set_x_echo_torchruns_banner_and_the_trainers_first_lines_start_a_run() -> None:
    """run_train.sh runs under `set -ex`, so a job's output starts with `+ torchrun --nproc_per_node=4 ...`;
    torchrun warns `Setting OMP_NUM_THREADS ...` and the trainer prints its version and `Float8 training
    active with recipe tensorwise` before its steps. A second launch into the same file, here without its
    command, goes on from step 10 to 20 (lines in the shape run_train.sh, torchrun and trainer.py print
    them; figures invented)."""
    stamp = "[titan] 2025-06-02 10:0{}:00,000 - root - INFO - "
    step = (
        stamp
        + "step: {:2d}  loss:  {}  grad_norm:  1.0000  memory: 30.00GiB(37.90%)  tps: 7,000  tflops: 300.0  mfu: 30.00%"
    )
    launch = [
        "+ NGPU=4",
        "+ torchrun --nproc_per_node=4 --rdzv_backend c10d --rdzv_endpoint=localhost:0 --local-ranks-filter 0 "
        "--role rank --tee 3 -m torchtitan.train --job.config_file ./train_configs/llama3_8b.toml "
        "--model.converters float8",
    ]
    banner = [
        "W0602 10:00:00.000000 1234 torch/distributed/run.py:766] ",
        "W0602 10:00:00.000000 1234 torch/distributed/run.py:766] *****************************************",
        "W0602 10:00:00.000000 1234 torch/distributed/run.py:766] Setting OMP_NUM_THREADS environment variable "
        "for each process to be 1 in default, to avoid your system being overloaded, please further tune the "
        "variable for optimal performance in your application as needed.",
    ]
    first = [stamp.format(0) + "torchtitan version: 0.1.0", stamp.format(0) + "Building llama3 8B"]
    float8 = [stamp.format(0) + "Float8 training active with recipe tensorwise"]
    lines = [
        *launch, *banner, *first, *float8, step.format(1, 1, "9.1000"), step.format(2, 10, "7.5000"),
        *banner, *first, step.format(3, 20, "7.0000"),
    ]  # fmt: skip
    out = collect("\n".join(lines) + "\n")
    runs = sorted(out["runs"], key=lambda r: r["run_key"])
    assert [(r["run_key"], r.get("gpus_per_node"), r.get("precision")) for r in runs] == [
        (0, 4, "fp8"),
        (1, None, None),
    ]
    assert [(r["run_key"], r["iteration"]) for r in out["iterations"]] == [(0, 1), (0, 10), (1, 20)]
    assert runs[1]["line_start"] == 13  # the second banner's OMP_NUM_THREADS line
    params = {(p["name"], p["value"]) for p in runs[0]["run_params"]}
    assert {("torchtitan_version", "0.1.0"), ("model", "llama3 8B")} <= params


# Invented, in the shape of torchtitan's step line, a paste stopping inside a line's last figure (pytorch/torchtitan
# PR 2389's excerpt stops inside its last step line, at `step:  5  loss:  7.07623  grad_norm:`).
CUT_STEPS = """\
[rank0]:[titan] 2026-01-12 09:30:01,100 - root - INFO - step: 30  loss:  3.41250  grad_norm:  0.7713  memory: 41.20GiB(52.08%)  tps: 6,912  tflops: 402.10  mfu: 40.66%
[rank0]:[titan] 2026-01-12 09:30:12,300 - root - INFO - step: 40  loss:  3.38804  grad_norm:  0.6942  memory: 41.20GiB(52.08%)  tps: 6,905  tflops: 4
[rank0]:[titan] 2026-01-12 09:30:23,500 - root - INFO - step: 50  loss:  3
"""


def test_a_step_line_cut_inside_its_last_figure_keeps_its_other_figures() -> None:
    out = collect(CUT_STEPS)
    rows = {r["iteration"]: r for r in out["iterations"]}
    assert (rows[30]["lm_loss"], rows[30]["tflops_reported"]) == (3.4125, 402.1)
    assert (rows[40]["lm_loss"], rows[40]["grad_norm"], rows[40]["tflops_reported"]) == (
        3.38804,
        0.6942,
        None,
    )
    assert rows[50]["lm_loss"] is None and rows[50]["elapsed_s"] == pytest.approx(1.12)
    assert [u["line_no"] for u in out["unparsed"]] == [2, 3]
    texts = [e["text"] for e in out["events"] if e["kind"] == "unread_figures"]
    assert texts == [
        "step line cut inside its last figure, `tflops: 4` not kept",
        "step line cut inside its last figure, `loss:  3` not kept",
    ]
    # the whole line's memory and mfu stand
    assert [m["max_reserved_mib"] for m in out["memory"]] == [41.2 * 1024, 41.2 * 1024]


# Verbatim, twinanda/ml-cookbook `slurm/torchtitan/README.md` (commit faf9fe5), the "Expected output" of FLUX.1-schnell
# pretraining on 2 nodes of 8 H100: torchtitan counts no FLOPs for FLUX, so it prints `tflops: 0.00  mfu: 0.00%`.
FLUX_NO_FLOPS = """\
[titan] 2025-06-10 21:58:27,008 - root - INFO - step: 700  loss:  0.7052  memory: 76.79GiB(96.97%)  tps: 1,541,366  tflops: 0.00  mfu: 0.00%
[titan] 2025-06-11 14:51:50,202 - root - INFO - step: 8200  loss:  0.5149  memory: 76.90GiB(97.11%)  tps: 1,567,390  tflops: 0.00  mfu: 0.00%
[titan] 2025-06-11 15:05:19,178 - root - INFO - step: 8300  loss:  0.5146  memory: 76.82GiB(97.01%)  tps: 1,555,416  tflops: 0.00  mfu: 0.00%
"""

# Verbatim, pytorch/torchtitan PR 1437 (a FlexAttention debug run): the allocator kept no statistics, so every line
# prints `memory:  0.00GiB(0.00%)`.
NO_MEMORY_STATS = """\
[rank0]:[titan] 2025-07-21 15:57:42,774 - root - INFO - step:  3  loss:  4.9925  grad_norm:  2.6422  memory:  0.00GiB(0.00%)  tps: 30,768  tflops: 3.15  mfu: 0.32%
[rank0]:[titan] 2025-07-21 15:57:43,242 - root - INFO - step:  4  loss:  4.6671  grad_norm:  2.5457  memory:  0.00GiB(0.00%)  tps: 35,051  tflops: 3.59  mfu: 0.36%
[rank0]:[titan] 2025-07-21 15:57:43,713 - root - INFO - step:  5  loss:  4.4394  grad_norm:  2.2714  memory:  0.00GiB(0.00%)  tps: 34,824  tflops: 3.57  mfu: 0.36%
"""


def test_tflops_of_zero_for_a_model_torchtitan_counts_no_flops_of_is_no_rate() -> None:
    out = collect(FLUX_NO_FLOPS)
    assert [(r["iteration"], r["lm_loss"], r["tflops_reported"]) for r in out["iterations"]] == [
        (700, 0.7052, None),
        (8200, 0.5149, None),
        (8300, 0.5146, None),
    ]
    (run,) = out["runs"]
    params = {p["name"]: p["value"] for p in run["run_params"]}
    assert params["tflops_not_counted"].startswith("tflops: 0.00, mfu: 0.00%")
    # the memory is measured all the same: 76.79 GiB of the 79.2 GiB its share gives
    assert [m["max_reserved_mib"] for m in out["memory"]] == [76.79 * 1024, 76.90 * 1024, 76.82 * 1024]
    assert params["device_memory_mib"] == "81090"


def test_memory_of_zero_gib_at_zero_percent_is_no_peak() -> None:
    out = collect(NO_MEMORY_STATS)
    assert "memory" not in out
    assert [(r["iteration"], r["tflops_reported"]) for r in out["iterations"]] == [
        (3, 3.15),
        (4, 3.59),
        (5, 3.57),
    ]
    (run,) = out["runs"]
    params = {p["name"]: p["value"] for p in run["run_params"]}
    assert "memory_not_measured" in params and "device_memory_mib" not in params


def test_a_small_printed_rate_beside_a_nonzero_mfu_is_kept() -> None:
    # invented: a rate that rounds to 0.00 while the MFU printed beside it is not 0 stays as printed
    line = "[titan] 2026-01-12 09:30:01,100 - root - INFO - step: 30  loss:  3.41250  memory:  1.20GiB(1.52%)  tps: 12  tflops: 0.00  mfu: 0.01%\n"
    (row,) = collect(line)["iterations"]
    assert row["tflops_reported"] == 0.0
