"""Megatron-LM, Megatron-DeepSpeed and NeMo-Megatron training logs, every era.

Hot lines (iterations, memory reports, `time (ms) |` timers, warnings) are parsed a block at a time with
polars' native string kernels, so a multi-gigabyte log streams at disk speed with flat memory. The rare
lines that need state (the arguments block, `using world size`, parameter counts, min/max timer blocks)
go through a small Python state machine. A new arguments block starts a new run (a restart).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from tracelog.parsers.base import (
    RESUME_TABLE,
    RETRACT_TABLE,
    Batch,
    LineSource,
    guarded,
)
from tracelog.parsers.event_words import WARN_ECHO_RX, WARNING_RX, event_kinds
from tracelog.parsers.megatron_bridge import (
    BRIDGE_STEP_MARK,
    bridge_step_metrics,
    bridge_tflops,
    glued_params,
)
from tracelog.parsers.megatron_config import RunInfo
from tracelog.parsers.megatron_layout import (
    IterationLayout,
    TimerLayout,
    iterations_by_layout,
    timers_by_layout,
)
from tracelog.parsers.megatron_lines import (
    ARGS_END,
    ARGS_START,
    ITER_LINE_RX,
    ITER_MARK,
    ITERATION_COLUMNS,
    SPECIAL_RX,
    STATEFUL_RX,
    TIMER_ALL_HEAD,
    TIMER_MARK,
    TIMER_NAME_RX,
    TIMER_RANK_LITERAL,
    attach_iteration,
    deepspeed_timer_steps,
    generic_metrics,
    iteration_anchors,
    iterations_by_regex,
    per_thousand,
    timers_by_regex,
)
from tracelog.parsers.megatron_memory import MEMORY_GB_MARK, MEMORY_MARK, line_memory_rows, memory_rows
from tracelog.parsers.megatron_runs import count_at_or_before, iteration_order, run_starts
from tracelog.parsers.megatron_spelling import as_classic, partly_read
from tracelog.parsers.megatron_state import ensure_run, stateful_batches
from tracelog.parsers.megatron_steps import ACTUAL_SEQLEN, deepspeed_step_metrics
from tracelog.parsers.megatron_wrap import (
    FOLDED_ITER_LINE_RX,
    cut_figures,
    cut_lines,
    ends_in_wrap_head,
    join_folded,
    join_wrapped,
)

FORMAT = "megatron"
# the resume state and what a parse reads: a grown log saved by an earlier version is parsed again whole
VERSION = "12"  # "6": the 2019 colon-less keys, `cached` memory, partly read lines; "7": an MPI launch;
# "8": Slurm's `CANCELLED AT` glued behind `[after training is done]` is a crash event; "9": folded lines;
# "10": the `ranks_seen` run parameter; "11": a line cut inside its last figure drops that figure; "12": ms-swift's
# `memory(GiB)` on the iteration line as a memory row
# A grown log resumes after its last complete line from the state `parse` hands out (`RESUME_TABLE`);
# the rows of these tables are written again whole at the end of every parse, so a resume replaces them.
FINISH_TABLES = ("run_params",)


SETUP_MARKS = (
    # `pretrain` (megatron/training/training.py, Megatron-DeepSpeed's too) as it starts, every era since 2020
    "time to initialize megatron (seconds):",
    "[after megatron is initialized] datetime:",
    "time across ranks (ms):",
    "[before the start of training step] datetime:",
    "[after dataloaders are built] datetime:",
    "Theoretical memory footprints:",
    f"(after 1 iterations) {MEMORY_MARK}",
    f"(after 1 iterations) {MEMORY_GB_MARK}",
)


RANK_MEMORY_RX = re.compile(r"\[Rank\s*\d+\]\s*\(after\s+\d+\s+iterations\)\s*memory \((?:MB|GB)\) \|")
"""A rank's memory report (`report_memory`): `[Rank 16] (after 10 iterations) memory (MB) | allocated: ...`."""


