"""What every parser shares: the line source it reads and the batches it yields.

A parser never sees the database. It reads a `LineSource` (blocks of whole lines with their line
numbers, decoded leniently) and yields `Batch` objects naming a table and carrying rows. Rows that
belong to a training run carry a `run_key` (0, 1, ... within the file), rows of a benchmark a
`bench_key`; the store turns keys into ids. Lines a parser does not understand go out as `unparsed`
batches so nothing is silently dropped.
"""

from __future__ import annotations

import io
import queue
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol, TypeVar

import polars as pl
import regex

ANSI_ESCAPE = regex.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
BLOCK_BYTES = 16 << 20
FLUSH_ROWS = 5000  # rows a line parser gathers before it hands them out as batches

Rows = list[dict[str, Any]] | pl.DataFrame
T = TypeVar("T")


@dataclass
class Batch:
    """Rows for one table; `rows` is a list of dicts for small output or a polars frame for bulk."""

    table: str
    rows: Rows

    def __len__(self) -> int:
        return len(self.rows)


@dataclass
class Block:
    """Consecutive whole lines of a file, the first of them numbered `first_line` (1-based)."""

    first_line: int
    data: bytes
    _lines: list[str] | None = field(default=None, repr=False)
    _line_count: int | None = field(default=None, repr=False)

    def _clean(self) -> bytes:
        return ANSI_ESCAPE.sub(b"", self.data) if b"\x1b" in self.data else self.data

    def lines(self) -> list[str]:
        """The lines as text: invalid UTF-8 replaced, CR and colour codes removed."""
        if self._lines is None:
            text = self._clean().decode("utf-8", errors="replace")
            lines = text.split("\n")
            if lines and lines[-1] == "":
                lines.pop()
            self._lines = [line[:-1] if line.endswith("\r") else line for line in lines]
        return self._lines

    def frame(self) -> pl.DataFrame:
        """The lines as a polars frame (`line_no`, `line`), split natively for speed."""
        data = self._clean()
        if b"\x01" in data or not data:
            lines = pl.Series("line", self.lines(), dtype=pl.String)
            frame = pl.DataFrame([lines])
        else:
            frame = pl.read_csv(
                io.BytesIO(data),
                has_header=False,
                separator="\x01",
                quote_char=None,
                new_columns=["line"],
                infer_schema=False,
                raise_if_empty=False,
                truncate_ragged_lines=True,
                encoding="utf8-lossy",
            )
            frame = frame.with_columns(pl.col("line").fill_null(""))
        self._line_count = frame.height
        return frame.with_row_index("line_no", offset=self.first_line).with_columns(
            pl.col("line_no").cast(pl.Int64)
        )

    @property
    def line_count(self) -> int:
        """Lines in the block: the height of its frame when one was made (counting is not free at GB/s)."""
        if self._line_count is None:
            self._line_count = self.data.count(b"\n") + (0 if self.data.endswith(b"\n") else 1)
        return self._line_count


class LineSource:
    """Streams a binary file as blocks of whole lines; memory stays at about one block.

    `on_bytes` callbacks see every raw chunk (the store hashes the file this way in the same pass).
    A last line without a newline (a log still being written) is handed out like any other.
    """

    def __init__(self, stream: BinaryIO, name: str, block_bytes: int = BLOCK_BYTES) -> None:
        self.stream = stream
        self.name = name
        self.block_bytes = block_bytes
        self.lines_total = 0
        self.bytes_read = 0
        self.on_bytes: list[Any] = []

    def blocks(self) -> Iterator[Block]:
        rest = b""
        next_line = 1
        while True:
            chunk = self.stream.read(self.block_bytes)
            if chunk:
                self.bytes_read += len(chunk)
                for callback in self.on_bytes:
                    callback(chunk)
            if not chunk:
                if rest:
                    block = Block(next_line, rest)
                    yield block
                    self.lines_total += block.line_count
                return
            cut = chunk.rfind(b"\n") + 1
            if cut == 0:
                rest += chunk
                continue
            # One copy of the block's bytes (the unfinished line before it, the whole lines of the chunk).
            data = b"".join((rest, memoryview(chunk)[:cut])) if rest or cut < len(chunk) else chunk
            rest = chunk[cut:]
            block = Block(next_line, data)
            del chunk, data
            yield block
            # Counted after the parser had the block: its frame knows the count for free.
            count = block.line_count
            next_line += count
            self.lines_total += count

    def frames(self, ahead: int = 1) -> Iterator[tuple[Block, pl.DataFrame]]:
        """Each block with its frame, read, hashed and split into lines on a worker thread `ahead` blocks
        early, so that the parser's thread only parses."""
        return prefetched(((block, block.frame()) for block in self.blocks()), ahead)

    def lines(self) -> Iterator[tuple[int, str]]:
        """(line number, text) for every line: for parsers whose formats are small."""
        for block in self.blocks():
            yield from enumerate(block.lines(), start=block.first_line)


