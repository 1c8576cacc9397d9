"""What every parser shares: the line source it reads and the batches it yields.

A parser never sees the database. It reads a `LineSource` (blocks of whole lines with their line
numbers, decoded leniently) and yields `Batch` objects naming a table and carrying rows. Rows that
belong to a training run carry a `run_key` (0, 1, ... within the file), rows of a benchmark a
`bench_key`; the store turns keys into ids. Lines a parser does not understand go out as `unparsed`
batches so nothing is silently dropped.
"""

from __future__ import annotations

import functools
import io
import json
import math
import queue
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol, TypeVar

import polars as pl
import regex

from tracelog.parsers.prefixes import strip_prefix as strip_prefix
from tracelog.parsers.prefixes import without_gutter
from tracelog.parsers.ranges import (
    BANDWIDTH,
    INT32_COLUMNS,
    INT64_COLUMNS,
    INT_LIMITS,
    KEYS,
    MAX_BANDWIDTH_GBPS,
    NAN_MEANINGFUL,
    SIGNED,
)

ANSI_ESCAPE = regex.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
BLOCK_BYTES = 16 << 20
FLUSH_ROWS = 5000  # rows a line parser gathers before it hands them out as batches
# The longest line read as such: bytes past it are skipped while streaming (never held in memory), the
# kept head goes to `unparsed` and an event says how long the line was. The longest line of the sample
# and corpus logs is an arguments dump of a few KiB, so no real line comes close.
MAX_LINE_BYTES = 1 << 20

Rows = list[dict[str, Any]] | pl.DataFrame
T = TypeVar("T")


