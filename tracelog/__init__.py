"""tracelog: training logs and fabric benchmarks in DuckDB, held against what the hardware allows."""

from tracelog.api import connect, ingest, resolve_run, runs, show_run, sources, sql
from tracelog.errors import TracelogError

__all__ = ["TracelogError", "connect", "ingest", "resolve_run", "runs", "show_run", "sources", "sql"]
__version__ = "0.1.0"
