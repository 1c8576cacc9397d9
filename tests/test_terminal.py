"""The terminal: `--db` where people type it, tables that fit the width, and a progress bar that shows
its file name and not its style tag."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from tracelog import api
from tracelog.cli import cli
from tracelog.cli import intake as cli_intake
from tracelog.render import FOLDED_TEXT_WIDTH, render

from .conftest import SAMPLES

LLAMA = SAMPLES / "megatron_lm_llama3_8b_h100.log"


@pytest.fixture(autouse=True)
def no_user_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("COLUMNS", raising=False)


def test_db_after_the_command(tmp_path: Path) -> None:
    db = tmp_path / "lab.duckdb"
    runner = CliRunner()
    result = runner.invoke(cli, ["ingest", str(LLAMA), "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert db.exists()
    shown = runner.invoke(cli, ["runs", "--format", "csv", "--db", str(db)])
    assert shown.exit_code == 0, shown.output
    assert shown.output.count("megatron_lm_llama3_8b_h100.log") == 2  # the run and its restart


def test_db_after_the_command_wins_over_the_one_before(tmp_path: Path) -> None:
    runner = CliRunner()
    runner.invoke(cli, ["ingest", str(LLAMA), "--db", str(tmp_path / "a.duckdb")])
    result = runner.invoke(
        cli, ["--db", str(tmp_path / "missing.duckdb"), "runs", "--db", str(tmp_path / "a.duckdb")]
    )
    assert result.exit_code == 0, result.output


def test_db_after_a_subcommand_of_a_group(tmp_path: Path) -> None:
    db = tmp_path / "sub" / "lab.duckdb"
    db.parent.mkdir()
    result = CliRunner().invoke(
        cli, ["cluster", "add", "lab", "--gpu", "l40s", "--host", "l40s-*", "--db", str(db)]
    )
    assert result.exit_code == 0, result.output
    assert '[cluster.lab]\ngpu = "l40s"' in (db.parent / "tracelog.toml").read_text()


def test_runs_fit_the_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = str(tmp_path / "a.duckdb")
    runner = CliRunner()
    runner.invoke(cli, ["ingest", str(LLAMA), "--gpu", "h100-sxm5-80gb", "--db", db])
    monkeypatch.setenv("COLUMNS", "100")
    result = runner.invoke(cli, ["runs", "--db", db])
    assert result.exit_code == 0, result.output
    table = [line for line in result.output.splitlines() if line.startswith(("┃", "│", "┏"))]
    assert table and max(len(line) for line in table) <= 100
    header = result.output.split("┡")[0]
    assert "sec per it" in header and "predicted" in header  # the comparison is among the first columns
    assert "more columns do not fit: " in result.output and "vocab" in result.output.split("fit: ")[1]


def test_columns_choose_and_order(tmp_path: Path) -> None:
    db = str(tmp_path / "a.duckdb")
    runner = CliRunner()
    runner.invoke(cli, ["ingest", str(LLAMA), "--gpu", "h100-sxm5-80gb", "--db", db])
    result = runner.invoke(cli, ["runs", "--columns", "gpus,name", "--format", "csv", "--db", db])
    assert result.output.splitlines()[:2] == ["gpus,name", "64,megatron_lm_llama3_8b_h100.log"]
    wrong = runner.invoke(cli, ["runs", "--columns", "nmae", "--db", db])
    assert wrong.exit_code == 2 and "no column nmae" in wrong.output


def test_progress_bar_shows_the_file_name_not_markup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_intake, "PROGRESS_AFTER_S", 0.0)
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, markup=False)
    progress = cli_intake.IngestProgress(console)
    name = tmp_path / "megatron-[300mb].log"
    name.write_bytes(b"x" * 1000)
    with progress(str(name)) as advance:
        assert advance is not None
        advance(500)
        progress.bar.refresh()
    progress.close()
    text = out.getvalue()
    assert "megatron-[300mb].log" in text
    assert "[progress.description]" not in text


def test_no_progress_bar_off_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_intake, "PROGRESS_AFTER_S", 0.0)
    out = io.StringIO()
    progress = cli_intake.IngestProgress(Console(file=out))
    with progress(str(LLAMA)) as advance:
        assert advance is None
    progress.close()
    assert out.getvalue() == ""


def test_the_bar_shows_once_due_with_the_bytes_read_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Until the bar is due, nothing is drawn and the bytes are only counted; the bar then starts where
    the file has got to, with the count of files done."""
    out = io.StringIO()
    progress = cli_intake.IngestProgress(Console(file=out, force_terminal=True, width=120, markup=False))
    first, second = tmp_path / "first.log", tmp_path / "second.log"
    for log in (first, second):
        log.write_bytes(b"x" * 4000)
    with progress(str(first)) as advance:
        advance(4000)
    with progress(str(second)) as advance:
        advance(1000)
        assert progress.bar is None and out.getvalue() == ""
        monkeypatch.setattr(cli_intake, "PROGRESS_AFTER_S", 0.0)
        advance(1000)
        assert progress.bar is not None
        (task,) = progress.bar.tasks
        assert (task.description, task.completed, task.total) == ("second.log", 2000, 4000)
        assert task.fields["done"] == "1 files done"
    progress.close()