RESUME_TABLE = "_resume"  # a Batch of it carries a parser's state after the last complete line (one dict)
# A Batch of it, first of a resumed parse, names rows the last parse wrote at its end that this one writes
# again: dicts of `table` (one of a run's tables), `run_key` and `line_no`.
RETRACT_TABLE = "_retract"
PARTLY_READ_EVENT = "unread_figures"
"""An event on a line a parser read only in part (a figure it could not name): the parser writes the line
to `unparsed` as well, and it is counted there although rows came from it."""


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
    # (line number, the line's length in bytes before it was cut, its kept head) per line cut to
    # MAX_LINE_BYTES; the line itself is handed to the parser empty.
    cut: list[tuple[int, int, bytes]] = field(default_factory=list)
    _lines: list[str] | None = field(default=None, repr=False)
    _line_count: int | None = field(default=None, repr=False)

    def _clean(self) -> bytes:
        return ANSI_ESCAPE.sub(b"", self.data) if b"\x1b" in self.data else self.data

    def lines(self) -> list[str]:
        """The lines as text: invalid UTF-8 replaced, CR and colour codes removed."""
        if self._lines is None:
            text = self._clean().decode("utf-8", errors="replace")
            lines = text.split("\n")
            # the split's empty tail is no line, unless colour codes alone made the last line empty
            if lines and lines[-1] == "" and (self.data.endswith(b"\n") or not self.data):
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
            if data.endswith(b"\n") and not self.data.endswith(b"\n"):  # a last line of colour codes only
                frame = pl.concat([frame, pl.DataFrame({"line": [""]})])
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
    A last line without a newline (a log still being written) is handed out like any other
    (`unterminated` says so), unless `hold_partial`: then it is held back (`pending_bytes` long) until a
    later read finds its newline.
    """

    def __init__(
        self,
        stream: BinaryIO,
        name: str,
        block_bytes: int = BLOCK_BYTES,
        hold_partial: bool = False,
        first_line: int = 1,
    ) -> None:
        self.stream = stream
        self.name = name
        self.block_bytes = block_bytes
        self.hold_partial = hold_partial
        self.first_line = first_line  # > 1 where an ingest resumes after the lines committed before
        self.lines_total = first_line - 1
        self.bytes_read = 0
        self.pending_bytes = 0
        self.unterminated = False  # the last line was handed out without its newline
        self.on_bytes: list[Any] = []
        self.cut: list[tuple[int, int, bytes]] = []  # lines cut to MAX_LINE_BYTES, for `guarded` to report

    def blocks(self) -> Iterator[Block]:
        rest = b""
        dropped = 0  # bytes of the unfinished line skipped past MAX_LINE_BYTES
        next_line = self.first_line
        while True:
            chunk = self.stream.read(self.block_bytes)
            if chunk:
                self.bytes_read += len(chunk)
                for callback in self.on_bytes:
                    callback(chunk)
            if not chunk:
                if rest and self.hold_partial:
                    # A line still being written: not consumed until its newline arrives.
                    self.pending_bytes = len(rest) + dropped
                    return
                if rest:
                    self.unterminated = True
                    block = self._cut_long_lines(Block(next_line, rest), dropped)
                    self.cut.extend(block.cut)
                    yield block
                    self.lines_total += block.line_count
                return
            cut = chunk.rfind(b"\n") + 1
            if cut == 0:
                # No line ends in this chunk: keep at most MAX_LINE_BYTES of the line, count the rest.
                room = max(0, MAX_LINE_BYTES + 1 - len(rest))
                if room:
                    rest += chunk[:room]
                dropped += len(chunk) - min(room, len(chunk))
                continue
            # One copy of the block's bytes (the unfinished line before it, the whole lines of the chunk).
            data = b"".join((rest, memoryview(chunk)[:cut])) if rest or cut < len(chunk) else chunk
            rest = chunk[cut:]
            block = self._cut_long_lines(Block(next_line, data), dropped)
            self.cut.extend(block.cut)
            dropped = 0
            if len(rest) > MAX_LINE_BYTES:
                dropped, rest = len(rest) - MAX_LINE_BYTES - 1, rest[: MAX_LINE_BYTES + 1]
            del chunk, data
            yield block
            # Counted after the parser had the block: its frame knows the count for free.
            count = block.line_count
            next_line += count
            self.lines_total += count

    @staticmethod
    def _cut_long_lines(block: Block, dropped: int) -> Block:
        """`block` with every line longer than MAX_LINE_BYTES emptied and noted in `block.cut`.

        A line that long spans a whole window of MAX_LINE_BYTES/2 without a newline: a handful of `find`s
        per block rule that out, so the common block is returned untouched. `dropped` counts bytes of the
        first line already skipped while streaming.
        """
        data, half = block.data, MAX_LINE_BYTES // 2
        if not dropped and all(
            data.find(b"\n", at, at + half) >= 0 for at in range(0, len(data) - half, half)
        ):
            return block
        lines = data.split(b"\n")
        cut: list[tuple[int, int, bytes]] = []
        for k, line in enumerate(lines):
            length = len(line) + (dropped if k == 0 else 0)
            if length > MAX_LINE_BYTES:
                cut.append((block.first_line + k, length, line[:MAX_LINE_BYTES]))
                lines[k] = b""
        if not cut:
            return block
        # An emptied last line without its newline gets one, so that it still counts as a line.
        ending = b"\n" if lines[-1] == b"" and cut[-1][0] == block.first_line + len(lines) - 1 else b""
        return Block(block.first_line, b"\n".join(lines) + ending, cut)

    def frames(self, ahead: int = 1) -> Iterator[tuple[Block, pl.DataFrame]]:
        """Each block with its frame, read, hashed and split into lines on a worker thread `ahead` blocks
        early, so that the parser's thread only parses. A block handed out with its frame no longer holds
        its bytes (the frame has the lines): 16 MB less per block in flight."""
        return prefetched((_framed(block) for block in self.blocks()), ahead)

    def lines(self) -> Iterator[tuple[int, str]]:
        """(line number, text) for every line: for parsers whose formats are small."""
        for block in self.blocks():
            yield from enumerate(block.lines(), start=block.first_line)


def _framed(block: Block) -> tuple[Block, pl.DataFrame]:
    frame = block.frame()
    block.data, block._lines = b"", None  # its line count stays (`Block.line_count`, set by `frame`)
    return block, frame


@dataclass
class _Raised:
    error: BaseException


_DONE = object()


def prefetched(items: Iterator[T], depth: int, meanwhile: Callable[[], object] | None = None) -> Iterator[T]:
    """`items`, produced on a worker thread up to `depth` ahead of the caller; `meanwhile` is called on the
    caller's thread once the worker has started, before the first item is waited for.

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
    closing = False
    try:
        if meanwhile is not None:
            meanwhile()
        while True:
            item = handoff.get()
            if item is _DONE:
                return
            if isinstance(item, _Raised):
                raise item.error
            yield item
    except GeneratorExit:  # closed by a caller that stopped early (an interrupt unwinding it, often)
        closing = True
        raise
    finally:
        try:
            stop.set()
            worker.join(timeout=5)
        except KeyboardInterrupt:
            if not closing:  # Ctrl-C while closing: the interrupt being unwound already says so
                raise


