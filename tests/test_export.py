"""`tracelog export --parquet`: every table readable by pyarrow and pandas alone, rows as in the store."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd
import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner

from tests.conftest import SAMPLES, base_tables
from tracelog import api
from tracelog.cli import cli


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("export") / "samples.duckdb"
    api.ingest(str(db), [str(SAMPLES)])
    return db


def table_counts(db: Path) -> dict[str, int]:
    with duckdb.connect(str(db), read_only=True) as con:
        names = base_tables(con)
        return {n: con.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0] for n in names}  # type: ignore[index]


def test_every_table_is_exported_with_its_rows(filled: Path, tmp_path: Path) -> None:
    out = tmp_path / "lake"
    result = CliRunner().invoke(
        cli, ["--db", str(filled), "export", "--parquet", str(out), "--format", "csv"]
    )
    assert result.exit_code == 0, result.output
    counts = table_counts(filled)
    assert counts["iterations"] > 100 and counts["collectives"] > 100
    for table, rows in counts.items():
        dataset = ds.dataset(out / table, format="parquet", partitioning="hive")
        assert dataset.count_rows() == rows, table


def test_partitions_are_hive_folders_by_run_bench_and_source(filled: Path, tmp_path: Path) -> None:
    api.export_parquet(str(filled), str(tmp_path))
    with duckdb.connect(str(filled), read_only=True) as con:
        run_ids = {r[0] for r in con.execute("SELECT DISTINCT run_id FROM iterations").fetchall()}
        bench_ids = {r[0] for r in con.execute("SELECT DISTINCT bench_id FROM collectives").fetchall()}
    assert {p.name for p in (tmp_path / "iterations").iterdir()} == {f"run_id={i}" for i in run_ids}
    assert {p.name for p in (tmp_path / "collectives").iterdir()} == {f"bench_id={i}" for i in bench_ids}
    assert [p.name for p in (tmp_path / "sources").iterdir()] == ["data.parquet"]


def test_values_read_back_by_pandas_and_duckdb_equal_the_store(filled: Path, tmp_path: Path) -> None:
    api.export_parquet(str(filled), str(tmp_path))
    with duckdb.connect(str(filled), read_only=True) as con:
        want = con.execute(
            "SELECT run_id, iteration, elapsed_s, lm_loss FROM iterations ORDER BY run_id, iteration, rank"
        ).df()
        busbw = con.execute("SELECT sum(busbw_gbps), max(size_bytes) FROM collectives").fetchone()
        paths = con.execute("SELECT path, fingerprint FROM sources ORDER BY source_id").fetchall()
    frame = pd.read_parquet(tmp_path / "iterations")  # pandas alone, partition column from the folder names
    frame["run_id"] = frame["run_id"].astype("int64")
    got = frame.sort_values(["run_id", "iteration", "rank"], na_position="first")[list(want.columns)]
    pd.testing.assert_frame_equal(
        got.reset_index(drop=True), want.astype({"run_id": "int64"}).reset_index(drop=True), check_dtype=False
    )
    glob = f"{tmp_path}/collectives/*/*.parquet"
    with duckdb.connect() as con:
        read = con.execute(
            f"SELECT sum(busbw_gbps), max(size_bytes) FROM read_parquet('{glob}', hive_partitioning=true)"
        ).fetchone()
    assert read == pytest.approx(busbw)
    sources = pd.read_parquet(tmp_path / "sources").sort_values("source_id")
    assert list(zip(sources["path"], sources["fingerprint"], strict=True)) == paths


def test_an_export_already_there_is_refused_unless_forced(filled: Path, tmp_path: Path) -> None:
    args = ["--db", str(filled), "export", "--parquet", str(tmp_path)]
    assert CliRunner().invoke(cli, args).exit_code == 0
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 1 and "already holds an export" in again.output
    assert CliRunner().invoke(cli, [*args, "--force"]).exit_code == 0
    assert ds.dataset(tmp_path / "runs", partitioning="hive").count_rows() == table_counts(filled)["runs"]
