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

    def where(self) -> str:
        return f"byte {self.offset}"

    def _fail(self, what: str, cls: type[TracelogError] = TracelogError) -> TracelogError:
        return cls(f"not JSON at {self.where()}: {what}", self.path, self.line)

    def _tokens(self) -> Iterator[tuple[int, bytes]]:
        """(kind, text) of each token: 1 punctuation, 2 string, 3 bare word (number or literal)."""
        eof = False
        while True:
            match = TOKEN_RX.match(self._buffer, self._pos)
            if not eof and (match is None or match.end() >= len(self._buffer)):
                # The token may go on in the next chunk: read on, holding at most one token.
                if len(self._buffer) - self._pos > MAX_TOKEN_BYTES:
                    raise self._fail(f"a token longer than {MAX_TOKEN_BYTES} bytes")
                chunk = self.read(CHUNK_BYTES)
                eof = not chunk
                self._buffer, self._pos = self._buffer[self._pos :] + chunk, 0
                continue
            if match is None:
                rest = self._buffer[self._pos :].strip()
                if rest:
                    raise self._fail(f"unterminated string {rest[:40]!r}", Truncated)
                return
            kind = match.lastindex or 0
            self._advance(match.start(kind))
            text = match.group(kind)
            self._advance(match.end())
            yield kind, text

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
        stack: list[str] = []
        expect = VALUE
        for kind, text in self._tokens():
            if expect == DONE:
                raise self._fail(f"data after the end of the document: {text[:40]!r}")
            if expect in (VALUE, VALUE_OR_END):
                if text == b"{" and kind == 1:
                    stack.append("map")
                    expect = KEY_OR_END
                    yield "start_map", None
                    continue
                if text == b"[" and kind == 1:
                    stack.append("array")
                    expect = VALUE_OR_END
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
                    expect = COLON
                    continue
                if text == b"}" and kind == 1 and expect == KEY_OR_END:
                    stack.pop()
                    yield "end_map", None
                else:
                    raise self._fail(f"{text[:40]!r} where a key belongs")
            elif expect == COLON:
                if text != b":" or kind != 1:
                    raise self._fail(f"{text[:40]!r} where ':' belongs")
                expect = VALUE
                continue
            else:  # COMMA_OR_END
                top = stack[-1]
                if text == b"," and kind == 1:
                    expect = KEY if top == "map" else VALUE
                    continue
                if kind == 1 and text == (b"}" if top == "map" else b"]"):
                    stack.pop()
                    yield ("end_map" if top == "map" else "end_array"), None
                else:
                    raise self._fail(f"{text[:40]!r} where ',' or the end of the {top} belongs")
            expect = COMMA_OR_END if stack else DONE
        if expect != DONE:
            raise self._fail("the document stops before it is closed", Truncated)
