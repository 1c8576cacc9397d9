"""Rows of one source into the store: run and bench keys mapped to ids, the user's options applied, and
what a source keeps when it is parsed again after it grew.

`ingest.py` decides which file is read and from where; this module writes what its parser hands out,
inside the transaction `ingest.py` holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from tracelog.clusters import Clusters
from tracelog.parsers import checkpoints
from tracelog.parsers.base import PARTLY_READ_EVENT, RESUME_TABLE, RETRACT_TABLE, Batch
from tracelog.store import Store, progress
from tracelog.store.runs import set_shape_in, set_tags
from tracelog.store.tables import (
    BENCH_CHILD_TABLES,
    MODEL_OUTPUT_TABLES,
    RUN_CHILD_TABLES,
    SOURCE_CHILD_TABLES,
)


@dataclass
class RunOptions:
    """What the user says about the runs and benches of the files being ingested (overrides what the log
    says); the GPU, fabric, nodes, GPUs and NICs per node apply to both."""

    name: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    gpu_model: str | None = None
    fabric: str | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None
    nics_per_node: int | None = None
    clusters: Clusters | None = None  # the [cluster.NAME] sections that apply (see `resolve`)
    checkpoint: str | None = None  # the published checkpoint the runs trained (`parsers.checkpoints`)


def records(rows: Any) -> list[dict[str, Any]]:
    """A batch's rows as dicts, whether the parser handed out a polars frame or a list of dicts."""
    return rows.to_dicts() if isinstance(rows, pl.DataFrame) else list(rows)


READ_TABLES = ("iterations", "memory", "timers")
"""The tables whose rows say their line was read (see `SourceWriter.unparsed_but_read`)."""


class LineMarks:
    """A set of line numbers, one byte a line from the lowest marked (5 MB per GB of log)."""

    def __init__(self) -> None:
        self.base = 0
        self.marks = np.zeros(0, dtype=np.bool_)

    def mark(self, lines: np.ndarray) -> None:
        if not len(lines):
            return
        low, high = int(lines.min()), int(lines.max())
        if not len(self.marks):
            self.base = low
        elif low < self.base:
            self.marks = np.concatenate([np.zeros(self.base - low, dtype=np.bool_), self.marks])
            self.base = low
        if high - self.base >= len(self.marks):
            grown = np.zeros(max(high - self.base + 1, 2 * len(self.marks)), dtype=np.bool_)
            grown[: len(self.marks)] = self.marks
            self.marks = grown
        self.marks[lines - self.base] = True

    def holds(self, lines: np.ndarray) -> np.ndarray:
        at = lines - self.base
        inside = (at >= 0) & (at < len(self.marks))
        held = np.zeros(len(lines), dtype=np.bool_)
        held[inside] = self.marks[at[inside]]
        return held


