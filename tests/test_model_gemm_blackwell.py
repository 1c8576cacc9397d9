"""Blackwell-generation effects of the per-operation model (model.gemm, model.timing), each against the
published figure it is taken from."""

from __future__ import annotations

import pytest

from tracelog import hardware
from tracelog.model.flops import ModelConfig, TrainConfig
from tracelog.model.gemm import (
    LOW_PRECISION_SHARE,
    TRAINING_SHARE,
    cross_entropy_seconds,
    flash_share,
    gemm_efficiency,
    layer_forward_ops,
    quantization_efficiency,
)
from tracelog.model.timing import predict_iteration, stage_compute

GB200 = hardware.gpu("gb200")
# Llama 3 70B (Meta's config.json): the shapes of the Megatron-Bridge GB200 recipes.
LLAMA3_70B = ModelConfig(
    layers=80, hidden=8192, heads=64, seq_len=8192, vocab=128256, ffn_hidden=28672, query_groups=8,
    swiglu=True, tied_embeddings=False,
)  # fmt: skip


def test_gb200_counts_its_152_sms_in_waves_and_in_what_userbuffers_take() -> None:
    """Kernel authors' CUDA device properties: GB200 has 152 SMs (B200 148). A GEMM whose 128x128 tiles
    fill 152 SMs runs one full wave; one tile more needs a second, nearly empty one. Overlapped TP
    collectives take 16 of the 152 SMs from the GEMMs beside them (16/136 longer)."""
    assert GB200.sm_count == 152
    assert quantization_efficiency(19 * 128, 8 * 128, GB200) == pytest.approx(1.0)  # 152 tiles, 1 wave
    assert quantization_efficiency(19 * 128 + 1, 8 * 128, GB200) < 0.6
    train = TrainConfig(gbs=32, mbs=1, tp=2, pp=1, dp=1, sequence_parallel=True, flash_attention=True)
    overlapped = TrainConfig(
        gbs=32, mbs=1, tp=2, pp=1, dp=1, sequence_parallel=True, flash_attention=True, tp_comm_overlap=True
    )
    shown = predict_iteration(LLAMA3_70B, train, GB200)
    hidden = predict_iteration(LLAMA3_70B, overlapped, GB200)
    ops = {op.name: op.time_s for op in stage_compute(LLAMA3_70B, overlapped, GB200).layer_ops}
    beside = ops["proj"] + ops["mlp_down"] + 2 * (ops["qkv"] + ops["mlp_up"])
    margin = beside * LLAMA3_70B.layers * 32 * 16 / (152 - 16)
    last_chunks = shown.tp_comm_s * (2 / 4) / 2 / 4
    assert hidden.tp_comm_s == pytest.approx(last_chunks + margin)
    assert margin > 0.1 * beside * LLAMA3_70B.layers * 32  # 16/136 = 11.8% of those GEMMs


B300 = hardware.gpu("b300-sxm6-288gb")
PRECISIONS = ("bf16", "fp8", "fp4")


def test_nvfp4_gemms_run_as_transformer_engine_measures_them_on_b300() -> None:
    """Transformer Engine's GEMM profiling guide (B300 SXM6 AC, pre-quantized, a layer's 12 GEMMs): 13.102
    ms in BF16, 3.764 ms in NVFP4, 3.48x where the peaks differ 6x; per-tensor FP8 6.812 ms (1.92x)."""
    assert LOW_PRECISION_SHARE["fp4"] == pytest.approx(0.580, abs=1e-3)
    m, n, k = 16384, 16384, 16384  # one shape at every precision: the same tile and wave losses
    rate = {
        p: gemm_efficiency(m, n, k, B300, precision=p) * hardware.peak_tflops(B300, p) for p in PRECISIONS
    }
    assert rate["fp4"] / rate["bf16"] == pytest.approx(13.102 / 3.764, rel=1e-3)
    assert rate["fp4"] / rate["fp8"] > 1.8  # an FP4 GEMM is nearly twice an FP8 one on Blackwell Ultra...
    on_gb200 = {
        p: gemm_efficiency(m, n, k, GB200, precision=p) * hardware.peak_tflops(GB200, p) for p in PRECISIONS
    }
    # ...and 4/6 of that on GB200, whose FP4 peak is 4x its BF16 (B300: 6x): 2.3x BF16, 1.3x FP8
    assert on_gb200["fp4"] / on_gb200["bf16"] == pytest.approx(13.102 / 3.764 * 4 / 6, rel=1e-3)
    assert 1.2 < on_gb200["fp4"] / on_gb200["fp8"] < 1.4


