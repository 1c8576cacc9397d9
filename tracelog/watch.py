"""Which files a follow (`tracelog ingest --follow`) has to ingest again: those that changed since it
last looked.

A training log is read while the run writes it. Ingesting it again is cheap where it only grew (the
ingest resumes after its last committed line, see `ingest`), but the start-up of a new `tracelog`
process, the opening of the store and the hashing of an unchanged file are not; a follow keeps one
process and asks the file system, once per interval, which files moved: their size, modification time
or inode. An idle follow costs a `stat` per file. Folders and globs are expanded again every round, so
the log of a job that starts while the follow runs is picked up.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from tracelog.errors import TracelogError
from tracelog.files import expand

Stamp = tuple[int, int, int]  # size, modification time (ns), inode


@dataclass
class Watch:
    """The paths a follow was given and what each file looked like when it was last ingested."""

    paths: list[str]
    seen: dict[str, Stamp] = field(default_factory=dict)
    looked: bool = False

    def __post_init__(self) -> None:
        if "-" in self.paths:
            raise TracelogError(
                "--follow watches files that grow; standard input is read to its end without it", "-"
            )

    def changed(self) -> list[Changed]:
        """The files that are new or whose stamp moved since they were `mark`ed, each with the stamp it
        has now. A file that vanished is forgotten: one that comes back is new. A path that names nothing
        is an error at the first look (a mistyped name) and skipped at later ones (a log rotated away,
        or a folder emptied, between two looks: `tail -F` waits for it the same way)."""
        found = expand(self.paths).files if not self.looked else self._expand_each()
        self.looked = True
        present = {path for path, _ in found}
        for gone in set(self.seen) - present:
            del self.seen[gone]
        now = [Changed(path, from_folder, _stamp(path)) for path, from_folder in found]
        return [c for c in now if c.stamp is not None and self.seen.get(c.path) != c.stamp]

    def _expand_each(self) -> list[tuple[str, bool]]:
        found: list[tuple[str, bool]] = []
        for path in self.paths:
            try:
                found += expand([path]).files
            except TracelogError:
                continue
        return found

    def mark(self, done: list[Changed]) -> None:
        """Record these files as ingested with the stamps `changed` saw before they were read (a failed
        one too: it is tried again when it changes, not every interval). A file that grew while it was
        read keeps its older stamp, so the next round reads what it gained."""
        for change in done:
            if change.stamp is not None:
                self.seen[change.path] = change.stamp


@dataclass(frozen=True)
class Changed:
    path: str
    from_folder: bool  # found by a folder walk (`files.expand`): a file no parser takes is skipped
    stamp: Stamp | None


def _stamp(path: str) -> Stamp | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino
