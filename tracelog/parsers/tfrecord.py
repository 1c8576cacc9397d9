"""TFRecord framing, the container of TensorBoard event files: per record an 8-byte little-endian length,
its masked CRC-32C, the payload and the payload's masked CRC-32C (tensorflow/core/lib/io/record_writer.cc).

Read from the ingest's stream, so memory stays at about one read and the store hashes the file in the same
pass; every CRC is checked with a C CRC-32C (`google-crc32c`), and what fails is said, not swallowed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import google_crc32c

from tracelog.errors import TracelogError
from tracelog.parsers.base import LineSource

READ_BYTES = 1 << 20
# A record longer than this is no event a trainer writes (scalars are ~50 bytes, a graph a few MB);
# a larger length means the framing is lost.
MAX_RECORD_BYTES = 256 << 20
HEADER = struct.Struct("<QI")  # record length, masked CRC-32C of the length
CRC = struct.Struct("<I")


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C (tensorflow/core/lib/hash/crc32c.h: rotate right 15, add 0xa282ead8)."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def header_ok(head: bytes) -> bool:
    """Whether `head` opens with a TFRecord header whose length CRC checks."""
    if len(head) < 12:
        return False
    (crc,) = CRC.unpack_from(head, 8)
    return masked_crc32c(head[:8]) == crc


class Records:
    """The payloads of a TFRecord stream, CRCs checked; what went wrong is kept in `problems`."""

    def __init__(self, source: LineSource) -> None:
        self.source = source
        self.problems: list[tuple[int, str, str]] = []
        self.records_read = 0
        self.buffer = b""
        self.pos = 0  # where the next record starts in `buffer`
        self.offset = 0  # file offset of the next record
        self.eof = False

    def _read(self, size: int) -> bytes:
        chunk = self.source.stream.read(size)
        if not chunk:
            self.eof = True
            return b""
        self.source.bytes_read += len(chunk)
        for callback in self.source.on_bytes:
            callback(chunk)
        return chunk

    def _fill(self, need: int) -> bool:
        """At least `need` bytes from `pos` on, if the file has them; the buffer is compacted once per
        read, never per record (memory stays at about one read)."""
        if len(self.buffer) - self.pos >= need:
            return True
        self.buffer, self.pos = self.buffer[self.pos :], 0
        while len(self.buffer) < need and not self.eof:
            self.buffer += self._read(max(READ_BYTES, need - len(self.buffer)))
        return len(self.buffer) >= need

    def records(self) -> Iterator[tuple[int, bytes]]:
        record_no = 0
        try:
            while True:
                if not self._fill(12):
                    if len(self.buffer) > self.pos:
                        self._truncated(record_no + 1, "header")
                    return
                record_no += 1
                buffer, pos = self.buffer, self.pos
                length, crc = HEADER.unpack_from(buffer, pos)
                if masked_crc32c(buffer[pos : pos + 8]) != crc or length > MAX_RECORD_BYTES:
                    self._bad_header(record_no)
                    return
                if len(buffer) - pos < 16 + length:
                    if not self._fill(16 + length):
                        self._truncated(record_no, "payload")
                        return
                    buffer, pos = self.buffer, self.pos
                payload = buffer[pos + 12 : pos + 12 + length]
                (payload_crc,) = CRC.unpack_from(buffer, pos + 12 + length)
                self.pos = pos + 16 + length
                start, self.offset = self.offset, self.offset + 16 + length
                if masked_crc32c(payload) != payload_crc:
                    self.problems.append(
                        (record_no, "bad_record", f"record at byte {start} fails its CRC-32C check; skipped")
                    )
                    continue
                self.records_read += 1
                yield record_no, payload
        finally:
            self.source.lines_total = record_no

    def _bad_header(self, record_no: int) -> None:
        if self.records_read == 0 and self.offset == 0:
            raise TracelogError("not a TensorBoard events file: its first record header fails its CRC")
        rest = self._rest()
        self.problems.append(
            (
                record_no,
                "bad_record",
                f"record header at byte {self.offset} fails its CRC-32C check: the records after it "
                f"cannot be framed; the last {rest} bytes were not read",
            )
        )

    def _rest(self) -> int:
        """The bytes left from `pos` to the end, read (the store hashes them) but not kept."""
        rest = len(self.buffer) - self.pos
        self.buffer, self.pos = b"", 0
        while chunk := self._read(READ_BYTES):
            rest += len(chunk)
        return rest

    def _truncated(self, record_no: int, part: str) -> None:
        """A last record cut short: a writer still running (held back like a log's last line, until it
        completes) or a job killed mid-write."""
        size = len(self.buffer) - self.pos
        if self.source.hold_partial:
            self.source.pending_bytes = size
            what = "held back until the writer completes it"
        else:
            what = "not read"
        self.problems.append(
            (
                record_no,
                "truncated_record",
                f"last record cut short in its {part} ({size} bytes at byte {self.offset}); {what}",
            )
        )
