"""Getting files into the store: duplicate and growth detection, one transaction each.

A file is absent, or landed: its rows committed with `refresh_pending` set, cleared by the refresh of its
predictions and flags (see `analysis.refresh`), which the next command redoes if it failed or was killed.
A last line without its newline is held back (`sources.bytes_pending`) and `bytes` is the offset after
the last complete line, unless the user says the file is complete (`files.holds_last_line`). A grown
file (same path, the committed bytes unchanged) resumes after that line from the state its parser saved
there (`sources.resume_state`: Megatron, DeepSpeed and NeMo logs), the
rows the parser writes at the end of every parse replaced; another is parsed again from its first byte
and its rows replaced under the same run and bench ids. Either way any sequence of growth gives the rows
of one ingest of the final file.

The parser streams batches keyed by `run_key` / `bench_key`; `SourceWriter` maps those keys to ids and
writes each batch as it comes, so memory stays flat however large the file. The parser runs a few batches
ahead on a worker thread while the store inserts on the calling thread (see `prefetched`).
"""

from __future__ import annotations

import gzip
import json
import os
import sys
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from tracelog import parsers, resolve
from tracelog.errors import Deferred, TracelogError
from tracelog.files import (
    PeekStream,
    file_sha256,
    has_newline,
    holds_last_line,
    is_plain_file,
    open_binary,
    source_path,
)
from tracelog.fingerprint import DIGEST, ChunkedDigest, file_fingerprint, verify_prefix
from tracelog.parse_jobs import Parsed, Unrecognised, detect_head, parse_to_spool, parser_for, spool_folder
from tracelog.parsers.base import LineSource, prefetched
from tracelog.source_writer import (
    Kept,
    RunOptions,
    SourceWriter,
    clear_for_reparse,
    delete_source,
)
from tracelog.store import Store, lake, staging
from tracelog.store.merge import may_match, merge_run, same_run

