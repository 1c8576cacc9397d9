"""Ingest as users meet it: idempotence, growth, rollback, and every kind of bad input."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import BACKENDS_AND_S3, SAMPLES
from tracelog import api
from tracelog.analysis.rules import bandwidth, health
from tracelog.analysis.scope import Scope
from tracelog.cli import cli
from tracelog.errors import TracelogError
from tracelog.ingest import IngestResult, ingest_file
from tracelog.locations import is_lake
from tracelog.parsers import megatron
from tracelog.store import Store

LLAMA = SAMPLES / "megatron_lm_llama3_8b_h100.log"
BLOOM = SAMPLES / "megatron_deepspeed_bloom_ugly.log"


def counts(store: Store) -> dict[str, int]:
    tables = ("sources", "runs", "iterations", "timers", "memory", "unparsed", "events", "run_params")
    return {t: store.scalar(f"SELECT count(*) FROM {t}") for t in tables}


@pytest.fixture
def db_path(any_db: Path | str) -> Path | str:
    """The tests of the store and the database path on both backends: the embedded file and a DuckLake
    store."""
    return any_db


@pytest.mark.parametrize("any_db", BACKENDS_AND_S3, indirect=True)
def test_same_bytes_twice_is_one_source(store: Store, tmp_path: Path) -> None:
    first = ingest_file(store, str(LLAMA))
    before = counts(store)
    copy = tmp_path / "renamed.log"
    shutil.copy(LLAMA, copy)
    again = ingest_file(store, str(LLAMA))
    renamed = ingest_file(store, str(copy))
    assert first.status == "ingested"
    assert again.status == renamed.status == "already ingested"
    assert again.source_id == renamed.source_id == first.source_id
    assert counts(store) == before


@pytest.mark.parametrize("any_db", BACKENDS_AND_S3, indirect=True)
def test_force_replaces_the_source(store: Store) -> None:
    ingest_file(store, str(LLAMA))
    before = counts(store)
    result = ingest_file(store, str(LLAMA), force=True)
    assert result.status == "replaced"
    assert counts(store) == before
    assert store.scalar("SELECT min(source_id) FROM sources") == result.source_id


def test_force_keeps_the_runs_ids_and_what_the_user_gave_them(tmp_path: Path) -> None:
    """`--force` parses the same source again: its runs keep their ids, names, notes and tags (a store
    whose `tag` and `note` vanished on a re-ingest would lose the user's work)."""
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(LLAMA)])
    (run_id,) = api.sql(db, "SELECT run_id FROM runs ORDER BY run_id LIMIT 1").run_id
    api.rename_run(db, run_id, "my run")
    api.note_run(db, run_id, "hello")
    api.tag_run(db, run_id, {"exp": "a"})
    (again,) = api.ingest(db, [str(LLAMA)], force=True)
    assert again.status == "replaced"
    row = api.sql(db, f"SELECT name, notes FROM runs WHERE run_id = {run_id}").iloc[0]
    assert (row["name"], row["notes"]) == ("my run", "hello")
    assert api.sql(db, "SELECT run_id, key, value FROM run_tags").values.tolist() == [[run_id, "exp", "a"]]


def test_grown_log_adds_only_new_lines_to_the_same_runs(store: Store, tmp_path: Path) -> None:
    lines = LLAMA.read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if "iteration      150/" in line)
    log = tmp_path / "live.log"
    log.write_text("".join(lines[:cut]))
    first = ingest_file(store, str(log))
    assert store.scalar("SELECT count(*) FROM iterations") == 14
    log.write_text("".join(lines))
    grown = ingest_file(store, str(log))
    assert grown.status == "appended" and grown.source_id == first.source_id
    fresh = Store(tmp_path / "fresh.duckdb")
    ingest_file(fresh, str(log))
    for table in ("iterations", "timers", "memory", "unparsed", "events", "iteration_metrics"):
        sql = f"SELECT count(*), count(DISTINCT line_no) FROM {table}"
        assert store.scalar(sql) == fresh.scalar(sql), table
    assert store.scalar("SELECT count(*) FROM sources") == 1
    assert store.scalar("SELECT count(*) FROM runs") == 2
    assert store.scalar("SELECT lines_total FROM sources") == len(lines)
    iterations = store.query("SELECT run_id, iteration FROM iterations ORDER BY line_no")
    assert iterations.iteration.is_unique


