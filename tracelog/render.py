"""Tabular output for the CLI: rich tables on a terminal, or csv / json / markdown for pipes."""

from __future__ import annotations

import math
from typing import Any

import click
import pandas as pd
from rich.console import Console
from rich.table import Table

FORMATS = ("table", "csv", "json", "markdown")


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
        table = Table(title=title, show_lines=False, header_style="bold")
        for column in frame.columns:
            numeric = pd.api.types.is_numeric_dtype(frame[column])
            table.add_column(str(column), justify="right" if numeric else "left", overflow="fold")
        for row in frame.itertuples(index=False):
            table.add_row(*(_cell(v) for v in row))
        console = Console(markup=False, emoji=False, highlight=False)
        if not console.is_terminal:
            console = Console(markup=False, emoji=False, highlight=False, width=100_000)
        console.print(table)
        if frame.empty:
            console.print("(no rows)")
