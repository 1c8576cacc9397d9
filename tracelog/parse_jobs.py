"""Files parsed in worker processes ahead of the store (`ingest --jobs N`).

Parsing is the CPU-bound part of an ingest, and DuckDB has one writer: so N processes parse, and the
calling process alone writes, one file per transaction in the order the files were given, exactly as a
serial ingest would (the database is the same). A worker spools its batches to a temporary file as they
come (pickled one by one: polars frames pickle as Arrow IPC), so neither the worker nor the writer holds
more than a batch; at most `2 * jobs` files are parsed ahead, which bounds the spool on disk.

A worker parses a file from its first byte, knowing nothing of the store; the writer decides what is
done with it (new, grown and parsed again, already ingested and thrown away). A file that resumes from a
saved parser state, standard input and `.gz` files are parsed by the writer itself, as in a serial
ingest.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gzip
import multiprocessing
import os
import pickle
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from types import ModuleType
from typing import BinaryIO

from tracelog import parsers
from tracelog.errors import TracelogError
from tracelog.files import PeekStream, holds_last_line, is_plain_file, open_binary, read_head
from tracelog.fingerprint import ChunkedDigest
from tracelog.parsers.base import Batch, LineSource, head_text, prefetched

PREFETCH_BATCHES = 4  # about two blocks of parsed batches waiting for the store
AHEAD_PER_JOB = 2  # files parsed ahead of the writer, per worker: keeps every worker busy, bounds the spool
SPOOL_PREFIX = "tracelog-spool-"  # then the pid of the process that owns the folder
STALE_AFTER_S = 3600.0  # a dead owner's folder untouched this long is swept


class Unrecognised(TracelogError):
    """A file no parser takes, or that cannot be read at all (empty, binary, no permission): a folder's
    such files are listed as skipped, a file named on its own is an error."""


@dataclass
class Parsed:
    """One file parsed by a worker: its batches in `spool`, and what the writer records of the parse."""

    path: str
    format: str
    spool: str
    lines_total: int
    committed: int  # bytes up to the last complete line
    pending_bytes: int
    fingerprint: str
    digests: bytes
    error: tuple[str, str | None, int | None] | None = None  # where the parse failed, raised in order
    held: bool = True  # a last line without its newline was held back (`files.holds_last_line`)
    unterminated: bool = False  # the last line was read without its newline

    def batches(self) -> Iterator[Batch]:
        """The batches as the parser yielded them, then the parse's failure where it failed."""
        with open(self.spool, "rb") as spool:
            while True:
                try:
                    batch = pickle.load(spool)
                except EOFError:
                    break
                yield batch
        if self.error is not None:
            raise TracelogError(*self.error)

    def discard(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.spool)


@functools.cache
def spool_folder() -> str:
    """This process's folder for spools, made on first use and removed at exit.

    A process killed with SIGKILL cannot remove its folder, and a spool is as large as the parsed file;
    so the folders of owners that are gone are swept first. Not the moment the owner is gone: where
    containers share a /tmp but not a pid namespace, a live owner can look dead, so its folder must
    also have been untouched for an hour."""
    sweep_stale_spools(tempfile.gettempdir())
    folder = tempfile.mkdtemp(prefix=f"{SPOOL_PREFIX}{os.getpid()}-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def sweep_stale_spools(parent: str, now: float | None = None) -> list[str]:
    """Remove the spool folders under `parent` whose owner is no longer running and that have not changed
    for `STALE_AFTER_S`; returns the folders removed."""
    now = time.time() if now is None else now
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            if not entry.name.startswith(SPOOL_PREFIX) or not entry.is_dir(follow_symlinks=False):
                continue
            owner = entry.name[len(SPOOL_PREFIX) :].split("-", 1)[0]
            try:
                stale = now - entry.stat(follow_symlinks=False).st_mtime > STALE_AFTER_S
            except OSError:
                continue
            if owner.isdigit() and stale and not _running(int(owner)):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.path)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def detect_head(stream: BinaryIO, path: str) -> list[bytes]:
    try:
        return [read_head(stream, path)]
    except TracelogError as exc:
        raise Unrecognised(exc.message, exc.path, exc.line) from None


def parser_for(stream: BinaryIO, path: str, head: list[bytes], format_id: str | None) -> ModuleType:
    """The parser named, or the one that recognises the head (`head[0]`, extended when a job output opens
    with megabytes of shell tracing)."""
    if format_id:
        return parsers.by_format(format_id)
    binary = parsers.detect_binary(head[0], path)
    if binary is not None:
        return binary
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


