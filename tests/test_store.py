"""The database file itself: schema versions old and new, and only DuckDB files opened."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

import tracelog.store as store_module
from tracelog.cli import cli
from tracelog.errors import TracelogError
from tracelog.store import Store, latest_version, migrations

from .conftest import SAMPLES

LLAMA = str(SAMPLES / "megatron_lm_llama3_8b_h100.log")
VERSIONS = [version for version, _, _ in migrations()]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run(db: Path, *args: str):
    return CliRunner().invoke(cli, ["--db", str(db), *args])


# A few rows in tables every version has had since 001, with the columns 001 gave them.
ROWS = {
    "sources": "INSERT INTO sources (source_id, path, {fingerprint}, bytes, format, parser_version, lines_total, "
    "lines_parsed, lines_unparsed) VALUES (7, 'a.log', 'ab12', 123, 'megatron', '1', 10, 8, 2)",
    "runs": "INSERT INTO runs (run_id, source_id, run_key, name, framework) VALUES (3, 7, 0, 'r', 'megatron')",
    "iterations": "INSERT INTO iterations (run_id, iteration, elapsed_s, lm_loss, line_no) VALUES "
    "(3, 10, 1.5, 2.25, 40), (3, 20, 1.25, 2.0, 41)",
    "run_tags": "INSERT INTO run_tags VALUES (3, 'team', 'x')",
    "unparsed": "INSERT INTO unparsed VALUES (7, 5, 'junk')",
}
CHECKS = {
    "sources": "SELECT source_id, path, {fingerprint}, bytes, format, lines_total, lines_unparsed FROM sources",
    "runs": "SELECT run_id, source_id, run_key, name, framework FROM runs",
    "iterations": "SELECT run_id, iteration, elapsed_s, lm_loss, line_no FROM iterations ORDER BY iteration",
    "run_tags": "SELECT * FROM run_tags",
    "unparsed": "SELECT * FROM unparsed",
}


def fingerprint_column(version: int) -> str:
    """Version 8 renamed `sources.sha256` to `fingerprint` (the digest of per-MiB digests)."""
    return "sha256" if version < 8 else "fingerprint"


@pytest.mark.parametrize("version", VERSIONS[:-1])
def test_a_database_of_every_earlier_version_upgrades_with_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int
) -> None:
    db = tmp_path / f"v{version}.duckdb"
    with monkeypatch.context() as patch:
        patch.setattr(store_module, "migrations", lambda: [m for m in migrations() if m[0] <= version])
        with Store(db) as old:
            assert old.schema_version == version
            for sql in ROWS.values():
                old.con.execute(sql.format(fingerprint=fingerprint_column(version)))
            before = {
                table: old.con.execute(sql.format(fingerprint=fingerprint_column(version))).fetchall()
                for table, sql in CHECKS.items()
            }
    with Store(db) as new:
        applied = [v for (v,) in new.con.execute("SELECT version FROM schema_version ORDER BY 1").fetchall()]
        assert applied == VERSIONS
        assert new.schema_version == latest_version() > version
        after = {
            table: new.con.execute(sql.format(fingerprint="fingerprint")).fetchall()
            for table, sql in CHECKS.items()
        }
        assert after == before
    # and the upgraded database reads like any other: the run is listed
    listed = run(db, "runs", "--format", "json")
    assert listed.exit_code == 0, listed.output
    assert '"run_id":3' in listed.output.replace(" ", "")


def newer_database(path: Path) -> tuple[int, str]:
    with Store(path) as store:
        newer = latest_version() + 1
        store.con.execute("INSERT INTO schema_version (version, name) VALUES (?, '999_future.sql')", [newer])
    return newer, digest(path)


def test_a_newer_database_is_refused_with_both_versions_and_the_upgrade(tmp_path: Path) -> None:
    db = tmp_path / "new.duckdb"
    newer, before = newer_database(db)
    for read_only in (False, True):
        with pytest.raises(TracelogError) as caught:
            Store(db, read_only=read_only)
        text = str(caught.value)
        assert str(db) in text and f"schema version {newer}" in text
        assert f"up to {latest_version()}" in text and "pip install -U tracelog" in text
    assert digest(db) == before


@pytest.mark.parametrize(
    "args",
    [("runs",), ("sources",), ("flags", "--refresh"), ("ingest", "--force", LLAMA), ("sql", "SELECT 1")],
)
def test_no_command_runs_against_a_newer_database(tmp_path: Path, args: tuple[str, ...]) -> None:
    db = tmp_path / "new.duckdb"
    newer, before = newer_database(db)
    result = run(db, *args)
    assert result.exit_code == 1
    assert f"schema version {newer}" in result.output and "Traceback" not in result.output
    assert digest(db) == before
    assert not Path(f"{db}.wal").exists()


def test_a_sqlite_file_is_refused_before_duckdb_sees_it(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE t (a INTEGER)")
    before = digest(db)
    with pytest.raises(TracelogError, match=r"other\.db: not a DuckDB database \(a SQLite file\)"):
        Store(db)
    result = run(db, "runs")
    assert result.exit_code == 1 and "not a DuckDB database" in result.output and str(db) in result.output
    assert digest(db) == before


@pytest.mark.parametrize("content", [b"", b"x", LLAMA.encode(), Path(LLAMA).read_bytes()[:4096]])
def test_any_other_file_given_as_db_is_refused(tmp_path: Path, content: bytes) -> None:
    db = tmp_path / "not-a-db"
    db.write_bytes(content)
    result = run(db, "ingest", LLAMA)
    assert result.exit_code == 1
    assert f"{db}: not a DuckDB database" in result.output and "Traceback" not in result.output
    assert db.read_bytes() == content


def test_a_folder_given_as_db_is_refused(tmp_path: Path) -> None:
    result = run(tmp_path, "runs")
    assert result.exit_code == 1 and "is a folder" in result.output


def test_extensions_are_never_installed_or_loaded(store: Store) -> None:
    settings = store.con.execute(
        "SELECT current_setting('autoinstall_known_extensions'), current_setting('autoload_known_extensions')"
    ).fetchone()
    assert settings == (False, False)


@pytest.mark.parametrize(
    "args",
    [
        ("runs",),
        ("show", "1"),
        ("sql", "SELECT 1"),
        ("flags",),
        ("benches",),
        ("sources",),
        ("report",),
        ("predict", "1"),
        ("compare", "1", "2"),
        ("tag", "1", "a=b"),
    ],
)
def test_a_mistyped_db_for_a_reading_command_is_an_error(tmp_path: Path, args: tuple[str, ...]) -> None:
    db = tmp_path / "typo.duckdb"
    result = run(db, *args)
    assert result.exit_code == 1
    assert str(db) in result.output and "no database" in result.output
    assert "Traceback" not in result.output
    assert not db.exists() and not Path(f"{db}.wal").exists()


def test_a_missing_path_is_refused_by_the_library_only_when_asked(tmp_path: Path) -> None:
    with pytest.raises(TracelogError, match="no database at this path; ingest first or check --db"):
        Store(tmp_path / "typo.duckdb", create=False)
    with Store(tmp_path / "new.duckdb") as created:
        assert created.schema_version == latest_version()


def test_ingest_creates_the_database(tmp_path: Path) -> None:
    db = tmp_path / "fresh.duckdb"
    result = run(db, "ingest", LLAMA)
    assert result.exit_code == 0, result.output
    with Store(db, read_only=True) as store:
        assert store.scalar("SELECT count(*) FROM runs") > 0


def test_rows_left_without_their_run_by_an_unclean_stop_are_swept_when_the_file_opens(tmp_path: Path) -> None:
    # What a kill during a commit left now and then (DuckDB 1.5): a file's timer rows, written to the
    # database before the commit, without its source and run. A process that stops without closing the
    # file leaves its write-ahead log; the next open replays it, sees that stop, and sweeps the orphans.
    import subprocess
    import sys

    from tracelog import api

    db = tmp_path / "unclean.duckdb"
    log = str(SAMPLES / "megatron_lm_llama3_8b_h100.log")
    api.ingest(db, [log])
    with Store(db) as store:
        first = {t: store.scalar(f"SELECT count(*) FROM {t}") for t in ("runs", "iterations", "timers")}
    assert first["timers"] > 0
    code = (
        "import os, duckdb\n"
        f"con = duckdb.connect({str(db)!r})\n"
        "con.execute('DELETE FROM sources')\n"
        "con.execute('DELETE FROM runs')\n"
        "os._exit(0)\n"  # no close: the write-ahead log stays beside the file
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    assert Path(f"{db}.wal").exists()
    with Store(db) as store:
        left = {t: store.scalar(f"SELECT count(*) FROM {t}") for t in ("iterations", "timers", "memory")}
        assert left == {"iterations": 0, "timers": 0, "memory": 0}
    api.ingest(db, [log])  # the file is new again, and comes back whole
    with Store(db) as store:
        assert {t: store.scalar(f"SELECT count(*) FROM {t}") for t in first} == first
