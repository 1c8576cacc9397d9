"""A log ingested while it grows ends as the database of one ingest of the final file.

Every sample log is cut at several points (mid-line, at a line boundary, inside a Megatron arguments
block, inside an nccl-tests table, just before a footer), each prefix ingested in turn at the same path,
then the whole file; every table the parsers fill is compared with a direct ingest, ids and timestamps
left out (rows are compared through their run and bench keys).
"""

from __future__ import annotations

import contextlib
import math
import re
from pathlib import Path

import pytest

from tests.conftest import SAMPLES
from tracelog import api
from tracelog.analysis.refresh import refresh_pending
from tracelog.ingest import IngestResult, Unrecognised, ingest_file
from tracelog.store import Store

LOGS = sorted(p for p in SAMPLES.iterdir() if p.is_file() and p.name != "tracelog.toml")
SOURCE_COLUMNS = "path, fingerprint, bytes, bytes_pending, format, lines_total, lines_parsed, lines_unparsed"
RUN_TABLES = (
    "iterations",
    "iteration_metrics",
    "memory",
    "timers",
    "run_params",
    "run_hardware",
    "loss_spikes",
    "run_progress",
)
BENCH_TABLES = ("collectives", "p2p", "links", "bench_params", "bench_devices", "bench_hardware")
# Places where a parser carries state across lines: a cut just before and a few bytes into each.
MARKERS = (
    rb"arguments",
    rb"-- end of",
    rb"#\s+size",
    rb"\n\s+\d+\s+\d+\s+(?:float|half|bfloat16|int)",
    rb"# Out of bounds",
    rb"# Avg bus bandwidth",
    rb"Unidirectional|Bidirectional",
    rb"Legend",
    rb"iteration\s+\d+/",
    rb"number of parameters",
)


