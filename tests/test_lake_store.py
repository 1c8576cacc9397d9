"""The DuckLake store without a server: a DuckDB-file catalog (`ducklake:/folder/catalog.ducklake`), which
holds the same schema, ids and transactions as a PostgreSQL one (tests/test_lake.py runs many writers
against a real PostgreSQL server)."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pytest

from tracelog import api
from tracelog.errors import TracelogError
from tracelog.ingest import ingest_file
from tracelog.store import Store, lake, migrations, staging

from .conftest import SAMPLES, base_tables

LLAMA = str(SAMPLES / "megatron_lm_llama3_8b_h100.log")
BLOOM = str(SAMPLES / "megatron_deepspeed_bloom_ugly.log")
NCCL = str(SAMPLES / "nccl_all_reduce_8xa100.txt")


@pytest.fixture
def file_lake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("TRACELOG_DATA_PATH", str(tmp_path / "data"))
    return f"ducklake:{tmp_path / 'catalog.ducklake'}"


def test_the_dialect_takes_out_what_ducklake_lacks_and_nothing_else() -> None:
    sql = (
        "CREATE SEQUENCE IF NOT EXISTS run_ids START 1;\n"
        "CREATE TABLE t (id INTEGER PRIMARY KEY DEFAULT nextval('run_ids'), k VARCHAR, PRIMARY KEY (id, k));\n"
        "ALTER TABLE t ADD COLUMN IF NOT EXISTS done BOOLEAN DEFAULT false;\n"
        "ALTER TABLE t ADD COLUMN IF NOT EXISTS n BIGINT DEFAULT 0;"
    )
    out = lake.dialect(sql)
    assert "SEQUENCE" not in out and "nextval" not in out and "PRIMARY KEY" not in out
    assert "DEFAULT 'false'" in out and "DEFAULT 0" in out
    assert "CREATE TABLE t (id INTEGER  , k VARCHAR)" in out


def test_every_schema_file_applies_to_a_new_lake_store(file_lake: str) -> None:
    with Store(file_lake) as store:
        assert store.lake
        assert store.schema_version == max(v for v, _, _ in migrations())
        assert {"sources", "runs", "iterations", "flags", "tracelog_ids"} <= set(base_tables(store.con))
        kinds = dict(store.con.execute("SELECT kind, next_id FROM tracelog_ids").fetchall())
        assert kinds == {"source": 1, "run": 1, "bench": 1, "flag": 1, lake.WRITES: kinds[lake.WRITES]}
    with Store(file_lake) as again:  # opening it again applies nothing twice
        assert again.scalar("SELECT count(*) FROM schema_version") == len(migrations())


def test_the_sequences_come_with_the_schema_file_that_names_them() -> None:
    """`lake.COUNTERS_VERSION` is the schema file that moves a PostgreSQL catalog's ids to its sequences:
    the version an older tracelog refuses, so it must be that file's number."""
    names = {version: name for version, name, _ in migrations()}
    assert names[lake.COUNTERS_VERSION] == "015_lake_id_counters.sql"
    assert lake.sequence("run") == "tracelog_run_ids"
    with pytest.raises(ValueError):
        lake.sequence("runs; DROP TABLE x")


def test_ids_come_from_the_store_and_each_write_is_counted(file_lake: str) -> None:
    with Store(file_lake) as store:
        writes = store.scalar("SELECT next_id FROM tracelog_ids WHERE kind = ?", [lake.WRITES])
        with store.transaction():
            assert store.new_id("run") == 1
            assert store.new_id("run", 3) == 2
            assert store.new_id("run") == 5
            store.insert(
                "flags",
                [
                    {"rule": "r", "severity": "info", "subject_kind": "run", "subject_id": 1, "message": "a"},
                    {"rule": "r", "severity": "info", "subject_kind": "run", "subject_id": 1, "message": "b"},
                ],
            )
        ids = dict(store.con.execute("SELECT kind, next_id FROM tracelog_ids").fetchall())
        assert ids["run"] == 6 and ids["flag"] == 3
        assert ids[lake.WRITES] == writes + 1
        assert store.con.execute("SELECT flag_id FROM flags ORDER BY 1").fetchall() == [(1,), (2,)]
        with pytest.raises(ValueError), store.transaction():
            store.new_id("run")
            raise ValueError("rolled back")
        assert store.scalar("SELECT next_id FROM tracelog_ids WHERE kind = 'run'") == 6  # not handed out
        with pytest.raises(RuntimeError, match="inside a write transaction"):
            store.new_id("run")