def detect(head: str) -> int:
    score = own_score(head)
    if not score and (
        any(mark in head for mark in DYING_JOB_MARKS)
        or ("Traceback (most recent call last)" in head and MEGATRON_FRAME_RX.search(head) is not None)
    ):
        return 1  # a job's stderr, or the tail of its log: what killed it (the lowest claim of any parser)
    if not score and len(RANK_MEMORY_RX.findall(head)) >= 2:
        return 1  # ranks' memory reports pasted on their own (one per pipeline stage, to compare them)
    return score


def own_score(head: str) -> int:
    """How sure the head is Megatron's by Megatron's own lines (the DeepSpeed parser defers to these)."""
    score = 0
    if ITER_LINE_RX.search(head) or FOLDED_ITER_LINE_RX.search(head):
        score += 10
    if ARGS_START.search(head):
        score += 8
    if "using world size:" in head:
        score += 6
    if "number of parameters on (tensor, pipeline)" in head:
        score += 6
    # A log cut before its first iteration line (a job that died in its first step, a `tail` of its
    # setup) still says whose it is: Megatron's timer blocks, rank memory reports and setup marks, two of
    # them at least (one may be quoted anywhere).
    marks = sum(mark in head for mark in SETUP_MARKS)
    score += 3 * marks if marks >= 2 else 0
    if "loss at iteration" in head and "lm loss value" in head:  # an evaluation's line: Megatron's alone
        score += 6
    if score and "megatron" in head.lower():
        score += 2
    return score


DYING_JOB_MARKS = (
    "Watchdog caught collective operation timeout",  # PyTorch's ProcessGroupNCCL watchdog
    "Some NCCL operations have failed or timed out",
    "OutOfMemoryError: CUDA out of memory",  # torch.OutOfMemoryError, torch.cuda.OutOfMemoryError (1.13 on)
    "RuntimeError: CUDA out of memory",  # before PyTorch 1.13
    "RuntimeError: CUDA error: out of memory",  # the allocation that failed inside a kernel launch
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError",  # torchrun, one rank failed
    "megatron.core.rerun_state_machine:Unexpected result",  # Megatron-Core's NaN or spike check, which stops the job
    # GPT-NeoX's OverflowMonitor (megatron/utils.py): `Skipped 50 iterations in a row due to Overflow - Exiting
    # training.`, the fp16 loss scale overflowing at every step
    "iterations in a row due to Overflow - Exiting training",
)
"""What a dying PyTorch distributed job prints to its stderr: a file that holds nothing else (Slurm's
`--error` file, a pasted crash) is read for its error lines, which the health rules turn into a critical
flag naming the first one, rather than refused."""
# A traceback through Megatron's own package (`File ".../megatron/training.py", line 562, in train`: Megatron-LM,
# Megatron-DeepSpeed, GPT-NeoX): an exception nobody caught ended the job, its lines bare or behind torchrun's
# `[rank9]: ` (PyTorch 2.3 on). A traceback of any other code is not a claim (it may be anyone's).
MEGATRON_FRAME_RX = re.compile(
    r'^(?:\[(?:rank|default)\d+\]:)?\s*File "[^"\n]*\bmegatron/[^"\n]*\.py", line \d+', re.M
)


