"""Fused attention kernels of earlier generations (model.attention_kernels): FlashAttention 1.x and its Triton
port run at the share of FlashAttention-2's rate that the FlashAttention-2 paper's Figures 4 and 7 measure,
and a run's configuration names which one ran."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracelog import api, hardware
from tracelog.analysis import inputs as run_inputs
from tracelog.analysis.predictions import infer
from tracelog.errors import TracelogError
from tracelog.model.attention_kernels import FA2_PAPER_TFLOPS, kernel_ratio
from tracelog.model.flops import ModelConfig, TrainConfig
from tracelog.model.gemm import FLASH_SHARE, SDPA_FLASH_SHARE, flash_share, layer_forward_ops
from tracelog.store import Store

A100 = hardware.gpu("a100-sxm4-80gb")
H100 = hardware.gpu("h100-sxm5-80gb")


def test_the_figures_bars_at_16k_tokens_are_the_papers() -> None:
    """FlashAttention-2 (Dao 2023), Fig. 4d and 7d (causal, head dimension 128) at 16k tokens: on A100
    FlashAttention-2 189 TFLOP/s, FlashAttention 83, its Triton port 80; on H100 328 and 137."""
    assert FA2_PAPER_TFLOPS[("ampere", "flash-attn-2", 128)][-1] == 189
    assert FA2_PAPER_TFLOPS[("ampere", "flash-attn-1", 128)][-1] == 83
    assert FA2_PAPER_TFLOPS[("ampere", "triton", 128)][-1] == 80
    assert FA2_PAPER_TFLOPS[("hopper", "flash-attn-2", 128)][-1] == 328
    assert FA2_PAPER_TFLOPS[("hopper", "flash-attn-1", 128)][-1] == 137
    # Fig. 4c (head dimension 64) at 2k tokens: 140, 77 and 79
    assert [FA2_PAPER_TFLOPS[("ampere", k, 64)][0] for k in ("flash-attn-2", "flash-attn-1", "triton")] == [
        140,
        77,
        79,
    ]


@pytest.mark.parametrize(
    ("kernel", "architecture", "head_dim", "ratio"),
    [
        ("flash-attn-1", "ampere", 128, 0.441),
        ("triton", "ampere", 128, 0.430),
        ("flash-attn-1", "ampere", 64, 0.558),
        ("triton", "ampere", 64, 0.499),
        ("flash-attn-1", "hopper", 128, 0.423),
        ("flash-attn-1", "hopper", 80, 0.423),  # above 64: the 128 column
        ("flash-attn-1", "hopper", 64, 0.555),
    ],
)
def test_an_earlier_kernel_runs_at_under_half_to_three_fifths_of_flashattention2(
    kernel: str, architecture: str, head_dim: int, ratio: float
) -> None:
    assert kernel_ratio(kernel, architecture, head_dim) == pytest.approx(ratio, abs=1e-3)


def test_a_kernel_the_figure_did_not_measure_keeps_flashattention2s_rate() -> None:
    assert kernel_ratio("triton", "hopper", 128) == 1.0  # no Triton bar on H100
    assert kernel_ratio("flash-attn-1", "blackwell", 128) == 1.0
    assert kernel_ratio(None, "ampere", 128) == kernel_ratio("flash-attn-2", "ampere", 128) == 1.0
    with pytest.raises(TracelogError, match="unknown attention kernel"):
        kernel_ratio("xformers", "ampere", 128)


def test_the_kernel_scales_flashattention2s_share_whatever_the_framework() -> None:
    assert flash_share(A100, "megatron", "triton", 128) == pytest.approx(
        FLASH_SHARE["ampere"] * 0.430, abs=1e-3
    )
    # named, the kernel sets the rate on Hopper too, where Megatron's own would be cuDNN's
    assert flash_share(H100, "megatron", "flash-attn-1", 128) == pytest.approx(
        SDPA_FLASH_SHARE["hopper"] * 0.423, abs=1e-3
    )
    assert flash_share(H100, "megatron", "flash-attn-2", 128) == SDPA_FLASH_SHARE["hopper"]
    assert flash_share(H100, "megatron") > flash_share(H100, "megatron", "flash-attn-2")


def test_the_attention_takes_the_kernels_time_and_nothing_else_does() -> None:
    """MPT 1B (h 2048, 16 heads of 128) at 32k tokens on an A100: the Triton kernel's attention takes
    1/0.430 of FlashAttention-2's time (but the fixed launch), every other operation the same."""
    mpt_1b = ModelConfig(layers=24, hidden=2048, heads=16, seq_len=32768, vocab=50368)
    ops = {}
    for kernel in (None, "triton"):
        train = TrainConfig(
            gbs=32, mbs=1, dp=8, flash_attention=True, framework="composer", attention_kernel=kernel
        )
        ops[kernel] = {op.name: op.time_s for op in layer_forward_ops(mpt_1b, train, A100)}
    assert ops["triton"]["attention"] / ops[None]["attention"] == pytest.approx(1 / 0.430, rel=0.01)
    assert {k: v for k, v in ops["triton"].items() if k != "attention"} == {
        k: v for k, v in ops[None].items() if k != "attention"
    }


def test_mpts_attn_impl_in_a_stored_composer_run_names_the_kernel(tmp_path: Path) -> None:
    """llm-foundry's `attn_impl: triton` is its copy of the FlashAttention repository's Triton kernel; `flash`
    calls whichever flash-attn is installed, which the configuration does not say (FlashAttention-2's
    rate). The configuration echo's `model.attn_config.attn_impl` is read back from the store."""
    from tests.test_parser_composer import SAMPLE

    log = tmp_path / "triton.log"
    log.write_text(SAMPLE.read_text().replace("attn_impl: flash", "attn_impl: triton"))
    for path, kernel in ((SAMPLE, None), (log, "triton")):
        db = tmp_path / f"{path.stem}.duckdb"
        api.ingest(db, [str(path)], complete=True)
        with Store(db) as store:
            ((row, params),) = run_inputs.load_rows(store, "run_id = 1")
        run = infer(run_inputs.build(row, params))
        assert run.train is not None and run.train.attention_kernel == kernel
    given = infer(run_inputs.build(row, {**params, "attention_kernel": "flash-attn-1"}))
    assert given.train is not None and given.train.attention_kernel == "flash-attn-1"
    unknown = infer(run_inputs.build(row, {**params, "attention_kernel": "xformers"}))
    assert unknown.train is not None and unknown.train.attention_kernel is None
    assert any("xformers" in a for a in unknown.assumptions)
