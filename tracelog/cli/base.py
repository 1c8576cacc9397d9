"""The `tracelog` command group and what every command shares: the database it opens, the output
format, key=value options, and failures turned into words.

Errors for people: a known failure (the project's error, a failed write, an unreadable file) prints one
line and exits 1; Ctrl-C prints "interrupted" and exits 130 (128 + SIGINT, the shell's convention); only
a bug prints a traceback, under a line saying it is one and where to report it.
"""

from __future__ import annotations

import ast
import gc
import importlib
import importlib.util
import os
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
import duckdb

from tracelog.errors import BUG_REPORT, TracelogError
from tracelog.locations import DATA_PATH_ENVVAR, is_lake, lake_catalog_file
from tracelog.render import FORMATS
from tracelog.store import DB_ENVVAR, DEFAULT_DB, Store, write_error

EXIT_INTERRUPTED = 130  # 128 + SIGINT (2): what a shell reports for a command stopped by Ctrl-C


def _import_frozen(module: str) -> None:
    """Import a command's module with the garbage collector off, then freeze what is loaded (see
    `Group.freeze_loaded`)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        importlib.import_module(module)
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


class Context:
    def __init__(self, db: str, data_path: str | None = None) -> None:
        self.db = db
        self.data_path = data_path
        self._store: Any = None

    def store(self, read_only: bool = False, create: bool = False) -> Any:
        """The database of --db. Only a writing command (`ingest`) passes `create`: for the others a
        path with no database is a mistyped --db, not a new empty file."""
        if self._store is None and is_lake(self.db):
            catalog = lake_catalog_file(self.db)
            if catalog is not None and not create and not os.path.exists(catalog):
                # a command that only reads would make the store (its catalog file and data folder)
                raise TracelogError("no DuckLake store at this path; ingest first or check --db", self.db)
            self._store = Store(self.db, read_only=read_only, data_path=self.data_path)
        if self._store is None:
            exists = self.exists()
            if not exists and not create:
                raise TracelogError("no database at this path; ingest first or check --db", self.db)
            self._store = Store(self.db, read_only=read_only and exists, create=create)
        return self._store

    def exists(self) -> bool:
        """Whether --db names a store there is: a file that exists, or a DuckLake store (its catalog is
        on a server; attaching it makes it if need be)."""
        return is_lake(self.db) or os.path.exists(self.db)

    def config_db(self) -> Any:
        """What the tracelog.toml lookup is given: a file's address (nothing opened), or the DuckLake
        store opened (it knows its data folder: --data-path, or the one it recorded; a new one is made,
        as by any first command)."""
        return self.store() if is_lake(self.db) else self.db

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
columns_option = click.option(
    "--columns",
    metavar="A,B,...",
    help="Only these columns, in this order (comma-separated); a table otherwise fits the terminal.",
)
uncalibrated_option = click.option(
    "--uncalibrated",
    is_flag=True,
    help="The textbook model: ignore the constants `tracelog calibrate` fitted.",
)


def parse_tags(values: tuple[str, ...], hint: str = "--tag") -> dict[str, str]:
    """`key=value` pairs; `hint` names where they were given in an error (`--threshold`, a tag argument)."""
    tags = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not key=value", param_hint=hint)
        tags[key.strip()] = value.strip()
    return tags


def known_failure(exc: BaseException, db: str | None) -> TracelogError | None:
    """The project's error for a failure a user can act on, or None for a bug."""
    if isinstance(exc, TracelogError):
        return exc
    if isinstance(exc, duckdb.Error) and db is not None:
        return write_error(exc, db)
    if isinstance(exc, OSError) and exc.strerror:
        return TracelogError(exc.strerror, exc.filename)
    return None


@contextmanager
def user_errors() -> Iterator[None]:
    try:
        yield
    except TracelogError as exc:
        raise click.ClickException(str(exc)) from None


COMMAND_MODULES = {
    "tracelog.cli.reads": (
        "benches",
        "flags",
        "note",
        "rename",
        "rm",
        "runs",
        "show",
        "sources",
        "sql",
        "tag",
        "untag",
    ),
    "tracelog.cli.intake": ("ingest",),
    "tracelog.cli.logs": ("compare", "export", "report"),
    "tracelog.cli.model": ("calibrate", "hardware", "plan", "predict", "set"),
    "tracelog.cli.clusters": ("cluster",),
}
"""Where each command lives. The group imports a command's module only when that command is asked for
(click's lazy group: `tracelog runs` loads `reads`, which reads the store, not `logs`, which loads every
parser, nor `model`); `tracelog --help` reads each command's line from its module's source."""


