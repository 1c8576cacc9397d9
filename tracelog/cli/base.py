"""The `tracelog` command group and what every command shares: the database it opens, the output
format, key=value options, and user errors turned into a message and exit code 1."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from tracelog import api
from tracelog.errors import TracelogError
from tracelog.render import FORMATS
from tracelog.store import DB_ENVVAR, DEFAULT_DB


class Context:
    def __init__(self, db: str) -> None:
        self.db = db
        self._store: Any = None

    def store(self, read_only: bool = False) -> Any:
        if self._store is None:
            self._store = api.connect(self.db, read_only=read_only and os.path.exists(self.db))
        return self._store

    def close(self) -> None:
        """Close the database when the command ends (a notebook or test running many commands in one
        process would otherwise keep every one open)."""
        if self._store is not None:
            self._store.close()
            self._store = None


pass_ctx = click.make_pass_decorator(Context)
format_option = click.option(
    "--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True, help="Output format."
)
uncalibrated_option = click.option(
    "--uncalibrated",
    is_flag=True,
    help="The textbook model: ignore the constants `tracelog calibrate` fitted.",
)


def parse_tags(values: tuple[str, ...]) -> dict[str, str]:
    tags = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not key=value", param_hint="--tag")
        tags[key.strip()] = value.strip()
    return tags


@contextmanager
def user_errors() -> Iterator[None]:
    try:
        yield
    except TracelogError as exc:
        raise click.ClickException(str(exc)) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    envvar=DB_ENVVAR,
    default=DEFAULT_DB,
    show_default=True,
    help=f"DuckDB database file (or set {DB_ENVVAR}).",
)
@click.version_option(package_name="tracelog")
@click.pass_context
def cli(ctx: click.Context, db: str) -> None:
    """Training logs and fabric benchmarks in DuckDB, held against what the hardware allows."""
    ctx.obj = Context(db)
    ctx.call_on_close(ctx.obj.close)
