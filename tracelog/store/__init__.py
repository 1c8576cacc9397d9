"""The DuckDB database: connection, versioned migrations and batch inserts.

The store knows tables, not formats. Schema changes are numbered `.sql` files in `schemas/`, applied in
order and recorded in `schema_version`, so an old database upgrades in place when it is opened; a database
written by a newer tracelog (a version this code has no file for) is refused before anything is written.

A `ducklake:` address opens a DuckLake store instead (see `store.lake`), shared by many writers.

Only DuckDB files are opened: the header is read first (DuckDB's storage format: a uint64 checksum, then
the magic bytes `DUCK` at offset 8; duckdb/duckdb `src/storage/magic_bytes.cpp`), because DuckDB itself
answers a SQLite file by loading its sqlite extension, from the network if need be. Extension auto-install
and auto-load are off for the same reason: no command reaches the network.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, suppress
from importlib import resources
from typing import TYPE_CHECKING, Any

import duckdb

from tracelog.errors import TracelogError
from tracelog.locations import data_path as data_path_of
from tracelog.locations import is_lake
from tracelog.store import lake, recovery
from tracelog.store.literals import quoted
from tracelog.store.rows import Rows

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

DEFAULT_DB = "tracelog.duckdb"
DB_ENVVAR = "TRACELOG_DB"
UPGRADE_COMMAND = "pip install -U tracelog"
# DuckDB's main header: checksum (uint64), then MAGIC_BYTES "DUCK" (MainHeader::MAGIC_BYTE_OFFSET = 8).
MAGIC_OFFSET, MAGIC = 8, b"DUCK"
# No extension is fetched or loaded behind the user's back (DuckDB configuration options of these names).
CONNECT_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}
IN_MEMORY = ":memory:"
# Ids a table takes from a sequence in the embedded file (schemas/001_init.sql) and from `tracelog_ids` in
# a DuckLake store: table -> (id column, kind).
AUTO_IDS = {
    "sources": ("source_id", "source"),
    "runs": ("run_id", "run"),
    "benches": ("bench_id", "bench"),
    "flags": ("flag_id", "flag"),
}

ConflictError = lake.ConflictError


def literal(value: str | int | None) -> str:
    """A value as an SQL literal, for the few queries every reading command runs: DuckDB 1.5 imports
    pandas (0.4 s) to bind the first parameter of a process, which 2.0 no longer does. Standard SQL
    quoting (a quote doubled); DuckDB reads no backslash escapes in a plain string literal."""
    if value is None:
        return "NULL"
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"no SQL literal for {type(value).__name__}")
    if isinstance(value, int):
        return str(value)
    return f"'{quoted(value)}'"


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


def latest_version() -> int:
    """The newest schema version this code knows how to build."""
    return max(version for version, _, _ in migrations())


def check_database_file(path: str, create: bool) -> None:
    """Refuse a missing file (unless `create`), a folder, and any file that is not a DuckDB database."""
    if path == IN_MEMORY:
        return
    if not os.path.exists(path):
        if create:
            return
        raise TracelogError("no database at this path; ingest first or check --db", path)
    if os.path.isdir(path):
        raise TracelogError("is a folder, not a database file; check --db", path)
    try:
        with open(path, "rb") as handle:
            head = handle.read(16)  # enough for SQLite's "SQLite format 3\0" as well
    except OSError as exc:
        raise TracelogError(f"cannot read the database: {exc.strerror}", path) from None
    if head[MAGIC_OFFSET : MAGIC_OFFSET + len(MAGIC)] != MAGIC:
        kind = "a SQLite file" if head.startswith(b"SQLite format 3") else "a file of another kind"
        raise TracelogError(f"not a DuckDB database ({kind}); check --db", path)


def write_error(exc: duckdb.Error, path: str) -> TracelogError | None:
    """The user's reading of a failed write (disk full, a failed commit), or None for anything else.

    A full disk shows in DuckDB as an `IOException` ("No space left on device") while writing, and as a
    `TransactionException` ("Failed to commit") when the commit cannot be written; both leave the
    database as it was before the transaction.
    """
    text = str(exc)
    first = text.splitlines()[0] if text else type(exc).__name__
    if lake.is_conflict(exc):
        return ConflictError(
            "another writer changed the store at the same moment and committed first; nothing of this "
            "command was written: run it again",
            path,
        )
    if "No space left" in text or "disk is full" in text.lower():
        return TracelogError(
            "the disk is full: the database could not be written and is left as it was before this "
            "command; free some space (or use --db on another disk) and run it again",
            path,
        )
    if isinstance(exc, duckdb.TransactionException) and "Failed to commit" in text:
        return TracelogError(
            f"could not write the database ({first}); the disk may be full or the file unwritable. "
            "It is left as it was before this command",
            path,
        )
    if isinstance(exc, duckdb.IOException):
        return TracelogError(f"could not read or write the database ({first})", path)
    return None


@contextmanager
def write_errors(path: str) -> Iterator[None]:
    """DuckDB's write failures (disk full, failed commit) as the project's error naming the database."""
    try:
        yield
    except (duckdb.IOException, duckdb.TransactionException) as exc:
        error = write_error(exc, path)
        if error is None:
            raise
        raise error from None


@contextmanager
def sql_errors() -> Iterator[None]:
    """A failed query (the user's SQL, or the store's) as one line naming DuckDB's complaint."""
    try:
        yield
    except duckdb.Error as exc:
        raise TracelogError(f"SQL error: {str(exc).splitlines()[0]}") from None


