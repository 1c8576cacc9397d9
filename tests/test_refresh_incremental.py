"""The refresh after a log grew reads the lines it gained and the state it kept (`run_buckets`,
`run_values`, `flat_stretches`), and gives what one refresh of the final file gives.

The sample logs fit in one bucket of 16,384 line numbers; here buckets are made a few lines wide, so that
the warm-up cut, the drift rule's fifths and every growth fall inside buckets, many buckets apart."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from tests.conftest import SAMPLES
from tests.test_growth import land, snapshot
from tests.test_health_rules import write_log
from tracelog import api
from tracelog.analysis import refresh, run_buckets
from tracelog.analysis.scope import Scope
from tracelog.store import Store

GROWN = [
    "megatron_lm_llama3_8b_h100.log",
    "megatron_deepspeed_bloom_ugly.log",
    "deepspeed_ugly_restart.log",  # a resumed parse writes its open steps again (`progress.rewind`)
    "deepspeed_zero2_gpt2_1b3.log",
    "hf_trainer_deepspeed_zero3_llama2_7b.log",
    "nemo2_llama3_8b_pretrain.log",
    "nanotron_smollm2_1b7_2x8xh100.log",
]


@pytest.fixture
def narrow_buckets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_buckets, "BUCKET_LINES", 4)


def grow(log: Path, data: bytes, db: Path, cuts: list[int]) -> dict[str, list[tuple]]:
    """The database of `data` ingested while it grew through `cuts`, then whole."""
    with Store(db) as store:
        for cut in cuts:
            log.write_bytes(data[:cut])
            land(store, log)
        log.write_bytes(data)
        land(store, log)
        return snapshot(store)


def direct(log: Path, data: bytes, db: Path) -> dict[str, list[tuple]]:
    log.write_bytes(data)
    with Store(db) as store:
        land(store, log)
        return snapshot(store)


@pytest.mark.parametrize("sample", GROWN)
@pytest.mark.usefixtures("narrow_buckets")
def test_growth_across_many_buckets_gives_the_direct_ingest(sample: str, tmp_path: Path) -> None:
    data = (SAMPLES / sample).read_bytes()
    log = tmp_path / sample
    boundaries = [i + 1 for i, byte in enumerate(data) if byte == ord("\n")]
    head = data.index(b"\n", len(data) // 3) + 1  # enough for the parser to know its format
    cuts = [head] + [b for b in boundaries[::5] if b > head]
    expected = direct(log, data, tmp_path / "direct.duckdb")
    assert len(expected["iteration_buckets"]) >= 3  # the run spans buckets
    assert grow(log, data, tmp_path / "grown.duckdb", cuts) == expected


def test_a_store_summed_at_another_bucket_size_is_summed_again(tmp_path: Path) -> None:
    """Schema 019 changed the bucket size: buckets kept by a store of an older schema were summed at the
    old size, and are dropped when the store is opened, so that the next refresh sums its runs again
    (here kept at 4 line numbers, then grown under today's size: the rows of one ingest of the file)."""
    data = (SAMPLES / "megatron_lm_llama3_8b_h100.log").read_bytes()
    log = tmp_path / "live.log"
    half = data.index(b"\n", len(data) // 2) + 1
    db = tmp_path / "old.duckdb"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_buckets, "BUCKET_LINES", 4)
        log.write_bytes(data[:half])
        with Store(db) as store:
            land(store, log)
            assert store.scalar("SELECT count(*) FROM iteration_buckets") > 1
            # as a store of schema 18 left it
            store.con.execute("DELETE FROM schema_version WHERE version >= 19")
    with Store(db) as store:
        assert store.scalar("SELECT max(version) FROM schema_version") >= 19
        kept = "SELECT count(*) FROM iteration_buckets UNION ALL SELECT count(*) FROM run_progress WHERE rule = 'buckets'"
        assert [n for (n,) in store.con.execute(kept).fetchall()] == [0, 0]
    log.write_bytes(data)
    with Store(db) as store:
        land(store, log)
        grown = snapshot(store)
    assert grown == direct(log, data, tmp_path / "direct.duckdb")


def health_rows(n: int, seed: int) -> list[dict]:
    """A run with something for every rule that reads its buckets: skipped steps in warm-up and after, a
    loss-scale collapse, NaN iterations, straggler steps, sec/it drifting up, a flat stretch of loss, values
    repeated across buckets (medians over many equal values) and some not."""
    rnd = random.Random(seed)
    rows = []
    for i in range(n):
        ms = rnd.choice([1000.0, 1000.0, 1010.0, 990.5]) * (1.0 + 0.3 * (i > 0.8 * n))
        row: dict = {"ms": 4000.0 if rnd.random() < 0.03 else ms, "loss": 3.0 - i * 1e-3}
        flat = 0.4 * n < i < 0.4 * n + 40
        if rnd.random() < 0.05 and not flat:
            row["skipped"] = 1
        if i < 0.5 * n:
            row["scale"] = 65536.0
        if rnd.random() < 0.02 and not flat:
            row.update(nan=1, loss=math.nan)
        if flat:
            row["loss"] = 2.5
        rows.append(row)
    return rows


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.usefixtures("narrow_buckets")
def test_a_long_run_grown_in_steps_keeps_the_flags_and_figures_of_one_ingest(
    seed: int, tmp_path: Path
) -> None:
    full = write_log(tmp_path / "full.log", health_rows(400, seed))
    data = full.read_bytes()
    boundaries = [i + 1 for i, byte in enumerate(data) if byte == ord("\n")]
    rnd = random.Random(seed)
    cuts = sorted(rnd.sample(boundaries[20:-1], 6))
    expected = direct(tmp_path / "run.log", data, tmp_path / "direct.duckdb")
    said = " ".join(str(value) for flag in expected["flags"] for value in flag)
    for words in ("skipped iteration(s) after warm-up", "loss scale collapsed", "NaN iteration(s)",
                  "logged interval(s) at least", "sec/it drifted up", "consecutive lines"):  # fmt: skip
        assert words in said
    assert grow(tmp_path / "run.log", data, tmp_path / "grown.duckdb", cuts) == expected


@pytest.mark.usefixtures("narrow_buckets")
def test_the_refresh_after_growth_reads_the_new_lines_not_the_old_buckets(tmp_path: Path) -> None:
    rows = [{"ms": 1000.0 + i % 7} for i in range(60)]
    full = write_log(tmp_path / "full.log", rows)
    lines = full.read_bytes().splitlines(keepends=True)
    log = tmp_path / "run.log"
    log.write_bytes(b"".join(lines[:30]))
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)])
    with Store(db) as store:  # a mark on a bucket well before the last line: a refresh that summed it again
        store.con.execute("UPDATE iteration_buckets SET zl_high = -1 WHERE bucket = 1")  # would lose it
    log.write_bytes(b"".join(lines))
    (result,) = api.ingest(db, [str(log)])
    assert result.status == "appended"
    with Store(db) as store:
        assert store.con.execute("SELECT zl_high FROM iteration_buckets WHERE bucket = 1").fetchall() == [
            (-1,)
        ]
        assert store.scalar("SELECT max(last_line) FROM iteration_buckets") == 60
        # rows removed behind the refresh's back (SQL of a user's): the count before the kept line differs,
        # and the run is summed again from its first line
        store.con.execute("DELETE FROM iterations WHERE line_no = 3")
    api.refresh(db)
    with Store(db) as store:
        assert store.con.execute("SELECT zl_high FROM iteration_buckets WHERE bucket = 1").fetchall() == [
            (3.0,)
        ]
        assert store.scalar("SELECT sum(lines) FROM iteration_buckets") == 59


