"""A DuckLake store: tracelog's tables in a lakehouse that many processes on many nodes write at once.

`--db 'ducklake:postgres:dbname=tracelog host=db.cluster'` (or a DuckDB-file catalog,
`ducklake:/shared/tracelog.ducklake`) attaches a DuckLake catalog, with the Parquet data under
`--data-path` (`TRACELOG_DATA_PATH`; needed only when the store is created, DuckLake remembers it). Every
query of tracelog runs on it unchanged: the catalog is attached and made the default.

Offline by construction: the `ducklake` and `postgres` extensions are the binaries of the
`duckdb-extension-ducklake` and `duckdb-extension-postgres` packages (and `httpfs`, for data on S3, of
`duckdb-extension-httpfs`, with `aws` of `duckdb-extension-aws` for the AWS credential chain: `objects`),
loaded by path, with DuckDB's auto-install and auto-load off; nothing is downloaded. DuckDB loads a
binary only into the version it was built for, which is why pyproject.toml pins `duckdb` and its
packages to one version. Each binary's signature is checked by DuckDB at the first load of that file,
and not again while the file is the same (`Binaries`): the check reads and hashes 80 MB, most of a
reading command's time on a store.

What DuckLake lacks, and how the store does without (DuckLake docs, "Unsupported Features" and
"Conflict Resolution"):
- no sequences, primary keys or unique constraints, no `INSERT ... RETURNING`: the schema files are read
  through `dialect()`, and ids come from counters: in a PostgreSQL catalog PostgreSQL sequences beside
  DuckLake's tables (`create_counters`, `take`), in a DuckDB-file one the `tracelog_ids` table (see
  `Store.new_id`);
- concurrent writers are settled optimistically at commit. Inserts from many transactions into one
  table merge, but an update or delete conflicts with any other transaction's write to the same table,
  and the loser's commit fails. So a write that updates or deletes holds the store's write lock
  (`write_lock`, a PostgreSQL advisory lock held from before the transaction reads until after its
  commit), and a new file's ingest, which only inserts, runs beside the others holding only the locks
  of its path and bytes (`file_keys`: the same bytes from two processes land once). Ids come from the
  PostgreSQL sequences in one statement each (`take`), or from `tracelog_ids`, handed out under the write
  lock (`allocate`, or the locked transaction's own counter).
  A commit lost all the same is done again (`retrying`; `TRACELOG_DEBUG_RETRIES=1` prints each).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import random
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from tracelog.errors import TracelogError
from tracelog.locations import DATA_PATH_ENVVAR
from tracelog.locations import LAKE_PREFIX as PREFIX
from tracelog.store import objects
from tracelog.store.literals import quoted

ALIAS = "tracelog_lake"  # the attached catalog's name inside the connection
# The id counters of the store, one row each (the sequences of the embedded file: schemas/001_init.sql).
ID_KINDS = ("source", "run", "bench", "flag")
WRITES = "writes"  # the row every transaction under the write lock bumps: a count of the store's writes
# (package, extension name as DuckDB loads it, file name in the wheel)
EXTENSIONS = (
    ("duckdb_extension_ducklake", "ducklake", "ducklake"),
    ("duckdb_extension_postgres", "postgres_scanner", "postgres"),
)
RETRIES = 40  # a busy store: 8 writers each losing a few races still land
RETRY_WAIT = 0.05  # seconds before the first retry, growing 1.5x, with jitter, capped at RETRY_WAIT_MAX
RETRY_WAIT_MAX = 2.0
ATTACH_ATTEMPTS = 10
# No extension fetched or loaded behind the user's back (the store's `CONNECT_CONFIG` says the same).
NO_AUTOLOAD = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}
LAKE_EXTRA = "pip install 'tracelog[lake]' (duckdb and its extension packages, of one version)"

T = TypeVar("T")


class ConflictError(TracelogError):
    """A write to a DuckLake store that lost its commit to another writer (nothing of it landed)."""


def extension_files() -> list[tuple[str, Path]]:
    """(name, path) of each extension binary the installed packages ship, of this duckdb's version."""
    return [
        (name, extension_file(package, file_name, "a DuckLake store"))
        for package, name, file_name in EXTENSIONS
    ]


