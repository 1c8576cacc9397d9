"""The second held-out set (benchmarks/heldout2_runs.toml): every row sourced, its layout and shape consistent
with the published figures it quotes, and scored on a line of its own."""

from __future__ import annotations

import pytest

from tests.test_fidelity_data import HELDOUT, MOE, RUNS, fidelity

HELDOUT2 = fidelity.load_data(fidelity.HELDOUT2)["run"]
FOUNDRY = [r for r in HELDOUT2 if r["id"].startswith("foundry-")]
FLASH = [r for r in HELDOUT2 if r["id"].startswith("fa-")]
TITAN = fidelity.load_data(fidelity.TORCHTITAN)["run"]

# llm-foundry's MFU (scripts/train/benchmarking/README.md, "MFU and HFU") divides by the GPU's dense BF16 peak,
# as collect_results.py takes it from Composer's `speed_monitor.GPU_AVAILABLE_FLOPS`: A100 312 TFLOP/s, H100 SXM
# 989 TFLOP/s.
PEAK_FLOPS = {"a100-sxm4-80gb": 312e12, "a100-sxm4-40gb": 312e12, "h100-sxm5-80gb": 989e12}


def test_every_row_is_new_and_quotes_its_source():
    ids = [r["id"] for r in HELDOUT2]
    earlier = {r["id"] for r in RUNS + HELDOUT + MOE + TITAN}
    assert len(ids) == len(set(ids)) and not set(ids) & earlier
    assert 15 <= len(HELDOUT2) <= 30 and FOUNDRY and FLASH
    for run in HELDOUT2:
        assert run["group"] and run["note"], run["id"]
        assert "'|" in run["source"] and "@" in run["source"], run["id"]  # a table row, quoted, at a commit
        assert run.get("sec_per_it") or run.get("tokens_per_sec_per_gpu"), run["id"]


@pytest.mark.parametrize("run", HELDOUT2, ids=lambda r: r["id"])
def test_layout_is_consistent(run):
    assert run["tp"] * run["pp"] * run["dp"] * run.get("cp", 1) == run["gpus"]
    assert run["gbs"] % (run["dp"] * run["mbs"]) == 0
    assert run["hidden"] % run["heads"] == 0
    assert run["zero_stage"] in (0, 1, 2, 3)
    assert run["framework"] == ("composer" if run["id"].startswith("foundry-") else "hf-trainer")


@pytest.mark.parametrize("run", FOUNDRY, ids=lambda r: r["id"])
def test_mpt_rows_carry_the_mixed_precision_and_attention_their_sources_name(run):
    """The table's MP Mode column is the run's `fsdp_config.mixed_precision` (Composer's DEFAULT reduces the
    gradients in fp32); the attention implementation is the one the benchmark script ran (`--attn_impl`)."""
    mode = run["source"].split(" | ")[15]
    assert mode in ("DEFAULT", "PURE") and run["fsdp_config.mixed_precision"] == mode
    impl = run["model.attn_config.attn_impl"]
    assert f"'--attn_impl {impl}'" in run["source"] and f"attn_impl '{impl}'" in run["note"]


@pytest.mark.parametrize("run", FLASH, ids=lambda r: r["id"])
def test_flash_attention_rows_ran_flashattention_1(run):
    """The FlashAttention repository's training table predates FlashAttention-2 (4a6eaa9f, 2022-11-29)."""
    assert run["attention_kernel"] == "flash-attn-1" and "2022-11-29" in run["note"]


@pytest.mark.parametrize("run", FOUNDRY, ids=lambda r: r["id"])
def test_mpt_shape_gives_the_printed_parameter_count(run):
    # MPT: tied embedding, learned positions over the row's sequence, per layer Wqkv, out_proj, up and down
    # projections with biases (12h^2 + 13h with the two LayerNorms), a final LayerNorm
    h, layers, vocab, seq = run["hidden"], run["layers"], run["vocab"], run["seq_len"]
    params = vocab * h + seq * h + layers * (12 * h**2 + 13 * h) + 2 * h
    assert params == run["params"]
    assert f"| {params} |" in run["source"]


@pytest.mark.parametrize("run", FOUNDRY, ids=lambda r: r["id"])
def test_mpt_throughput_gives_the_printed_mfu(run):
    """llm-foundry's own MFU at the sec/it derived from its tokens/s/GPU: the row's figures agree."""
    rows = fidelity.load_published({"run": [run]}, "held-out-2")
    seconds = float(rows["sec_per_it"].iloc[0])
    n, seq, layers, h = run["params"], run["seq_len"], run["layers"], run["hidden"]
    flops_per_seq = 2 * n * seq
    attn_flops_per_seq = layers * 2 * 2 * (h * seq**2)
    seq_per_sec = run["gbs"] / seconds
    mfu = (
        (3 * flops_per_seq + 3 * attn_flops_per_seq)
        * seq_per_sec
        / (run["gpus"] * PEAK_FLOPS[run["gpu_model"]])
    )
    assert 100 * mfu == pytest.approx(run["mfu_percent"], abs=0.15)


@pytest.mark.parametrize("run", FLASH, ids=lambda r: r["id"])
def test_flash_attention_rows_take_the_nodes_throughput(run):
    assert run["sec_per_it"] == pytest.approx(run["gbs"] * run["seq_len"] / run["tokens_per_sec"])
    assert f"{run['tokens_per_sec'] // 1000}k" in run["source"]


def test_rows_are_scored_apart():
    rows, _ = fidelity.load_rows(None)
    second = rows[rows["kind"] == "held-out-2"]
    assert len(second) == len(HELDOUT2) and second["sec_per_it"].gt(0).all()
    # '|  7b | 2048 | 8 | h100_80gb | ... | 6 | 1 | 48 | 41 | 85144 | 10643 | ...': 48 x 2048 / (10643 x 8)
    seven_b = second.set_index("id").loc["foundry-7b-seq2048-8gpu-h100-80gb"]
    assert seven_b["sec_per_it"] == pytest.approx(48 * 2048 / (10643 * 8))
    part = rows[rows["kind"].isin(["published", "held-out-2"])]
    result = fidelity.score(part)
    assert result["time"]["held-out-2"]["n"] == len(HELDOUT2)
    assert {r["id"] for r in result["held-out-2"]["rows"]} == {r["id"] for r in HELDOUT2}
    assert not {r["id"] for r in result["worst"]} & {r["id"] for r in HELDOUT2}
    assert "held-out-2" in fidelity.render(result, [])
