"""The NeMo 2 parser: ProgressPrinter iteration lines, the tqdm bar with carriage returns, Megatron timer
blocks, the configuration dump as run columns, and what it leaves to Megatron's parser."""

from __future__ import annotations

from datetime import datetime

import polars as pl
import pytest

from tests.conftest import SAMPLES, source_of
from tracelog import api, parsers
from tracelog.analysis.attention_backend import flash_attention
from tracelog.parsers import nemo
from tracelog.store import Store

SAMPLE = SAMPLES / "nemo2_llama3_8b_pretrain.log"


def collect(text: str | bytes) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for batch in nemo.parse(source_of(text)):
        rows = batch.rows.to_dicts() if isinstance(batch.rows, pl.DataFrame) else list(batch.rows)
        out.setdefault(batch.table, []).extend(rows)
    return out


PRINTER = (
    "Training epoch 0, iteration 10/99 | lr: 1.5e-05 | global_batch_size: 256 | global_step: 10 | "
    "reduced_train_loss: 10.47 | train_step_timing in s: 4.06 | consumed_samples: 2816\n"
)


def test_a_printer_line_fills_the_iteration_columns() -> None:
    (row,) = collect(PRINTER)["iterations"]
    assert row["iteration"] == 10
    assert row["train_iters"] == 100  # the printer shows max_steps - 1
    assert row["learning_rate"] == pytest.approx(1.5e-05)
    assert row["global_batch_size"] == 256
    assert row["lm_loss"] == pytest.approx(10.47)
    assert row["elapsed_s"] == pytest.approx(4.06)
    assert row["consumed_samples"] == 2816


def test_keys_without_a_column_are_metrics_and_global_step_is_the_iteration() -> None:
    line = "Training epoch 1, iteration 3/99 | global_step: 103 | reduced_train_loss: 2.5 | val_loss: 2.61 | TFLOPS: 1234\n"
    out = collect(line)
    assert out["iterations"][0]["iteration"] == 103
    assert {(m["key"], m["value"]) for m in out["iteration_metrics"]} == {
        ("val_loss", 2.61),
        ("validation loss", 2.61),  # a new `val_loss`, under the name show trends
        ("TFLOPS", 1234.0),
    }


def test_the_sample_reads_every_step_once() -> None:
    out = collect(SAMPLE.read_bytes())
    steps = [r["iteration"] for r in out["iterations"]]
    # printer steps 9..69 (the last line cut off) and the bar's 50 and 51; its redraw at 49 repeats the printer
    assert steps == [9, 19, 29, 49, 50, 51, 59, 69]
    by_step = {r["iteration"]: r for r in out["iterations"]}
    assert by_step[19]["tflops_reported"] == pytest.approx(398.9)
    assert by_step[19]["rank"] == 0
    assert by_step[51]["lm_loss"] == pytest.approx(8.062)
    assert by_step[51]["consumed_samples"] == 13312
    assert by_step[49]["line_no"] == 64  # the printer's row, not the bar's redraw of the same step


def test_the_configuration_dump_becomes_run_columns() -> None:
    (run,) = collect(SAMPLE.read_bytes())["runs"]
    expected = {"nodes": 4, "gpus_per_node": 8, "gpus": 32, "tp": 2, "pp": 1, "cp": 2, "dp": 8, "mbs": 1}
    assert {k: run[k] for k in expected} == expected
    assert (run["gbs"], run["seq_len"], run["layers"], run["hidden"], run["heads"]) == (
        256,
        8192,
        32,
        4096,
        32,
    )
    assert (run["query_groups"], run["ffn_hidden"], run["vocab"], run["train_iters"]) == (
        8,
        14336,
        128256,
        100,
    )
    assert run["precision"] == "bf16"
    assert run["sequence_parallel"] is True
    assert run["recompute"] == "none"
    assert "params" not in run  # Lightning's summary counts one shard
    names = {p["name"]: p["value"] for p in run["run_params"]}
    assert names["trainer.strategy.tensor_model_parallel_size"] == "2"
    assert names["data.tokenizer"] == "meta-llama/Meta-Llama-3-8B"
    assert names["lightning Total params"] == "2.0 B"


