"""The CLI as a user drives it, through click's CliRunner against a fresh database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import BACKENDS_AND_S3, SAMPLES
from tracelog.cli import cli
from tracelog.store import Store

BLOOM = str(SAMPLES / "megatron_deepspeed_bloom_ugly.log")
LLAMA = str(SAMPLES / "megatron_lm_llama3_8b_h100.log")


@pytest.fixture
def db_path(any_db: Path | str) -> Path | str:
    """Every test here on both backends: the embedded file and a DuckLake store."""
    return any_db


def run(db: Path, *args: str, input: str | bytes | None = None):
    return CliRunner().invoke(cli, ["--db", str(db), *args], input=input, catch_exceptions=False)


@pytest.mark.parametrize("any_db", BACKENDS_AND_S3, indirect=True)
def test_ingest_prints_one_summary_line_per_file(db_path: Path) -> None:
    result = run(db_path, "ingest", BLOOM, LLAMA)
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 2
    assert "ingested as megatron, 1 run," in lines[0] and "9 of 120 lines unparsed" in lines[0]
    assert "last line (86 bytes) held back until its newline arrives" in lines[0]  # the job was killed
    assert "2 runs" in lines[1]
    again = run(db_path, "ingest", BLOOM)
    assert "already ingested" in again.output and again.exit_code == 0


@pytest.mark.parametrize("any_db", BACKENDS_AND_S3, indirect=True)
def test_runs_json_has_configuration_and_steady_state(db_path: Path) -> None:
    run(db_path, "ingest", BLOOM, "--name", "bloom", "--tag", "exp=a")
    result = run(db_path, "runs", "--format", "json", "--tag", "exp=a")
    (row,) = json.loads(result.output)
    assert (row["dp"], row["tp"], row["pp"], row["mbs"], row["gbs"]) == (8, 4, 12, 2, 2048)
    assert 104.4 < row["sec_per_it"] < 104.9  # warm-up (170 s) and the skipped steps are left out
    assert 149.5 < row["tflops_reported"] < 150.5


def test_show_by_name_prefix_and_ambiguity(db_path: Path) -> None:
    run(db_path, "ingest", LLAMA)
    ambiguous = run(db_path, "show", "megatron_lm")
    assert ambiguous.exit_code == 1
    assert "matches 2 runs" in ambiguous.output
    shown = run(db_path, "show", "1", "--format", "markdown")
    assert shown.exit_code == 0
    assert "### trend" in shown.output and "### timers" in shown.output and "forward-backward" in shown.output
    assert "### iterations" not in shown.output  # only when asked for
    lines = run(db_path, "show", "1", "--iterations", "--limit", "3", "--format", "csv")
    header = "iteration,elapsed_s,tflops_reported"
    assert lines.output.count(header) == 1
    rows = lines.output.split(header, 1)[1].strip().splitlines()[1:4]
    assert [r.split(",")[0] for r in rows] == ["10", "20", "30"]
    missing = run(db_path, "show", "nope")
    assert missing.exit_code == 1 and "no run matches 'nope'" in missing.output


@pytest.mark.parametrize("any_db", BACKENDS_AND_S3, indirect=True)
def test_sql_formats(db_path: Path) -> None:
    run(db_path, "ingest", BLOOM)
    csv = run(db_path, "sql", "SELECT count(*) AS n FROM iterations", "--format", "csv")
    assert csv.output == "n\n40\n"
    md = run(db_path, "sql", "SELECT 1 AS one", "--format", "markdown")
    assert "| one |" in md.output.replace("|   one |", "| one |")
    bad = run(db_path, "sql", "SELECT * FROM no_such_table")
    assert bad.exit_code == 1 and "SQL error" in bad.output
    for empty, fmt in (("", "table"), (" ; ", "csv")):  # DuckDB runs no statement: a user error, not a crash
        nothing = run(db_path, "sql", empty, "--format", fmt)
        assert nothing.exit_code == 1 and "the SQL holds no statement" in nothing.output


def test_table_output_does_not_interpret_markup(db_path: Path) -> None:
    Store(db_path).close()
    result = run(db_path, "sql", "SELECT '[bold red]x[/bold red]' AS t")
    assert "[bold red]x[/bold red]" in result.output


def test_bad_file_exits_1_and_keeps_the_good_one(db_path: Path, tmp_path: Path) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00\x01\x02")
    result = CliRunner().invoke(cli, ["--db", str(db_path), "ingest", str(junk), BLOOM])
    assert result.exit_code == 1
    assert f"{junk}:1: binary file" in result.output
    assert (
        json.loads(run(db_path, "sql", "SELECT count(*) AS n FROM sources", "--format", "json").output)[0][
            "n"
        ]
        == 1
    )


def test_stdin_dash(db_path: Path) -> None:
    result = run(db_path, "ingest", "-", input=Path(BLOOM).read_bytes())
    assert result.exit_code == 0 and "-: ingested as megatron" in result.output


def test_usage_error_exits_2(db_path: Path) -> None:
    result = CliRunner().invoke(cli, ["--db", str(db_path), "ingest", BLOOM, "--tag", "novalue"])
    assert result.exit_code == 2


def test_db_from_environment(tmp_path: Path) -> None:
    db = tmp_path / "env.duckdb"
    result = CliRunner(env={"TRACELOG_DB": str(db)}).invoke(cli, ["ingest", BLOOM])
    assert result.exit_code == 0 and db.exists()


def test_markdown_leaves_missing_values_blank(db_path: Path) -> None:
    Store(db_path).close()
    md = run(
        db_path,
        "sql",
        "SELECT 1 AS a, NULL::DOUBLE AS b, NULL::INTEGER AS c, 'x' AS d",
        "--format",
        "markdown",
    )
    row = md.output.strip().splitlines()[-1]
    assert "nan" not in row and "<NA>" not in row and "None" not in row
    assert [cell.strip() for cell in row.strip("|").split("|")] == ["1", "", "", "x"]


def test_ingest_parser_names_the_format_and_the_old_spelling_still_works(db_path: Path) -> None:
    """`--format` is the output format on every command; ingest's input format is `--parser`."""
    named = CliRunner().invoke(cli, ["--db", str(db_path), "ingest", "--parser", "megatron", BLOOM])
    assert named.exit_code == 0 and "as megatron" in named.output
    old = CliRunner().invoke(cli, ["--db", str(db_path), "ingest", "--format", "megatron", BLOOM, "--force"])
    assert old.exit_code == 0, old.output
    assert "ingest --format is now --parser" in old.output


