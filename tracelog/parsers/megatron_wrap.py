"""Megatron iteration lines hard-wrapped in two: the line ends in a field's name and its colon
(`... | learning rate: 1.450E-05 | lm loss:`), the next line starts with that field's value and goes on
with the line's other fields (`7.287670E+00 | loss scale: 8192.0 | number of skipped iterations: 0 | ...`),
as a pasted or terminal-wrapped log shows them (BigScience's 2021 Megatron-DeepSpeed notes).

The two lines are read as the one line Megatron printed: the continuation is joined onto its iteration
line and left empty in its own place. Only a line right after an iteration line that ends in `field:`,
starting with a number and then `| <a field an iteration line has>:`, is taken for a continuation.
"""

from __future__ import annotations

import re

import polars as pl

from tracelog.parsers.megatron_lines import ITER_MARK, KNOWN_KEYS, NUM

WRAP_HEAD_RX = r"\|\s*[A-Za-z][^|:]{0,80}:\s*$"
"""An iteration line cut after a field's name: its last `|` is followed by a name and a colon only."""
CONTINUATION_RX = (
    r"^\s*"
    + NUM
    + r"\s*\|\s*(?i:"
    + "|".join(re.escape(key) for key in sorted(KNOWN_KEYS, key=len, reverse=True))
    + r"):"
)
"""A wrapped iteration line's second half: the value of the field the first half ended with, then
another field of an iteration line."""


def wrap_heads() -> pl.Expr:
    """Lines that are iteration lines cut after a field's name."""
    line = pl.col("line")
    return (
        line.str.contains(r":\s*$")
        & line.str.contains(ITER_MARK, literal=True)
        & line.str.contains(WRAP_HEAD_RX)
    )


def ends_in_wrap_head(frame: pl.DataFrame) -> bool:
    """Whether the last line of `frame` is an iteration line cut after a field's name: its other half
    may be the first line of the next block (or of the file's next growth)."""
    return not frame.is_empty() and frame.tail(1).select(wrap_heads()).item()


def join_wrapped(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with each continuation joined onto the iteration line before it and emptied in its place."""
    if frame.height < 2:
        return frame
    line = pl.col("line")
    continued = line.str.contains(CONTINUATION_RX)
    if not frame.select(continued.any()).item():
        return frame
    joins = (
        continued & wrap_heads().shift(1, fill_value=False) & (pl.col("line_no").diff() == 1).fill_null(False)
    )
    marked = frame.with_columns(joins.alias("_joins"))
    head = pl.col("_joins").shift(-1, fill_value=False)
    return marked.select(
        "line_no",
        pl.when(head)
        .then(line.str.strip_chars_end() + pl.lit(" ") + line.shift(-1).str.strip_chars_start())
        .when(pl.col("_joins"))
        .then(pl.lit(""))
        .otherwise(line)
        .alias("line"),
    )
