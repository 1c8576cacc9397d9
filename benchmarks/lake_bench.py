"""Many writers into one DuckLake store against one writer into the embedded file (README: Team store).

    python benchmarks/lake_bench.py                 # 8 logs of 25 MB; 1, 2, 4 and 8 writers
    python benchmarks/lake_bench.py --mb 10 --logs 4 --writers 1 4

Starts its own PostgreSQL server, as the tests do (tests/postgres.py: Debian's `postgresql` binaries, a
free loopback port, a temporary folder), generates the logs into benchmarks/out (git-ignored, one
seed each so that no two are the same bytes), warms the page cache and compiled bytecode (as after
`pip install`, with PYTHONDONTWRITEBYTECODE ignored), then times, as whole processes from start-up to exit:

- embedded: one `tracelog ingest` of every log into a fresh DuckDB file (the default store, one writer);
- W writers: the logs dealt round-robin to W `tracelog ingest` processes started at once, writing into
  one fresh DuckLake store (a new PostgreSQL database and data folder per W);
- queries: `tracelog runs`, `tracelog flags` and `tracelog report` on each store once it is full.

For each it prints wall time, MB/s (10^6 bytes / wall), the CPU seconds of every process it started
(user + system, all threads: where the time goes), and the DuckLake commits the store holds, beside the
ingests that made them: a commit lost to another writer is written again, so CPU beyond the single
writer's is the cost of the races.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from generate_megatron_log import write_log

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests import postgres  # noqa: E402 (the tests' throwaway server, from the checkout)

OUT = Path(__file__).parent / "out"


@dataclass
class Timing:
    label: str
    wall: float
    cpu: float
    megabytes: float

    def row(self) -> str:
        rate = f"{self.megabytes / self.wall:7.1f}" if self.megabytes else "      -"
        return f"| {self.label} | {self.wall:.2f} | {rate} | {self.cpu:.2f} |"


def run_all(commands: list[list[str]], env: dict[str, str]) -> tuple[float, float]:
    """Start every command at once; wall time until the last exits, and their CPU seconds summed."""
    start = time.perf_counter()
    children = [
        subprocess.Popen(c, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for c in commands
    ]
    cpu = 0.0
    for child in children:
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        cpu += usage.ru_utime + usage.ru_stime
        if child.returncode:
            err = child.stderr.read().decode(errors="replace") if child.stderr else ""
            sys.exit(f"failed ({child.returncode}): {' '.join(commands[0][:4])}...\n{err}")
    return time.perf_counter() - start, cpu


def tracelog(db: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "tracelog", "--db", db, *args]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=int, default=25, help="size of each log")
    parser.add_argument("--logs", type=int, default=8, help="how many logs")
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 2, 4, 8])
    args = parser.parse_args()

    OUT.mkdir(exist_ok=True)
    logs = []
    for seed in range(args.logs):
        path = OUT / f"lake-{args.mb}mb-{seed}.log"
        if not path.exists():
            write_log(path, args.mb, seed=seed)
        path.read_bytes()  # warm the page cache
        logs.append(str(path))
    total = sum(os.path.getsize(p) for p in logs) / 1e6

    work = Path(tempfile.mkdtemp(prefix="tracelog-lake-bench-"))
    bin_dir = postgres.find_bin_dir()
    if bin_dir is None:
        sys.exit("PostgreSQL's server binaries are not installed (Debian: apt-get install postgresql)")
    server = postgres.Server(bin_dir)
    server.start()
    # compiled bytecode, as after `pip install`, even where PYTHONDONTWRITEBYTECODE is set: each writer is a
    # process of its own, and one compiling tracelog's modules from source pays about 0.4 CPU s for it
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(OUT / "pycache")
    env.pop("TRACELOG_DB", None)
    timings: list[Timing] = []
    commits: dict[int, int] = {}
    try:
        # untimed: the first process under the pycache prefix compiles every module it imports
        run_all([tracelog(str(work / "warm.duckdb"), "ingest", logs[0])], env)
        embedded = str(work / "embedded.duckdb")
        wall, cpu = run_all([tracelog(embedded, "ingest", *logs)], env)
        timings.append(Timing("embedded file, 1 writer", wall, cpu, total))
        stores = {"embedded": embedded}
        for writers in args.writers:
            db = server.address(server.create_database())
            data = work / f"data-w{writers}"
            data.mkdir()
            lake_env = dict(env, TRACELOG_DATA_PATH=str(data))
            # the store created first (as a team would), so that the timing is of the ingests
            run_all([tracelog(db, "runs")], lake_env)
            shares = [logs[i::writers] for i in range(writers)]
            wall, cpu = run_all([tracelog(db, "ingest", *share) for share in shares if share], lake_env)
            timings.append(
                Timing(f"DuckLake, {writers} writer{'s' if writers > 1 else ''}", wall, cpu, total)
            )
            stores[f"DuckLake ({writers} writers)"] = db
            commits[writers] = snapshot_count(db, lake_env)
        for label, db in (("embedded", stores["embedded"]), ("DuckLake", stores[list(stores)[-1]])):
            query_env = dict(env, TRACELOG_DATA_PATH=str(work / f"data-w{args.writers[-1]}"))
            for command in (["runs"], ["flags"], ["report", "-o", str(work / f"{label}.html")]):
                wall, cpu = run_all([tracelog(db, *command)], query_env)
                timings.append(Timing(f"{label}: tracelog {command[0]}", wall, cpu, 0.0))
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)

    print(f"{args.logs} logs of {args.mb} MB ({total:.0f} MB), {os.cpu_count()} cores")
    print("| what | wall s | MB/s | CPU s |")
    print("| --- | ---: | ---: | ---: |")
    for timing in timings:
        print(timing.row())
    for writers, count in commits.items():
        print(f"{writers} writers: {count} DuckLake snapshots for {args.logs} files")
    return 0


def snapshot_count(db: str, env: dict[str, str]) -> int:
    """The DuckLake snapshots (commits) the store holds: every ingest makes about three, a retried one
    no more (a lost commit leaves none)."""
    done = subprocess.run(
        tracelog(db, "sql", "--format", "csv", "SELECT count(*) FROM tracelog_lake.snapshots()"),
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    sys.exit(main())