def head_text(head: bytes) -> str:
    """The head of a file as text for detection: decoded leniently, colour codes removed."""
    return ANSI_ESCAPE.sub(b"", head).decode("utf-8", errors="replace").replace("\r\n", "\n")


NCCL_WARN_RX = re.compile(r"\bNCCL WARN\b")


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
                yield from batches_of(table, rows)
        self.tables = {}
        self.count = 0


def batches_of(table: str, rows: list[dict[str, Any]]) -> Iterator[Batch]:
    """Rows as a frame; an integer past what polars holds (128 bits) becomes NULL, or drops its row
    when it is a key, with a `bad_value` event, instead of failing the frame."""
    try:
        frame = pl.DataFrame(rows, infer_schema_length=None)
    except OverflowError:
        events: list[dict[str, Any]] = []
        frame = pl.DataFrame(_checked_dicts(table, rows, events), infer_schema_length=None)
        yield Batch("events", events)
    yield Batch(table, frame)


class LineParser(Protocol):
    """A parser that reads one line at a time: rows go to `out`; `finish` closes what is still open at
    the end of the file (a bench without its footer, lines held back for a table that never came)."""

    out: Emitter

    def line(self, line_no: int, text: str) -> None: ...

    def finish(self) -> None: ...


@contextmanager
def numbers_guarded(line_no: int, text: str, add: Callable[[str, dict[str, Any]], Any]) -> Iterator[None]:
    """Read one line; a number in it that no Python int can take from text (more digits than
    `sys.get_int_max_str_digits()`, the interpreter's guard against quadratic parsing) or no float can
    hold makes the line unparsed with a `bad_value` event through `add(table, row)`, never a crash.
    Rows the line added before the failure stand."""
    try:
        yield
    except (ValueError, OverflowError) as exc:
        add("unparsed", {"line_no": line_no, "text": text})
        add("events", {"line_no": line_no, "kind": "bad_value", "text": str(exc)[:200]})


def drive(
    parser: LineParser,
    source: LineSource,
    state: Callable[[], dict[str, Any]] | None = None,
    gutter: bool = False,
) -> Iterator[Batch]:
    """Feed every line of `source` to `parser` (`numbers_guarded`), handing out its rows every
    `FLUSH_ROWS`; with `state`, what it returns after the last line, for a resume (`RESUME_TABLE`); with
    `gutter`, the lines without an editor's line numbers where every line has one (`without_gutter`)."""
    lines = without_gutter(source.lines()) if gutter else source.lines()
    for line_no, text in lines:
        with numbers_guarded(line_no, text, parser.out.add):
            parser.line(line_no, text)
        if parser.out.due():
            yield from parser.out.flush()
    if state is not None:
        yield Batch(RESUME_TABLE, [{"state": json.dumps(state(), sort_keys=True)}])
    parser.finish()
    yield from parser.out.flush()