def test_the_same_rows_land_in_a_lake_as_in_a_file(file_lake: str, tmp_path: Path) -> None:
    with Store(tmp_path / "file.duckdb") as embedded, Store(file_lake) as shared:
        for path in (LLAMA, BLOOM, NCCL):
            assert ingest_file(embedded, path).status == "ingested"
            assert ingest_file(shared, path).status == "ingested"
        assert ingest_file(shared, LLAMA).status == "already ingested"
        for table in base_tables(embedded.con):
            if table in ("schema_version",):
                continue
            expect = embedded.scalar(f"SELECT count(*) FROM {table}")
            assert shared.scalar(f"SELECT count(*) FROM {table}") == expect, table
        same = "SELECT run_id, iteration, lm_loss::VARCHAR FROM iterations ORDER BY ALL"  # NaN as text
        assert shared.con.execute(same).fetchall() == embedded.con.execute(same).fetchall()


def test_a_lost_commit_is_retried_and_anything_else_is_not() -> None:
    calls: list[int] = []

    def loses_twice() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise duckdb.TransactionException("Failed to commit: Failed to commit DuckLake transaction.")
        return "landed"

    assert lake.retrying(loses_twice) == "landed" and len(calls) == 3

    def broken() -> None:
        calls.append(1)
        raise duckdb.CatalogException("Table with name nope does not exist")

    calls.clear()
    with pytest.raises(duckdb.CatalogException):
        lake.retrying(broken)
    assert len(calls) == 1

    def always_loses() -> None:
        raise lake.ConflictError("another writer committed first")

    with pytest.raises(lake.ConflictError):
        lake.retrying(always_loses, attempts=2)


def test_a_store_address_that_cannot_attach_names_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRACELOG_DATA_PATH", raising=False)
    address = f"ducklake:{tmp_path / 'missing' / 'catalog.ducklake'}"
    with pytest.raises(TracelogError) as caught:
        Store(address)
    assert str(caught.value).startswith(f"{address}: cannot attach the DuckLake store")


def test_a_new_store_makes_every_table_at_one_schema_version(file_lake: str) -> None:
    """A reader of a DuckLake store loads the catalog of every schema version its tables' rows were
    written at; schema files applied one transaction each made a new store with a dozen of them."""
    with Store(file_lake) as store:
        meta = f"__ducklake_metadata_{lake.ALIAS}"
        tables = store.con.execute(
            f"SELECT count(*), count(DISTINCT begin_snapshot) FROM {meta}.ducklake_table "
            "WHERE end_snapshot IS NULL"
        ).fetchone()
        assert tables is not None and tables[0] > 20 and tables[1] == 1
        assert (
            store.scalar(f"SELECT count(DISTINCT schema_version) FROM {meta}.ducklake_schema_versions") == 1
        )