def test_nvfp4_quantization_costs_more_than_fp8s() -> None:
    """The same guide with and without quantization: per-tensor FP8 pays 9.147 - 6.812 = 2.335 ms per layer
    to quantize, NVFP4 (Hadamard transforms, stochastic rounding, 2D weight scales) 6.453 - 3.764 = 2.689."""
    train = {"gbs": 256, "mbs": 1, "tp": 2, "sequence_parallel": True, "flash_attention": True}
    casts = {
        p: next(
            op
            for op in layer_forward_ops(LLAMA3_70B, TrainConfig(**train, precision=p), GB200)
            if op.name == "fp8_casts"
        )
        for p in ("fp8", "fp4")
    }
    assert casts["fp4"].bytes / casts["fp8"].bytes == pytest.approx(2.689 / 2.335, rel=1e-3)


GB300 = hardware.gpu("gb300")


def test_blackwell_ultra_runs_attention_as_cudnn_measures_it_not_twice_as_fast() -> None:
    """cuDNN 9.17.0's SDPA training benchmark (cudnn-frontend, 8192 tokens, 128/8 heads, d 128, causal,
    BF16): GB200 1.389 ms forward + 4.542 ms backward, GB300 1.158 + 4.256 ms. Blackwell Ultra's doubled
    SFU exponential rate shortens the forward pass 1.20x, the backward (shared-memory bound) 1.07x."""
    assert (GB200.compute_capability, GB300.compute_capability, B300.compute_capability) == (
        "10.0",
        "10.3",
        "10.3",
    )
    assert flash_share(GB200) == pytest.approx(0.519 * TRAINING_SHARE, abs=1e-3)
    assert flash_share(hardware.gpu("b200-sxm-180gb")) == flash_share(GB200)
    assert flash_share(B300) == flash_share(GB300)
    train = TrainConfig(gbs=256, mbs=1, tp=1, flash_attention=True, precision="fp8")
    attention = {
        g.id: next(op for op in layer_forward_ops(LLAMA3_70B, train, g) if op.name == "attention")
        for g in (GB200, GB300)
    }
    faster = attention["gb200"].time_s / attention["gb300"].time_s  # the same 2.5 PFLOP/s BF16 peak
    assert faster == pytest.approx((1.389 + 4.542) / (1.158 + 4.256), rel=0.01)
    assert 1.05 < faster < 1.25  # not the 2x of the exponentials alone


def test_the_benchmarks_attention_takes_the_benchmarks_time_forward_and_backward() -> None:
    """The benchmark's own shape (one sequence of 8192 tokens, 128 query heads, 8 KV heads of 128) takes, in
    the model, the measured 1.389 + 4.542 ms on a GB200 at TRAINING_SHARE's clocks: a forward and a
    backward of 2.5 forwards (the recomputed scores), which is the FLOP count the share was taken in."""
    bench = ModelConfig(
        layers=1, hidden=128 * 128, heads=128, seq_len=8192, vocab=128256, ffn_hidden=4 * 128 * 128,
        query_groups=8,
    )  # fmt: skip
    train = TrainConfig(gbs=1, mbs=1, tp=1, flash_attention=True, precision="bf16")
    stage = stage_compute(bench, train, GB200)
    forward = next(op for op in stage.layer_ops if op.name == "attention").time_s
    loss_forward, loss_backward = cross_entropy_seconds(bench, train, GB200)
    # every other operation's backward is twice its forward; the attention's is 2.5 times
    assert stage.backward_s - 2 * stage.forward_s == pytest.approx(
        0.5 * forward + loss_backward - 2 * loss_forward, rel=1e-9
    )
    assert forward * 3.5 == pytest.approx((1.389 + 4.542) * 1e-3 / TRAINING_SHARE, rel=0.01)