def parse_to_spool(path: str, format_id: str | None, folder: str, complete: bool = False) -> Parsed | None:
    """Parse one plain file into a spool (the worker's job). None where the writer must see for itself
    (the file cannot be read or recognised: its error is raised there, in order). `complete` is the
    user's word on a last line without its newline (`files.holds_last_line`)."""
    try:
        stream = open_binary(path)
    except TracelogError:
        return None
    try:
        try:
            head = detect_head(stream, path)
            parser = parser_for(stream, path, head, format_id)
        except TracelogError:
            return None
        digest = ChunkedDigest()
        held = holds_last_line(path, complete)
        source = LineSource(PeekStream(stream, head[0]), path, hold_partial=held)  # type: ignore[arg-type]
        source.on_bytes.append(digest.update)
        handle, spool = tempfile.mkstemp(prefix="tracelog-", suffix=".batches", dir=folder)
        error = None
        try:
            with os.fdopen(handle, "wb") as out:
                try:
                    for batch in prefetched(parser.parse(source), PREFETCH_BATCHES):
                        pickle.dump(batch, out, protocol=pickle.HIGHEST_PROTOCOL)
                    committed = source.bytes_read - source.pending_bytes
                    fingerprint, digests = digest.result(committed, path)
                except TracelogError as exc:
                    error = (exc.message, exc.path if exc.path is not None else path, exc.line)
                except (OSError, EOFError, gzip.BadGzipFile) as exc:
                    error = (f"read failed after line {source.lines_total}: {exc}", path, None)
                finally:
                    digest.close()
        except BaseException:  # Ctrl-C, or a fault in a parser: no Parsed owns the spool, so remove it here
            with contextlib.suppress(OSError):
                os.remove(spool)
            raise
        if error is not None:
            committed, fingerprint, digests = 0, "", b""
        return Parsed(
            path,
            parser.FORMAT,
            spool,
            source.lines_total,
            committed,
            source.pending_bytes,
            fingerprint,
            digests,
            error,
            held,
            source.unterminated,
        )
    finally:
        stream.close()


class ParsedAhead:
    """Files handed to a pool of workers in the order they will be written, at most `AHEAD_PER_JOB *
    jobs` ahead; `take(path)` waits for a file's parse and hands it over (None: the writer parses it)."""

    def __init__(self, paths: list[str], format_id: str | None, jobs: int, complete: bool = False) -> None:
        self._folder = tempfile.mkdtemp(dir=spool_folder())
        # Not fork: a child would inherit the writer's DuckDB and its threads mid-flight. A fork server
        # imports the parsers once and forks the workers from that clean process.
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["tracelog.parse_jobs"])
        self._pool = ProcessPoolExecutor(jobs, mp_context=context)
        self._waiting = [p for p in paths if is_plain_file(p)]
        self._format_id = format_id
        self._complete = complete
        self._window = AHEAD_PER_JOB * jobs
        self._futures: dict[str, Future[Parsed | None]] = {}
        self._fill()

    def _fill(self) -> None:
        while self._waiting and len(self._futures) < self._window:
            path = self._waiting.pop(0)
            if path not in self._futures:
                self._futures[path] = self._pool.submit(
                    parse_to_spool, path, self._format_id, self._folder, self._complete
                )

    def take(self, path: str) -> Parsed | None:
        future = self._futures.pop(path, None)
        self._fill()
        return future.result() if future is not None else None

    def close(self) -> None:
        self._pool.shutdown(cancel_futures=True)
        for future in self._futures.values():
            if not future.cancelled() and future.exception() is None and (parsed := future.result()):
                parsed.discard()
        with contextlib.suppress(OSError):
            for name in os.listdir(self._folder):
                os.remove(os.path.join(self._folder, name))
            os.rmdir(self._folder)

    def __enter__(self) -> ParsedAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def worker_count(jobs: int) -> int:
    """`--jobs 0` means one per core."""
    return jobs if jobs > 0 else (os.cpu_count() or 1)


__all__ = [
    "Parsed",
    "ParsedAhead",
    "Unrecognised",
    "detect_head",
    "parse_to_spool",
    "parser_for",
    "spool_folder",
    "sweep_stale_spools",
    "worker_count",
]