def extension_file(package: str, file_name: str, needed_by: str) -> Path:
    """The binary of this duckdb's version in an extension package, or a TracelogError saying what to
    install."""
    version = f"v{duckdb.__version__}"
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise TracelogError(
            f"{needed_by} needs the Python package {package.replace('_', '-')}, of the same version "
            f"as duckdb (here {duckdb.__version__}): {LAKE_EXTRA}"
        )
    path = Path(spec.origin).parent / "extensions" / version / f"{file_name}.duckdb_extension"
    if not path.is_file():
        have = sorted(p.parent.name for p in Path(spec.origin).parent.glob("extensions/*/*.duckdb_extension"))
        raise TracelogError(
            f"{package.replace('_', '-')} ships the extension for duckdb {', '.join(have) or 'no version'}, "
            f"not {version}: {LAKE_EXTRA}"
        )
    return path


class Binaries:
    """The extension binaries to load, and whether DuckDB has checked their signatures before.

    DuckDB checks an extension's signature on every LOAD: 0.2 s of reading and hashing, each time a
    command opens a store. Once a LOAD with the check on has passed, the file's identity (path, size,
    modification time, inode) is recorded in the per-user cache; while every binary still matches its
    record, the connection skips the check (`allow_unsigned_extensions`). A file replaced (an upgrade, a
    reinstall) is checked again. What this trusts: that a binary rewritten in place keeps none of those
    four, short of someone who may write the user's site-packages, and who could as well change
    tracelog's own code there. The setting also lets `tracelog sql` LOAD an unsigned extension by path,
    which the user's own `duckdb -unsigned` allows anyway."""

    def __init__(self) -> None:
        self.paths = [_named_copy(name, path) for name, path in extension_files()]
        self.record = _cache_dir() / f"v{duckdb.__version__}" / "verified"
        try:
            self._known = self.record.read_text(encoding="utf-8").splitlines()
        except OSError:
            self._known = []
        self.verified = all(_identity(p) in self._known for p in self.paths)

    def remember(self, paths: list[Path] | None = None) -> None:
        """Record the binaries as checked (after their LOAD passed with the check on). The records of other
        installs (another virtual environment's binaries, same user) are kept."""
        paths = self.paths if paths is None else paths
        if all(_identity(p) in self._known for p in paths):
            return
        mine = {str(p) for p in paths}
        others = [line for line in self._known if line.split(" ", 3)[-1] not in mine]
        self._known = [*others, *map(_identity, paths)]
        with suppress(OSError):
            self.record.parent.mkdir(parents=True, exist_ok=True)
            handle, partial = tempfile.mkstemp(dir=self.record.parent, suffix=".partial")
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write("".join(f"{line}\n" for line in self._known))
            os.replace(partial, self.record)

    def load_extension(self, con: duckdb.DuckDBPyConnection, extension: tuple[str, str, str]) -> None:
        """Load an extension a store on object storage needs (`objects.HTTPFS`, or `objects.AWS` for the
        AWS credential chain) into `con`, once. Its signature is checked as the others' are: where `con`
        skips the check (`verified`) and this binary was never checked, a connection of its own that
        checks it loads it first."""
        package, name, file_name = extension
        path = _named_copy(name, extension_file(package, file_name, objects.NEEDED_BY[name]))
        if self.verified and _identity(path) not in self._known:
            checker = duckdb.connect(":memory:", config=dict(NO_AUTOLOAD))
            try:
                _load(checker, path)
            finally:
                checker.close()
        _load(con, path)
        self.remember([path])


def _load(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    try:
        con.execute(f"LOAD '{path}'")
    except duckdb.Error as exc:
        raise TracelogError(
            f"cannot load the {path.stem} extension: {str(exc).splitlines()[0]}", str(path)
        ) from None


def _identity(path: Path) -> str:
    stat = path.stat()
    return f"{stat.st_size} {stat.st_mtime_ns} {stat.st_ino} {path}"


def _cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tracelog" / "extensions"


def _named_copy(name: str, path: Path) -> Path:
    """The binary under the extension's own name (DuckDB derives the entry point from the file name, and
    the postgres wheel calls its file `postgres`), copied once into a per-user cache. A copy is written
    beside and renamed into place, never over a file another process may have loaded."""
    if path.stem == name:
        return path
    target = _cache_dir() / path.parent.name / f"{name}.duckdb_extension"
    if target.is_file() and target.stat().st_size == path.stat().st_size:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=target.parent, suffix=".partial")
    os.close(handle)
    shutil.copyfile(path, partial)
    os.replace(partial, target)
    return target