def cut_points(data: bytes) -> list[int]:
    cuts = {len(data) // 3, len(data) * 2 // 3 + 3, len(data) - 1}
    for marker in MARKERS:
        found = re.search(marker, data)
        if found:
            cuts.update({found.start(), found.start() + 5})
    return sorted(c for c in cuts if 0 < c < len(data))


def snapshot(store: Store) -> dict[str, list[tuple]]:
    """Every table the ingest fills, ids and timestamps replaced by keys, rows sorted."""
    con = store.con
    out: dict[str, list[tuple]] = {
        "sources": con.execute(f"SELECT {SOURCE_COLUMNS} FROM sources").fetchall(),
        "runs": con.execute("SELECT * EXCLUDE (run_id, source_id) FROM runs").fetchall(),
        "benches": con.execute("SELECT * EXCLUDE (bench_id, source_id) FROM benches").fetchall(),
        "unparsed": con.execute("SELECT * EXCLUDE (source_id) FROM unparsed").fetchall(),
        "events": con.execute(
            "SELECT e.* EXCLUDE (source_id, run_id, bench_id), r.run_key, b.bench_key FROM events e "
            "LEFT JOIN runs r USING (run_id) LEFT JOIN benches b USING (bench_id)"
        ).fetchall(),
        # the refresh after each ingest: what the user reads of the grown log
        "flags": con.execute(
            "SELECT f.* EXCLUDE (flag_id, subject_id), r.run_key, b.bench_key FROM flags f "
            "LEFT JOIN runs r ON f.subject_kind = 'run' AND r.run_id = f.subject_id "
            "LEFT JOIN benches b ON f.subject_kind <> 'run' AND b.bench_id = f.subject_id"
        ).fetchall(),
    }
    for table in RUN_TABLES:
        out[table] = con.execute(
            f"SELECT t.* EXCLUDE (run_id), r.run_key FROM {table} t JOIN runs r USING (run_id)"
        ).fetchall()
    for table in BENCH_TABLES:
        out[table] = con.execute(
            f"SELECT t.* EXCLUDE (bench_id), b.bench_key FROM {table} t JOIN benches b USING (bench_id)"
        ).fetchall()
    return {
        table: sorted((tuple(map(comparable, row)) for row in rows), key=repr) for table, rows in out.items()
    }


def comparable(value: object) -> object:
    """NaN equal to NaN, so that rows holding one compare."""
    return "NaN" if isinstance(value, float) and math.isnan(value) else value


def land(store: Store, log: Path) -> IngestResult:
    """An ingest as the CLI runs it: the file, then the refresh of its predictions and flags (which keeps
    state between refreshes: `loss_spikes`, `run_progress`)."""
    result = ingest_file(store, str(log))
    assert refresh_pending(store) == {}
    return result


def ingest_prefix(store: Store, log: Path) -> None:
    """A prefix too short for any parser to recognise is refused, as it would be for a user."""
    with contextlib.suppress(Unrecognised):
        land(store, log)


@pytest.mark.parametrize("sample", LOGS, ids=[p.name for p in LOGS])
def test_growth_at_every_cut_gives_the_direct_ingest(sample: Path, tmp_path: Path) -> None:
    data = sample.read_bytes()
    log = tmp_path / sample.name
    log.write_bytes(data)
    with Store(tmp_path / "direct.duckdb") as direct:
        land(direct, log)
        expected = snapshot(direct)
    cuts = cut_points(data)
    assert len(cuts) >= 3
    with Store(tmp_path / "grown.duckdb") as grown:
        for cut in cuts:
            log.write_bytes(data[:cut])
            ingest_prefix(grown, log)
        log.write_bytes(data)
        land(grown, log)
        assert snapshot(grown) == expected
    # One jump from a single prefix: the state at each cut, not only after a sequence of them.
    for cut in cuts[1::4]:
        with Store(tmp_path / f"jump{cut}.duckdb") as jumped:
            log.write_bytes(data[:cut])
            ingest_prefix(jumped, log)
            log.write_bytes(data)
            land(jumped, log)
            assert snapshot(jumped) == expected, f"cut at byte {cut}"


def test_a_half_written_line_waits_for_its_newline(store: Store, tmp_path: Path) -> None:
    data = (SAMPLES / "megatron_lm_llama3_8b_h100.log").read_bytes()
    start = data.index(b" iteration      150/")
    log = tmp_path / "live.log"
    log.write_bytes(data[: start + 60])  # the line of iteration 150 cut after its first 60 bytes
    first = ingest_file(store, str(log))
    assert first.bytes_pending == 60 + (start - data.rindex(b"\n", 0, start) - 1)
    assert store.scalar("SELECT bytes + bytes_pending FROM sources") == start + 60
    assert store.scalar("SELECT count(*) FROM unparsed WHERE text LIKE '%iteration      150/%'") == 0
    assert store.scalar("SELECT count(*) FROM iterations WHERE iteration = 150") == 0
    # More of the same line, still no newline: nothing new is complete.
    log.write_bytes(data[: start + 100])
    again = ingest_file(store, str(log))
    assert again.status == "already ingested" and again.bytes_pending > first.bytes_pending
    log.write_bytes(data)
    grown = ingest_file(store, str(log))
    assert grown.status == "appended" and grown.bytes_pending == 0
    assert store.scalar("SELECT count(*) FROM iterations WHERE iteration = 150") == 1
    assert store.scalar("SELECT count(*) FROM unparsed WHERE text LIKE '%iteration      150/%'") == 0


def test_growth_keeps_run_ids_tags_and_names(store: Store, tmp_path: Path) -> None:
    data = (SAMPLES / "megatron_lm_llama3_8b_h100.log").read_bytes()
    log = tmp_path / "live.log"
    log.write_bytes(data[: len(data) // 2])
    ingest_file(store, str(log))
    run_id = store.scalar("SELECT min(run_id) FROM runs")
    store.con.execute("UPDATE runs SET name = 'mine', notes = 'kept' WHERE run_id = ?", [run_id])
    store.con.execute("INSERT INTO run_tags VALUES (?, 'team', 'x')", [run_id])
    log.write_bytes(data)
    assert ingest_file(store, str(log)).status == "appended"
    assert store.con.execute("SELECT name, notes FROM runs WHERE run_id = ?", [run_id]).fetchone() == (
        "mine",
        "kept",
    )
    assert store.scalar("SELECT value FROM run_tags WHERE run_id = ?", [run_id]) == "x"


def halves(tmp_path: Path) -> tuple[Path, bytes, int]:
    data = (SAMPLES / "megatron_lm_llama3_8b_h100.log").read_bytes()
    cut = data.index(b"\n", len(data) // 2) + 1
    log = tmp_path / "live.log"
    log.write_bytes(data[:cut])
    return log, data, cut


def test_a_grown_megatron_log_resumes_after_its_last_line(store: Store, tmp_path: Path) -> None:
    """Only the new lines are parsed: the rows written are the new ones, and what a user set on the run
    since (hardware included) stays."""
    log, data, cut = halves(tmp_path)
    land(store, log)
    assert store.scalar("SELECT resume_version FROM sources") == "1"
    run_id = int(store.scalar("SELECT min(run_id) FROM runs"))
    api.set_hardware(store, run_id, gpu="h100-sxm5-80gb")  # `tracelog set`: recorded as the user's
    iterations_before = store.scalar("SELECT count(*) FROM iterations")
    log.write_bytes(data)
    grown = land(store, log)
    assert grown.status == "appended" and grown.lines_total == data.count(b"\n")
    new_iterations = store.scalar("SELECT count(*) FROM iterations") - iterations_before
    assert new_iterations == data[cut:].count(b"] iteration ")
    assert 0 < grown.rows < grown.lines_total - grown.lines_unparsed
    assert store.scalar("SELECT gpu_model FROM runs WHERE run_id = ?", [run_id]) == "h100-sxm5-80gb"
    assert store.con.execute(
        "SELECT source FROM run_hardware WHERE run_id = ? AND fact = 'gpu_model'", [run_id]
    ).fetchall() == [("command line",)]
    with Store(tmp_path / "direct.duckdb") as direct:
        land(direct, log)
        expected = snapshot(direct)
    store.con.execute("UPDATE runs SET gpu_model = NULL")
    store.con.execute("DELETE FROM run_hardware WHERE source = 'command line'")
    got = snapshot(store)
    # the GPU set on the run gives it the model's flags, which the direct ingest has no GPU for
    assert {**got, "flags": []} == {**expected, "flags": []}


@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE sources SET resume_state = '{\"carry\": {}}'",
        "UPDATE sources SET resume_state = 'not json'",
        "UPDATE sources SET resume_version = '0'",
    ],
    ids=["state without its fields", "state not JSON", "state of another parser version"],
)
def test_a_resume_state_it_cannot_use_parses_the_file_again(
    store: Store, tmp_path: Path, damage: str
) -> None:
    log, data, _ = halves(tmp_path)
    ingest_file(store, str(log))
    store.con.execute(damage)
    log.write_bytes(data)
    grown = ingest_file(store, str(log))
    assert grown.status == "appended"
    assert grown.lines_total == data.count(b"\n")
    assert grown.rows == store.scalar(
        "SELECT (SELECT count(*) FROM iterations) + (SELECT count(*) FROM timers) + "
        "(SELECT count(*) FROM memory) + (SELECT count(*) FROM iteration_metrics) + "
        "(SELECT count(*) FROM run_params)"
    )
    with Store(tmp_path / "direct.duckdb") as direct:
        ingest_file(direct, str(log))
        assert snapshot(store) == snapshot(direct)


def test_a_prefix_changed_in_a_sampled_mib_is_not_taken_for_growth(store: Store, tmp_path: Path) -> None:
    log, data, cut = halves(tmp_path)
    ingest_file(store, str(log))
    changed = bytearray(data)
    changed[10] ^= 0x20  # the first MiB is always re-hashed
    log.write_bytes(bytes(changed))
    result = ingest_file(store, str(log))
    assert result.status == "ingested"
    assert store.scalar("SELECT count(*) FROM sources") == 2