PREFETCH_BATCHES = 4  # about two blocks of parsed batches waiting for the store
INGEST_MEMORY_LIMIT = "96MB"  # DuckDB's share while a file streams in (see Store.memory_limit)
INSERT_THREADS = 1  # DuckDB's threads while a file's batches are inserted (see `_ingest_stream`)
RESUME_THREADS = 1
"""DuckDB's threads for the whole transaction of a grown file's resumed parse: its inserts, the queries over
its new lines (the hardware scan, the merge check) and its commit, none of which a second thread shortened.
The ingest of the 1 GB benchmark log's last 5 %, five runs each alternated at load 5: 1.35-2.17 s (median
1.40, 1.29-1.37 CPU s) on one thread, 1.47-2.62 s (median 1.89, 1.36-1.51 CPU s) on two."""
Progress = Callable[[int], None]


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
    refreshed: bool = False  # its predictions and flags landed with it (a new file in a DuckLake store)
    merged: dict[int, int] = field(default_factory=dict)  # run id -> the earlier run it joined

    @property
    def nothing_read(self) -> bool:
        """Every line of the file went to `unparsed`: detected (or named) as a format none of its lines
        is, which a user should hear about rather than find an empty run."""
        landed = self.status in ("ingested", "appended", "replaced")
        return landed and self.lines_total > 0 and self.lines_unparsed == self.lines_total

    def summary(self) -> str:
        if self.status == "skipped":
            return f"{self.path}: skipped ({self.warning})"
        pending = (
            f"; last line ({self.bytes_pending} bytes) held back until its newline arrives"
            " (a line still being written, or cut by a crash; --complete reads it as it is)"
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
        joined = "".join(
            f"; the same run as run {into}, rows merged into it" for into in self.merged.values()
        )
        return (
            f"{self.path}: {self.status} as {self.format}, {', '.join(what) or 'no runs'}, "
            f"{self.rows} rows, {self.lines_unparsed} of {self.lines_total} lines unparsed{pending}{joined}"
        )


Within = Callable[[Store, IngestResult], None]


class AlreadyIngested(Exception):
    def __init__(self, source_id: int) -> None:
        self.source_id = source_id


@dataclass
class Resume:
    """Where a grown file's last ingest stopped: its committed bytes and lines, the parser's state there,
    and the digests of its whole MiBs with the bytes of the partial one (to continue the fingerprint)."""

    source_id: int
    parser: ModuleType
    committed: int
    lines_total: int
    lines_unparsed: int
    state: str  # JSON; read where the parse starts, so that bad JSON falls back like a bad state
    digests: bytes
    tail: bytes


def ingest_file(
    store: Store,
    path: str,
    format_id: str | None = None,
    options: RunOptions | None = None,
    force: bool = False,
    progress: Progress | None = None,
    verify: bool = False,
    parsed: Parsed | None = None,
    within: Within | None = None,
    complete: bool = False,
    meanwhile: Callable[[], object] | None = None,
) -> IngestResult:
    """Ingest one file in one transaction: all of it, the rest of it once it grew, or nothing.

    A grown file resumes after its last complete line where its parser can (`parse(..., state=)`), and is
    parsed again from its start otherwise. `verify` re-hashes every MiB of a grown file's old bytes instead
    of a sample. `parsed` is the file already parsed by a worker (`parse_jobs`), used where it is parsed
    from its first byte; its spool is removed either way. `complete`: the file is finished, and a last line
    without its newline is read as it is (`files.holds_last_line`). Raises `Unrecognised` for a file no parser takes or that cannot be read at all,
    `TracelogError` for one that fails while it streams (nothing of it lands then).

    `within`, in a DuckLake store, is run inside a new file's transaction once its rows are written (the
    refresh of its predictions and flags, so that the file lands with them in one commit beside other
    writers); where it raises `Deferred`, the file lands without it. `meanwhile` is called on this thread
    once the parser has started on its own, while the first batch is parsed (the caller loads there what it
    needs after the file, off the way of the parse)."""
    options = options or RunOptions()
    try:
        if not store.lake:
            return _ingest_file(
                store,
                path,
                format_id,
                options,
                force,
                progress,
                verify,
                parsed,
                complete,
                meanwhile=meanwhile,
            )
        # A shared DuckLake store: the file is parsed before its transaction (the CPU-bound part, done
        # by every writer at once), so that a commit lost to another writer (store.lake) costs only the
        # writing again, from the spool. A file the store already knows by its path (grown, or the same)
        # resumes or is found inside the transaction, as in the embedded file.
        if parsed is None and is_plain_file(path) and not _known_path(store, path):
            parsed = parse_to_spool(path, format_id, spool_folder(), complete)
        keys = lake.file_keys(source_path(path), parsed.fingerprint if parsed is not None else None)

        def attempt(inside: Within | None) -> IngestResult:
            return lake.retrying(
                lambda: _ingest_file(
                    store, path, format_id, options, force, progress, verify, parsed, complete, keys, inside,
                    meanwhile=meanwhile,
                )
            )  # fmt: skip

        try:
            return attempt(within)
        except Deferred:  # what ran inside the transaction failed: the file lands without it
            return attempt(None)
    finally:
        if parsed is not None:
            parsed.discard()


def _known_path(store: Store, path: str) -> bool:
    return bool(store.scalar("SELECT count(*) FROM sources WHERE path IN (?, ?)", [source_path(path), path]))


def _ingest_file(
    store: Store,
    path: str,
    format_id: str | None,
    options: RunOptions,
    force: bool,
    progress: Progress | None,
    verify: bool,
    parsed: Parsed | None,
    complete: bool = False,
    lake_keys: tuple[int, ...] = (),
    within: Within | None = None,
    meanwhile: Callable[[], object] | None = None,
) -> IngestResult:
    plain_file = is_plain_file(path)
    hold = holds_last_line(path, complete)
    size = os.path.getsize(path) if plain_file else None
    previous: int | None = None  # the source this file is a grown copy of
    resume: Resume | None = None  # where to go on from, when its parser can
    replace: int | None = None  # with --force, the source these same bytes were ingested as

    if plain_file and size is not None:
        # by its absolute path; a store written before paths were made absolute holds them as they were given
        recorded_path = source_path(path)
        same_size = store.con.execute(
            "SELECT source_id, fingerprint, chunk_digests IS NULL, "
            "CASE WHEN path IN (?, ?) THEN chunk_digests END FROM sources "
            "WHERE bytes = ? AND coalesce(bytes_pending, 0) = 0",
            [recorded_path, path, size],
        ).fetchall()
        if not force and not verify and (kept := _unchanged(path, size, same_size)) is not None:
            return _already(store, path, kept)
        if same_size:
            current = file_fingerprint(path)[0] if any(not legacy for _, _, legacy, _ in same_size) else None
            plain = file_sha256(path) if any(legacy for _, _, legacy, _ in same_size) else None
            for source_id, fingerprint, legacy, _ in same_size:
                if fingerprint == (plain if legacy else current):
                    if not force:
                        return _already(store, path, source_id)
                    replace = source_id
        grown = store.con.execute(
            "SELECT source_id, bytes, coalesce(bytes_pending, 0), fingerprint, chunk_digests, format, "
            "resume_state, resume_version, lines_total, lines_unparsed FROM sources "
            "WHERE path IN (?, ?) AND (bytes < ? OR (bytes = ? AND bytes_pending > 0)) "
            "ORDER BY bytes DESC, path = ? DESC",
            [recorded_path, path, size, size, recorded_path],
        ).fetchall()
        for source_id, nbytes, pending, fingerprint, digests, fmt, state, version, lines, unparsed in grown:
            if digests is None:  # ingested before fingerprints: its plain sha256, and no resume state
                if file_sha256(path, nbytes) != fingerprint:
                    continue
                tail = None
            elif (tail := verify_prefix(path, nbytes, digests, full=verify)) is None:
                continue
            if force:
                replace = source_id
            elif hold and nbytes + pending <= size and _reads_lines(fmt) and not has_newline(path, nbytes):
                # Only more of a last line without its newline: nothing new is complete.
                store.con.execute(
                    "UPDATE sources SET bytes_pending = ? WHERE source_id = ?", [size - nbytes, source_id]
                )
                return _already(store, path, source_id)
            else:
                previous = source_id
                store.con.execute(
                    "UPDATE sources SET path = ? WHERE source_id = ? AND path <> ?",
                    [recorded_path, source_id, recorded_path],
                )
                known = parsers.by_format(fmt) if fmt in parsers.formats() else None
                if (
                    tail is not None
                    and state is not None
                    and known is not None
                    and version == known.VERSION
                    and format_id in (None, fmt)
                ):
                    resume = Resume(source_id, known, nbytes, lines, unparsed, state, digests[:-DIGEST], tail)
            break

    if resume is not None:
        try:
            return _resume_file(store, path, options, resume, progress, hold, meanwhile)
        except (KeyError, TypeError, ValueError, IndexError):
            pass  # a resume state this code cannot read (edited, or of a damaged file): parse it all again
    try:
        stream = open_binary(path)
    except TracelogError as exc:
        raise Unrecognised(exc.message, exc.path, exc.line) from None
    try:
        head = detect_head(stream, path)
        parser = parser_for(stream, path, head, format_id)
        if parsed is not None and (
            parsed.format != parser.FORMAT or parsed.path != path or parsed.held != hold
        ):
            parsed = None
        # A new file in a DuckLake store only inserts: it is written beside other writers (see
        # Store.transaction), holding the locks of its path and bytes.
        beside = lake_keys if lake_keys and previous is None and replace is None else None
        stage = (
            staging.staged(store, spool_folder())
            if beside is not None and not force and not _may_merge(store, parser)
            else nullcontext()
        )
        try:
            with store.memory_limit(INGEST_MEMORY_LIMIT), store.transaction(beside), stage:
                if replace is not None:
                    # ingested again: the same source parsed again from its first byte, keeping its run
                    # and bench ids with the names, notes and tags a user gave them
                    store.con.execute(
                        "UPDATE sources SET path = ? WHERE source_id = ?", [source_path(path), replace]
                    )
                result = _ingest_stream(
                    store,
                    path,
                    PeekStream(stream, head[0]),
                    parser,
                    options,
                    previous if replace is None else replace,
                    progress,
                    force,
                    parsed=parsed,
                    hold=hold,
                    meanwhile=meanwhile,
                )
                if replace is not None:
                    result.status = "replaced"
                if within is not None and beside is not None:
                    within(store, result)
                return result
        except AlreadyIngested as dup:
            return _already(store, path, dup.source_id)
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def _resume_file(
    store: Store,
    path: str,
    options: RunOptions,
    resume: Resume,
    progress: Progress | None,
    hold: bool = True,
    meanwhile: Callable[[], object] | None = None,
) -> IngestResult:
    try:
        stream = open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise TracelogError(f"cannot read: {exc.strerror}", path) from None
    try:
        stream.seek(resume.committed)
        if progress is not None:
            progress(resume.committed)
        try:
            with (
                store.memory_limit(INGEST_MEMORY_LIMIT),
                store.threads(RESUME_THREADS),
                store.checkpoint_at_commit(),
                store.transaction(),
            ):
                return _ingest_stream(
                    store,
                    path,
                    stream,
                    resume.parser,
                    options,
                    resume.source_id,
                    progress,
                    resume=resume,
                    hold=hold,
                    meanwhile=meanwhile,
                )
        except AlreadyIngested as dup:
            return _already(store, path, dup.source_id)
    finally:
        stream.close()


def _reads_lines(format_id: str | None) -> bool:
    """Whether a format is read line by line (a JSON document may have no newline at all: any growth
    is new content)."""
    try:
        return bool(getattr(parsers.by_format(format_id or ""), "READS_LINES", True))
    except TracelogError:
        return True


def _unchanged(path: str, size: int, same_size: list[tuple[Any, ...]]) -> int | None:
    """The source this file is, unchanged, when it was ingested from the same path at the same size and
    a sample of its MiBs still hashes as then (`verify_prefix`): the trust a grown log gets, so that an
    epilogue or a loop ingesting the same big logs again answers without reading them (0.7 s per GB for
    the whole fingerprint). A file of the same size at another path is compared by its whole
    fingerprint, since a wrong match there would leave a different file out: `same_size` carries the
    digests of the sources recorded at this path only."""
    for source_id, _, _, own_digests in same_size:
        if own_digests is not None and verify_prefix(path, size, own_digests) is not None:
            return int(source_id)
    return None


def _already(store: Store, path: str, source_id: int) -> IngestResult:
    pending = store.scalar("SELECT coalesce(bytes_pending, 0) FROM sources WHERE source_id = ?", [source_id])
    return IngestResult(path, "already ingested", source_id=source_id, bytes_pending=int(pending or 0))


def _ingest_stream(
    store: Store,
    path: str,
    stream: Any,
    parser: ModuleType,
    options: RunOptions,
    previous: int | None,
    progress: Progress | None,
    force: bool = False,
    resume: Resume | None = None,
    parsed: Parsed | None = None,
    hold: bool = False,
    meanwhile: Callable[[], object] | None = None,
) -> IngestResult:
    # `hold`: a plain file may still be written to, and its last line waits for its newline
    # (`files.holds_last_line`). Only a plain file's parse can be resumed, and not after a last line
    # read without its newline: the file may yet go on with the rest of that line.
    plain = is_plain_file(path)
    if resume is not None:
        digest = ChunkedDigest(resume.digests, resume.tail)
        source = LineSource(stream, path, hold_partial=hold, first_line=resume.lines_total + 1)
    else:
        digest = ChunkedDigest()
        source = LineSource(stream, path, hold_partial=hold)
    source.on_bytes.append(digest.update)
    if progress is not None:
        source.on_bytes.append(lambda chunk: progress(len(chunk)))
    if resume is not None:
        source_id = resume.source_id
        writer = SourceWriter(store, source_id, options)
        writer.adopt(getattr(parser, "FINISH_TABLES", ()))
        batches = parser.parse(source, state=json.loads(resume.state))
    else:
        if previous is not None:
            source_id = previous
            kept = clear_for_reparse(store, source_id)
        else:
            source_id = store.new_id("source")
            store.con.execute(
                "INSERT INTO sources (source_id, path, fingerprint, bytes, format, parser_version, "
                "lines_total, lines_parsed, lines_unparsed) VALUES (?, ?, '', 0, ?, ?, 0, 0, 0)",
                [source_id, source_path(path), parser.FORMAT, parser.VERSION],
            )
            kept = Kept()
        writer = SourceWriter(store, source_id, options, kept)
        batches = parser.parse(source) if parsed is None else iter(())
    start = resume.committed if resume is not None else 0
    try:
        if parsed is not None:
            if meanwhile is not None:
                meanwhile()
            with store.threads(INSERT_THREADS):
                for batch in parsed.batches():
                    writer.write(batch)
            if progress is not None:
                progress(parsed.committed + parsed.pending_bytes)
            committed, pending, lines_total = parsed.committed, parsed.pending_bytes, parsed.lines_total
            fingerprint, digests = parsed.fingerprint, parsed.digests
            resumable = plain and not parsed.unterminated
        else:
            # The parser runs ahead on a worker thread; the store (one connection, one transaction) stays
            # here.
            with store.threads(INSERT_THREADS):
                for batch in prefetched(batches, PREFETCH_BATCHES, meanwhile):
                    writer.write(batch)
            committed = start + source.bytes_read - source.pending_bytes
            pending, lines_total = source.pending_bytes, source.lines_total
            fingerprint, digests = digest.result(committed, path if plain else None)
            resumable = plain and not source.unterminated
    except TracelogError as exc:
        if exc.path is None:
            exc.path = path
        raise
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise TracelogError(f"read failed after line {source.lines_total}: {exc}", path) from None
    finally:
        digest.close()
    duplicate = store.scalar(
        f"SELECT source_id FROM {store.whole('sources')} WHERE fingerprint = ? AND source_id <> ?",
        [fingerprint, source_id],
    )
    if duplicate is not None:
        if not force:
            raise AlreadyIngested(int(duplicate))
        delete_source(store, int(duplicate))
    writer.apply_options()
    given = {
        "gpu_model": options.gpu_model,
        "fabric": options.fabric,
        "gpus_per_node": options.gpus_per_node,
        "nics_per_node": options.nics_per_node,
    }
    since = resume.lines_total if resume is not None else 0
    resolve.resolve_source(store, source_id, path, given, options.clusters, since)
    read_unparsed = writer.unparsed_but_read(since)  # before a merge moves the rows to another source's run
    merged = _merge_same_runs(store, writer, parser.FORMAT)
    before_unparsed = resume.lines_unparsed if resume is not None else 0
    unparsed = before_unparsed + writer.unparsed - read_unparsed
    store.con.execute(
        "UPDATE sources SET fingerprint = ?, chunk_digests = ?, bytes = ?, bytes_pending = ?, "
        "lines_total = ?, lines_parsed = ?, lines_unparsed = ?, ingested_at = current_timestamp, "
        "format = ?, parser_version = ?, resume_state = ?, resume_version = ?, refresh_pending = true, "
        "refresh_error = NULL WHERE source_id = ?",
        [
            fingerprint,
            digests,
            committed,
            pending,
            lines_total,
            lines_total - unparsed,
            unparsed,
            parser.FORMAT,
            parser.VERSION,
            writer.resume_state if resumable else None,
            parser.VERSION if resumable and writer.resume_state is not None else None,
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
        lines_total=lines_total,
        lines_unparsed=unparsed,
        bytes_pending=pending,
        merged=merged,
    )


def _may_merge(store: Store, parser: ModuleType) -> bool:
    """Whether a file may share a run with a stored file (see `store.merge`): a benchmark's output makes
    benches, never runs."""
    if getattr(parser, "TOOL", None) is not None:
        return False
    return may_match(store, parser.FORMAT, _describing_formats())


def _describing_formats() -> set[str]:
    """The formats whose files describe runs other files describe too (event files, `store.merge`)."""
    return set(parsers.DESCRIBING_FORMATS)


def _merge_same_runs(store: Store, writer: SourceWriter, file_format: str) -> dict[int, int]:
    """Runs of this file that an earlier file already describes (its event files, its text log) join
    that run (see `store.merge`)."""
    formats = _describing_formats()
    merged: dict[int, int] = {}
    if store.staged or not writer.run_ids or not may_match(store, file_format, formats):
        return merged  # a staged file was found to share no run before it was staged (`_may_merge`)
    for run_id in writer.run_ids.values():
        into = same_run(store, run_id, formats)
        if into is not None:
            merge_run(store, run_id, into)
            merged[run_id] = into
            # The joined run gained rows: its own file's predictions and flags are owed again.
            store.con.execute(
                "UPDATE sources SET refresh_pending = true WHERE source_id = "
                "(SELECT source_id FROM runs WHERE run_id = ?)",
                [into],
            )
    return merged
