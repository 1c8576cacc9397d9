"""Shapes of published checkpoints looked up by the name a log gives (`parsers.checkpoints`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from tracelog import api
from tracelog.cli import cli
from tracelog.model.flops import ModelConfig, params_from_config
from tracelog.parsers.checkpoints import FAMILIES, Checkpoint, checkpoint, fill_run

from .conftest import SAMPLES


@pytest.mark.parametrize(
    ("name", "layers", "hidden", "groups"),
    [
        ("meta-llama/Llama-2-7b-hf", 32, 4096, 32),
        ("meta-llama/Llama-2-70b-chat-hf", 80, 8192, 8),
        ("/checkpoints/hf/Meta-Llama-3-8B-Instruct/", 32, 4096, 8),
        ("meta-llama/Llama-3.1-405B", 126, 16384, 8),
        ("meta-llama/Llama-3.3-70B-Instruct", 80, 8192, 8),
        ("'meta-llama/Llama-3.2-3B'", 28, 3072, 8),
        ("mistralai/Mistral-7B-Instruct-v0.2", 32, 4096, 8),
        ("Qwen/Qwen2.5-0.5B-Instruct", 24, 896, 2),
        ("Qwen/Qwen2-72B", 80, 8192, 8),
        ("Qwen/Qwen3-4B", 36, 2560, 8),
    ],
)
def test_a_checkpoint_is_known_by_its_id_or_folder_whatever_its_variant(
    name: str, layers: int, hidden: int, groups: int
) -> None:
    found = checkpoint(name)
    assert found is not None and (found.layers, found.hidden, found.query_groups) == (layers, hidden, groups)


@pytest.mark.parametrize(
    "name",
    [
        "meta-llama/Llama-2-34b-hf",  # never released: no size of its family
        "mistralai/Mistral-7B-v0.3",  # a larger vocabulary the table does not hold
        "Qwen/Qwen2.5-Coder-7B",
        "codellama/CodeLlama-7b-hf",
        "gpt2",
        "",
    ],
)
def test_a_name_the_table_does_not_hold_gives_no_shape(name: str) -> None:
    assert checkpoint(name) is None


def _count(found: Checkpoint) -> int:
    config = ModelConfig(
        layers=found.layers,
        hidden=found.hidden,
        heads=found.heads,
        seq_len=4096,
        vocab=found.vocab,
        ffn_hidden=found.ffn_hidden,
        query_groups=found.query_groups,
        kv_channels=found.kv_channels,
        swiglu=True,
        tied_embeddings=found.tied is not False,
        learned_positions=False,
        bias=False,
        rms_norm=True,
    )
    return params_from_config(config)


@pytest.mark.parametrize(
    ("pattern", "size", "found"),
    [(pattern.pattern, size, found) for pattern, sizes in FAMILIES for size, found in sizes.items()],
)
def test_every_shape_counts_the_size_its_name_gives(pattern: str, size: str, found: Checkpoint) -> None:
    """A mistyped width or depth moves the count far off the size in the checkpoint's name: every row
    counts within 10 % of it (Llama 2 7B counts 6.74 B, Qwen2.5 7B 7.62 B), or a quarter of a billion
    below 4 B (Llama 3.2 1B counts 1.24 B)."""
    billions = float(size)
    assert _count(found) / 1e9 == pytest.approx(billions, abs=max(0.1 * billions, 0.25))


def test_the_log_keeps_what_it_stated_and_the_checkpoint_fills_the_rest() -> None:
    said = [{"name": "model_name", "value": "meta-llama/Llama-3.2-1B", "line_no": 12}]
    stated = {"run_params": list(said), "vocab": 128258, "seq_len": 2048}
    fill_run(stated, ("model.pretrained_model_name_or_path", "model_name"))
    assert (stated["layers"], stated["hidden"], stated["vocab"], stated["seq_len"]) == (
        16,
        2048,
        128258,
        2048,
    )
    params = {p["name"]: (p["value"], p["line_no"]) for p in stated["run_params"]}
    assert params["untie_embeddings_and_output_weights"] == ("False", 12)
    assert "kv_channels" not in params
    shaped = {"run_params": [{"name": "model_name", "value": "Qwen/Qwen3-8B", "line_no": 3}], "hidden": 1024}
    fill_run(shaped, ("model_name",))
    assert "layers" not in shaped and len(shaped["run_params"]) == 1  # the log's own shape wins whole


def test_the_automodel_sample_is_priced_by_its_checkpoints_shape(tmp_path: Path) -> None:
    """The invented NeMo Automodel sample names `meta-llama/Llama-3.2-1B` and prints no shape; its run now
    gets one, and the shape's parameter count is the one the log prints (`Trainable parameters`)."""
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(SAMPLES / "nemo_automodel_llama3_2_1b_sft_h100.log")])
    (run,) = api.runs(db).to_dict("records")
    assert (run["layers"], run["hidden"], run["heads"], run["vocab"]) == (16, 2048, 32, 128256)
    assert run["sec_per_it_predicted"] > 0
    found = checkpoint("meta-llama/Llama-3.2-1B")
    assert found is not None and _count(found) == run["params"] == 1_235_814_400
    assert re.search(
        r"Trainable parameters: +1,235,814,400",
        (SAMPLES / "nemo_automodel_llama3_2_1b_sft_h100.log").read_text(),
    )


