"""`ingest --jobs N`: files parsed in worker processes give the database a serial ingest gives."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from tests.conftest import SAMPLES, base_tables
from tracelog import api, parse_jobs
from tracelog.cli import cli

# Written when a row is written, not read from a log: they differ between any two ingests. A flag's id
# follows the order its rule's query returns rows in, which no ORDER BY fixes: two serial ingests differ.
UNSTABLE_COLUMNS = {"ingested_at", "computed_at", "fitted_at", "applied_at", "flag_id"}


def same(value: object) -> object:
    """NaN as a value that equals itself, so two rows holding NaN compare equal."""
    return "NaN" if isinstance(value, float) and math.isnan(value) else value


def dump(db: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every base table's rows, sorted, without the unstable columns."""
    with duckdb.connect(str(db), read_only=True) as con:
        tables = base_tables(con)
        out = {}
        for table in tables:
            cols = [
                r[0]
                for r in con.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
                    "ORDER BY ordinal_position",
                    [table],
                ).fetchall()
                if r[0] not in UNSTABLE_COLUMNS
            ]
            select = ", ".join(f'"{c}"' for c in cols)
            rows = con.execute(f'SELECT {select} FROM "{table}" ORDER BY ALL').fetchall()
            out[table] = [tuple(same(v) for v in row) for row in rows]
        return out


@pytest.fixture(scope="module")
def serial(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("serial") / "serial.duckdb"
    api.ingest(str(db), [str(SAMPLES)])
    return db


def test_parallel_ingest_equals_serial_ingest(serial: Path, tmp_path: Path) -> None:
    db = tmp_path / "jobs.duckdb"
    result = CliRunner().invoke(cli, ["--db", str(db), "ingest", "--jobs", "2", str(SAMPLES)])
    assert result.exit_code == 0, result.output
    want, got = dump(serial), dump(db)
    assert want["iterations"] and want["collectives"] and want["unparsed"]
    assert got.keys() == want.keys()
    for table in want:
        assert got[table] == want[table], table


def test_a_second_parallel_ingest_finds_every_file_already_there(serial: Path, tmp_path: Path) -> None:
    db = tmp_path / "again.duckdb"
    shutil.copy(serial, db)
    results = api.ingest(str(db), [str(SAMPLES)], jobs=2)
    assert {r.status for r in results if isinstance(r, api.IngestResult)} <= {"already ingested", "skipped"}
    assert dump(db) == dump(serial)
    assert not list(Path(parse_jobs.spool_folder()).rglob("*.batches"))


def test_a_file_that_fails_in_a_worker_fails_in_order_and_the_others_land(tmp_path: Path) -> None:
    good = tmp_path / "nccl.txt"
    shutil.copy(SAMPLES / "nccl_all_reduce_8xa100.txt", good)
    bad = tmp_path / "bad.json"
    text = (SAMPLES / "nccl_tests_all_reduce_per_iter_2x4xh100.json").read_text(encoding="utf-8")
    bad.write_text(text[: len(text) // 2] + "\n", encoding="utf-8")  # cut mid-document
    serial_results = api.ingest(str(tmp_path / "s.duckdb"), [str(bad), str(good)])
    results = api.ingest(str(tmp_path / "j.duckdb"), [str(bad), str(good)], jobs=2)
    assert [type(r).__name__ for r in results] == [type(r).__name__ for r in serial_results]
    assert [str(getattr(r, "error", r.path)) for r in results] == [
        str(getattr(r, "error", r.path)) for r in serial_results
    ]
    assert dump(tmp_path / "j.duckdb") == dump(tmp_path / "s.duckdb")


def test_a_grown_log_resumes_in_the_writer(tmp_path: Path) -> None:
    """A grown Megatron log resumes from its saved parser state, with --jobs as without."""
    log = tmp_path / "run.log"
    other = tmp_path / "ds.log"
    shutil.copy(SAMPLES / "deepspeed_zero2_gpt2_1b3.log", other)
    lines = (SAMPLES / "megatron_lm_llama3_8b_h100.log").read_text(encoding="utf-8").splitlines(keepends=True)
    half = len(lines) // 2
    for name, jobs in (("s.duckdb", 1), ("j.duckdb", 2)):
        log.write_text("".join(lines[:half]), encoding="utf-8")
        api.ingest(str(tmp_path / name), [str(log), str(other)], jobs=jobs)
        log.write_text("".join(lines), encoding="utf-8")
        results = api.ingest(str(tmp_path / name), [str(log), str(other)], jobs=jobs)
        assert [r.status for r in results if isinstance(r, api.IngestResult)] == [
            "appended",
            "already ingested",
        ]
    assert dump(tmp_path / "j.duckdb") == dump(tmp_path / "s.duckdb")


def test_spool_folders_of_killed_ingests_are_swept_once_stale(tmp_path: Path) -> None:
    """A SIGKILLed ingest cannot remove its spools; the next ingest removes them, but only where the owner
    is gone and the folder has not changed for an hour."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    hour = parse_jobs.STALE_AFTER_S
    folders = {
        "dead, old": (gone.pid, hour + 60),
        "dead, recent": (gone.pid, 60),
        "alive, old": (os.getpid(), hour + 60),
    }
    for name, (pid, age) in folders.items():
        folder = tmp_path / f"{parse_jobs.SPOOL_PREFIX}{pid}-{name.replace(', ', '_')}"
        folder.mkdir()
        (folder / "tracelog-x.batches").write_bytes(b"spooled")
        os.utime(folder, (time.time() - age, time.time() - age))
    (tmp_path / "someone-elses").mkdir()
    removed = parse_jobs.sweep_stale_spools(str(tmp_path))
    assert [Path(p).name for p in removed] == [f"{parse_jobs.SPOOL_PREFIX}{gone.pid}-dead_old"]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(
        [
            f"{parse_jobs.SPOOL_PREFIX}{gone.pid}-dead_recent",
            f"{parse_jobs.SPOOL_PREFIX}{os.getpid()}-alive_old",
            "someone-elses",
        ]
    )


def test_this_process_spools_under_its_own_folder() -> None:
    folder = Path(parse_jobs.spool_folder())
    assert folder.name.startswith(f"{parse_jobs.SPOOL_PREFIX}{os.getpid()}-") and folder.is_dir()
    assert parse_jobs.spool_folder() == str(folder)


def test_a_parse_that_raises_leaves_no_spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C or a fault inside a parser: no `Parsed` comes back to own the spool, so none may be left."""
    from tracelog import parsers

    megatron = parsers.by_format("megatron")
    real = megatron.parse

    def breaks_after_one_batch(source: object, **kwargs: object) -> Iterator[object]:
        batches = real(source, **kwargs)
        yield next(batches)
        raise KeyboardInterrupt

    monkeypatch.setattr(megatron, "parse", breaks_after_one_batch)
    folder = tmp_path / "spool"
    folder.mkdir()
    with pytest.raises(KeyboardInterrupt):
        parse_jobs.parse_to_spool(str(SAMPLES / "megatron_lm_llama3_8b_h100.log"), "megatron", str(folder))
    assert list(folder.iterdir()) == []