def test_timer_blocks_attach_to_the_step_before() -> None:
    timers = collect(SAMPLE.read_bytes())["timers"]
    assert [(t["name"], t["iteration"], t["time_min_ms"], t["time_ms"]) for t in timers] == [
        ("forward-backward", 9, 6601.30, 6652.88),
        ("optimizer", 9, 41.02, 44.17),
    ]


def test_all_ranks_and_max_only_timer_layouts() -> None:
    text = (
        PRINTER + "max time across ranks (ms):\n"
        "    forward-backward ...............................: 4049.88\n"
        "times across ranks (ms):\n"
        "  optimizer:\n"
        "     rank  0: 41.02\n"
        "     rank  1: 44.17\n"
    )
    timers = collect(text)["timers"]
    assert [(t["name"], t["rank"], t["time_min_ms"], t["time_ms"]) for t in timers] == [
        ("forward-backward", None, None, 4049.88),
        ("optimizer", 0, None, 41.02),
        ("optimizer", 1, None, 44.17),
    ]


def test_warnings_tracebacks_and_unknown_lines_are_kept() -> None:
    out = collect(SAMPLE.read_bytes())
    kinds = {e["line_no"]: e["kind"] for e in out["events"]}
    assert kinds[1] == "warning"  # torchrun's W0302 line
    assert kinds[2] == "warning"  # [NeMo W ...]
    assert "traceback" in kinds.values() and "error" in kinds.values()
    unparsed = {u["text"] for u in out["unparsed"]}
    assert any("GPU available" in t for t in unparsed)
    assert not any("Training epoch" in t or "time across ranks" in t for t in unparsed)


def test_a_bar_line_drawn_before_any_metric_is_progress_only() -> None:
    out = collect(
        "Epoch 0:   0%|          | 0/100 [00:00<?]\rEpoch 0:   1%|          | 1/100 [00:06<10:53]\n"
    )
    assert "iterations" not in out
    assert "unparsed" not in out


def test_a_long_nemo_setup_before_its_first_printer_line_is_nemos() -> None:
    # Invented, in the shape of a NeMo 2 job's first 64 KiB (a notebook's output, indented): NeMo's logger
    # lines and Megatron-core's parameter count, the printer lines only much later.
    head = (
        "    [NeMo I 2025-06-18 21:55:10 nemo_logging:393] Experiments will be logged at /results/evo2\n"
        "    [NeMo I 2025-06-18 21:55:11 megatron_init:513] Rank 0 has data parallel group : [0]\n"
        "    [NeMo I 2025-06-18 21:55:11 megatron_init:519] All data parallel group ranks with context parallel "
        "combined: [[0]]\n"
        "     > number of parameters on (tensor, pipeline) model parallel rank (0, 0): 1108204800\n"
        "    [NeMo I 2025-06-18 21:55:30 utils:554] Setting up optimizer with config OptimizerConfig(...)\n"
    )
    assert parsers.detect(head, "train.log").FORMAT == "nemo"
    # a Megatron-LM log that says NeMo once (a path, a tokenizer) stays Megatron's
    megatron_head = (
        " > number of parameters on (tensor, pipeline) model parallel rank (0, 0): 1108204800\n"
        "using tokenizer from /models/nemo/tokenizer.model ([NeMo tokenizer])\n"
    )
    assert parsers.detect(megatron_head, "run.log").FORMAT == "megatron"