def documented_commands() -> dict[str, str | None]:
    """Each command's name and docstring, read from the source of its module (`ast`) instead of by
    importing it: `tracelog --help` lists every command, and importing them all loads the parsers,
    Polars, pandas and the model (1.2 s of a 1.5 s `--help`) for a list of names and first lines."""
    found: dict[str, str | None] = {}
    for module in COMMAND_MODULES:
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            continue
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef):
                continue
            for decorator in node.decorator_list:
                if (
                    isinstance(decorator, ast.Call)
                    and isinstance(decorator.func, ast.Attribute)
                    and isinstance(decorator.func.value, ast.Name)
                    and decorator.func.value.id == "cli"
                    and decorator.func.attr in ("command", "group")
                ):
                    named = [k.value for k in decorator.keywords if k.arg == "name"] + decorator.args
                    name = named[0].value if named and isinstance(named[0], ast.Constant) else None
                    found[str(name or node.name.lower().replace("_", "-"))] = ast.get_docstring(node)
    return found


class Group(click.Group):
    """The command group, with the last word on every failure a command lets through, and commands
    loaded by name from `COMMAND_MODULES` (importing a module registers its commands on the group)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *(name for names in COMMAND_MODULES.values() for name in names)})

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's list of commands and their first lines, without importing the commands' modules: a
        loaded command speaks for itself, the others through their docstrings (`documented_commands`),
        shortened by click as it shortens a command's own."""
        names = self.list_commands(ctx)
        if not names:
            return
        documented = documented_commands()
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            command = self.commands.get(name) or click.Command(name, help=documented.get(name))
            if not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    freeze_loaded = False
    """Set by the `tracelog` process (`cli.main`): what is loaded once a command's module is imported is
    frozen out of the garbage collector's reach; the modules stay for the life of the process, and a full
    collection during an ingest walked every object they hold (0.2-0.3 s of a 250 MB ingest). The import
    itself runs without the collector: its collections walked the modules loaded so far again and again,
    found next to nothing, and took 0.06-0.08 s of the 0.5 s that loading an ingest's modules takes."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            for module, names in COMMAND_MODULES.items():
                if cmd_name in names:
                    if self.freeze_loaded:
                        _import_frozen(module)
                    else:
                        importlib.import_module(module)
        command = super().get_command(ctx, cmd_name)
        if command is not None:  # loaded here or by an import elsewhere (a test, a notebook)
            accept_db_after(command)
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """An unknown name is answered with the close ones among every command, loaded or not (click
        looks only at the loaded ones: `tracelog rns` would lose its "Did you mean 'runs'?")."""
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as exc:
            raise click.exceptions.NoSuchCommand(
                exc.command_name, possibilities=self.list_commands(ctx), ctx=ctx
            ) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except (KeyboardInterrupt, duckdb.InterruptException):
            click.echo("interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:
            # the reader of the pipe stopped (`| head -1`) after what it wanted: no error; stdout goes to
            # /dev/null so that the interpreter's own flush at exit does not fail again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(0)
        except Exception as exc:
            if isinstance(exc, RuntimeError) and str(exc).startswith("Query interrupted"):
                # DuckDB's word for a query stopped by Ctrl-C, from the paths that do not raise its type
                click.echo("interrupted", err=True)
                ctx.exit(EXIT_INTERRUPTED)
            db = ctx.obj.db if isinstance(ctx.obj, Context) else None
            error = known_failure(exc, db)
            if error is not None:
                raise click.ClickException(str(error)) from None
            traceback.print_exc(file=sys.stderr)
            click.echo(
                f"Error: this is a bug in tracelog, not in your input; please report it at {BUG_REPORT} "
                "with the traceback above and the command you ran.",
                err=True,
            )
            ctx.exit(1)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    envvar=DB_ENVVAR,
    default=DEFAULT_DB,
    show_default=True,
    help=f"DuckDB database file, or a shared DuckLake store 'ducklake:postgres:dbname=... host=...' "
    f"(or set {DB_ENVVAR}).",
)
@click.option(
    "--data-path",
    envvar=DATA_PATH_ENVVAR,
    metavar="DIR",
    help=f"Where a new DuckLake store keeps its Parquet files (or set {DATA_PATH_ENVVAR}): a shared folder, "
    "or s3://bucket/prefix/ with the AWS_* variables (README: Team store).",
)
@click.version_option(package_name="tracelog")
@click.pass_context
def cli(ctx: click.Context, db: str, data_path: str | None) -> None:
    """Training logs and fabric benchmarks in DuckDB, held against what the hardware allows."""
    ctx.obj = Context(db, data_path)
    ctx.call_on_close(ctx.obj.close)


def _db_after_command(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.find_object(Context).db = value  # type: ignore[union-attr]


def accept_db_after(command: click.Command) -> None:
    """`--db` after the command name too (`tracelog ingest run.log --db lab.duckdb`, as people type
    it), on a command and every subcommand of a group; it wins over the one before the command name."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            accept_db_after(sub)
    elif not any(p.name == "db_after" for p in command.params):
        command.params.append(
            click.Option(
                ["--db", "db_after"],
                expose_value=False,
                callback=_db_after_command,
                help=f"DuckDB database file (or set {DB_ENVVAR}); also accepted before the command.",
            )
        )
