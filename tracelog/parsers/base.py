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
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO, TypeVar

import polars as pl
import regex

ANSI_ESCAPE = regex.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
BLOCK_BYTES = 16 << 20

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


@dataclass(frozen=True)
class PipeLayout:
    """Where the values sit in a `key: value | key: value |` line, learned from one example line.

    The lines of one log print the same keys in the same order, so once one line is understood the others
    can be cut by position: split on `|`, check that each part starts with the example's key, cast the text
    after it. That is a few vectorised string kernels per value instead of one regex search of the whole
    line per key. `fits` says which lines have the layout; lines that do not (a key more or less, a value
    that is not a plain number) are left to the parser's regex path, so a layout changes how fast a result
    is found, never the result.
    """

    parts: tuple[str, ...]
    keys: tuple[str | None, ...]  # per part: its text through ": ", or None for a part without a colon

    @classmethod
    def learn(cls, line: str, skip: int = 1) -> PipeLayout | None:
        """The layout of `line`; the first `skip` parts are the caller's (an `iteration N/M` head)."""
        parts = line.split("|")
        keys: list[str | None] = [None] * min(skip, len(parts))
        for part in parts[skip:]:
            colon = part.find(":")
            if colon < 0:
                keys.append(None)
            elif part[colon + 1 : colon + 2] == " " and part[colon + 2 :].find(":") < 0:
                keys.append(part[: colon + 2])
            else:
                return None
        return cls(tuple(parts), tuple(keys))

    def __len__(self) -> int:
        return len(self.parts)

    def split(self, lines: pl.DataFrame, *keep: str) -> pl.DataFrame:
        """`keep` columns and the parts of each line, `_p0`...: one more than the layout has (null past the
        end of the line), so a line with more parts shows a value there.

        `split_exact` writes each part position to a compact column of its own; the kernels that follow
        then read memory in order instead of striding through whole lines.
        """
        fields = [f"_p{k}" for k in range(len(self.parts) + 1)]
        parts = pl.col("line").str.split_exact("|", len(self.parts)).struct.rename_fields(fields)
        return lines.select(*keep, parts.alias("_parts")).unnest("_parts")

    def fits(self, skip: int = 1, checked: frozenset[int] = frozenset()) -> pl.Expr:
        """True where the split line has this layout: as many parts, the same keys, the same colon-less parts.

        Parts in `checked` the caller has compared whole already. Whether the values are numbers is the
        caller's check too (see `text` and `plain_number`).
        """
        count = len(self.parts)
        checks = [pl.col(f"_p{count}").is_null(), pl.col(f"_p{count - 1}").is_not_null()]
        for k in range(skip, count):
            if k in checked:
                continue
            key, part = self.keys[k], pl.col(f"_p{k}")
            checks.append(part.str.starts_with(key) if key is not None else part == self.parts[k])
        return pl.all_horizontal(checks)

    def text(self, k: int) -> pl.Expr:
        """The text after the key of part `k`, spaces stripped (other whitespace makes it not a number)."""
        key = self.keys[k]
        assert key is not None
        return pl.col(f"_p{k}").str.slice(len(key)).str.strip_chars(" ")


def plain_number(text: pl.Expr, dtype: Any) -> tuple[pl.Expr, pl.Expr]:
    """`text` as a number of `dtype`, and whether it is one number as a regex path would read it.

    Floats: anything a float cast reads (digits, exponent, nan, inf), the cast the regex path applies to
    what it extracted. Integers: bare digits only, as a `(\\d+)` pattern reads them (no sign).
    """
    if dtype in (pl.Int64, pl.Int32):
        value = text.cast(pl.UInt64, strict=False).cast(dtype, strict=False)
        return value, value.is_not_null() & ~text.str.starts_with("+")
    value = text.cast(dtype, strict=False)
    return value, value.is_not_null()


def unparsed_rows(lines: list[tuple[int, str]]) -> Batch:
    return Batch("unparsed", [{"line_no": n, "text": t} for n, t in lines])


def head_text(head: bytes) -> str:
    """The head of a file as text for detection: decoded leniently, colour codes removed."""
    return ANSI_ESCAPE.sub(b"", head).decode("utf-8", errors="replace").replace("\r\n", "\n")
