"""Shared fixtures: a fresh database per test, the bundled sample logs, and the public corpus."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

from tests import postgres, s3
from tracelog.parsers.base import Batch, LineSource
from tracelog.store import Store
from tracelog.store.lake import DATA_PATH_ENVVAR

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_logs"
CORPUS = ROOT.parent / "shared" / "corpus"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "test.duckdb"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[postgres.Server]:
    """One PostgreSQL server for the whole run, holding a catalog database per DuckLake test."""
    bin_dir = postgres.find_bin_dir()
    if bin_dir is None:
        pytest.skip(
            "PostgreSQL's server binaries (initdb, pg_ctl, psql) are not installed, neither on PATH nor "
            "in /usr/lib/postgresql/*/bin: the DuckLake store's catalog needs them (Debian: apt-get "
            "install postgresql)"
        )
    server = postgres.Server(bin_dir)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[s3.Server]:
    """One S3-compatible server (moto's) for the whole run, on a loopback port, with one bucket: each
    DuckLake test on object storage keeps its data under a prefix of its own."""
    reason = s3.missing()
    if reason is not None:
        pytest.skip(reason)
    running = s3.Running()
    try:
        yield running.start()
    finally:
        running.stop()


def new_lake(request: pytest.FixtureRequest, where: str) -> str:
    """The `--db` of a new, empty DuckLake store: a fresh catalog database, and a fresh data path in
    TRACELOG_DATA_PATH (for this process and the ones it starts): a folder, or (`where` "s3") a prefix of
    the S3 server's bucket, with the AWS variables that reach it."""
    server: postgres.Server = request.getfixturevalue("postgres_server")
    monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
    if where == "s3":
        bucket: s3.Server = request.getfixturevalue("s3_server")
        for name in (*s3.AWS_VARIABLES, DATA_PATH_ENVVAR):
            monkeypatch.delenv(name, raising=False)
        for name, value in bucket.environment().items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv(DATA_PATH_ENVVAR, bucket.data_path())
    else:
        assert where == "folder", where
        data = request.getfixturevalue("tmp_path") / "lake-data"
        data.mkdir()
        monkeypatch.setenv(DATA_PATH_ENVVAR, str(data))
    return server.address(server.create_database())


@pytest.fixture
def lake_db(request: pytest.FixtureRequest) -> str:
    """A new DuckLake store, its data in a folder; `@pytest.mark.parametrize("lake_db", LAKE_DATA,
    indirect=True)` runs a test on a folder and on S3."""
    return new_lake(request, getattr(request, "param", "folder"))


LAKE_DATA = ["folder", "s3"]  # where a DuckLake store's data lives, for `lake_db`
BACKENDS_AND_S3 = ["file", "lake", "lake-s3"]  # for `any_db`: the two backends, and a lake on S3


@pytest.fixture(params=["file", "lake"])
def any_db(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """A fresh database on each backend: the embedded file, then a DuckLake store (`lake-s3`, its data on
    S3, where a test asks with `@pytest.mark.parametrize("any_db", BACKENDS_AND_S3, indirect=True)`). A
    test marked `file_only` (it reads the file itself, or its lock) is skipped on the lake."""
    if request.param == "file":
        return tmp_path / "test.duckdb"
    marker = request.node.get_closest_marker("file_only")
    if marker is not None:
        pytest.skip(f"embedded file only: {marker.args[0] if marker.args else 'needs a database file'}")
    return new_lake(request, "s3" if request.param == "lake-s3" else "folder")


@pytest.fixture
def store(db_path: Path):
    with Store(db_path) as opened:
        yield opened


def alone(sample: str | Path, folder: Path) -> str:
    """A copy of a sample outside `sample_logs/`, where its tracelog.toml does not apply: for tests of
    what the model does with only the log's own facts and the command line's."""
    copy = folder / "alone" / Path(sample).name
    copy.parent.mkdir(exist_ok=True)
    copy.write_bytes(Path(sample).read_bytes())
    return str(copy)


def source_of(text: str | bytes, block_bytes: int = 1 << 20) -> LineSource:
    data = text.encode() if isinstance(text, str) else text
    return LineSource(io.BytesIO(data), "<test>", block_bytes=block_bytes)


def rows_by_table(parse: Callable[[LineSource], Iterable[Batch]], text: str | bytes) -> dict[str, list[dict]]:
    """What a parser hands out for `text`, as plain rows per table (a frame's rows or a batch's dicts)."""
    out: dict[str, list[dict]] = {}
    for batch in parse(source_of(text)):
        rows = batch.rows.to_dicts() if hasattr(batch.rows, "to_dicts") else list(batch.rows)
        out.setdefault(batch.table, []).extend(rows)
    return out


def corpus_files(fmt: str) -> list[Path]:
    folder = CORPUS / fmt
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name != "SOURCES.md")


@pytest.fixture(autouse=True)
def no_user_clusters(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own ~/.config/tracelog/tracelog.toml stays out of the tests, and so does the width
    of their terminal (an exported COLUMNS fits every table to it)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.getbasetemp() / "no-user-config"))
    monkeypatch.delenv("COLUMNS", raising=False)


def base_tables(con) -> list[str]:
    """The names of a database's tables (views left out), for tests that compare or count every table."""
    return [
        r[0]
        for r in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE'"
        ).fetchall()
    ]
