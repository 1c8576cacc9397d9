"""Per-operation selective activation checkpointing, as torchtitan runs it (`recompute = "op"`).

torchtitan's selective mode with `selective_ac_option = "op"` wraps each transformer block in PyTorch's
selective checkpoint (`create_selective_checkpoint_contexts`) with a policy that saves the outputs of the
ops in `_save_list` and recomputes every other op in the backward pass: `aten.mm` (except every second
one), the flash and memory-efficient SDPA kernels, `reduce_scatter_tensor` and `aten.max`
(torchtitan/models/llama3/parallelize_llama.py `_save_list` and `_apply_ac_to_transformer_block`, the
same from commit 9dec370, 2024-12, to 820504e, 2025-06). A Llama block's matrix products run in the order
wq, wk, wv, wo, w1, w3, w2 (models/llama3/model.py: `Attention.forward`, `FeedForward.forward` is
`w2(silu(w1(x)) * w3(x))`), so the even ones, wk, wo and w3, are recomputed with the element-wise work
(norms, rotary embedding, SiLU and product, residual adds). torchao's float8 linear layers multiply with
`aten._scaled_mm`, which is not in the list: under float8 every linear layer is recomputed, and only the
attention output, the reductions and the block's input stay.

Megatron-LM's selective recomputation (Korthikanti et al. 2022 §5) is the other `selective`: it recomputes
the attention core only, which this policy saves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from tracelog.hardware import normalize_precision
from tracelog.model.flops import ModelConfig, TrainConfig, microbatch_tokens


class TimedOp(Protocol):
    """What this module reads of `model.gemm.Op` (which it cannot import: model.gemm reads model.memory,
    which reads this module)."""

    @property
    def name(self) -> str: ...

    @property
    def time_s(self) -> float: ...


LOW_PRECISION_LINEARS = ("fp8", "fp4")
"""Precisions whose linear layers multiply with `_scaled_mm` (torchao float8), which the policy recomputes."""

MEMORY_OPS = ("layernorms", "bias_dropout_residual", "activation", "fp8_casts", "eager_elementwise")


def recomputed_linear_shares(cfg: ModelConfig, train: TrainConfig) -> dict[str, float]:
    """The share of each linear operation of `model.gemm.layer_forward_ops` the policy recomputes: of the
    fused `qkv` the K projection's columns (kv of q + 2kv), all of `proj` (wo), half of a gated `mlp_up`
    (w3 beside w1), none of `mlp_down` (w2); every linear layer under float8."""
    if normalize_precision(train.precision) in LOW_PRECISION_LINEARS:
        return {"qkv": 1.0, "proj": 1.0, "mlp_up": 1.0, "mlp_down": 1.0}
    q, kv = cfg.q_width, cfg.kv_width
    return {"qkv": kv / (q + 2 * kv), "proj": 1.0, "mlp_up": 0.5 if cfg.swiglu else 0.0, "mlp_down": 0.0}


def op_recompute_seconds(ops: Sequence[TimedOp], cfg: ModelConfig, train: TrainConfig) -> float:
    """One layer's recomputation in the backward pass under the policy: the recomputed share of each
    linear operation and all of the element-wise ones; attention is saved."""
    shares = recomputed_linear_shares(cfg, train)
    return sum(op.time_s * (1.0 if op.name in MEMORY_OPS else shares.get(op.name, 0.0)) for op in ops)


def op_saved_bytes_per_layer(cfg: ModelConfig, train: TrainConfig) -> float:
    """Activation bytes one layer keeps for its backward pass under the policy, 16-bit values: the block's
    input (split over TP with sequence parallelism), the attention output, and in 16-bit training the saved
    products wq (q), wv (kv), w1 (f) and w2 (h, the reduce-scatter's output under TP); under float8 none of
    the products. The recomputation's transient (one layer's full activations) is added by the caller, as
    for full recomputation."""
    t = train.tp
    tokens = microbatch_tokens(cfg, train)
    h, q, kv = cfg.hidden, cfg.q_width, cfg.kv_width
    block_input = h / t if train.sequence_parallel else h
    per_token = block_input + q / t
    if normalize_precision(train.precision) not in LOW_PRECISION_LINEARS:
        per_token += (q + kv + cfg.token_ffn) / t + h / t
    return 2.0 * tokens * per_token
