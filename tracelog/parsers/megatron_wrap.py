"""Megatron iteration lines hard-wrapped: in two where the line ends in a field's name and its colon
(`... | learning rate: 1.450E-05 | lm loss:`), the next line starts with that field's value and goes on
with the line's other fields (`7.287670E+00 | loss scale: 8192.0 | number of skipped iterations: 0 | ...`),
as a pasted or terminal-wrapped log shows them (BigScience's 2021 Megatron-DeepSpeed notes).

The two lines are read as the one line Megatron printed: the continuation is joined onto its iteration
line and left empty in its own place. Only a line right after an iteration line that ends in `field:`,
starting with a number and then `| <a field an iteration line has>:`, is taken for a continuation.

A terminal's fold, rows of its width cut anywhere (`join_folded`), is joined back the same way. A line
cut inside its last figure, with no other half (a paste or a log that stops mid-line), keeps its whole
fields only (`cut_figures`).
"""

from __future__ import annotations

import re

import polars as pl

from tracelog.parsers.base import Batch
from tracelog.parsers.megatron_lines import ITER_MARK, KNOWN_KEYS, NUM
from tracelog.parsers.megatron_spelling import partly_read_batches

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


CUT_FIGURE_RX = r"\|\s+[A-Za-z][^|:]{0,80}:\s*" + NUM + r"\s*$"
"""An iteration line that ends in a field's figure: Megatron closes every field of the line with ` |` and
opens it with a blank (` key: value |`, megatron/training/training.py `training_log`, every era and fork),
so the line was cut there, and the figure may have lost digits (` lm loss: 2` of ` lm loss: 2.504220E+00 |`).
Another print glued behind the last `|` (`|Number of parameters ... in billions:  6.98`) is no field."""