def test_a_table_shows_a_screen_of_rows_and_says_how_many_more(db_path: Path) -> None:
    run(db_path, "ingest", LLAMA)
    many = run(db_path, "sql", "SELECT range AS n FROM range(500)")
    assert " 49 " in many.output and " 50 " not in many.output
    assert "450 more rows: --format csv, json or markdown prints them all" in many.output
    every = run(db_path, "sql", "SELECT range AS n FROM range(500)", "--format", "csv")
    assert every.output.splitlines()[-1] == "499"


def test_a_file_none_of_whose_lines_was_read_says_so(db_path: Path, tmp_path: Path) -> None:
    # A job's own print-outs named as a Megatron log: it lands (its lines kept), with a clear word.
    notes = tmp_path / "job.out"
    notes.write_text("loading shards\nepoch 1 done in 812 s\n")
    ingested = run(db_path, "ingest", "--parser", "megatron", str(notes))
    assert ingested.exit_code == 0
    assert "2 of 2 lines unparsed" in ingested.stdout
    assert "none of its 2 lines was read as megatron" in ingested.stderr
    assert "--parser" in ingested.stderr
    log = tmp_path / "run.log"
    log.write_text(" iteration        1/      10 | elapsed time per iteration (ms): 812.5 |\nbye\n")
    assert "was read as" not in run(db_path, "ingest", str(log)).stderr


def test_a_bar_read_behind_other_words_is_no_unparsed_line(db_path: Path, tmp_path: Path) -> None:
    """A pasted NeMo 1 log's end: the bar behind the terminal's cursor-up and carriage return left as
    text (`[A^M`), EarlyStopping's word glued behind it. The bar's step is read; the glued words stay in
    `unparsed`, but the line is not counted as unparsed, nor the file as one none of whose lines was read."""
    log = tmp_path / "ptuning.log"
    bar = (
        "Epoch 0: :  60%|██████    | 6024/10000 [4:26:54<2:56:09, v_num=0, reduced_train_loss=0.0252, "
        "global_step=6023.0, consumed_samples=96384.0, train_step_timing in s=2.590, val_loss=0.0917]"
    )
    stop = "Monitored metric val_loss did not improve in the last 5 records. Best score: 0.074."
    log.write_text(f"[A^M{bar}[rank: 1] {stop}\n[rank: 3] {stop}\nEpoch 0, global step 6024: not in top 1\n")
    ingested = run(db_path, "ingest", "--parser", "nemo", str(log))
    assert "1 run, 3 rows, 2 of 3 lines unparsed" in ingested.stdout
    assert "was read as" not in ingested.stderr
    with Store(db_path) as store:
        assert store.scalar("SELECT lines_parsed FROM sources") == 1
        assert store.scalar("SELECT iteration FROM iterations") == 6023
        assert store.scalar("SELECT count(*) FROM unparsed WHERE line_no = 1") == 1  # its words are kept