def test_nemo_run_task_prefixes_and_zoned_timestamps() -> None:
    # Invented, in the shapes NeMo-Run leaves in a job's log: its `task/N ` before torchrun's `[default0]:`
    # (the Lightning summary, NeMo's warnings, blank lines, the printer), and a collector's ISO timestamp
    # with its zone in front of the task.
    text = (
        "retraining/0 [default0]:\n"
        "retraining/0 [default0]:1.1 B     Trainable params\n"
        "retraining/0 [default0]:0         Total Flops\n"
        "retraining/0 [default0]:[NeMo W 2025-08-19 14:27:47 rerun_state_machine:1263] Implicit initialization "
        "of Rerun State Machine!\n"
        "retraining/0 [default0]:Training epoch 0, iteration 0/99 | lr: 1.5e-07 | global_batch_size: 4 | "
        "global_step: 0 | reduced_train_loss: 14.66 | train_step_timing in s: 5.276 | consumed_samples: 4\n"
        "[2025-11-20T14:55:23+08:00] retraining/0 Training epoch 0, iteration 1/99 | lr: 3e-07 | "
        "global_batch_size: 4 | global_step: 1 | reduced_train_loss: 15.07 | train_step_timing in s: 2.008 | "
        "tokens_per_sec_per_gpu: 1.073e+04 | consumed_samples: 8\n"
    )
    out = collect(text)
    rows = [(r["iteration"], r["rank"], r["lm_loss"], r["elapsed_s"]) for r in out["iterations"]]
    assert rows == [(0, 0, 14.66, 5.276), (1, None, 15.07, 2.008)]
    assert [(e["line_no"], e["kind"]) for e in out["events"]] == [(4, "warning")]
    assert "unparsed" not in out
    (run,) = out["runs"]
    assert (run["gbs"], run["train_iters"]) == (4, 100)  # no configuration dump: what the lines say
    params = {p["name"]: p["value"] for p in run["run_params"]}
    assert (params["lightning Trainable params"], params["lightning Total Flops"]) == ("1.1 B", "0")
    (metric,) = out["iteration_metrics"]
    assert (metric["iteration"], metric["key"], metric["value"]) == (1, "tokens_per_sec_per_gpu", 10730.0)


def test_a_bar_of_2023_with_a_nan_loss_and_a_rounded_step(tmp_path) -> None:
    # NVIDIA/NeMo#7957 (2023-11), the line as published: the description drawn `Epoch 0: :`, the step
    # rounded by the bar (`global_step=9e+3`) and a NaN loss printed `nan.0`.
    line = (
        "Epoch 0: :   3%|▎         | 9000/301500 [1:42:42<55:37:46, v_num=0-56, reduced_train_loss=nan.0, "
        "global_step=9e+3, consumed_samples=6.3e+5, train_step_timing in s=0.615, val_loss=7.040]\n"
    )
    # Invented beside it: a later redraw whose rounded step (1.23e+4) is not its own count (12345).
    later = (
        "Epoch 0: :   4%|▍         | 12345/301500 [2:20:49<55:01:01, v_num=0-56, reduced_train_loss=6.812, "
        "global_step=1.23e+4, consumed_samples=8.64e+5, train_step_timing in s=0.611, val_loss=7.040]\n"
    )
    out = collect(line + later)
    first, second = out["iterations"]
    assert (first["iteration"], first["train_iters"], first["elapsed_s"]) == (9000, 301500, 0.615)
    assert first["lm_loss"] != first["lm_loss"]  # NaN, not a missing value
    assert first["consumed_samples"] == 630000
    assert (second["iteration"], second["lm_loss"]) == (12345, 6.812)
    assert {(m["iteration"], m["key"], m["value"]) for m in out["iteration_metrics"]} == {
        (9000, "val_loss", 7.04),
        (9000, "validation loss", 7.04),  # once: the bar repeats the last validation's value
        (12345, "val_loss", 7.04),
    }
    path = tmp_path / "nemo.log"
    path.write_text(line + later)
    db = tmp_path / "t.duckdb"
    (result,) = api.ingest(db, [str(path)])
    assert result.format == "nemo"
    flags = api.flags(db)
    nan = flags[flags["message"].str.contains("NaN")]
    assert nan["severity"].tolist() == ["critical"] and nan["row_ref"].tolist() == ["line 1"]


@pytest.mark.parametrize(
    "name",
    [
        "megatron_lm_llama3_8b_h100.log",
        "megatron_lm_moe_energy_timers.log",
        "megatron_deepspeed_bloom_ugly.log",
    ],
)
def test_megatron_logs_stay_megatrons(name: str) -> None:
    head = (SAMPLES / name).read_text(errors="replace")[:65536]
    assert nemo.detect(head) == 0
    assert parsers.detect(head, name).FORMAT == "megatron"


def test_detected_and_ingested_as_one_nemo_run(tmp_path) -> None:
    assert parsers.detect(SAMPLE.read_text()[:65536], str(SAMPLE)).FORMAT == "nemo"
    with Store(tmp_path / "t.duckdb") as store:
        api.ingest(store, [str(SAMPLE)])
        framework, rows = store.con.execute(
            "SELECT framework, (SELECT count(*) FROM iterations) FROM runs"
        ).fetchone()
    assert framework == "nemo"
    assert rows == 7  # the cut-off last line waits for its newline


