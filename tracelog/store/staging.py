"""A new file's rows gathered on this machine, then written into a DuckLake store in one statement per table.

Every statement that reads or writes a DuckLake table asks the catalog's PostgreSQL server for the table's
files and statistics first (DuckLake caches the schema per transaction, not a table's file list): 10-40 ms
each, and a 25 MB log's ingest and refresh run some ninety of them, most of its time in a shared store.
The rows of a new file hang off its own runs and benches, and nothing it does before its commit reads
another file's rows of those tables (`STAGED`). So its transaction makes a temporary table of the same
name and columns for each: DuckDB looks in `temp` before the attached store, from views too, so the
parser's inserts, the hardware scan and the refresh's rules read and write them locally, unchanged. At
the end each one is copied into the store (`INSERT INTO store.t SELECT * FROM temp.t`) inside the same
transaction, and the commit lands them all at once, as before.

`sources`, `runs` and `benches` are staged too: the two questions a new file asks of other files' rows
there, whether its bytes were stored before (asked again once it is read) and the hardware of benches that
ran on its hosts (`resolve.bench_facts`), read the store's table and the stage's together (`Store.whole`).
Left in the store: the id counters, the store's calibrations and tags. A file that may share a run with
an earlier file (an event file and its text log, `store.merge`) reads and changes the earlier run, and
`--force` deletes the source it replaces, so those are written without staging.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import duckdb

from tracelog.store.lake import ALIAS

if TYPE_CHECKING:
    from tracelog.store import Store

# The file's source row, and the tables whose rows hang off its runs and benches, written by its ingest
# and its refresh.
STAGED = (
    "sources",
    "runs",
    "benches",
    "iterations",
    "timers",
    "memory",
    "unparsed",
    "events",
    "iteration_metrics",
    "run_params",
    "run_hardware",
    "collectives",
    "collective_iterations",
    "perftest",
    "p2p",
    "links",
    "bench_devices",
    "bench_params",
    "bench_hardware",
    "predictions",
    "comparisons",
    "flags",
    "run_steady_cache",
    "loss_spikes",
    "run_progress",
    "iteration_buckets",
    "iteration_values",
    "iteration_value_sums",
    "flat_loss_stretches",
)


def table_ddl(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """`CREATE TEMP TABLE` for each staged table, with the store's columns, types, defaults and NOT NULLs
    in its order (one question to the catalog DuckLake loaded for the transaction)."""
    rows = con.execute(
        "SELECT table_name, column_name, data_type, column_default, is_nullable FROM duckdb_columns() "
        f"WHERE database_name = '{ALIAS}' AND schema_name = 'main' AND table_name IN "
        f"({', '.join(repr(t) for t in STAGED)}) ORDER BY table_name, column_index"
    ).fetchall()
    columns: dict[str, list[str]] = {}
    for table, column, data_type, default, nullable in rows:
        spec = f'"{column}" {data_type}'
        if default is not None and default != "NULL":
            spec += f" DEFAULT {default}"
        if not nullable:
            spec += " NOT NULL"
        columns.setdefault(table, []).append(spec)
    return {table: f"CREATE TEMP TABLE {table} ({', '.join(specs)})" for table, specs in columns.items()}


@contextmanager
def staged(store: Store, spill: str) -> Iterator[None]:
    """Inside a write transaction of a DuckLake store: the staged tables local while the block runs, then
    copied into the store. An exception copies nothing (the transaction's rollback drops the temporary
    tables with the rest). `spill` is the folder DuckDB writes them out to past its memory limit, so that
    a large file stays within it."""
    con = store.con
    if store.spill_directory is None:
        # once per connection: DuckDB refuses to move a temporary directory it has spilled to (even to the
        # same folder), and the refusal, inside this transaction, aborts it; the next file of one
        # `tracelog ingest` after a file large enough to spill then failed (lake_bench's 25 MB logs)
        con.execute(f"SET temp_directory = '{spill.replace(chr(39), chr(39) * 2)}'")
        store.spill_directory = spill
    made = table_ddl(con)
    for ddl in made.values():
        con.execute(ddl)
    store.staged = True
    try:
        yield
    finally:
        store.staged = False
    for table in made:
        if con.execute(f"SELECT count(*) FROM temp.main.{table}").fetchone() != (0,):
            con.execute(f"INSERT INTO {ALIAS}.main.{table} SELECT * FROM temp.main.{table}")
        con.execute(f"DROP TABLE temp.main.{table}")
