"""Fused attention kernels of earlier generations, priced against FlashAttention-2's rate on the same GPU.

The model's fused-attention shares (`model.gemm.FLASH_SHARE`, `SDPA_FLASH_SHARE`) are the rates of the
kernels today's trainers call: FlashAttention-2 (PyTorch's SDPA, flash-attn 2.x) or cuDNN under
Transformer Engine. Runs of 2022-23 called kernels that never materialise the scores either but run at
less than half of FlashAttention-2's rate: FlashAttention (1.x, the CUDA kernels of Dao et al. 2022) and
the Triton port of it in the FlashAttention repository (`flash_attn/flash_attn_triton.py`, "tested with
triton==2.0.0.dev20221202"), which llm-foundry copied for MPT's `attn_impl: triton`
(llmfoundry/models/layers/flash_attn_triton.py, "Copied from ... flash_attn_triton.py", importing
`triton_pre_mlir`). Its header: "Overall Triton forward + backward is slightly slower than CUDA forward +
backward" (the CUDA version being FlashAttention 1.x at the time).

**Source.** FlashAttention-2 (Dao 2023), Figure 4 (A100 80GB SXM4) and Figure 7 (H100 80GB SXM5),
"Attention forward + backward speed", with causal mask, head dimension 64 and 128, batch × sequence =
16k tokens, hidden 2048, in FlashAttention's count (a backward of 2.5 forwards,
`model.gemm.FLASH_BACKWARD_FACTOR`); the bars as the repository prints them
(Dao-AILab/flash-attention `assets/flash2_a100_fwd_bwd_benchmark.png` and
`assets/flash2_h100_fwd_bwd_benchmark.png`, added with the FlashAttention-2 release, 4f285b35,
2023-07-17). TFLOP/s at 2k, 4k, 8k and 16k tokens, where each kernel's rate has levelled off (at 512
and 1k tokens every kernel is slower, FlashAttention-2 most):

| GPU | head dim | FlashAttention-2 | FlashAttention | FlashAttention Triton |
| --- | ---: | --- | --- | --- |
| A100 | 64 | 140, 156, 165, 171 | 77, 87, 92, 97 | 79, 76, 79, 80 |
| A100 | 128 | 155, 173, 182, 189 | 69, 76, 80, 83 | 68, 74, 78, 80 |
| H100 | 64 | 232, 257, 273, 284 | 136, 138, 149, 156 | not measured |
| H100 | 128 | 265, 294, 308, 328 | 108, 126, 135, 137 | not measured |

A kernel runs at the mean of its bars' ratios to FlashAttention-2's (`kernel_ratio`) times the model's
FlashAttention-2 share for the GPU: FlashAttention 1.x at 0.44 (A100) and 0.42 (H100) of it at head
dimension 128, 0.56 at 64; the Triton kernel at 0.43 and 0.50 on A100. The figure has no Triton bar on
H100, and the Triton it was written for predates Hopper (llm-foundry's `triton_pre_mlir` fork compiles
for sm_90 with LLVM 11, "not formally supported", TUTORIAL.md), so there the kernel keeps
FlashAttention-2's rate: an unmeasured rate, not an assumed one. A head dimension above 64 takes the
figure's 128 column, one at or below 64 its 64 column.
"""

from __future__ import annotations

from statistics import fmean

from tracelog.errors import TracelogError

ATTENTION_KERNELS = ("flash-attn-2", "flash-attn-1", "triton")
"""Fused attention kernels by generation: FlashAttention-2 (the model's rates), FlashAttention 1.x (CUDA),
and the Triton port of FlashAttention 1 (the FlashAttention repository's, and llm-foundry's copy)."""

FA2_PAPER_TFLOPS: dict[tuple[str, str, int], tuple[float, float, float, float]] = {
    ("ampere", "flash-attn-2", 64): (140, 156, 165, 171),
    ("ampere", "flash-attn-1", 64): (77, 87, 92, 97),
    ("ampere", "triton", 64): (79, 76, 79, 80),
    ("ampere", "flash-attn-2", 128): (155, 173, 182, 189),
    ("ampere", "flash-attn-1", 128): (69, 76, 80, 83),
    ("ampere", "triton", 128): (68, 74, 78, 80),
    ("hopper", "flash-attn-2", 64): (232, 257, 273, 284),
    ("hopper", "flash-attn-1", 64): (136, 138, 149, 156),
    ("hopper", "flash-attn-2", 128): (265, 294, 308, 328),
    ("hopper", "flash-attn-1", 128): (108, 126, 135, 137),
}
"""Forward plus backward TFLOP/s, causal, at 2k, 4k, 8k and 16k tokens: FlashAttention-2 (Dao 2023),
Figures 4 (A100) and 7 (H100), by architecture, kernel and head dimension (module docstring)."""


def kernel_ratio(kernel: str | None, architecture: str, head_dim: int) -> float:
    """`kernel`'s rate over FlashAttention-2's on GPUs of `architecture`: the mean of the ratios of its
    bars to FlashAttention-2's in `FA2_PAPER_TFLOPS` at the head-dimension column of `head_dim`; 1.0 for
    FlashAttention-2 itself, no kernel named, or a GPU the figure did not measure the kernel on."""
    if kernel is None or kernel == "flash-attn-2":
        return 1.0
    if kernel not in ATTENTION_KERNELS:
        raise TracelogError(f"unknown attention kernel {kernel!r}; known: {', '.join(ATTENTION_KERNELS)}")
    column = 64 if head_dim <= 64 else 128
    bars = FA2_PAPER_TFLOPS.get((architecture, kernel, column))
    if bars is None:
        return 1.0
    reference = FA2_PAPER_TFLOPS[(architecture, "flash-attn-2", column)]
    return fmean(k / r for k, r in zip(bars, reference, strict=True))
