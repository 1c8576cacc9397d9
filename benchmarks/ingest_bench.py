"""Ingest throughput and peak memory of the whole `tracelog ingest` process, on generated Megatron logs.

    python benchmarks/ingest_bench.py                    # 250, 1000 and 2000 MB, best of 3 each
    python benchmarks/ingest_bench.py 250 --runs 1 --keep

For each size: generate the log once into benchmarks/out (git-ignored), read it once so the page cache is
warm, then run `python -m tracelog --db <fresh file> ingest <log>` in a fresh child process per run and
report, for the fastest run:

- MB/s: file size (10^6 bytes) / wall time of the whole process, start-up and flag refresh included.
- peak RSS: the child's own ru_maxrss, read with os.wait4 for that child alone (RUSAGE_CHILDREN would add
  up every child measured so far).
- CPU: user + system seconds of the child, all its threads, and per GB of log.
- baseline: the same log through `baseline_ingest.py`, the `re` + pandas script a user would write
  (iterations only), in the same run; `speed-up` is its wall time over tracelog's.
- growth: the log's first 95% ingested, the last 5% appended, and the second ingest timed (start-up,
  resume and refresh included); `growth/fresh` is its wall time over the fresh ingest's.

Warm also means compiled bytecode, as after `pip install`: the children write and reuse .pyc files under
benchmarks/out/pycache even where PYTHONDONTWRITEBYTECODE is set. Logs over 1000 MB are deleted after
their runs unless --keep is given (they are quick to regenerate).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from generate_megatron_log import write_log

OUT = Path(__file__).parent / "out"
KEEP_UP_TO_MB = 1000


@dataclass
class Run:
    seconds: float
    peak_rss_mb: float
    cpu_seconds: float


def warm(path: Path) -> None:
    with path.open("rb") as f:
        while f.read(64 << 20):
            pass


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(OUT / "pycache")
    return env


def clear(db: Path) -> None:
    for leftover in (db, db.with_name(db.name + ".wal")):
        leftover.unlink(missing_ok=True)


def ingest_once(log: Path, db: Path) -> Run:
    clear(db)
    return timed([sys.executable, "-m", "tracelog", "--db", str(db), "ingest", str(log)])


def baseline_once(log: Path, db: Path) -> Run:
    clear(db)
    return timed([sys.executable, str(Path(__file__).parent / "baseline_ingest.py"), str(log), str(db)])


def growth_once(log: Path, db: Path) -> Run:
    """The second ingest of a log that grew by its last 5% after the first."""
    clear(db)
    live = OUT / "growing.log"
    size = log.stat().st_size
    with log.open("rb") as src, live.open("wb") as dst:
        head = src.read(size * 95 // 100)
        cut = head.rindex(b"\n") + 1
        dst.write(head[:cut])
        rest = head[cut:] + src.read()
    command = [sys.executable, "-m", "tracelog", "--db", str(db), "ingest", str(live)]
    timed(command)
    with live.open("ab") as dst:
        dst.write(rest)
    run = timed(command)
    live.unlink()
    return run


def timed(command: list[str]) -> Run:
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, env=child_env())
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"{' '.join(command)} exited with {child.returncode}")
    return Run(seconds, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime)


def machine() -> str:
    model = (
        next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            platform.processor() or "unknown CPU",
        )
        if Path("/proc/cpuinfo").exists()
        else platform.processor()
    )
    versions = ", ".join(f"{name} {metadata.version(name)}" for name in ("duckdb", "polars", "pyarrow"))
    return f"{os.cpu_count()} cores ({model}), Python {platform.python_version()}, {platform.system()}, {versions}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[250, 1000, 2000], help="log sizes in MB")
    parser.add_argument("--runs", type=int, default=3, help="runs per size; the fastest is reported")
    parser.add_argument("--keep", action="store_true", help="keep generated logs over 1000 MB")
    args = parser.parse_args()

    OUT.mkdir(exist_ok=True)
    subprocess.run([sys.executable, "-c", "import tracelog.cli"], check=True, env=child_env())
    print(machine())
    print(
        "| log | MB/s | seconds | peak RSS | CPU s | CPU s/GB | baseline s (CPU s) | speed-up "
        "| +5% growth s | growth/fresh |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for size in args.sizes:
        log = OUT / f"megatron-{size}mb.log"
        if not log.exists():
            write_log(log, size)
        warm(log)
        db = OUT / f"bench-{size}.duckdb"
        runs = [ingest_once(log, db) for _ in range(args.runs)]
        best = min(runs, key=lambda r: r.seconds)
        base = min((baseline_once(log, db) for _ in range(args.runs)), key=lambda r: r.seconds)
        grow = min((growth_once(log, db) for _ in range(args.runs)), key=lambda r: r.seconds)
        megabytes = log.stat().st_size / 1e6
        print(
            f"| {megabytes:,.0f} MB | {megabytes / best.seconds:,.0f} | {best.seconds:.1f} | "
            f"{best.peak_rss_mb:,.0f} MB | {best.cpu_seconds:.1f} | {best.cpu_seconds / megabytes * 1e3:.1f} | "
            f"{base.seconds:.1f} ({base.cpu_seconds:.1f}) | {base.seconds / best.seconds:.2f}x | "
            f"{grow.seconds:.1f} | {grow.seconds / best.seconds:.2f} |",
            flush=True,
        )
        clear(db)
        if size > KEEP_UP_TO_MB and not args.keep:
            log.unlink()


if __name__ == "__main__":
    main()