class StoreLocked(TracelogError):
    """Another process has the database file open (DuckDB: one writer, and no reader beside it)."""


class Store:
    """One open database. Use as a context manager, or call `close()`.

    `create=False` refuses a path where no database exists yet (the reading commands: a mistyped --db
    is an error, not a new empty file).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        read_only: bool = False,
        create: bool = True,
        data_path: str | None = None,
    ) -> None:
        self.path = str(path) if path is not None else default_db_path()
        self.lake = is_lake(self.path)
        self.read_only = read_only
        self._columns: dict[str, list[str]] = {}
        self._ids: dict[str, int] | None = None  # a DuckLake transaction's id counters, once read
        self._in_transaction = False
        self._exclusive = True  # the current transaction holds a DuckLake store's write lock
        self._ids_table = False  # `tracelog_ids` seen in a DuckLake store
        self._counters = False  # ids from the PostgreSQL catalog's sequences (`lake.take`)
        self._seen_versions: set[int] = set()  # schema versions the last migration found applied
        self.staged = False  # a new file's rows are in temporary tables (`store.staging`)
        self.spill_directory: str | None = None  # where this connection's staged tables spill (set once)
        self.owed_refresh_checked = False  # set once `queries.connect` has redone any refresh owed
        self.data_path: str | None = None
        unclean = False  # a file left with its write-ahead log (`store.recovery`); never a DuckLake store
        if self.lake:
            binaries = lake.Binaries()
            config = {**CONNECT_CONFIG, "allow_unsigned_extensions": binaries.verified}
            if not read_only:
                # A writer of a shared store runs one DuckDB thread: many writers run at once on a node
                # (they are the parallelism), and DuckDB's idle workers spin while their writer waits for
                # the write lock (4 writers on 2 cores: 3.4 CPU s per 25 MB log with one thread, 4.5-8.5
                # with two).
                config["threads"] = 1
            self.con = duckdb.connect(IN_MEMORY, config=config)
        else:
            unclean = not read_only and recovery.unclean_stop(self.path)
            self.con = self._connect_file(create)
        try:
            if self.lake:
                self.data_path = lake.attach(
                    self.con, self.path, data_path_of(data_path), read_only, binaries
                )
            have = self._refuse_newer()
            if not read_only:
                with write_errors(self.path):
                    applied = self.migrate(have)
                    if unclean:
                        self._sweep_orphans()
                # the versions found applied and those this process applied: another process may have
                # applied them between the open and the migration, or while this one waited to
                versions = {*self._seen_versions, *applied}
                self._counters = (
                    self.lake and lake.postgres_catalog(self.path) and lake.COUNTERS_VERSION in versions
                )
        except BaseException:
            self.con.close()
            raise

    def _sweep_orphans(self) -> None:
        """Delete what an unclean stop left without its source, run or bench (`store.recovery`)."""
        with self.transaction():
            for sql in recovery.orphan_deletes():
                self.con.execute(sql)

    def _connect_file(self, create: bool) -> duckdb.DuckDBPyConnection:
        check_database_file(self.path, create)
        try:
            return duckdb.connect(self.path, read_only=self.read_only, config=CONNECT_CONFIG)
        except duckdb.IOException as exc:
            text = str(exc)
            if "lock" in text.lower():
                raise StoreLocked(
                    "the database is locked by another process; close it there (or use another --db)",
                    self.path,
                ) from None
            raise TracelogError(f"cannot open the database: {text.splitlines()[0]}", self.path) from None
        except duckdb.Error as exc:
            raise TracelogError(f"not a DuckDB database ({str(exc).splitlines()[0]})", self.path) from None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.con.close()

    def _refuse_newer(self) -> set[int] | None:
        """A database from a newer tracelog has tables this code would misread or silently drop columns
        of; nothing runs against it (and nothing is written: this is the first query). Returns the
        versions applied (`_applied`)."""
        have, latest = self._applied(), latest_version()
        if have and max(have) > latest:
            raise TracelogError(
                f"this database has schema version {max(have)}, written by a newer tracelog; this one "
                f"knows versions up to {latest}. Upgrade tracelog ({UPGRADE_COMMAND}, or install from a "
                "newer checkout) to open it",
                self.path,
            )
        return have

    def _applied(self) -> set[int] | None:
        """The schema versions applied; None where there is no `schema_version` table yet (a new store).

        Asked of the table itself, not of information_schema: in a DuckLake store that means reading
        the whole catalog from PostgreSQL, and every command opens a store."""
        try:
            return {row[0] for row in self.con.execute("SELECT version FROM schema_version").fetchall()}
        except duckdb.CatalogException:
            return None

    def migrate(self, have: set[int] | None = None) -> list[int]:
        """Apply the schema files this database has not seen yet; returns the versions applied. `have`:
        the versions applied, where the caller has just read them (a DuckLake store takes them; the file
        reads them again, see below)."""
        if not self.lake:
            # A writable open of the file runs the statements it always ran: this no-op once the table
            # exists, then the versions read again. An open without them made a database killed while its
            # ingest committed come back, in 4 of 14 tries, with the file's timer rows and without their
            # run (tests/test_faults.py, commit-SIGKILL; none in 20 with them). Which of the two matters,
            # and why, is not understood yet.
            self.con.execute(_SCHEMA_VERSION_SQL.format(key=" PRIMARY KEY"))
            have = self._applied()
        elif have is None:
            have = self._applied()
        self._seen_versions = set(have or ())
        pending = [m for m in migrations() if have is None or m[0] not in have]
        if not pending:
            return []
        if self.lake:
            applied = lake.retrying(lambda: self._apply_together(pending))
        else:
            applied = [version for version, name, sql in pending if self._apply(version, name, sql)]
            if applied:
                # Into the file at once: DuckDB 1.5's WAL replay of an ALTER on a table with a `nextval`
                # default fails ("no default database set"), so a crash before the first checkpoint
                # would leave a new database that no longer opens.
                self.con.execute("CHECKPOINT")
        self._columns.clear()
        return applied

    def _apply(self, version: int, name: str, sql: str) -> bool:
        if self.scalar("SELECT count(*) FROM schema_version WHERE version = ?", [version]):
            return False
        with self.transaction():
            self.con.execute(sql)
            self.con.execute("INSERT INTO schema_version (version, name) VALUES (?, ?)", [version, name])
        return True

    def _apply_together(self, pending: list[tuple[int, str, str]]) -> list[int]:
        """A DuckLake store's pending schema files in one transaction (retried whole when another process
        opening the same new store commits first; what it applied is then looked at again).

        Together, because DuckLake keeps the catalog of every schema version that a table's rows were
        written at, and a reader loads each one it meets (some fifteen PostgreSQL queries apiece): a store
        made one schema file at a time made `tracelog runs` load eight."""
        with self.transaction():
            self.con.execute(_SCHEMA_VERSION_SQL.format(key=""))
            have = {row[0] for row in self.con.execute("SELECT version FROM schema_version").fetchall()}
            self._seen_versions = have
            applied = []
            for version, name, sql in pending:
                if version in have:
                    continue
                self.con.execute(lake.dialect(sql) + (lake.IDS_TABLE_SQL if version == 1 else ""))
                if version == lake.COUNTERS_VERSION and lake.postgres_catalog(self.path):
                    # under the write lock: no id is handed out between this read and the sequences' start
                    seeds = dict(self.con.execute("SELECT kind, next_id FROM tracelog_ids").fetchall())
                    lake.create_counters(self.con, seeds)
                self.con.execute("INSERT INTO schema_version (version, name) VALUES (?, ?)", [version, name])
                applied.append(version)
        return applied

    def new_id(self, kind: str, count: int = 1) -> int:
        """The first of `count` new ids of a source, run, bench or flag.

        The embedded file takes them from its sequences. A DuckLake store has none. With a PostgreSQL
        catalog they come from sequences in PostgreSQL, one statement each (`lake.take`). With a DuckDB-file
        catalog, a transaction that holds the store's write lock takes the next ones of `tracelog_ids` and
        writes them back at its commit; one that runs beside other writers (a new file's ingest, see
        `transaction`) has them handed out in a short locked transaction of their own (`lake.allocate`).
        Either way no two writers are given the same id."""
        if not self.lake:
            first = self.scalar(f"SELECT nextval('{kind}_ids')")
            for _ in range(count - 1):
                self.scalar(f"SELECT nextval('{kind}_ids')")
            return int(first)
        if not self._in_transaction:
            raise RuntimeError("a DuckLake id is taken inside a write transaction")
        if self._counters:
            return lake.take(self.con, kind, count)
        if not self._exclusive:
            return lake.allocate(self.con, self.path, kind, count)
        if self._ids is None:
            self._ids = dict(self.con.execute("SELECT kind, next_id FROM tracelog_ids").fetchall())
        first = int(self._ids[kind])
        self._ids[kind] = first + count
        return first

    def _bump_ids(self) -> None:
        """Write a DuckLake transaction's ids back, and count the write (see `new_id`)."""
        ids = self._ids or {}
        cases = " ".join(f"WHEN '{kind}' THEN {int(value)}" for kind, value in ids.items())
        expr = f"CASE kind {cases} ELSE next_id END" if cases else "next_id"
        self.con.execute(
            f"UPDATE tracelog_ids SET next_id = CASE WHEN kind = '{lake.WRITES}' THEN next_id + 1 ELSE {expr} END"
        )

    @property
    def schema_version(self) -> int:
        row = self.con.execute("SELECT max(version) FROM schema_version").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    @contextmanager
    def transaction(self, beside: tuple[int, ...] | None = None) -> Iterator[None]:
        """All or nothing: an exception (or Ctrl-C) rolls back everything done inside.

        In a DuckLake store a transaction holds the store's write lock, so that writers that update or
        delete take turns (DuckLake would fail all but the first of them at commit). `beside` is for a
        write that only inserts (a new file's ingest): it runs beside other writers, holding only the
        locks of those keys (see `lake.file_keys`), and DuckLake merges its commit with theirs."""
        exclusive = beside is None
        keys = (lake.WRITE_LOCK_KEY,) if beside is None else beside
        lock = lake.write_lock(self.con, self.path, keys) if self.lake else nullcontext()
        with write_errors(self.path), lock:
            self.con.execute("BEGIN TRANSACTION")
            self._in_transaction, self._exclusive, self._ids = True, exclusive, None
            try:
                yield
                if self.lake and exclusive and self._has_ids_table():
                    self._bump_ids()
            except BaseException:
                self._in_transaction, self._ids = False, None
                # a failed write may have ended the transaction already; the first error is the one to show
                with suppress(duckdb.Error):
                    self.con.execute("ROLLBACK")
                raise
            self._in_transaction, self._ids = False, None
            self.con.execute("COMMIT")

    def _has_ids_table(self) -> bool:
        """Whether `tracelog_ids` exists yet (not before schema file 1 is applied); asked until it does."""
        if not self._ids_table:
            self._ids_table = bool(
                self.scalar(
                    "SELECT count(*) FROM information_schema.tables WHERE table_name = 'tracelog_ids'"
                )
            )
        return self._ids_table

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

    @contextmanager
    def checkpoint_at_commit(self) -> Iterator[None]:
        """The transaction that commits inside this writes its rows into the database file at its commit
        instead of through the write-ahead log, which the next commit's checkpoint (or the close) copied
        into the file again: DuckDB checkpoints at a commit whose log would pass `checkpoint_threshold`,
        and one whose log would pass `auto_checkpoint_skip_wal_threshold` skips the log. A DuckLake store
        writes no log of its own: nothing changes there."""
        if self.lake:
            yield
            return
        previous = self.scalar("SELECT current_setting('checkpoint_threshold')")
        self.con.execute("SET checkpoint_threshold = '0KiB'")
        try:
            yield
        finally:
            self.con.execute(f"SET checkpoint_threshold = '{previous}'")

    @contextmanager
    def threads(self, count: int) -> Iterator[None]:
        """DuckDB's worker threads set for a while (the inserts of a streaming ingest), then put back."""
        previous = self.scalar("SELECT current_setting('threads')")
        self.con.execute(f"SET threads = {int(count)}")
        try:
            yield
        finally:
            self.con.execute(f"SET threads = {int(previous)}")

    def whole(self, table: str) -> str:
        """The table with every file's rows, for a question about other files' rows while a new file's
        are staged in a temporary table of the same name (`store.staging`): the store's and the stage's."""
        if not self.staged:
            return table
        return (
            f"(SELECT * FROM {lake.ALIAS}.main.{table} UNION ALL SELECT * FROM temp.main.{table}) AS {table}"
        )

    def columns(self, table: str) -> list[str]:
        """The table's columns, looked up once per store (the schema changes only through `migrate`): the
        first lookup reads every table's at once, as an ingest writes a dozen tables and a DuckLake catalog
        answers each question from PostgreSQL."""
        if not self._columns:
            rows = self.con.execute(
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_catalog = current_database() AND table_schema = current_schema() "
                "ORDER BY table_name, ordinal_position"
            ).fetchall()
            for name, column in rows:
                self._columns.setdefault(name, []).append(column)
        if table not in self._columns:  # another catalog's, or none: asked by name, as before
            rows = self.con.execute(
                "SELECT column_name FROM information_schema.columns "
                f"WHERE table_name = {literal(table)} ORDER BY ordinal_position"
            ).fetchall()
            self._columns[table] = [r[0] for r in rows]
        return self._columns[table]

    def insert(self, table: str, rows: Any) -> int:
        """Insert a polars/pandas frame, Arrow table or list of dicts by column name; returns the count."""
        frame = as_arrow(rows)
        if frame.num_rows == 0:
            return 0
        wanted = set(self.columns(table))
        if self.lake and table in AUTO_IDS and AUTO_IDS[table][0] not in frame.column_names:
            import pyarrow as pa  # loaded by what writes (`as_arrow`), not by a command that only reads

            column, kind = AUTO_IDS[table]
            first = self.new_id(kind, frame.num_rows)
            frame = frame.append_column(column, pa.array(range(first, first + frame.num_rows), pa.int64()))
        keep = [c for c in frame.column_names if c in wanted]
        _tracelog_batch = frame.select(keep)  # noqa: F841 (read by name: DuckDB's replacement scan)
        # A replacement scan of a local, not register/unregister: a view dropped inside a transaction stays
        # in it until commit (for rollback), and with it every batch of the file.
        cols = ", ".join(f'"{c}"' for c in keep)
        self.con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _tracelog_batch")
        return frame.num_rows

    def query(self, sql: str, params: list[Any] | None = None) -> pd.DataFrame:
        import pandas  # noqa: F401  (loaded here, not by DuckDB's `.df()`: see `cli.probes`)

        with sql_errors():
            return self._statement(sql, params).df()

    def rows(self, sql: str, params: list[Any] | None = None) -> Rows:
        """The result as plain rows, for a command printing a table (no pandas loaded)."""
        with sql_errors():
            return Rows.fetch(self._statement(sql, params))

    def _statement(self, sql: str, params: list[Any] | None) -> duckdb.DuckDBPyConnection:
        cursor = self.con.execute(sql, params or [])
        if cursor is None:  # DuckDB runs an empty text (or one of comments) as nothing at all
            raise TracelogError("the SQL holds no statement to run")
        return cursor

    def sources(self) -> pd.DataFrame:
        """The ingested files, with their hash, format and line counts."""
        return self.query("SELECT * FROM sources ORDER BY source_id")

    def scalar(self, sql: str, params: list[Any] | dict[str, Any] | None = None) -> Any:
        row = self.con.execute(sql, params or []).fetchone()
        return row[0] if row else None


_SCHEMA_VERSION_SQL = (
    "CREATE TABLE IF NOT EXISTS schema_version "
    "(version INTEGER{key}, name VARCHAR, applied_at TIMESTAMP DEFAULT current_timestamp)"
)


def as_arrow(rows: Any) -> pa.Table:
    # pyarrow (with numpy, 0.05 s) is loaded by what writes: a command that only reads does without it
    import pyarrow as pa

    if isinstance(rows, pa.Table):
        return rows
    # A polars or pandas frame means its library is loaded; neither is imported here, so that a command
    # reading the store does not pay for Polars (0.2 s of CPU at start-up) it never uses.
    polars = sys.modules.get("polars")
    if polars is not None and isinstance(rows, polars.DataFrame):
        return rows.to_arrow()
    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(rows, pandas.DataFrame):
        return pa.Table.from_pandas(rows, preserve_index=False)
    if isinstance(rows, list):
        return pa.Table.from_pylist(rows) if rows else pa.table({})
    raise TypeError(f"cannot insert {type(rows).__name__}")