def cut_figures(lines: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Iteration `lines` with the figure a cut line ends in taken off (its whole fields stand), and those
    lines as printed: a figure cut short is a wrong figure, not a smaller one. A line that names no
    iteration is no iteration line, and is left as it is."""
    line = pl.col("line")
    # a whole line ends in its last field's ` |`: only the few that do not are searched for a cut figure
    # (the pattern, run over every iteration line of a 1 GB log, cost 0.6 CPU s)
    open_ended = lines.filter(~line.str.strip_chars_end().str.ends_with("|"))
    cut = open_ended.filter(line.str.contains(r"iteration\s+\d") & line.str.contains(CUT_FIGURE_RX))
    if cut.is_empty():
        return lines, lines.clear()
    kept = lines.select(
        "line_no",
        pl.when(pl.col("line_no").is_in(cut["line_no"].implode()))
        .then(line.str.replace(CUT_FIGURE_RX, "|"))
        .otherwise(line)
        .alias("line"),
    )
    return kept, cut.select("line_no", "line")


def cut_lines(cut: pl.DataFrame, rows: pl.DataFrame) -> list[Batch]:
    """The lines `cut_figures` took a figure off: each stays `unparsed` as well as read, and an event names
    the figure not kept (the run of the row the line gave)."""
    if cut.is_empty():
        return []
    texts = cut.join(rows.select("line_no", "run_key"), on="line_no", how="left").sort("line_no")
    figure = pl.col("line").str.extract(r"\|\s*([A-Za-z][^|:]{0,80}:\s*\S+)\s*$", 1)
    message = pl.concat_str(
        [pl.lit("iteration line cut inside its last figure, `"), figure, pl.lit("` not kept")]
    )
    return partly_read_batches(texts, message)


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


# A terminal's fold: an iteration line longer than the terminal is cut into rows of its width W wherever
# the W-th character falls, mid-word included (`... | global batch si` / `ze:     8 | lm loss: ...`), and a
# copy trims the blank a row may end in (a W-1 row, its blank the join's). Megatron-Bridge's logs pasted
# from an 86-column terminal (NVIDIA-NeMo/Megatron-Bridge#536) show it.
FOLD_HEAD_RX = r"\biteration\s+\d+\s*/\s*\d+\s*\|"
FOLDED_ITER_LINE_RX = re.compile(
    r"iteration\s+\d+\s*/\s*\d+\s*\|[^\n]*\n[^\n]*elapsed[ _]time[ _]per[ _]iteration"
)
"""An iteration line folded before its time (`... iteration  190/  200 | consumed samples:  1520 |`, then
`elapsed time per iteration (ms): 623.4 | ...`): detection's mark of a Megatron log as `ITER_LINE_RX`."""
FOLD_MIN_WIDTH = 80
"""The narrowest terminal whose rows are taken for a fold (a terminal's default width; a shorter row is a
line of its own)."""
KEY_START_RX = (
    r"^\s*(?i:" + "|".join(re.escape(key) for key in sorted(KNOWN_KEYS, key=len, reverse=True)) + r")\s*:"
)
FIELD_RX = re.compile(r"^\s*([A-Za-z][^:|]*?)\s*:\s*" + NUM + r"\s*$")
"""A whole field of an iteration line: its name and one number."""


def join_folded(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with each iteration line a terminal folded into rows joined back at its first row, the other
    rows emptied. A row continues the one before when that one is W or W-1 characters long (W the width,
    learnt from the first continuation) and does not start an iteration line, and every field a join
    falls in is a whole known field (`global batch si` + `ze:     8` is `global batch size: 8`; a blank is
    put back where the row before is W-1 long or where only that makes the field whole)."""
    if frame.height < 2:
        return frame
    line = pl.col("line")
    following = pl.col("_next")
    # cheap tests over the block first: literals, byte lengths (stored with a string view; a row of W
    # characters has W bytes or more) and an anchored regex; a whole iteration line ends in `|` (Megatron
    # closes every field with ` |`), and is a candidate only where a known field starts the next row.
    # The exact tests and the regexes then see the few rows left.
    index = frame.select(
        pl.arg_where(
            line.str.contains("iteration", literal=True)
            & (line.str.len_bytes() >= FOLD_MIN_WIDTH - 1)
            & (~line.str.ends_with("|") | line.str.contains(KEY_START_RX).shift(-1).fill_null(False))
        ).alias("_i")
    ).to_series()
    index = index.filter(index < frame.height - 1)
    if index.is_empty():
        return frame
    nexts = index + 1
    candidates = pl.DataFrame(
        {
            "_i": index,
            "line": frame["line"].gather(index),
            "_next": frame["line"].gather(nexts),
            "_joined": frame["line_no"].gather(nexts) - frame["line_no"].gather(index) == 1,
        }
    ).filter(
        pl.col("_joined")
        & (~line.str.contains(r"\|\s*$") | following.str.contains(KEY_START_RX))
        & (line.str.len_chars() >= FOLD_MIN_WIDTH - 1)
        & line.str.contains(FOLD_HEAD_RX)
        & ~following.str.contains(FOLD_HEAD_RX)
    )
    if candidates.is_empty():
        return frame
    lines = frame["line"].to_list()
    numbers = frame["line_no"].to_list()
    joined = False
    for head in candidates["_i"].to_list():
        if lines[head] == "":
            continue  # a row of an earlier fold
        rows, width = _fold_rows(lines, numbers, head)
        last, rest = _row_and_rest(lines[rows[-1]], width)
        text = _joined([*(lines[row] for row in rows[:-1]), last])
        if text is not None:
            lines[head] = text
            for row in rows[1:]:
                lines[row] = ""
            lines[rows[-1]] = rest  # the next line, where the paste lost its line end
            joined = True
    return frame.with_columns(pl.Series("line", lines, dtype=pl.String)) if joined else frame


def _fold_rows(lines: list[str], numbers: list[int], head: int) -> tuple[list[int], int | None]:
    """The rows a fold at `head` may span and its width: while the row before is a full row (W or W-1
    long, W the first continuation's length where that is at least the head's), the next row that starts no
    iteration line."""
    rows, width = [head], None
    for at in range(head + 1, len(lines)):
        if numbers[at] != numbers[at - 1] + 1 or re.search(FOLD_HEAD_RX, lines[at]) or not lines[at].strip():
            break
        before = len(lines[rows[-1]])
        if width is None and len(lines[at]) >= before and len(lines[at]) - before <= 1:
            width = len(lines[at])
        if len(rows) > 1 and (width is None or before not in (width, width - 1)):
            break
        rows.append(at)
        if width is None:
            break  # a single row after the head, shorter or longer: the fold's last
    return rows, width


def _row_and_rest(row: str, width: int | None) -> tuple[str, str]:
    """A fold's last row, and what follows it on the same line: the terminal pads the row with blanks to its
    width, and a paste that lost the line end after it glues the next line there (`... iterations:   0 |`,
    blanks, ` > padded vocab (size: 10000) ...`)."""
    if width is None or len(row) <= width or row[width - 1] != " " or not row[:width].strip():
        return row, ""
    return row[:width].rstrip(), row[width:]


def _joined(rows: list[str]) -> str | None:
    """The rows joined, each join without a blank or with one, whichever leaves the field it falls in a
    whole known field (a blank only where that alone does); None where no join does."""
    if len(rows) < 2:
        return None
    text = rows[0]
    for piece in rows[1:]:
        for glue in (" ", "") if text.endswith("|") else ("", " "):
            if _whole_at(text + glue + piece, len(text)):
                text = text + glue + piece
                break
        else:
            return None
    return text


def _whole_at(text: str, at: int) -> bool:
    """Whether the field of `text` the offset `at` falls in (or starts at) is a whole known field, or, where
    the join is at a field's edge, a whole field of any name."""
    start = text.rfind("|", 0, at) + 1
    end = text.find("|", at)
    if end < 0:
        return False
    field = text[start:end]
    match = FIELD_RX.match(field)
    if match is None:
        if field.strip():
            return False
        end2 = text.find("|", end + 1)  # the join fell on `|`: the field after it
        match = FIELD_RX.match(text[end + 1 : end2]) if end2 > 0 else None
        return match is not None
    at_edge = text[start:at].strip() == "" or text[at:end].strip() == ""
    return at_edge or match.group(1).strip().lower() in KNOWN_KEYS
