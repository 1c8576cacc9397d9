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


def source_of(text: str | bytes, block_bytes: int = 1 << 20) -> LineSource:
    data = text.encode() if isinstance(text, str) else text
    return LineSource(io.BytesIO(data), "<test>", block_bytes=block_bytes)


def corpus_files(fmt: str) -> list[Path]:
    folder = CORPUS / fmt
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name != "SOURCES.md")
