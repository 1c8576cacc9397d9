"""Tabular output for the CLI: rich tables on a terminal, or csv / json / markdown for pipes."""

from __future__ import annotations

import math
import os
import sys
from decimal import Decimal
from functools import cache
from typing import TYPE_CHECKING, Any

import click

from tracelog.store.rows import Rows

if TYPE_CHECKING:
    import pandas as pd
    from rich.console import Console

FORMATS = ("table", "csv", "json", "markdown")
SCREEN_ROWS = 50
"""Rows a table shows when the output is not a terminal (whose own height is used otherwise); csv, json
and markdown, the formats for machines and documents, print every row."""


def _missing(value: Any) -> bool:
    """No value: SQL's NULL. A NaN read from the store is a value (a loss that went NaN) and prints `nan`;
    a pandas frame cannot tell the two apart, and `as_rows` turns its NaN into None."""
    if value is None:
        return True
    pandas = sys.modules.get("pandas")  # pd.NA and NaT come only in a frame, which means pandas is loaded
    return pandas is not None and (value is pandas.NA or value is pandas.NaT)


def _cell(value: Any) -> str:
    if _missing(value):
        return ""
    if isinstance(value, Decimal):
        value = float(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)  # nan, inf, -inf
        if abs(value) >= 1e15:  # past any count a log holds: digits by the hundred say nothing
            return f"{value:.4g}"
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:,.0f}"  # .4g writes 12710 as 1.271e+04
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value))
    return str(value)


FOLDED_TEXT_WIDTH = 24
"""Width a text column is counted at when fitting a table: rich folds longer names onto more lines."""


def pick_columns(frame: pd.DataFrame | Rows, columns: str | None) -> Any:
    """The columns named in `--columns a,b,c`, in that order; an unknown name lists the known ones."""
    if not columns:
        return frame
    wanted = [c.strip() for c in columns.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in list(frame.columns)]
    if unknown:
        raise click.BadParameter(
            f"no column {', '.join(unknown)}; columns: {', '.join(map(str, frame.columns))}",
            param_hint="--columns",
        )
    return frame.select(wanted) if isinstance(frame, Rows) else frame[wanted]


def as_rows(frame: pd.DataFrame | Rows) -> Rows:
    """A frame's rows as printed in a table (a frame means pandas is loaded)."""
    if isinstance(frame, Rows):
        return frame
    types = sys.modules["pandas"].api.types
    return Rows(
        [str(c) for c in frame.columns],
        [bool(types.is_numeric_dtype(frame[c])) for c in frame.columns],
        [
            tuple(None if isinstance(v, float) and math.isnan(v) else v for v in row)
            for row in frame.itertuples(index=False, name=None)
        ],
    )


def as_frame(rows: pd.DataFrame | Rows) -> pd.DataFrame:
    """Rows as a DataFrame, for the formats pandas writes (csv, json, markdown)."""
    if not isinstance(rows, Rows):
        return rows
    import pandas as pd  # only a machine format from plain rows needs it; a table does not

    return pd.DataFrame.from_records(rows.data, columns=rows.columns)


def _header(column: Any) -> str:
    """A fitted table's header: `sec_per_it_predicted` as `sec per it predicted`, which wraps onto two
    lines where the width is short (a pipe, csv, json and markdown keep the column's name)."""
    return str(column).replace("_", " ")


HEADER_LINE = 10
"""The width a header's words fill before they wrap (`sec per it` on one line, `sec per it` / `predicted`)."""


def column_width(frame: Rows, column: str, numeric: bool) -> tuple[int, int]:
    """The characters a column takes in a table that fits: its widest cell, or its header's longest word
    and at least HEADER_LINE of it (a header wraps between words); a text column folds past
    FOLDED_TEXT_WIDTH. And its widest cell, what a folded column may grow to."""
    label = _header(column)
    header = max([min(len(label), HEADER_LINE), *(len(word) for word in label.split())])
    widest = max((len(_cell(v)) for v in frame.column(column)), default=0)
    need = max(header, widest)
    return (need if numeric else min(need, max(FOLDED_TEXT_WIDTH, header))), widest


