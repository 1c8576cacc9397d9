"""A DuckLake store written by many `tracelog` processes at once, as a team's jobs write it.

Every writer and reader here is a real process (`python -m tracelog`) on a real PostgreSQL catalog: the
store's whole promise is about processes that share nothing but the catalog and the data folder. What the
store holds afterwards is checked against the same files ingested one by one into an embedded file.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.conftest import LAKE_DATA, ROOT, SAMPLES
from tracelog import api
from tracelog.store import AUTO_IDS, Store, lake
from tracelog.store.export import base_tables

# Eight different files: every family of parser (Megatron-LM, Megatron-DeepSpeed, DeepSpeed, NeMo,
# nccl-tests, p2pBandwidthLatencyTest, nvidia-smi topo).
EIGHT = [
    SAMPLES / name
    for name in (
        "megatron_deepspeed_bloom_ugly.log",
        "megatron_lm_llama3_8b_h100.log",
        "megatron_lm_moe_energy_timers.log",
        "deepspeed_ugly_restart.log",
        "nemo2_llama3_8b_pretrain.log",
        "nccl_all_reduce_8xa100.txt",
        "p2p_8xh100_p2p_read.txt",
        "topo_8xh100_nics.txt",
    )
]
LAKE_ONLY = {"tracelog_ids"}  # the id counters a DuckLake store keeps instead of sequences
PROCESS_TIMEOUT_S = 600  # eight writers on two cores, each losing some commit races
BIG_LOG_MB = 6  # large enough that a writer is caught parsing and caught writing
KILL_WAIT_S = 120.0
READER_PAUSE_S = 0.5  # between the reader's queries: most of the two cores stay with the writers
# What a reader sees of every source it can see: its rows of iterations (through its runs) and of
# unparsed. A source half written would show fewer than its file has.
PER_SOURCE_SQL = (
    "SELECT s.path, "
    "(SELECT count(*) FROM iterations i JOIN runs r USING (run_id) WHERE r.source_id = s.source_id) AS it, "
    "(SELECT count(*) FROM unparsed u WHERE u.source_id = s.source_id) AS un "
    "FROM sources s UNION ALL "
    "SELECT '<orphans>', (SELECT count(*) FROM iterations WHERE run_id NOT IN (SELECT run_id FROM runs)), "
    "(SELECT count(*) FROM unparsed WHERE source_id NOT IN (SELECT source_id FROM sources))"
)


def tracelog(db: str | Path, *args: str) -> subprocess.Popen[str]:
    """A `tracelog` process on `db` (TRACELOG_DATA_PATH comes with the environment)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tracelog", "--db", str(db), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    out, err = proc.communicate(timeout=PROCESS_TIMEOUT_S)
    return proc.returncode, out + err


def tables(store: Store) -> list[str]:
    return [t for t in base_tables(store) if t not in LAKE_ONLY]


def counts(db: str | Path) -> dict[str, int]:
    """Rows per base table."""
    with Store(db, read_only=True, create=False) as store:
        return {t: int(store.scalar(f'SELECT count(*) FROM "{t}"')) for t in tables(store)}


def per_source(db: str | Path) -> dict[str, tuple[int, int]]:
    with Store(db, read_only=True, create=False) as store:
        return {path: (it, un) for path, it, un in store.con.execute(PER_SOURCE_SQL).fetchall()}


def sources(db: str | Path) -> set[tuple[str, str, int]]:
    with Store(db, read_only=True, create=False) as store:
        return set(store.con.execute("SELECT path, fingerprint, bytes FROM sources").fetchall())


def duplicate_ids(db: str | Path) -> dict[str, int]:
    """Per id column, how many ids are held by more than one row (0 everywhere in a sound store)."""
    with Store(db, read_only=True, create=False) as store:
        return {
            column: int(store.scalar(f"SELECT count(*) - count(DISTINCT {column}) FROM {table}"))
            for table, (column, _) in AUTO_IDS.items()
        }


def embedded(folder: Path, files: list[Path], name: str = "one-by-one.duckdb") -> Path:
    """The files ingested one by one, each by its own call, into a new embedded file."""
    db = folder / name
    for path in files:
        api.ingest(str(db), [str(path)])
    return db


@pytest.fixture(scope="module")
def eight_embedded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return embedded(tmp_path_factory.mktemp("embedded"), EIGHT)