def attach(
    con: duckdb.DuckDBPyConnection, db: str, data: str | None, read_only: bool, binaries: Binaries
) -> str | None:
    """Load the extensions from their packages and attach the store as the connection's default; its data
    path (given, or the one the store recorded), made reachable first where it is on object storage."""
    for path in binaries.paths:
        _load(con, path)
    binaries.remember()
    remote = data if objects.is_remote(data) else None
    if remote:
        objects.prepare(con, remote, functools.partial(binaries.load_extension, con))
    options = []
    if data:
        options.append(f"DATA_PATH '{quoted(data)}'")
    if read_only:
        options.append("READ_ONLY")
    suffix = f" ({', '.join(options)})" if options else ""
    try:
        # Processes that open a new store at once race to create DuckLake's own catalog tables; the
        # losers see "already exists" and attach again to the catalog the winner made. A store whose
        # recorded data path is on object storage is refused until httpfs is loaded, and attached again.
        wait = RETRY_WAIT
        for attempt in range(ATTACH_ATTEMPTS):
            try:
                con.execute(f"ATTACH '{quoted(db)}' AS {ALIAS}{suffix}")
                break
            except duckdb.Error as exc:
                text = str(exc)
                needs = objects.NEEDS_HTTPFS.search(text)
                if needs and not remote:
                    remote = needs.group(1)
                    objects.prepare(con, remote, functools.partial(binaries.load_extension, con))
                    continue
                racing = "Failed to initialize DuckLake" in text and (
                    "duplicate key" in text or "already exists" in text
                )
                if not racing or attempt == ATTACH_ATTEMPTS - 1:
                    raise
                time.sleep(wait * (0.5 + random.random()))
                wait = min(wait * 1.5, RETRY_WAIT_MAX)
    except duckdb.Error as exc:
        first = str(exc).splitlines()[0]
        hint = "" if data else f"; a new store needs --data-path (or {DATA_PATH_ENVVAR})"
        raise TracelogError(f"cannot attach the DuckLake store: {first}{hint}", db) from None
    con.execute(f"USE {ALIAS}")
    return data or remote or stored_data_path(con)


def stored_data_path(con: duckdb.DuckDBPyConnection) -> str | None:
    """The data path DuckLake recorded when the store was created (its `ducklake_metadata` table)."""
    try:
        row = con.execute(
            f"SELECT value FROM __ducklake_metadata_{ALIAS}.ducklake_metadata WHERE key = 'data_path'"
        ).fetchone()
    except duckdb.Error:
        return None
    return str(row[0]) if row and row[0] else None


# The key of the PostgreSQL advisory lock a writer holds from its first statement to its commit: any
# 64-bit number of the application's choosing (PostgreSQL docs, "Advisory Lock Functions").
WRITE_LOCK_KEY = 0x7472616365  # "trace"


@contextmanager
def write_lock(
    con: duckdb.DuckDBPyConnection, db: str, keys: tuple[int, ...] = (WRITE_LOCK_KEY,)
) -> Iterator[None]:
    """Hold advisory locks around one write transaction, from before it reads the store until after its
    commit returned.

    With a PostgreSQL catalog each lock is a transaction-level advisory lock, taken on a second
    connection (a cursor: its own DuckDB transaction, so its own PostgreSQL transaction) and let go when
    that one ends, after the writer's commit; a killed writer's connection drops and lets it go. The
    next holder's snapshot (taken at its first read, after the lock) has the last commit in it. Keys are
    taken in order, so two writers never wait for each other crosswise."""
    if not postgres_catalog(db):
        yield
        return
    lock = con.cursor()
    try:
        lock.execute("BEGIN TRANSACTION")
        for key in sorted(set(keys)):
            lock.execute(
                f"CALL postgres_execute('__ducklake_metadata_{ALIAS}', 'SELECT pg_advisory_xact_lock({key})')"
            )
        yield
    finally:
        with suppress(duckdb.Error):
            lock.execute("ROLLBACK")
        lock.close()