@pytest.mark.usefixtures("narrow_buckets")
def test_a_run_whose_precision_changed_is_summed_again(tmp_path: Path) -> None:
    """A line's NaN count depends on its run's precision (`run_buckets.NAN_LINES`: a grad norm of NaN beside
    a finite loss and no skip count is a NaN only without an fp16 scaler): buckets summed under another
    precision are summed again from the first line, and hold what the rows say under the new one (here in
    bucket 1 of 10)."""
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(write_log(tmp_path / "run.log", [{"loss": 3.0 - i * 0.01} for i in range(40)]))])
    with Store(db) as store:
        store.con.execute("UPDATE iterations SET grad_norm = 'nan', skipped = NULL WHERE line_no = 7")
    api.refresh(db)
    with Store(db) as store:
        assert store.scalar("SELECT sum(nan_lines) FROM iteration_buckets") == 0  # fp16 or unknown: no NaN
        store.con.execute("UPDATE runs SET precision = 'bf16'")
    api.refresh(db)
    with Store(db) as store:
        names = ", ".join(name for name, _, _ in run_buckets.PARTIALS)
        summed = store.con.execute(
            f"SELECT run_id, bucket, {names} FROM iteration_buckets ORDER BY ALL"
        ).fetchall()
        rows = run_buckets.partials_sql(run_buckets.lines_sql("SELECT * FROM iterations"))
        assert summed == store.con.execute(f"SELECT * FROM ({rows}) ORDER BY ALL").fetchall()
        assert store.scalar("SELECT sum(nan_lines) FROM iteration_buckets") == 1
    assert any("1 NaN iteration(s)" in f["message"] for f in api.flags(db).to_dict("records"))


