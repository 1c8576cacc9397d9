"""Shared fixtures: a fresh database per test, the bundled sample logs, and the public corpus."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from tracelog.parsers.base import LineSource
from tracelog.store import Store

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_logs"
CORPUS = ROOT.parent / "shared" / "corpus"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "test.duckdb"


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
