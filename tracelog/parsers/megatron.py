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

import numpy as np
import polars as pl
import regex

from tracelog.parsers.base import Batch, LineSource, PipeLayout, plain_number
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

# Literals every line some classification regex matches contains: one substring scan finds the few lines
# the regexes need to see (argument blocks, configuration echoes, memory reports).
SPECIAL_RX = (
    r"arguments|using world size|number of parameters|Theoretical memory footprints|Effective Tera Flops"
    r"|time across ranks|\.\.\.: \(|padded vocab|estimated model parameters:|memory \(MB\) \|"
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
    """What one block hands the next: runs started, arguments-block state, last iteration per run, and the
    line layouts learned so far (a log keeps printing the same keys, so they are learned once)."""

    run_key: int = 0
    iterations_since_start: bool = False
    inside_args: int = 0
    timer_block: bool = False
    last_iteration: dict[int, int] = field(default_factory=dict)
    iteration_layouts: list[_IterationLayout] = field(default_factory=list)
    timer_layouts: list[_TimerLayout] = field(default_factory=list)


def parse(source: LineSource, fast: bool = True) -> Iterator[Batch]:
    """Batches of every table for a Megatron log; `fast=False` reads every line with the regexes only."""
    carry = _Carry()
    runs: dict[int, RunInfo] = {}
    for _block, frame in source.frames():
        yield from _parse_block(frame, carry, runs, fast)
    for run in runs.values():
        yield Batch("runs", [run.record()])


def _ensure_run(runs: dict[int, RunInfo], key: int, line_no: int) -> RunInfo:
    if key not in runs:
        runs[key] = RunInfo(key, line_start=line_no)
    return runs[key]


def _extend_run(runs: dict[int, RunInfo], key: int, low: int, high: int) -> None:
    run = _ensure_run(runs, key, low)
    run.line_end = max(run.line_end or 0, high)


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


def _count_at_or_before(points: list[int], line_no: pl.Series, side: Any = "right") -> pl.Series:
    """For each line, how many of the sorted `points` are at or before it (`side="left"`: before it)."""
    return pl.Series(points, dtype=pl.Int64).search_sorted(line_no, side=side).cast(pl.Int32)


def _among(line_nos: list[int]) -> pl.Expr:
    return (
        pl.col("line_no").is_in(pl.Series(line_nos, dtype=pl.Int64).implode()) if line_nos else pl.lit(False)
    )


def _parse_block(
    frame: pl.DataFrame, carry: _Carry, runs: dict[int, RunInfo], fast: bool = True
) -> Iterator[Batch]:
    """One block: classify every line, then parse each kind of line a whole column at a time.

    Classification scans every line only for plain literals (SIMD substring search); the regexes that decide
    run boundaries, configuration lines and warnings then run on the few lines those literals select.
    """
    if frame.is_empty():
        return
    line = pl.col("line")
    frame = frame.with_columns(
        line.str.contains(ITER_MARK, literal=True).alias("_iter"),
        line.str.contains(TIMER_MARK, literal=True).alias("_timer"),
        line.str.contains(SPECIAL_RX).alias("_special"),
    )
    special = frame.filter(pl.col("_special")).select(
        "line_no",
        (line.str.contains(ARGS_START.pattern) & ~line.str.contains(ARGS_END, literal=True)).alias("start"),
        line.str.contains(ARGS_END, literal=True).alias("end"),
        line.str.contains("using world size:", literal=True).alias("world"),
        line.str.contains(STATEFUL_RX).alias("state"),
        line.str.contains(MEMORY_MARK, literal=True).alias("memory"),
    )

    candidates = frame.filter(pl.col("_iter")).select("line_no", "line")
    fitted, unfitted = _iterations_by_layout(candidates, carry) if fast else (None, candidates)
    is_iter = unfitted.select(line.str.contains(r"iteration\s+\d")).to_series()
    slow_iters = unfitted.filter(is_iter)
    not_iters = unfitted.filter(~is_iter)

    markers = special.filter(pl.col("start") | pl.col("world"))["line_no"].to_list()
    has_iterations = fitted is not None and not fitted.is_empty() or not slow_iters.is_empty()
    if markers:
        iteration_lines = sorted(
            [*(fitted["line_no"].to_list() if fitted is not None else []), *slow_iters["line_no"].to_list()]
        )
        starts = _run_starts(markers, iteration_lines, carry)
    else:
        starts = []
        if has_iterations:
            carry.iterations_since_start = True
    base_key = carry.run_key
    run_key = (
        pl.lit(base_key, dtype=pl.Int32)
        if not starts
        else pl.col("line_no").map_batches(lambda s: _count_at_or_before(starts, s) + base_key, pl.Int32)
    ).alias("run_key")

    arg_starts = special.filter(pl.col("start"))["line_no"].to_list()
    arg_ends = special.filter(pl.col("end"))["line_no"].to_list()
    inside = carry.inside_args
    carry.inside_args = max(0, min(1, inside + len(arg_starts) - len(arg_ends)))
    carry.run_key += len(starts)

    first_line, last_line = int(frame["line_no"][0]), int(frame["line_no"][-1])
    key, low = base_key, first_line
    for start in starts:
        if start > low:
            _extend_run(runs, key, low, start - 1)
        key, low = key + 1, start
    _extend_run(runs, key, low, last_line)

    rest = frame.filter(~pl.col("_iter")).select("line_no", "line", "_timer")
    if not not_iters.is_empty():
        rest = pl.concat(
            [rest, not_iters.join(frame.select("line_no", "_timer"), on="line_no")], how="vertical"
        ).sort("line_no", maintain_order=True)
    rest = rest.with_columns(run_key)
    state_lines = special.filter(pl.col("state"))["line_no"].to_list()
    memory_lines = special.filter(pl.col("memory"))["line_no"].to_list()
    state = pl.lit(False)
    if inside or arg_starts or arg_ends:
        in_args = (
            pl.col("line_no").map_batches(
                lambda s: (
                    inside + _count_at_or_before(arg_starts, s) - _count_at_or_before(arg_ends, s, "left")
                ),
                pl.Int32,
            )
            > 0
        )
        state = state | in_args
    rest = rest.with_columns(
        (state | _among(state_lines)).alias("_state"), _among(memory_lines).alias("_memory")
    )
    is_timer = ~pl.col("_state") & pl.col("_timer")
    is_memory = ~pl.col("_state") & ~pl.col("_timer") & pl.col("_memory")
    plain = rest.filter(~pl.col("_state") & ~pl.col("_timer") & ~pl.col("_memory"))

    iteration_rows = _iteration_rows(fitted, slow_iters, run_key)
    if iteration_rows is not None:
        yield Batch("iterations", iteration_rows.drop("_extra"))
        extra = iteration_rows.filter(pl.col("_extra"))
        if not extra.is_empty():
            yield Batch("iteration_metrics", _generic_metrics(candidates, extra))
        for row in (
            iteration_rows.group_by("run_key").agg(pl.col("tflops_reported").is_not_null().any()).iter_rows()
        ):
            if row[1]:
                runs[row[0]].tflops_seen = True

    anchors = _iteration_anchors(iteration_rows, carry)
    stateful = rest.filter(pl.col("_state"))
    if not stateful.is_empty():
        yield from _stateful(stateful, carry, runs, anchors)
    timers = rest.filter(is_timer)
    if not timers.is_empty():
        yield Batch("timers", _timers(timers, anchors, carry, fast))
    memory = rest.filter(is_memory)
    if not memory.is_empty():
        yield Batch("memory", _memory(memory, anchors))
    if iteration_rows is not None:
        for key, it in iteration_rows.group_by("run_key").agg(pl.col("iteration").last()).iter_rows():
            if it is not None:
                carry.last_iteration[key] = it

    warned = plain.select(line.str.contains(WARNING_RX)).to_series()
    events = plain.filter(warned)
    if not events.is_empty():
        yield Batch(
            "events",
            events.select("line_no", "run_key", _event_kind().alias("kind"), pl.col("line").alias("text")),
        )
    other = plain.filter(~warned).filter(line.str.strip_chars() != "")
    if not other.is_empty():
        yield Batch("unparsed", other.select("line_no", pl.col("line").alias("text")))


def _event_kind() -> pl.Expr:
    lowered = pl.col("line").str.to_lowercase()
    expr: Any = pl
    for kind, word in EVENT_KINDS:
        expr = expr.when(lowered.str.contains(word, literal=True)).then(pl.lit(kind))
    return expr.otherwise(pl.lit("warning"))


ITERATION_COLUMNS = (
    "line_no",
    "iteration",
    "train_iters",
    "consumed_samples",
    "consumed_tokens",
    "learning_rate",
    "global_batch_size",
    "lm_loss",
    "loss_scale",
    "grad_norm",
    "num_zeros",
    "skipped",
    "nan",
    "samples_per_s",
    "tflops_reported",
    "ts",
    "rank",
    "elapsed_raw",
    "_ms",
    "_extra",
)


def _iteration_rows(
    fitted: pl.DataFrame | None, slow_lines: pl.DataFrame, run_key: pl.Expr
) -> pl.DataFrame | None:
    """Rows of both paths in line order, with their run key; None when the block has no iteration line."""
    frames = [
        f for f in (fitted, _iterations(slow_lines) if not slow_lines.is_empty() else None) if f is not None
    ]
    frames = [f for f in frames if not f.is_empty()]
    if not frames:
        return None
    rows = frames[0] if len(frames) == 1 else pl.concat(frames).sort("line_no", maintain_order=True)
    rows = rows.rechunk()
    # One division for both paths: polars divides a column by a scalar through its reciprocal.
    elapsed_s = (
        pl.when(pl.col("_ms")).then(pl.col("elapsed_raw") / 1000.0).otherwise(pl.col("elapsed_raw"))
    ).alias("elapsed_s")
    return rows.select("line_no", run_key, *ITERATION_COLUMNS[1:-3], elapsed_s, "_extra")


def _iterations(iters: pl.DataFrame) -> pl.DataFrame:
    """Iteration lines read with one regex per key: every era and fork, whatever order the keys come in."""
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
    rows = iters.select(
        "line_no",
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
        (pl.col("_fields").cast(pl.Int32) > pl.sum_horizontal(known_fields)).alias("_extra"),
    )
    return rows.filter(pl.col("iteration").is_not_null()).select(ITERATION_COLUMNS)


@dataclass(frozen=True)
class _IterationLayout:
    """An iteration line's layout, learned from one line the regex path read.

    Part 0 is a head (`head`: constant text, or `head` + `[timestamp]` + `tail` when `stamped`), `iteration`,
    the number, `/` at `slash`, the total. Every other part is a key and a plain number (`columns`: column ->
    part), an unknown key whose value must stay free of `:`, `[` and `iteration` (`free`, so no regex could
    match differently inside it), or a part without a colon that must be the same on every line. On a line
    that fits, everything the regex path reads outside those numbers and the timestamp is what it read on the
    example line (`example`): rank, extra keys, missing keys.
    """

    parts: PipeLayout
    head: str
    stamped: bool
    tail: str
    slash: int
    columns: dict[str, int]
    free: tuple[int, ...]
    example: dict[str, Any]

    @property
    def number_at(self) -> int:
        return len(self.head) + (21 + len(self.tail) if self.stamped else 0) + len("iteration")

    def read(self, lines: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        """(rows of the lines that fit, the lines that do not).

        Three passes of vectorised kernels: split, cut the texts out and check the shape, cast and check.
        """
        split = self.parts.split(lines, "line_no")
        p0 = pl.col("_p0")
        number_at = self.number_at
        # A part printed the same on every line of the block (batch size, loss scale, skipped, ...) holds
        # the example's value: one comparison per line instead of cutting, stripping and casting.
        train = p0.str.slice(self.slash + 1)
        same = split.select(
            (train == self.parts.parts[0][self.slash + 1 :]).all().alias("train_iters"),
            *(
                (pl.col(f"_p{k}") == self.parts.parts[k]).all().alias(name)
                for name, k in self.columns.items()
            ),
        ).row(0, named=True)
        read = [name for name in ("train_iters", *self.columns) if not same[name]]
        texts = {
            "iteration": p0.str.slice(number_at, self.slash - number_at).str.strip_chars(),
            **({"train_iters": train.str.strip_chars()} if "train_iters" in read else {}),
            **{name: self.parts.text(k) for name, k in self.columns.items() if name in read},
        }
        whole = frozenset(k for name, k in self.columns.items() if name not in read)
        shape = [self.parts.fits(checked=whole), p0.str.slice(self.slash, 1) == "/"]
        if self.stamped:
            stamp = p0.str.slice(len(self.head) + 1, 19)
            texts["stamp"] = stamp
            shape.append(p0.str.starts_with(self.head + "["))
            shape.append(
                p0.str.slice(len(self.head) + 20, len(self.tail) + 11) == "]" + self.tail + "iteration "
            )
            shape.append(stamp.str.contains(TIMESTAMP_SHAPE))
        else:
            shape.append(p0.str.starts_with(self.head + "iteration "))
        shape.extend(~self.parts.text(k).str.contains(r"[:\[]|iteration") for k in self.free)
        split = split.select(
            "line_no",
            *(text.alias(f"_t_{name}") for name, text in texts.items()),
            pl.all_horizontal(shape).alias("_shape"),
        )
        values, checks = [], [pl.col("_shape")]
        for name in ("iteration", *read):
            value, ok = plain_number(pl.col(f"_t_{name}"), ITERATION_DTYPES[name])
            values.append(value.alias(name))
            checks.append(ok)
        if self.stamped:
            values.append(
                pl.col("_t_stamp")
                .str.replace("T", " ", literal=True)
                .str.to_datetime("%Y-%m-%d %H:%M:%S", strict=False, cache=False)
                .alias("ts")
            )
        split = split.select("line_no", *values, pl.all_horizontal(checks).fill_null(False).alias("_fit"))
        fit = split["_fit"]
        out = []
        for name in ITERATION_COLUMNS:
            if name in ("line_no", "iteration", *read):
                out.append(pl.col(name))
            elif name == "ts" and self.stamped:
                out.append(pl.col("ts"))
            else:
                out.append(pl.lit(self.example[name], dtype=ITERATION_DTYPES[name]).alias(name))
        return split.filter(fit).select(out), lines.filter(~fit)


ITERATION_DTYPES: dict[str, Any] = {
    **{name: dtype for name, (_, dtype) in ITER_FIELDS.items()},
    "line_no": pl.Int64,
    "ts": pl.Datetime("us"),
    "rank": pl.Int32,
    "_ms": pl.Boolean,
    "_extra": pl.Boolean,
}
TIMESTAMP_SHAPE = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}:[0-9]{2}$"
PLAIN_HEAD_RX = regex.compile(r" +[0-9]+ */ *[0-9]+ *")
ITER_FIELD_RX = {name: regex.compile(pattern) for name, (pattern, _) in ITER_FIELDS.items()}
LAYOUTS_KEPT = 8
LEARN_TRIES = 4


def _learn_iteration_layout(line: str) -> _IterationLayout | None:
    """The layout of one iteration line, or None when it is not a shape the fast path reads exactly."""
    parts = PipeLayout.learn(line)
    if parts is None:
        return None
    part0 = parts.parts[0]
    at = part0.find("iteration")
    if at < 0 or not PLAIN_HEAD_RX.fullmatch(part0[at + len("iteration") :]):
        return None
    head, stamped, tail = part0[:at], False, ""
    stamp = TIMESTAMP_RX.search(line)
    if stamp is not None and stamp.end() <= at and stamp.end() - stamp.start() == 21:
        head, stamped, tail = part0[: stamp.start()], True, part0[stamp.end() : at]
    columns: dict[str, int] = {}
    free = []
    for k, key in enumerate(parts.keys):
        if key is None:
            continue
        claims = [name for name, rx in ITER_FIELD_RX.items() if rx.search(key + "0")]
        if len(claims) > 1 or any(name in ("iteration", "train_iters") for name in claims):
            return None
        if not claims:
            free.append(k)
            continue
        match = ITER_FIELD_RX[claims[0]].search(key + "0")
        if claims[0] in columns or match is None or match.start(1) != len(key):
            return None
        columns[claims[0]] = k
    if any(
        rx.search(part0) for name, rx in ITER_FIELD_RX.items() if name not in ("iteration", "train_iters")
    ):
        return None
    example_frame = pl.DataFrame(
        {"line_no": [0], "line": [line]}, schema={"line_no": pl.Int64, "line": pl.String}
    )
    slow = _iterations(example_frame)
    if slow.is_empty():
        return None
    layout = _IterationLayout(
        parts=parts,
        head=head,
        stamped=stamped,
        tail=tail,
        slash=part0.index("/", at),
        columns=columns,
        free=tuple(free),
        example=slow.row(0, named=True),
    )
    fast, _ = layout.read(example_frame)
    return layout if fast.fill_nan(None).equals(slow.fill_nan(None)) else None


def _iterations_by_layout(candidates: pl.DataFrame, carry: _Carry) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(rows of the candidate lines that fit a learned layout, the candidate lines left for the regexes)."""
    done = []
    left = candidates
    for layout in list(carry.iteration_layouts):
        if left.is_empty():
            break
        rows, left = layout.read(left)
        done.append(rows)
    skipped = 0
    while left.height > skipped and skipped < LEARN_TRIES:
        learned = _learn_iteration_layout(left["line"][skipped])
        if learned is None:
            skipped += 1
            continue
        carry.iteration_layouts.insert(0, learned)
        del carry.iteration_layouts[LAYOUTS_KEPT:]
        rows, left = learned.read(left)
        done.append(rows)
    done = [rows for rows in done if not rows.is_empty()]
    if not done:
        return candidates.head(0).select("line_no"), left
    return (done[0] if len(done) == 1 else pl.concat(done).sort("line_no")), left


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


def _timers(timers: pl.DataFrame, anchors: pl.DataFrame, carry: _Carry, fast: bool = True) -> pl.DataFrame:
    """`time (ms) | name: value | ...` lines as one row per timer, attached to the iteration before them."""
    frames = []
    left = timers
    if fast:
        for layout, lines in _timers_by_layout(timers, carry):
            if not lines.is_empty():
                frames.append(layout.unpivot(_attach_iteration(lines, anchors)))
            left = left.filter(~pl.col("line_no").is_in(lines["line_no"].implode()))
    if not left.is_empty():
        frames.append(_timers_by_regex(left, anchors))
    if len(frames) == 1:
        return frames[0]
    return pl.concat(frames).sort("line_no", maintain_order=True)


def _timers_by_regex(timers: pl.DataFrame, anchors: pl.DataFrame) -> pl.DataFrame:
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


@dataclass(frozen=True)
class _TimerLayout:
    """A `time (ms) |` line's layout: which parts hold a timer, and its name as the regex path reads it."""

    parts: PipeLayout
    names: tuple[str, ...]
    keyed: tuple[int, ...]

    def read(self, lines: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        """(line_no, run_key and one value column per timer of the lines that fit, the lines that do not)."""
        split = self.parts.split(lines, "line_no", "run_key")
        values, checks = [], [self.parts.fits()]
        for i, k in enumerate(self.keyed):
            value, ok = plain_number(self.parts.text(k), pl.Float64)
            values.append(value.alias(f"_v{i}"))
            checks.append(ok)
        split = split.select(
            "line_no", "run_key", *values, pl.all_horizontal(checks).fill_null(False).alias("_fit")
        )
        fit = split["_fit"]
        return split.filter(fit).drop("_fit"), lines.filter(~fit)

    def unpivot(self, lines: pl.DataFrame) -> pl.DataFrame:
        """One row per timer, in line order then part order, like the regex path's rows."""
        count, height = len(self.names), lines.height
        row = pl.int_range(0, height * count, eager=True)
        times = np.column_stack([lines[f"_v{i}"].to_numpy() for i in range(count)]).ravel()
        return lines.select("line_no", "run_key", "iteration")[row // count].select(
            "line_no",
            "run_key",
            pl.Series("name", self.names).gather(row % count),
            pl.Series("time_ms", times),
            pl.lit(None, dtype=pl.Float64).alias("time_min_ms"),
            "iteration",
        )


def _learn_timer_layout(line: str) -> _TimerLayout | None:
    parts = PipeLayout.learn(line)
    if parts is None:
        return None
    keyed = tuple(k for k, key in enumerate(parts.keys) if key is not None)
    example = pl.DataFrame(
        {"line_no": [0], "run_key": [0], "line": [line]},
        schema={"line_no": pl.Int64, "run_key": pl.Int32, "line": pl.String},
    )
    no_anchors = _iteration_anchors(None, _Carry())
    slow = _timers_by_regex(example, no_anchors)
    if slow.height != len(keyed) or not keyed:
        return None
    layout = _TimerLayout(parts, tuple(slow["name"].to_list()), keyed)
    fitted, _ = layout.read(example)
    if fitted.is_empty():
        return None
    fast = layout.unpivot(_attach_iteration(fitted, no_anchors))
    return layout if fast.select(slow.columns).equals(slow) else None


def _timers_by_layout(timers: pl.DataFrame, carry: _Carry) -> list[tuple[_TimerLayout, pl.DataFrame]]:
    """The timer lines that fit a learned layout, per layout (learning new ones from lines that fit none)."""
    out = []
    left = timers
    for layout in list(carry.timer_layouts):
        if left.is_empty():
            return out
        fitted, left = layout.read(left)
        out.append((layout, fitted))
    skipped = 0
    while left.height > skipped and skipped < LEARN_TRIES:
        learned = _learn_timer_layout(left["line"][skipped])
        if learned is None:
            skipped += 1
            continue
        carry.timer_layouts.insert(0, learned)
        del carry.timer_layouts[LAYOUTS_KEPT:]
        fitted, left = learned.read(left)
        out.append((learned, fitted))
    return out


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