def test_extension_signatures_are_checked_on_first_load_and_again_when_a_binary_changes(
    file_lake: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = lake.Binaries()
    assert not first.verified
    another_install = f"1 2 3 {tmp_path / 'other-venv' / 'ducklake.duckdb_extension'}"
    first.record.parent.mkdir(parents=True, exist_ok=True)  # the postgres copy made it
    first.record.write_text(another_install + "\n", encoding="utf-8")
    with Store(file_lake) as store:  # loads them with the check on, and records them
        assert store.scalar("SELECT current_setting('allow_unsigned_extensions')") is False
    again = lake.Binaries()
    assert again.verified and again.paths == first.paths
    assert another_install in again.record.read_text(encoding="utf-8").splitlines()  # kept beside ours
    with Store(file_lake) as store:
        assert store.scalar("SELECT current_setting('allow_unsigned_extensions')") is True
    # The postgres binary is the cache's copy (here under tmp_path): change one byte of it, keeping its
    # size, and the check runs again, and refuses it.
    copy = next(p for p in first.paths if str(p).startswith(str(tmp_path)))
    with copy.open("r+b") as out:
        out.seek(copy.stat().st_size // 2)
        byte = out.read(1)
        out.seek(-1, 1)
        out.write(bytes([byte[0] ^ 0xFF]))
    assert not lake.Binaries().verified
    with pytest.raises(TracelogError, match="cannot load the postgres_scanner extension"):
        Store(file_lake)
    copy.unlink()  # the next open copies it afresh from its package, and checks it
    assert not lake.Binaries().verified
    with Store(file_lake):
        pass
    assert lake.Binaries().verified


def test_every_sample_lands_in_a_lake_row_for_row_as_in_a_file(
    file_lake: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A new file's rows are gathered in temporary tables and copied into the lake at the end (store.
    # staging): every table, predictions and flags included, must hold what one ingest into the file
    # holds, value for value. The samples' cluster facts go to the lake's data folder, where a shared
    # store keeps them.
    embedded = tmp_path / "file.duckdb"
    # the event files last: a training log ingested after them may share their run, and is not staged
    files = sorted(
        (str(p) for p in SAMPLES.iterdir() if p.name != "tracelog.toml"),
        key=lambda p: (p.endswith("_h100") and Path(p).is_dir(), p),
    )
    for path in files:  # one by one, in one order, so that ids are handed out alike
        api.ingest(embedded, [path])
    data = Path(os.environ["TRACELOG_DATA_PATH"])
    data.mkdir(parents=True, exist_ok=True)
    (data / "tracelog.toml").write_text((SAMPLES / "tracelog.toml").read_text())
    staged: list[int] = []
    real = staging.staged

    def counted(*args: object) -> object:
        staged.append(1)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(staging, "staged", counted)
    for path in files:
        api.ingest(file_lake, [path])
    # every file but the event files (which may share a run with a text log) went through the stage
    assert len(staged) == len(files) - 1
    with Store(embedded) as left, Store(file_lake) as right:
        tables = [t for t in base_tables(left.con) if t not in ("schema_version",)]
        assert "flags" in tables and "predictions" in tables
        for table in tables:
            types = left.con.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? "
                "ORDER BY ordinal_position",
                [table],
            ).fetchall()
            # a double to 12 digits: the same SQL may round its last bit apart on the two backends
            listed = ", ".join(
                f"printf('%.12g', \"{c}\")" if kind == "DOUBLE" else f'"{c}"::VARCHAR'
                for c, kind in types
                if c not in UNSTABLE
            )
            same = f"SELECT {listed} FROM {table} ORDER BY ALL"
            assert right.con.execute(same).fetchall() == left.con.execute(same).fetchall(), table
        assert right.scalar("SELECT count(*) FROM flags") > 10


UNSTABLE = ("ingested_at", "computed_at")  # when


def test_a_reading_command_makes_no_store_where_there_is_none(file_lake: str) -> None:
    """`tracelog --db ducklake:/new/catalog.ducklake flags` on a path with no catalog: an error, not a new
    empty store whose data folder a later ingest then disagrees with."""
    from click.testing import CliRunner

    from tracelog.cli import cli

    catalog = file_lake.removeprefix("ducklake:")
    read = CliRunner().invoke(cli, ["--db", file_lake, "flags"])
    assert read.exit_code == 1 and "no DuckLake store at this path" in read.output
    assert not os.path.exists(catalog)
    ingest = CliRunner().invoke(cli, ["--db", file_lake, "ingest", NCCL])
    assert ingest.exit_code == 0 and os.path.exists(catalog)
    assert CliRunner().invoke(cli, ["--db", file_lake, "benches"]).exit_code == 0


def test_a_file_after_one_that_spilled_still_lands(file_lake: str) -> None:
    """A file large enough to pass the ingest's memory cap spills its staged rows to disk; DuckDB then
    refuses to move that connection's temporary directory, and the refusal, inside the next file's
    transaction, aborted it: the second file of one `tracelog ingest` failed as "a bug in tracelog"."""
    with Store(file_lake) as store:
        api.ingest(store, [LLAMA])
        # what a 25 MB log leaves behind: the connection's temporary directory in use
        store.con.execute("SET memory_limit = '32MB'")
        store.con.execute(
            "CREATE TEMP TABLE spilled AS SELECT range AS a, md5(range::VARCHAR) AS b FROM range(2000000)"
        )
        assert store.scalar("SELECT count(*) FROM duckdb_temporary_files()") > 0
        store.con.execute("DROP TABLE spilled")
        store.con.execute("RESET memory_limit")
        api.ingest(store, [NCCL])
        assert store.scalar("SELECT count(*) FROM benches") == 1
        assert store.scalar("SELECT count(*) FROM collectives") > 0