class SourceWriter:
    """Writes one source's batches, mapping the parser's run/bench keys to database ids."""

    def __init__(self, store: Store, source_id: int, options: RunOptions, kept: Kept | None = None):
        self.store = store
        self.source_id = source_id
        self.options = options
        self.kept = kept or Kept()
        self.run_ids: dict[int, int] = {}
        self.bench_ids: dict[int, int] = {}
        self.rows = 0
        self.unparsed = 0
        self.resume_state: str | None = None
        # what `unparsed_but_read` asks of the rows written: the lines read rows came from, the unparsed
        # rows' lines, and the lines the parser said it read only in part
        self._read_lines = LineMarks()
        self._unparsed_lines: list[np.ndarray] = []
        self._partly_read: set[int] = set()

    def adopt(self, finish_tables: tuple[str, ...]) -> None:
        """Go on writing a source that resumes: its runs and benches keep their ids, and the rows its
        parser writes whole again at the end of every parse (`FINISH_TABLES`) are cleared for that."""
        con = self.store.con
        self.run_ids = dict(
            con.execute("SELECT run_key, run_id FROM runs WHERE source_id = ?", [self.source_id]).fetchall()
        )
        self.bench_ids = dict(
            con.execute(
                "SELECT bench_key, bench_id FROM benches WHERE source_id = ?", [self.source_id]
            ).fetchall()
        )
        for table in finish_tables:
            con.execute(
                f"DELETE FROM {table} WHERE run_id IN (SELECT run_id FROM runs WHERE source_id = ?)",
                [self.source_id],
            )
        # A value out of range in those rows, or in a run's record (also written at the end), is told
        # again by the resumed parse.
        for table in ("runs", *finish_tables):
            con.execute(
                "DELETE FROM events WHERE source_id = ? AND kind = 'bad_value' AND starts_with(text, ?)",
                [self.source_id, f"{table}."],
            )

    def retract(self, rows: list[dict[str, Any]]) -> None:
        """Delete rows the last parse of a resumed source wrote at its end (`RETRACT_TABLE`), with the
        `bad_value` events about them: the resumed parse writes them again."""
        first_rewritten: dict[int, int] = {}
        for row in rows:
            table, run_id = str(row["table"]), self.run_ids.get(int(row["run_key"]))
            if table not in RUN_CHILD_TABLES:
                raise ValueError(f"{table} is not a table of a run's rows")
            if run_id is None:
                continue
            self.store.con.execute(
                f"DELETE FROM {table} WHERE run_id = ? AND line_no = ?", [run_id, int(row["line_no"])]
            )
            if table == "iterations":
                line = int(row["line_no"])
                first_rewritten[run_id] = min(line, first_rewritten.get(run_id, line))
            self.store.con.execute(
                "DELETE FROM events WHERE source_id = ? AND kind = 'bad_value' AND line_no = ? "
                "AND starts_with(text, ?)",
                [self.source_id, int(row["line_no"]), f"{table}."],
            )
        for run_id, line in first_rewritten.items():
            progress.rewind(self.store.con, run_id, line)

    def unparsed_but_read(self, since: int = 0) -> int:
        """Unparsed rows written after line `since` whose line was read too (an iteration, memory or timer
        row of one of the source's runs came from it): a progress bar with another stream's words glued
        behind it keeps those words, but the line was read, so it is not counted among the unparsed. A line
        the parser said it read only in part (`PARTLY_READ_EVENT`) stays counted.

        Answered from the line numbers of the rows as they were written (`write`), not from the tables: a
        1 GB log holds 9 M read rows, which a query probed against its 1 M unparsed lines for 0.8 CPU s
        after the parse, on the ingest's critical path."""
        if not self.unparsed or not self.run_ids or not self._unparsed_lines:
            return 0
        lines = np.concatenate(self._unparsed_lines)
        lines = lines[lines > since]
        read = self._read_lines.holds(lines)
        if self._partly_read:
            read &= ~np.isin(lines, np.fromiter(self._partly_read, dtype=np.int64))
        return int(read.sum())

    def _note_lines(self, table: str, frame: pl.DataFrame) -> None:
        """Which lines the rows of `frame` came from, for `unparsed_but_read`."""
        if "line_no" not in frame.columns:
            return
        if table in READ_TABLES:
            self._read_lines.mark(frame["line_no"].drop_nulls().to_numpy().astype(np.int64, copy=False))
        elif table == "unparsed":
            self._unparsed_lines.append(frame["line_no"].drop_nulls().to_numpy().astype(np.int64))
        elif table == "events" and "kind" in frame.columns:
            partly = frame.filter(pl.col("kind") == PARTLY_READ_EVENT)["line_no"].drop_nulls()
            self._partly_read.update(partly.to_list())

    def run_id(self, key: int) -> int:
        if key not in self.run_ids:
            run_id = self.kept.run_ids.get(key)
            if run_id is None:
                run_id = self.store.new_id("run")
            self.store.con.execute(
                "INSERT INTO runs (run_id, source_id, run_key) VALUES (?, ?, ?)",
                [run_id, self.source_id, key],
            )
            self.run_ids[key] = int(run_id)
        return self.run_ids[key]

    def bench_id(self, key: int, tool: str = "unknown") -> int:
        if key not in self.bench_ids:
            bench_id = self.kept.bench_ids.get(key)
            if bench_id is None:
                bench_id = self.store.new_id("bench")
            self.store.con.execute(
                "INSERT INTO benches (bench_id, source_id, bench_key, tool) VALUES (?, ?, ?, ?)",
                [bench_id, self.source_id, key, tool],
            )
            self.bench_ids[key] = int(bench_id)
        return self.bench_ids[key]

    def write(self, batch: Batch) -> None:
        if batch.table == RESUME_TABLE:
            self.resume_state = str(records(batch.rows)[0]["state"])
            return
        if batch.table == RETRACT_TABLE:
            self.retract(records(batch.rows))
            return
        if batch.table == "runs":
            self._update_entities("runs", "run_id", self.run_id, batch.rows)
            return
        if batch.table == "benches":
            self._update_entities("benches", "bench_id", self.bench_id, batch.rows)
            return
        frame = batch.rows if isinstance(batch.rows, pl.DataFrame) else pl.DataFrame(batch.rows)
        if frame.is_empty():
            return
        frame = self._map_keys(frame)
        if batch.table in ("unparsed", "events"):
            frame = frame.with_columns(pl.lit(self.source_id, dtype=pl.Int32).alias("source_id"))
        count = self.store.insert(batch.table, frame)
        self._note_lines(batch.table, frame)
        if batch.table == "unparsed":
            self.unparsed += count
        elif batch.table != "events":
            self.rows += count

    def _map_keys(self, frame: pl.DataFrame) -> pl.DataFrame:
        for key, id_col, make in (
            ("run_key", "run_id", self.run_id),
            ("bench_key", "bench_id", self.bench_id),
        ):
            if key not in frame.columns:
                continue
            column = frame[key]
            low, high = column.min(), column.max()
            if low is not None and low == high and not column.has_nulls():
                # One key in the whole batch (nearly every batch of a long log): a constant, not a lookup
                # over every row.
                mapped = pl.lit(make(int(column[0])), dtype=pl.Int32)
            else:
                keys = [k for k in column.unique().to_list() if k is not None]
                mapping = {k: make(int(k)) for k in keys}
                mapped = pl.col(key).replace_strict(mapping, default=None, return_dtype=pl.Int32)
            frame = frame.with_columns(mapped.alias(id_col)).drop(key)
        return frame

    def _update_entities(self, table: str, id_col: str, make: Callable[..., int], rows: Any) -> None:
        key_col = "run_key" if table == "runs" else "bench_key"
        columns = set(self.store.columns(table)) - {id_col, "source_id", key_col}
        for record in records(rows):
            key = int(record[key_col])
            entity = make(key, record["tool"]) if table == "benches" and "tool" in record else make(key)
            values = {k: v for k, v in record.items() if k in columns and v is not None and k != "run_params"}
            if values:
                sets = ", ".join(f'"{k}" = ?' for k in values)
                self.store.con.execute(
                    f"UPDATE {table} SET {sets} WHERE {id_col} = ?", [*values.values(), entity]
                )
            extra = record.get("run_params")
            if table == "runs" and extra:
                self.write(Batch("run_params", [{"run_key": key, **p} for p in extra]))

    def apply_options(self) -> None:
        """What the user said (on this command line, or earlier about a file that grew since) wins over
        what the log said."""
        self.kept.restore(self.store, self.run_ids, self.bench_ids)
        opts = self.options
        values = {
            "gpu_model": opts.gpu_model,
            "fabric": opts.fabric,
            "nodes": opts.nodes,
            "gpus_per_node": opts.gpus_per_node,
            "nics_per_node": opts.nics_per_node,
        }
        found = checkpoints.checkpoint(opts.checkpoint) if opts.checkpoint is not None else None
        for run_key, run_id in self.run_ids.items():
            sets = {k: v for k, v in values.items() if v is not None}
            if opts.name:
                sets["name"] = opts.name if len(self.run_ids) == 1 else f"{opts.name}.{run_key}"
            if found is not None and opts.checkpoint is not None:
                said = checkpoints.shape_params(found, opts.checkpoint)
                said["shape_from"] = f"checkpoint {opts.checkpoint.strip()} (ingest --model)"
                set_shape_in(self.store, run_id, checkpoints.shape_columns(found), said)
            if sets:
                cols = ", ".join(f'"{k}" = ?' for k in sets)
                self.store.con.execute(f"UPDATE runs SET {cols} WHERE run_id = ?", [*sets.values(), run_id])
            set_tags(self.store, run_id, opts.tags)
        bench_values = {
            "gpu_model": opts.gpu_model,
            "fabric": opts.fabric,
            "nodes": opts.nodes,
            "gpus_per_node": opts.gpus_per_node,
            "nics_per_node": opts.nics_per_node,
        }
        bench_sets = {k: v for k, v in bench_values.items() if v is not None}
        for bench_id in self.bench_ids.values():
            if bench_sets:
                cols = ", ".join(f'"{k}" = ?' for k in bench_sets)
                self.store.con.execute(
                    f"UPDATE benches SET {cols} WHERE bench_id = ?", [*bench_sets.values(), bench_id]
                )
        self.store.con.execute(
            "UPDATE runs SET name = coalesce(name, ?) WHERE source_id = ?",
            [default_run_name(self.store, self.source_id), self.source_id],
        )
        if opts.nodes is not None or opts.gpus_per_node is not None:
            self.store.con.execute(
                "UPDATE runs SET gpus = coalesce(gpus, nodes * gpus_per_node) WHERE source_id = ?",
                [self.source_id],
            )


