"""Many writers into one DuckLake store against one writer into the embedded file (README: Team store).

    python benchmarks/lake_bench.py                 # 8 logs of 25 MB; 1, 2, 4 and 8 writers
    python benchmarks/lake_bench.py --mb 10 --logs 4 --writers 1 4
    python benchmarks/lake_bench.py --writers 1 2 --data folder s3   # the data in a folder, then on S3

Starts its own PostgreSQL server, as the tests do (tests/postgres.py: Debian's `postgresql` binaries, a
free loopback port, a temporary folder), generates the logs into benchmarks/out (git-ignored, one
seed each so that no two are the same bytes), warms the page cache and compiled bytecode (as after
`pip install`, with PYTHONDONTWRITEBYTECODE ignored), then times, as whole processes from start-up to exit:

- embedded: one `tracelog ingest` of every log into a fresh DuckDB file (the default store, one writer);
- W writers: the logs dealt round-robin to W `tracelog ingest` processes started at once, writing into
  one fresh DuckLake store (a new PostgreSQL database and data folder per W);
- queries: `tracelog runs`, `tracelog flags` and `tracelog report` on each store once it is full.

With `--data s3`, each DuckLake store is timed again with its data on S3: moto's S3 server (tests/s3.py),
in a thread of this process on a loopback port. moto is a mock that keeps the objects in memory: its
figures are tracelog's and DuckDB's side of the requests (signing, HTTP, one object per Parquet file), not
a real object store's latency or bandwidth. The server's CPU is this process's, shown apart ("server CPU s").

For each it prints wall time, MB/s (10^6 bytes / wall), the CPU seconds of every process it started
(user + system, all threads: where the time goes), and the DuckLake commits the store holds, beside the
ingests that made them: a commit lost to another writer is written again, so CPU beyond the single
writer's is the cost of the races.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from generate_megatron_log import write_log

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests import postgres, s3  # noqa: E402 (the tests' throwaway servers, from the checkout)

OUT = Path(__file__).parent / "out"


@dataclass
class Timing:
    label: str
    wall: float
    cpu: float
    megabytes: float
    server_cpu: float | None = None  # the S3 server's (moto in this process), apart from the writers'

    def row(self) -> str:
        rate = f"{self.megabytes / self.wall:7.1f}" if self.megabytes else "      -"
        server = f"{self.server_cpu:.2f}" if self.server_cpu is not None else "-"
        return f"| {self.label} | {self.wall:.2f} | {rate} | {self.cpu:.2f} | {server} |"


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


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
    parser.add_argument(
        "--data",
        nargs="+",
        choices=["folder", "s3"],
        default=["folder"],
        help="where a DuckLake store's data goes",
    )
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
    commits: dict[str, int] = {}
    bucket = None
    try:
        # untimed: the first process under the pycache prefix compiles every module it imports
        run_all([tracelog(str(work / "warm.duckdb"), "ingest", logs[0])], env)
        embedded = str(work / "embedded.duckdb")
        wall, cpu = run_all([tracelog(embedded, "ingest", *logs)], env)
        timings.append(Timing("embedded file, 1 writer", wall, cpu, total))
        stores = {"embedded": embedded}
        if "s3" in args.data:
            reason = s3.missing()
            if reason:
                sys.exit(reason)
            moto = s3.Running()
            bucket = moto.start()
        last: dict[str, str] = {}  # the last store's environment, per place, for the queries
        for writers in args.writers:
            for place in args.data:
                db = server.address(server.create_database())
                if place == "s3":
                    assert bucket is not None
                    lake_env = dict(env, **bucket.environment(), TRACELOG_DATA_PATH=bucket.data_path())
                    label = f"DuckLake on S3 (moto), {writers} writer{'s' if writers > 1 else ''}"
                else:
                    data = work / f"data-w{writers}"
                    data.mkdir()
                    lake_env = dict(env, TRACELOG_DATA_PATH=str(data))
                    label = f"DuckLake, {writers} writer{'s' if writers > 1 else ''}"
                # the store created first (as a team would), so that the timing is of the ingests
                run_all([tracelog(db, "runs")], lake_env)
                shares = [logs[i::writers] for i in range(writers)]
                before = own_cpu()
                wall, cpu = run_all([tracelog(db, "ingest", *share) for share in shares if share], lake_env)
                served = own_cpu() - before if place == "s3" else None
                timings.append(Timing(label, wall, cpu, total, served))
                stores[label] = db
                last[place] = db
                commits[label] = snapshot_count(db, lake_env)
                if place == "s3":
                    s3_env = lake_env
        queried = [("embedded", stores["embedded"], env)]
        if "folder" in last:
            queried.append(("DuckLake", last["folder"], env))
        if "s3" in last:
            queried.append(
                (
                    "DuckLake on S3 (moto)",
                    last["s3"],
                    {k: v for k, v in s3_env.items() if k != "TRACELOG_DATA_PATH"},
                )
            )
        for label, db, query_env in queried:
            for command in (["runs"], ["flags"], ["report", "-o", str(work / f"{label}.html")]):
                before = own_cpu()
                wall, cpu = run_all([tracelog(db, *command)], query_env)
                served = own_cpu() - before if "S3" in label else None
                timings.append(Timing(f"{label}: tracelog {command[0]}", wall, cpu, 0.0, served))
    finally:
        server.stop()
        if bucket is not None:
            moto.stop()
        shutil.rmtree(work, ignore_errors=True)

    print(f"{args.logs} logs of {args.mb} MB ({total:.0f} MB), {os.cpu_count()} cores")
    print("| what | wall s | MB/s | CPU s | server CPU s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for timing in timings:
        print(timing.row())
    for label, count in commits.items():
        print(f"{label}: {count} DuckLake snapshots for {args.logs} files")
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
