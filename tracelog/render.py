"""Tabular output for the CLI: rich tables on a terminal, or csv / json / markdown for pipes."""

from __future__ import annotations

import math
import os
from typing import Any

import click
import pandas as pd
from rich.console import Console
from rich.table import Table

FORMATS = ("table", "csv", "json", "markdown")
SCREEN_ROWS = 50
"""Rows a table shows when the output is not a terminal (whose own height is used otherwise); csv, json
and markdown, the formats for machines and documents, print every row."""


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e5 else f"{value:,.0f}"
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value))
    return str(value)


FOLDED_TEXT_WIDTH = 24
"""Width a text column is counted at when fitting a table: rich folds longer names onto more lines."""


def pick_columns(frame: pd.DataFrame, columns: str | None) -> pd.DataFrame:
    """The columns named in `--columns a,b,c`, in that order; an unknown name lists the known ones."""
    if not columns:
        return frame
    wanted = [c.strip() for c in columns.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in frame.columns]
    if unknown:
        raise click.BadParameter(
            f"no column {', '.join(unknown)}; columns: {', '.join(map(str, frame.columns))}",
            param_hint="--columns",
        )
    return frame[wanted]


def _header(column: Any) -> str:
    """A fitted table's header: `sec_per_it_predicted` as `sec per it predicted`, which wraps onto two
    lines where the width is short (a pipe, csv, json and markdown keep the column's name)."""
    return str(column).replace("_", " ")


def fit_columns(frame: pd.DataFrame, width: int) -> tuple[pd.DataFrame, list[str]]:
    """The leading columns whose cells fit in `width` characters of rich table, and the names left out.
    Commands list their most useful columns first, so the right of a wide table goes."""
    used = 1  # the left border
    kept: list[str] = []
    for column in frame.columns:
        header = max(len(word) for word in _header(column).split())  # headers wrap between words
        cells = [len(_cell(v)) for v in frame[column]]
        need = max([header, *cells])
        if not pd.api.types.is_numeric_dtype(frame[column]):
            need = min(need, max(FOLDED_TEXT_WIDTH, header))
        if kept and used + need + 3 > width:
            break
        used += need + 3  # padding either side and the column's border
        kept.append(str(column))
    return frame[kept], [str(c) for c in frame.columns if str(c) not in kept]


def render(
    frame: pd.DataFrame, fmt: str = "table", title: str | None = None, columns: str | None = None
) -> None:
    """Print a frame. Log-derived text is printed literally (rich markup is not interpreted). A table fits
    the terminal's width (or $COLUMNS): the columns past it are named, not wrapped into a wall of text."""
    frame = pick_columns(frame, columns)
    if fmt == "csv":
        click.echo(frame.to_csv(index=False), nl=False)
    elif fmt == "json":
        click.echo(frame.to_json(orient="records", date_format="iso", indent=2))
    elif fmt == "markdown":
        if title:
            click.echo(f"### {title}\n")
        click.echo(frame.astype(object).where(frame.notna(), "").to_markdown(index=False))
        click.echo()
    else:
        console = Console(markup=False, emoji=False, highlight=False)
        rows = max(10, console.size.height - 8) if console.is_terminal else SCREEN_ROWS
        fits = console.is_terminal or bool(os.environ.get("COLUMNS"))
        hidden: list[str] = []
        shown = frame.head(rows)
        if fits:
            shown, hidden = fit_columns(shown, console.width)
        else:
            console = Console(markup=False, emoji=False, highlight=False, width=100_000)
        table = Table(title=title, show_lines=False, header_style="bold")
        for column in shown.columns:
            numeric = pd.api.types.is_numeric_dtype(shown[column])
            label = _header(column) if fits else str(column)
            table.add_column(label, justify="right" if numeric else "left", overflow="fold")
        for row in shown.itertuples(index=False):
            table.add_row(*(_cell(v) for v in row))
        console.print(table)
        if hidden:
            console.print(
                f"{len(hidden)} more columns do not fit: {', '.join(hidden)} "
                "(--columns to choose, --format csv for all)"
            )
        if frame.empty:
            console.print("(no rows)")
        elif len(frame) > rows:
            console.print(
                f"... {len(frame) - rows:,} more rows: --format csv, json or markdown prints them all"
            )
