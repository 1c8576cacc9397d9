"""Faults during an ingest: Ctrl-C (SIGINT) and `kill -9` at points of the streaming part, the commit
and the refresh of a 30 MB generated Megatron-LM log. Afterwards the database opens, `tracelog runs`
works, and ingesting the same file again gives the database of a clean ingest (ids and timestamps
aside): a file is either absent or complete with its predictions and flags.

The phases are found by watching the database's files, not by fixed delays, so the test holds on a
slower or faster machine: the file grows while rows stream in (DuckDB writes blocks past its memory
cap), the write-ahead log appears when the transaction commits, and it stays still while the refresh
of predictions and flags computes.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.conftest import ROOT
from tracelog import api
from tracelog.cli import cli
from tracelog.store import Store

LOG_MB = 30
GPU = "a100-sxm4-80gb"
EXIT_WAIT_S = 15.0  # a process still alive this long after SIGINT did not stop


def _load_fuzz() -> Any:
    spec = importlib.util.spec_from_file_location("tracelog_fuzz", ROOT / "benchmarks" / "fuzz.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fuzz = sys.modules.get("tracelog_fuzz") or _load_fuzz()


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The generated log, with the vocabulary added to its arguments so that the model has every input
    and the refresh writes predictions, comparisons and flags (a refresh with nothing to write could not
    be caught half done)."""
    path = tmp_path_factory.mktemp("faults") / "megatron-30mb.log"
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "generate_megatron_log.py"), str(LOG_MB), str(path)],
        check=True,
        capture_output=True,
    )
    text = path.read_bytes()
    seq = text.index(b"  seq_length ")
    vocab = b"  padded_vocab_size ............................... 128256\n"
    path.write_bytes(text[:seq] + vocab + text[seq:])
    return path


@pytest.fixture(scope="module")
def empty_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("faults-empty") / "empty.duckdb"
    Store(path).close()
    return path


@pytest.fixture(scope="module")
def clean(big_log: Path, empty_db: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """The tables of a clean ingest of the log."""
    db = tmp_path_factory.mktemp("faults-clean") / "clean.duckdb"
    db.write_bytes(empty_db.read_bytes())
    with Store(db) as store:
        [result] = api.ingest(store, [str(big_log)], gpu=GPU)
        assert isinstance(result, api.IngestResult) and result.rows > 100_000
        contents = fuzz.database_contents(store.con)
    assert len(contents["predictions"]) > 10 and contents["comparisons"] and contents["flags"]
    return contents


def _sizes(db: Path) -> tuple[int, int]:
    wal = Path(f"{db}.wal")
    return (db.stat().st_size if db.exists() else -1, wal.stat().st_size if wal.exists() else -1)


class Phases:
    """Which phase an ingest is in, judged from its database file and write-ahead log, polled often.

    stream: the file grew (blocks written past the memory cap as rows stream in) and no log yet;
    commit: the commit is writing its log (over 64 KiB); refresh: the commit's log has stopped growing
    for `QUIET_S` (predictions and flags are being computed; their own small commit follows)."""

    QUIET_S = 0.03

    def __init__(self, db: Path) -> None:
        self.db = db
        self.start = _sizes(db)
        self.wal, self.wal_since = -1, time.perf_counter()

    def reached(self, phase: str) -> bool:
        size, wal = _sizes(self.db)
        now = time.perf_counter()
        if wal != self.wal:
            self.wal, self.wal_since = wal, now
        if phase == "stream":
            return wal < 0 and size != self.start[0]
        if phase == "commit":
            return wal > 64 << 10
        return wal > 64 << 10 and now - self.wal_since >= self.QUIET_S


def interrupt(db: Path, log: Path, phase: str, sig: int, delay_s: float) -> tuple[bool, int, str]:
    """Start `tracelog ingest`, send `sig` `delay_s` after it reaches `phase`; (signalled while it was
    still running, exit code, stderr)."""
    phases = Phases(db)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracelog", "--db", str(db), "ingest", str(log), "--gpu", GPU],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    hit = False
    while proc.poll() is None:
        if phases.reached(phase):
            if delay_s:
                time.sleep(delay_s)
            hit = proc.poll() is None
            if hit:
                os.kill(proc.pid, sig)
            break
        time.sleep(0.001)
    try:
        _, stderr = proc.communicate(timeout=EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, stderr = proc.communicate()
        pytest.fail(f"tracelog ingest still running {EXIT_WAIT_S:.0f} s after signal {sig} in {phase}")
    return hit, proc.returncode, stderr


CASES = [
    ("stream", signal.SIGINT, 0.0),
    ("stream", signal.SIGKILL, 0.05),  # the stream of the 30 MB log lasts a few tenths of a second
    ("commit", signal.SIGINT, 0.0),
    ("commit", signal.SIGKILL, 0.0),
    ("refresh", signal.SIGINT, 0.0),
    ("refresh", signal.SIGKILL, 0.1),
]


@pytest.mark.parametrize(
    ("phase", "sig", "delay_s"), CASES, ids=[f"{p}-{signal.Signals(s).name}-{d}s" for p, s, d in CASES]
)
def test_an_interrupted_ingest_leaves_a_database_that_a_reingest_completes(
    phase: str,
    sig: int,
    delay_s: float,
    big_log: Path,
    empty_db: Path,
    clean: dict[str, list[str]],
    tmp_path: Path,
) -> None:
    db = tmp_path / "faults.duckdb"
    db.write_bytes(empty_db.read_bytes())
    hit, code, stderr = interrupt(db, big_log, phase, sig, delay_s)
    assert hit, f"the ingest ended before its {phase} phase was seen; nothing was interrupted"
    if sig == signal.SIGKILL:
        assert code == -signal.SIGKILL
    else:  # Ctrl-C: a message, never a raw traceback
        assert "Traceback" not in stderr, stderr[-2000:]
    runs = CliRunner().invoke(cli, ["--db", str(db), "runs", "--format", "csv"])
    assert runs.exit_code == 0, runs.output
    with Store(db) as store:
        assert fuzz.consistency_problems(store.con, failed=False) == []
        [again] = api.ingest(store, [str(big_log)], gpu=GPU)
        assert isinstance(again, api.IngestResult), again
        contents = fuzz.database_contents(store.con)
    differing = {
        table: (len(rows), len(contents.get(table, [])))
        for table, rows in clean.items()
        if rows != contents.get(table)
    }
    assert not differing, (
        f"after {phase} {signal.Signals(sig).name}: tables (clean, re-ingested rows) {differing}"
    )
