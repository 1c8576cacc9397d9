"""The DeepSpeed engine's step line in a Megatron-DeepSpeed log (`[Rank 0] step=200, skipped=4, lr=[...]`), an
`iteration_metrics` row of its step, and Megatron-DeepSpeed's `actual seqlen` beside the iteration line.
(Megatron-Bridge's `Step Time` line, the other line printed beside the iteration line, is in
`megatron_bridge`.)"""

from __future__ import annotations

import polars as pl

from tracelog.parsers.deepspeed_config import SKIPPED_RUNNING, STEP_HEAD
from tracelog.parsers.megatron_lines import DS_LOGGER

ACTUAL_SEQLEN = "actual seqlen"
"""Megatron-DeepSpeed's `actual seqlen:  4096` on each iteration line: the sequence length its steps ran at
(curriculum learning shortens it early on), the run's `seq_len` where no argument gives one."""


def deepspeed_step_metrics(plain: pl.DataFrame) -> pl.DataFrame:
    """DeepSpeed's step line in a Megatron-DeepSpeed log (`[Rank 0] step=200, skipped=4, lr=[...]`, every
    `steps_per_print` steps): the engine's running count of the steps its optimizer skipped (the fp16 loss
    scaler's overflows, since the start of training: a resumed run's count goes on from its checkpoint),
    kept as `SKIPPED_RUNNING` at step N. Megatron's own `number of skipped iterations` beside it can say
    0 where DeepSpeed skipped (argonne-lcf's Megatron-DeepSpeed on Polaris: `skipped=4` at step 200, 0 on
    every iteration line); the run's skipped count and the health rules take the larger."""
    line = pl.col("line")
    # the literal first: the pattern then runs on DeepSpeed's own lines only
    found = plain.filter(line.str.contains(DS_LOGGER, literal=True)).filter(line.str.contains(STEP_HEAD))
    parts = line.str.extract_groups(STEP_HEAD)
    return found.select(
        pl.col("run_key").cast(pl.Int32),
        parts.struct.field("1").cast(pl.Int64).alias("iteration"),
        pl.lit(SKIPPED_RUNNING).alias("key"),
        parts.struct.field("2").cast(pl.Float64).alias("value"),
        parts.struct.field("2").alias("text"),
        "line_no",
    )
