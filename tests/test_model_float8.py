"""Which float8 library a framework trains with decides what its FP8 linear layers keep for the backward
pass (`tracelog.model.float8`): Transformer Engine keeps the FP8 cast of a linear layer's input,
torchao's `Float8Linear` (torchtitan) keeps what BF16 keeps."""

from __future__ import annotations

import pytest

from tracelog.model.checkpointing import op_saved_bytes_per_layer
from tracelog.model.float8 import float8_library, keeps_fp8_linear_inputs
from tracelog.model.flops import ModelConfig, TrainConfig
from tracelog.model.memory import activations_per_gpu, memory_per_gpu

# a small Llama-shaped model: h 256, 4 heads of 64 in 2 KV groups (kv 128), SwiGLU FFN 768
SMALL = ModelConfig(
    layers=2, hidden=256, heads=4, query_groups=2, seq_len=128, vocab=1024, ffn_hidden=768,
    swiglu=True, bias=False, tied_embeddings=False, learned_positions=False, dropout=False, rms_norm=True,
)  # fmt: skip
TOKENS = 2 * 128  # mbs 2 x seq 128


def train(framework: str, precision: str, recompute: str = "none", **kw) -> TrainConfig:
    base = dict(
        gbs=2, mbs=2, flash_attention=True, framework=framework, precision=precision, recompute=recompute
    )
    return TrainConfig(**(base | kw))


def test_each_framework_has_its_float8_library():
    assert float8_library("torchtitan") == "torchao"
    assert float8_library("megatron") == "transformer-engine"
    assert float8_library("nemo") == "transformer-engine"
    assert keeps_fp8_linear_inputs(train("megatron", "fp8"))
    assert keeps_fp8_linear_inputs(train("megatron", "fp4"))
    assert not keeps_fp8_linear_inputs(train("megatron", "bf16"))
    assert not keeps_fp8_linear_inputs(train("torchtitan", "fp8"))


def test_transformer_engine_keeps_fp8_inputs_and_torchao_keeps_bf16_ones():
    """Without checkpointing: Transformer Engine's QKV and MLP inputs (h each) and the down projection's
    input (f) take 1 byte instead of 2, and the output projection adds an FP8 copy (q) beside the
    attention output; torchao's float8 layer keeps the 16-bit input (`matmul_with_hp_or_float8_args`:
    `ctx.save_for_backward(input_hp, weight_hp_t)`), the BF16 layer's bytes."""
    h, q, f = 256, 256, 768
    megatron = {p: activations_per_gpu(SMALL, train("megatron", p)) for p in ("bf16", "fp8")}
    assert megatron["bf16"] - megatron["fp8"] == pytest.approx(SMALL.layers * TOKENS * (h + h + f - q))
    titan = {p: activations_per_gpu(SMALL, train("torchtitan", p)) for p in ("bf16", "fp8")}
    assert titan["fp8"] == titan["bf16"]


def test_under_torchtitans_policy_float8_saves_the_bf16_products():
    # per layer, compiled: block input h, attention output q, wq q, wv kv, w1 f at 2 bytes, float8 or not
    h, q, kv, f = 256, 256, 128, 768
    for precision in ("bf16", "fp8"):
        saved = op_saved_bytes_per_layer(SMALL, train("torchtitan", precision, "op"))
        assert saved == 2 * TOKENS * (h + q + q + kv + f)
    bf16 = memory_per_gpu(SMALL, train("torchtitan", "bf16", "op", zero_stage=3))
    fp8 = memory_per_gpu(SMALL, train("torchtitan", "fp8", "op", zero_stage=3))
    assert fp8.activations == bf16.activations and fp8.total == bf16.total
