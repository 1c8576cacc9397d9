"""Modules DuckDB 1.5 loads only to ask whether a value is one of theirs, kept out of a command that
never hands it one.

DuckDB 1.5's Python client imports pandas the first time a process binds a query parameter or scans an
Arrow table (to check whether the value is a pandas object), and `pyarrow.dataset`, which imports pandas
itself, at the first Arrow scan: 0.2-0.3 s of CPU, a fifth of the ingest of a log's last 5 %; and
`pyarrow.compute` there too. It holds them optional and goes on without them where the import fails
(DuckDB 2.0 imports neither pandas nor `pyarrow.dataset` there).

`refused_to_native_code` makes the import of these modules fail while it is in force, where native code
asks for it (DuckDB's import cache, pyarrow's check for pandas objects among a list's values): no value
of theirs exists in a process that has not loaded them, so the answer "not one of theirs" is the answer
the import would have given. An import statement, or `importlib.import_module`, still loads them (a
command that builds a DataFrame, `Store.query`), and a module already loaded is never asked for again.
"""

from __future__ import annotations

import dis
import importlib
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import FrameType, ModuleType

PROBED_BY_DUCKDB = ("pandas", "pyarrow.dataset", "pyarrow.compute")
"""What DuckDB 1.5 imports to recognise values an ingest never binds or scans. `pyarrow.compute` (0.05 s
of CPU: it builds a Python function for every compute kernel) is imported at the first Arrow scan, for
filters pushed into a `pyarrow.dataset` scanner, which the refused `pyarrow.dataset` rules out: an
ingest's Arrow scans have no filter, and a scan with one reads the table whole."""

_IMPORT_NAME = dis.opmap["IMPORT_NAME"]
_IMPORTLIB = ("<frozen importlib._bootstrap", importlib.__file__)


class _Refuse(MetaPathFinder):
    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if any(name == n or name.startswith(n + ".") for n in self.names) and _from_native_code():
            raise ModuleNotFoundError(f"No module named {name!r} (not loaded for DuckDB's checks)", name=name)
        return None


def _from_native_code() -> bool:
    """Whether the import under way was asked for by native code: the first frame below the import
    machinery is not at an import statement (importlib.import_module is part of the machinery)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_IMPORTLIB):
        if frame.f_code.co_filename == importlib.__file__:
            return False
        frame = frame.f_back
    if frame is None:
        return True
    return frame.f_code.co_code[frame.f_lasti] != _IMPORT_NAME


@contextmanager
def refused_to_native_code(names: Sequence[str] = PROBED_BY_DUCKDB) -> Iterator[None]:
    """While in force, native code's imports of `names` (and their submodules) fail; see the module."""
    finder = _Refuse(names)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