def test_a_64_kib_word_is_read_in_linear_time() -> None:
    """The warning regex searched `\\w*error\\b`: on a line of 64 KiB of letters that took minutes."""
    import time

    line = "[default0]:" + "x" * 65536 + " Trainable params\n"
    start = time.perf_counter()
    out = {b.table: b for b in nemo.parse(source_of(line))}
    assert time.perf_counter() - start < 2.0
    assert "unparsed" in out


def test_a_nemo_run_is_modelled_with_fused_attention(tmp_path) -> None:
    """NeMo 2 builds on Transformer Engine layer specs: its attention never materialises the scores,
    though its configuration dump names no attention backend (a Megatron log without `transformer_impl`
    predates Transformer Engine and is modelled unfused)."""
    import dataclasses

    from tracelog.analysis import inputs as run_inputs

    db = tmp_path / "n.duckdb"
    api.ingest(db, [str(SAMPLES / "nemo2_llama3_8b_pretrain.log")], gpu="h100-sxm5-80gb")
    with Store(db) as store:
        (nemo_run,) = run_inputs.load(store)
        assert nemo_run.framework == "nemo" and "transformer_impl" not in nemo_run.run_params
        assert flash_attention(nemo_run.framework, nemo_run.run_params)
        old = dataclasses.replace(nemo_run, framework="megatron")
        assert not flash_attention(old.framework, old.run_params)


def test_peak_memory_in_bytes_on_the_printer_line_is_a_memory_row() -> None:
    # Invented values, in the shape of NeMo 2's performance-recipe printer line as NVIDIA/NeMo#14850 quotes
    # it (Slurm's ` 0: ` task label in front): torch.cuda's peaks in bytes.
    text = "".join(
        f" 0: Training epoch 0, iteration {k}/29 | lr: 5.389e-06 | global_batch_size: 512 | global_step: {k} | "
        f"max_memory_reserved: {reserved} | max_memory_allocated: 53930270720 | reduced_train_loss: 10.22 | "
        "train_step_timing in s: 27.01 | consumed_samples: 4608 | TFLOPS_per_GPU: 48.58\n"
        for k, reserved in ((8, 57466159104), (9, 57675874304))
    )
    out = collect(text)
    assert [
        (m["iteration"], m["rank"], m["max_reserved_mib"], m["max_allocated_mib"]) for m in out["memory"]
    ] == [
        (8, 0, 54804.0, 53930270720 / 2**20),
        (9, 0, 55004.0, 53930270720 / 2**20),
    ]
    assert not [m for m in out.get("iteration_metrics", []) if m["key"].startswith("max_memory")]
    assert [r["elapsed_s"] for r in out["iterations"]] == [27.01, 27.01]


def test_the_older_names_of_the_memory_figures_are_memory_rows() -> None:
    """Before NVIDIA/NeMo#13982 (June 2025) MegatronStrategy logged `peak_memory_usage` (max_memory_reserved)
    and `memory_allocated` (memory_allocated, the current figure), in bytes, as a DGX Cloud recipe's README
    shows them. Invented values in that shape."""
    text = "".join(
        f"Training epoch 0, iteration {k}/49 | lr: 7.496e-06 | global_batch_size: 128 | global_step: {k} | "
        f"peak_memory_usage: {peak} | memory_allocated: 44271689728 | reduced_train_loss: 11.9{k % 10} | "
        "train_step_timing in s: 12.41 | consumed_samples: 6272\n"
        for k, peak in ((47, 70766297088), (48, 70833405952))
    )
    out = collect(text)
    assert [
        (m["iteration"], m["max_reserved_mib"], m["allocated_mib"], m.get("max_allocated_mib"))
        for m in out["memory"]
    ] == [(47, 67488.0, 44271689728 / 2**20, None), (48, 67552.0, 44271689728 / 2**20, None)]
    assert not [m for m in out.get("iteration_metrics", []) if "memory" in m["key"]]


