"""What identifies the bytes of a source, cheaply enough to follow a growing log.

A plain sha256 of the whole file would tell duplicates apart, but a log that grew by 10 MB after 1 GB
would have to be read in full again to get the new digest, and its old bytes read in full to check that
they did not change. The fingerprint is instead a sha256 over the sha256 of every MiB (`CHUNK`) and the
length: the digests of the whole MiBs are kept (`sources.chunk_digests`, 32 bytes per MiB), so a grown
file's fingerprint needs its last partial MiB and its new bytes only, and its old bytes are checked by
re-hashing a sample of MiBs (`verify_prefix`; all of them with `--verify`). Two files with the same bytes
have the same fingerprint however they were ingested (whole, or grown in any number of steps).
"""

from __future__ import annotations

import hashlib
import os
import queue
import random
import threading

CHUNK = 1 << 20
DIGEST = 32  # bytes of one sha256
SAMPLED_CHUNKS = 8  # whole MiBs of an old prefix re-hashed to check it (besides the first and the last)


def _sha(data: bytes | memoryview) -> bytes:
    return hashlib.sha256(data).digest()


def combine(digests: bytes, tail: bytes, length: int) -> str:
    """The fingerprint of `length` bytes from the digests of their whole MiBs and of the rest."""
    return hashlib.sha256(digests + _sha(tail) + length.to_bytes(8, "little")).hexdigest()


class ChunkedDigest:
    """The fingerprint of the bytes handed to `update`, hashed on a thread of its own.

    hashlib releases the GIL on large buffers, so hashing overlaps reading and parsing instead of adding to
    them. It may start part way into a file (`digests` of the whole MiBs before, `seed` the bytes of the
    MiB the new bytes continue). Only whole MiBs are hashed as they come; the partial MiB at the end is
    kept (under a MiB), so that `result` can stop at any length up to what was handed in, as far back as
    the last whole MiB (before that, the tail is read again from the file).
    """

    def __init__(self, digests: bytes = b"", seed: bytes = b"", depth: int = 2) -> None:
        self._digests = bytearray(digests)
        self._buffer = bytearray(seed)
        self._chunks: queue.Queue[bytes | None] = queue.Queue(maxsize=depth)
        self._worker = threading.Thread(target=self._run, name="tracelog-fingerprint", daemon=True)
        self._worker.start()

    def _run(self) -> None:
        while (chunk := self._chunks.get()) is not None:
            self._consume(chunk)

    def _consume(self, chunk: bytes) -> None:
        view = memoryview(chunk)
        at = 0
        if self._buffer:
            take = min(CHUNK - len(self._buffer), len(view))
            self._buffer += view[:take]
            at = take
            if len(self._buffer) < CHUNK:
                return
            self._digests += _sha(bytes(self._buffer))
            self._buffer = bytearray()
        while len(view) - at >= CHUNK:
            self._digests += _sha(view[at : at + CHUNK])
            at += CHUNK
        self._buffer += view[at:]

    def update(self, chunk: bytes) -> None:
        self._chunks.put(chunk)

    def result(self, length: int, path: str | None = None) -> tuple[str, bytes]:
        """(fingerprint, chunk digests) of the first `length` bytes; `path` re-reads a tail that lies
        before the partial MiB still in memory (a held-back last line longer than the rest of its MiB)."""
        self.close()
        whole = length // CHUNK
        kept = len(self._digests) // DIGEST
        if whole == kept:
            tail = bytes(self._buffer[: length - whole * CHUNK])
        else:
            if path is None or whole > kept:
                raise ValueError(f"cannot fingerprint {length} bytes: {kept} MiB hashed, no file to re-read")
            tail = read_range(path, whole * CHUNK, length)
        digests = bytes(self._digests[: whole * DIGEST])
        return combine(digests, tail, length), digests + _sha(tail)

    def close(self) -> None:
        """Stop the worker (the ingest failed, or the result is due)."""
        if self._worker.is_alive():
            self._chunks.put(None)
            self._worker.join()


def read_range(path: str, start: int, end: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(end - start)


def file_fingerprint(path: str, length: int | None = None) -> tuple[str, bytes]:
    """(fingerprint, chunk digests) of a file's first `length` bytes (all of it by default)."""
    length = os.path.getsize(path) if length is None else length
    digest = ChunkedDigest()
    with open(path, "rb") as f:
        left = length
        while left > 0 and (chunk := f.read(min(8 * CHUNK, left))):
            digest.update(chunk)
            left -= len(chunk)
    return digest.result(length, path)


def verify_prefix(path: str, length: int, digests: bytes, full: bool = False) -> bytes | None:
    """The bytes of the last partial MiB of the file's first `length` bytes if they, its first and last
    whole MiBs and `SAMPLED_CHUNKS` others chosen at random still hash to `digests`, else None.

    What this trusts: a change confined to MiBs not sampled goes unnoticed (`full=True`, `--verify`,
    re-hashes every one). Logs are appended to, not rewritten in the middle; a file replaced by another
    almost always differs in its first MiB, its last one or its size."""
    whole = length // CHUNK
    if len(digests) != (whole + 1) * DIGEST:
        return None
    if full:
        picks = list(range(whole))
    else:
        middle = range(1, max(1, whole - 1))
        sampled = random.sample(middle, min(SAMPLED_CHUNKS, len(middle)))
        picks = sorted({0, whole - 1, *sampled} & set(range(whole)))
    with open(path, "rb") as f:
        for index in picks:
            f.seek(index * CHUNK)
            if _sha(f.read(CHUNK)) != digests[index * DIGEST : (index + 1) * DIGEST]:
                return None
        f.seek(whole * CHUNK)
        tail = f.read(length - whole * CHUNK)
    if _sha(tail) != digests[whole * DIGEST :]:
        return None
    return tail
