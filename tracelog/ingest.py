"""Getting files into the store: duplicate and growth detection, one transaction each.

The parser streams batches keyed by `run_key` / `bench_key`; `SourceWriter` maps those keys to ids and
writes each batch as it comes, so memory stays flat however large the file. The parser runs a few batches
ahead on a worker thread while the store inserts on the calling thread (see `prefetched`).
"""

from __future__ import annotations

import gzip
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import polars as pl

from tracelog import parsers
from tracelog.errors import TracelogError
from tracelog.files import BackgroundDigest, PeekStream, file_sha256, open_binary, read_head
from tracelog.parsers.base import Batch, LineSource, head_text, prefetched
from tracelog.store import Store
from tracelog.store.tables import (
    BENCH_CHILD_TABLES,
    MODEL_OUTPUT_TABLES,
    RUN_CHILD_TABLES,
    SOURCE_CHILD_TABLES,
)

PREFETCH_BATCHES = 4  # about two blocks of parsed batches waiting for the store
INGEST_MEMORY_LIMIT = "96MB"  # DuckDB's share while a file streams in (see Store.memory_limit)
Progress = Callable[[int], None]


@dataclass
class RunOptions:
    """What the user says about the runs and benches of the files being ingested (overrides what the log
    says); the GPU, fabric, nodes and GPUs per node apply to both."""

    name: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    gpu_model: str | None = None
    fabric: str | None = None
    nodes: int | None = None
    gpus_per_node: int | None = None


@dataclass
class IngestResult:
    path: str
    status: str  # ingested, appended, already ingested, replaced
    format: str | None = None
    source_id: int | None = None
    runs: int = 0
    benches: int = 0
    rows: int = 0
    lines_total: int = 0
    lines_unparsed: int = 0

    def summary(self) -> str:
        if self.status == "already ingested":
            return f"{self.path}: already ingested (source {self.source_id}); --force to ingest again"
        what = []
        if self.runs:
            what.append(f"{self.runs} run{'s' * (self.runs != 1)}")
        if self.benches:
            what.append(f"{self.benches} bench{'es' * (self.benches != 1)}")
        return (
            f"{self.path}: {self.status} as {self.format}, {', '.join(what) or 'no runs'}, "
            f"{self.rows} rows, {self.lines_unparsed} of {self.lines_total} lines unparsed"
        )


class AlreadyIngested(Exception):
    def __init__(self, source_id: int) -> None:
        self.source_id = source_id


