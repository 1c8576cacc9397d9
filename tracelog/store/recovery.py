"""After an unclean stop: rows whose run, bench or source is gone are deleted when the file next opens.

A file's ingest is one transaction, so a stop at any point should leave all of it or none. DuckDB 1.5
does not always: killed while a commit wrote its write-ahead log, the file came back, now and then,
with the rows of the ingest's largest table (written to the database file before the commit, and only
pointed to from the log) and not the run they belong to. A write-ahead log found beside the file when it
opens is the mark of such a stop; the rows no parent owns are then deleted before anything reads them,
and the next ingest of that file writes it whole, as after any failed ingest.
"""

from __future__ import annotations

import os

from tracelog.store.tables import (
    BENCH_CHILD_TABLES,
    BENCH_SUBJECT_KINDS,
    MODEL_OUTPUT_TABLES,
    RUN_CHILD_TABLES,
    SOURCE_CHILD_TABLES,
)


def unclean_stop(path: str) -> bool:
    """Whether the database file at `path` was left with a write-ahead log (its process did not close it)."""
    return os.path.exists(f"{path}.wal")


def orphan_deletes() -> list[str]:
    """The statements that delete the rows whose source, run or bench no longer exists, parents first
    (`Store` runs them in one transaction when it opens a file after an unclean stop)."""
    statements = [
        f"DELETE FROM {table} WHERE source_id NOT IN (SELECT source_id FROM sources)"
        for table in SOURCE_CHILD_TABLES
        if table != "sources"
    ]
    statements.append(
        "DELETE FROM events WHERE run_id IS NOT NULL AND run_id NOT IN (SELECT run_id FROM runs)"
    )
    statements += [
        f"DELETE FROM {table} WHERE run_id NOT IN (SELECT run_id FROM runs)" for table in RUN_CHILD_TABLES
    ]
    statements += [
        f"DELETE FROM {table} WHERE bench_id NOT IN (SELECT bench_id FROM benches)"
        for table in BENCH_CHILD_TABLES
    ]
    kinds = ", ".join(repr(k) for k in BENCH_SUBJECT_KINDS)
    statements += [
        f"DELETE FROM {table} WHERE (subject_kind = 'run' AND subject_id NOT IN (SELECT run_id FROM runs)) "
        f"OR (subject_kind IN ({kinds}) AND subject_id NOT IN (SELECT bench_id FROM benches))"
        for table in MODEL_OUTPUT_TABLES
    ]
    return statements
