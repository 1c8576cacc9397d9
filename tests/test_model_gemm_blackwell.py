"""Blackwell-generation effects of the per-operation model (model.gemm, model.timing), each against the
published figure it is taken from."""

from __future__ import annotations

import pytest

from tracelog import hardware
from tracelog.model.flops import ModelConfig, TrainConfig
from tracelog.model.gemm import quantization_efficiency
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
