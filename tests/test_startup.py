"""`tracelog runs`, `flags`, `sql` and `show` start with the store and the tables only.

On a big store most of what these commands cost is Python loading modules: the parsers (with Polars
and protobuf), the ingest path and the report (Altair) were a second of CPU before the first query. The
guard counts modules, not seconds: a fresh interpreter runs the command on a small store and says which
of the heavy modules it loaded.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SAMPLES
from tracelog import api
from tracelog.cli.base import COMMAND_MODULES, cli
from tracelog.parsers.base import prefetched

HEAVY = (
    "pandas",  # half of a reading command's start-up: a printed table is built from plain rows
    "pyarrow",  # with numpy, 0.05 s: loaded by what writes to the store
    "pyarrow.compute",  # 0.05 s more, imported by DuckDB 1.5 at the first Arrow scan (`cli.probes`)
    "tracelog.analysis.refresh",  # the model and the rules: loaded only when a refresh is owed
    "altair",
    "vl_convert",
    "polars",
    "tracelog.parsers",
    "tracelog.ingest",
    "tracelog.api",
    "tracelog.report",
    "tracelog.cli.logs",
    "tracelog.cli.intake",
    "tracelog.cli.model",
)
LOADED = """
import json, sys
from tracelog.cli import cli
try:
    cli.main(sys.argv[1:], prog_name="tracelog", standalone_mode=False)
finally:
    heavy = {heavy!r}
    print(json.dumps(sorted(m for m in heavy if m in sys.modules)), file=sys.stderr)
