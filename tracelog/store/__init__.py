"""The DuckDB database: connection, versioned migrations and batch inserts.

The store knows tables, not formats. Schema changes are numbered `.sql` files in `schemas/`, applied in
order and recorded in `schema_version`, so an old database upgrades in place when it is opened.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from typing import TYPE_CHECKING, Any

import duckdb
import polars as pl
import pyarrow as pa

from tracelog.errors import TracelogError

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_DB = "tracelog.duckdb"
DB_ENVVAR = "TRACELOG_DB"


def default_db_path() -> str:
    return os.environ.get(DB_ENVVAR) or DEFAULT_DB


def migrations() -> list[tuple[int, str, str]]:
    """(version, file name, SQL) of every schema file, in order."""
    found = []
    for entry in resources.files("tracelog.schemas").iterdir():
        name = entry.name
        if name.endswith(".sql") and name[:3].isdigit():
            found.append((int(name[:3]), name, entry.read_text(encoding="utf-8")))
    return sorted(found)


class Store:
    """One open database. Use as a context manager, or call `close()`."""

    def __init__(self, path: str | os.PathLike[str] | None = None, read_only: bool = False) -> None:
        self.path = str(path) if path is not None else default_db_path()
        self._columns: dict[str, list[str]] = {}
        try:
            self.con = duckdb.connect(self.path, read_only=read_only)
        except duckdb.IOException as exc:
            text = str(exc)
            if "lock" in text.lower():
                raise TracelogError(
                    "the database is locked by another process; close it there (or use another --db)",
                    self.path,
                ) from None
            raise TracelogError(f"cannot open the database: {text.splitlines()[0]}", self.path) from None
        except duckdb.Error as exc:
            raise TracelogError(f"not a DuckDB database ({str(exc).splitlines()[0]})", self.path) from None
        if not read_only:
            self.migrate()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.con.close()

    def migrate(self) -> list[int]:
        """Apply the schema files this database has not seen yet; returns the versions applied."""
        self.con.execute(
            "CREATE TABLE IF NOT EXISTS schema_version "
            "(version INTEGER PRIMARY KEY, name VARCHAR, applied_at TIMESTAMP DEFAULT current_timestamp)"
        )
        have = {row[0] for row in self.con.execute("SELECT version FROM schema_version").fetchall()}
        applied = []
        for version, name, sql in migrations():
            if version in have:
                continue
            with self.transaction():
                self.con.execute(sql)
                self.con.execute("INSERT INTO schema_version (version, name) VALUES (?, ?)", [version, name])
            applied.append(version)
        self._columns.clear()
        return applied

    @property
    def schema_version(self) -> int:
        row = self.con.execute("SELECT max(version) FROM schema_version").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """All or nothing: an exception (or Ctrl-C) rolls back everything done inside."""
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        self.con.execute("COMMIT")

    @contextmanager
    def memory_limit(self, limit: str) -> Iterator[None]:
        """DuckDB's memory cap lowered for a while (a bulk load), then put back as it was.

        Appends in one long transaction are buffered up to DuckDB's limit (80% of RAM by default) before
        they are written out; a lower cap makes them go to the file early and keeps the process flat.
        """
        previous = self.scalar("SELECT current_setting('memory_limit')")
        self.con.execute(f"SET memory_limit = '{limit}'")
        try:
            yield
        finally:
            self.con.execute(f"SET memory_limit = '{previous}'")

    def columns(self, table: str) -> list[str]:
        """The table's columns, looked up once per store (the schema changes only through `migrate`)."""
        if table not in self._columns:
            rows = self.con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                "ORDER BY ordinal_position",
                [table],
            ).fetchall()
            self._columns[table] = [r[0] for r in rows]
        return self._columns[table]

    def insert(self, table: str, rows: Any) -> int:
        """Insert a polars/pandas frame, Arrow table or list of dicts by column name; returns the count."""
        frame = as_arrow(rows)
        if frame.num_rows == 0:
            return 0
        wanted = set(self.columns(table))
        keep = [c for c in frame.column_names if c in wanted]
        _tracelog_batch = frame.select(keep)  # noqa: F841 (read by name: DuckDB's replacement scan)
        # A replacement scan of a local, not register/unregister: a view dropped inside a transaction stays
        # in it until commit (for rollback), and with it every batch of the file.
        cols = ", ".join(f'"{c}"' for c in keep)
        self.con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _tracelog_batch")
        return frame.num_rows

    def query(self, sql: str, params: list[Any] | None = None) -> pd.DataFrame:
        try:
            return self.con.execute(sql, params or []).df()
        except duckdb.Error as exc:
            raise TracelogError(f"SQL error: {str(exc).splitlines()[0]}") from None

    def sources(self) -> pd.DataFrame:
        """The ingested files, with their hash, format and line counts."""
        return self.query("SELECT * FROM sources ORDER BY source_id")

    def scalar(self, sql: str, params: list[Any] | None = None) -> Any:
        row = self.con.execute(sql, params or []).fetchone()
        return row[0] if row else None


def as_arrow(rows: Any) -> pa.Table:
    if isinstance(rows, pa.Table):
        return rows
    if isinstance(rows, pl.DataFrame):
        return rows.to_arrow()
    pandas = sys.modules.get("pandas")  # a pandas frame means pandas is loaded; never import it here
    if pandas is not None and isinstance(rows, pandas.DataFrame):
        return pa.Table.from_pandas(rows, preserve_index=False)
    if isinstance(rows, list):
        return pa.Table.from_pylist(rows) if rows else pa.table({})
    raise TypeError(f"cannot insert {type(rows).__name__}")