def file_keys(path: str, fingerprint: str | None) -> tuple[int, ...]:
    """The lock keys of one file's ingest: its path (two processes growing one log take turns) and its
    bytes (the same bytes from two processes: the second finds the first's source). 64-bit, signed, as
    PostgreSQL's bigint takes them; the store's own write lock is a small number none of these hit."""
    keys = [f"path:{path}"] + ([f"bytes:{fingerprint}"] if fingerprint else [])
    return tuple(int.from_bytes(hashlib.sha256(k.encode()).digest()[:8], "big", signed=True) for k in keys)


def allocate(con: duckdb.DuckDBPyConnection, db: str, kind: str, count: int) -> int:
    """The first of `count` new ids of `kind`, handed out in a transaction of their own under the store's
    write lock (retried if a writer without the lock committed to `tracelog_ids` first). For a writer
    whose own transaction does not hold the lock: ids taken are never given again, even if that
    transaction rolls back (a gap, as a sequence leaves)."""

    def once() -> int:
        with write_lock(con, db):
            cursor = con.cursor()
            try:
                cursor.execute("BEGIN TRANSACTION")
                row = cursor.execute(
                    f"SELECT next_id FROM {ALIAS}.tracelog_ids WHERE kind = ?", [kind]
                ).fetchone()
                assert row is not None, kind
                cursor.execute(
                    f"UPDATE {ALIAS}.tracelog_ids SET next_id = next_id + ? WHERE kind = ?", [count, kind]
                )
                cursor.execute("COMMIT")
                return int(row[0])
            except BaseException:
                with suppress(duckdb.Error):
                    cursor.execute("ROLLBACK")
                raise
            finally:
                cursor.close()

    return retrying(once)


COUNTERS_VERSION = 15  # schema file 015: from it on, a PostgreSQL catalog's ids come from its sequences
METADATA = f"__ducklake_metadata_{ALIAS}"  # the catalog's own database, as DuckLake attaches it
# The hand-out's lock, in PostgreSQL's two-key space: no one-key lock (the write lock, `file_keys`) meets it.
TAKE_LOCK = (0x7472, 0x6964)
_TAKE_SQL = f"""CREATE OR REPLACE FUNCTION tracelog_take(wanted text, n bigint) RETURNS bigint
LANGUAGE plpgsql AS $take$
DECLARE
    seq regclass := format('tracelog_%s_ids', wanted)::regclass;
    first bigint;
BEGIN
    PERFORM pg_advisory_xact_lock({TAKE_LOCK[0]}, {TAKE_LOCK[1]});
    first := nextval(seq);
    IF n > 1 THEN
        PERFORM setval(seq, first + n - 1);
    END IF;
    RETURN first;
END
$take$"""


def postgres_catalog(db: str) -> bool:
    return db.startswith(f"{PREFIX}postgres:")


def sequence(kind: str) -> str:
    """The PostgreSQL sequence of one kind of id (`create_counters`)."""
    if kind not in ID_KINDS:
        raise ValueError(kind)
    return f"tracelog_{kind}_ids"


def next_ids_sql(kind: str) -> str:
    """PostgreSQL SQL for the next id a kind's sequence will hand out."""
    return f"SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM {sequence(kind)}"


def create_counters(con: duckdb.DuckDBPyConnection, seeds: dict[str, int]) -> None:
    """The id counters of a PostgreSQL catalog: a PostgreSQL sequence per kind of id, beside DuckLake's
    own tables, started where `tracelog_ids` stands, and a function that hands out a block of ids from one
    in one statement (`take`).

    A hand-out from `tracelog_ids` is a DuckLake transaction: it holds the store's write lock, reads the
    table's files and commits a snapshot (about 25 ms), and a new file's ingest took two or three of them,
    each one making every other writer wait. A sequence hands ids out in about 1 ms, outside any
    transaction's snapshot: PostgreSQL never rolls it back, and no reader's isolation level makes two
    takers conflict (a counter row updated in the REPEATABLE READ transactions that DuckDB's postgres
    extension opens did: "could not serialize access due to concurrent update"). Run on a connection of
    its own, so that it is committed at once; idempotent (a counter never goes back), so that a migration
    done again after a lost commit changes nothing."""
    statements = []
    for kind in ID_KINDS:
        seed = int(seeds.get(kind, 1))
        statements.append(f"CREATE SEQUENCE IF NOT EXISTS {sequence(kind)}")
        statements.append(
            f"SELECT setval('{sequence(kind)}', greatest({seed}, ({next_ids_sql(kind)})), false)"
        )
    statements.append(_TAKE_SQL)
    cursor = con.cursor()
    try:
        for sql in statements:
            cursor.execute(f"CALL postgres_execute('{METADATA}', '{quoted(sql)}')")
    finally:
        cursor.close()