@pytest.mark.usefixtures("narrow_buckets")
def test_a_new_flat_loss_threshold_reads_the_run_again(tmp_path: Path) -> None:
    """Stretches kept at one threshold are found again at another, from the run's first line: a stretch of
    15 lines early in the run, too short at the default 20, is found at 12, as a direct refresh at 12
    finds it."""
    rows = [{"loss": 3.0 - i * 1e-3} for i in range(200)]
    for i in range(30, 45):
        rows[i] = {"loss": 2.5}
    full = write_log(tmp_path / "full.log", rows)
    lines = full.read_bytes().splitlines(keepends=True)
    log = tmp_path / "run.log"
    grown = tmp_path / "grown.duckdb"
    with Store(grown) as store:
        log.write_bytes(b"".join(lines[:120]))
        land(store, log)
        log.write_bytes(b"".join(lines))
        land(store, log)
        assert store.scalar("SELECT count(*) FROM flat_loss_stretches") == 0
    api.refresh(grown, thresholds={"flat_loss_lines": "12"})
    direct = tmp_path / "direct.duckdb"
    api.ingest(direct, [str(full)])
    api.refresh(direct, thresholds={"flat_loss_lines": "12"})
    with Store(grown) as g, Store(direct) as d:
        query = "SELECT * EXCLUDE (run_id) FROM flat_loss_stretches ORDER BY ALL"
        assert g.con.execute(query).fetchall() == d.con.execute(query).fetchall() != []
        kept = "SELECT rule, checked_line, context_line, threshold FROM run_progress ORDER BY rule"
        assert g.con.execute(kept).fetchall() == d.con.execute(kept).fetchall()
        assert snapshot(g)["flags"] == snapshot(d)["flags"]


def test_a_refresh_of_what_runs_gained_alone_runs_on_one_thread(tmp_path: Path) -> None:
    """A refresh whose runs all have their buckets kept reads only what they gained, on one DuckDB thread
    (`refresh.REFRESH_THREADS`); one that sums a run from its first line keeps DuckDB's own count."""
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(SAMPLES / "megatron_lm_llama3_8b_h100.log")])
    with Store(db) as store:
        runs = [
            r for (r,) in store.con.execute("SELECT run_id FROM iteration_buckets GROUP BY ALL").fetchall()
        ]
        assert runs and refresh._incremental(store, Scope.of(runs, []))
        assert refresh._incremental(store, Scope.of([], [1]))  # benches only: no run is summed
        store.con.execute(
            f"DELETE FROM run_progress WHERE rule = 'buckets' AND run_id = {runs[0]}"
        )  # a merge
        assert not refresh._incremental(store, Scope.of(runs, []))
        assert not refresh._incremental(store, Scope.of(None, None))
