"""ruff (lint and format) and mypy are clean on the package, as CI and STYLE.md ask."""

from __future__ import annotations

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
