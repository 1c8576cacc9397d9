"""What every parser shares: the line source it reads and the batches it yields.

A parser never sees the database. It reads a `LineSource` (blocks of whole lines with their line
numbers, decoded leniently) and yields `Batch` objects naming a table and carrying rows. Rows that
belong to a training run carry a `run_key` (0, 1, ... within the file), rows of a benchmark a
`bench_key`; the store turns keys into ids. Lines a parser does not understand go out as `unparsed`
batches so nothing is silently dropped.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import polars as pl
import regex

ANSI_ESCAPE = regex.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
BLOCK_BYTES = 16 << 20

Rows = list[dict[str, Any]] | pl.DataFrame


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
        return frame.with_row_index("line_no", offset=self.first_line).with_columns(
            pl.col("line_no").cast(pl.Int64)
        )

    @property
    def line_count(self) -> int:
        return self.data.count(b"\n") + (0 if self.data.endswith(b"\n") else 1)


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
            data = rest + chunk
            if not chunk:
                if data:
                    block = Block(next_line, data)
                    self.lines_total += block.line_count
                    yield block
                return
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                rest = data
                continue
            rest = data[cut:]
            block = Block(next_line, data[:cut])
            count = block.line_count
            next_line += count
            self.lines_total += count
            yield block

    def lines(self) -> Iterator[tuple[int, str]]:
        """(line number, text) for every line: for parsers whose formats are small."""
        for block in self.blocks():
            yield from enumerate(block.lines(), start=block.first_line)


def unparsed_rows(lines: list[tuple[int, str]]) -> Batch:
    return Batch("unparsed", [{"line_no": n, "text": t} for n, t in lines])


def head_text(head: bytes) -> str:
    """The head of a file as text for detection: decoded leniently, colour codes removed."""
    return ANSI_ESCAPE.sub(b"", head).decode("utf-8", errors="replace").replace("\r\n", "\n")