def test_an_error_written_onto_the_bar_is_an_event_and_the_bars_rate_its_step_time() -> None:
    """Another stream's line glued behind the bar (no newline between: a watchdog's error, as pytorch#118369
    quotes one) is kept as an event of that line; without `train_step_timing`, tqdm's rate is the step
    time. Invented lines in that shape."""
    bar = (
        "Epoch 0:   6%|▋         | 32040/500150 [6:28:43<94:39:17,  1.37it/s, v_num=0, reduced_train_loss=2.590, "
        "global_step=3.2e+4, consumed_samples=8.2e+6]"
    )
    watchdog = (
        "[E ProcessGroupNCCL.cpp:458] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=96120, "
        "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800523 milliseconds before timing out."
    )
    out = collect(bar + watchdog + "\n" + "\r".join([bar, "Epoch 0: lost redraw " + watchdog]) + "\n")
    (row,) = out["iterations"]
    assert (row["iteration"], row["lm_loss"]) == (32040, 2.59)
    assert row["elapsed_s"] == pytest.approx(1 / 1.37, abs=1e-6)
    assert [(e["line_no"], e["kind"]) for e in out["events"]] == [(1, "timeout"), (2, "timeout")]
    assert out["events"][0]["text"] == watchdog
    assert "unparsed" not in out


def test_a_plain_lightning_bar_gives_its_loss_and_rate() -> None:
    """A Lightning module's own bar (`self.log("train_loss", loss, prog_bar=True)`; invented line in its
    shape): the loss is the row's loss, the rate its step time."""
    out = collect(
        "Epoch 0:  10%|█         | 10/100 [00:20<03:00,  2.00s/it, v_num=1, train_loss=2.310, global_step=9]\n"
    )
    (row,) = out["iterations"]
    assert (row["iteration"], row["lm_loss"], row["elapsed_s"]) == (9, 2.31, 2.0)


def test_a_launchers_time_before_the_printer_line_is_the_rows_time() -> None:
    """NeMo-Run's `[ISO time] task/rank` prefix (invented lines in its shape); a line without one gets none."""
    line = (
        "{stamp}retraining/0 Training epoch 0, iteration {i}/99 | lr: 1.469e-05 | global_batch_size: 128 | "
        "global_step: {i} | reduced_train_loss: 6.265 | train_step_timing in s: 12.22\n"
    )
    out = collect(
        line.format(stamp="[2025-11-20T14:55:23+08:00] ", i=97)
        + "[2025-11-20T14:55:30+08:00] retraining/0 some other line\n"
        + line.format(stamp="", i=98)
    )
    assert [(r["iteration"], r.get("ts")) for r in out["iterations"]] == [
        (97, datetime(2025, 11, 20, 14, 55, 23)), (98, None)
    ]  # fmt: skip


def test_lightnings_val_loss_is_the_validation_loss() -> None:
    """`val_loss` on the printer line (BioNeMo's NeMo 2 recipes print it; invented figures) is the metric
    `show` trends as the validation loss."""
    out = collect(
        "Training epoch 0, iteration 49/99 | lr: 1e-05 | global_batch_size: 8 | global_step: 49 | "
        "reduced_train_loss: 4.2 | train_step_timing in s: 0.03146 | val_loss: 4.106\n"
    )
    assert sorted((m["iteration"], m["key"], m["value"]) for m in out["iteration_metrics"]) == [
        (49, "val_loss", 4.106),
        (49, "validation loss", 4.106),
    ]


def test_a_bar_that_has_not_measured_its_rate_yet_has_no_step_time() -> None:
    """`0.00it/s` (invented line in tqdm's shape): no seconds per step, and no division by zero."""
    out = collect(
        "Epoch 0:  10%|█         | 10/100 [00:20<03:00,  0.00it/s, v_num=1, train_loss=2.310, global_step=9]\n"
    )
    (row,) = out["iterations"]
    assert (row["iteration"], row["lm_loss"], row.get("elapsed_s")) == (9, 2.31, None)