def test_set_model_gives_a_run_its_checkpoints_shape_and_prices_it_again(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(SAMPLES / "nemo_automodel_llama3_2_1b_sft_h100.log")])
    before = api.runs(db).sec_per_it_predicted.iloc[0]
    runner = CliRunner()
    result = runner.invoke(cli, ["--db", str(db), "set", "1", "--model", "Qwen/Qwen2.5-7B-Instruct"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("run 1: updated;")
    (run,) = api.runs(db).to_dict("records")
    assert (run["layers"], run["hidden"], run["heads"], run["vocab"]) == (28, 3584, 28, 152064)
    assert run["sec_per_it_predicted"] > 4 * before  # 7.6 B parameters where there were 1.2 B
    params = dict(api.sql(db, "SELECT name, value FROM run_params WHERE run_id = 1").values.tolist())
    assert params["shape_from"] == "checkpoint Qwen/Qwen2.5-7B-Instruct (tracelog set)"
    assert params["untie_embeddings_and_output_weights"] == "True"  # Llama 3.2 1B's tied, replaced

    unknown = runner.invoke(cli, ["--db", str(db), "set", "1", "--model", "acme/SuperLM-9B"])
    assert unknown.exit_code == 1
    assert (
        "no published checkpoint known by the name 'acme/SuperLM-9B'; tracelog knows Llama 2"
        in unknown.output
    )
    bench = runner.invoke(cli, ["--db", str(db), "set", "bench:1", "--model", "meta-llama/Llama-2-7b-hf"])
    assert bench.exit_code == 1 and "a bench trains nothing" in bench.output


def _seconds(frame: pd.DataFrame) -> float:
    return float(frame.set_index("metric").loc["sec_per_it", "value"])


def test_predict_model_is_the_checkpoints_shape_and_an_option_still_wins() -> None:
    layout = {"gpu": "h100-sxm5-80gb", "seq_len": 4096, "gbs": 64, "mbs": 2, "dp": 8, "zero_stage": 3}
    named = api.predict(None, checkpoint="mistralai/Mistral-7B-v0.1", **layout)
    spelt = api.predict(
        None,
        **layout,
        **{"layers": 32, "hidden": 4096, "heads": 32, "query_groups": 8, "ffn_hidden": 14336},
        **{"vocab": 32000, "swiglu": True},
        run_params={
            "position_embedding_type": "rope",
            "normalization": "RMSNorm",
            "add_bias_linear": "False",
            "untie_embeddings_and_output_weights": "True",
        },
    )
    assert _seconds(named) == pytest.approx(_seconds(spelt), rel=1e-12)
    shallower = api.predict(None, checkpoint="mistralai/Mistral-7B-v0.1", layers=16, **layout)
    assert _seconds(shallower) < 0.6 * _seconds(named)


def test_plan_model_plans_the_checkpoints_shape(tmp_path: Path) -> None:
    args = ["--gpus", "64", "--gpu", "h100-sxm5-80gb", "--seq", "4096", "--gbs", "256", "--top", "3"]
    runner = CliRunner()
    db = ["--db", str(tmp_path / "none.duckdb")]
    named = runner.invoke(
        cli, [*db, "plan", *args, "--model", "meta-llama/Meta-Llama-3-8B", "--format", "json"]
    )
    assert named.exit_code == 0, named.output
    expected = api.plan(
        None,
        api.PlanRequest(
            gpus=64, gpu="h100-sxm5-80gb", seq_len=4096, gbs=256, top=3, layers=32, hidden=4096, heads=32,
            query_groups=8, ffn_hidden=14336, vocab=128256, swiglu=True, dropout=False,
            tied_embeddings=False, llama_block=True,
        ),
    )  # fmt: skip
    rows = json.loads(named.stdout)  # the notes go to stderr
    assert [r["pred_sec_per_it"] for r in rows] == pytest.approx(expected.pred_sec_per_it.tolist())
    assert [[r["dp"], r["tp"], r["pp"], r["mbs"]] for r in rows] == expected[
        ["dp", "tp", "pp", "mbs"]
    ].values.tolist()

    neither = runner.invoke(cli, [*db, "plan", *args])
    assert neither.exit_code == 1 and "give the model: --model CHECKPOINT, or --layers" in neither.output


def test_ingest_model_stands_for_the_runs_shape_and_an_unknown_one_reads_nothing(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    log = str(SAMPLES / "nemo_automodel_llama3_2_1b_sft_h100.log")
    runner = CliRunner()
    unknown = runner.invoke(cli, ["--db", str(db), "ingest", log, "--model", "acme/SuperLM-9B"])
    assert (
        unknown.exit_code == 1
        and "no published checkpoint known by the name 'acme/SuperLM-9B'" in unknown.output
    )
    assert not db.exists() or api.sql(db, "SELECT count(*) AS n FROM sources").n.iloc[0] == 0
    landed = runner.invoke(cli, ["--db", str(db), "ingest", log, "--model", "Qwen/Qwen2.5-1.5B"])
    assert landed.exit_code == 0, landed.output
    (run,) = api.runs(db).to_dict("records")
    assert (run["layers"], run["hidden"], run["heads"], run["vocab"]) == (28, 1536, 12, 151936)
    params = dict(api.sql(db, "SELECT name, value FROM run_params WHERE run_id = 1").values.tolist())
    assert params["shape_from"] == "checkpoint Qwen/Qwen2.5-1.5B (ingest --model)"
    assert "untie_embeddings_and_output_weights" not in params  # Llama 3.2 1B's, which Qwen's does not say