@pytest.mark.parametrize("lake_db", LAKE_DATA, indirect=True)
def test_eight_writers_and_a_reader_at_once(eight_embedded: Path, lake_db: str) -> None:
    """Eight processes ingest eight files at once while a ninth queries the store throughout: the reader
    only ever sees whole files, and the store ends as the files ingested one by one would leave it."""
    want_sources = per_source(eight_embedded)
    assert want_sources.pop("<orphans>") == (0, 0)
    assert sum(it for it, _ in want_sources.values()) > 50 and sum(un for _, un in want_sources.values()) > 10
    writers = [tracelog(lake_db, "ingest", str(path)) for path in EIGHT]
    seen: list[dict[str, tuple[int, int]]] = []

    def read() -> dict[str, tuple[int, int]]:
        code, output = finish(tracelog(lake_db, "sql", PER_SOURCE_SQL, "--format", "csv"))
        assert code == 0, output
        lines = output.strip().splitlines()[1:]
        return {p: (int(it), int(un)) for p, it, un in (line.rsplit(",", 2) for line in lines)}

    while any(w.poll() is None for w in writers) or not seen:
        seen.append(read())
        time.sleep(READER_PAUSE_S)
    for writer in writers:
        code, output = finish(writer)
        assert code == 0, output
    assert len(seen) >= 2, "the reader never queried while the writers worked"
    seen.append(read())  # a query that began before the last commit may end after it: once more
    for snapshot in seen:
        assert snapshot.pop("<orphans>") == (0, 0), "rows of a run or source that is not committed"
        for path, got in snapshot.items():
            assert got == want_sources[path], f"{path} seen half written: {got} of {want_sources[path]}"
    assert seen[-1] == want_sources
    assert counts(lake_db) == counts(eight_embedded)
    assert sources(lake_db) == sources(eight_embedded)
    assert len(sources(lake_db)) == len(EIGHT)
    assert duplicate_ids(lake_db) == {column: 0 for column, _ in AUTO_IDS.values()}
    with Store(lake_db, read_only=True) as store:  # nine processes opened the new store at once
        twice = "SELECT version FROM schema_version GROUP BY version HAVING count(*) > 1"
        assert store.con.execute(twice).fetchall() == [], "a schema file applied twice"


@pytest.mark.parametrize("lake_db", LAKE_DATA, indirect=True)
def test_the_same_file_from_three_processes_is_one_source(lake_db: str, tmp_path: Path) -> None:
    path = EIGHT[0]
    writers = [tracelog(lake_db, "ingest", str(path)) for _ in range(3)]
    outputs = []
    for writer in writers:
        code, output = finish(writer)
        assert code == 0, output
        outputs.append(output)
    assert sum("ingested as megatron" in o for o in outputs) == 1, outputs
    assert sum("already ingested" in o for o in outputs) == 2, outputs
    assert len(sources(lake_db)) == 1
    assert counts(lake_db) == counts(embedded(tmp_path, [path]))
    assert duplicate_ids(lake_db) == {column: 0 for column, _ in AUTO_IDS.values()}


def counters(store: Store) -> dict[str, int]:
    """The next id of each kind that the PostgreSQL catalog's sequences hand out."""
    found = {}
    for kind in lake.ID_KINDS:
        sql = f"SELECT * FROM postgres_query('{lake.METADATA}', '{lake.next_ids_sql(kind)}')"
        found[kind] = store.con.execute(sql).fetchall()[0][0]
    return found


def test_ids_come_from_postgresql_counters_and_no_id_is_given_twice(lake_db: str) -> None:
    """A PostgreSQL catalog hands ids out from its own sequences, in one statement, beside any transaction:
    ids taken by a transaction that rolls back are not given again, and nothing goes through `tracelog_ids`
    or the store's write lock."""
    with Store(lake_db) as store:
        assert counters(store) == {"source": 1, "run": 1, "bench": 1, "flag": 1}
        ids_before = dict(store.con.execute("SELECT kind, next_id FROM tracelog_ids").fetchall())
        with store.transaction(beside=(1,)):
            assert store.new_id("run") == 1
            assert store.new_id("run", 3) == 2
        with pytest.raises(ValueError), store.transaction():
            assert store.new_id("run") == 5
            raise ValueError("rolled back")
        with store.transaction():
            assert store.new_id("run") == 6
            assert store.new_id("source") == 1
        assert counters(store) == {"source": 2, "run": 7, "bench": 1, "flag": 1}
        ids_after = dict(store.con.execute("SELECT kind, next_id FROM tracelog_ids").fetchall())
        assert {k: v for k, v in ids_after.items() if k != lake.WRITES} == {
            k: v for k, v in ids_before.items() if k != lake.WRITES
        }


