"""Where a Megatron log's runs begin: a configuration echo after some training, the iteration counter going
back, or the same iteration printed again with other figures once the run before it had ended.

Megatron restarting from a checkpoint prints iterations from the checkpoint's number again; a log that does so
without re-printing its arguments (output appended by a wrapper script, a resumed job) would otherwise put two
passes over the same iterations into one run and shift its medians. Two runs pasted one after the other that
both reach the same iteration (Megatron-LM#1152: an FP8 and a BF16 run, each at iteration 1000, under `# FP08`
and `# BF16` comments) repeat the number instead of going back below it: that repeat starts a run only where a
line between the two says the first pass was over (`PASS_END_RX`), since ranks print the same iteration in turn.
"""

from __future__ import annotations

from typing import Any, Protocol

import polars as pl

from tracelog.parsers.megatron_lines import RANK_PREFIX

# What ends a pass over an iteration before the same number is printed again with other figures. Megatron
# evaluates right after the training line of iteration N (`validation loss at iteration N`, training.py
# `evaluate_and_print_results`), so a second training line of N after it is no line of the same pass; nor is
# one after `[after training is done]`, after `[before the start of training step]` or a checkpoint load (a
# restart: the first line after loading N-10 at a log interval of 10 is N again), or after a `#` comment,
# which no framework prints and a person adds between two pasted logs.
PASS_END_RX = (
    r"loss at iteration \d|\[after training is done\]|\[before the start of training step\]"
    r"|loaded checkpoint|loading checkpoint|^\s*#"
)


class RunCarry(Protocol):
    """What one block hands the next about run boundaries (the parse's carry)."""

    iterations_since_start: bool
    # The last iteration line seen (number, line number, text), for restarts and duplicates across blocks.
    previous: tuple[int | None, int, str] | None
    # A `PASS_END_RX` line came after that iteration line (in an earlier block).
    pass_ended: bool


def run_starts(markers: list[int], iteration_lines: list[int], carry: RunCarry) -> list[int]:
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


def count_at_or_before(points: list[int], line_no: pl.Series, side: Any = "right") -> pl.Series:
    """For each line, how many of the sorted `points` are at or before it (`side="left"`: before it)."""
    return pl.Series(points, dtype=pl.Int64).search_sorted(line_no, side=side).cast(pl.Int32)


def iteration_order(
    frame: pl.DataFrame,
    candidates: pl.DataFrame,
    fitted: pl.DataFrame | None,
    slow_iters: pl.DataFrame,
    markers: list[int],
    carry: RunCarry,
) -> tuple[dict[int, int], dict[int, str]]:
    """Iteration lines that repeat the one before them word for word (line -> the line they copy), and
    lines that start a run with the previous run's configuration (line -> the `restart` event's text): the
    counter going back with no arguments block since the line before, or the same iteration again, from the
    same rank, with other figures, after a line that ended the first pass over it.

    A line printed twice (a duplicated line, `tee` of the same stream) is dropped so that it counts once.
    Ranks print the same iteration in turn, never a lower one after a higher, so a drop is a restart.
    """
    parts = []
    if fitted is not None and not fitted.is_empty():
        parts.append(fitted.select("line_no", "iteration"))
    if not slow_iters.is_empty():
        number = pl.col("line").str.extract(r"iteration\s+(\d+)", 1).cast(pl.Int64, strict=False)
        parts.append(slow_iters.select("line_no", number.alias("iteration")))
    if not parts:
        carry.pass_ended = carry.pass_ended or _ends_a_pass(frame)
        return {}, {}
    if len(parts) == 1 and fitted is not None and fitted.height == candidates.height:
        # The common block: every candidate line fitted a layout, both frames in line order.
        seq = candidates.select("line_no", "line").with_columns(fitted["iteration"])
    else:
        seq = (
            pl.concat(parts)
            .join(candidates.select("line_no", "line"), on="line_no", how="left")
            .sort("line_no")
        )
    before_it, before_no, before_line = carry.previous or (None, 0, None)
    seq = seq.with_columns(
        pl.col("iteration").shift(1, fill_value=before_it).forward_fill().alias("_prev_it"),
        pl.col("line_no").shift(1, fill_value=before_no).alias("_prev_no"),
        pl.col("line").shift(1, fill_value=before_line).alias("_prev_line"),
    )
    ended_before = carry.pass_ended
    last = seq.row(-1, named=True)
    last_it = seq["iteration"].drop_nulls()
    carry.previous = (last_it[-1] if len(last_it) else before_it, last["line_no"], last["line"])
    carry.pass_ended = _ends_a_pass(frame.filter(pl.col("line_no") > last["line_no"]))
    repeat = (pl.col("line") == pl.col("_prev_line")).fill_null(False)
    back = (~repeat & (pl.col("iteration") < pl.col("_prev_it"))).fill_null(False)
    flagged = seq.filter(repeat | back)
    again = seq.filter((~repeat & (pl.col("iteration") == pl.col("_prev_it"))).fill_null(False))
    repeats: dict[int, int] = {}
    restarts: dict[int, str] = {}
    for row in flagged.iter_rows(named=True):
        if row["line"] == row["_prev_line"]:
            repeats[row["line_no"]] = row["_prev_no"]
        elif not any(row["_prev_no"] < m <= row["line_no"] for m in markers):
            restarts[row["line_no"]] = (
                f"iteration {row['iteration']} after {row['_prev_it']} without a new arguments block: a new "
                "run starts here (a restart from a checkpoint), with the previous run's configuration"
            )
    if not again.is_empty():
        for row in _second_passes(frame, again, ended_before).iter_rows(named=True):
            if not any(row["_prev_no"] < m <= row["line_no"] for m in markers):
                said = (
                    f"`{row['_ender'].strip()[:60]}` at line {row['_ender_no']}"
                    if row["_ender_no"] > row["_prev_no"]
                    else "a line after it"
                )
                restarts[row["line_no"]] = (
                    f"iteration {row['iteration']} again (line {row['_prev_no']} printed it) with other "
                    f"figures, after {said} ended that pass: a new run starts here (a restart, or another "
                    "run's log pasted after it), with the previous run's configuration"
                )
    return repeats, restarts