def fit_columns(frame: Rows, width: int) -> tuple[Rows, list[str], dict[str, int]]:
    """The leading columns whose cells fit in `width` characters of rich table, the names left out, and
    each kept column's width: as `column_width` counts it, and the room the table leaves then given to the
    folded text columns, first column first, up to their widest cell (a `show` summary's name on one line
    where the terminal has room for it). Commands list their most useful columns first, so the right of a
    wide table goes."""
    used = 1  # the left border
    widths: dict[str, int] = {}
    folded: dict[str, int] = {}  # text columns and their widest cell
    for column, numeric in zip(frame.columns, frame.numeric, strict=True):
        need, widest = column_width(frame, column, numeric)
        if widths and used + need + 3 > width:
            break
        used += need + 3  # padding either side and the column's border
        widths[column] = need
        if not numeric:
            folded[column] = widest
    spare = width - used
    for column, widest in folded.items():
        grow = min(max(0, widest - widths[column]), max(0, spare))
        widths[column] += grow
        spare -= grow
    return frame.select(list(widths)), [c for c in frame.columns if c not in widths], widths


def render(
    frame: pd.DataFrame | Rows, fmt: str = "table", title: str | None = None, columns: str | None = None
) -> None:
    """Print a frame, or plain rows. Log-derived text is printed literally (rich markup is not
    interpreted). A table fits the terminal's width (or $COLUMNS): the columns past it are named, not
    wrapped into a wall of text."""
    picked = pick_columns(frame, columns)
    if fmt == "table":
        _table(picked, title)
        return
    frame = as_frame(picked)
    if fmt == "csv":
        click.echo(frame.to_csv(index=False), nl=False)
    elif fmt == "json":
        click.echo(frame.to_json(orient="records", date_format="iso", indent=2))
    elif fmt == "markdown":
        if title:
            click.echo(f"### {title}\n")
        click.echo(frame.astype(object).where(frame.notna(), "").to_markdown(index=False))
        click.echo()


@cache
def _console_class() -> type[Console]:
    """The console tables are printed on. rich (15 ms of start-up) is loaded by the first table printed,
    not by every command: an ingest prints none."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            """The reader of the pipe stopped (`| head`): handed to the command line, which ends quietly
            with status 0 as after the other formats (rich's own answer is status 1)."""
            self.quiet = True
            raise BrokenPipeError

    return _Console


def _table(frame: pd.DataFrame | Rows, title: str | None) -> None:
    """A rich table: as many rows as the terminal shows (SCREEN_ROWS in a pipe), columns that fit."""
    from rich.table import Table

    console_class = _console_class()
    console = console_class(markup=False, emoji=False, highlight=False)
    rows = max(10, console.size.height - 8) if console.is_terminal else SCREEN_ROWS
    fits = console.is_terminal or bool(os.environ.get("COLUMNS"))
    hidden: list[str] = []
    widths: dict[str, int] = {}
    shown = as_rows(frame.head(rows))
    if fits:
        # the widths `fit_columns` counted are drawn as the most: rich would otherwise share the room out
        # anew and fold a short name or figure (`live.lo` / `g`) to widen a header
        shown, hidden, widths = fit_columns(shown, console.width)
    else:
        console = console_class(markup=False, emoji=False, highlight=False, width=100_000)
    table = Table(title=title, show_lines=False, header_style="bold")
    for column, numeric in zip(shown.columns, shown.numeric, strict=True):
        label = _header(column) if fits else str(column)
        table.add_column(
            label, justify="right" if numeric else "left", overflow="fold", max_width=widths.get(column)
        )
    for row in shown.data:
        table.add_row(*(_cell(v) for v in row))
    console.print(table)
    if hidden:
        console.print(
            f"{len(hidden)} more columns do not fit: {', '.join(hidden)} (--columns to choose, --format csv for all)"
        )
    if len(frame) == 0:
        console.print("(no rows)")
    elif len(frame) > rows:
        console.print(f"... {len(frame) - rows:,} more rows: --format csv, json or markdown prints them all")