def test_nemo2s_optimizer_config_gives_the_precision_and_the_distributed_optimizer() -> None:
    """NeMo 2 prints Megatron-Core's OptimizerConfig as its dataclass repr when it sets up the optimizer
    (invented values, the layout of a BioNeMo ESM-2 log behind srun's `0: ` label)."""
    text = (
        "0: [NeMo I 2025-05-08 04:35:15 utils:302] Setting up optimizer with config OptimizerConfig("
        "optimizer='adam', lr=0.0004, min_lr=None, weight_decay=0.01, fp16=False, bf16=True, "
        "params_dtype=torch.bfloat16, use_precision_aware_optimizer=False, loss_scale=None, "
        "use_distributed_optimizer=True, overlap_param_gather_with_optimizer_step=False)\n"
        "0: Training epoch 0, iteration 0/99 | lr: 4e-06 | global_batch_size: 32 | global_step: 0 | "
        "reduced_train_loss: 3.161 | train_step_timing in s: 6.24\n"
        "0: Training epoch 0, iteration 1/99 | lr: 8e-06 | global_batch_size: 32 | global_step: 1 | "
        "reduced_train_loss: 3.078 | train_step_timing in s: 0.512\n"
    )
    out = collect(text)
    (run,) = out["runs"]
    assert run["precision"] == "bf16"
    params = {p["name"]: p["value"] for p in run["run_params"]}
    assert (params["use_distributed_optimizer"], params["optimizer"]) == ("True", "adam")
    assert "unparsed" not in out


def test_megatron_inits_parallel_groups_give_the_layout_and_the_shards_the_size() -> None:
    # Invented, in the words of NeMo's megatron_init and Megatron-core's parameter count (as NVIDIA/NeMo's
    # resiliency example prints them) for TP2 on 8 GPUs, under torchrun's prefix; each rank prints them.
    init = "[default{r}]:[NeMo I 2025-03-07 22:41:39 megatron_init:{n}] All {what} parallel group ranks{how}: {groups}"
    lines = []
    for rank in (0, 1):
        lines += [
            init.format(
                r=rank,
                n=437,
                what="data",
                how=" with context parallel combined",
                groups="[[0, 2, 4, 6], [1, 3, 5, 7]]",
            ),
            init.format(
                r=rank, n=451, what="context", how="", groups="[[0], [1], [2], [3], [4], [5], [6], [7]]"
            ),
            init.format(
                r=rank, n=473, what="tensor model", how="", groups="[[0, 1], [2, 3], [4, 5], [6, 7]]"
            ),
            init.format(
                r=rank,
                n=512,
                what="pipeline model",
                how="",
                groups="[[0], [1], [2], [3], [4], [5], [6], [7]]",
            ),
            f"[default{rank}]:[NeMo I 2025-03-07 22:41:41 megatron_parallel:549]  > number of parameters on "
            f"(tensor, pipeline) model parallel rank ({rank}, 0): {54663936 + rank}",
            "[default0]:[NeMo I 2025-03-07 22:41:41 nemo_logger:145] Experiments will be logged at /tmp/x",
        ]
    out = collect("\n".join(lines) + "\n")
    (run,) = out["runs"]
    assert (run["gpus"], run["tp"], run["pp"], run["cp"], run["dp"]) == (8, 2, 1, 1, 4)
    assert run["params"] == 2 * 54663936 + 1
    names = [p["name"] for p in run["run_params"]]
    assert names.count("tensor model parallel size") == 1 and "world size (parallel groups)" in names


def test_bar_redraws_glued_on_one_line_are_each_read() -> None:
    """A paste that lost the bar's carriage returns (SkyPilot's `sky launch` notes, Ray's `(task, pid=N) `
    prefix before most redraws): each redraw on the line is its own step, its fields cut where the next
    redraw starts, so no `pid` or empty `val_loss` keys."""

    def redraw(n: int, step: int, loss: str, tail: str = "") -> str:
        return (
            f"Epoch 0: :   0%|          | {n}/300000 [02:44<2283:45:02, v_num=1, reduced_train_loss={loss}, "
            f"global_step={step}.000, consumed_samples={192 * (step + 1)}.0, train_step_timing in s=4.580{tail}"
        )

    ray = "(task, pid=6679) "
    line = (
        ray
        + redraw(6, 5, "11.00")
        + ray
        + redraw(7, 6, "10.90")
        + redraw(8, 7, "10.80", ", val_loss=10.95")
        + ray
        + redraw(8, 7, "10.80", ", val_loss=10.95]Epoch 0, global step 8: 'val_loss' reached 10.95")
    )
    out = collect(
        ray + "[NeMo I 2024-07-31 01:02:39 nemo_model_checkpoint:228] Removing old backup\n" + line + "\n"
    )
    assert [
        (r["iteration"], r["lm_loss"], r["consumed_samples"], r["line_no"]) for r in out["iterations"]
    ] == [
        (5, 11.0, 1152, 2),
        (6, 10.9, 1344, 2),
        (7, 10.8, 1536, 2),
    ]
    assert {m["key"] for m in out["iteration_metrics"]} == {"val_loss", "validation loss"}
    assert all(m["value"] == 10.95 for m in out["iteration_metrics"])