def _ends_a_pass(lines: pl.DataFrame) -> bool:
    return not lines.is_empty() and bool(lines.select(pl.col("line").str.contains(PASS_END_RX).any()).item())


def _second_passes(frame: pl.DataFrame, again: pl.DataFrame, ended_before: bool) -> pl.DataFrame:
    """The iteration lines of `again` (the same number as the line before) from the same rank as that line
    (the same torchrun or srun prefix, or none), their text from `iteration` on not the same (a line printed
    again under another time stamp is no second pass), with a `PASS_END_RX` line between the two (in this
    block, or after the line before in an earlier one): each with that line (`_ender`, `_ender_no`)."""

    def rank(column: str) -> pl.Expr:
        return (
            pl.col(column).str.extract(RANK_PREFIX, 1).fill_null(pl.col(column).str.extract(RANK_PREFIX, 2))
        )

    def body(column: str) -> pl.Expr:
        return pl.col(column).str.slice(pl.col(column).str.find("iteration").fill_null(0))

    ties = again.filter(rank("line").eq_missing(rank("_prev_line")) & (body("line") != body("_prev_line")))
    if ties.is_empty():
        return ties
    # The lines inside some tie's span: the first tie ending after a line holds it when it began before it.
    ends, begins = ties["line_no"], ties["_prev_no"]
    at = ends.search_sorted(frame["line_no"], side="right")
    holder = begins.gather(at.clip(0, ties.height - 1))
    inside = frame.filter((at < ties.height).to_numpy() & (holder < frame["line_no"]).to_numpy())
    enders = inside.filter(pl.col("line").str.contains(PASS_END_RX)).select(
        pl.col("line_no").alias("_ender_no"), pl.col("line").alias("_ender")
    )
    first = int(frame["line_no"][0])
    found = ties.sort("line_no").join_asof(
        enders.sort("_ender_no"), left_on="line_no", right_on="_ender_no", strategy="backward"
    )
    earlier = (pl.col("_prev_no") < first) & pl.lit(ended_before)
    found = found.with_columns(
        pl.when(pl.col("_ender_no") > pl.col("_prev_no"))
        .then(pl.col("_ender"))
        .when(earlier)
        .then(pl.lit(""))
        .alias("_ender"),
        pl.when(pl.col("_ender_no") > pl.col("_prev_no"))
        .then(pl.col("_ender_no"))
        .when(earlier)
        .then(pl.col("_prev_no"))
        .alias("_ender_no"),
    )
    return found.filter(pl.col("_ender").is_not_null())