def take(con: duckdb.DuckDBPyConnection, kind: str, count: int) -> int:
    """The first of `count` new ids of `kind` from a PostgreSQL catalog's sequences (`create_counters`):
    ids taken are never given again, even if the transaction that took them rolls back."""
    sequence(kind)  # a kind of id, or ValueError
    cursor = con.cursor()
    try:
        # every row fetched: a cursor closed before its result is read rolls its statement back
        rows = cursor.execute(
            f"SELECT * FROM postgres_query('{METADATA}', 'SELECT tracelog_take(''{kind}'', {int(count)})')"
        ).fetchall()
    finally:
        cursor.close()
    row = rows[0] if rows else None
    if row is None or row[0] is None:
        raise TracelogError(f"the store's catalog has no id counter for {kind!r}")
    return int(row[0])


def dialect(sql: str) -> str:
    """A schema file as DuckLake takes it: sequences, their defaults and primary keys dropped (ids come
    from `tracelog_ids`), and a boolean default written as the string literal DuckLake accepts in
    `ADD COLUMN` ("cannot add a column with a non-literal default value")."""
    sql = re.sub(r"CREATE SEQUENCE[^;]*;", "", sql)
    sql = re.sub(r"DEFAULT nextval\('\w+'\)", "", sql)
    sql = re.sub(r",\s*PRIMARY KEY \([^)]*\)", "", sql)
    sql = sql.replace("PRIMARY KEY", "")
    return re.sub(r"DEFAULT (true|false)\b", r"DEFAULT '\1'", sql)


IDS_TABLE_SQL = (
    "CREATE TABLE IF NOT EXISTS tracelog_ids (kind VARCHAR, next_id BIGINT);"
    + "INSERT INTO tracelog_ids VALUES "
    + ", ".join(f"('{kind}', 1)" for kind in (*ID_KINDS, WRITES))
    + ";"
)


def is_conflict(exc: BaseException) -> bool:
    """A commit that lost a race with another writer (DuckLake's "Failed to commit DuckLake transaction",
    after its own retries of changes that did not conflict)."""
    text = str(exc)
    return isinstance(exc, duckdb.Error) and (
        "Failed to commit DuckLake transaction" in text
        or ("DuckLake" in text and "onflict" in text)
        or "Transaction conflict" in text
    )


def retried(function: Callable[..., T]) -> Callable[..., T]:
    """A store function (its first argument the store) run again whole after a lost commit, when the
    store is a DuckLake one."""

    @functools.wraps(function)
    def run(store: Any, *args: Any, **kwargs: Any) -> T:
        if getattr(store, "lake", False):
            return retrying(lambda: function(store, *args, **kwargs))
        return function(store, *args, **kwargs)

    return run


def retrying(work: Callable[[], T], attempts: int = RETRIES) -> T:
    """`work` (one whole transaction) again after a commit lost to another writer, waiting a little
    longer each time, with jitter so that the losers do not meet again."""
    wait = RETRY_WAIT
    for attempt in range(attempts):
        try:
            return work()
        except (duckdb.Error, ConflictError) as exc:
            if attempt == attempts - 1 or not (isinstance(exc, ConflictError) or is_conflict(exc)):
                raise
            lost = exc
        if os.environ.get("TRACELOG_DEBUG_RETRIES"):
            print(f"retry {attempt + 1}: {str(lost).splitlines()[0]}", file=sys.stderr)
        time.sleep(wait * (0.5 + random.random()))
        wait = min(wait * 1.5, RETRY_WAIT_MAX)
    raise AssertionError("unreachable")