def test_a_grown_logs_rows_go_into_the_file_at_its_commit(tmp_path: Path) -> None:
    """The resumed ingest of a grown log checkpoints at its commit, so its rows are written once, into the
    database file, not into the write-ahead log first and copied into the file at the next checkpoint."""
    lines = LLAMA.read_text().splitlines(keepends=True)
    log, db = tmp_path / "live.log", tmp_path / "t.duckdb"
    log.write_text("".join(lines[: len(lines) // 2]))
    wal = Path(f"{db}.wal")
    with Store(db) as store:
        ingest_file(store, str(log))
        log.write_text("".join(lines))
        assert ingest_file(store, str(log)).status == "appended"
        assert not wal.exists() or wal.stat().st_size == 0
        assert store.scalar("SELECT current_setting('checkpoint_threshold')") == "16.0 MiB"  # put back
        assert store.scalar("SELECT count(*) FROM iterations") > 14


def test_failure_mid_file_leaves_database_as_before(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    ingest_file(store, str(BLOOM))
    before = counts(store)
    real_parse = megatron.parse

    def failing(source):
        for n, batch in enumerate(real_parse(source)):
            yield batch
            if n == 3:
                raise KeyboardInterrupt

    monkeypatch.setattr(megatron, "parse", failing)
    with pytest.raises(KeyboardInterrupt):
        ingest_file(store, str(LLAMA))
    assert counts(store) == before


def test_batches_are_inserted_on_one_duckdb_thread_and_the_setting_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parser and the reader hold the other core while a file streams in: DuckDB's own workers only
    contend with them (a third less CPU for the inserts of a 250 MB log on one thread)."""
    from tracelog import source_writer

    store = Store(tmp_path / "t.duckdb")
    store.con.execute("SET threads = 2")
    seen: list[int] = []
    real_write = source_writer.SourceWriter.write

    def write(self, batch):
        seen.append(int(self.store.scalar("SELECT current_setting('threads')")))
        real_write(self, batch)

    monkeypatch.setattr(source_writer.SourceWriter, "write", write)
    result = ingest_file(store, str(LLAMA))
    assert result.status == "ingested" and result.rows > 0
    assert seen and set(seen) == {1}
    assert store.scalar("SELECT current_setting('threads')") == 2


def test_parser_error_names_file_and_rolls_back(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(source):
        yield from []
        raise TracelogError("malformed table row", line=12)

    monkeypatch.setattr(megatron, "parse", broken)
    with pytest.raises(TracelogError) as err:
        ingest_file(store, str(LLAMA))
    assert str(err.value) == f"{LLAMA}:12: malformed table row"
    assert counts(store)["sources"] == 0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "file is empty"),
        (b"\x7fELF\x02\x01\x01\x00\x00\x00binary", "binary file"),
        (b"hello\nthis is a shopping list\nmilk\n", "no parser recognises this file"),
        (b'{"loss": [1.0, 0.9], "step": 2}\n', "no parser recognises this file"),
        (
            # a report kept beside the logs quotes their lines (`iteration 1/ 100 | ... lm loss ...`)
            b"<!DOCTYPE html>\n<html><body><pre> iteration        1/     100 | elapsed time per iteration "
            b"(ms): 1200.0 | lm loss: 9.1E+00 |</pre></body></html>\n",
            "an HTML page (a report?), not a log",
        ),
    ],
    ids=["empty", "binary", "prose", "other-format", "html"],
)
def test_bad_files_get_clear_errors(store: Store, tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.log"
    path.write_bytes(content)
    with pytest.raises(TracelogError) as err:
        ingest_file(store, str(path))
    assert str(path) in str(err.value) and message in str(err.value)
    assert counts(store)["sources"] == 0


def test_binary_error_names_the_line(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "core.log"
    path.write_bytes(b"line one\nline two\nbad \x00 byte\n")
    with pytest.raises(TracelogError) as err:
        ingest_file(store, str(path))
    assert err.value.line == 3


def test_crlf_and_ansi_parse_like_plain_text(store: Store, tmp_path: Path) -> None:
    plain = LLAMA.read_bytes()
    dressed = tmp_path / "dressed.log"
    dressed.write_bytes(plain.replace(b"\n", b"\r\n").replace(b" iteration ", b"\x1b[32m iteration \x1b[0m"))
    ingest_file(store, str(dressed))
    other = Store(tmp_path / "plain.duckdb")
    ingest_file(other, str(LLAMA))
    sql = "SELECT iteration, elapsed_s, lm_loss, tflops_reported FROM iterations ORDER BY line_no"
    assert store.query(sql).equals(other.query(sql))


def test_gzip_and_stdin(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gz = tmp_path / "run.log.gz"
    gz.write_bytes(gzip.compress(BLOOM.read_bytes()))
    assert ingest_file(store, str(gz)).status == "ingested"
    assert ingest_file(store, str(BLOOM)).status == "already ingested"

    class Stdin:
        buffer = LLAMA.open("rb")

    monkeypatch.setattr(sys, "stdin", Stdin)
    result = ingest_file(store, "-")
    assert result.status == "ingested" and result.runs == 2
    assert store.scalar("SELECT count(*) FROM iterations") == 40 + 25


def test_folder_without_logs_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(TracelogError, match="folder holds no files"):
        api.ingest(tmp_path / "t.duckdb", [str(tmp_path / "empty")])


def test_one_bad_file_does_not_lose_the_good_ones(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("nothing to see\n")
    results = api.ingest(tmp_path / "t.duckdb", [str(LLAMA), str(bad), str(BLOOM)])
    assert [type(r).__name__ for r in results] == ["IngestResult", "IngestFailure", "IngestResult"]
    assert api.sql(tmp_path / "t.duckdb", "SELECT count(*) AS n FROM sources").n[0] == 2


def test_not_a_duckdb_file(tmp_path: Path) -> None:
    path = tmp_path / "oops.duckdb"
    path.write_text("this is a text file, not a database\n" * 100)
    with pytest.raises(TracelogError) as err:
        Store(path)
    assert str(path) in str(err.value) and "DuckDB" in str(err.value)


def test_locked_database(tmp_path: Path) -> None:
    path = tmp_path / "busy.duckdb"
    Store(path).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import duckdb, sys, time
            con = duckdb.connect({str(path)!r})
            print("locked", flush=True)
            time.sleep(30)
        """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(TracelogError) as err:
            Store(path)
        assert "locked" in str(err.value) and str(path) in str(err.value)
    finally:
        holder.kill()
        holder.wait()


def test_counts_on_the_source_row(store: Store) -> None:
    result = ingest_file(store, str(BLOOM))
    assert isinstance(result, IngestResult)
    row = store.query("SELECT * FROM sources").iloc[0]
    data = BLOOM.read_bytes()
    # The log ends inside a line (the job was killed): that line waits for a newline, it is not counted.
    assert row.lines_total == data.count(b"\n")
    assert row.bytes == data.rindex(b"\n") + 1 and row.bytes + row.bytes_pending == len(data)
    committed = data[: row.bytes]  # under a MiB: one partial chunk, as the fingerprint's definition says
    expected = hashlib.sha256(
        hashlib.sha256(committed).digest() + len(committed).to_bytes(8, "little")
    ).hexdigest()
    assert row.fingerprint == expected
    assert row.lines_unparsed == store.scalar("SELECT count(*) FROM unparsed") == result.lines_unparsed
    assert row.lines_parsed == row.lines_total - row.lines_unparsed
    assert row.format == "megatron" and len(row.chunk_digests) == 32


def test_user_options_override_and_tag(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    api.ingest(
        db,
        [str(BLOOM)],
        name="bloom-176b",
        tags={"exp": "topology"},
        gpu="a100-sxm4-80gb",
        nodes=48,
        gpus_per_node=8,
    )
    run = api.sql(db, "SELECT name, gpu_model, nodes, gpus_per_node, gpus FROM runs").iloc[0]
    assert (run["name"], run.gpu_model, run.nodes, run.gpus_per_node, run.gpus) == (
        "bloom-176b",
        "a100-sxm4-80gb",
        48,
        8,
        384,
    )
    assert list(api.runs(db, tags={"exp": "topology"}).name) == ["bloom-176b"]
    assert api.runs(db, tags={"exp": "other"}).empty


def test_schema_version_is_recorded_and_reopen_is_a_no_op(db_path: Path) -> None:
    with Store(db_path) as store:
        version = store.schema_version
        assert version >= 2
    with Store(db_path) as store:
        assert store.migrate() == []
        assert store.schema_version == version


def test_a_file_named_like_a_pattern_is_a_file(tmp_path: Path) -> None:
    """`llama[1].log` in a folder is ingested as itself, and the files after it still land."""
    folder = tmp_path / "logs"
    folder.mkdir()
    shutil.copy(LLAMA, folder / "llama[1].log")
    shutil.copy(BLOOM, folder / "z-bloom.log")
    db = tmp_path / "t.duckdb"
    results = api.ingest(db, [str(folder)])
    assert [Path(r.path).name for r in results] == ["llama[1].log", "z-bloom.log"]
    assert all(r.status == "ingested" for r in results)
    (named,) = api.ingest(db, [str(folder / "llama[1].log")], force=True)
    assert named.status != "no file matches" and Path(named.path).name == "llama[1].log"


def test_a_pattern_that_names_no_file_is_expanded(tmp_path: Path) -> None:
    shutil.copy(LLAMA, tmp_path / "a.log")
    shutil.copy(BLOOM, tmp_path / "b.log")
    assert [Path(p).name for p in api.expand_paths([str(tmp_path / "*.log")])] == ["a.log", "b.log"]
    with pytest.raises(TracelogError, match="no file matches"):
        api.expand_paths([str(tmp_path / "*.txt")])


NCCL = SAMPLES / "nccl_all_reduce_8xa100.txt"


def failing_rule(*args: object, **kwargs: object) -> list[dict[str, object]]:
    raise RuntimeError("rule broke")


def test_a_failed_refresh_leaves_the_file_landed_and_the_next_file_ingested(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a run rule and a bench rule: a file's refresh runs only the families its runs or benches need
    monkeypatch.setattr(health, "evaluate", failing_rule)
    monkeypatch.setattr(bandwidth, "evaluate", failing_rule)
    results = api.ingest(store, [str(LLAMA), str(NCCL)])
    assert [type(r).__name__ for r in results] == ["IngestResult", "IngestResult"]
    assert [r.status for r in results] == ["ingested", "ingested"]  # type: ignore[union-attr]
    assert all("rule broke" in (r.warning or "") for r in results)  # type: ignore[union-attr]
    assert store.scalar("SELECT count(*) FROM sources WHERE refresh_pending") == 2
    assert store.scalar("SELECT count(*) FROM predictions") == 0
    assert "rule broke" in store.scalar("SELECT min(refresh_error) FROM sources")
    # Still broken: "already ingested" tries the refresh again instead of refusing, and says it failed.
    again = api.ingest(store, [str(LLAMA)])[0]
    assert isinstance(again, IngestResult) and again.status == "already ingested" and again.warning
    monkeypatch.undo()
    api.connect(store)  # the next command repairs what is pending
    assert (
        store.scalar("SELECT count(*) FROM sources WHERE refresh_pending OR refresh_error IS NOT NULL") == 0
    )
    assert store.scalar("SELECT count(*) FROM predictions") > 0


def test_already_ingested_with_a_pending_refresh_runs_it(store: Store) -> None:
    api.ingest(store, [str(LLAMA)])
    flags = store.scalar("SELECT count(*) FROM flags")
    store.con.execute("UPDATE sources SET refresh_pending = true")
    store.con.execute("DELETE FROM flags")
    result = ingest_file(store, str(LLAMA))  # as ingest finds it when the repair at connect failed
    assert result.status == "already ingested"
    again = api.ingest(store, [str(LLAMA)])[0]
    assert isinstance(again, IngestResult) and again.status in ("refreshed", "already ingested")
    assert store.scalar("SELECT count(*) FROM flags") == flags
    assert not store.scalar("SELECT refresh_pending FROM sources")


def test_flags_refresh_refreshes_every_file_but_the_one_that_fails(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store(db_path) as store:
        api.ingest(store, [str(LLAMA), str(NCCL)])
        run_predictions = store.scalar("SELECT count(*) FROM predictions WHERE subject_kind = 'run'")
        store.con.execute("DELETE FROM predictions")
    real = bandwidth.evaluate

    def benches_broken(store: Store, thresholds: object, scope: Scope) -> list[dict[str, object]]:
        if scope.benches != "FALSE":
            raise RuntimeError("bench rule broke")
        return real(store, thresholds, scope)  # type: ignore[arg-type]

    monkeypatch.setattr(bandwidth, "evaluate", benches_broken)
    result = CliRunner().invoke(cli, ["--db", str(db_path), "flags", "--refresh", "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert "Warning:" in result.output and "bench rule broke" in result.output and NCCL.name in result.output
    with Store(db_path) as store:
        assert run_predictions > 0
        assert store.scalar("SELECT count(*) FROM predictions WHERE subject_kind = 'run'") == run_predictions
        pending = store.con.execute("SELECT path FROM sources WHERE refresh_pending").fetchall()
        assert pending == [(str(NCCL),)]


def test_cli_reports_a_failed_refresh_as_a_warning_with_exit_0(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(health, "evaluate", failing_rule)
    result = CliRunner().invoke(cli, ["--db", str(db_path), "ingest", str(LLAMA), str(NCCL)])
    assert result.exit_code == 0, result.output
    assert result.output.count("ingested as") == 2
    assert "Warning:" in result.output and "rule broke" in result.output


def test_folder_lists_what_it_skips_and_exits_0(db_path: Path, tmp_path: Path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    shutil.copy(LLAMA, folder / "train.log")
    (folder / "README").write_text("How to run the job.\nSee the wiki.\n")
    (folder / "job.sh").write_text("#!/bin/bash\nsrun python pretrain_gpt.py\n")
    os.mkfifo(folder / "pipe")
    (folder / "dangling").symlink_to(folder / "nowhere")
    (folder / "loop_a").symlink_to(folder / "loop_b")
    (folder / "loop_b").symlink_to(folder / "loop_a")
    result = CliRunner().invoke(cli, ["--db", str(db_path), "ingest", str(folder)])
    assert result.exit_code == 0, result.output
    lines = {Path(line.split(":")[0]).name: line for line in result.output.strip().splitlines()}
    assert "ingested as megatron" in lines["train.log"]
    for name, why in (
        ("README", "no parser recognises"),
        ("job.sh", "no parser recognises"),
        ("pipe", "FIFO"),
        ("dangling", "dangling link"),
        ("loop_a", "link loop"),
        ("loop_b", "link loop"),
    ):
        assert "skipped" in lines[name] and why in lines[name], lines[name]
    alone = CliRunner().invoke(cli, ["--db", str(db_path), "ingest", str(folder / "README")])
    assert alone.exit_code == 1 and "no parser recognises" in alone.output


def test_removing_a_sources_last_run_lets_the_file_be_ingested_again(store: Store) -> None:
    first = ingest_file(store, str(LLAMA))
    run_ids = [r[0] for r in store.con.execute("SELECT run_id FROM runs").fetchall()]
    for run_id in run_ids[:-1]:
        api.remove_run(store, run_id)
        assert store.scalar("SELECT count(*) FROM sources") == 1
    api.remove_run(store, run_ids[-1])
    assert store.scalar("SELECT count(*) FROM sources") == 0
    assert store.scalar("SELECT count(*) FROM unparsed") == store.scalar("SELECT count(*) FROM events") == 0
    assert first.lines_unparsed > 0  # there were unparsed lines to remove
    assert ingest_file(store, str(LLAMA)).status == "ingested"


SLOW_REFRESH = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal gives it (not inherited ignored)
from pathlib import Path
from tracelog.analysis.rules import bandwidth, health
from tracelog.analysis.scope import Scope
real = health.evaluate
marker = Path(sys.argv[1])
def slow(*args, **kwargs):
    marker.write_text("refreshing")
    time.sleep(60)
    return real(*args, **kwargs)
health.evaluate = slow
from tracelog.cli import main
sys.argv = ["tracelog", "--db", sys.argv[2], "ingest", sys.argv[3]]
main()
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "ctrl-c"])
def test_a_refresh_killed_or_interrupted_is_redone_by_the_next_command(
    db_path: Path, tmp_path: Path, sig: signal.Signals
) -> None:
    marker = tmp_path / "marker"
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_REFRESH, str(marker), str(db_path), str(LLAMA)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert marker.exists(), proc.communicate()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    if is_lake(str(db_path)):
        # A new file in a DuckLake store lands with its refresh in one commit (beside other writers):
        # stopped during the refresh, nothing of it landed, and ingesting it again lands it whole.
        assert proc.returncode != 0 and "Traceback" not in err, err
        runs = CliRunner().invoke(cli, ["--db", str(db_path), "runs", "--format", "csv"])
        assert "megatron_lm_llama3_8b_h100.log" not in runs.output
        again = CliRunner().invoke(cli, ["--db", str(db_path), "ingest", str(LLAMA)])
        assert again.exit_code == 0 and "ingested as megatron" in again.output, again.output
        with Store(db_path) as store:
            assert not store.scalar("SELECT bool_or(refresh_pending) FROM sources")
            assert store.scalar("SELECT count(*) FROM predictions") > 0
        return
    if sig == signal.SIGINT:
        assert proc.returncode == 1
        assert "Traceback" not in err and "interrupted during the refresh" in err, err
    runs = CliRunner().invoke(cli, ["--db", str(db_path), "runs", "--format", "csv"])
    assert runs.exit_code == 0, runs.output
    assert "megatron_lm_llama3_8b_h100.log" in runs.output
    with Store(db_path) as store:
        assert not store.scalar("SELECT bool_or(refresh_pending) FROM sources")
        assert store.scalar("SELECT count(*) FROM predictions") > 0


def _stdin_ingest(db: Path, feed: str) -> subprocess.Popen[str]:
    """`tracelog ingest -` at the end of a shell pipe, in a process group of its own as a terminal's job:
    a Ctrl-C reaches the writer and tracelog at once."""
    script = (
        "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from tracelog.cli import main; sys.argv = ['tracelog', '--db', sys.argv[1], 'ingest', '-']; main()"
    )
    return subprocess.Popen(
        ["bash", "-c", f'{feed} | "{sys.executable}" -c "{script}" "{db}"'],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _wait_for(proc: subprocess.Popen[str], seconds: float) -> None:
    time.sleep(seconds)
    assert proc.poll() is None, proc.communicate()


def test_ctrl_c_ends_standard_input_and_what_was_read_lands(tmp_path: Path) -> None:
    """`python train.py | tracelog ingest -`: Ctrl-C stops the training script, whose end closes the pipe;
    the lines read so far land as one file instead of being rolled back with the interrupt."""
    db = tmp_path / "t.duckdb"
    proc = _stdin_ingest(db, f'(cat "{LLAMA}"; sleep 60)')
    _wait_for(proc, 3)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "-: ingested as megatron, 2 runs, 128 rows" in out
    assert "standard input ends when its writer stops" in err
    api.ingest(tmp_path / "file.duckdb", [str(LLAMA)])
    with Store(db, read_only=True) as piped, Store(tmp_path / "file.duckdb", read_only=True) as whole:
        assert counts(piped) == counts(whole)


def test_a_second_ctrl_c_aborts_standard_input(tmp_path: Path) -> None:
    """A writer that ignores Ctrl-C keeps the pipe open; the second Ctrl-C aborts, and nothing lands."""
    db = tmp_path / "t.duckdb"
    proc = _stdin_ingest(db, f"(trap '' INT; cat \"{LLAMA}\"; sleep 8)")
    _wait_for(proc, 3)
    os.killpg(proc.pid, signal.SIGINT)
    _wait_for(proc, 1)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "ingested" not in out
    if db.exists():
        with Store(db, read_only=True) as store:
            assert store.scalar("SELECT count(*) FROM iterations") == 0
