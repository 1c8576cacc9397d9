"""Megatron-LM, Megatron-DeepSpeed and NeMo-Megatron training logs, every era.

Hot lines (iterations, memory reports, `time (ms) |` timers, warnings) are parsed a block at a time with
polars' native string kernels, so a multi-gigabyte log streams at disk speed with flat memory. The rare
lines that need state (the arguments block, `using world size`, parameter counts, min/max timer blocks)
go through a small Python state machine. A new arguments block starts a new run (a restart).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import polars as pl
import regex

from tracelog.parsers.base import Batch, LineSource
from tracelog.parsers.megatron_config import RunInfo

FORMAT = "megatron"
VERSION = "1"

NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?i:nan|inf))"
ITER_MARK = "elapsed time per iteration"
TIMER_MARK = "time (ms) |"
MEMORY_MARK = "memory (MB) |"
ARGS_START = regex.compile(r"-{3,}\s*arguments\s*-{3,}")
ARGS_END = "end of arguments"

# Iteration line fields: column -> (pattern with one group, dtype). Aliases across eras share a column.
ITER_FIELDS: dict[str, tuple[str, Any]] = {
    "iteration": (r"iteration\s+(\d+)\s*/", pl.Int64),
    "train_iters": (r"iteration\s+\d+\s*/\s*(\d+)", pl.Int64),
    "consumed_samples": (r"consumed samples:\s*(\d+)", pl.Int64),
    "consumed_tokens": (r"consumed tokens:\s*(\d+)", pl.Int64),
    "elapsed_raw": (r"elapsed time per iteration \(m?s\):\s*" + NUM, pl.Float64),
    "learning_rate": (r"learning rate:\s*" + NUM, pl.Float64),
    "global_batch_size": (r"global batch size:\s*(\d+)", pl.Int64),
    "lm_loss": (r"lm[ _-]loss:\s*" + NUM, pl.Float64),
    "loss_scale": (r"loss scale:\s*" + NUM, pl.Float64),
    "grad_norm": (r"grad[ _-]norm:\s*" + NUM, pl.Float64),
    "num_zeros": (r"num zeros:\s*" + NUM, pl.Float64),
    "skipped": (r"number of skipped iterations:\s*(\d+)", pl.Int64),
    "nan": (r"number of nan iterations:\s*(\d+)", pl.Int64),
    "samples_per_s": (r"samples per second:\s*" + NUM, pl.Float64),
    "tflops_reported": (r"(?:TFLOPs|TFLOP/s/GPU\)|tflops):\s*" + NUM, pl.Float64),
}
# Keys (as printed, normalised) that the columns above already hold; every other key is kept as a metric.
KNOWN_KEYS = {
    "consumed samples",
    "consumed tokens",
    "elapsed time per iteration (ms)",
    "elapsed time per iteration (s)",
    "learning rate",
    "global batch size",
    "lm loss",
    "lm-loss",
    "lm_loss",
    "loss scale",
    "grad norm",
    "grad-norm",
    "grad_norm",
    "num zeros",
    "number of skipped iterations",
    "number of nan iterations",
    "samples per second",
    "tflops",
    "throughput per gpu (tflop/s/gpu)",
}
TIMESTAMP = r"\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)(?:[.,]\d+)?\]"
RANK_PREFIX = r"^\s*(?:\[(?:rank|Rank|RANK)\s*(\d+)\]:?|(\d+):\s)"
MEMORY_FIELDS = {
    "allocated_mib": r"\|\s*allocated:\s*" + NUM,
    "max_allocated_mib": r"max allocated:\s*" + NUM,
    "reserved_mib": r"\|\s*reserved:\s*" + NUM,
    "max_reserved_mib": r"max reserved:\s*" + NUM,
}
WARNING_RX = r"(?i)(traceback \(most recent call last\)|\w*error\b|exception|nccl warn|\w*warn(?:ing)?\b|out of memory|killed|segmentation fault)"
# event kind -> words that mark it, most specific first
EVENT_KINDS = (
    ("traceback", "traceback (most recent call last)"),
    ("oom", "out of memory"),
    ("nccl_warn", "nccl warn"),
    ("crash", "segmentation fault"),
    ("crash", "killed"),
    ("error", "error"),
    ("error", "exception"),
    ("warning", "warn"),
)
# Lines the Python state machine must see (rare: configuration echoes and multi-line timer blocks).
STATEFUL_RX = (
    r"using world size|number of parameters|Theoretical memory footprints|Effective Tera Flops"
    r"|time across ranks|\.\.\.: \(|padded vocab|-{3,}\s*arguments|end of arguments|estimated model parameters:"
)

TIMESTAMP_RX = regex.compile(TIMESTAMP)
RANK_PREFIX_RX = regex.compile(RANK_PREFIX)
ITERATION_PART_RX = regex.compile(r"^\s*iteration\s+\d+")
ARG_LINE_RX = regex.compile(r"^\s*([A-Za-z_][\w.-]*)\s+\.{2,}\s?(.*?)\s*$")
TIMER_BLOCK_LINE_RX = regex.compile(r"^\s*(.+?)\s*\.{2,}:\s*\(\s*" + NUM + r"\s*,\s*" + NUM + r"\s*\)\s*$")
WORLD_RX = regex.compile(r"using world size:\s*(\d+)(.*)")
WORLD_PART_RX = regex.compile(r"([a-z-]+?)[- ]size:\s*(\d+)")
PARAMS_RX = regex.compile(
    r"number of parameters on \(tensor, pipeline\) model parallel rank \((\d+), (\d+)\):\s*(\d+)"
)
EFFECTIVE_RX = regex.compile(
    r"Effective Tera Flops per GPU:\s*" + NUM + r"(?: and total parameters\s*" + NUM + r"\s*B)?"
)
THEORY_RX = regex.compile(
    r"Theoretical memory footprints: weight and optimizer=\s*"
    + NUM
    + r"\s*MB(?:, activation=\s*"
    + NUM
    + r"\s*MB, total=\s*"
    + NUM
    + r"\s*MB)?"
)
ESTIMATED_RX = regex.compile(r"estimated model parameters:\s*" + NUM)
PADDED_RX = regex.compile(r"padded vocab \(size: (\d+)\) with (\d+) dummy tokens \(new size: (\d+)\)")
VALUE_RX = regex.compile(r"^\s*" + NUM + r"\s*(?:([A-Za-z%/]+))?\s*(?:/\s*" + NUM + r")?\s*$")


ITER_LINE_RX = regex.compile(r"iteration\s+\d+\s*/\s*\d+\s*\|.*elapsed time per iteration")


def detect(head: str) -> int:
    score = 0
    if ITER_LINE_RX.search(head):
        score += 10
    if ARGS_START.search(head):
        score += 8
    if "using world size:" in head:
        score += 6
    if "number of parameters on (tensor, pipeline)" in head:
        score += 6
    if score and "megatron" in head.lower():
        score += 2
    return score


@dataclass
class _Carry:
    """What one block hands the next: runs started, arguments-block state, last iteration per run."""

    run_key: int = 0
    iterations_since_start: bool = False
    inside_args: int = 0
    last_iteration: dict[int, int] = field(default_factory=dict)


def parse(source: LineSource) -> Iterator[Batch]:
    carry = _Carry()
    runs: dict[int, RunInfo] = {}
    for block in source.blocks():
        yield from _parse_block(block.frame(), carry, runs)
    for run in runs.values():
        yield Batch("runs", [run.record()])


def _ensure_run(runs: dict[int, RunInfo], key: int, line_no: int) -> RunInfo:
    if key not in runs:
        runs[key] = RunInfo(key, line_start=line_no)
    return runs[key]


def _run_starts(markers: list[int], iteration_lines: list[int], carry: _Carry) -> list[int]:
    """Which configuration echoes begin a new run: those with iterations logged since the last start.

    Megatron prints `using world size` and then the arguments block at every (re)start; only the first
    echo after some training begins a run, so both lines of one start land in the same run.
    """
    starts = []
    position = 0
    for marker in markers:
        while position < len(iteration_lines) and iteration_lines[position] < marker:
            carry.iterations_since_start = True
            position += 1
        if carry.iterations_since_start:
            starts.append(marker)
            carry.iterations_since_start = False
    if position < len(iteration_lines):
        carry.iterations_since_start = True
    return starts


def _parse_block(frame: pl.DataFrame, carry: _Carry, runs: dict[int, RunInfo]) -> Iterator[Batch]:
    line = pl.col("line")
    args_start = line.str.contains(r"-{3,}\s*arguments\s*-{3,}") & ~line.str.contains(ARGS_END, literal=True)
    args_end = line.str.contains(ARGS_END, literal=True)
    is_iter = line.str.contains(ITER_MARK, literal=True) & line.str.contains(r"iteration\s+\d")
    frame = frame.with_columns(
        args_start.alias("_start"),
        args_end.alias("_end"),
        is_iter.alias("_iter"),
        (args_start | line.str.contains("using world size:", literal=True)).alias("_marker"),
    )
    markers = frame.filter(pl.col("_marker"))["line_no"].to_list()
    iteration_lines = frame.filter(pl.col("_iter"))["line_no"].to_list() if markers else []
    starts = _run_starts(markers, iteration_lines, carry)
    if not markers and not frame.filter(pl.col("_iter")).is_empty():
        carry.iterations_since_start = True
    frame = frame.with_columns(
        (pl.col("line_no").is_in(starts).cast(pl.Int32).cum_sum() + carry.run_key).alias("run_key"),
        (
            pl.lit(carry.inside_args)
            + pl.col("_start").cast(pl.Int32).cum_sum()
            - (pl.col("_end").cast(pl.Int32).cum_sum() - pl.col("_end").cast(pl.Int32))
            > 0
        ).alias("_in_args"),
    )
    n_starts = int(frame["_start"].sum())
    n_ends = int(frame["_end"].sum())
    carry.inside_args = max(0, min(1, carry.inside_args + n_starts - n_ends))
    carry.run_key += len(starts)

    kind = (
        pl.when(pl.col("_iter"))
        .then(pl.lit("iter"))
        .when(pl.col("_in_args") | line.str.contains(STATEFUL_RX))
        .then(pl.lit("state"))
        .when(line.str.contains(TIMER_MARK, literal=True))
        .then(pl.lit("timer"))
        .when(line.str.contains(MEMORY_MARK, literal=True))
        .then(pl.lit("memory"))
        .when(line.str.contains(WARNING_RX))
        .then(pl.lit("event"))
        .when(line.str.strip_chars() == "")
        .then(pl.lit("blank"))
        .otherwise(pl.lit("other"))
    )
    frame = frame.with_columns(kind.alias("kind")).drop("_start", "_end", "_iter", "_marker")

    for key, lo, hi in (
        frame.group_by("run_key")
        .agg(pl.col("line_no").min().alias("lo"), pl.col("line_no").max().alias("hi"))
        .iter_rows()
    ):
        run = _ensure_run(runs, key, lo)
        run.line_end = max(run.line_end or 0, hi)

    iters = frame.filter(pl.col("kind") == "iter")
    iteration_rows = _iterations(iters) if not iters.is_empty() else None
    if iteration_rows is not None:
        yield Batch("iterations", iteration_rows.drop("_extra"))
        extra = iteration_rows.filter(pl.col("_extra"))
        if not extra.is_empty():
            yield Batch("iteration_metrics", _generic_metrics(iters, extra))
        for row in (
            iteration_rows.group_by("run_key").agg(pl.col("tflops_reported").is_not_null().any()).iter_rows()
        ):
            if row[1]:
                runs[row[0]].tflops_seen = True

    anchors = _iteration_anchors(iteration_rows, carry)
    stateful = frame.filter(pl.col("kind") == "state")
    if not stateful.is_empty():
        yield from _stateful(stateful, carry, runs, anchors)
    timers = frame.filter(pl.col("kind") == "timer")
    if not timers.is_empty():
        yield Batch("timers", _timers(timers, anchors))
    memory = frame.filter(pl.col("kind") == "memory")
    if not memory.is_empty():
        yield Batch("memory", _memory(memory, anchors))
    if iteration_rows is not None:
        for key, it in iteration_rows.group_by("run_key").agg(pl.col("iteration").last()).iter_rows():
            if it is not None:
                carry.last_iteration[key] = it

    events = frame.filter(pl.col("kind") == "event")
    if not events.is_empty():
        yield Batch(
            "events",
            events.select("line_no", "run_key", _event_kind().alias("kind"), pl.col("line").alias("text")),
        )
    other = frame.filter(pl.col("kind") == "other")
    if not other.is_empty():
        yield Batch("unparsed", other.select("line_no", pl.col("line").alias("text")))


def _event_kind() -> pl.Expr:
    lowered = pl.col("line").str.to_lowercase()
    expr: Any = pl
    for kind, word in EVENT_KINDS:
        expr = expr.when(lowered.str.contains(word, literal=True)).then(pl.lit(kind))
    return expr.otherwise(pl.lit("warning"))


def _iterations(iters: pl.DataFrame) -> pl.DataFrame:
    line = pl.col("line")
    cols = [
        line.str.extract(pattern, 1).cast(dtype, strict=False).alias(name)
        for name, (pattern, dtype) in ITER_FIELDS.items()
    ]
    known_fields = [
        pl.col(name).is_not_null().cast(pl.Int32)
        for name in ITER_FIELDS
        if name not in ("iteration", "train_iters")
    ]
    rows = iters.with_columns(
        *cols,
        line.str.contains(r"elapsed time per iteration \(ms\)").alias("_ms"),
        line.str.extract(TIMESTAMP, 1)
        .str.replace("T", " ")
        .str.to_datetime("%Y-%m-%d %H:%M:%S", strict=False)
        .alias("ts"),
        pl.coalesce(line.str.extract(RANK_PREFIX, 1), line.str.extract(RANK_PREFIX, 2))
        .cast(pl.Int32, strict=False)
        .alias("rank"),
        (line.str.count_matches(r"[^\s|]:\s") - line.str.contains(RANK_PREFIX).cast(pl.UInt32)).alias(
            "_fields"
        ),
    )
    rows = rows.with_columns(
        pl.when(pl.col("_ms"))
        .then(pl.col("elapsed_raw") / 1000.0)
        .otherwise(pl.col("elapsed_raw"))
        .alias("elapsed_s"),
        (pl.col("_fields").cast(pl.Int32) > pl.sum_horizontal(known_fields)).alias("_extra"),
    )
    return rows.filter(pl.col("iteration").is_not_null()).drop(
        "line", "kind", "_in_args", "_ms", "elapsed_raw", "_fields"
    )


def _generic_metrics(iters: pl.DataFrame, extra: pl.DataFrame) -> list[dict[str, Any]]:
    """Every key of an iteration line that has no column of its own, kept as a metric."""
    lines = dict(
        iters.filter(pl.col("line_no").is_in(extra["line_no"].implode()))
        .select("line_no", "line")
        .iter_rows()
    )
    out = []
    for line_no, run_key, iteration in extra.select("line_no", "run_key", "iteration").iter_rows():
        for key, raw in split_fields(lines[line_no]):
            norm = key.lower()
            if norm in KNOWN_KEYS or norm.startswith("iteration") or "tflop" in norm:
                continue
            value, _unit, average = parse_value(raw)
            out.append(
                {
                    "run_key": run_key,
                    "iteration": iteration,
                    "key": key,
                    "value": value,
                    "text": raw,
                    "line_no": line_no,
                }
            )
            if average is not None:
                out.append(
                    {
                        "run_key": run_key,
                        "iteration": iteration,
                        "key": f"{key} (average)",
                        "value": average,
                        "text": raw,
                        "line_no": line_no,
                    }
                )
    return out


def split_fields(line: str) -> list[tuple[str, str]]:
    """`key: value` pairs of a `|`-separated log line, in order, keys stripped of prefixes."""
    pairs = []
    for raw_part in line.split("|"):
        part = RANK_PREFIX_RX.sub("", TIMESTAMP_RX.sub("", raw_part))
        if ":" not in part or ITERATION_PART_RX.match(part):
            continue
        key, _, raw = part.partition(": ") if ": " in part else part.partition(":")
        key = key.strip()
        if key:
            pairs.append((key, raw.strip()))
    return pairs


def parse_value(raw: str) -> tuple[float | None, str | None, float | None]:
    """A number, its unit (`153.81GB`) and the average of a `current/average` pair, where printed."""
    match = VALUE_RX.match(raw)
    if not match:
        return None, None, None
    value = float(match.group(1))
    average = float(match.group(3)) if match.group(3) else None
    return value, match.group(2), average


def _iteration_anchors(iteration_rows: pl.DataFrame | None, carry: _Carry) -> pl.DataFrame:
    """(run_key, line_no, iteration) to attach timers and memory lines to the iteration before them."""
    seed = pl.DataFrame(
        {
            "run_key": list(carry.last_iteration),
            "line_no": [0] * len(carry.last_iteration),
            "iteration": list(carry.last_iteration.values()),
        },
        schema={"run_key": pl.Int32, "line_no": pl.Int64, "iteration": pl.Int64},
    )
    if iteration_rows is None:
        return seed
    now = iteration_rows.select(pl.col("run_key").cast(pl.Int32), "line_no", "iteration")
    return pl.concat([seed, now]).sort("line_no")


def _attach_iteration(rows: pl.DataFrame, anchors: pl.DataFrame) -> pl.DataFrame:
    rows = rows.with_columns(pl.col("run_key").cast(pl.Int32)).sort("line_no")
    return rows.join_asof(anchors, on="line_no", by="run_key", strategy="backward", check_sortedness=False)


def _timers(timers: pl.DataFrame, anchors: pl.DataFrame) -> pl.DataFrame:
    parts = (
        timers.select("line_no", "run_key", pl.col("line").str.split("|").list.slice(1).alias("part"))
        .explode("part")
        .with_columns(
            pl.col("part").str.extract(r"^\s*(.+?)\s*:\s*\S", 1).alias("name"),
            pl.col("part").str.extract(r":\s*" + NUM, 1).cast(pl.Float64, strict=False).alias("time_ms"),
            pl.col("part")
            .str.extract(r":\s*\(?\s*" + NUM + r"\s*,\s*" + NUM, 1)
            .cast(pl.Float64, strict=False)
            .alias("_min"),
            pl.col("part")
            .str.extract(r":\s*\(?\s*" + NUM + r"\s*,\s*" + NUM, 2)
            .cast(pl.Float64, strict=False)
            .alias("_max"),
        )
        .filter(pl.col("name").is_not_null())
        .with_columns(
            pl.coalesce("_max", "time_ms").alias("time_ms"),
            pl.col("_min").alias("time_min_ms"),
        )
        .drop("part", "_min", "_max")
    )
    return _attach_iteration(parts, anchors)


def _memory(memory: pl.DataFrame, anchors: pl.DataFrame) -> pl.DataFrame:
    line = pl.col("line")
    rows = memory.select(
        "line_no",
        "run_key",
        line.str.extract(r"\[Rank\s*(\d+)\]", 1).cast(pl.Int32, strict=False).alias("rank"),
        line.str.extract(r"after\s+(\d+)\s+iterations", 1).cast(pl.Int64, strict=False).alias("_it"),
        *[line.str.extract(p, 1).cast(pl.Float64, strict=False).alias(c) for c, p in MEMORY_FIELDS.items()],
    )
    rows = _attach_iteration(rows, anchors)
    return rows.with_columns(pl.coalesce("_it", "iteration").alias("iteration")).drop("_it")


def _stateful(
    stateful: pl.DataFrame, carry: _Carry, runs: dict[int, RunInfo], anchors: pl.DataFrame
) -> Iterator[Batch]:
    timers: list[dict[str, Any]] = []
    metrics: list[dict[str, Any]] = []
    unparsed: list[dict[str, Any]] = []
    for line_no, raw_line, run_key in stateful.select("line_no", "line", "run_key").iter_rows():
        run = _ensure_run(runs, run_key, line_no)
        line = RANK_PREFIX_RX.sub("", raw_line, count=1)
        if ARGS_START.search(line) or ARGS_END in line:
            continue
        if "time across ranks" in line:
            carry.timer_block = True
            continue
        if match := TIMER_BLOCK_LINE_RX.match(line):
            timers.append(
                {
                    "run_key": run_key,
                    "line_no": line_no,
                    "name": match.group(1),
                    "time_min_ms": float(match.group(2)),
                    "time_ms": float(match.group(3)),
                }
            )
            continue
        if match := ARG_LINE_RX.match(line):
            run.set_arg(match.group(1), match.group(2), line_no)
            continue
        if match := WORLD_RX.search(line):
            run.set_world(int(match.group(1)), dict(WORLD_PART_RX.findall(match.group(2))), line_no)
            continue
        if match := PARAMS_RX.search(line):
            run.add_rank_params(int(match.group(1)), int(match.group(2)), int(match.group(3)))
            continue
        if match := EFFECTIVE_RX.search(line):
            metrics.append(
                {
                    "run_key": run_key,
                    "key": "effective tera flops per gpu",
                    "value": float(match.group(1)),
                    "text": line.strip(),
                    "line_no": line_no,
                }
            )
            if match.group(2):
                run.params_printed = int(float(match.group(2)) * 1e9)
            run.effective_tflops = True
            continue
        if match := THEORY_RX.search(line):
            run.theoretical_memory(match, line_no)
            continue
        if match := PADDED_RX.search(line):
            run.columns["vocab"] = int(match.group(3))
            continue
        if match := ESTIMATED_RX.search(line):
            run.params_printed = int(float(match.group(1)) * 1e9)
            continue
        if line.strip():
            unparsed.append({"line_no": line_no, "text": raw_line})
    if timers:
        yield Batch("timers", _attach_iteration(pl.DataFrame(timers), anchors))
    if metrics:
        yield Batch("iteration_metrics", _attach_iteration(pl.DataFrame(metrics), anchors))
    if unparsed:
        yield Batch("unparsed", unparsed)
