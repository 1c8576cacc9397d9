"""Megatron-Bridge's additions to Megatron's iteration lines (NeMo 25.x on): the `Step Time : ...` line
before each logged iteration, and a run parameter glued after an iteration line's last `|`."""

from __future__ import annotations

from typing import Any

import polars as pl

from tracelog.parsers.megatron_lines import PARAMS_BILLIONS_RX, params_billions_name

BRIDGE_STEP_MARK = "Step Time : "
BRIDGE_STEP_RX = r"Step Time : ([\d.]+)s GPU utilization: ([\d.]+)(MODEL_)?TFLOP/s/GPU"
"""Megatron-Bridge's line before each logged iteration (NeMo 25.x on): `Step Time : 4.72s GPU utilization:
554.3MODEL_TFLOP/s/GPU`, the interval's seconds per step and model TFLOP/s per GPU. `training_log`
(megatron/bridge/training/utils/train_utils.py) prints it and then builds that iteration's line, so it
belongs to the iteration line after it (or the one glued behind it on the same line, as a paste without its
newline has it); one whose iteration line is in the next block stays unparsed."""
BRIDGE_TFLOPS_KEY = "GPU utilization (TFLOP/s/GPU)"
NO_GPU_REACHES_TFLOPS = 20000.0
"""Above every dense peak per GPU in the hardware catalog, in any precision (the highest, GB300's FP4, is
15,000 TFLOP/s; `tests/test_parser_megatron_newest.py` holds the catalog under it). Parsers stay pure of
the catalog, so the bound is a figure."""


def bridge_step_metrics(lines: pl.DataFrame, iteration_rows: pl.DataFrame | None) -> pl.DataFrame:
    parts = pl.col("line").str.extract_groups(BRIDGE_STEP_RX)
    texts = lines.select(
        "line_no",
        pl.col("run_key").cast(pl.Int32),
        parts.struct.field("1").alias("seconds_text"),
        parts.struct.field("2").alias("tflops_text"),
    )
    numbers = texts.with_columns(
        pl.col("seconds_text").cast(pl.Float64, strict=False).alias("seconds"),
        pl.col("tflops_text").cast(pl.Float64, strict=False).alias("tflops"),
    ).filter(pl.col("seconds").is_not_null() & pl.col("tflops").is_not_null())
    if iteration_rows is None or numbers.is_empty():
        return numbers.head(0).select("run_key", pl.lit(None, pl.Int64).alias("iteration"))
    after = iteration_rows.select(pl.col("run_key").cast(pl.Int32), "line_no", "iteration").sort("line_no")
    rows = (
        numbers.sort("line_no")
        .join_asof(after, on="line_no", by="run_key", strategy="forward", check_sortedness=False)
        .filter(pl.col("iteration").is_not_null())
    )
    keys = (("step time (s)", "seconds"), (BRIDGE_TFLOPS_KEY, "tflops"))
    return pl.concat(
        [
            rows.select(
                "run_key",
                "iteration",
                pl.lit(key).alias("key"),
                pl.col(value).alias("value"),
                pl.col(f"{value}_text").alias("text"),
                "line_no",
            )
            for key, value in keys
        ]
    ).sort("line_no", maintain_order=True)


def bridge_tflops(iteration_rows: pl.DataFrame, metrics: pl.DataFrame) -> pl.DataFrame:
    """The step line's TFLOP/s as the iteration's own where its line printed none (`--log-throughput`
    off): both are Megatron's model FLOPs over the same interval. A 0.0 is no figure (Megatron-Bridge#1500's
    Nemotron-H run prints `GPU utilization: 0.0MODEL_TFLOP/s/GPU` at 5.2 s a step): it stays a metric only.
    So does one above `NO_GPU_REACHES_TFLOPS`: no measurement (a NeMo 25.09 Llama 3.2 1B run printed 59892.5 at 4.65 s a step, its FLOPs counted at the
    model's `seq_length` of 131072 where the dataset's sequences were 1024)."""
    if metrics.is_empty():
        return iteration_rows
    tflops = (
        metrics.filter(
            (pl.col("key") == BRIDGE_TFLOPS_KEY)
            & (pl.col("value") > 0)
            & (pl.col("value") <= NO_GPU_REACHES_TFLOPS)
        )
        .select(
            pl.col("run_key").cast(iteration_rows.schema["run_key"]),
            "iteration",
            pl.col("value").alias("_bridge_tflops"),
        )
        .unique(["run_key", "iteration"], keep="first")
    )
    joined = iteration_rows.join(tflops, on=["run_key", "iteration"], how="left", maintain_order="left")
    return joined.with_columns(
        pl.coalesce("tflops_reported", "_bridge_tflops").alias("tflops_reported")
    ).drop("_bridge_tflops")


def glued_params(metric: dict[str, Any], runs: dict[int, Any]) -> bool:
    """Megatron-Bridge prints `Number of parameters in transformer layers in billions:  6.98` right after
    an iteration line's last `|` (no newline between): a run parameter, as on a line of its own, not the
    iteration's metric. True when `metric` was one."""
    match = PARAMS_BILLIONS_RX.search(f"|{metric['key']}: {metric['text']}")
    run = runs.get(metric["run_key"])
    if match is None or run is None:
        return False
    name = params_billions_name(match)
    if not any(p["name"] == name for p in run.params):
        run.params.append({"name": name, "value": match.group(5), "line_no": metric["line_no"]})
    return True
