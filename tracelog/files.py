"""The files a user names: expanded once, opened (gzip, standard input), checked and hashed.

A name is taken literally when such a file or folder exists, so `llama[1].log` is a file, not a pattern;
only a name that exists nowhere is expanded as a glob.
"""

from __future__ import annotations

import errno
import glob
import gzip
import hashlib
import os
import stat
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from tracelog.clusters import CONFIG_NAME
from tracelog.errors import TracelogError
from tracelog.parsers import HEAD_BYTES, detect_binary


@dataclass
class Expanded:
    """The files to ingest, each with whether it was found by walking a folder, and what a folder walk
    left out and why (FIFOs and devices are never opened: reading one would block)."""

    files: list[tuple[str, bool]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def source_path(path: str) -> str:
    """The path a file is recorded and found by in `sources`: absolute, so that `run.log` named from its
    folder and `/jobs/run.log` named from elsewhere are one file that grows, not two sources with the same
    runs; and a shared store's paths mean the same to every writer. Links are kept as named (a path
    through a link is the one the user knows); standard input stays `-`."""
    return path if path == "-" else os.path.abspath(path)


def expand_paths(paths: Iterable[str]) -> list[str]:
    """Files as given, folders recursively (hidden files and tracelog.toml skipped), globs expanded, '-' for stdin."""
    return [path for path, _ in expand(paths).files]


def expand(paths: Iterable[str]) -> Expanded:
    """`expand_paths`, keeping which files came from a folder and which a folder walk skipped."""
    out = Expanded()
    for raw in paths:
        if raw == "-":
            out.files.append((raw, False))
            continue
        literal = os.path.lexists(raw)
        matches = sorted(glob.glob(raw, recursive=True)) if glob.has_magic(raw) and not literal else [raw]
        if not matches:
            raise TracelogError("no file matches this pattern", raw)
        for match in matches:
            path = Path(match)
            if path.is_dir():
                before = len(out.files) + len(out.skipped)
                _walk(path, out)
                if len(out.files) + len(out.skipped) == before:
                    raise TracelogError("folder holds no files to ingest", match)
            elif path.exists():
                out.files.append((match, False))
            else:
                raise TracelogError("no such file", match)
    return out


def _walk(folder: Path, out: Expanded) -> None:
    """Regular files under `folder`, sorted, hidden ones left out; links followed to files only."""
    found: list[tuple[str, str | None]] = []
    for root, dirs, names in os.walk(folder, followlinks=False):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in dirs:
            if os.path.islink(os.path.join(root, name)):
                found.append((os.path.join(root, name), "a link to a folder, not followed"))
        for name in names:
            if not name.startswith(".") and name != CONFIG_NAME:  # the folder's cluster facts, not a log
                full = os.path.join(root, name)
                found.append((full, _why_not_a_file(full)))
    for full, reason in sorted(found):
        if reason is None:
            out.files.append((full, True))
        else:
            out.skipped.append((full, reason))


def _why_not_a_file(path: str) -> str | None:
    """None for a regular file (or a link to one), else why it is not read."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a link loop"
        if exc.errno == errno.ENOENT:
            return "a dangling link"
        return f"cannot read: {exc.strerror}"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO, not opened"
    if stat.S_ISSOCK(mode):
        return "a socket, not opened"
    return "a device, not opened"


def is_plain_file(path: str) -> bool:
    """A file that can be read again, seeked and grow: not standard input (`-`), not a gzip stream."""
    return path != "-" and not path.endswith(".gz")


def holds_last_line(path: str, complete: bool = False) -> bool:
    """Whether a last line without its newline waits for it, or is read as it is.

    A plain file's waits: the file may be a live log whose writer has not finished the line, or a job's
    log cut mid-line by a crash, where a number cut short (`elapsed time per iteration (ms): 85` of
    8530.0) would be read as a wrong one. Neither can be told by looking. `complete` is the user's word
    that the file is finished and its last line whole (`ingest --complete`: a paste saved without a final
    newline). Standard input and gzip end when they end. A last line read without its newline is not a
    point to resume from: should the file grow after all, it is parsed again from its first byte."""
    return not complete and is_plain_file(path)


def has_newline(path: str, offset: int) -> bool:
    """Whether the file holds a newline after `offset` (read in blocks until one is found)."""
    with open(path, "rb") as f:
        f.seek(offset)
        while chunk := f.read(1 << 20):
            if b"\n" in chunk:
                return True
    return False


def open_binary(path: str) -> BinaryIO:
    if path == "-":
        return sys.stdin.buffer
    try:
        if path.endswith(".gz"):
            return gzip.open(path, "rb")  # type: ignore[return-value]
        return open(path, "rb")  # noqa: SIM115
    except OSError as exc:
        raise TracelogError(f"cannot read: {exc.strerror}", path) from None


class PeekStream:
    """A binary stream whose first bytes were already read for detection."""

    def __init__(self, stream: BinaryIO, head: bytes) -> None:
        self.stream = stream
        self.head = head

    def read(self, size: int = -1) -> bytes:
        if self.head:
            data, self.head = self.head, b""
            if size < 0 or len(data) < size:
                data += self.stream.read(-1 if size < 0 else size - len(data))
            return data
        return self.stream.read(size)


def file_sha256(path: str, limit: int | None = None) -> str:
    digest = hashlib.sha256()
    remaining = limit
    with open(path, "rb") as f:
        while remaining is None or remaining > 0:
            chunk = f.read(8 << 20 if remaining is None else min(8 << 20, remaining))
            if not chunk:
                break
            digest.update(chunk)
            if remaining is not None:
                remaining -= len(chunk)
    return digest.hexdigest()


def read_head(stream: BinaryIO, path: str) -> bytes:
    try:
        head = stream.read(HEAD_BYTES)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise TracelogError(f"cannot read: {exc}", path) from None
    if not head:
        raise TracelogError("file is empty", path)
    if b"\x00" in head and detect_binary(head, path) is None:
        line = head[: head.index(b"\x00")].count(b"\n") + 1
        raise TracelogError("binary file (NUL bytes), not a text log", path, line)
    return head