def test_show_trends_the_validation_loss_megatron_printed(db_path: Path, tmp_path: Path) -> None:
    # Invented: a short Megatron-LM log evaluating every 20 iterations, the last evaluation worse.
    lines = []
    for i in range(1, 101):
        lines.append(
            f" iteration {i:8d}/     100 | elapsed time per iteration (ms): 812.5 | "
            f"lm loss: {9.0 - i * 0.02:.6E} |"
        )
        if i % 20 == 0:
            value = 8.6 - i * 0.01 if i < 100 else 8.2
            lines.append(
                f" validation loss at iteration {i} on validation set | lm loss value: {value:.6E} | "
                f"lm loss PPL: {2.71828**value:.6E} |"
            )
    log = tmp_path / "eval.log"
    log.write_text("\n".join(lines) + "\n")
    run(db_path, "ingest", str(log))
    shown = run(db_path, "show", "1", "--format", "markdown").output
    trend = shown.split("### trend", 1)[1].split("###", 1)[0]
    row = next(line for line in trend.splitlines() if line.startswith("| validation lm loss"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert list(map(float, cells[1:5])) == [8.4, 8.2, 7.8, 8.4]  # first, last, lowest, highest
    assert (cells[5], cells[6], cells[7]) == ("█▆▃▁▆", "20", "100")
    assert not any(line.startswith("| validation lm loss PPL") for line in trend.splitlines())


def test_show_sums_up_a_run_with_its_trend(db_path: Path) -> None:
    run(db_path, "ingest", LLAMA)
    shown = run(db_path, "show", "1", "--format", "markdown").output
    trend = shown.split("### trend", 1)[1].split("###", 1)[0]
    loss = next(line for line in trend.splitlines() if line.startswith("| lm loss"))
    cells = [c.strip() for c in loss.strip("|").split("|")]
    first, last, lowest, highest = map(float, cells[1:5])
    assert first > last and lowest <= last and highest >= first  # a loss that falls
    assert cells[5][0] == "█" and cells[5][-1] == "▁"  # the sparkline falls with it


@pytest.mark.parametrize("fmt", ["csv", "table"])
def test_a_pipe_whose_reader_stops_early_ends_the_command_quietly(tmp_path: Path, fmt: str) -> None:
    """`tracelog show RUN --iterations | head -1`: the reader closes the pipe while tracelog still writes;
    that is what the user asked for, not an error (status 0, nothing on stderr)."""
    import subprocess
    import sys

    log = tmp_path / "long.log"  # invented: enough iterations that the rows outgrow the pipe's buffer
    log.write_text(
        "".join(
            f" iteration {i:8d}/ 5000 | elapsed time per iteration (ms): 1000.0 | lm loss: 3.000000E+00 |\n"
            for i in range(1, 5001)
        )
    )
    db = tmp_path / "t.duckdb"
    assert CliRunner().invoke(cli, ["--db", str(db), "ingest", str(log)]).exit_code == 0
    command = [
        sys.executable,
        "-m",
        "tracelog",
        "--db",
        str(db),
        "show",
        "1",
        "--iterations",
        "--limit",
        "5000",
    ]
    proc = subprocess.Popen([*command, "--format", fmt], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    assert (proc.wait(timeout=120), err) == (0, b"")


def test_a_pair_without_its_value_is_named_where_it_was_given(db_path: Path) -> None:
    run(db_path, "ingest", BLOOM)
    tag = run(db_path, "tag", "1", "bad")
    assert tag.exit_code == 2 and "Invalid value for TAGS: 'bad' is not key=value" in tag.output
    flags = run(db_path, "flags", "--threshold", "loss_spike")
    assert flags.exit_code == 2 and "Invalid value for --threshold: 'loss_spike'" in flags.output


def test_a_nan_prints_as_nan_and_a_missing_value_as_blank(db_path: Path) -> None:
    run(db_path, "ingest", BLOOM)
    query = "SELECT 'nan'::DOUBLE AS loss, NULL::DOUBLE AS grad, 'inf'::DOUBLE AS big, 1e308 AS huge"
    out = run(db_path, "sql", query).output
    row = next(line for line in out.splitlines() if "nan" in line)
    # and a figure past any count a log holds is no 309 digits
    assert [c.strip() for c in row.strip("│ ").split("│")] == ["nan", "", "inf", "1e+308"]


def test_show_prints_the_notes_a_user_gave_the_run(db_path: Path) -> None:
    run(db_path, "ingest", BLOOM)
    assert "notes" not in run(db_path, "show", "1", "--format", "csv").output.splitlines()
    run(db_path, "note", "1", "slow node 17 swapped out")
    out = run(db_path, "show", "1", "--format", "markdown").output
    assert "### notes" in out and "slow node 17 swapped out" in out


def test_show_as_json_is_one_document_with_a_list_per_part(db_path: Path) -> None:
    run(db_path, "ingest", BLOOM)
    shown = json.loads(run(db_path, "show", "1", "--iterations", "--limit", "3", "--format", "json").output)
    assert list(shown)[:2] == ["summary", "hardware"] and "run" not in shown
    (summary,) = shown["summary"]
    assert summary["run_id"] == 1 and summary["gpus"] == 384
    assert [row["iteration"] for row in shown["iterations"]] == [1, 2, 3]