def test_a_log_behind_rays_worker_prefix_reads_as_the_plain_log() -> None:
    """SkyPilot runs NeMo under Ray, which puts `(task, pid=6679) ` before every line: the configuration
    dump's lines behind it were read as a host's `key: ` prefix, ended the dump, and its settings and the
    lines after went unread."""
    plain = SAMPLE.read_text()
    ray = "".join(f"(task, pid=6679) {line}" for line in plain.splitlines(keepends=True))
    want, got = collect(plain), collect(ray)
    for table in ("iterations", "events", "timers", "unparsed"):
        assert len(got.get(table, [])) == len(want.get(table, [])), table
    (run,), (ray_run,) = want["runs"], got["runs"]
    assert len(run["run_params"]) > 20 and len(ray_run["run_params"]) == len(run["run_params"])
    columns = ("tp", "pp", "cp", "layers", "hidden", "heads", "seq_len", "gbs", "mbs", "vocab", "precision")
    assert [ray_run[c] for c in columns] == [run[c] for c in columns]


def test_a_rounded_global_step_is_read_with_the_bars_count() -> None:
    """Before Lightning 2.0 the bar counts validation batches too, and tqdm rounds `global_step` to three
    digits where that prints shorter: `34103/1100000` is step 31003 (a million steps and 2000 validations of
    50 batches), printed `3.1e+4`. Three redraws three batches apart are three steps, not one step kept
    once and two dropped, and never the count (34103, 3100 steps too far)."""
    # The three lines as published in aws-samples/awsome-distributed-training,
    # 3.test_cases/14.bionemo/README.md (BioNeMo ESM-1nv on 4 p4de nodes, NeMo 1).
    published = "".join(
        f"Epoch 0:   3%|▎         | {count}/1100000 [{clock}<171:22:21,  1.73it/s, loss=2.52, v_num=, "
        f"reduced_train_loss={loss}, global_step=3.1e+4, consumed_samples=2.54e+8, val_loss=2.510]\n"
        for count, clock, loss in (
            (34103, "5:28:58", "2.510"),
            (34106, "5:29:00", "2.520"),
            (34109, "5:29:02", "2.520"),
        )
    )
    out = collect(published)
    assert [(r["iteration"], r["lm_loss"], r["line_no"]) for r in out["iterations"]] == [
        (31000, 2.51, 1),  # the rounded value: no exact step before it to count on from
        (31003, 2.52, 2),
        (31006, 2.52, 3),
    ]


def test_a_rounded_stretch_counts_on_from_the_last_exact_step() -> None:
    """Invented redraws in the shape of the BioNeMo bar: steps printed whole (`30947.0`) give the offset of
    the bar's count (3103 validation batches); the rounded ones after them are the count less it, held
    within what `3.1e+4` can stand for (30950 to 31050) while a validation's batches move the count alone;
    the next step printed whole is read as printed."""

    def redraw(count: int, step: str, loss: str) -> str:
        return (
            f"Epoch 0:   3%|▎         | {count}/1100000 [5:28:00<171:00:00,  1.73it/s, loss=2.52, v_num=, "
            f"reduced_train_loss={loss}, global_step={step}, consumed_samples=2.54e+8, val_loss=2.510]\n"
        )

    text = (
        redraw(34050, "30947.0", "2.530")
        + redraw(34053, "3.1e+4", "2.520")
        + redraw(34150, "3.1e+4", "2.510")  # 3 steps, then a validation's 50 batches, then 44 steps
        + redraw(34204, "3.1e+4", "2.500")  # the count says 31101: the step is at most 31050
        + redraw(34206, "31052.0", "2.490")
    )
    steps = [(r["iteration"], r["lm_loss"]) for r in collect(text)["iterations"]]
    assert steps == [(30947, 2.53), (30950, 2.52), (31047, 2.51), (31050, 2.5), (31052, 2.49)]


