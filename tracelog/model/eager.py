"""The element-wise work of a transformer block run eagerly, as PyTorch executes torchtitan's Llama without
`torch.compile`: each operator its own kernel, reading and writing its whole tensor, in fp32 where the
code upcasts. The model's element-wise operations (`model.gemm`: layer norms, residual adds, the SwiGLU
product) are those of fused kernels, one read and one write (Megatron-core's and Transformer Engine's
fused kernels, or what torch.compile makes of the same code); this is what eager mode moves beyond them.

From torchtitan's code (torchtitan/models/norms.py `RMSNorm`, models/llama/model.py `apply_rotary_emb` and
`FeedForward`, at 9dec370, 2024-12), per element of the tensor, 16-bit activations:

| operation | eager kernels: bytes read + written | fused |
| --- | --- | --- |
| RMSNorm, twice a block: `x.float()`, `pow(2)`, `mean`, `x * rsqrt(...)`, `type_as`, `* weight` | 2+4, 4+4, 4, 4+4, 4+2, 2+2: 36 | 2+2 |
| rotary embedding of Q and K: `float()`, complex product, `type_as` | 2+4, 4+4, 4+2: 20 | 0 (not in the model) |
| SwiGLU's `silu(w1 x) * w3 x` | 2+2, 4+2: 10 | 4+2 |

The residual adds are one kernel either way. The backward pass runs the same chains in reverse, which the
model's backward = 2 x forward covers.
"""

from __future__ import annotations

from tracelog.model.flops import ModelConfig, TrainConfig, microbatch_tokens

NORM_BYTES = 36 - 4
ROPE_BYTES = 20
SWIGLU_BYTES = 10 - 6
EAGER_KERNELS = 2 * 6 + 2 * 3 + 1
"""Kernels beyond the fused ones a block's forward launches: six per RMSNorm, three per rotary product (Q
and K), one more for the SwiGLU product."""


def eager_elementwise_bytes(cfg: ModelConfig, train: TrainConfig) -> float:
    """Bytes one block's forward moves beyond the fused kernels when run eagerly (module docstring), on one
    GPU and micro-batch: the norms over h (split over TP with sequence parallelism), the rotary embedding
    over the rank's Q and K widths, the SwiGLU product over its FFN width."""
    t = train.tp
    tokens = microbatch_tokens(cfg, train)
    q, kv = cfg.q_width, cfg.kv_width
    norm_width = cfg.hidden / t if train.sequence_parallel else cfg.hidden
    gated = cfg.token_ffn / t if cfg.swiglu else 0.0
    rotary = 0.0 if cfg.learned_positions else (q + kv) / t
    return tokens * (2 * NORM_BYTES * norm_width + ROPE_BYTES * rotary + SWIGLU_BYTES * gated)
