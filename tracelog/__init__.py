"""tracelog: training logs and fabric benchmarks in DuckDB, held against what the hardware allows.

The library surface is `tracelog.api` (`from tracelog import api`); the package root binds nothing that
would shadow a module.
"""

from tracelog.errors import TracelogError

__all__ = ["TracelogError"]
__version__ = "0.1.0"