"""


@pytest.fixture(scope="module")
def small_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("startup") / "small.duckdb"
    api.ingest(db, [str(SAMPLES / "megatron_lm_llama3_8b_h100.log")])
    return db


def loaded(db: Path, *args: str) -> tuple[list[str], str]:
    """The heavy modules a fresh `tracelog --db DB ARGS...` loaded, and what it printed."""
    code = LOADED.format(heavy=HEAVY)
    done = subprocess.run(
        [sys.executable, "-c", code, "--db", str(db), *args], capture_output=True, text=True, check=True
    )
    return json.loads(done.stderr.strip().splitlines()[-1]), done.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("runs",),
        ("flags",),
        ("sql", "SELECT count(*) AS n FROM iterations"),
        ("show", "1"),
        ("show", "1", "--iterations", "--limit", "3"),
    ],
    ids=" ".join,
)
def test_reading_commands_load_no_parser_polars_or_report(small_db: Path, args: tuple[str, ...]) -> None:
    heavy, out = loaded(small_db, *args)
    assert heavy == []
    assert out.strip(), "the command printed nothing: the modules counted are not those of a real answer"


def test_the_guard_sees_a_command_that_needs_the_parsers(small_db: Path) -> None:
    """`ingest` must load the parsers: were the check blind (a wrong module name, output lost), this
    fails. It goes without the library surface (`api`: the planner, the report's queries, the export), and
    a file already ingested, whose refresh is not owed, without the refresh."""
    heavy, _ = loaded(small_db, "ingest", str(SAMPLES / "megatron_lm_llama3_8b_h100.log"))
    assert {"tracelog.parsers", "tracelog.ingest", "tracelog.cli.intake"} <= set(heavy)
    assert not {"tracelog.api", "tracelog.cli.logs", "tracelog.analysis.refresh"} & set(heavy)


def test_a_store_owing_a_refresh_loads_it_and_is_refreshed(tmp_path: Path) -> None:
    """The refresh is skipped at start-up only because none is owed: a store whose last ingest was killed
    before its refresh gets it from the next reading command."""
    db = tmp_path / "owed.duckdb"
    api.ingest(db, [str(SAMPLES / "megatron_lm_llama3_8b_h100.log")])
    store = api.connect(db)
    store.con.execute("UPDATE sources SET refresh_pending = true")
    store.con.execute("DELETE FROM predictions")
    store.close()
    heavy, out = loaded(db, "runs", "--format", "csv")
    assert "tracelog.analysis.refresh" in heavy
    store = api.connect(db, read_only=True)
    assert store.scalar("SELECT count(*) FROM sources WHERE refresh_pending") == 0
    assert store.scalar("SELECT count(*) FROM predictions") > 0
    store.close()


def test_the_library_and_the_ingest_command_load_without_pandas() -> None:
    """pandas is 0.3 s of start-up; the modules only load it where they return a DataFrame. (Ingest
    itself runs without it on DuckDB 2.0; DuckDB 1.5 imports it to bind a parameter.)"""
    code = (
        "import sys, tracelog.api, tracelog.cli.logs, tracelog.cli.intake, tracelog.analysis.refresh; "
        "print('pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_an_ingest_and_the_ingest_of_its_growth_load_no_pandas(tmp_path: Path) -> None:
    """DuckDB 1.5 imports pandas (and `pyarrow.dataset`, which imports it) to bind the first parameter
    and at the first Arrow scan, 0.2-0.3 s of the ingest of a log's last 5 %, and `pyarrow.compute` at
    that scan too; the ingest command refuses it those imports (`cli.probes`), with the same rows."""
    lines = (SAMPLES / "megatron_lm_llama3_8b_h100.log").read_text().splitlines(keepends=True)
    log = tmp_path / "live.log"
    log.write_text("".join(lines[: len(lines) // 2]))
    db = tmp_path / "grown.duckdb"
    heavy_first, first = loaded(db, "ingest", str(log))
    with log.open("a") as growing:
        growing.write("".join(lines[len(lines) // 2 :]))
    heavy_grown, grown = loaded(db, "ingest", str(log))
    assert "ingested as megatron" in first and "appended as megatron" in grown
    assert "pyarrow" in heavy_first and "pyarrow" in heavy_grown  # the batches did go through Arrow
    for probed in ("pandas", "pyarrow.compute"):
        assert probed not in heavy_first and probed not in heavy_grown
    whole = tmp_path / "whole.duckdb"
    api.ingest(whole, [str(log)])
    for query in (
        "SELECT * EXCLUDE (run_id) FROM iterations ORDER BY line_no",
        "SELECT rule, severity, row_ref, message FROM flags ORDER BY ALL",
    ):
        assert api.sql(db, query).equals(api.sql(whole, query))


UNDER_THE_GUARD = """
import sys, duckdb
from tracelog.cli.probes import refused_to_native_code
from tracelog.store import Store
with refused_to_native_code():
    store = Store(":memory:")
    store.scalar("SELECT ?", [1])
    probed = "pandas" in sys.modules or "pyarrow.dataset" in sys.modules
    frame = store.query("SELECT 41 + ? AS answer", [1])  # imports pandas itself
    import pyarrow.dataset
    print(probed, type(frame).__name__, int(frame.answer[0]), "pyarrow.dataset" in sys.modules)
"""


def test_under_the_guard_python_still_imports_pandas_and_duckdb_only_is_refused() -> None:
    done = subprocess.run([sys.executable, "-c", UNDER_THE_GUARD], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "DataFrame", "42", "True"]


def test_every_command_is_where_the_group_looks_for_it() -> None:
    """A command registered by a module but missing from COMMAND_MODULES would be absent from
    `tracelog --help` and unknown to `tracelog NAME`; one listed but never defined would fail there."""
    for module in COMMAND_MODULES:
        importlib.import_module(module)
    listed = sorted(name for names in COMMAND_MODULES.values() for name in names)
    assert sorted(cli.commands) == listed


def test_help_lists_every_command_as_click_would_without_loading_them(small_db: Path) -> None:
    """`tracelog --help` reads each command's line from its module's source; it must print what the
    loaded commands themselves would, and load none of the heavy modules to do it."""
    heavy, lazy = loaded(small_db, "--help")
    assert heavy == []
    every = "import importlib; from tracelog.cli.base import COMMAND_MODULES; "
    every += "[importlib.import_module(m) for m in COMMAND_MODULES]; "
    every += "from tracelog.cli import cli; cli.main(['--help'], prog_name='tracelog')"
    loaded_help = subprocess.run([sys.executable, "-c", every], capture_output=True, text=True).stdout
    assert lazy.splitlines() == loaded_help.splitlines()
    assert all(f"  {name} " in lazy for names in COMMAND_MODULES.values() for name in names)


def test_a_mistyped_command_is_still_answered_with_the_close_ones() -> None:
    """In a fresh process no command module is loaded yet: the suggestion must come from every name."""
    done = subprocess.run([sys.executable, "-m", "tracelog", "rns"], capture_output=True, text=True)
    assert done.returncode == 2
    assert "No such command 'rns'. Did you mean 'runs'?" in done.stderr


COLLECTED_WHILE_LOADING = """
import gc
from tracelog.cli import cli
cli.freeze_loaded = True  # as `tracelog` sets it
collections = []
gc.callbacks.append(lambda phase, info: phase == "start" and collections.append(info["generation"]))
cli.get_command(None, "ingest")  # loads the parsers, Polars, the ingest, the model and the rules
print(len(collections), gc.isenabled(), gc.get_freeze_count() > 10000)
"""


def test_a_command_module_loads_without_garbage_collections() -> None:
    """Loading an ingest's modules ran some 100 collections that walked what was loaded so far (0.06-0.08 s
    of the 0.5 s it takes) and found next to nothing: the group loads a command's module with the collector
    off, freezes what it loaded, and turns the collector back on."""
    done = subprocess.run([sys.executable, "-c", COLLECTED_WHILE_LOADING], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "True", "True"]


FROZEN_AT_EXIT = """
import atexit, gc, sys
frozen = []
real_freeze = gc.freeze
# when: once the command's module is loaded (before it runs), and at exit
gc.freeze = lambda: (frozen.append("tracelog.cli.reads" in sys.modules), real_freeze())
# registered before the command's own handlers, so it runs after them: what the interpreter tears down then
atexit.register(lambda: print(f"frozen {frozen}", file=sys.stderr))
from tracelog.cli import main
sys.argv = ["tracelog", *sys.argv[1:]]
main()
"""


def test_a_command_freezes_what_it_leaves_at_exit(small_db: Path) -> None:
    """The interpreter's collections while it tears down its modules walked every object left (0.4-1.0 s
    of an ingest's exit on 2 cores): the command freezes them last thing, after the store is closed; and
    what its module loaded, once loaded, which a full collection during an ingest walked too."""
    done = subprocess.run(
        [sys.executable, "-c", FROZEN_AT_EXIT, "--db", str(small_db), "runs"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "megatron_lm" in done.stdout  # the command ran as ever
    assert done.stderr.strip().splitlines()[-1] == "frozen [True, True]"


BLAS_AT_NUMPY = """
import os, sys
from tracelog.cli import main
sys.argv = ["tracelog", "--version"]
try:
    main()