class SourceWriter:
    """Writes one source's batches, mapping the parser's run/bench keys to database ids."""

    def __init__(self, store: Store, source_id: int, options: RunOptions, skip_through_line: int = 0):
        self.store = store
        self.source_id = source_id
        self.options = options
        self.skip_through_line = skip_through_line
        self.run_ids: dict[int, int] = dict(
            store.con.execute("SELECT run_key, run_id FROM runs WHERE source_id = ?", [source_id]).fetchall()
        )
        self.bench_ids: dict[int, int] = dict(
            store.con.execute(
                "SELECT bench_key, bench_id FROM benches WHERE source_id = ?", [source_id]
            ).fetchall()
        )
        self.rows = 0
        self.unparsed = 0

    def run_id(self, key: int) -> int:
        if key not in self.run_ids:
            row = self.store.con.execute(
                "INSERT INTO runs (source_id, run_key) VALUES (?, ?) RETURNING run_id", [self.source_id, key]
            ).fetchone()
            assert row is not None
            self.run_ids[key] = int(row[0])
        return self.run_ids[key]

    def bench_id(self, key: int, tool: str = "unknown") -> int:
        if key not in self.bench_ids:
            row = self.store.con.execute(
                "INSERT INTO benches (source_id, bench_key, tool) VALUES (?, ?, ?) RETURNING bench_id",
                [self.source_id, key, tool],
            ).fetchone()
            assert row is not None
            self.bench_ids[key] = int(row[0])
        return self.bench_ids[key]

    def write(self, batch: Batch) -> None:
        if batch.table == "runs":
            self._update_entities("runs", "run_id", self.run_id, batch.rows)
            return
        if batch.table == "benches":
            self._update_entities("benches", "bench_id", self.bench_id, batch.rows)
            return
        frame = batch.rows if isinstance(batch.rows, pl.DataFrame) else pl.DataFrame(batch.rows)
        if frame.is_empty():
            return
        if self.skip_through_line and "line_no" in frame.columns:
            frame = frame.filter(pl.col("line_no") > self.skip_through_line)
            if frame.is_empty():
                return
        frame = self._map_keys(frame)
        if batch.table in ("unparsed", "events"):
            frame = frame.with_columns(pl.lit(self.source_id, dtype=pl.Int32).alias("source_id"))
        count = self.store.insert(batch.table, frame)
        if batch.table == "unparsed":
            self.unparsed += count
        elif batch.table != "events":
            self.rows += count

    def _map_keys(self, frame: pl.DataFrame) -> pl.DataFrame:
        for key, id_col, make in (
            ("run_key", "run_id", self.run_id),
            ("bench_key", "bench_id", self.bench_id),
        ):
            if key in frame.columns:
                keys = [k for k in frame[key].unique().to_list() if k is not None]
                mapping = {k: make(int(k)) for k in keys}
                frame = frame.with_columns(
                    pl.col(key).replace_strict(mapping, default=None, return_dtype=pl.Int32).alias(id_col)
                ).drop(key)
        return frame

    def _update_entities(self, table: str, id_col: str, make: Callable[..., int], rows: Any) -> None:
        records = rows.to_dicts() if isinstance(rows, pl.DataFrame) else list(rows)
        key_col = "run_key" if table == "runs" else "bench_key"
        columns = set(self.store.columns(table)) - {id_col, "source_id", key_col}
        for record in records:
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
        """What the user said on the command line wins over what the log said."""
        opts = self.options
        values = {
            "gpu_model": opts.gpu_model,
            "fabric": opts.fabric,
            "nodes": opts.nodes,
            "gpus_per_node": opts.gpus_per_node,
        }
        for run_key, run_id in self.run_ids.items():
            sets = {k: v for k, v in values.items() if v is not None}
            if opts.name:
                sets["name"] = opts.name if len(self.run_ids) == 1 else f"{opts.name}.{run_key}"
            if sets:
                cols = ", ".join(f'"{k}" = ?' for k in sets)
                self.store.con.execute(f"UPDATE runs SET {cols} WHERE run_id = ?", [*sets.values(), run_id])
            for key, value in opts.tags.items():
                self.store.con.execute(
                    "INSERT OR REPLACE INTO run_tags VALUES (?, ?, ?)", [run_id, key, value]
                )
        bench_values = {
            "gpu_model": opts.gpu_model,
            "fabric": opts.fabric,
            "nodes": opts.nodes,
            "gpus_per_node": opts.gpus_per_node,
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


def default_run_name(store: Store, source_id: int) -> str:
    path = store.scalar("SELECT path FROM sources WHERE source_id = ?", [source_id])
    return Path(path).name if path and path != "-" else f"stdin-{source_id}"


def delete_source(store: Store, source_id: int) -> None:
    """Remove a source and every row that came from it."""
    con = store.con
    run_ids = "SELECT run_id FROM runs WHERE source_id = $s"
    bench_ids = "SELECT bench_id FROM benches WHERE source_id = $s"
    for table in RUN_CHILD_TABLES:
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
        con.execute(f"DELETE FROM {table} WHERE source_id = $s", {"s": source_id})


def ingest_file(
    store: Store,
    path: str,
    format_id: str | None = None,
    options: RunOptions | None = None,
    force: bool = False,
    progress: Progress | None = None,
) -> IngestResult:
    """Ingest one file in one transaction: all of it, only its new lines, or nothing."""
    options = options or RunOptions()
    plain_file = path != "-" and not path.endswith(".gz")
    size = os.path.getsize(path) if plain_file else None
    previous: tuple[int, int, int] | None = None  # source_id, bytes, lines_total of the ingested prefix
    replace: int | None = None  # with --force, the source these same bytes were ingested as

    if plain_file and size is not None:
        same_size = store.con.execute(
            "SELECT source_id, sha256 FROM sources WHERE bytes = ?", [size]
        ).fetchall()
        if same_size:
            digest = file_sha256(path)
            for source_id, sha in same_size:
                if sha == digest:
                    if not force:
                        return IngestResult(path, "already ingested", source_id=source_id)
                    replace = source_id
        grown = store.con.execute(
            "SELECT source_id, bytes, lines_total, sha256 FROM sources "
            "WHERE path = ? AND bytes < ? ORDER BY bytes DESC",
            [path, size],
        ).fetchall()
        for source_id, nbytes, lines_total, sha in grown:
            if not force and file_sha256(path, nbytes) == sha:
                previous = (source_id, nbytes, lines_total)
                break

    stream = open_binary(path)
    try:
        head = read_head(stream, path)
        if format_id:
            parser = parsers.by_format(format_id)
        else:
            try:
                parser = parsers.detect(head_text(head), path)
            except TracelogError:
                if len(head) < parsers.HEAD_BYTES:
                    raise
                # Job outputs can open with megabytes of shell tracing: look further before giving up.
                head += stream.read(parsers.LONG_HEAD_BYTES - len(head))
                parser = parsers.detect(head_text(head), path)
        try:
            with store.memory_limit(INGEST_MEMORY_LIMIT), store.transaction():
                if replace is not None:
                    delete_source(store, replace)
                result = _ingest_stream(
                    store, path, PeekStream(stream, head), parser, options, previous, progress, force
                )
                if replace is not None:
                    result.status = "replaced"
                return result
        except AlreadyIngested as dup:
            return IngestResult(path, "already ingested", source_id=dup.source_id)
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def _ingest_stream(
    store: Store,
    path: str,
    stream: PeekStream,
    parser: ModuleType,
    options: RunOptions,
    previous: tuple[int, int, int] | None,
    progress: Progress | None,
    force: bool = False,
) -> IngestResult:
    digest = BackgroundDigest()
    source = LineSource(stream, path)  # type: ignore[arg-type]
    source.on_bytes.append(digest.update)
    if progress is not None:
        source.on_bytes.append(lambda chunk: progress(len(chunk)))
    if previous:
        source_id = previous[0]
        previous_unparsed = store.scalar(
            "SELECT lines_unparsed FROM sources WHERE source_id = ?", [source_id]
        )
    else:
        row = store.con.execute(
            "INSERT INTO sources (path, sha256, bytes, format, parser_version, lines_total, lines_parsed, "
            "lines_unparsed) VALUES (?, '', 0, ?, ?, 0, 0, 0) RETURNING source_id",
            [path, parser.FORMAT, parser.VERSION],
        ).fetchone()
        assert row is not None
        source_id = int(row[0])
        previous_unparsed = 0
    writer = SourceWriter(store, source_id, options, skip_through_line=previous[2] if previous else 0)
    try:
        # The parser runs ahead on a worker thread; the store (one connection, one transaction) stays here.
        for batch in prefetched(parser.parse(source), PREFETCH_BATCHES):
            writer.write(batch)
        sha = digest.hexdigest()
    except TracelogError as exc:
        if exc.path is None:
            exc.path = path
        raise
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise TracelogError(f"read failed after line {source.lines_total}: {exc}", path) from None
    finally:
        digest.close()
    duplicate = store.scalar(
        "SELECT source_id FROM sources WHERE sha256 = ? AND source_id <> ?", [sha, source_id]
    )
    if duplicate is not None:
        if not force:
            raise AlreadyIngested(int(duplicate))
        delete_source(store, int(duplicate))
    writer.apply_options()
    unparsed = previous_unparsed + writer.unparsed
    store.con.execute(
        "UPDATE sources SET sha256 = ?, bytes = ?, lines_total = ?, lines_parsed = ?, lines_unparsed = ?, "
        "ingested_at = current_timestamp, format = ?, parser_version = ? WHERE source_id = ?",
        [
            sha,
            source.bytes_read,
            source.lines_total,
            source.lines_total - unparsed,
            unparsed,
            parser.FORMAT,
            parser.VERSION,
            source_id,
        ],
    )
    return IngestResult(
        path,
        "appended" if previous else "ingested",
        format=parser.FORMAT,
        source_id=source_id,
        runs=len(writer.run_ids),
        benches=len(writer.bench_ids),
        rows=writer.rows,
        lines_total=source.lines_total,
        lines_unparsed=unparsed,
    )