def test_a_store_made_before_the_counters_starts_them_where_its_ids_stand(
    lake_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store whose ids came from `tracelog_ids` (schema 14 and before) starts its PostgreSQL counters
    there when schema 15 is applied, so that no id it handed out is handed out again."""
    with monkeypatch.context() as old:
        old.setattr(lake, "COUNTERS_VERSION", 10**6)  # as a tracelog before schema 15 took its ids
        with Store(lake_db) as store:
            results = api.ingest(store, [str(EIGHT[1]), str(EIGHT[5])])
            assert [r.status for r in results] == ["ingested", "ingested"]
            ids = dict(store.con.execute("SELECT kind, next_id FROM tracelog_ids").fetchall())
            assert ids["source"] == 3 and ids["run"] > 1 and ids["bench"] > 1
            with store.transaction():
                store.con.execute("DELETE FROM schema_version WHERE version = 15")
            for kind in lake.ID_KINDS:
                drop = f"DROP SEQUENCE IF EXISTS {lake.sequence(kind)}"
                store.con.execute(f"CALL postgres_execute('{lake.METADATA}', '{drop}')")
    with Store(lake_db) as store:
        assert store.scalar("SELECT count(*) FROM schema_version WHERE version = 15") == 1  # applied again
        assert counters(store) == {kind: ids[kind] for kind in lake.ID_KINDS}
        assert [r.status for r in api.ingest(store, [str(EIGHT[0])])] == ["ingested"]
        assert store.scalar("SELECT max(source_id) FROM sources") == 3
    assert duplicate_ids(lake_db) == {column: 0 for column, _ in AUTO_IDS.values()}


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("lake-big") / "megatron-big.log"
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "generate_megatron_log.py"), str(BIG_LOG_MB), str(path)],
        check=True,
        capture_output=True,
    )
    return path


def parquet_files_of(request: pytest.FixtureRequest) -> Callable[[], set[str]]:
    """The Parquet files under the store's data path: in its folder, or objects under its S3 prefix."""
    data = os.environ["TRACELOG_DATA_PATH"]
    if data.startswith("s3://"):
        server = request.getfixturevalue("s3_server")
        return lambda: {key for key in server.keys(data) if key.endswith(".parquet")}
    return lambda: {str(p) for p in Path(data).rglob("*.parquet")}


@pytest.mark.parametrize("lake_db", LAKE_DATA, indirect=True)
@pytest.mark.parametrize("phase", ["parsing", "writing"])
def test_kill_9_of_a_writer_leaves_nothing_and_a_rerun_completes(
    phase: str,
    big_log: Path,
    lake_db: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    """A writer killed while it parses (its spool growing, nothing sent yet) or while its transaction
    writes Parquet files into the data path (not committed yet) leaves no trace in the store."""
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    monkeypatch.setenv("TMPDIR", str(spool_dir))
    parquet_files = parquet_files_of(request)
    assert tracelog(lake_db, "ingest", str(EIGHT[5])).wait(PROCESS_TIMEOUT_S) == 0  # the store exists
    before_files, before = parquet_files(), counts(lake_db)
    writer = tracelog(lake_db, "ingest", str(big_log))
    deadline = time.monotonic() + KILL_WAIT_S
    caught = False
    while writer.poll() is None and time.monotonic() < deadline:
        spooled = any(spool_dir.glob("tracelog-spool-*/*.batches"))
        written = bool(parquet_files() - before_files)
        if (phase == "parsing" and spooled and not written) or (phase == "writing" and written):
            os.kill(writer.pid, signal.SIGKILL)
            caught = True
            break
        time.sleep(0.002)
    writer.communicate(timeout=PROCESS_TIMEOUT_S)
    assert caught, f"the writer ended before it was seen {phase}"
    assert writer.returncode == -signal.SIGKILL
    if phase == "writing":
        assert parquet_files() - before_files, "killed before its transaction wrote anything"
    assert counts(lake_db) == before, "rows of the killed writer are visible"
    assert str(big_log) not in {path for path, _, _ in sources(lake_db)}
    rerun = tracelog(lake_db, "ingest", str(big_log))
    code, output = finish(rerun)
    assert code == 0 and "ingested as megatron" in output, output
    assert counts(lake_db) == counts(embedded(tmp_path, [EIGHT[5], big_log]))


@pytest.mark.parametrize("lake_db", LAKE_DATA, indirect=True)
def test_export_of_a_lake_store_has_every_table_with_its_rows(lake_db: str, tmp_path: Path) -> None:
    """`tracelog export --parquet` reads a DuckLake store as it reads the file: every table, every row."""
    assert tracelog(lake_db, "ingest", str(EIGHT[1]), str(EIGHT[5])).wait(PROCESS_TIMEOUT_S) == 0
    out = tmp_path / "export"
    code, output = finish(tracelog(lake_db, "export", "--parquet", str(out)))
    assert code == 0, output
    have = counts(lake_db)
    assert have["iterations"] > 10 and have["collectives"] > 10
    for table, rows in have.items():
        assert ds.dataset(out / table, format="parquet", partitioning="hive").count_rows() == rows, table


@pytest.mark.parametrize("lake_db", LAKE_DATA, indirect=True)
def test_the_readme_team_commands_run_on_a_lake(lake_db: str, tmp_path: Path) -> None:
    """The README's team block (which tests/test_docs.py leaves to this file), and on S3 its block for a
    bucket: its exports pointed at this test's store, the job's log a sample, each `tracelog` line run as
    written."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    on_s3 = os.environ["TRACELOG_DATA_PATH"].startswith("s3://")
    block = next(
        b
        for b in re.findall(r"^```sh\n(.*?)^```", readme, flags=re.S | re.M)
        if "export TRACELOG_DB=" in b and ("TRACELOG_DATA_PATH=s3://" in b) == on_s3
    )
    lines = [line.split("#")[0].strip() for line in block.splitlines()]
    commands = [shlex.split(line) for line in lines if line.startswith("tracelog ")]
    assert commands, "the team block has tracelog commands"
    (tmp_path / "slurm-4242.out").write_bytes((SAMPLES / "megatron_lm_llama3_8b_h100.log").read_bytes())
    env = dict(os.environ, TRACELOG_DB=lake_db, SLURM_JOB_ID="4242")
    for words in commands:
        words = [re.sub(r"\$(\w+)", lambda m: env[m.group(1)], w) for w in words]
        done = subprocess.run(
            [sys.executable, "-m", "tracelog", *words[1:]],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=PROCESS_TIMEOUT_S,
        )
        assert done.returncode == 0, done.stderr
    with Store(lake_db, read_only=True) as store:
        assert store.scalar("SELECT count(*) FROM sources WHERE path LIKE '%slurm-4242.out'") == 1
        assert store.scalar("SELECT count(*) FROM runs") == 2


def fits(frame: object) -> list[tuple[str, str, float]]:
    """(constant, scope, value to 9 significant digits: sums may run in another order on another backend)."""
    rows = frame[["constant", "scope", "value"]].itertuples(index=False)  # type: ignore[index]
    return sorted((c, s, float(f"{v:.9g}")) for c, s, v in rows)


@pytest.mark.parametrize("lake_db", LAKE_DATA, indirect=True)
def test_report_and_calibration_read_a_lake_as_they_read_a_file(lake_db: str, tmp_path: Path) -> None:
    """The report (opened read-only) and `calibrate` (a write of its own) give on a DuckLake store what
    they give on the embedded file holding the same files."""
    files = [str(SAMPLES / n) for n in ("megatron_lm_llama3_8b_h100.log", "nccl_all_reduce_8xa100.txt")]
    file_db = tmp_path / "same.duckdb"
    for db in (file_db, lake_db):
        with Store(db) as store:
            api.ingest(store, files)
    on_file = api.report(file_db, output=tmp_path / "file.html")
    on_lake = api.report(lake_db, output=tmp_path / "lake.html")
    assert on_lake.charts == on_file.charts > 0
    assert on_lake.sections == on_file.sections
    with Store(file_db) as store:
        fitted_file = fits(api.calibrate(store))
    with Store(lake_db) as store:
        fitted_lake = fits(api.calibrate(store))
        assert store.scalar("SELECT count(*) FROM calibrations") == len(fitted_lake)
    assert fitted_lake == fitted_file and fitted_file  # the same constants, fitted to the same values


def test_a_lake_keeps_its_cluster_facts_in_its_data_folder(
    lake_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cluster add` on a DuckLake store writes the tracelog.toml of its data folder, given on the command
    line; later commands find it with no data path given at all (the store recorded its own)."""
    data = Path(os.environ["TRACELOG_DATA_PATH"])
    monkeypatch.delenv("TRACELOG_DATA_PATH")
    add = subprocess.run(
        [
            sys.executable,
            "-m",
            "tracelog",
            "--db",
            lake_db,
            "--data-path",
            str(data),
            "cluster",
            "add",
            "lab",
            "--gpu",
            "a100-sxm4-80gb",
            "--gpus-per-node",
            "8",
            "--host",
            "node-*",
        ],
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
    )
    assert add.returncode == 0, add.stderr
    assert "[cluster.lab]" in (data / "tracelog.toml").read_text(encoding="utf-8")
    listed = subprocess.run(
        [sys.executable, "-m", "tracelog", "--db", lake_db, "cluster", "list", "--format", "csv"],
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
    )
    assert listed.returncode == 0, listed.stderr
    assert "lab,a100-sxm4-80gb,8" in listed.stdout
