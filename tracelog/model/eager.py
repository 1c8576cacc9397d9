"""The element-wise work of a transformer block run eagerly, as PyTorch executes a model written in plain
PyTorch operators without `torch.compile`: each operator its own kernel, reading and writing its whole
tensor, in fp32 where the code upcasts. The model's element-wise operations (`model.gemm`: layer norms,
residual adds, the SwiGLU product) are those of fused kernels, one read and one write (Megatron-core's and
Transformer Engine's fused kernels, or what torch.compile makes of the same code); this is what eager mode
moves beyond them.

From torchtitan's code (torchtitan/models/norms.py `RMSNorm`, models/llama/model.py `apply_rotary_emb` and
`FeedForward`, at 9dec370, 2024-12), per element of the tensor, 16-bit activations; Hugging Face
transformers' Llama (models/llama/modeling_llama.py `LlamaRMSNorm`, `apply_rotary_pos_emb` with
`rotate_half`, `LlamaMLP`), which the Trainer runs eagerly unless `torch_compile` is set, chains the same
operators (its rotary product: a negation and a concatenation for `rotate_half`, two products and a sum,
the same 20 bytes):

| operation | eager kernels: bytes read + written | fused |
| --- | --- | --- |
| RMSNorm, twice a block: `x.float()`, `pow(2)`, `mean`, `x * rsqrt(...)`, `type_as`, `* weight` | 2+4, 4+4, 4, 4+4, 4+2, 2+2: 36 | 2+2 |
| rotary embedding of Q and K: `float()`, complex product, `type_as` | 2+4, 4+4, 4+2: 20 | 0 (not in the model) |
| SwiGLU's `silu(w1 x) * w3 x` | 2+2, 4+2: 10 | 4+2 |

The residual adds are one kernel either way, and so is a LayerNorm block's norm: `torch.nn.LayerNorm`
runs ATen's `native_layer_norm`, one kernel forward (aten/src/ATen/native/cuda/layer_norm_kernel.cu), so only
RMSNorm written as operators (`ModelConfig.rms_norm`) pays the norm's chain. The backward pass runs the
same chains in reverse, which the model's backward = 2 x forward covers.
"""

from __future__ import annotations

from tracelog.model.flops import ModelConfig, TrainConfig, microbatch_tokens

NORM_BYTES = 36 - 4
ROPE_BYTES = 20
SWIGLU_BYTES = 10 - 6
NORM_KERNELS = 6
ROPE_KERNELS = 3
SWIGLU_KERNELS = 1
"""Kernels beyond the fused ones a block's forward launches: six per RMSNorm, three per rotary product (Q
and K), one more for the SwiGLU product."""


def eager_kernels(cfg: ModelConfig) -> int:
    """Kernels beyond the fused ones one block's forward launches eagerly (the constants above)."""
    norms = 2 * NORM_KERNELS if cfg.rms_norm else 0
    rotary = 0 if cfg.learned_positions else 2 * ROPE_KERNELS
    return norms + rotary + (SWIGLU_KERNELS if cfg.swiglu else 0)


def eager_elementwise_bytes(cfg: ModelConfig, train: TrainConfig) -> float:
    """Bytes one block's forward moves beyond the fused kernels when run eagerly (module docstring), on one
    GPU and micro-batch: the norms over h (split over TP with sequence parallelism), the rotary embedding
    over the rank's Q and K widths, the SwiGLU product over its FFN width; a LayerNorm block's norms move
    nothing more."""
    t = train.tp
    tokens = microbatch_tokens(cfg, train)
    q, kv = cfg.q_width, cfg.kv_width
    norm_width = cfg.hidden / t if train.sequence_parallel else cfg.hidden
    gated = cfg.token_ffn / t if cfg.swiglu else 0.0
    rotary = 0.0 if cfg.learned_positions else (q + kv) / t
    norms = 2 * NORM_BYTES * norm_width if cfg.rms_norm else 0.0
    return tokens * (norms + ROPE_BYTES * rotary + SWIGLU_BYTES * gated)
