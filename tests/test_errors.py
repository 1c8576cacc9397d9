"""Errors for people: a full disk, a bad threshold, a runaway constraint, Ctrl-C and a real bug each end
in words a user can act on; only a bug shows a traceback, and says it is one."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from click.testing import CliRunner

import tracelog.queries
from tracelog.analysis.plan_space import Constraint
from tracelog.cli import cli
from tracelog.errors import TracelogError
from tracelog.store import Store

NO_SPACE = 'IO Error: Could not write file "x.duckdb": No space left on device'
FAILED_COMMIT = "TransactionContext Error: Failed to commit: could not truncate file"
PLAN = [
    "plan", "--gpus", "64", "--gpu", "a100-sxm4-80gb", "--layers", "32", "--hidden", "4096", "--heads", "32",
    "--seq", "2048", "--vocab", "32000", "--gbs", "512",
]  # fmt: skip


def run(db: Path, *args: str):
    return CliRunner().invoke(cli, ["--db", str(db), *args])


@pytest.fixture
def existing_db(tmp_path: Path) -> Path:
    db = tmp_path / "t.duckdb"
    Store(db).close()
    return db


def fail_with(exc: BaseException):
    def failing(*_args: object, **_kwargs: object) -> None:
        raise exc

    return failing


def test_a_full_disk_while_writing_names_the_database(store: Store) -> None:
    with pytest.raises(TracelogError) as caught, store.transaction():
        store.con.execute("INSERT INTO unparsed VALUES (1, 1, 'x')")
        raise duckdb.IOException(NO_SPACE)
    assert str(caught.value).startswith(f"{store.path}: the disk is full")
    assert store.scalar("SELECT count(*) FROM unparsed") == 0  # rolled back


def test_a_failed_commit_names_the_database_and_the_likely_cause(store: Store) -> None:
    with pytest.raises(TracelogError) as caught, store.transaction():
        raise duckdb.TransactionException(FAILED_COMMIT)
    assert str(caught.value).startswith(f"{store.path}: could not write the database")
    assert "disk may be full" in str(caught.value)


@pytest.mark.parametrize(
    "exc, words",
    [
        (duckdb.IOException(NO_SPACE), "the disk is full"),
        (duckdb.TransactionException(FAILED_COMMIT), "disk may be full"),
    ],
)
def test_the_cli_reports_a_full_disk_without_a_traceback(
    existing_db: Path, monkeypatch: pytest.MonkeyPatch, exc: Exception, words: str
) -> None:
    monkeypatch.setattr(tracelog.queries, "runs", fail_with(exc))
    result = run(existing_db, "runs")
    assert result.exit_code == 1
    assert f"{existing_db}: " in result.output and words in result.output
    assert "Traceback" not in result.output and "bug" not in result.output


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small"
    mount.mkdir()
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot mount a small tmpfs here: {exc}")
    if done.returncode:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False, timeout=30)


def test_a_real_full_disk_is_reported_and_leaves_the_database_as_it_was(small_disk: Path) -> None:
    db = small_disk / "t.duckdb"
    lines = 5000
    batch = pa.table({"source_id": [2] * lines, "line_no": list(range(lines))})
    with Store(db) as store:
        store.insert("unparsed", [{"source_id": 1, "line_no": 1, "text": "kept"}])
        with pytest.raises(TracelogError) as caught, store.transaction():
            for k in range(100):  # 100 batches of 1 MB of distinct text, on a 2 MB disk
                text = [f"{k:03d}-{i:06d}-" + f"{k * lines + i:x}" * 40 for i in range(lines)]
                store.insert("unparsed", batch.append_column("text", pa.array(text)))
    assert str(caught.value).startswith(f"{db}: the disk is full")
    with Store(db, read_only=True) as reopened:
        assert reopened.con.execute("SELECT source_id, text FROM unparsed").fetchall() == [(1, "kept")]


@pytest.mark.parametrize("value", ["abc", "nan", "-inf", "inf", "1e999", "-1", "0.5", ""])
def test_a_threshold_that_is_not_a_number_in_its_range_is_refused(existing_db: Path, value: str) -> None:
    result = run(existing_db, "flags", "--threshold", f"loss_spike={value}")
    assert result.exit_code == 1
    assert f"threshold loss_spike={value} is not a number in [1, inf)" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "override, words",
    [
        ("oom_warning=1.5", "oom_warning=1.5 is not a number in (0, 1]"),
        ("low_bandwidth=0", "low_bandwidth=0 is not a number in (0, 1]"),
        ("tflops_formula_mismatch=-0.1", "tflops_formula_mismatch=-0.1 is not a number in [0, inf)"),
        ("oom_warning=0.99", "oom_warning (0.99) must not exceed oom_critical (0.95)"),
    ],
)
def test_each_threshold_has_its_own_range(existing_db: Path, override: str, words: str) -> None:
    result = run(existing_db, "flags", "--threshold", override)
    assert result.exit_code == 1 and words in result.output


def test_a_threshold_in_range_is_taken(existing_db: Path) -> None:
    assert (
        run(existing_db, "flags", "--threshold", "loss_spike=2", "--threshold", "oom_warning=0.5").exit_code
        == 0
    )


@pytest.mark.parametrize(
    "constraint, words",
    [
        ("(9**9**9) > 1", "Pow is not allowed"),
        ("dp << 99999999 > 1", "LShift is not allowed"),
        ("dp * " * 40 + "dp > 1", "an intermediate value is beyond"),
        ("10000000000 > dp", "outside ±1e+09"),
        ("'ab' * 99 == dp", "is not a number"),
        ("dp > 1" + " and dp > 1" * 100, "at most 500"),
    ],
)
def test_a_runaway_constraint_is_refused_at_once(tmp_path: Path, constraint: str, words: str) -> None:
    start = time.monotonic()
    result = run(tmp_path / "none.duckdb", *PLAN, "--constraint", constraint)
    assert time.monotonic() - start < 10
    assert result.exit_code == 1
    assert words in result.output and "Traceback" not in result.output


def test_a_bounded_constraint_still_does_arithmetic() -> None:
    check = Constraint("dp * tp * pp == 64 and -(pp - 8) >= 0 and mbs / 2 <= 1 and not seq % 1024")
    assert check({"dp": 4, "tp": 2, "pp": 8, "mbs": 2, "seq": 2048})
    assert not check({"dp": 4, "tp": 2, "pp": 8, "mbs": 4, "seq": 2048})


@pytest.mark.parametrize(
    "exc",
    [KeyboardInterrupt(), duckdb.InterruptException("Query interrupted"), RuntimeError("Query interrupted")],
)
def test_ctrl_c_says_interrupted_and_exits_130(
    existing_db: Path, monkeypatch: pytest.MonkeyPatch, exc: BaseException
) -> None:
    monkeypatch.setattr(tracelog.queries, "runs", fail_with(exc))
    result = run(existing_db, "runs")
    assert result.exit_code == 130
    assert result.output.strip() == "interrupted"


def test_a_bug_says_it_is_one_with_its_traceback(existing_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracelog.queries, "runs", fail_with(ZeroDivisionError("boom")))
    result = run(existing_db, "runs")
    assert result.exit_code == 1
    assert "Traceback" in result.output and "ZeroDivisionError: boom" in result.output
    assert "this is a bug in tracelog" in result.output and "report it at" in result.output


def test_a_file_the_system_refuses_is_a_message_not_a_bug(
    existing_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tracelog.queries, "runs", fail_with(PermissionError(13, "Permission denied", "/x/y")))
    result = run(existing_db, "runs")
    assert result.exit_code == 1
    assert "/x/y: Permission denied" in result.output and "Traceback" not in result.output