def test_an_ingest_does_not_load_rich_before_its_bar_is_due(tmp_path: Path) -> None:
    """rich is 18 ms of start-up: a quick ingest, which draws no bar and prints no table, goes without it."""
    code = (
        "import sys\nfrom tracelog.cli import cli\ntry:\n"
        "    cli.main(sys.argv[1:], prog_name='tracelog', standalone_mode=False)\n"
        "finally:\n    print(sorted(m for m in sys.modules if m.split('.')[0] == 'rich'), file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "--db", str(tmp_path / "r.duckdb"), "ingest", str(LLAMA)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "ingested as megatron" in done.stdout
    assert done.stderr.strip().splitlines()[-1] == "[]"


def test_a_table_from_plain_rows_is_the_table_from_the_frame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`runs`, `flags`, `show` and `sql` print their tables from plain rows (no pandas); the table must be
    the one the DataFrame of the same query printed: alignment, number format, empty cells, fitting."""

    db = tmp_path / "t.duckdb"
    api.ingest(
        db, [str(SAMPLES / "megatron_lm_llama3_8b_h100.log"), str(SAMPLES / "nccl_all_reduce_8xa100.txt")]
    )
    monkeypatch.setenv("COLUMNS", "120")
    for query in ("runs", "flags", "sql"):
        if query == "sql":
            sql = "SELECT run_id, iteration, elapsed_s, lm_loss, ts, 1.50::DECIMAL(5, 2) AS d FROM iterations"
            frame, rows = api.sql(db, sql), api.sql(db, sql, rows=True)
        else:
            frame, rows = getattr(api, query)(db), getattr(api, query)(db, rows=True)
        assert len(rows) == len(frame) > 0
        render(frame, "table", title=query)
        from_frame = capsys.readouterr().out
        render(rows, "table", title=query)
        assert capsys.readouterr().out == from_frame


def test_the_widths_counted_are_the_widths_drawn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `fit_columns` counted is what is drawn: the table is whole within the width, a figure is never
    folded to widen a header, a name folds only past FOLDED_TEXT_WIDTH, and a header wraps at its words."""
    db = str(tmp_path / "a.duckdb")
    runner = CliRunner()
    runner.invoke(cli, ["ingest", str(LLAMA), "--gpu", "h100-sxm5-80gb", "--db", db])
    monkeypatch.setenv("COLUMNS", "90")
    result = runner.invoke(cli, ["runs", "--db", db])
    table = [line for line in result.output.splitlines() if line.startswith(("┃", "│", "┏", "└"))]
    assert max(len(line) for line in table) <= 90
    assert table[-1].endswith("┘")  # drawn whole, not cut at the terminal's edge
    rows = [line for line in table if line.startswith("│")]
    name = "megatron_lm_llama3_8b_h100.log"
    # folded, where the columns left it less than its width, but not below FOLDED_TEXT_WIDTH
    first = rows[0].split("│")[2].strip()
    assert name.startswith(first) and FOLDED_TEXT_WIDTH <= len(first) < len(name)
    assert name[len(first) :] in rows[1]
    assert "4.714" in rows[0] and "h100-sxm5-80gb" in rows[0]  # the whole figure and catalog id
    header = result.output.split("┡")[0]
    assert "sec per it" in header and "predicted" in header
    # the rows of the header, column by column, hold whole words only
    cells = [line.split("┃")[1:-1] for line in header.splitlines() if line.startswith("┃")]
    words = {w for column in zip(*cells, strict=True) for w in " ".join(c.strip() for c in column).split()}
    assert {"run", "id", "name", "gpu", "model", "gpus", "sec", "per", "it", "predicted"} <= words
    # a terminal with room shows the name whole, on one line
    monkeypatch.setenv("COLUMNS", "160")
    wide = runner.invoke(cli, ["runs", "--db", db]).output
    assert any(f"│ {name} │" in line for line in wide.splitlines())


def test_hardware_lists_the_figures_that_tell_parts_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """At a terminal the catalog fits the width without its source paragraphs, which the entry in full
    and --format csv keep."""
    monkeypatch.setenv("COLUMNS", "120")
    result = CliRunner().invoke(cli, ["hardware"])
    assert result.exit_code == 0, result.output
    table = [line for line in result.output.splitlines() if line.startswith(("┃", "│", "┏"))]
    assert max(len(line) for line in table) <= 120
    assert any(line.startswith("│ h100-sxm5-80gb ") for line in table)
    assert "datasheet" not in result.output
    assert "`tracelog hardware ID` shows one with the source of every figure" in result.output
    every = CliRunner().invoke(cli, ["hardware", "--format", "csv"])
    assert every.output.splitlines()[0].endswith(",source") and "datasheet" in every.output
    links = CliRunner().invoke(cli, ["hardware", "--links"])
    assert "unidirectional" in links.output and "links;" in links.output


def test_figures_of_five_digits_print_as_digits(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A peak of 12,710 MiB reads as that, not as 1.271e+04 (four significant digits stop at 9,999)."""
    import pandas as pd

    monkeypatch.setenv("COLUMNS", "80")
    render(pd.DataFrame({"max_reserved_mib": [12710.0, 5.24, 9999.4, 2.5e6]}), "table")
    cells = [
        line.split("│")[1].strip() for line in capsys.readouterr().out.splitlines() if line.startswith("│")
    ]
    assert cells == ["12,710", "5.24", "9999", "2,500,000"]


def test_flags_at_a_terminal_say_what_is_wrong(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The message is among the columns a 100-column terminal shows, whole over its folded lines; the
    figures it quotes follow where the width allows, and the machine formats keep the query's order."""
    db = str(tmp_path / "a.duckdb")
    runner = CliRunner()
    runner.invoke(cli, ["ingest", str(SAMPLES / "nccl_all_reduce_8xa100.txt"), "--db", db])
    monkeypatch.setenv("COLUMNS", "100")
    table = runner.invoke(cli, ["flags", "--db", db]).output
    header = [c.strip() for c in next(line for line in table.splitlines() if line.startswith("┃")).split("┃")]
    at = header.index("message")
    rows = [line.split("│") for line in table.splitlines() if line.startswith("│")]
    first: list[str] = []
    for cells in rows:
        if first and cells[1].strip():  # the next flag's first line
            break
        first.append(cells[at].strip())
    listed = runner.invoke(cli, ["flags", "--format", "csv", "--db", db]).output
    assert listed.startswith("flag_id,severity,rule,subject,subject_name,row_ref,")
    message = next(csv.DictReader(io.StringIO(listed)))["message"]
    assert "".join(first).replace(" ", "") == message.replace(" ", "")
