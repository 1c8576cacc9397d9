"""PyTorch's context parallelism (torchtitan): the ring attention's K/V exchange and its merging of
partial outputs, which the attention's FLOPs (`model.gemm`: s/cp queries against all s keys, causal
half) do not hold.

**Source.** torchtitan calls `torch.distributed.tensor.experimental.context_parallel` (torchtitan
utils.py `create_context_parallel_ctx` at 9dec370, 2024-12, the commit of its published H100 tables),
with `--experimental.context_parallel_rotate_method` `allgather` by default (config_manager.py) and SDPA
limited to the flash and memory-efficient backends ("currently we only support these two SDP backends",
`get_train_context`). The ring is PyTorch's `_templated_ring_attention` and
`_templated_ring_attention_backward` (torch/distributed/tensor/experimental/_attention.py, late-2024
form with `_RotateMethod.PRE_ALL_GATHER`; the same loops in 2025):

- **Load balancing** (`_ContextParallelOptions.enable_load_balance = True`; torchtitan keeps it): each rank
  holds the sequence chunks r and 2·cp − 1 − r. Step 0 runs causal SDPA on the local s/cp queries and
  keys; each of the cp − 1 later steps runs one non-causal SDPA of s/cp queries against half a chunk
  of keys, or half the queries against a whole chunk: every rank does the same (s/cp)·s/2 score tiles,
  so there is no causal imbalance to price, and `model.gemm` already counts those FLOPs.
- **Exchange, forward.** K and V of the rank (torchtitan's Llama repeats the KV heads to the query
  heads before SDPA, `repeat_kv` in models/llama/model.py: so q/t wide, not the KV groups' width) are
  concatenated and all-gathered once (`_AllGatherRotater`, `ft_c.all_gather_tensor`, asynchronous),
  issued before step 0's SDPA and waited at step 1: hidden behind the local causal block, 1/cp of the
  attention's work.
- **Exchange, backward.** K and V are all-gathered again the same way; the gradients dK, dV go round the
  ring in fp32 (`convert_to_f32 = True`, `accum_dtype`) by `_AllToAllRotater` (`ft_c.permute_tensor` to
  rank + 1) after every one of the cp steps; each is waited after the next step's SDPA backward, so
  cp − 1 of them hide behind one block's backward each and the last is waited after the loop.
- **Merging.** Every step's output and log-sum-exp are merged into an fp32 accumulator
  (`_SDPAMerger`: `out - sigmoid(block_lse - lse) * (out - block_out)`), a half-chunk step through
  `_partial_update` (`torch.cat` of the chunks); the backward accumulates dQ, dK, dV in fp32 and
  concatenates dK, dV for the send (`torch.cat([grad_key.flatten(), grad_value.flatten()])`). torchtitan
  compiles each block, and the ring is traced into the graph (`_maybe_wait`: "When tracing the code, the
  result tensor is not an AsyncCollectiveTensor"), so the element-wise work is counted as fused: what
  each step must read and write (`FORWARD_STEP_BYTES`, `BACKWARD_STEP_BYTES`), not one kernel per
  operator.

Megatron-LM's context parallelism is Transformer Engine's (`AttnFuncWithCPAndKVP2P`: a p2p ring of
fused-attention kernels that overlaps each send with the previous chunk's attention); it is not priced
here and keeps the model's one-kernel attention (`RING_FRAMEWORKS`).
"""

from __future__ import annotations

from tracelog.hardware import Gpu, Link
from tracelog.model.collectives import link_for, predict_collective, spans_nodes
from tracelog.model.flops import ModelConfig, TrainConfig, stage_layers
from tracelog.model.gemm import FLASH_BACKWARD_FACTOR, HBM_SHARE, KERNEL_OVERHEAD_S

RING_FRAMEWORKS = ("torchtitan",)
"""Frameworks whose context parallelism is PyTorch's `context_parallel` ring (module docstring)."""

KV_BYTES = 2
"""Bytes of a K or V element in the exchange: the BF16 the SDPA kernels take (`convert_to_f32` upcasts
only the merged outputs and the gradients)."""

GRAD_BYTES = 4
"""Bytes of a dK or dV element on the ring: fp32 (`accum_dtype = torch.float32` with `convert_to_f32`)."""

FORWARD_STEP_BYTES = 10
"""Bytes per output element moved by the merge of one later step: read the step's BF16 output (2) and
the fp32 accumulator (4), write the accumulator (4) (`_SDPAMerger._merge_one`; the log-sum-exp is one
value per head and row, d = 128 times fewer)."""

FORWARD_EDGE_BYTES = 12
"""Bytes per output element outside the later steps: step 0's output cast to fp32 (read 2, write 4,
`_SDPAMerger.step`) and the merged result cast back (read 4, write 2, `results`)."""

BACKWARD_STEP_BYTES = 30
"""Bytes per query element moved by one backward step: dQ accumulated in fp32 (read the step's BF16
gradient 2, the accumulator 4, write 4) and dK, dV the same each, written into the buffer sent on
(`grad_query += grad_query_`, `grad_key += grad_key_`, the `torch.cat` of the send)."""

