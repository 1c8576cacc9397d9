"""Megatron's memory reports as rows: `memory (MB) |` of every era (`cached` for reserved in 2019) and
`memory (GB) |` since 2025, one row per `[Rank N]` report; and a fork's memory figure on the iteration line."""

from __future__ import annotations

from typing import Any

import polars as pl

from tracelog.parsers.megatron_lines import NUM, attach_iteration

MEMORY_MARK = "memory (MB) |"
MEMORY_GB_MARK = "memory (GB) |"
"""Megatron-LM's report since 2025 (`report_memory` over `torch.cuda.memory_stats()`): `[Rank 0] (after 1
iterations) memory (GB) | mem-allocated-gigabytes: 51.072 | ... | mem-max-reserved-gigabytes: 216.89 |`."""
MEMORY_FIELDS = {
    "allocated_mib": r"\|\s*allocated:\s*" + NUM,
    "max_allocated_mib": r"max allocated:\s*" + NUM,
    "reserved_mib": r"\|\s*(?:reserved|cached):\s*" + NUM,
    "max_reserved_mib": r"max (?:reserved|cached):\s*" + NUM,
}
"""`cached` is what PyTorch called reserved memory before 1.4 (`torch.cuda.memory_cached`), as the 2019
Megatron-LM prints it: `after 100 iterations memory (MB) | allocated: ... | cached: 9324.0 | max cached: ...`."""
MEMORY_GB_FIELDS = {
    "allocated_mib": r"\|\s*mem-allocated-gigabytes:\s*" + NUM,
    "max_allocated_mib": r"mem-max-allocated-gigabytes:\s*" + NUM,
    "reserved_mib": r"\|\s*mem-reserved-gigabytes:\s*" + NUM,
    "max_reserved_mib": r"mem-max-reserved-gigabytes:\s*" + NUM,
}


def memory_rows(memory: pl.DataFrame, anchors: pl.DataFrame) -> pl.DataFrame:
    """One row per rank's report. Ranks print at once into one stream, and a report that lost its newline
    to another rank's carries the next one on its line (`... max reserved: 13236.0[Rank 6] (after 1
    iterations) memory (MB) | ...`): each `[Rank N]` report of a line is a row of that line."""
    line = pl.col("line")
    memory = (
        memory.with_columns(line.str.replace_all(r"(\S)(\[Rank\s*\d+\])", "${1}\n${2}").str.split("\n"))
        .explode("line")
        .filter(
            line.str.contains(MEMORY_MARK, literal=True) | line.str.contains(MEMORY_GB_MARK, literal=True)
        )
    )

    def value(column: str) -> pl.Expr:
        mib = line.str.extract(MEMORY_FIELDS[column], 1).cast(pl.Float64, strict=False)
        gib = line.str.extract(MEMORY_GB_FIELDS[column], 1).cast(pl.Float64, strict=False)
        return pl.coalesce(mib, gib * 1024.0).alias(column)

    rows = memory.select(
        "line_no",
        "run_key",
        line.str.extract(r"\[Rank\s*(\d+)\]", 1).cast(pl.Int32, strict=False).alias("rank"),
        line.str.extract(r"after\s+(\d+)\s+iterations", 1).cast(pl.Int64, strict=False).alias("_it"),
        *[value(column) for column in MEMORY_FIELDS],
    )
    rows = attach_iteration(rows, anchors)
    return rows.with_columns(pl.coalesce("_it", "iteration").alias("iteration")).drop("_it")


LINE_MEMORY_KEY = "memory(GiB)"
"""ms-swift's Megatron trainer (`megatron sft` / `pt` / `rlhf`) prints on each iteration line `memory(GiB):
21.54`: `round(torch.cuda.max_memory_reserved() / 1024**3, 2)` of the rank that prints the line, the last
(modelscope/ms-swift, swift/megatron/trainers/base.py `training_log`)."""


def line_memory_rows(metrics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The peak reserved memory an iteration line prints (`LINE_MEMORY_KEY`) as a memory row of its
    iteration, the printing rank unnamed."""
    return [
        {
            "line_no": m["line_no"],
            "run_key": m["run_key"],
            "rank": None,
            "iteration": m["iteration"],
            "max_reserved_mib": m["value"] * 1024.0,
        }
        for m in metrics
        if m["key"] == LINE_MEMORY_KEY and m["value"] is not None
    ]
