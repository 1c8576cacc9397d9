"""Every table of the store as Parquet, for readers that never install tracelog (pandas, pyarrow, Spark,
Trino, DuckDB itself).

One folder per table. Tables that grow with the logs are hive-partitioned (`iterations/run_id=7/...`)
by the entity their rows hang off, so a reader scanning one run opens only that run's files; the small
tables (sources, schema_version, calibrations) are one file each. A table with no rows is still written,
as one file with its columns, so its schema is there for the reader. Views are not exported: they are
queries over these tables (see `schemas/`), not data.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from tracelog.errors import TracelogError
from tracelog.store import Store
from tracelog.store.literals import quoted
from tracelog.store.tables import BENCH_CHILD_TABLES, MODEL_OUTPUT_TABLES, RUN_CHILD_TABLES

# The column a table is split by: the run or bench it hangs off, the source for runs and benches
# themselves, the kind of subject for the model's outputs.
PARTITION_COLUMNS: dict[str, str] = {
    **dict.fromkeys(RUN_CHILD_TABLES, "run_id"),
    **dict.fromkeys(BENCH_CHILD_TABLES, "bench_id"),
    **dict.fromkeys(MODEL_OUTPUT_TABLES, "subject_kind"),
    "runs": "source_id",
    "benches": "source_id",
    "unparsed": "source_id",
    "events": "source_id",
}


@dataclass
class Exported:
    table: str
    rows: int
    path: str
    partition_by: str | None


def base_tables(store: Store) -> list[str]:
    return [
        row[0]
        for row in store.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
            "AND table_schema = 'main' AND table_catalog = current_database() ORDER BY table_name"
        ).fetchall()
    ]


def export_parquet(store: Store, directory: str, overwrite: bool = False) -> list[Exported]:
    """Write every table under `directory` (created if missing), one folder per table.

    A table folder already there is refused unless `overwrite` (then it is replaced), so an export
    never mixes files of two stores."""
    tables = base_tables(store)
    existing = [t for t in tables if os.path.exists(os.path.join(directory, t))]
    if existing and not overwrite:
        raise TracelogError(
            f"already holds an export ({', '.join(existing[:3])}{', ...' if len(existing) > 3 else ''}); "
            "use --force to replace it, or another folder",
            directory,
        )
    os.makedirs(directory, exist_ok=True)
    done = []
    for table in tables:
        target = os.path.join(directory, table)
        if os.path.exists(target):
            shutil.rmtree(target) if os.path.isdir(target) else os.remove(target)
        rows = int(store.scalar(f'SELECT count(*) FROM "{table}"'))
        column = PARTITION_COLUMNS.get(table)
        if column is not None and column not in store.columns(table):
            column = None
        nulls = column is not None and store.scalar(
            f'SELECT count(*) FROM "{table}" WHERE "{column}" IS NULL'
        )
        if column is not None and rows and not nulls:
            store.con.execute(
                f"COPY (SELECT * FROM \"{table}\") TO '{quoted(target)}' "
                f'(FORMAT parquet, PARTITION_BY ("{column}"))'
            )
        else:
            column = None
            os.makedirs(target)
            store.con.execute(
                f"COPY (SELECT * FROM \"{table}\") TO '{quoted(os.path.join(target, 'data.parquet'))}' "
                "(FORMAT parquet)"
            )
        done.append(Exported(table, rows, target, column))
    return done