except SystemExit:
    pass
before = len(os.listdir("/proc/self/task"))
import numpy  # as pyarrow imports it for the first write
print(os.environ.get("OPENBLAS_NUM_THREADS"), len(os.listdir("/proc/self/task")) - before)
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="threads counted in /proc")
@pytest.mark.parametrize(("given", "kept"), [(None, "1"), ("3", "3")])
def test_a_command_starts_no_blas_threads_unless_told_to(given: str | None, kept: str) -> None:
    """OpenBLAS started a thread per core when numpy loaded, each spinning 0.1 s for work that never came
    (0.1 s of CPU of every ingest, on 2 cores): a command runs it on one thread, unless the user set it."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    done = subprocess.run(
        [sys.executable, "-c", BLAS_AT_NUMPY], capture_output=True, text=True, env=env, check=True
    )
    value, started = done.stdout.split()[-2:]
    assert value == kept
    if given is None:
        assert started == "0"


def test_meanwhile_runs_while_the_worker_produces_its_first_item() -> None:
    """`prefetched(meanwhile=)`: the caller's thread does its own work (an ingest loads the refresh there)
    once the worker has started, before it waits for the first item: here the first item waits for it."""
    started = threading.Event()

    def items() -> Iterator[int]:
        assert started.wait(timeout=10), "meanwhile ran only after the first item"
        yield from range(3)

    assert list(prefetched(items(), 1, meanwhile=started.set)) == [0, 1, 2]


def test_the_refresh_loads_while_a_grown_log_is_parsed(tmp_path: Path) -> None:
    """The refresh (the model, the rules: some 70 ms of imports) is loaded while the parser reads the first
    block, not before the ingest starts."""
    lines = (SAMPLES / "megatron_lm_llama3_8b_h100.log").read_text().splitlines(keepends=True)
    log, db = tmp_path / "live.log", tmp_path / "t.duckdb"
    log.write_text("".join(lines[: len(lines) // 2]))
    api.ingest(db, [str(log)])
    log.write_text("".join(lines))
    code = (
        "import sys\nfrom tracelog.parsers import base\nfrom tracelog import intake\n"
        "real = base.prefetched\nseen = []\n"
        "def spy(items, depth, meanwhile=None):\n"
        "    seen.append((meanwhile is not None, 'tracelog.analysis.refresh' in sys.modules))\n"
        "    return real(items, depth, meanwhile)\n"
        "import tracelog.ingest\ntracelog.ingest.prefetched = spy\n"
        f"print(intake.ingest({str(db)!r}, [{str(log)!r}])[0].status, seen[-1])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split(maxsplit=1) == ["appended", "(True, False)\n"]