# What only a user sets. Hardware a user set after the ingest (`set_hardware`) cannot be told from what
# the prefix's parse derived, so it is not kept: `--gpu` and friends are given again with the grown file.
RUN_USER_COLUMNS = ("name", "notes")
BENCH_USER_COLUMNS: tuple[str, ...] = ()


@dataclass
class Kept:
    """What a grown source keeps while its rows are parsed again: run and bench ids by key (tags and
    links to them stay valid) and the values a user may have set on them (a name, notes), which fill
    what the log itself does not say (what it says wins: the prefix's parse could have said otherwise)."""

    run_ids: dict[int, int] = field(default_factory=dict)
    bench_ids: dict[int, int] = field(default_factory=dict)
    run_values: dict[int, dict[str, Any]] = field(default_factory=dict)
    bench_values: dict[int, dict[str, Any]] = field(default_factory=dict)

    def restore(self, store: Store, run_ids: dict[int, int], bench_ids: dict[int, int]) -> None:
        for table, id_col, ids, values in (
            ("runs", "run_id", run_ids, self.run_values),
            ("benches", "bench_id", bench_ids, self.bench_values),
        ):
            for key, entity in ids.items():
                known = {k: v for k, v in values.get(key, {}).items() if v is not None}
                if known:
                    sets = ", ".join(f'"{k}" = coalesce("{k}", ?)' for k in known)
                    store.con.execute(
                        f"UPDATE {table} SET {sets} WHERE {id_col} = ?", [*known.values(), entity]
                    )
        # Runs the new parse no longer has (not expected of a file that only grew) lose their tags. Only a
        # parse again keeps tags to lose: a new file asks nothing (each statement is a round of catalog
        # queries in a DuckLake store).
        if self.run_ids:
            store.con.execute("DELETE FROM run_tags WHERE run_id NOT IN (SELECT run_id FROM runs)")