@dataclass
class _Raised:
    error: BaseException


_DONE = object()


def prefetched(items: Iterator[T], depth: int) -> Iterator[T]:
    """`items`, produced on a worker thread up to `depth` ahead of the caller.

    Polars and DuckDB release the GIL, so stages on different threads use different cores while memory
    stays bounded by the queue. An exception on the worker (Ctrl-C included) is raised here; an exception
    here, or closing this generator, stops the worker at its next item.
    """
    handoff: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                handoff.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(item):
                    return
            put(_DONE)
        except BaseException as exc:  # handed to the caller, who re-raises it
            put(_Raised(exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    worker = threading.Thread(target=produce, name="tracelog-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            item = handoff.get()
            if item is _DONE:
                return
            if isinstance(item, _Raised):
                raise item.error
            yield item
    finally:
        stop.set()
        worker.join(timeout=5)


def head_text(head: bytes) -> str:
    """The head of a file as text for detection: decoded leniently, colour codes removed."""
    return ANSI_ESCAPE.sub(b"", head).decode("utf-8", errors="replace").replace("\r\n", "\n")


# Launcher prefixes fabric benchmarks pick up: Open MPI's `[1,0]<stdout>:`, a timestamp, pdsh's `host: `.
PREFIX_RX = re.compile(
    r"^\s*(?:\[\d+,\d+\]<std(?:out|err)>:"
    r"|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?Z?\s+"
    r"|\[\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?\]\s*"
    r"|\[[A-Za-z][\w.\-]*(?::\d+)?\]:\s?"
    r"|(?P<host>[A-Za-z0-9][\w.\-]*):\s+)"
)
NCCL_WARN_RX = re.compile(r"\bNCCL WARN\b")


def strip_prefix(line: str) -> tuple[str, str | None]:
    """The line without launcher prefixes (MPI tags, `host: `, timestamps), and the host one named."""
    host = None
    for _ in range(3):
        match = PREFIX_RX.match(line)
        if not match or match.end() == 0:
            break
        host = match.group("host") or host
        line = line[match.end() :]
    return line, host


class Emitter:
    """Rows per table, handed out as batches every `FLUSH_ROWS` rows so memory stays flat."""

    def __init__(self) -> None:
        self.tables: dict[str, list[dict[str, Any]]] = {}
        self.count = 0

    def add(self, table: str, row: dict[str, Any]) -> None:
        self.tables.setdefault(table, []).append(row)
        self.count += 1

    def due(self) -> bool:
        return self.count >= FLUSH_ROWS

    def flush(self) -> Iterator[Batch]:
        for table, rows in self.tables.items():
            if rows:
                yield Batch(table, pl.DataFrame(rows, infer_schema_length=None))
        self.tables = {}
        self.count = 0


class LineParser(Protocol):
    """A parser that reads one line at a time: rows go to `out`; `finish` closes what is still open at
    the end of the file (a bench without its footer, lines held back for a table that never came)."""

    out: Emitter

    def line(self, line_no: int, text: str) -> None: ...

    def finish(self) -> None: ...


def drive(parser: LineParser, source: LineSource) -> Iterator[Batch]:
    """Feed every line of `source` to `parser`, handing out its rows every `FLUSH_ROWS`."""
    for line_no, text in source.lines():
        parser.line(line_no, text)
        if parser.out.due():
            yield from parser.out.flush()
    parser.finish()
    yield from parser.out.flush()