def as_rounded(value: float) -> int | float:
    """`value` rounded to an int when it is finite; NaN and inf stay floats (see `as_int`)."""
    return round(value) if math.isfinite(value) else value


def as_int(value: float) -> int | float:
    """`value` as an int when it is a finite number; NaN and inf stay floats for `checked` to report
    (`int()` of them raises)."""
    return int(value) if math.isfinite(value) else value


def _problem(table: str, column: str, value: Any) -> str | None:
    """What is wrong with `value` in `column` of `table`, or None."""
    if value is None or isinstance(value, (bool, str)):
        return None
    named = f"{column}@{table}"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            if column in NAN_MEANINGFUL or named in NAN_MEANINGFUL:
                return None
            return "not a finite number"
        if value < 0 and column not in SIGNED and named not in SIGNED:
            return "negative"
        if column in INT32_COLUMNS or column in INT64_COLUMNS:
            limit = INT_LIMITS[column in INT32_COLUMNS]
            if abs(value) > limit:
                return f"larger than its column holds ({limit})"
        if (column in BANDWIDTH or named in BANDWIDTH) and value > MAX_BANDWIDTH_GBPS:
            return f"above {MAX_BANDWIDTH_GBPS:g} GB/s, no link is that fast"
        return None
    if isinstance(value, int):
        if value < 0:
            return "negative"
        limit = INT_LIMITS[column in INT32_COLUMNS]
        if value > limit:
            return f"larger than its column holds ({limit})"
    return None


def _event(
    table: str, row: dict[str, Any], column: str, value: Any, why: str, dropped: bool
) -> dict[str, Any]:
    line_no = row.get("line_no") or row.get("line_start") or 0
    what = "row dropped" if dropped else "stored as NULL"
    event: dict[str, Any] = {"line_no": line_no if isinstance(line_no, int) and 0 <= line_no < 1 << 63 else 0}
    event["kind"] = "bad_value"
    event["text"] = f"{table}.{column} = {value!r}: {why}; {what}"
    for key in ("run_key", "bench_key"):
        if isinstance(row.get(key), int) and key != column:
            event[key] = row[key]
    return event


