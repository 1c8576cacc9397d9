"""Comparing, tagging, noting, renaming and removing runs, from the library and the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import SAMPLES
from tracelog import api
from tracelog.cli import cli
from tracelog.errors import TracelogError

LLAMA = str(SAMPLES / "megatron_lm_llama3_8b_h100.log")
BLOOM = str(SAMPLES / "megatron_deepspeed_bloom_ugly.log")


@pytest.fixture
def db(any_db: Path | str) -> Path | str:
    """Two ingests, on each backend: the embedded file and a DuckLake store."""
    path = any_db
    api.ingest(path, [BLOOM], name="bloom")
    api.ingest(path, [LLAMA], name="llama")
    return path


def test_compare_shows_only_differences_and_ratios_against_the_first(db: Path) -> None:
    parts = api.compare_runs(db, ["bloom", "llama.0"])
    config = parts["configuration"].set_index("parameter")
    assert "tp" not in config.index  # both runs use TP 4: not a difference
    assert config.loc["pp", "run 1"] == "12" and config.loc["pp", "run 2"] == "1"
    assert "arg:swiglu" in config.index and "name" in config.index
    metrics = parts["metrics"].set_index("metric")
    sec_bloom, sec_llama = metrics.loc["sec_per_it", "run 1"], metrics.loc["sec_per_it", "run 2"]
    assert metrics.loc["sec_per_it", "× 2"] == pytest.approx(sec_llama / sec_bloom)
    assert metrics.loc["sec_per_it", "Δ 2"] == pytest.approx(sec_llama - sec_bloom)
    assert metrics.loc["sec_per_it", "better"] == "lower"


def test_compare_all_lists_every_parameter(db: Path) -> None:
    few = api.compare_runs(db, ["bloom", "llama.0"])["configuration"]
    every = api.compare_runs(db, ["bloom", "llama.0"], all_params=True)["configuration"]
    assert len(every) > len(few)
    assert "tp" in set(every.parameter)


def test_loss_is_compared_at_an_iteration_both_runs_reached(db: Path) -> None:
    metrics = api.compare_runs(db, ["llama.0", "llama.1"])["metrics"].set_index("metric")
    (label,) = [m for m in metrics.index if m.startswith("lm_loss at iteration")]
    assert label == "lm_loss at iteration 200"  # run llama.1 (the restart) starts at 210: its loss is absent
    assert pd_isna(metrics.loc[label, "run 3"])


def pd_isna(value: object) -> bool:
    return value is None or value != value


def test_compare_needs_two_runs(db: Path) -> None:
    with pytest.raises(TracelogError, match="at least two"):
        api.compare_runs(db, ["bloom", "1"])


def test_tag_untag_note_rename(db: Path) -> None:
    api.tag_run(db, "bloom", {"exp": "topo", "owner": "ana"})
    assert list(api.runs(db, tags={"exp": "topo"}).name) == ["bloom"]
    assert api.untag_run(db, "bloom", ["owner", "missing"]) == 1
    api.note_run(db, "bloom", "first try")
    api.note_run(db, "bloom", "NCCL timeout at the end")
    assert api.sql(db, "SELECT notes FROM runs WHERE name = 'bloom'").notes[0] == (
        "first try\nNCCL timeout at the end"
    )
    api.rename_run(db, "bloom", "bloom-176b-tp4pp12")
    assert api.resolve_run(api.connect(db), "bloom-176b") == 1


def test_ambiguous_prefix_lists_candidates(db: Path) -> None:
    with pytest.raises(TracelogError) as err:
        api.resolve_run(api.connect(db), "llama")
    assert "2: llama.0" in str(err.value) and "3: llama.1" in str(err.value)


def test_rm_asks_then_removes_every_row(db: Path) -> None:
    runner = CliRunner()
    refused = runner.invoke(cli, ["--db", str(db), "rm", "bloom"], input="n\n")
    assert refused.exit_code == 1
    assert api.sql(db, "SELECT count(*) AS n FROM iterations WHERE run_id = 1").n[0] == 40
    done = runner.invoke(cli, ["--db", str(db), "rm", "bloom", "--yes"])
    assert done.exit_code == 0 and "removed run 1 (bloom)" in done.output
    for table in ("iterations", "timers", "memory", "run_params"):
        assert api.sql(db, f"SELECT count(*) AS n FROM {table} WHERE run_id = 1").n[0] == 0
    assert api.sql(db, "SELECT count(*) AS n FROM runs").n[0] == 2


def test_cli_compare_markdown(db: Path) -> None:
    result = CliRunner().invoke(cli, ["--db", str(db), "compare", "bloom", "llama.0", "--format", "markdown"])
    assert result.exit_code == 0
    assert "### configuration" in result.output and "### metrics" in result.output