BACKWARD_EDGE_BYTES = 30
"""Bytes per query element outside the steps: the three fp32 accumulators zeroed (`torch.zeros_like`,
3 × 4) and cast back to BF16 (dQ read 4 write 2; dK, dV received in fp32 and cast, 2 × 6)."""


def uses_ring(train: TrainConfig) -> bool:
    """Whether `train` runs PyTorch's context-parallel ring: CP > 1 under a `RING_FRAMEWORKS` trainer."""
    return train.cp > 1 and train.framework in RING_FRAMEWORKS


def ring_elements(cfg: ModelConfig, train: TrainConfig) -> int:
    """Elements of the local queries (and of K, V after `repeat_kv`) on one GPU for one micro-batch:
    b · s/cp · q/t."""
    return train.mbs * (cfg.seq_len // train.cp) * (cfg.q_width // train.tp)


def merge_seconds(cfg: ModelConfig, train: TrainConfig, gpu: Gpu) -> tuple[float, float]:
    """Seconds of one layer's ring bookkeeping for one micro-batch, forward and backward: the merges'
    bytes at `HBM_SHARE` of the bandwidth plus the cp − 1 extra SDPA launches of each pass (one kernel a
    step where the model counts one)."""
    if not uses_ring(train):
        return 0.0, 0.0
    elements = ring_elements(cfg, train)
    bandwidth = gpu.memory_bandwidth_gbps * 1e9 * HBM_SHARE
    extra_kernels = (train.cp - 1) * KERNEL_OVERHEAD_S
    forward = elements * ((train.cp - 1) * FORWARD_STEP_BYTES + FORWARD_EDGE_BYTES) / bandwidth
    backward = elements * (train.cp * BACKWARD_STEP_BYTES + BACKWARD_EDGE_BYTES) / bandwidth
    return forward + extra_kernels, backward + extra_kernels


def exchange_seconds(
    cfg: ModelConfig,
    train: TrainConfig,
    gpu: Gpu,
    fabric: Link | None,
    gpus_per_node: int,
    alpha_us: float,
    link_efficiency: float,
    net: tuple[float, float] | None = None,
) -> tuple[float, float]:
    """Seconds of one K/V all-gather over the CP group and of one fp32 dK/dV send to the next rank, for
    one layer and micro-batch, before any overlap. CP ranks are TP apart (torchtitan's mesh order
    pp, dp_replicate, dp_shard, cp, tp; Megatron's tp-cp-ep-dp-pp); a group that spans nodes takes
    `net`'s α and efficiency, as the run's other groups do."""
    if not uses_ring(train):
        return 0.0, 0.0
    elements = ring_elements(cfg, train)
    stride = train.tp
    alpha, eff = alpha_us, link_efficiency
    if net is not None and spans_nodes(train.cp, gpus_per_node, stride):
        alpha, eff = net
    group = link_for(train.cp, gpus_per_node, gpu, fabric, stride=stride)
    gathered = predict_collective(
        "all_gather", 2 * elements * KV_BYTES * train.cp, train.cp, group.unidirectional_gbps, alpha, eff
    )
    pair = link_for(2, gpus_per_node, gpu, fabric, stride=stride)
    send = predict_collective("sendrecv", 2 * elements * GRAD_BYTES, 2, pair.unidirectional_gbps, alpha, eff)
    return gathered.time_us * 1e-6, send.time_us * 1e-6


def ring_seconds(
    cfg: ModelConfig,
    train: TrainConfig,
    gpu: Gpu,
    attention_forward_s: float,
    fabric: Link | None,
    gpus_per_node: int,
    alpha_us: float,
    link_efficiency: float,
    net: tuple[float, float] | None = None,
) -> float:
    """The ring's cost over one iteration on one GPU, beyond the attention's FLOPs: per layer of the
    fullest stage and micro-batch, each forward pass (twice with a recomputed attention: full or
    selective recomputation) merges its steps and waits for the part of the K/V all-gather that step 0's
    causal block (1/cp of `attention_forward_s`, one layer's attention forward) does not cover; the
    backward pass merges, waits likewise for its all-gather behind step 0's backward, for each of the
    cp − 1 dK/dV sends past the next block's backward, and for the last send whole."""
    if not uses_ring(train):
        return 0.0
    merge_fwd, merge_bwd = merge_seconds(cfg, train, gpu)
    gather, send = exchange_seconds(cfg, train, gpu, fabric, gpus_per_node, alpha_us, link_efficiency, net)
    block_fwd = attention_forward_s / train.cp
    block_bwd = FLASH_BACKWARD_FACTOR * block_fwd
    forward = merge_fwd + max(0.0, gather - block_fwd)
    backward = merge_bwd + max(0.0, gather - block_bwd) + (train.cp - 1) * max(0.0, send - block_bwd) + send
    passes = 2 if train.recompute in ("full", "selective") else 1
    layers = stage_layers(cfg.layers, train.pp, train.embedding_slots)
    return (passes * forward + backward) * layers * train.microbatches
