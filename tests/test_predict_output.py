"""`tracelog predict --format json`: every row carries a stable `metric` id, the predictions-table name,
beside the human label, for a configuration and for a stored run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import SAMPLES
from tracelog import api
from tracelog.cli import cli

BLOOM_LOG = str(SAMPLES / "megatron_deepspeed_bloom_ugly.log")
# The BLOOM-176B layout (BigScience tr11): 70 layers, hidden 14336, 112 heads, TP 4, PP 12, DP 8.
BLOOM_CONFIG = (
    *("--gpu", "a100-sxm4-80gb", "--layers", "70", "--hidden", "14336", "--heads", "112"),
    *("--seq", "2048", "--vocab", "250880", "--gbs", "2048", "--mbs", "2"),
    *("--tp", "4", "--pp", "12", "--dp", "8", "--recompute", "full", "--zero", "1"),
)


def predict_json(db: Path, *args: str) -> list[dict]:
    result = CliRunner().invoke(cli, ["--db", str(db), "predict", *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_configuration_rows_carry_stable_metric_ids(tmp_path: Path) -> None:
    rows = predict_json(tmp_path / "x.duckdb", *BLOOM_CONFIG)
    by_label = {r["figure"]: r["metric"] for r in rows}
    assert by_label["seconds per iteration"] == "sec_per_it"
    assert by_label["MFU (model FLOPs over dense peak)"] == "mfu"
    assert by_label["GPU capacity"] == "gpu_capacity_mib"  # the table's name; `unit` says GiB
    # The FLOPs rows: one id per formula, the formula the label names.
    flops = [r for r in rows if r["section"] == "flops" and r["figure"].startswith("FLOPs per iteration")]
    assert {r["metric"] for r in flops} >= {"flops_narayanan-96", "flops_narayanan-72", "flops_6nd"}
    for r in flops:
        assert r["metric"] == "flops_" + r["figure"].rsplit(", ", 1)[1]
    notes = [r for r in rows if r["section"] == "inputs"]
    assert notes and all(r["metric"] == f"inputs_{r['figure']}" for r in notes)
    figures = [r["metric"] for r in rows if r["section"] != "inputs"]
    assert len(figures) == len(set(figures))  # an id names one row
    assert not (tmp_path / "x.duckdb").exists()


def test_stored_run_ids_are_the_predictions_table_names(tmp_path: Path) -> None:
    db = tmp_path / "bloom.duckdb"
    api.ingest(db, [BLOOM_LOG], gpu="a100-sxm4-80gb", nodes=48, gpus_per_node=8)
    run_id = int(api.sql(db, "SELECT run_id FROM runs")["run_id"].iloc[0])
    stored = api.sql(
        db,
        "SELECT metric, formula, value FROM predictions "
        f"WHERE subject_kind = 'run' AND subject_id = {run_id} AND value IS NOT NULL",
    )
    names = {
        f"flops_{r.formula}" if r.metric == "flops_per_iteration" else r.metric: r.value
        for r in stored.itertuples()
    }
    rows = [r for r in predict_json(db, str(run_id)) if r["section"] != "inputs"]
    assert rows and {r["metric"] for r in rows} <= set(names)
    seconds = {r["metric"]: r["value"] for r in rows if r["unit"] == "s"}
    assert "sec_per_it" in seconds
    for metric, value in seconds.items():  # same inputs, same model: the stored value
        assert value == pytest.approx(names[metric], rel=1e-9), metric


def test_set_refuses_nodes_its_gpus_do_not_fill(tmp_path: Path) -> None:
    # the BLOOM sample's 384 GPUs: 48 nodes of 8, not 3
    db = tmp_path / "t.duckdb"
    api.ingest(db, [BLOOM_LOG])
    runner = CliRunner()
    bad = runner.invoke(cli, ["--db", str(db), "set", "1", "--nodes", "3", "--gpus-per-node", "8"])
    assert bad.exit_code == 1 and "run 1 has 384 GPUs: they do not take 3 node(s) of 8 GPUs" in bad.output
    assert api.sql(db, "SELECT nodes FROM runs WHERE run_id = 1").nodes.isna().all()
    good = runner.invoke(cli, ["--db", str(db), "set", "1", "--nodes", "48", "--gpus-per-node", "8"])
    assert good.exit_code == 0
    assert api.sql(db, "SELECT nodes, gpus_per_node FROM runs WHERE run_id = 1").values.tolist() == [[48, 8]]
