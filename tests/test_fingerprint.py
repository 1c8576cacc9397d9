"""The fingerprint that tells sources apart: its definition, its continuation, and the prefix check."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

from tracelog.fingerprint import CHUNK, ChunkedDigest, file_fingerprint, verify_prefix


def by_definition(data: bytes) -> str:
    """sha256 over the sha256 of each whole MiB, the sha256 of the rest, and the length (8 bytes, LE)."""
    whole = len(data) // CHUNK
    parts = [hashlib.sha256(data[i * CHUNK : (i + 1) * CHUNK]).digest() for i in range(whole)]
    parts.append(hashlib.sha256(data[whole * CHUNK :]).digest())
    return hashlib.sha256(b"".join(parts) + len(data).to_bytes(8, "little")).hexdigest()


def blob(size: int, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(size)


def test_chunks_of_any_size_give_the_definition() -> None:
    data = blob(3 * CHUNK + 12345)
    for piece in (1000, CHUNK - 1, CHUNK, 5 * CHUNK):
        digest = ChunkedDigest()
        for at in range(0, len(data), piece):
            digest.update(data[at : at + piece])
        assert digest.result(len(data))[0] == by_definition(data)


def test_a_shorter_length_than_was_read(tmp_path: Path) -> None:
    """The bytes after the last complete line are read but not committed: the fingerprint stops there,
    re-reading the tail from the file when it lies before the MiB still in memory."""
    data = blob(3 * CHUNK + 500)
    path = tmp_path / "f"
    path.write_bytes(data)
    for length in (len(data) - 400, 3 * CHUNK, 2 * CHUNK + 7, 10):
        digest = ChunkedDigest()
        digest.update(data)
        assert digest.result(length, str(path))[0] == by_definition(data[:length])


def test_continuing_from_kept_digests_equals_hashing_it_all(tmp_path: Path) -> None:
    data = blob(4 * CHUNK + 999)
    path = tmp_path / "f"
    for old in (CHUNK // 2, 2 * CHUNK, 2 * CHUNK + 3):
        path.write_bytes(data[:old])
        _, digests = file_fingerprint(str(path))
        path.write_bytes(data)
        tail = verify_prefix(str(path), old, digests)
        assert tail == data[(old // CHUNK) * CHUNK : old]
        digest = ChunkedDigest(digests[:-32], tail)
        digest.update(data[old:])
        assert digest.result(len(data))[0] == by_definition(data)


def test_a_changed_prefix_is_caught(tmp_path: Path) -> None:
    data = bytearray(blob(20 * CHUNK + 10))
    path = tmp_path / "f"
    path.write_bytes(data)
    _, digests = file_fingerprint(str(path))
    for at in (5, 20 * CHUNK + 3, 19 * CHUNK + 1):  # first MiB, the partial tail, the last whole MiB
        changed = bytearray(data)
        changed[at] ^= 1
        path.write_bytes(bytes(changed) + b"more")
        assert verify_prefix(str(path), len(data), digests) is None
    # A change in the middle is caught by the full check, and by the sample only sometimes.
    changed = bytearray(data)
    changed[10 * CHUNK + 5] ^= 1
    path.write_bytes(bytes(changed))
    assert verify_prefix(str(path), len(data), digests, full=True) is None
    path.write_bytes(bytes(data) + b"more")
    assert verify_prefix(str(path), len(data), digests, full=True) == bytes(data[20 * CHUNK :])
