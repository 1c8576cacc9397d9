"""Mutation fuzzer for `tracelog ingest`: hostile copies of every sample log, each ingested in a child.

Every file of `sample_logs/` (and of a corpus folder given with `--corpus`, searched recursively) is
mutated: lines deleted, duplicated, swapped; bytes flipped; the file truncated at a random byte; junk
lines inserted; numbers replaced by extreme values (nan, inf, -1, 2**63, 1e308, a 400-digit integer);
line ends turned into bare CR; very long lines; the result gzipped. Each case is ingested into a fresh
DuckDB file by the real CLI in a forked child, and these invariants are checked:

- the outcome is success, or tracelog's own error: exit code 1, `Error:` in stderr and no traceback
  (any Python traceback is a crash);
- the case finishes within the time limit (5 s; a child still running then is killed and counted a hang);
- the database is consistent: every row hangs off a source that exists, a failed ingest leaves no
  source, `sources.lines_unparsed` equals the count of its `unparsed` rows of lines that gave no row
  (words glued behind a line read stay in `unparsed`) or that were read only in part (an
  `unread_figures` event: counted as unparsed by the ingest), no run or bench without a
  source, no child row without its run or bench; `tracelog runs` and `tracelog flags` work on it.

Cases are deterministic for a seed (case i draws from `Random(f"{seed}:{i}")`), whatever `--jobs`.
Each failing case is saved for replay under `--out` (the input, the mutations, stderr), and can be
run again with `--replay FOLDER`.

    python benchmarks/fuzz.py --cases 2000 --seed 1 --jobs 2
    python benchmarks/fuzz.py --corpus ../corpus --cases 500
    python benchmarks/fuzz.py --replay benchmarks/out/fuzz/crash-000123
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_logs"
DEFAULT_OUT = ROOT / "benchmarks" / "out" / "fuzz"
TIME_LIMIT_S = 5.0
HARD_KILL_S = 10.0  # a child past this is killed; past TIME_LIMIT_S it already counts as a hang

# Values a hostile or broken log may print where a number belongs: IEEE specials, a sign where none is
# expected, the first integer past int64 (2**63) and uint64 (2**64), the largest double's order, one
# below the smallest subnormal, and digit strings no fixed-width type holds.
EXTREME_NUMBERS = (
    "nan",
    "NaN",
    "inf",
    "-inf",
    "Infinity",
    "-1",
    "-0",
    "0",
    str(2**31),
    str(2**63),
    str(-(2**63) - 1),
    str(2**64),
    "1e308",
    "-1e308",
    "1e999",
    "1e-400",
    "9" * 40,
    "9" * 400,
    "1" + "0" * 5000,
)
JUNK_LINES = (
    b"\x00\x01\x02\xff\xfe",
    b" iteration        x/     y | consumed samples: | elapsed time per iteration (ms): |",
    b" iteration 1/0 | lm loss: | loss scale: |",
    b"time (ms) | forward: | backward: nan",
    b"------------------------ arguments ------------------------",
    b"-------------------- end of arguments ---------------------",
    b"#  Avg bus bandwidth    : nan",
    b"        8             2     float     sum      -1    nan    nan  2e63    nan    nan  nan  N/A",
    b"   D\\D     0      1",
    b"GPU0\tX \tNV12\tSYS",
    b"[Rank 0] (after 10 iterations) memory (MB) | allocated: nan | max allocated: inf",
    b"\xef\xbb\xbf# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor)",
    "\u202e\u0000 ünïcödé \U0001f600".encode(),
    b"\t\t\t\t",
    b"|" * 200,
)
NUMBER = re.compile(rb"(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])")
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(: |$)")  # `pyarrow.lib.ArrowInvalid: ...`
LONG_LINE_BYTES = (64 << 10, 1 << 20, 3 << 20)


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


def delete_lines(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    lines = _lines(data)
    if not lines:
        return data, "delete: empty"
    start = rng.randrange(len(lines))
    count = rng.choice((1, 1, 2, 5, 20))
    del lines[start : start + count]
    return b"".join(lines), f"delete {count} lines at {start}"


def duplicate_lines(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    lines = _lines(data)
    if not lines:
        return data, "duplicate: empty"
    start = rng.randrange(len(lines))
    count = rng.choice((1, 3, 10, 50))
    chunk = lines[start : start + count]
    if chunk and not chunk[-1].endswith(b"\n"):
        chunk[-1] += b"\n"
    at = rng.choice((start, rng.randrange(len(lines) + 1)))
    lines[at:at] = chunk
    return b"".join(lines), f"duplicate {len(chunk)} lines from {start} at {at}"


def swap_lines(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    lines = _lines(data)
    if len(lines) < 2:
        return data, "swap: too short"
    a, b = rng.randrange(len(lines)), rng.randrange(len(lines))
    lines[a], lines[b] = lines[b], lines[a]
    return b"".join(lines), f"swap lines {a} and {b}"


def flip_bytes(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    if not data:
        return data, "flip: empty"
    buf = bytearray(data)
    at = [rng.randrange(len(buf)) for _ in range(rng.choice((1, 2, 8, 32)))]
    for i in at:
        buf[i] ^= rng.randrange(1, 256)
    return bytes(buf), f"flip bytes at {at[:8]}{'...' if len(at) > 8 else ''}"


def truncate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    cut = rng.randrange(len(data) + 1)
    return data[:cut], f"truncate at byte {cut}"


def junk_lines(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    lines = _lines(data)
    picks = []
    for _ in range(rng.choice((1, 3, 10))):
        junk = rng.choice(JUNK_LINES) if rng.random() < 0.7 else rng.randbytes(rng.randrange(1, 200))
        at = rng.randrange(len(lines) + 1)
        lines.insert(at, junk.replace(b"\n", b" ") + b"\n")
        picks.append(at)
    return b"".join(lines), f"junk lines at {picks}"


def extreme_numbers(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    spans = [m.span() for m in NUMBER.finditer(data)]
    if not spans:
        return data, "numbers: none"
    chosen = sorted(rng.sample(spans, min(len(spans), rng.choice((1, 2, 5, 20)))), reverse=True)
    out = data
    used = []
    for start, end in chosen:
        value = rng.choice(EXTREME_NUMBERS)
        out = out[:start] + value.encode() + out[end:]
        used.append(f"{data[start:end].decode(errors='replace')}->{value[:12]}")
    return out, f"numbers {', '.join(reversed(used[:6]))}"


def cr_line_ends(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    if rng.random() < 0.5:
        return data.replace(b"\n", b"\r"), "every LF to CR"
    lines = _lines(data)
    if not lines:
        return data, "cr: empty"
    start = rng.randrange(len(lines))
    for i in range(start, min(len(lines), start + 20)):
        lines[i] = lines[i].replace(b"\n", b"\r")
    return b"".join(lines), f"LF to CR on lines {start}..{start + 19}"


def long_line(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    lines = _lines(data)
    size = rng.choice(LONG_LINE_BYTES)
    at = rng.randrange(len(lines) + 1)
    if lines and at < len(lines) and rng.random() < 0.5:
        line = lines[at]
        body = line.rstrip(b"\r\n")
        lines[at] = body + b" " + b"x" * size + line[len(body) :]
        return b"".join(lines), f"line {at} lengthened by {size} bytes"
    unit = rng.choice((b"x", b"9", b"| ", b"lm loss: 1.0 | "))
    lines.insert(at, unit * (size // len(unit)) + b"\n")
    return b"".join(lines), f"{size}-byte line at {at}"


MUTATIONS: dict[str, Callable[[bytes, random.Random], tuple[bytes, str]]] = {
    "delete": delete_lines,
    "duplicate": duplicate_lines,
    "swap": swap_lines,
    "flip": flip_bytes,
    "truncate": truncate,
    "junk": junk_lines,
    "numbers": extreme_numbers,
    "cr": cr_line_ends,
    "long_line": long_line,
}
# Long lines make slow cases; the rest are drawn evenly.
WEIGHTS = {name: (0.3 if name == "long_line" else 1.0) for name in MUTATIONS}
GZIP_SHARE = 0.15


def mutate(data: bytes, rng: random.Random) -> tuple[bytes, list[str], bool]:
    """One to three mutations stacked, then gzip in a share of cases: (bytes, descriptions, gzipped)."""
    names = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()), k=rng.choice((1, 1, 2, 3)))
    done = []
    for name in names:
        data, what = MUTATIONS[name](data, rng)
        done.append(f"{name}: {what}")
    gzipped = rng.random() < GZIP_SHARE
    if gzipped:
        data = gzip.compress(data, compresslevel=1, mtime=0)
        done.append("gzip")
    return data, done, gzipped


def seed_files(corpus: Path | None) -> list[Path]:
    found = sorted(p for p in SAMPLES.iterdir() if p.is_file() and p.name != "tracelog.toml")
    if corpus is not None and corpus.is_dir():
        found += sorted(p for p in corpus.rglob("*") if p.is_file() and p.name != "SOURCES.md")
    return found


@dataclass
class Case:
    index: int
    seed_file: Path
    data: bytes
    mutations: list[str]
    gzipped: bool

    @property
    def file_name(self) -> str:
        return f"case-{self.index:06d}-{self.seed_file.name}" + (".gz" if self.gzipped else "")


def make_case(seed: int, index: int, files: list[Path], cache: dict[Path, bytes]) -> Case:
    rng = random.Random(f"{seed}:{index}")
    path = files[rng.randrange(len(files))]
    if path not in cache:
        cache[path] = path.read_bytes()
    data, mutations, gzipped = mutate(cache[path], rng)
    return Case(index, path, data, mutations, gzipped)


# --- the invariants, on a database file ----------------------------------------------------------

RUN_CHILDREN = ("iterations", "iteration_metrics", "memory", "timers", "run_params", "run_tags")
BENCH_CHILDREN = ("collectives", "p2p", "links", "bench_params", "bench_devices")
SOURCE_CHILDREN = ("runs", "benches", "unparsed", "events")


def consistency_problems(con: Any, failed: bool) -> list[str]:
    """What is wrong with a database after one ingest (empty when it is consistent).

    `con` is an open DuckDB connection; `failed` says the ingest reported an error, after which the
    file must have left nothing behind."""
    problems = []

    def count(sql: str) -> int:
        return int(con.execute(sql).fetchone()[0])

    for table in SOURCE_CHILDREN:
        n = count(f"SELECT count(*) FROM {table} WHERE source_id NOT IN (SELECT source_id FROM sources)")
        if n:
            problems.append(f"{n} {table} rows without their source")
    n = count(
        "SELECT count(*) FROM events WHERE run_id IS NOT NULL AND run_id NOT IN (SELECT run_id FROM runs)"
    )
    if n:
        problems.append(f"{n} events of a run that does not exist")
    for table in RUN_CHILDREN:
        n = count(f"SELECT count(*) FROM {table} WHERE run_id NOT IN (SELECT run_id FROM runs)")
        if n:
            problems.append(f"{n} {table} rows without their run")
    for table in BENCH_CHILDREN:
        n = count(f"SELECT count(*) FROM {table} WHERE bench_id NOT IN (SELECT bench_id FROM benches)")
        if n:
            problems.append(f"{n} {table} rows without their bench")
    for table in ("predictions", "comparisons", "flags"):
        n = count(
            f"SELECT count(*) FROM {table} WHERE (subject_kind = 'run' AND subject_id NOT IN "
            f"(SELECT run_id FROM runs)) OR (subject_kind = 'bench' AND subject_id NOT IN "
            f"(SELECT bench_id FROM benches))"
        )
        if n:
            problems.append(f"{n} {table} rows of a run or bench that does not exist")
    # a line read as a row that kept words glued behind it in `unparsed` is no unparsed line, unless the
    # parser said it read the line only in part (an `unread_figures` event): that one stays counted
    read = " UNION ".join(
        f"SELECT r.source_id, t.line_no FROM {table} t JOIN runs r USING (run_id)"
        for table in ("iterations", "memory", "timers")
    )
    read = (
        f"SELECT source_id, line_no FROM ({read}) EXCEPT "
        "SELECT source_id, line_no FROM events WHERE kind = 'unread_figures'"  # base.PARTLY_READ_EVENT
    )
    mismatched = con.execute(
        f"WITH read AS ({read}), "
        "left_over AS (SELECT u.source_id, count(*) AS n FROM unparsed u "
        "WHERE NOT EXISTS (SELECT 1 FROM read WHERE read.source_id = u.source_id AND read.line_no = u.line_no) "
        "GROUP BY u.source_id) "
        "SELECT s.source_id, s.lines_unparsed, coalesce(l.n, 0) FROM sources s "
        "LEFT JOIN left_over l USING (source_id) WHERE s.lines_unparsed <> coalesce(l.n, 0)"
    ).fetchall()
    for source_id, recorded, rows in mismatched:
        problems.append(f"source {source_id}: lines_unparsed {recorded} but {rows} unparsed rows")
    n = count("SELECT count(*) FROM sources WHERE lines_parsed + lines_unparsed <> lines_total")
    if n:
        problems.append(f"{n} sources whose parsed and unparsed lines do not add up to the total")
    sources = count("SELECT count(*) FROM sources")
    if failed and sources:
        problems.append(f"the ingest failed but left {sources} source(s) behind")
    if failed:
        for table in (*SOURCE_CHILDREN, *RUN_CHILDREN, *BENCH_CHILDREN):
            n = count(f"SELECT count(*) FROM {table}")
            if n:
                problems.append(f"the ingest failed but left {n} {table} rows")
    if sources > 1:
        problems.append(f"one file ingested as {sources} sources")
    return problems


IGNORED_COLUMNS = {"ingested_at", "computed_at", "fingerprint", "chunk_digests", "path", "flag_id"}


def database_contents(con: Any) -> dict[str, list[str]]:
    """Every table's rows as sorted text, with ids, paths and timestamps left out (they depend on the
    history of the database, not on what it holds): two databases that hold the same are equal."""
    tables = [
        name
        for (name,) in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
            "AND table_type = 'BASE TABLE' AND table_name <> 'schema_version' ORDER BY 1"
        ).fetchall()
    ]
    contents = {}
    for table in tables:
        columns = [
            name
            for (name,) in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'main' "
                "AND table_name = ? ORDER BY ordinal_position",
                [table],
            ).fetchall()
            if name not in IGNORED_COLUMNS and not name.endswith("_id")
        ]
        if columns:
            rows = con.execute(f"SELECT {', '.join(columns)} FROM {table}").fetchall()
            contents[table] = sorted(repr(row) for row in rows)
    return contents


# --- running one case in a forked child ----------------------------------------------------------


def run_cli(cli: Any, args: list[str]) -> tuple[int, str, str]:
    """The CLI in this process: (exit code, stdout, stderr); an uncaught exception prints its traceback
    to stderr as the interpreter would."""
    out, err = io.StringIO(), io.StringIO()
    saved_err = sys.stderr
    sys.stderr = err
    try:
        with redirect_stdout(out):
            try:
                cli.main(args, prog_name="tracelog", standalone_mode=True)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:  # noqa: BLE001 - a crash is what is being looked for
                traceback.print_exc(file=err)
                code = 1
    finally:
        sys.stderr = saved_err
    return code, out.getvalue(), err.getvalue()


def classify(code: int, stderr: str) -> str:
    """success, error (tracelog's own) or crash."""
    if "Traceback" in stderr:
        return "crash"
    if code == 0:
        return "success"
    if code == 1 and "Error:" in stderr:
        return "error"
    return "crash"


def crash_kind(stderr: str) -> str:
    """The last line of a traceback: the exception type and the start of its message."""
    lines = [
        line for line in stderr.splitlines() if EXCEPTION_LINE.match(line) and not line.startswith("Error: ")
    ]
    last = lines[-1] if lines else (stderr.strip().splitlines() or ["(no output)"])[-1]
    return re.sub(r"\d+", "N", last)[:120]


def child_case(cli: Any, duckdb: Any, db: str, path: str) -> dict[str, Any]:
    start = time.perf_counter()
    code, _, stderr = run_cli(cli, ["--db", db, "ingest", path])
    elapsed = time.perf_counter() - start
    outcome = classify(code, stderr)
    result: dict[str, Any] = {
        "outcome": outcome,
        "code": code,
        "stderr": stderr[-4000:],
        "ingest_s": round(elapsed, 3),
        "problems": [],
    }
    if outcome == "crash":
        result["kind"] = crash_kind(stderr)
    if not os.path.exists(db):
        return result
    try:
        with duckdb.connect(db, read_only=True) as con:
            result["problems"] = consistency_problems(con, failed=outcome != "success")
    except Exception as exc:  # noqa: BLE001 - a database that does not open is an inconsistency
        result["problems"].append(f"the database does not open: {exc}")
        return result
    for command in ("runs", "flags"):
        code, _, stderr = run_cli(cli, ["--db", db, command, "--format", "csv"])
        if code != 0:
            result["problems"].append(f"tracelog {command} exits {code}: {stderr.strip()[-300:]}")
    return result


def worker() -> None:
    """Read 'db<TAB>path<TAB>result' lines on stdin; run each case in a forked child; answer one line
    of JSON per case. tracelog is imported once here, so a case costs its ingest, not the start-up."""
    import importlib

    import duckdb

    from tracelog.cli import cli
    from tracelog.cli.base import COMMAND_MODULES

    for module in COMMAND_MODULES:  # the group loads a command's module when asked: here, once, not per case
        importlib.import_module(module)

    for line in sys.stdin:
        db, path, result_path = line.rstrip("\n").split("\t")
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                signal.signal(signal.SIGINT, signal.default_int_handler)
                payload = child_case(cli, duckdb, db, path)
                Path(result_path).write_text(json.dumps(payload))
            except BaseException:  # noqa: BLE001
                traceback.print_exc()
                code = 3
            finally:
                os._exit(code)
        status, usage, hung = 0, None, False
        while True:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                break
            if time.perf_counter() - start > HARD_KILL_S:
                os.kill(pid, signal.SIGKILL)
                _, status, usage = os.wait4(pid, 0)
                hung = True
                break
            time.sleep(0.005)
        wall = time.perf_counter() - start
        # ru_maxrss is in KiB on Linux (getrusage(2)).
        report: dict[str, Any] = {"wall_s": round(wall, 3), "rss_mb": usage.ru_maxrss / 1024 if usage else 0}
        if hung:
            report.update(outcome="hang", problems=[])
        elif os.path.exists(result_path):
            report.update(json.loads(Path(result_path).read_text()))
        else:
            report.update(outcome="crash", kind=f"child died (status {status})", problems=[])
        if report["outcome"] != "hang" and report.get("ingest_s", 0) > TIME_LIMIT_S:
            report["slow"] = True
        print(json.dumps(report), flush=True)


class Pool:
    """`jobs` worker processes, each fed one case at a time."""

    def __init__(self, jobs: int) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.procs = [
            subprocess.Popen(
                [sys.executable, __file__, "--worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                bufsize=1,
                env=env,
            )
            for _ in range(jobs)
        ]

    def map(self, tasks: Iterator[tuple[Any, str]]) -> Iterator[tuple[Any, dict[str, Any]]]:
        idle = list(self.procs)
        busy: dict[int, tuple[subprocess.Popen[str], Any]] = {}
        pending = iter(tasks)
        exhausted = False
        while True:
            while idle and not exhausted:
                try:
                    tag, line = next(pending)
                except StopIteration:
                    exhausted = True
                    break
                proc = idle.pop()
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(line + "\n")
                busy[proc.stdout.fileno()] = (proc, tag)
            if not busy:
                return
            ready, _, _ = select.select(list(busy), [], [])
            for fd in ready:
                proc, tag = busy.pop(fd)
                assert proc.stdout is not None
                answer = proc.stdout.readline()
                if not answer:
                    raise RuntimeError("a fuzz worker died")
                idle.append(proc)
                yield tag, json.loads(answer)

    def close(self) -> None:
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait()


@dataclass
class Summary:
    cases: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    crashes: Counter[str] = field(default_factory=Counter)
    inconsistencies: int = 0
    slow: int = 0
    max_rss_mb: float = 0.0
    max_wall_s: float = 0.0
    saved: list[str] = field(default_factory=list)

    def text(self) -> str:
        lines = [
            f"cases: {self.cases}",
            f"outcomes: success {self.outcomes['success']}, tracelog error {self.outcomes['error']}, "
            f"crash {self.outcomes['crash']}, hang {self.outcomes['hang']}",
            f"crashes: {sum(self.crashes.values())}",
        ]
        lines += [f"  {n:5d}  {kind}" for kind, n in self.crashes.most_common()]
        lines += [
            f"hangs (killed after {HARD_KILL_S:.0f} s): {self.outcomes['hang']}; "
            f"ingests over {TIME_LIMIT_S:.0f} s: {self.slow}",
            f"inconsistent databases: {self.inconsistencies}",
            f"max peak RSS of a case: {self.max_rss_mb:.0f} MB; slowest case {self.max_wall_s:.2f} s",
        ]
        if self.saved:
            lines.append(f"saved for replay: {len(self.saved)} under {Path(self.saved[0]).parent}")
        return "\n".join(lines)


def save_case(out: Path, label: str, case: Case, seed: int, report: dict[str, Any]) -> Path:
    folder = out / f"{label}-{case.index:06d}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / case.file_name).write_bytes(case.data)
    meta = {
        "seed": seed,
        "case": case.index,
        "seed_file": str(
            case.seed_file.relative_to(ROOT) if case.seed_file.is_relative_to(ROOT) else case.seed_file
        ),
        "mutations": case.mutations,
        "input": case.file_name,
        "report": report,
    }
    (folder / "case.json").write_text(json.dumps(meta, indent=2))
    return folder


def fuzz(cases: int, seed: int, jobs: int, corpus: Path | None, out: Path, verbose: bool) -> Summary:
    files = seed_files(corpus)
    cache: dict[Path, bytes] = {}
    summary = Summary()
    work = Path(tempfile.mkdtemp(prefix="tracelog-fuzz-"))
    made: dict[int, Case] = {}

    def tasks() -> Iterator[tuple[Any, str]]:
        for i in range(cases):
            case = make_case(seed, i, files, cache)
            made[i] = case
            folder = work / f"{i:06d}"
            folder.mkdir()
            path = folder / case.file_name
            path.write_bytes(case.data)
            yield i, f"{folder / 'fuzz.duckdb'}\t{path}\t{folder / 'result.json'}"

    pool = Pool(jobs)
    try:
        for i, report in pool.map(tasks()):
            case = made.pop(i)
            summary.cases += 1
            summary.outcomes[report["outcome"]] += 1
            summary.max_rss_mb = max(summary.max_rss_mb, report["rss_mb"])
            summary.max_wall_s = max(summary.max_wall_s, report["wall_s"])
            label = None
            if report["outcome"] == "crash":
                summary.crashes[report.get("kind", "?")] += 1
                label = "crash"
            elif report["outcome"] == "hang":
                label = "hang"
            elif report.get("slow"):
                summary.slow += 1
                label = "slow"
            if report["problems"]:
                summary.inconsistencies += 1
                label = label or "inconsistent"
            if label:
                summary.saved.append(str(save_case(out, label, case, seed, report)))
                if verbose:
                    print(f"{label} case {i} ({case.seed_file.name}): {case.mutations}", file=sys.stderr)
                    print("   ", report.get("kind") or report["problems"][:2], file=sys.stderr)
            shutil.rmtree(work / f"{i:06d}", ignore_errors=True)
            if summary.cases % 100 == 0:
                print(f"... {summary.cases} cases", file=sys.stderr, flush=True)
    finally:
        pool.close()
        shutil.rmtree(work, ignore_errors=True)
    return summary


def replay(folder: Path) -> int:
    meta = json.loads((folder / "case.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "replay.duckdb"
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "tracelog", "--db", str(db), "ingest", str(folder / meta["input"])],
            capture_output=True,
            text=True,
            timeout=HARD_KILL_S * 4,
            check=False,
        )
        print(f"mutations: {meta['mutations']}")
        print(f"exit {proc.returncode} after {time.perf_counter() - started:.2f} s")
        print(proc.stderr[-3000:])
        return proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--corpus", type=Path, help="a folder of more logs to mutate (searched recursively)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where failing cases are saved")
    ap.add_argument("--replay", type=Path, help="run one saved case again and print its outcome")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker()
        return
    if args.replay:
        sys.exit(replay(args.replay))
    started = time.perf_counter()
    summary = fuzz(args.cases, args.seed, args.jobs, args.corpus, args.out, args.verbose)
    if args.json:
        print(json.dumps({**summary.__dict__, "seconds": round(time.perf_counter() - started, 1)}))
    else:
        print(summary.text())
        print(f"{time.perf_counter() - started:.0f} s")
    failed = summary.outcomes["crash"] + summary.outcomes["hang"] + summary.inconsistencies + summary.slow
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