@dataclass
class _Carry:
    """What one block hands the next: runs started, arguments-block state, last iteration per run, and the
    line layouts learned so far (a log keeps printing the same keys, so they are learned once)."""

    run_key: int = 0
    iterations_since_start: bool = False
    inside_args: int = 0
    timer_block: bool = False
    timer_all: bool = False  # inside a `times across ranks (ms):` block
    timer_name: str | None = None  # the timer whose `rank N:` lines follow (`--timing-log-option all`)
    timer_line: int = 0  # the last configuration or timer line read, to tell a name from rank lines' gap
    last_iteration: dict[int, int] = field(default_factory=dict)
    # The last iteration line seen (number, line number, text), for restarts and duplicates across blocks.
    previous: tuple[int | None, int, str] | None = None
    pass_ended: bool = False  # a line after it ended the pass over its iteration (`megatron_runs`)
    restarted: list[int] = field(default_factory=list)  # runs that restart the one before them
    # The file's last line when it is an iteration line cut after a field's name (line number, text, run
    # key): the file's growth may start with its other half (`megatron_wrap`).
    wrap_head: tuple[int, str, int] | None = None
    iteration_layouts: list[IterationLayout] = field(default_factory=list)
    timer_layouts: list[TimerLayout] = field(default_factory=list)

    def state(self) -> dict[str, Any]:
        """As JSON, without the layouts: they are learned again from the next lines."""
        return {
            "run_key": self.run_key,
            "iterations_since_start": self.iterations_since_start,
            "inside_args": self.inside_args,
            "timer_block": self.timer_block,
            "last_iteration": sorted([k, v] for k, v in self.last_iteration.items()),
            "previous": list(self.previous) if self.previous is not None else None,
            "pass_ended": self.pass_ended,
            "restarted": self.restarted,
            "wrap_head": list(self.wrap_head) if self.wrap_head is not None else None,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> _Carry:
        previous, wrap_head = state["previous"], state.get("wrap_head")  # absent from states before it
        return cls(
            run_key=int(state["run_key"]),
            iterations_since_start=bool(state["iterations_since_start"]),
            inside_args=int(state["inside_args"]),
            timer_block=bool(state["timer_block"]),
            last_iteration={int(k): int(v) for k, v in state["last_iteration"]},
            previous=(previous[0], int(previous[1]), str(previous[2])) if previous is not None else None,
            pass_ended=bool(state.get("pass_ended", False)),  # absent from states before it
            restarted=[int(k) for k in state["restarted"]],
            wrap_head=(int(wrap_head[0]), str(wrap_head[1]), int(wrap_head[2])) if wrap_head else None,
        )


@guarded
def parse(source: LineSource, fast: bool = True, state: dict[str, Any] | None = None) -> Iterator[Batch]:
    """Batches of every table for a Megatron log; `fast=False` reads every line with the regexes only.

    `state` is what an earlier parse of the same file handed out after its last complete line: the
    parse goes on from there (`source` starts at the next line), as if it had never stopped."""
    carry = _Carry.from_state(state["carry"]) if state else _Carry()
    runs = {run.run_key: run for run in map(RunInfo.from_state, state["runs"])} if state else {}
    yield from _parse_frames(source, carry, runs, fast)
    resume = {"carry": carry.state(), "runs": [runs[key].state() for key in sorted(runs)]}
    yield Batch(RESUME_TABLE, [{"state": json.dumps(resume, sort_keys=True)}])
    for key in carry.restarted:  # in order, so a restart of a restart inherits through it
        if key in runs and key - 1 in runs:
            runs[key].inherit(runs[key - 1])
    for run in runs.values():
        yield Batch("runs", [run.record()])


def _parse_frames(source: LineSource, carry: _Carry, runs: dict[int, RunInfo], fast: bool) -> Iterator[Batch]:
    """Every block parsed in turn; an iteration line cut after a field's name at a block's end waits for
    the next block, where its other half may be, and one at the end of the last parse's lines is read
    again (its rows taken back) when this parse's first line is its other half."""
    held = None
    if carry.wrap_head is not None:
        line_no, text, key = carry.wrap_head
        held = pl.DataFrame(
            {"line_no": [line_no], "line": [text]}, schema={"line_no": pl.Int64, "line": pl.String}
        )
    resumed = held is not None
    for _block, frame in source.frames():
        if resumed and held is not None and not frame.is_empty():
            resumed, carry.wrap_head = False, None
            if join_wrapped(pl.concat([held, frame.head(1)]))["line"][1] != "":
                held = None  # no other half: its rows stand
            else:
                yield Batch(
                    RETRACT_TABLE,
                    [
                        {"table": t, "run_key": key, "line_no": line_no}
                        for t in ("iterations", "iteration_metrics")
                    ],
                )
        if held is not None:
            frame = pl.concat([held, frame])
            held = None
        if ends_in_wrap_head(frame):
            frame, held = frame.head(-1), frame.tail(1)
        yield from _parse_block(join_wrapped(join_folded(frame)), carry, runs, fast)
    if held is not None and not resumed:
        yield from _parse_block(held, carry, runs, fast)
        carry.wrap_head = (int(held["line_no"][0]), str(held["line"][0]), carry.run_key)


def _extend_run(runs: dict[int, RunInfo], key: int, low: int, high: int) -> None:
    run = ensure_run(runs, key, low)
    run.line_end = max(run.line_end or 0, high)


def _ranks_seen(frame: pl.DataFrame, run_key: pl.Expr, runs: dict[int, RunInfo]) -> None:
    """Each run's highest torchrun `[rankN]:` prefix plus one (`RunInfo.ranks_seen`), from the lines that
    start with one (a literal test on every line, the prefix read on those)."""
    ranked = frame.filter(pl.col("line").str.starts_with("[rank"))
    if ranked.is_empty():
        return
    seen = (
        ranked.select(run_key, pl.col("line").str.extract(r"^\[rank(\d+)\]:", 1).cast(pl.Int32, strict=False))
        .group_by("run_key")
        .agg(pl.col("line").max())
    )
    for key, rank in seen.iter_rows():
        if rank is not None and (run := runs.get(key)) is not None:
            run.ranks_seen = max(run.ranks_seen or 0, rank + 1)


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
    frame = as_classic(frame).with_columns(
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
        (
            line.str.contains(MEMORY_MARK, literal=True) | line.str.contains(MEMORY_GB_MARK, literal=True)
        ).alias("memory"),
        line.str.contains(TIMER_RANK_LITERAL, literal=True).alias("rank_line"),
        line.str.contains(TIMER_ALL_HEAD, literal=True).alias("all_head"),
    )

    candidates, cut = cut_figures(frame.filter(pl.col("_iter")).select("line_no", "line"))
    fitted, unfitted = (
        iterations_by_layout(candidates, carry.iteration_layouts) if fast else (None, candidates)
    )
    is_iter = unfitted.select(line.str.contains(r"iteration\s+\d")).to_series()
    slow_iters = unfitted.filter(is_iter)
    not_iters = unfitted.filter(~is_iter)

    markers = special.filter(pl.col("start") | pl.col("world"))["line_no"].to_list()
    repeats, restarts = iteration_order(frame, candidates, fitted, slow_iters, markers, carry)
    if repeats:
        dropped = pl.Series(list(repeats), dtype=pl.Int64).implode()
        fitted = fitted.filter(~pl.col("line_no").is_in(dropped)) if fitted is not None else None
        slow_iters = slow_iters.filter(~pl.col("line_no").is_in(dropped))
        yield Batch(
            "events",
            [
                {
                    "line_no": n,
                    "kind": "duplicate_line",
                    "text": f"exact copy of iteration line {before}; dropped",
                }
                for n, before in repeats.items()
            ],
        )
    has_iterations = fitted is not None and not fitted.is_empty() or not slow_iters.is_empty()
    if markers:
        iteration_lines = sorted(
            [*(fitted["line_no"].to_list() if fitted is not None else []), *slow_iters["line_no"].to_list()]
        )
        starts = run_starts(markers, iteration_lines, carry)
    else:
        starts = []
        if has_iterations:
            carry.iterations_since_start = True
    if restarts:
        starts = sorted({*starts, *restarts})
        yield Batch("events", [{"line_no": n, "kind": "restart", "text": t} for n, t in restarts.items()])
    base_key = carry.run_key
    run_key = (
        pl.lit(base_key, dtype=pl.Int32)
        if not starts
        else pl.col("line_no").map_batches(lambda s: count_at_or_before(starts, s) + base_key, pl.Int32)
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
        if start in restarts:
            carry.restarted.append(key)
    _extend_run(runs, key, low, last_line)

    _ranks_seen(frame, run_key, runs)
    rest = frame.filter(~pl.col("_iter")).select("line_no", "line", "_timer")
    if not not_iters.is_empty():
        rest = pl.concat(
            [rest, not_iters.join(frame.select("line_no", "_timer"), on="line_no")], how="vertical"
        ).sort("line_no", maintain_order=True)
    rest = rest.with_columns(run_key)
    state_lines = special.filter(pl.col("state"))["line_no"].to_list()
    rank_lines = special.filter(pl.col("rank_line"))["line_no"].to_list()
    if rank_lines or carry.timer_all or special["all_head"].any():
        # The `  name:` line above each run of `rank N:` lines names their timer; a block's last line may be
        # the name of rank lines in the next block.
        names = [n - 1 for n in rank_lines]
        if TIMER_NAME_RX.match(frame["line"][-1]):
            names.append(last_line)
        state_lines = sorted({*state_lines, *names})
    memory_lines = special.filter(pl.col("memory"))["line_no"].to_list()
    state = pl.lit(False)
    if inside or arg_starts or arg_ends:
        in_args = (
            pl.col("line_no").map_batches(
                lambda s: (
                    inside + count_at_or_before(arg_starts, s) - count_at_or_before(arg_ends, s, "left")
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
    plain = _compacted(rest.filter(~pl.col("_state") & ~pl.col("_timer") & ~pl.col("_memory")))

    iteration_rows = _iteration_rows(fitted, slow_iters, run_key)
    bridge = plain.filter(line.str.contains(BRIDGE_STEP_MARK, literal=True)).select(
        "line_no", "line", "run_key"
    )
    if iteration_rows is not None:  # a step line glued in front of its iteration line (no newline between)
        glued = candidates.filter(line.str.contains(BRIDGE_STEP_MARK, literal=True))
        if not glued.is_empty():
            glued = glued.select("line_no", "line", run_key)
            bridge = pl.concat([bridge, glued]).sort("line_no")
    bridge_metrics = bridge_step_metrics(bridge, iteration_rows) if not bridge.is_empty() else None
    if iteration_rows is not None and bridge_metrics is not None:
        iteration_rows = bridge_tflops(iteration_rows, bridge_metrics)
    if iteration_rows is not None:
        yield Batch("iterations", iteration_rows.drop("_extra", "_unread"))
        yield from partly_read(candidates, iteration_rows.filter(pl.col("_unread")))
        yield from cut_lines(cut, iteration_rows)
        extra = iteration_rows.filter(pl.col("_extra"))
        if not extra.is_empty():
            metrics = generic_metrics(candidates, extra)
            yield Batch("iteration_metrics", [m for m in metrics if not glued_params(m, runs)])
            if line_memory := line_memory_rows(metrics):
                yield Batch("memory", line_memory)
            for m in metrics:
                if (
                    m["key"].replace("_", " ") == ACTUAL_SEQLEN
                    and m["value"]
                    and (run := runs.get(m["run_key"])) is not None
                ):
                    run.logged_seq_len = int(m["value"])
        for row in (
            iteration_rows.group_by("run_key").agg(pl.col("tflops_reported").is_not_null().any()).iter_rows()
        ):
            if row[1]:
                runs[row[0]].tflops_seen = True

    anchors = iteration_anchors(iteration_rows, carry.last_iteration)
    stateful = rest.filter(pl.col("_state"))
    if not stateful.is_empty():
        yield from stateful_batches(stateful, carry, runs, anchors)
    timers = _compacted(rest.filter(is_timer))
    if not timers.is_empty():
        yield Batch("timers", deepspeed_timer_steps(_timers(timers, anchors, carry, fast), timers, plain))
    memory = rest.filter(is_memory)
    if not memory.is_empty():
        yield Batch("memory", memory_rows(memory, anchors))
    if iteration_rows is not None:
        last = iteration_rows.group_by("run_key").agg(
            pl.col("iteration").last(),
            pl.col("global_batch_size").drop_nulls().last(),
            pl.col("train_iters").drop_nulls().last(),
        )
        for key, it, gbs, train_iters in last.iter_rows():
            if it is not None:
                carry.last_iteration[key] = it
            if (run := runs.get(key)) is not None:
                run.logged_gbs = gbs if gbs is not None else run.logged_gbs
                run.logged_train_iters = train_iters if train_iters is not None else run.logged_train_iters

    if bridge_metrics is not None and not bridge_metrics.is_empty():
        yield Batch("iteration_metrics", bridge_metrics)
        plain = plain.filter(~pl.col("line_no").is_in(bridge_metrics["line_no"].unique().implode()))
    ds_steps = deepspeed_step_metrics(plain)
    if not ds_steps.is_empty():
        yield Batch("iteration_metrics", ds_steps)
        plain = plain.filter(~pl.col("line_no").is_in(ds_steps["line_no"].implode()))
    # Python's `warnings` prints the warning, then the source line that raised it (`  warnings.warn(  # warn
    # only once`): that echo is no second warning
    warned = plain.select(line.str.contains(WARNING_RX) & ~line.str.contains(WARN_ECHO_RX)).to_series()
    events = plain.filter(warned)
    if not events.is_empty():
        yield Batch(
            "events",
            events.select(
                "line_no",
                "run_key",
                event_kinds(events["line"].str.to_lowercase()),
                pl.col("line").alias("text"),
            ),
        )
    other = plain.filter(~warned).filter(line.str.strip_chars() != "")
    if not other.is_empty():
        yield Batch("unparsed", other.select("line_no", pl.col("line").alias("text")))


def _compacted(lines: pl.DataFrame) -> pl.DataFrame:
    """`lines` with their text copied into buffers of its own. A filtered frame's strings still point into
    the whole block's buffers, and polars' string kernels run several times slower over them (a literal
    scan of the timer lines: 90 ns a line, 12 ns once copied); the copy, about 30 ns a line, pays for itself
    at the second kernel. Not for the iteration lines: three times longer, they gain less than it costs.
    The copy comes back through the Arrow C data interface (`_ArrowArray`): `pl.from_arrow` imports
    `pyarrow.compute` (0.05 s of start-up) for a cast it makes only of dictionary arrays."""
    copied = pl.Series(_ArrowArray(lines["line"].to_arrow()))
    return lines.with_columns(copied.alias("line"))


class _ArrowArray:
    """An Arrow array seen through the Arrow PyCapsule interface only (`__arrow_c_array__`), which polars
    imports as it is."""

    def __init__(self, array: Any) -> None:
        self.array = array

    def __arrow_c_array__(self, requested_schema: object | None = None) -> Any:
        return self.array.__arrow_c_array__(requested_schema)


def _iteration_rows(
    fitted: pl.DataFrame | None, slow_lines: pl.DataFrame, run_key: pl.Expr
) -> pl.DataFrame | None:
    """Rows of both paths in line order, with their run key; None when the block has no iteration line."""
    frames = [
        f
        for f in (fitted, iterations_by_regex(slow_lines) if not slow_lines.is_empty() else None)
        if f is not None
    ]
    frames = [f for f in frames if not f.is_empty()]
    if not frames:
        return None
    rows = frames[0] if len(frames) == 1 else pl.concat(frames).sort("line_no", maintain_order=True)
    rows = rows.rechunk()
    # One division for both paths, in numpy: polars divides a column of two or more rows by a scalar
    # through its reciprocal (5512.3 ms -> 5.512300000000001 s) but one row exactly (5.5123 s), so a
    # value would depend on how many iteration lines shared its block.
    seconds = pl.col("elapsed_raw").map_batches(per_thousand, pl.Float64)
    elapsed_s = pl.when(pl.col("_ms")).then(seconds).otherwise(pl.col("elapsed_raw")).alias("elapsed_s")
    return rows.select("line_no", run_key, *ITERATION_COLUMNS[1:-4], elapsed_s, "_extra", "_unread")


def _timers(timers: pl.DataFrame, anchors: pl.DataFrame, carry: _Carry, fast: bool = True) -> pl.DataFrame:
    """`time (ms) | name: value | ...` lines as one row per timer, attached to the iteration before them."""
    frames = []
    left = timers
    if fast:
        for layout, lines in timers_by_layout(timers, carry.timer_layouts):
            if not lines.is_empty():
                frames.append(layout.unpivot(attach_iteration(lines, anchors)))
            left = left.filter(~pl.col("line_no").is_in(lines["line_no"].implode()))
    if not left.is_empty():
        frames.append(timers_by_regex(left, anchors))
    if len(frames) == 1:
        return frames[0]
    return pl.concat(frames).sort("line_no", maintain_order=True)
