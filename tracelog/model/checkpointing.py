"""Per-operation selective activation checkpointing, as torchtitan runs it (`recompute = "op"`).

torchtitan's selective mode with `selective_ac_option = "op"` wraps each transformer block in PyTorch's
selective checkpoint (`create_selective_checkpoint_contexts`) with a policy that saves the outputs of the
ops in `_save_list` and recomputes every other op in the backward pass: `aten.mm` (except every second
one), the flash and memory-efficient SDPA kernels, `reduce_scatter_tensor` and `aten.max`
(torchtitan/parallelisms/parallelize_llama.py `_save_list` and `_apply_ac_to_transformer_block` at commit
9dec370, 2024-12, which also lists `aten.abs`; models/llama3/parallelize_llama.py at 820504e, 2025-06,
without it, removed by pull request 820). The counter counts `aten.mm` alone: "if func ==
torch.ops.aten.mm.default: meta[mm_count_key] += 1", one counter per block. A Llama block's matrix
products run in the order wq, wk, wv, wo, w1, w3, w2 (models/llama3/model.py: `Attention.forward`,
`FeedForward.forward` is `w2(silu(w1(x)) * w3(x))`), so the even ones, wk, wo and w3, are recomputed with
the element-wise work (norms, rotary embedding, SiLU and product, residual adds).

**Float8 changes none of it.** torchao's `Float8Linear` (torchtitan's float8, `model.float8`) multiplies
with `torch.mm` on its `Float8Tensor` arguments (torchao/float8/float8_linear.py at eab345c:
`res_bits = torch.mm(input_fp8_reshaped, weight_fp8_t)`), and the subclass turns that into
`torch._scaled_mm` inside its own `__torch_dispatch__` (float8_ops.py: `@implements([aten.mm.default,
aten.matmul.default]) def float8_mm`). The checkpoint's dispatch mode runs before a tensor subclass's
dispatch and is not re-entered from it, so the policy sees `aten.mm.default`, counts it and saves its
16-bit output, and never sees `_scaled_mm`; compiled, `_CachingTorchDispatchMode` sets
`fx_traceback.current_meta["recompute"] = policy` before it runs the op (torch/utils/checkpoint.py), so
the `_scaled_mm` node traced inside takes the product's tag. The scaling factors' `aten.max` is saved, a
scalar. Checked with torch 2.13 and torchao 0.18 on the CPU (`_scaled_mm` runs there), a Llama-shaped
block under this policy: the policy sees seven `aten.mm` on `Float8TrainingTensor`s, and the compiled
forward (min-cut partitioner) keeps the same tensors in float8 as in BF16 (the wq, wv and w1 products and
the attention output with its log-sum-exp), 44 bytes of scales apart.

**Compiled or eager.** Eagerly `_CachingTorchDispatchMode` stores the output of every op the policy saves
until the recomputation takes it back; compiled, the policy only tags the traced graph's nodes and
AOTAutograd's partitioner keeps the saved-tagged values the backward graph reads. Under torch.compile the
w2 product, which only the residual add reads, is not kept (nor, under TP, w2's reduce-scatter output),
where an eager block keeps it. Eagerly with float8 under the 9dec370 list every scale's `aten.abs` output,
as large as the input or the unsharded weight it is taken of, is stored too (seen in the same check);
compiled, the backward reads only the `aten.max` after it, so it is not kept (pull request 820 measured
tensorwise float8 at 47.77 GiB with `aten.abs` listed and without). Not modelled: the model knows no
torchtitan commit.

**Under tensor parallelism** the policy saves `reduce_scatter_tensor` but no all-gather (`_save_list` at
9dec370, at 820504e and e7c0cae of 2025-06, and today's distributed/activation_checkpoint.py, whose
communication list adds `all_to_all_single` for MoE): torchtitan's plan (`apply_tp`) gathers each
sequence-parallel norm's output before the attention and the MLP (`PrepareModuleInput`, Shard(1) to
Replicate, a DTensor redistribute issuing `_c10d_functional.all_gather_into_tensor`), and the backward pass
needs both gathered inputs (the recomputed wk and w3 products read them, and so do the weight gradients of
wq, wk, wv, w1 and w3), so it gathers them again: two all-gathers of s·b·h a layer and micro-batch on top of
the backward's own. Compiled, the partitioner honours the tag: it may not recompute a collective of its own
accord, but "users can override this choice by using torch.utils.checkpoint()" (pytorch/pytorch#147561,
2025-02, `force_save_collectives` leaves a collective the policy marked for recomputation). Checked with torch
2.13 on the CPU, a Llama-shaped block under this plan and policy on a fake process group of two ranks: the
backward runs four all-gathers and two reduce-scatters, eagerly and compiled (AOTAutograd's backward graph),
against two and two without the policy. Without sequence parallelism (a plan torchtitan does not ship) the
row-parallel outputs are all-reduced instead, and the one the second norm reads (wo's) is all-reduced again.

Megatron-LM's selective recomputation (Korthikanti et al. 2022 §5) is the other `selective`: it recomputes
the attention core only, which this policy saves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from tracelog.model.flops import ModelConfig, TrainConfig, microbatch_tokens


class TimedOp(Protocol):
    """What this module reads of `model.gemm.Op` (which it cannot import: model.gemm reads model.memory,
    which reads this module)."""

    @property
    def name(self) -> str: ...

    @property
    def time_s(self) -> float: ...


MEMORY_OPS = ("layernorms", "bias_dropout_residual", "activation", "fp8_casts", "eager_elementwise")


def recomputed_linear_shares(cfg: ModelConfig) -> dict[str, float]:
    """The share of each linear operation of `model.gemm.layer_forward_ops` the policy recomputes: of the
    fused `qkv` the K projection's columns (kv of q + 2kv), all of `proj` (wo), half of a gated `mlp_up`
    (w3 beside w1), none of `mlp_down` (w2). The same in float8: the policy counts torchao's products as
    `aten.mm` (module docstring)."""
    q, kv = cfg.q_width, cfg.kv_width
    return {"qkv": kv / (q + 2 * kv), "proj": 1.0, "mlp_up": 0.5 if cfg.swiglu else 0.0, "mlp_down": 0.0}


def op_recompute_seconds(ops: Sequence[TimedOp], cfg: ModelConfig) -> float:
    """One layer's recomputation in the backward pass under the policy: the recomputed share of each
    linear operation and all of the element-wise ones (float8's casts among them: only their `aten.max`
    is saved); attention is saved."""
    shares = recomputed_linear_shares(cfg)
    return sum(op.time_s * (1.0 if op.name in MEMORY_OPS else shares.get(op.name, 0.0)) for op in ops)


def op_saved_bytes_per_layer(cfg: ModelConfig, train: TrainConfig) -> float:
    """Activation bytes one layer keeps for its backward pass under the policy, 16-bit values whatever
    the training precision: the block's input (split over TP with sequence parallelism), the attention
    output, the saved products wq (q), wv (kv) and w1 (f), and under TP with sequence parallelism wo's
    reduce-scatter output (h/t), which the residual sum the second norm reads is rebuilt from. Eagerly
    (`train.compiled` False) also w2's product, h a token (under TP the partial sums of the whole
    sequence, before their reduce-scatter) and that reduce-scatter's output (h/t): the compiled backward
    reads neither. The recomputation's transient (one layer's full activations) is added by the caller,
    as for full recomputation."""
    t = train.tp
    tokens = microbatch_tokens(cfg, train)
    h, q, kv = cfg.hidden, cfg.q_width, cfg.kv_width
    scattered = t > 1 and train.sequence_parallel
    block_input = h / t if train.sequence_parallel else h
    per_token = block_input + q / t + (q + kv + cfg.token_ffn) / t + (h / t if scattered else 0.0)
    if not train.compiled:
        per_token += h + (h / t if scattered else 0.0)
    return 2.0 * tokens * per_token


def op_recomputed_tp_collectives(train: TrainConfig, mlp_tensor_parallel: bool = True) -> tuple[str, int]:
    """The tensor-parallel collectives one layer's backward pass repeats under the policy, per micro-batch,
    each over s·b·h activations (module docstring): the all-gathers of the attention's and the MLP's input
    with sequence parallelism, else wo's all-reduce; the MLP's not where its experts are outside TP
    (`mlp_tensor_parallel` False). None without TP or under another mode."""
    if train.recompute != "op" or train.tp == 1:
        return "all_gather", 0
    if train.sequence_parallel:
        return "all_gather", 2 if mlp_tensor_parallel else 1
    return "all_reduce", 1
