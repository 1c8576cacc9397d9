"""The one exception type users see.

Expected failures (a file that is not a log, a locked database, a malformed table) carry the file and
line so the CLI can print one clear sentence and exit 1; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

# Where a bug (anything that is not a TracelogError) is reported; the CLI prints it under the traceback.
BUG_REPORT = "the tracelog issue tracker"


class TracelogError(Exception):
    """A user-facing failure tied, where possible, to a file and a line."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None) -> None:
        self.message = message
        self.path = path
        self.line = line
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = f"{self.path}:{self.line}: " if self.line is not None else f"{self.path}: "
        return f"{where}{self.message}"


class Deferred(TracelogError):
    """What ran inside a file's ingest transaction (`ingest_file(within=)`: its refresh, in a DuckLake
    store) failed: the file lands without it, and it is done, or its failure recorded, the usual way."""
