"""ruff (lint and format) and mypy are clean on the package, as CI and STYLE.md ask."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True)


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is installed with the test extras")
@pytest.mark.parametrize(
    "args", [("check", "tracelog", "tests", "benchmarks"), ("format", "--check", "tracelog")]
)
def test_ruff(args: tuple[str, ...]) -> None:
    result = run("ruff", *args)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy() -> None:
    pytest.importorskip("mypy", reason="mypy is installed with the test extras")
    result = run("mypy", "tracelog")
    assert result.returncode == 0, result.stdout + result.stderr


def test_sql_lambdas_use_the_syntax_duckdb_2_reads() -> None:
    """DuckDB 2.0 (what `pip install .` brings) refuses the arrow lambda (`x -> x + 1`) that 1.5 still
    reads: every rule using one failed its refresh there while the tests, on 1.5, passed."""
    arrow = re.compile(r"list_\w+\([^\n]*\b[a-z_]\w*\s*->\s")
    offenders = [
        f"{path}:{number}"
        for path in sorted(ROOT.joinpath("tracelog").rglob("*"))
        if path.suffix in (".py", ".sql")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if arrow.search(line)
    ]
    assert offenders == []