def clear_for_reparse(store: Store, source_id: int) -> Kept:
    """Delete a source's rows but its `sources` row and run tags, keeping what `Kept` keeps."""
    kept = Kept()
    con = store.con
    default_name = default_run_name(store, source_id)
    run_cols = ", ".join(RUN_USER_COLUMNS)
    for key, run_id, *values in con.execute(
        f"SELECT run_key, run_id, {run_cols} FROM runs WHERE source_id = ?", [source_id]
    ).fetchall():
        kept.run_ids[key] = run_id
        kept.run_values[key] = dict(zip(RUN_USER_COLUMNS, values, strict=True))
        if kept.run_values[key].get("name") == default_name:  # not the user's: named again from the log
            del kept.run_values[key]["name"]
    bench_cols = "".join(f", {c}" for c in BENCH_USER_COLUMNS)
    for key, bench_id, *values in con.execute(
        f"SELECT bench_key, bench_id{bench_cols} FROM benches WHERE source_id = ?", [source_id]
    ).fetchall():
        kept.bench_ids[key] = bench_id
        kept.bench_values[key] = dict(zip(BENCH_USER_COLUMNS, values, strict=True))
    delete_source(store, source_id, keep=("sources", "run_tags"))
    return kept


def default_run_name(store: Store, source_id: int) -> str:
    path = store.scalar("SELECT path FROM sources WHERE source_id = ?", [source_id])
    return Path(path).name if path and path != "-" else f"stdin-{source_id}"


def delete_source(store: Store, source_id: int, keep: tuple[str, ...] = ()) -> None:
    """Remove a source and every row that came from it (but the tables in `keep`)."""
    con = store.con
    run_ids = "SELECT run_id FROM runs WHERE source_id = $s"
    bench_ids = "SELECT bench_id FROM benches WHERE source_id = $s"
    for table in RUN_CHILD_TABLES:
        if table not in keep:
            con.execute(f"DELETE FROM {table} WHERE run_id IN ({run_ids})", {"s": source_id})
    for table in BENCH_CHILD_TABLES:
        con.execute(f"DELETE FROM {table} WHERE bench_id IN ({bench_ids})", {"s": source_id})
    for kind, ids in (("run", run_ids), ("bench", bench_ids)):
        for table in MODEL_OUTPUT_TABLES:
            con.execute(
                f"DELETE FROM {table} WHERE subject_kind = '{kind}' AND subject_id IN ({ids})",
                {"s": source_id},
            )
    for table in SOURCE_CHILD_TABLES:
        if table not in keep:
            con.execute(f"DELETE FROM {table} WHERE source_id = $s", {"s": source_id})
