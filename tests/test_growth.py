"""A log ingested while it grows ends as the database of one ingest of the final file.

Every sample log is cut at several points (mid-line, at a line boundary, inside a Megatron arguments
block, inside an nccl-tests table, just before a footer), each prefix ingested in turn at the same path,
then the whole file; every table the parsers fill is compared with a direct ingest, ids and timestamps
left out (rows are compared through their run and bench keys). DeepSpeed and NeMo logs, which resume
from a parser state (open steps, a configuration echo or dump, multi-line values, timer blocks), are cut
at every third line and at every place such state crosses the cut.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SAMPLES
from tests.test_parser_deepspeed import glued_bar_log
from tracelog import api, fingerprint, ingest, parse_jobs
from tracelog.analysis.refresh import refresh_pending
from tracelog.fingerprint import CHUNK
from tracelog.ingest import IngestResult, Unrecognised, ingest_file
from tracelog.parsers import deepspeed, megatron, nemo
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
    # what the refresh keeps between refreshes, and its figures: the same as one refresh of the final file
    # (`iteration_value_sums` is not: which sums it keeps depends on where the refreshes before it cut)
    "loss_spikes",
    "run_progress",
    "run_steady_cache",
    "iteration_buckets",
    "iteration_values",
    "flat_loss_stretches",
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
        **{
            table: con.execute(
                f"SELECT t.* EXCLUDE (subject_id{', computed_at' if table == 'predictions' else ''}), "
                f"r.run_key, b.bench_key FROM {table} t "
                "LEFT JOIN runs r ON t.subject_kind = 'run' AND r.run_id = t.subject_id "
                "LEFT JOIN benches b ON t.subject_kind <> 'run' AND b.bench_id = t.subject_id"
            ).fetchall()
            for table in ("predictions", "comparisons")
        },
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


def land(store: Store, log: Path, fmt: str | None = None) -> IngestResult:
    """An ingest as the CLI runs it: the file, then the refresh of its predictions and flags (which keeps
    state between refreshes: `loss_spikes`, `run_progress`)."""
    result = ingest_file(store, str(log), fmt)
    assert refresh_pending(store) == {}
    return result


def ingest_prefix(store: Store, log: Path, fmt: str | None = None) -> None:
    """A prefix too short for any parser to recognise is refused, as it would be for a user."""
    with contextlib.suppress(Unrecognised):
        land(store, log, fmt)


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


def test_a_complete_file_gives_its_last_line_without_a_newline(store: Store, tmp_path: Path) -> None:
    """A paste saved without a final newline: `complete` reads its last line, which then is no point to
    resume from; should the file grow after all, it is parsed again and comes out as one ingest of it."""
    data = (SAMPLES / "megatron_lm_llama3_8b_h100.log").read_bytes()
    start = data.rindex(b"\n", 0, data.index(b" iteration      150/")) + 1
    end = data.index(b"\n", start)
    log = tmp_path / "paste.log"
    log.write_bytes(data[:end])  # the line of iteration 150 whole, its newline not written
    held = ingest_file(store, str(log))
    assert held.bytes_pending == end - start
    assert store.scalar("SELECT count(*) FROM iterations WHERE iteration = 150") == 0
    read = ingest_file(store, str(log), complete=True)
    assert read.status == "appended" and read.bytes_pending == 0
    assert store.scalar("SELECT count(*) FROM iterations WHERE iteration = 150") == 1
    assert store.scalar("SELECT bytes FROM sources") == end
    assert store.con.execute("SELECT resume_state IS NULL FROM sources").fetchone() == (True,)
    assert ingest_file(store, str(log), complete=True).status == "already ingested"
    # The writer was alive after all: the rest of the file comes, and it is one ingest of the whole.
    log.write_bytes(data)
    assert ingest_file(store, str(log)).status == "appended"
    with Store(tmp_path / "direct.duckdb") as direct:
        ingest_file(direct, str(log))
        assert snapshot(store)["iterations"] == snapshot(direct)["iterations"]


def test_a_line_cut_by_a_crash_is_read_only_when_the_user_says_so(tmp_path: Path) -> None:
    """A job killed mid-line leaves a number cut short: `elapsed time per iteration (ms): 85` of 8530.0,
    which reads as 0.085 s. By default the line waits and the file's other lines land; `complete` is the
    user's word that the file ends there, and the line is read, but not the figure it ends in: Megatron
    closes every figure with ` |`, so one without it was cut."""
    head = "".join(
        f" iteration {i:8d}/    1000 | consumed samples: {i * 16:12d} | elapsed time per iteration (ms): "
        f"8530.0 | learning rate: 1.000E-04 | global batch size:    16 | lm loss: 5.000000E+00 | "
        "loss scale: 1.0 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
        for i in range(1, 4)
    )  # invented, in Megatron-LM's iteration-line format
    cut = (
        " iteration        4/    1000 | consumed samples:           64 | elapsed time per iteration (ms): 85"
    )
    log = tmp_path / "crashed.log"
    log.write_text(head + cut)
    with Store(tmp_path / "waits.duckdb") as store:
        result = ingest_file(store, str(log))
        assert result.bytes_pending == len(cut) and "--complete" in result.summary()
        assert store.con.execute("SELECT max(iteration), min(elapsed_s) FROM iterations").fetchone() == (
            3,
            8.53,
        )
    with Store(tmp_path / "read.duckdb") as store:
        result = ingest_file(store, str(log), complete=True)
        assert result.bytes_pending == 0 and result.lines_total == 4
        assert store.con.execute(
            "SELECT consumed_samples, elapsed_s FROM iterations WHERE iteration = 4"
        ).fetchone() == (64, None)


def test_parse_ahead_follows_the_same_word_on_the_last_line(tmp_path: Path) -> None:
    """A worker's parse (`ingest --jobs`) holds or reads the last line as the writer would, and records
    which, so that the writer never takes a parse made under the other rule."""
    data = (SAMPLES / "megatron_lm_llama3_8b_h100.log").read_bytes().rstrip(b"\n")
    log = tmp_path / "paste.log"
    log.write_bytes(data)
    held = parse_jobs.parse_to_spool(str(log), None, str(tmp_path))
    read = parse_jobs.parse_to_spool(str(log), None, str(tmp_path), complete=True)
    assert held is not None and read is not None
    try:
        assert (held.held, held.unterminated, held.pending_bytes > 0) == (True, False, True)
        assert (read.held, read.unterminated, read.pending_bytes) == (False, True, 0)
        assert read.committed == len(data) and held.committed == data.rindex(b"\n") + 1
    finally:
        held.discard()
        read.discard()


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


def halves(tmp_path: Path, sample: str = "megatron_lm_llama3_8b_h100.log") -> tuple[Path, bytes, int]:
    data = (SAMPLES / sample).read_bytes()
    cut = data.index(b"\n", len(data) // 2) + 1
    log = tmp_path / "live.log"
    log.write_bytes(data[:cut])
    return log, data, cut


def test_a_grown_megatron_log_resumes_after_its_last_line(store: Store, tmp_path: Path) -> None:
    """Only the new lines are parsed: the rows written are the new ones, and what a user set on the run
    since (hardware included) stays."""
    log, data, cut = halves(tmp_path)
    land(store, log)
    assert store.scalar("SELECT resume_version FROM sources") == megatron.VERSION
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
    # the GPU set on the run gives it the model's predictions and flags, which the direct ingest has no GPU for
    model = {"flags": [], "predictions": [], "comparisons": []}
    assert {**got, **model} == {**expected, **model}


@pytest.mark.parametrize(
    "sample", ["megatron_lm_llama3_8b_h100.log", "deepspeed_ugly_restart.log", "nemo2_llama3_8b_pretrain.log"]
)
@pytest.mark.parametrize(
    "damage",
    [
        "UPDATE sources SET resume_state = '{\"carry\": {}}'",
        "UPDATE sources SET resume_state = 'not json'",
        "UPDATE sources SET resume_state = '[1, 2]'",
        "UPDATE sources SET resume_version = '0'",
    ],
    ids=["state without its fields", "state not JSON", "state not an object", "state of another version"],
)
def test_a_resume_state_it_cannot_use_parses_the_file_again(
    store: Store, tmp_path: Path, damage: str, sample: str
) -> None:
    log, data, _ = halves(tmp_path, sample)
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


def big_log(tmp_path: Path) -> tuple[Path, bytes]:
    """The Llama sample's lines repeated past 3 MiB: whole MiBs beyond the first and the last."""
    data = (SAMPLES / "megatron_lm_llama3_8b_h100.log").read_bytes()
    data *= -(-(3 * CHUNK + 1000) // len(data))
    log = tmp_path / "big.log"
    log.write_bytes(data)
    return log, data


def test_the_same_log_again_is_known_without_hashing_all_of_it(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, _ = big_log(tmp_path)
    first = ingest_file(store, str(log))
    with monkeypatch.context() as patch:
        patch.setattr(ingest, "file_fingerprint", lambda *a, **k: pytest.fail("hashed the whole file"))
        again = ingest_file(store, str(log))
    assert again.status == "already ingested" and again.source_id == first.source_id
    # another path with the same bytes is compared by its whole fingerprint, and is the same source too
    copy = tmp_path / "copy.log"
    copy.write_bytes(log.read_bytes())
    assert ingest_file(store, str(copy)).source_id == first.source_id


def test_the_same_log_rewritten_at_its_size_is_a_new_source(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A change where the sample looks (the first MiB) is seen; one in a MiB it leaves out is the
    documented trust, and `verify` (`--verify`) sees it."""
    monkeypatch.setattr(fingerprint, "SAMPLED_CHUNKS", 0)  # the first and the last whole MiB only
    log, data = big_log(tmp_path)
    ingest_file(store, str(log))
    middle = bytearray(data)
    middle[CHUNK + 10] ^= 0x20
    log.write_bytes(bytes(middle))
    assert ingest_file(store, str(log)).status == "already ingested"
    assert ingest_file(store, str(log), verify=True).status == "ingested"
    first = bytearray(middle)
    first[10] ^= 0x20
    log.write_bytes(bytes(first))
    assert ingest_file(store, str(log)).status == "ingested"
    assert store.scalar("SELECT count(*) FROM sources") == 3


RESUMED_LOGS = [
    *((log, deepspeed) for log in sorted(SAMPLES.glob("deepspeed*.log"))),
    *((log, nemo) for log in sorted(SAMPLES.glob("nemo*.log"))),
]
# Where the DeepSpeed and NeMo parsers carry state from one line to the next: a (re)start, the
# configuration echo, a multi-line value in it (`activation_checkpointing_config  {`, the user's
# `json = {`), a step line before its ranks' throughput lines, rank 0's throughput line after other
# ranks' (its figure wins), the flops profiler block, a traceback; NeMo's configuration dump and its
# nested mappings, a timer block, a redrawn progress bar.
RESUME_MARKERS = (
    rb"Experiment configuration",
    rb"\n\s*\w+:\n",
    rb"time across ranks",
    rb"Epoch \d+:",
    rb"WORLD INFO DICT",
    rb"DeepSpeedEngine configuration:",
    rb"\{\n",
    rb"json = \{",
    rb"\bstep=[1-9]\d*, skipped",
    rb"\n(?:0: )?\[[^\n]*\] epoch=\d+/micro_step",
    rb"Profile Summary at step",
    rb"Traceback",
)


def resume_cuts(data: bytes) -> list[int]:
    """Every third line boundary; at each marker's first four places: its line's start, five bytes
    into that line, and the start of the next line."""
    boundaries = [m.end() for m in re.finditer(rb"\n", data)]
    cuts = set(boundaries[::3])
    for marker in RESUME_MARKERS:
        for found in list(re.finditer(marker, data))[:4]:
            start = data.rfind(b"\n", 0, found.start() + 1) + 1
            end = data.find(b"\n", found.start())
            cuts.update({start, start + 5, end + 1 if end >= 0 else len(data)})
    return sorted(c for c in cuts if 0 < c < len(data))


@contextlib.contextmanager
def parses_recorded(monkeypatch: pytest.MonkeyPatch, parser: Any = deepspeed) -> Iterator[list[bool]]:
    """Whether each parse of `parser` was handed a resume state (True) or read its file from the start."""
    resumed: list[bool] = []
    parse = parser.parse

    def recording(source: Any, state: dict[str, Any] | None = None) -> Any:
        resumed.append(state is not None)
        return parse(source, state=state)

    with monkeypatch.context() as patch:
        patch.setattr(parser, "parse", recording)
        yield resumed


def direct_snapshot(data: bytes, log: Path, db: Path, fmt: str) -> dict[str, list[tuple]]:
    log.write_bytes(data)
    with Store(db) as direct:
        land(direct, log, fmt)
        return snapshot(direct)


@pytest.mark.parametrize(("sample", "parser"), RESUMED_LOGS, ids=[p.name for p, _ in RESUMED_LOGS])
def test_a_log_resumes_at_every_kind_of_cut_to_the_direct_ingest(
    sample: Path, parser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its parser is named (`--parser`), so that a prefix before the lines that tell the format (the
    launcher's, a configuration dump) is read too."""
    data, fmt = sample.read_bytes(), parser.FORMAT
    log = tmp_path / sample.name
    expected = direct_snapshot(data, log, tmp_path / "direct.duckdb", fmt)
    cuts = resume_cuts(data)
    assert len(cuts) > data.count(b"\n") // 3
    with Store(tmp_path / "grown.duckdb") as grown, parses_recorded(monkeypatch, parser) as resumed:
        for n, cut in enumerate(cuts):
            log.write_bytes(data[:cut])
            land(grown, log, fmt)
            if n % 10 == 5:  # the database of a prefix is the direct ingest of that prefix too
                mark = len(resumed)
                prefix = direct_snapshot(data[:cut], log, tmp_path / f"p{cut}.duckdb", fmt)
                assert snapshot(grown) == prefix, f"cut at byte {cut}"
                del resumed[mark:]
        log.write_bytes(data)
        land(grown, log, fmt)
        assert snapshot(grown) == expected
    # The first prefix is read from its first byte, every later one with a new line resumes.
    assert resumed.count(False) == 1 and resumed.count(True) > len(cuts) // 2
    for cut in cuts[1::7]:  # one jump from a single prefix
        with Store(tmp_path / f"jump{cut}.duckdb") as jumped:
            log.write_bytes(data[:cut])
            land(jumped, log, fmt)
            log.write_bytes(data)
            land(jumped, log, fmt)
            assert snapshot(jumped) == expected, f"cut at byte {cut}"


def test_a_grown_deepspeed_log_writes_only_its_new_rows(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steps still open at the cut (lagging ranks may write to them) are written again; the rest of
    the rows are the new lines' only."""
    log, data, cut = halves(tmp_path, "deepspeed_ugly_restart.log")
    first = ingest_file(store, str(log))
    assert store.scalar("SELECT resume_version FROM sources") == deepspeed.VERSION
    state = json.loads(store.scalar("SELECT resume_state FROM sources"))
    assert state["runs"][-1]["open"], "the cut should leave steps open"
    iterations_before = store.scalar("SELECT count(*) FROM iterations")
    log.write_bytes(data)
    with parses_recorded(monkeypatch) as resumed:
        grown = ingest_file(store, str(log))
    assert resumed == [True]
    assert grown.status == "appended" and grown.lines_total == data.count(b"\n")
    new_steps = [s for s in re.findall(rb"\bstep=(\d+), skipped", data[cut:]) if int(s)]
    assert store.scalar("SELECT count(*) FROM iterations") - iterations_before == len(new_steps)
    with Store(tmp_path / "direct.duckdb") as direct:
        whole = ingest_file(direct, str(log))
        assert snapshot(store) == snapshot(direct)
    assert 0 < grown.rows < whole.rows - first.rows // 2


STEP = (
    "[2024-01-01 10:00:{s:02d},000] [INFO] [logging.py:96:log_dist] [Rank 0] step={n}, skipped=0, lr=[0.0001]"
)
TPUT = (
    "{rank}: [2024-01-01 10:00:{s:02d},000] [INFO] [timer.py:260:stop] epoch=0/micro_step={m}/global_step={n}, "
    "RunningAvgSamplesPerSec={run}, CurrSamplesPerSec={cur}, MemAllocated=4.3GB, MaxMemAllocated=38.5GB"
)


def test_a_step_open_at_the_cut_takes_rank_0s_throughput_that_came_after(
    store: Store, tmp_path: Path
) -> None:
    """Rank 3 prints step 10's throughput before the cut, rank 0 after it: rank 0's figure wins, as in
    one ingest of the whole file, and step 10 is one row with one running-average metric."""
    head = [
        "0: [2024-01-01 10:00:00,000] [INFO] [config.py:999:print] DeepSpeedEngine configuration:",
        "0: [2024-01-01 10:00:00,000] [INFO] [config.py:1003:print]   train_batch_size ............. 64",
        "0: " + STEP.format(s=1, n=10),
        TPUT.format(rank=3, s=1, m=40, n=10, run=20.5, cur=21.0),
    ]
    tail = [TPUT.format(rank=0, s=1, m=40, n=10, run=30.5, cur=32.0), "0: " + STEP.format(s=2, n=20)]
    log = tmp_path / "live.log"
    log.write_text("\n".join(head) + "\n")
    ingest_file(store, str(log))
    assert store.scalar("SELECT samples_per_s FROM iterations WHERE iteration = 10") == 21.0
    log.write_text("\n".join(head + tail) + "\n")
    assert ingest_file(store, str(log)).status == "appended"
    assert store.con.execute(
        "SELECT iteration, samples_per_s, elapsed_s FROM iterations ORDER BY iteration"
    ).fetchall() == [(10, 32.0, 2.0), (20, None, 0.1)]  # step 20's seconds: the logger's times
    assert store.con.execute(
        "SELECT iteration, value FROM iteration_metrics WHERE key = 'RunningAvgSamplesPerSec'"
    ).fetchall() == [(10, 30.5)]


def test_a_lagging_rank_after_the_cut_does_not_duplicate_a_step_written_before_it(
    store: Store, tmp_path: Path
) -> None:
    head = [
        "0: [2024-01-01 10:00:00,000] [INFO] [config.py:999:print] DeepSpeedEngine configuration:",
        *("0: " + STEP.format(s=n // 10, n=n) for n in range(10, 80, 10)),  # steps 10-30 written
    ]
    log = tmp_path / "live.log"
    log.write_text("\n".join(head) + "\n")
    ingest_file(store, str(log))
    late = TPUT.format(rank=5, s=9, m=80, n=20, run=20.5, cur=21.0)  # step 20, long after it was written
    log.write_text("\n".join([*head, late]) + "\n")
    assert ingest_file(store, str(log)).status == "appended"
    assert store.con.execute(
        "SELECT iteration, samples_per_s FROM iterations ORDER BY iteration"
    ).fetchall() == [(n, None) for n in range(10, 80, 10)]
    assert store.con.execute("SELECT rank, iteration FROM memory").fetchall() == [(5, 20)]


def test_values_out_of_range_in_rows_written_again_are_told_once(store: Store, tmp_path: Path) -> None:
    """A run's record and a step open at the cut are written at the end of every parse; the
    `bad_value` events about them are too, so a resume takes the earlier ones back."""
    head = [
        "0: [2024-01-01 10:00:00,000] [INFO] [launch.py:152:main] nnodes=99999999999999999999, "
        "num_local_procs=8, node_rank=0",
        "0: [2024-01-01 10:00:00,000] [INFO] [config.py:999:print] DeepSpeedEngine configuration:",
        "0: " + STEP.format(s=1, n=10).replace("lr=[0.0001]", "lr=[inf]"),
        TPUT.format(rank=3, s=1, m=40, n=10, run=20.5, cur=-21.0),
    ]
    tail = [TPUT.format(rank=0, s=1, m=40, n=10, run=30.5, cur=32.0), "0: " + STEP.format(s=2, n=20)]
    log = tmp_path / "live.log"
    log.write_text("\n".join(head) + "\n")
    ingest_file(store, str(log))
    assert store.scalar("SELECT count(*) FROM events WHERE kind = 'bad_value'") == 3
    log.write_text("\n".join(head + tail) + "\n")
    ingest_file(store, str(log))
    assert sorted(store.con.execute("SELECT line_no, text FROM events").fetchall()) == [
        (1, "runs.nodes = 99999999999999999999: larger than its column holds (2147483647); stored as NULL"),
        (3, "iterations.learning_rate = inf: not a finite number; stored as NULL"),
    ]


def test_a_log_named_from_its_folder_and_from_elsewhere_is_one_growing_source(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`tracelog ingest /jobs/run.log` today and `cd /jobs; tracelog ingest run.log` tomorrow: the same file,
    grown, not a second source with the same runs."""
    log, data, cut = halves(tmp_path)
    land(store, log)  # an absolute path
    assert store.scalar("SELECT path FROM sources") == str(log)
    log.write_bytes(data)
    monkeypatch.chdir(tmp_path)
    grown = land(store, Path("live.log"))  # relative, from the log's folder
    assert grown.status == "appended"
    assert store.con.execute("SELECT count(*), any_value(path) FROM sources").fetchone() == (1, str(log))
    with Store(tmp_path / "direct.duckdb") as direct:
        land(direct, log)
        assert store.scalar("SELECT count(*) FROM runs") == direct.scalar("SELECT count(*) FROM runs")
    # and the same bytes again, named another way still, are already there
    monkeypatch.chdir(tmp_path.parent)
    again = land(store, Path(tmp_path.name) / "live.log")
    assert again.status == "already ingested" and again.source_id == grown.source_id


def test_a_store_that_kept_a_relative_path_still_finds_its_log_grown(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, data, cut = halves(tmp_path)
    land(store, log)
    store.con.execute("UPDATE sources SET path = 'live.log'")  # as stores written before absolute paths
    log.write_bytes(data)
    monkeypatch.chdir(tmp_path)
    assert land(store, Path("live.log")).status == "appended"
    assert store.con.execute("SELECT count(*), any_value(path) FROM sources").fetchone() == (1, str(log))


def test_a_glued_training_bar_resumes_at_every_line_to_the_direct_ingest(tmp_path: Path) -> None:
    """The bar's length and step cross a cut in DeepSpeed's resume state."""
    data = glued_bar_log().encode()
    log = tmp_path / "hf_ds.log"
    cuts = [m.end() for m in re.finditer(rb"\n", data)][:-1]
    with Store(tmp_path / "grown.duckdb") as grown:
        for cut in [*cuts, len(data)]:
            log.write_bytes(data[:cut])
            land(grown, log, deepspeed.FORMAT)
            expected = direct_snapshot(data[:cut], log, tmp_path / f"p{cut}.duckdb", deepspeed.FORMAT)
            assert snapshot(grown) == expected, f"cut at byte {cut}"