def test_a_pasted_caret_m_between_redraws_is_a_carriage_return() -> None:
    """A terminal copy shows the bar's carriage returns as `^M` (and tqdm's cursor-up before one as `[A`,
    its escape lost), as in a 2024 NeMo p-tuning run's notes. Invented lines in that shape: each `^M` that
    starts a redraw cuts the line there, so the redraws are read and nothing is left over; a `^M` in a
    configuration value is text."""

    def redraw(count: int, loss: str, clock: str = "4:26:54<2:56:10") -> str:
        return (
            f"Epoch 0: :  60%|██████    | {count}/10000 [{clock}, v_num=0, reduced_train_loss={loss}, "
            f"global_step={count - 1}.0, consumed_samples={16 * count}.0, train_step_timing in s=2.590, "
            "val_loss=0.0917]"
        )

    text = (
        "[NeMo I 2024-06-06 16:05:12 train:39] Experiment configuration:\n"
        "model:\n"
        "  peft:\n"
        "    exclude_modules: ^Model.*\n"
        "\n"
        f"[A^M{redraw(6024, '0.0252', '4:26:54<2:56:09')}\n"
        f"^M{redraw(6024, '0.0252')}^M{redraw(6025, '0.0249')}\n"
    )
    out = collect(text)
    assert [(r["iteration"], r["lm_loss"], r["line_no"]) for r in out["iterations"]] == [
        (6023, 0.0252, 6),
        (6024, 0.0249, 7),
    ]
    assert "unparsed" not in out and "events" not in out
    (run,) = out["runs"]
    params = {p["name"]: p["value"] for p in run["run_params"]}
    assert params["model.peft.exclude_modules"] == "^Model.*"


RICH_SUMMARY = """\
┏━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━┳━━━━━━━┓
┃   ┃ Name                             ┃ Type                   ┃ Params ┃ Mode  ┃
┡━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━╇━━━━━━━┩
│ 0 │ module                           │ DDP                    │  1.2 B │ train │
│ 1 │ module.module.module.embedding   │ LanguageModelEmbedding │  262 M │ train │
│ 2 │ module.module.module.decoder     │ TransformerBlock       │  973 M │ train │
└───┴──────────────────────────────────┴────────────────────────┴────────┴───────┘
Trainable params: 1.2 B
Non-trainable params: 0
Total params: 1.2 B
Total estimated model params size (MB): 4.9 K
Modules in train mode: 231
Modules in eval mode: 0
Training epoch 0, iteration 0/99 | lr: 1.5e-07 | global_batch_size: 8 | global_step: 0 | reduced_train_loss: 11.93 | train_step_timing in s: 2.1 | consumed_samples: 8
"""


def test_the_rich_model_summary_is_read_and_its_total_is_the_size_without_model_parallelism() -> None:
    """Lightning's RichModelSummary (a box, then `Total params: 1.2 B`), as a NeMo 2 job prints it before
    its first step (in the shape of a BioNeMo Evo2 log; module names and counts invented). Nothing says the
    model is split, so its total is the run's size, that assumption kept in `params_from`; a log that says
    tensor parallelism 2 keeps it a run parameter only (the shard's count)."""
    out = collect(RICH_SUMMARY)
    assert "unparsed" not in out
    (run,) = out["runs"]
    assert run["params"] == 1_200_000_000
    params = {p["name"]: p["value"] for p in run["run_params"]}
    assert (params["lightning Total params"], params["lightning Modules in train mode"]) == ("1.2 B", "231")
    assert "whole model assumed" in params["params_from"]
    split = "[NeMo I 2025-06-01 10:00:00 megatron_init:360] All tensor model parallel group ranks: [[0, 1]]\n"
    (run,) = collect(split + RICH_SUMMARY)["runs"]
    assert run["tp"] == 2 and "params" not in run
