"""A streaming JSON reader: events out of a byte stream, memory bounded by one chunk and one token.

`json.load` holds the whole document, and a `-J` file of nccl-tests with `-I 1` carries every iteration
of every process at every size (processes x iterations x sizes x 2 numbers): tens of millions of numbers
on a large job. This reader hands out events (`start_map`, `key`, `end_map`, `start_array`, `end_array`,
`value`) as it reads, so a consumer keeps only what it wants.

It also reads what nccl-tests' hand-written writer (src/util.cu) can put in a file that strict JSON does
not allow: `inf` and `-inf` (printed by `%lf`), and `nan`. A string or number longer than `MAX_TOKEN_BYTES`
(nccl-tests cuts its strings at 2 KiB) is an error, as is anything that is not JSON; a document that
stops early raises `Truncated`, which a consumer can catch after the events it already used.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from typing import Any

from tracelog.errors import TracelogError

MAX_TOKEN_BYTES = 1 << 20  # the longest string or number read: 512x nccl-tests' own 2 KiB string cap
CHUNK_BYTES = 1 << 20
# Nesting refused past this depth: nccl-tests nests 4 deep (results, a result, per_iter, a process's
# list), and a consumer that builds values recursively must not meet a million `[`.
MAX_DEPTH = 64

TOKEN_RX = re.compile(rb'\s*(?:([{}\[\]:,])|("(?:[^"\\]|\\.)*")|([^\s{}\[\]:,"]+))')
BARE = {b"true": True, b"false": False, b"null": None, b"nan": math.nan, b"-nan": math.nan}
BARE |= {b"inf": math.inf, b"-inf": -math.inf, b"NaN": math.nan, b"Infinity": math.inf}
BARE |= {b"-Infinity": -math.inf}
NUMBER_RX = re.compile(rb"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?$")

Event = tuple[str, Any]

# What the reader expects next.
VALUE, VALUE_OR_END, KEY, KEY_OR_END, COLON, COMMA_OR_END, DONE = range(7)


class Truncated(TracelogError):
    """The document stopped before it was closed: a run killed while writing, a file cut in transfer."""


class JsonEvents:
    """Events of one JSON document read from `read(n)`; `line` and `offset` say where the reader is."""

    def __init__(self, read: Callable[[int], bytes], path: str | None = None) -> None:
        self.read = read
        self.path = path
        self.line = 1
        self.offset = 0
        self._buffer = b""
        self._pos = 0
        self._eof = False
        self._stack: list[str] = []
        self._expect = VALUE

    def where(self) -> str:
        return f"byte {self.offset}"

    def _fail(self, what: str, cls: type[TracelogError] = TracelogError) -> TracelogError:
        return cls(f"not JSON at {self.where()}: {what}", self.path, self.line)

    def _fill(self) -> bool:
        """Read one more chunk behind what is left of the buffer; False at the end of the stream."""
        chunk = self.read(CHUNK_BYTES)
        self._eof = not chunk
        self._buffer, self._pos = self._buffer[self._pos :] + chunk, 0
        return bool(chunk)

    def _tokens(self) -> Iterator[tuple[int, bytes]]:
        """(kind, text) of each token: 1 punctuation, 2 string, 3 bare word (number or literal)."""
        while True:
            match = TOKEN_RX.match(self._buffer, self._pos)
            if not self._eof and (match is None or match.end() >= len(self._buffer)):
                # The token may go on in the next chunk: read on, holding at most one token.
                if len(self._buffer) - self._pos > MAX_TOKEN_BYTES:
                    raise self._fail(f"a token longer than {MAX_TOKEN_BYTES} bytes")
                self._fill()
                continue
            if match is None:
                rest = self._buffer[self._pos :].strip()
                if rest:
                    raise self._fail(f"unterminated string {rest[:40]!r}", Truncated)
                return
            kind = match.lastindex or 0
            if match.end() - match.start(kind) > MAX_TOKEN_BYTES:
                raise self._fail(f"a token longer than {MAX_TOKEN_BYTES} bytes")
            self._advance(match.start(kind))
            text = match.group(kind)
            self._advance(match.end())
            yield kind, text

    def numbers(self) -> Iterator[list[float | None]]:
        """The rest of an array of numbers whose `start_array` was the last event, in runs, through its
        `]` (no `end_array` event follows). The fast path for nccl-tests' per-iteration arrays: one split
        per chunk instead of one event per number. A `null` or `"nan"` is None or NaN; anything else that
        is not a number is the project's error."""
        if self._expect != VALUE_OR_END:
            raise self._fail("numbers() outside the start of an array")
        while True:
            close = self._buffer.find(b"]", self._pos)
            if close < 0:
                cut = self._buffer.rfind(b",", self._pos)
                if self._eof:
                    raise self._fail("the document stops inside an array", Truncated)
                if cut < 0:
                    if len(self._buffer) - self._pos > MAX_TOKEN_BYTES:
                        raise self._fail(f"a token longer than {MAX_TOKEN_BYTES} bytes")
                    self._fill()
                    continue
                values = self._number_run(self._buffer[self._pos : cut])
                self._advance(cut + 1)
                yield values
                self._fill()
                continue
            segment = self._buffer[self._pos : close]
            if segment.strip():
                yield self._number_run(segment)
            self._advance(close + 1)
            self._stack.pop()
            self._expect = COMMA_OR_END if self._stack else DONE
            return

    def _number_run(self, segment: bytes) -> list[float | None]:
        pieces = segment.replace(b'"', b"").split(b",")
        try:
            return [float(piece) for piece in pieces]
        except ValueError:
            pass
        values: list[float | None] = []
        for piece in pieces:
            word = piece.strip()
            if word == b"null":
                values.append(None)
                continue
            try:
                values.append(float(word))
            except ValueError:
                what = "an empty item" if not word else repr(word[:40])
                raise self._fail(f"{what} in an array of numbers") from None
        return values

    def _advance(self, to: int) -> None:
        self.line += self._buffer.count(b"\n", self._pos, to)
        self.offset += to - self._pos
        self._pos = to

    def _scalar(self, kind: int, text: bytes) -> Any:
        if kind == 2:
            try:
                return json.loads(text.decode("utf-8", errors="replace"))
            except ValueError:
                raise self._fail(f"bad escape in string {text[:40]!r}") from None
        if text in BARE:
            return BARE[text]
        if NUMBER_RX.match(text):
            try:
                return int(text) if text.lstrip(b"-").isdigit() else float(text)
            except ValueError:  # more digits than int() reads from text
                raise self._fail(f"number {text[:40]!r} too long") from None
        raise self._fail(f"unexpected {text[:40]!r}")

    def __iter__(self) -> Iterator[Event]:
        stack = self._stack
        for kind, text in self._tokens():
            expect = self._expect
            if expect == DONE:
                raise self._fail(f"data after the end of the document: {text[:40]!r}")
            if expect in (VALUE, VALUE_OR_END):
                if kind == 1 and text in (b"{", b"[") and len(stack) >= MAX_DEPTH:
                    raise self._fail(f"nested deeper than {MAX_DEPTH} levels")
                if text == b"{" and kind == 1:
                    stack.append("map")
                    self._expect = KEY_OR_END
                    yield "start_map", None
                    continue
                if text == b"[" and kind == 1:
                    stack.append("array")
                    self._expect = VALUE_OR_END
                    yield "start_array", None
                    continue
                if text == b"]" and kind == 1 and expect == VALUE_OR_END:
                    stack.pop()
                    yield "end_array", None
                elif kind == 1:
                    raise self._fail(f"{text.decode()!r} where a value belongs")
                else:
                    yield "value", self._scalar(kind, text)
            elif expect in (KEY, KEY_OR_END):
                if kind == 2:
                    yield "key", self._scalar(kind, text)
                    self._expect = COLON
                    continue
                if text == b"}" and kind == 1 and expect == KEY_OR_END:
                    stack.pop()
                    yield "end_map", None
                else:
                    raise self._fail(f"{text[:40]!r} where a key belongs")
            elif expect == COLON:
                if text != b":" or kind != 1:
                    raise self._fail(f"{text[:40]!r} where ':' belongs")
                self._expect = VALUE
                continue
            else:  # COMMA_OR_END
                top = stack[-1]
                if text == b"," and kind == 1:
                    self._expect = KEY if top == "map" else VALUE
                    continue
                if kind == 1 and text == (b"}" if top == "map" else b"]"):
                    stack.pop()
                    yield ("end_map" if top == "map" else "end_array"), None
                else:
                    raise self._fail(f"{text[:40]!r} where ',' or the end of the {top} belongs")
            self._expect = COMMA_OR_END if stack else DONE
        if self._expect != DONE:
            raise self._fail("the document stops before it is closed", Truncated)
