"""The `tracelog` command: parse options, call one library function, render the result.

`base` holds the group and what commands share; `reads` the commands answered from the store alone;
`logs` ingest, export, compare and report; `model` the commands of the analytic model; `clusters` the
cluster facts of tracelog.toml. The group imports a command's module when the command is asked for
(`base.COMMAND_MODULES`), so each command starts with only what it uses.
"""

import atexit
import gc
import os

from tracelog.cli.base import cli

__all__ = ["cli", "main"]

BLAS_THREADS = "OPENBLAS_NUM_THREADS"
"""OpenBLAS's thread count, read once when numpy loads it (pyarrow imports numpy for every write). Left to
its default, OpenBLAS starts one thread per core at that import, and each busy-waits for work about 0.1 s
before it sleeps (its `THREAD_TIMEOUT`, 2^28 cycles): 0.1 s of CPU taken from the parser's threads on a
2-core machine, for no work, since tracelog multiplies no matrix large enough to share. A command runs it
on one thread unless the user chose otherwise."""


def main() -> None:
    # Before anything imports numpy: OpenBLAS reads the variable when it loads.
    os.environ.setdefault(BLAS_THREADS, "1")
    # The process ends with its command: what is left at exit is frozen (atexit runs this last, after the
    # store is closed and the spools removed), so that the collections the interpreter runs while it tears
    # down its modules no longer walk every object they hold (0.4-1.0 s of an ingest's exit, 0.1 s now).
    atexit.register(gc.freeze)
    cli.freeze_loaded = True  # and what the command's module loads (`Group.freeze_loaded`)
    cli(prog_name="tracelog")
