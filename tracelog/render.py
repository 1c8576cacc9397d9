"""Tabular output for the CLI: rich tables on a terminal, or csv / json / markdown for pipes."""

from __future__ import annotations

import math
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


def render(frame: pd.DataFrame, fmt: str = "table", title: str | None = None) -> None:
    """Print a frame. Log-derived text is printed literally (rich markup is not interpreted)."""
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
        if not console.is_terminal:
            console = Console(markup=False, emoji=False, highlight=False, width=100_000)
        table = Table(title=title, show_lines=False, header_style="bold")
        for column in frame.columns:
            numeric = pd.api.types.is_numeric_dtype(frame[column])
            table.add_column(str(column), justify="right" if numeric else "left", overflow="fold")
        for row in frame.head(rows).itertuples(index=False):
            table.add_row(*(_cell(v) for v in row))
        console.print(table)
        if frame.empty:
            console.print("(no rows)")
        elif len(frame) > rows:
            console.print(
                f"... {len(frame) - rows:,} more rows: --format csv, json or markdown prints them all"
            )