def _checked_dicts(
    table: str, rows: list[dict[str, Any]], events: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        clean, keep = dict(row), True
        for column, value in row.items():
            if column == "run_params" and isinstance(value, list):
                clean[column] = _checked_dicts("run_params", value, events)
                continue
            why = _problem(table, column, value)
            if why is None:
                continue
            dropped = column in KEYS
            events.append(_event(table, row, column, value, why, dropped))
            keep = keep and not dropped
            clean[column] = None
        if keep:
            out.append(clean)
    return out


def _bad_mask(table: str, column: str, dtype: pl.DataType) -> pl.Expr | None:
    """True where a value of a numeric column is out of range (see `_problem`), or None for no check."""
    col, named = pl.col(column), f"{column}@{table}"
    if dtype.is_integer():
        limit = INT_LIMITS[column in INT32_COLUMNS]
        target = pl.Int32 if column in INT32_COLUMNS else pl.Int64
        overflow = col.is_not_null() & col.cast(target, strict=False).is_null()
        if dtype.is_unsigned_integer():
            return overflow | (col.cast(pl.Float64) > limit)
        if dtype in (pl.Int8, pl.Int16, pl.Int32) or dtype == target:
            return col < 0  # no value of a signed type as wide as the column's or narrower overflows it
        return overflow | (col < 0)
    if dtype.is_float():
        checks = []
        if column in INT32_COLUMNS or column in INT64_COLUMNS:  # integers read as floats (NaN kept)
            # 2^31 and 2^63 themselves do not fit; (2^63 - 1) as a float rounds up to 2^63.
            checks.append(col.abs() >= float(INT_LIMITS[column in INT32_COLUMNS] + 1))
        if column not in NAN_MEANINGFUL and named not in NAN_MEANINGFUL:
            checks.append(col.is_nan() | col.is_infinite())
        if column not in SIGNED and named not in SIGNED:
            checks.append(col < 0)
        if column in BANDWIDTH or named in BANDWIDTH:
            checks.append(col > MAX_BANDWIDTH_GBPS)
        return pl.any_horizontal(checks).fill_null(False) if checks else None
    return None


def _checked_frame(table: str, frame: pl.DataFrame, events: list[dict[str, Any]]) -> pl.DataFrame:
    masks = {}
    for column, dtype in frame.schema.items():
        mask = _bad_mask(table, column, dtype)
        if mask is not None:
            masks[column] = mask.fill_null(False)
    if not masks or not frame.select(pl.any_horizontal(list(masks.values())).any()).item():
        return frame
    flags = frame.select(**{f"_bad_{c}": m for c, m in masks.items()})
    bad_columns = [c for c in masks if flags[f"_bad_{c}"].any()]
    if not bad_columns:
        return frame
    for column in bad_columns:
        bad_rows = frame.filter(flags[f"_bad_{column}"])
        for row in bad_rows.to_dicts():
            value = row[column]
            why = (
                _problem(table, column, value)
                or f"larger than its column holds ({INT_LIMITS[column in INT32_COLUMNS]})"
            )
            events.append(_event(table, row, column, value, why, column in KEYS))
    drop = pl.any_horizontal([flags[f"_bad_{c}"] for c in bad_columns if c in KEYS] or [pl.lit(False)])
    frame = frame.with_columns(
        pl.when(flags[f"_bad_{c}"]).then(None).otherwise(pl.col(c)).alias(c) for c in bad_columns
    )
    frame = frame.filter(~frame.select(drop.alias("_d")).to_series())
    return frame.with_columns(
        pl.col(c).cast(pl.Int32 if c in INT32_COLUMNS else pl.Int64, strict=False)
        for c, dtype in frame.schema.items()
        if dtype in (pl.Int128, pl.UInt64) or (c in bad_columns and dtype.is_integer())
    )


def checked(batch: Batch) -> tuple[Batch, list[dict[str, Any]]]:
    """`batch` with every out-of-range number made NULL (its row dropped when the number is a key), and
    one `bad_value` event row per such number: NaN and inf where they are not the log's own signal,
    negatives where only sizes, counts and durations make sense, integers past their column's type,
    bandwidths no link reaches."""
    events: list[dict[str, Any]] = []
    if batch.table in ("unparsed", "events", RESUME_TABLE, RETRACT_TABLE):
        return batch, events
    if isinstance(batch.rows, pl.DataFrame):
        return Batch(batch.table, _checked_frame(batch.table, batch.rows, events)), events
    return Batch(batch.table, _checked_dicts(batch.table, list(batch.rows), events)), events


def _cut_batches(source: LineSource) -> Iterator[Batch]:
    if not source.cut:
        return
    cut, source.cut = source.cut, []
    yield Batch(
        "unparsed",
        [{"line_no": n, "text": head.decode("utf-8", errors="replace")} for n, _, head in cut],
    )
    yield Batch(
        "events",
        [
            {
                "line_no": n,
                "kind": "line_truncated",
                "text": f"line of {length} bytes cut to its first {MAX_LINE_BYTES} (the longest line "
                "tracelog reads); the rest was skipped",
            }
            for n, length, _ in cut
        ],
    )


def guarded(parse: Callable[..., Iterator[Batch]]) -> Callable[..., Iterator[Batch]]:
    """A parser's `parse` whose batches are range-checked (`checked`), with the lines cut to
    MAX_LINE_BYTES handed out as unparsed lines and `line_truncated` events."""

    @functools.wraps(parse)
    def wrapper(source: LineSource, *args: Any, **kwargs: Any) -> Iterator[Batch]:
        for batch in parse(source, *args, **kwargs):
            clean, events = checked(batch)
            yield clean
            if events:
                yield Batch("events", events)
            yield from _cut_batches(source)
        yield from _cut_batches(source)

    return wrapper
