"""Getting files into the store: duplicate and growth detection, one transaction each.

A file is absent, or landed: its rows committed with `refresh_pending` set, cleared by the refresh of its
predictions and flags (see `analysis.refresh`), which the next command redoes if it failed or was killed.
A last line without its newline is held back (`sources.bytes_pending`) and `bytes` is the offset after
the last complete line. A grown file (same path, the committed bytes unchanged) is parsed again from its
first byte and its rows replaced under the same run and bench ids, so any sequence of growth gives the
rows of one ingest of the final file (the cost: a grown file is read and parsed in full again).

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
from typing import Any, BinaryIO

import polars as pl

from tracelog import parsers
from tracelog.errors import TracelogError
from tracelog.files import BackgroundDigest, PeekStream, file_sha256, has_newline, open_binary, read_head
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
    status: str  # ingested, appended, already ingested, replaced, refreshed, skipped
    format: str | None = None
    source_id: int | None = None
    runs: int = 0
    benches: int = 0
    rows: int = 0
    lines_total: int = 0
    lines_unparsed: int = 0
    bytes_pending: int = 0  # a last line without its newline, held back
    warning: str | None = None  # what failed after the commit (the refresh), or why a file was skipped

    def summary(self) -> str:
        if self.status == "skipped":
            return f"{self.path}: skipped ({self.warning})"
        pending = (
            f"; last line ({self.bytes_pending} bytes) held back until its newline arrives"
            if self.bytes_pending
            else ""
        )
        if self.status == "already ingested":
            return (
                f"{self.path}: already ingested (source {self.source_id}){pending}; --force to ingest again"
            )
        if self.status == "refreshed":
            return f"{self.path}: already ingested (source {self.source_id}); its pending refresh was redone"
        what = []
        if self.runs:
            what.append(f"{self.runs} run{'s' * (self.runs != 1)}")
        if self.benches:
            what.append(f"{self.benches} bench{'es' * (self.benches != 1)}")
        return (
            f"{self.path}: {self.status} as {self.format}, {', '.join(what) or 'no runs'}, "
            f"{self.rows} rows, {self.lines_unparsed} of {self.lines_total} lines unparsed{pending}"
        )


class Unrecognised(TracelogError):
    """A file no parser takes, or that cannot be read at all (empty, binary, no permission): a folder's
    such files are listed as skipped, a file named on its own is an error."""


class AlreadyIngested(Exception):
    def __init__(self, source_id: int) -> None:
        self.source_id = source_id


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

    def run_id(self, key: int) -> int:
        if key not in self.run_ids:
            row = self.store.con.execute(
                "INSERT INTO runs (run_id, source_id, run_key) VALUES (coalesce(?, nextval('run_ids')), ?, ?) "
                "RETURNING run_id",
                [self.kept.run_ids.get(key), self.source_id, key],
            ).fetchone()
            assert row is not None
            self.run_ids[key] = int(row[0])
        return self.run_ids[key]

    def bench_id(self, key: int, tool: str = "unknown") -> int:
        if key not in self.bench_ids:
            row = self.store.con.execute(
                "INSERT INTO benches (bench_id, source_id, bench_key, tool) "
                "VALUES (coalesce(?, nextval('bench_ids')), ?, ?, ?) RETURNING bench_id",
                [self.kept.bench_ids.get(key), self.source_id, key, tool],
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
        """What the user said (on this command line, or earlier about a file that grew since) wins over
        what the log said."""
        self.kept.restore(self.store, self.run_ids, self.bench_ids)
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
        # Runs the new parse no longer has (not expected of a file that only grew) lose their tags.
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


def ingest_file(
    store: Store,
    path: str,
    format_id: str | None = None,
    options: RunOptions | None = None,
    force: bool = False,
    progress: Progress | None = None,
) -> IngestResult:
    """Ingest one file in one transaction: all of it, all of it again once it grew, or nothing.

    Raises `Unrecognised` for a file no parser takes or that cannot be read at all, `TracelogError` for
    one that fails while it streams (nothing of it lands then)."""
    options = options or RunOptions()
    plain_file = path != "-" and not path.endswith(".gz")
    size = os.path.getsize(path) if plain_file else None
    previous: int | None = None  # the source this file is a grown copy of
    replace: int | None = None  # with --force, the source these same bytes were ingested as

    if plain_file and size is not None:
        same_size = store.con.execute(
            "SELECT source_id, sha256 FROM sources WHERE bytes = ? AND coalesce(bytes_pending, 0) = 0",
            [size],
        ).fetchall()
        if same_size:
            digest = file_sha256(path)
            for source_id, sha in same_size:
                if sha == digest:
                    if not force:
                        return _already(store, path, source_id)
                    replace = source_id
        grown = store.con.execute(
            "SELECT source_id, bytes, coalesce(bytes_pending, 0), sha256, format FROM sources "
            "WHERE path = ? AND (bytes < ? OR (bytes = ? AND bytes_pending > 0)) ORDER BY bytes DESC",
            [path, size, size],
        ).fetchall()
        for source_id, nbytes, pending, sha, fmt in grown:
            if file_sha256(path, nbytes) != sha:
                continue
            if force:
                replace = source_id
            elif nbytes + pending <= size and _reads_lines(fmt) and not has_newline(path, nbytes):
                # Only more of a last line without its newline: nothing new is complete.
                store.con.execute(
                    "UPDATE sources SET bytes_pending = ? WHERE source_id = ?", [size - nbytes, source_id]
                )
                return _already(store, path, source_id)
            else:
                previous = source_id
            break

    try:
        stream = open_binary(path)
    except TracelogError as exc:
        raise Unrecognised(exc.message, exc.path, exc.line) from None
    try:
        head = _detect_head(stream, path)
        parser = _parser_for(stream, path, head, format_id)
        try:
            with store.memory_limit(INGEST_MEMORY_LIMIT), store.transaction():
                if replace is not None:
                    delete_source(store, replace)
                result = _ingest_stream(
                    store, path, PeekStream(stream, head[0]), parser, options, previous, progress, force
                )
                if replace is not None:
                    result.status = "replaced"
                return result
        except AlreadyIngested as dup:
            return _already(store, path, dup.source_id)
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def _reads_lines(format_id: str | None) -> bool:
    """Whether a format is read line by line (a JSON document may have no newline at all: any growth
    is new content)."""
    try:
        return bool(getattr(parsers.by_format(format_id or ""), "READS_LINES", True))
    except TracelogError:
        return True


def _already(store: Store, path: str, source_id: int) -> IngestResult:
    pending = store.scalar("SELECT coalesce(bytes_pending, 0) FROM sources WHERE source_id = ?", [source_id])
    return IngestResult(path, "already ingested", source_id=source_id, bytes_pending=int(pending or 0))


def _detect_head(stream: BinaryIO, path: str) -> list[bytes]:
    try:
        return [read_head(stream, path)]
    except TracelogError as exc:
        raise Unrecognised(exc.message, exc.path, exc.line) from None


def _parser_for(stream: BinaryIO, path: str, head: list[bytes], format_id: str | None) -> ModuleType:
    """The parser named, or the one that recognises the head (`head[0]`, extended when a job output opens
    with megabytes of shell tracing)."""
    if format_id:
        return parsers.by_format(format_id)
    try:
        try:
            return parsers.detect(head_text(head[0]), path)
        except TracelogError:
            if len(head[0]) < parsers.HEAD_BYTES:
                raise
            head[0] += stream.read(parsers.LONG_HEAD_BYTES - len(head[0]))
            return parsers.detect(head_text(head[0]), path)
    except TracelogError as exc:
        raise Unrecognised(exc.message, exc.path, exc.line) from None


class _CommittedDigest:
    """sha256 of the bytes up to the last complete line: the chunk last seen is hashed only once the
    next one comes, so the held-back end of the last can be left out."""

    def __init__(self, lag: bool = True) -> None:
        self.digest = BackgroundDigest()
        self.lag = lag  # False where nothing is held back (stdin, gzip): no chunk kept in memory
        self.last: bytes | None = None

    def update(self, chunk: bytes) -> None:
        if not self.lag:
            self.digest.update(chunk)
            return
        if self.last is not None:
            self.digest.update(self.last)
        self.last = chunk

    def hexdigest(self, pending: int, path: str, committed: int) -> str:
        last = self.last or b""
        if pending > len(last):  # a held-back line longer than a chunk: hash the prefix again
            self.digest.close()
            return file_sha256(path, committed)
        self.digest.update(last[: len(last) - pending])
        return self.digest.hexdigest()

    def close(self) -> None:
        self.digest.close()


def _ingest_stream(
    store: Store,
    path: str,
    stream: PeekStream,
    parser: ModuleType,
    options: RunOptions,
    previous: int | None,
    progress: Progress | None,
    force: bool = False,
) -> IngestResult:
    # A plain file may still be written to: its last line waits for its newline. Standard input and
    # gzip end when they end.
    hold = path != "-" and not path.endswith(".gz")
    digest = _CommittedDigest(lag=hold)
    source = LineSource(stream, path, hold_partial=hold)  # type: ignore[arg-type]
    source.on_bytes.append(digest.update)
    if progress is not None:
        source.on_bytes.append(lambda chunk: progress(len(chunk)))
    if previous is not None:
        source_id = previous
        kept = clear_for_reparse(store, source_id)
    else:
        row = store.con.execute(
            "INSERT INTO sources (path, sha256, bytes, format, parser_version, lines_total, lines_parsed, "
            "lines_unparsed) VALUES (?, '', 0, ?, ?, 0, 0, 0) RETURNING source_id",
            [path, parser.FORMAT, parser.VERSION],
        ).fetchone()
        assert row is not None
        source_id = int(row[0])
        kept = Kept()
    writer = SourceWriter(store, source_id, options, kept)
    try:
        # The parser runs ahead on a worker thread; the store (one connection, one transaction) stays here.
        for batch in prefetched(parser.parse(source), PREFETCH_BATCHES):
            writer.write(batch)
        committed = source.bytes_read - source.pending_bytes
        sha = digest.hexdigest(source.pending_bytes, path, committed)
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
    unparsed = writer.unparsed
    store.con.execute(
        "UPDATE sources SET sha256 = ?, bytes = ?, bytes_pending = ?, lines_total = ?, lines_parsed = ?, "
        "lines_unparsed = ?, ingested_at = current_timestamp, format = ?, parser_version = ?, "
        "refresh_pending = true, refresh_error = NULL WHERE source_id = ?",
        [
            sha,
            committed,
            source.pending_bytes,
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
        "appended" if previous is not None else "ingested",
        format=parser.FORMAT,
        source_id=source_id,
        runs=len(writer.run_ids),
        benches=len(writer.bench_ids),
        rows=writer.rows,
        lines_total=source.lines_total,
        lines_unparsed=unparsed,
        bytes_pending=source.pending_bytes,
    )
