"""Iteration time from first principles: compute operation by operation (`model.gemm`), the pipeline
bubble and point-to-point sends, tensor- and data-parallel communication from the collective model with
the overlap the framework does (the linear-layer roofline is `model.roofline`)."""

from __future__ import annotations

from dataclasses import dataclass

from tracelog.errors import TracelogError
from tracelog.hardware import Gpu, Link, link, peak_tflops
from tracelog.hardware import gpu as catalog_gpu
from tracelog.model.checkpointing import op_recompute_seconds, op_recomputed_tp_collectives
from tracelog.model.collectives import (
    DEFAULT_ALPHA_US,
    DEFAULT_LINK_EFFICIENCY,
    link_for,
    predict_collective,
    spans_nodes,
)
from tracelog.model.context_parallel import ring_seconds
from tracelog.model.flops import ModelConfig, TrainConfig, hardware_flops, microbatch_tokens, stage_layers
from tracelog.model.gemm import (
    FLASH_BACKWARD_FACTOR,
    KERNEL_OVERHEAD_S,
    Op,
    cross_entropy_seconds,
    logits_forward_op,
    optimizer_step_seconds,
)
from tracelog.model.memory import (
    embedding_params_per_gpu,
    expert_params_per_gpu,
    storage_bytes,
    transformer_params_per_gpu,
)
from tracelog.model.moe import expert_parallel_seconds, moe_layer_ops

DEFAULT_COMPUTE_EFFICIENCY = 0.52
"""The flat share of the dense peak used when `compute_efficiency` is given instead of the per-operation
model: Narayanan et al. 2021 (SC21, abstract) report 52% of theoretical peak for the 1T-parameter GPT on
3072 A100s."""

MEGATRON_BUCKET_PARAMS = 40_000_000
"""Megatron-LM's default gradient bucket with `--overlap-grad-reduce`: max(40M, 1M × DP) parameters
(`DistributedDataParallelConfig.bucket_size`, megatron/core/distributed)."""

DEEPSPEED_BUCKET_ELEMENTS = 500_000_000
"""DeepSpeed's default `reduce_bucket_size` and `allgather_bucket_size`: 5e8 elements (DeepSpeed
configuration docs, ZeRO optimizations)."""


@dataclass(frozen=True)
class TimeBreakdown:
    """Predicted seconds per iteration. `bubble_fraction` is the bubble over the ideal (bubble-free)
    time, (p−1)/(v·m), as Narayanan et al. 2021 §2.2 define it; `dp_comm_s` is the exposed part."""

    compute_s: float
    bubble_s: float
    tp_comm_s: float
    dp_comm_s: float
    total_s: float
    bubble_fraction: float
    dp_comm_total_s: float
    hardware_flops: float
    microbatches: int
    p2p_s: float = 0.0
    optimizer_s: float = 0.0
    ep_comm_s: float = 0.0
    cp_comm_s: float = 0.0


def bubble_fraction(pp: int, microbatches: int, chunks: int = 1) -> float:
    """Pipeline bubble over ideal time: (p−1)/m for 1F1B, (p−1)/(v·m) with v interleaved chunks per stage
    (Narayanan et al. 2021 §2.2.1, §2.2.2)."""
    if pp < 1 or microbatches < 1 or chunks < 1:
        raise TracelogError(f"need p, m, v ≥ 1; got {pp}, {microbatches}, {chunks}")
    return (pp - 1) / (chunks * microbatches)


def _group_constants(
    alpha_us: float,
    link_efficiency: float,
    net: tuple[float, float] | None,
    n_ranks: int,
    gpus_per_node: int,
    stride: int = 1,
) -> tuple[float, float]:
    """(α, e) of a group of `n_ranks` ranks `stride` apart: `net`, the fabric's pair, when the group
    spans nodes (`spans_nodes`) and one is given, else the intra-node pair."""
    if net is not None and spans_nodes(n_ranks, gpus_per_node, stride):
        return net
    return alpha_us, link_efficiency


def _resolve_gpu(gpu: Gpu | str) -> Gpu:
    return gpu if isinstance(gpu, Gpu) else catalog_gpu(gpu)


def _resolve_link(fabric: Link | str | None) -> Link | None:
    return link(fabric) if isinstance(fabric, str) else fabric


def tp_comm_seconds(
    cfg: ModelConfig,
    train: TrainConfig,
    gpu: Gpu | str,
    fabric: Link | str | None = None,
    gpus_per_node: int = 8,
    alpha_us: float = DEFAULT_ALPHA_US,
    link_efficiency: float = DEFAULT_LINK_EFFICIENCY,
    net: tuple[float, float] | None = None,
) -> float:
    """Tensor-parallel all-reduces of one iteration on one GPU: per layer and microbatch 2 in the forward
    and 2 in the backward pass, each of s·b·h activations (Narayanan et al. 2021 §3.2; Shoeybi et al.
    2019 Fig. 4), 2 more for the recomputed forward with full recomputation, and the collectives
    torchtitan's per-operation policy repeats (`op_recomputed_tp_collectives`: the two all-gathers of
    the attention's and the MLP's input with sequence parallelism). Sequence parallelism swaps each
    all-reduce for a reduce-scatter plus an all-gather, the same bytes on the bus (Korthikanti 2022
    §4.2.2). Not overlapped with compute."""
    if train.tp == 1:
        return 0.0
    one = _tp_collective_seconds(
        "all_reduce", cfg, train, gpu, fabric, gpus_per_node, alpha_us, link_efficiency, net
    )
    per_layer = 6 if train.recompute == "full" else 4
    if cfg.all_moe and train.expert_tp == 1:
        # experts outside TP: the MLP's two collectives become the token dispatcher's (`model.moe`)
        per_layer //= 2
    layers_per_stage = stage_layers(cfg.layers, train.pp, train.embedding_slots)
    repeated = tp_repeated_seconds(cfg, train, gpu, fabric, gpus_per_node, alpha_us, link_efficiency, net)
    return per_layer * layers_per_stage * train.microbatches * one + repeated


def tp_repeated_seconds(
    cfg: ModelConfig,
    train: TrainConfig,
    gpu: Gpu | str,
    fabric: Link | str | None = None,
    gpus_per_node: int = 8,
    alpha_us: float = DEFAULT_ALPHA_US,
    link_efficiency: float = DEFAULT_LINK_EFFICIENCY,
    net: tuple[float, float] | None = None,
) -> float:
    """The part of `tp_comm_seconds` that torchtitan's per-operation policy adds: the collectives its
    backward pass repeats (`op_recomputed_tp_collectives`), each costed as the forward's, on every layer
    and micro-batch."""
    op, count = op_recomputed_tp_collectives(train, not (cfg.all_moe and train.expert_tp == 1))
    if not count:
        return 0.0
    one = _tp_collective_seconds(op, cfg, train, gpu, fabric, gpus_per_node, alpha_us, link_efficiency, net)
    return count * one * stage_layers(cfg.layers, train.pp, train.embedding_slots) * train.microbatches


def _tp_collective_seconds(
    op: str,
    cfg: ModelConfig,
    train: TrainConfig,
    gpu: Gpu | str,
    fabric: Link | str | None,
    gpus_per_node: int,
    alpha_us: float,
    link_efficiency: float,
    net: tuple[float, float] | None,
) -> float:
    """One tensor-parallel collective `op` over a micro-batch's s·b·h activations, in seconds."""
    g = _resolve_gpu(gpu)
    size = microbatch_tokens(cfg, train) * cfg.hidden * storage_bytes(train.precision)
    bottleneck = link_for(train.tp, gpus_per_node, g, _resolve_link(fabric))
    alpha_us, link_efficiency = _group_constants(alpha_us, link_efficiency, net, train.tp, gpus_per_node)
    one = predict_collective(op, size, train.tp, bottleneck.unidirectional_gbps, alpha_us, link_efficiency)
    return one.time_us * 1e-6


ASYNC_TP_GEMMS = ("qkv", "mlp_up")
"""The column-parallel layers, whose input gradient needs a tensor-parallel collective in the backward
pass (Shoeybi et al. 2019 Fig. 3, the `f` operator): the one an asynchronous all-reduce hides."""


def tp_async_hidden_seconds(
    cfg: ModelConfig,
    train: TrainConfig,
    gpu: Gpu | str,
    layer_ops: tuple[Op, ...],
    fabric: Link | str | None = None,
    gpus_per_node: int = 8,
    alpha_us: float = DEFAULT_ALPHA_US,
    link_efficiency: float = DEFAULT_LINK_EFFICIENCY,
    net: tuple[float, float] | None = None,
) -> float:
    """What of `tp_comm_seconds` the backward pass hides with `async_tp_allreduce`: each column-parallel
    layer (`ASYNC_TP_GEMMS`) launches its input-gradient all-reduce (a reduce-scatter with sequence
    parallelism) asynchronously and computes its weight gradient meanwhile, a GEMM as long as its forward
    one, so up to that GEMM's time of the collective is off the critical path. Megatron-LM
    (`ColumnParallelLinearWithAsyncAllreduce`, megatron/mpu/layers.py, merged 2021-09-07 as
    `--async-tensor-model-parallel-allreduce`; `LinearWithGradAccumulationAndAsyncCommunication` in
    Megatron-core) and Transformer Engine (`_Linear.backward`, "Overlap dgrad-RS/AR with wgrad") do it.
    Korthikanti et al. 2022 §6.2, Table 4 (22B model, TP 8, one layer): the backward pass takes 11.9 ms
    against 7.7 ms forward, 1.55×, where the two exposed forward all-reduces and twice the forward's
    compute would give 2×; full recomputation costs 39 % rather than 33 % "due to an optimization in the
    backward pass where we overlap all-reduce communication with the linear weight's gradient
    computation". The recomputed forward's all-reduces stay exposed; with sequence parallelism the
    all-gather of the row-parallel layers' output gradient does too, and the column-parallel inputs'
    all-gather for the weight gradient runs under the input-gradient GEMM."""
    if train.tp == 1 or not train.async_tp_allreduce:
        return 0.0
    op = "reduce_scatter" if train.sequence_parallel else "all_reduce"
    comm = _tp_collective_seconds(op, cfg, train, gpu, fabric, gpus_per_node, alpha_us, link_efficiency, net)
    per_layer = sum(min(comm, o.time_s) for o in layer_ops if o.name in ASYNC_TP_GEMMS)
    layers = stage_layers(cfg.layers, train.pp, train.embedding_slots)
    return per_layer * layers * train.microbatches


@dataclass(frozen=True)
class DataParallelTraffic:
    """One iteration's DP collectives on one GPU: the gradient reduction (all-reduce, or reduce-scatter
    when sharded) and the weight all-gathers, in seconds, and the same for the last bucket of each."""

    reduce_s: float
    gather_s: float
    last_reduce_s: float
    last_gather_s: float

    @property
    def total_s(self) -> float:
        return self.reduce_s + self.gather_s


def dp_traffic(
    cfg: ModelConfig,
    train: TrainConfig,
    gpu: Gpu | str,
    fabric: Link | str | None = None,
    gpus_per_node: int = 8,
    alpha_us: float = DEFAULT_ALPHA_US,
    link_efficiency: float = DEFAULT_LINK_EFFICIENCY,
    net: tuple[float, float] | None = None,
) -> DataParallelTraffic:
    """Data-parallel gradient traffic of one iteration on one GPU, over the params it holds
    (params/(tp·pp) plus its embedding): an all-reduce of the grads without sharding; a reduce-scatter of
    the grads plus an all-gather of the weights with ZeRO-1/2 or Megatron's distributed optimizer; with
    ZeRO-3 a second all-gather of the weights for the backward pass (ZeRO paper §7: 1.5× plain DP).
    Buckets: Megatron's max(40M, 1M·DP) parameters, DeepSpeed's 5e8 elements. Routed experts reduce over
    their expert-data-parallel group instead (`TrainConfig.expert_dp`), nothing where it is one rank."""
    d = train.dp * train.cp
    if d == 1:
        return DataParallelTraffic(0.0, 0.0, 0.0, 0.0)
    g = _resolve_gpu(gpu)
    experts = expert_params_per_gpu(cfg, train)
    params = transformer_params_per_gpu(cfg, train) + embedding_params_per_gpu(cfg, train)
    if experts and train.expert_dp < d:
        params -= experts * (1 - (train.expert_dp - 1) / (d - 1))  # the expert grads' smaller group
    weight_bytes = storage_bytes(train.precision)
    fp32_buffer = train.distributed_optimizer and train.fp32_grad_buffer
    grad_bytes = 4 if train.fp32_grads or fp32_buffer or train.fp32_reduce else weight_bytes
    bottleneck = link_for(d, gpus_per_node, g, _resolve_link(fabric), stride=train.tp)
    bw = bottleneck.unidirectional_gbps
    alpha_us, link_efficiency = _group_constants(alpha_us, link_efficiency, net, d, gpus_per_node, train.tp)
    if train.framework == "deepspeed" or train.framework == "megatron-deepspeed":
        bucket = min(params, DEEPSPEED_BUCKET_ELEMENTS)
    else:
        bucket = min(params, max(MEGATRON_BUCKET_PARAMS, 1_000_000 * d))

    def t(op: str, size: float) -> float:
        return predict_collective(op, size, d, bw, alpha_us, link_efficiency).time_us * 1e-6

    def bucketed(op: str, size_per_param: int) -> tuple[float, float]:
        full, rest = divmod(params, bucket)
        last = t(op, bucket * size_per_param)
        total = full * last + (t(op, rest * size_per_param) if rest else 0.0)
        return total, (t(op, rest * size_per_param) if rest else last)

    if train.zero_stage == 0 and not train.distributed_optimizer:
        reduce_s, last_reduce = bucketed("all_reduce", grad_bytes)
        return DataParallelTraffic(reduce_s, 0.0, last_reduce, 0.0)
    reduce_s, last_reduce = bucketed("reduce_scatter", grad_bytes)
    gather_s, last_gather = bucketed("all_gather", weight_bytes)
    gathers = 2 if train.zero_stage == 3 else 1
    return DataParallelTraffic(reduce_s, gathers * gather_s, last_reduce, last_gather)


DEEPSPEED_ENGINES = ("deepspeed", "megatron-deepspeed", "hf-trainer")
"""Frameworks whose ZeRO stages 2 and 3 run DeepSpeed's engine (the Hugging Face Trainer's ZeRO comes from
its DeepSpeed integration; the FlashAttention repository's DDP runs are given as ZeRO stages too,
`heldout2_runs.toml`)."""

FSDP_EVERY_MICROBATCH = ("composer",)
"""Trainers whose PyTorch FSDP (ZeRO-2 or -3 here) syncs gradients after every micro-batch: Composer enters
`no_sync` only for a DDP-wrapped model (composer/trainer/trainer.py `_train_microbatches`, v0.16.4:
`if self.state.deepspeed_enabled or not isinstance(self.state.model, DistributedDataParallel):
sync_context = contextlib.nullcontext()`), so FSDP reduce-scatters each micro-batch's gradients, and while
it syncs them it frees the unsharded parameters after the backward pass for every sharded strategy,
SHARD_GRAD_OP too (torch/distributed/fsdp/_runtime_utils.py `_should_free_in_backward`: `state._sync_gradients
or handle._sharding_strategy in RESHARD_AFTER_FORWARD_HANDLE_STRATEGIES`), so each micro-batch gathers them
again."""


def dp_rounds(train: TrainConfig) -> tuple[int, int]:
    """How many times one iteration runs the DP gradient reduction and the weight all-gathers of
    `dp_traffic`: once each per iteration, at the gradient-accumulation boundary, for plain DP, ZeRO-1 and
    Megatron's distributed optimizer; but DeepSpeed's ZeRO-2 and -3 keep only their gradient partition, so
    they reduce after every micro-batch's backward pass (deepspeed/runtime/engine.py,
    `allreduce_gradients`: "ZeRO stage >= 2 communicates during non gradient accumulation boundaries as
    well"), and ZeRO-3 frees each layer's gathered weights after its forward and its backward, so every
    micro-batch gathers them again for both (Rajbhandari et al. 2020 §5.3; PyTorch FSDP's FULL_SHARD the
    same); Composer's FSDP does both every micro-batch, SHARD_GRAD_OP's gathers included
    (`FSDP_EVERY_MICROBATCH`). Other frameworks run them once: Megatron's distributed optimizer reduces at the boundary, and
    torchtitan's FSDP2 with pipeline parallelism keeps the weights through the micro-batches and syncs
    gradients on the last backward only (torch.distributed.pipelining)."""
    m = train.microbatches
    if train.framework in FSDP_EVERY_MICROBATCH and train.zero_stage >= 2:
        return m, m
    if train.framework not in DEEPSPEED_ENGINES:
        return 1, 1
    return (m if train.zero_stage >= 2 else 1), (m if train.zero_stage == 3 else 1)


def dp_comm_seconds(
    cfg: ModelConfig,
    train: TrainConfig,
    gpu: Gpu | str,
    fabric: Link | str | None = None,
    gpus_per_node: int = 8,
    alpha_us: float = DEFAULT_ALPHA_US,
    link_efficiency: float = DEFAULT_LINK_EFFICIENCY,
    net: tuple[float, float] | None = None,
) -> float:
    """All the DP traffic of one iteration on one GPU in seconds, overlapped or not (see `dp_traffic`), as
    many times as the iteration runs it (`dp_rounds`)."""
    dp = dp_traffic(cfg, train, gpu, fabric, gpus_per_node, alpha_us, link_efficiency, net)
    reductions, gathers = dp_rounds(train)
    return reductions * dp.reduce_s + gathers * dp.gather_s


@dataclass(frozen=True)
class StageCompute:
    """Compute of the slowest pipeline stage (the last: it also holds the output layer) on one GPU, per
    micro-batch: forward, backward (2× forward) and recomputed forward, in seconds; the optimizer step
    once per iteration; and the forward operations of one layer."""

    forward_s: float
    backward_s: float
    recompute_s: float
    optimizer_s: float
    layer_ops: tuple[Op, ...]

    @property
    def microbatch_s(self) -> float:
        return self.forward_s + self.backward_s + self.recompute_s


SELECTIVE_OPS = ("scores", "softmax_dropout", "context", "attention")
"""What selective recomputation recomputes: the attention core (Korthikanti et al. 2022 §5)."""


def stage_compute(
    cfg: ModelConfig, train: TrainConfig, gpu: Gpu | str, compute_scale: float = 1.0
) -> StageCompute:
    """Per-operation compute of the last pipeline stage: l/p layers (the layers split evenly over stages,
    Narayanan et al. 2021 §2.2) plus the output layer, whose logits GEMM is why the last stage is the
    slowest in Megatron-LM; DeepSpeed's PipelineModule partitions by parameters or by layer type
    (`partition_method`, BigScience tr11: `type:transformer|embedding`), which gives the output layer a
    share of the balance, so there the logits count 1/p per stage; then the cross-entropy loss over the
    logits (`cross_entropy_seconds`, memory-bound, its own forward and backward passes); backward = 2 ×
    forward for the layers and the output layer (two GEMMs per forward GEMM), but 2.5 × for a fused
    attention, which recomputes its scores (`FLASH_BACKWARD_FACTOR`); full recomputation repeats the layers'
    forward, selective the attention core, `op` what torchtitan's policy recomputes (`model.checkpointing`);
    the optimizer step over the parameters this GPU updates."""
    if compute_scale <= 0:
        raise TracelogError(f"compute scale must be positive, got {compute_scale}")
    g = _resolve_gpu(gpu)
    ops = tuple(moe_layer_ops(cfg, train, g, compute_scale))
    layer_fwd = sum(op.time_s for op in ops)
    layers = stage_layers(cfg.layers, train.pp, train.embedding_slots)
    logits = logits_forward_op(cfg, train, g, compute_scale).time_s + KERNEL_OVERHEAD_S
    loss_fwd, loss_bwd = cross_entropy_seconds(cfg, train, g)
    if train.pp > 1 and train.framework in ("megatron-deepspeed", "deepspeed"):
        # DeepSpeed's PipelineModule balances the output layer (and its loss) into the partition
        logits, loss_fwd, loss_bwd = logits / train.pp, loss_fwd / train.pp, loss_bwd / train.pp
    forward = layers * layer_fwd + logits + loss_fwd
    # a fused attention's backward recomputes its scores: 2.5 forwards, not 2 (FLASH_BACKWARD_FACTOR)
    attention = sum(op.time_s for op in ops if op.kind == "attention")
    backward = 2 * (layers * layer_fwd + logits) + loss_bwd
    backward += layers * (FLASH_BACKWARD_FACTOR - 2) * attention
    if train.recompute == "full":
        recompute = layers * layer_fwd
    elif train.recompute == "selective":
        recompute = layers * sum(op.time_s for op in ops if op.name in SELECTIVE_OPS)
    elif train.recompute == "op":
        recompute = layers * op_recompute_seconds(ops, cfg)
    else:
        recompute = 0.0
    params = transformer_params_per_gpu(cfg, train) + embedding_params_per_gpu(cfg, train)
    sharded = train.zero_stage >= 1 or train.distributed_optimizer
    experts = expert_params_per_gpu(cfg, train)
    local = (params - experts) / (train.dp * train.cp) + experts / train.expert_dp if sharded else params
    return StageCompute(forward, backward, recompute, optimizer_step_seconds(local, g), ops)


def p2p_seconds(
    cfg: ModelConfig,
    train: TrainConfig,
    gpu: Gpu | str,
    fabric: Link | str | None = None,
    gpus_per_node: int = 8,
    alpha_us: float = DEFAULT_ALPHA_US,
    link_efficiency: float = DEFAULT_LINK_EFFICIENCY,
    net: tuple[float, float] | None = None,
) -> float:
    """Pipeline sends per micro-batch between stages, on the critical path of 1F1B: the activations
    forward and their gradients backward, s·b·h values each (Narayanan et al. 2021 §2.2). Both frameworks
    split each send over the TP ranks, s·b·h/t per GPU: Megatron's scatter/gather optimisation (§4.1), and
    DeepSpeed's pipeline engine (`PartitionedTensor`, `is_pipe_partitioned` and `is_grad_partitioned` on
    whenever TP > 1; see `DEEPSPEED_PIPE_GATHERS` for the all-gathers it adds). Neighbouring stages are
    TP·DP ranks apart (Megatron's rank order), so they share a node only when TP·DP < GPUs per node. The
    interleaved schedule crosses v times as many stage boundaries per micro-batch (Narayanan et al. 2021
    §2.2.2)."""
    if train.pp == 1:
        return 0.0
    g = _resolve_gpu(gpu)
    full = microbatch_tokens(cfg, train) * cfg.hidden * storage_bytes(train.precision)
    stride = train.tp * train.dp * train.cp
    bottleneck = link_for(2, gpus_per_node, g, _resolve_link(fabric), stride=stride)
    pair = _group_constants(alpha_us, link_efficiency, net, 2, gpus_per_node, stride)
    one = predict_collective("sendrecv", full / train.tp, 2, bottleneck.unidirectional_gbps, *pair)
    per_microbatch = 2 * one.time_us * 1e-6
    if train.tp > 1 and train.framework in ("megatron-deepspeed", "deepspeed"):
        tp_link = link_for(train.tp, gpus_per_node, g, _resolve_link(fabric))
        tp_pair = _group_constants(alpha_us, link_efficiency, net, train.tp, gpus_per_node)
        gather = predict_collective("all_gather", full, train.tp, tp_link.unidirectional_gbps, *tp_pair)
        per_microbatch += DEEPSPEED_PIPE_GATHERS * gather.time_us * 1e-6
    return train.chunks * train.microbatches * per_microbatch


DEEPSPEED_PIPE_GATHERS = 3
"""All-gathers over the TP group per micro-batch on a middle stage of DeepSpeed's pipeline engine with TP
> 1 (deepspeed/runtime/pipe/engine.py since the engine's first release, #392 of 2020-09, as of February
2022 and today with the `pipe_partitioned` and `grad_partitioned` defaults): each rank sends its 1/t of
the stage output (`PartitionedTensor`) and frees the rest; the next stage rebuilds its input
(`part_input.full()`, an all-gather) before the forward pass; before the backward pass the stage rebuilds
its own freed output (`part_output.full()`) and the received gradient (`part_grad.full()`). Before, the
model had every rank send the whole s·b·h tensor, t times the bytes over the network."""


def predict_iteration(
    cfg: ModelConfig,
    train: TrainConfig,
    gpu: Gpu | str,
    fabric: Link | str | None = None,
    compute_efficiency: float | None = None,
    *,
    compute_scale: float = 1.0,
    gpus_per_node: int = 8,
    alpha_us: float = DEFAULT_ALPHA_US,
    link_efficiency: float = DEFAULT_LINK_EFFICIENCY,
    net_alpha_us: float | None = None,
    net_link_efficiency: float | None = None,
    overlap_dp: bool = False,
) -> TimeBreakdown:
    """Seconds per iteration = compute + TP communication + pipeline sends + bubble + exposed DP traffic.

    Compute is m micro-batches of the slowest stage, operation by operation (`stage_compute`), plus the
    optimizer step; `compute_scale` multiplies every sustained efficiency (calibration per GPU and
    precision). An explicit `compute_efficiency` instead spreads the hardware FLOPs evenly at that flat
    share of the dense peak, as the model did before it had operations.
    The bubble is (p−1)/(v·m) of the per-micro-batch work (Narayanan et al. 2021 §2.2).
    DP: with `overlap_grad_reduce` (Megatron `--overlap-grad-reduce`, DeepSpeed `overlap_comm`) the
    gradient reduction runs bucket by bucket during the last micro-batch's backward pass and only the
    last bucket, or what the backward pass cannot cover, is exposed; `overlap_param_gather` hides the
    all-gather behind the next forward pass likewise; `overlap_dp` forces both. TP collectives are
    exposed unless `tp_comm_overlap` (Megatron `--tp-comm-overlap`: split GEMMs pipelined with their
    collectives), which hides them behind the layer's GEMMs. `alpha_us` and `link_efficiency` are the
    collectives' α per step and link efficiency; `net_alpha_us` and `net_link_efficiency` replace them
    for the groups that span nodes (`spans_nodes`)."""
    if compute_efficiency is not None and not 0 < compute_efficiency <= 1:
        raise TracelogError(f"compute efficiency must be in (0, 1], got {compute_efficiency}")
    g = _resolve_gpu(gpu)
    m = train.microbatches
    flops = hardware_flops(cfg, train.gbs, train.recompute)
    if compute_efficiency is not None:
        peak = peak_tflops(g, train.precision) * 1e12
        per_mb = flops / train.gpus / (peak * compute_efficiency * compute_scale) / m
        forward, backward, optimizer_s = per_mb / 3, per_mb * 2 / 3, 0.0
        gemm_s = per_mb * m
    else:
        stage = stage_compute(cfg, train, g, compute_scale)
        forward, backward, optimizer_s = stage.forward_s, stage.backward_s, stage.optimizer_s
        per_mb = stage.microbatch_s
        gemm_s = (
            m
            * stage_layers(cfg.layers, train.pp, train.embedding_slots)
            * sum(op.time_s for op in stage.layer_ops if op.kind != "memory")
        )
    compute_s = per_mb * m + optimizer_s
    net = None
    if net_alpha_us is not None or net_link_efficiency is not None:
        net = (
            alpha_us if net_alpha_us is None else net_alpha_us,
            link_efficiency if net_link_efficiency is None else net_link_efficiency,
        )
    tp_total = tp_comm_seconds(cfg, train, g, fabric, gpus_per_node, alpha_us, link_efficiency, net)
    if train.tp_comm_overlap and compute_efficiency is None:
        repeated = tp_repeated_seconds(cfg, train, g, fabric, gpus_per_node, alpha_us, link_efficiency, net)
        tp_s = tp_overlap_seconds(tp_total, gemm_s, stage.layer_ops, cfg, train, g, repeated)
    elif train.tp_comm_overlap:
        tp_s = max(0.0, tp_total - 3 * gemm_s)
    elif compute_efficiency is None:
        tp_s = tp_total - tp_async_hidden_seconds(
            cfg, train, g, stage.layer_ops, fabric, gpus_per_node, alpha_us, link_efficiency, net
        )
    else:
        tp_s = tp_total
    p2p_total = p2p_seconds(cfg, train, g, fabric, gpus_per_node, alpha_us, link_efficiency, net)
    ep_s = expert_parallel_seconds(
        cfg, train, g, _resolve_link(fabric), gpus_per_node, alpha_us, link_efficiency, net
    )
    if train.moe_a2a_overlap:
        # `--overlap-moe-expert-parallel-comm`: one micro-batch's dispatch and combine run under another
        # micro-batch's forward or backward (Megatron-core's combined 1F1B schedule, `combined_1f1b.py`):
        # exposed only past the stage's compute
        ep_s = max(0.0, ep_s - per_mb * m)
    attention_s = (
        0.0
        if compute_efficiency is not None
        else sum(op.time_s for op in stage.layer_ops if op.kind == "attention")
    )
    cp_s = ring_seconds(
        cfg, train, g, attention_s, _resolve_link(fabric), gpus_per_node, alpha_us, link_efficiency, net
    )
    fraction = bubble_fraction(train.pp, m, train.chunks)
    bubble_s = fraction * (per_mb * m + tp_s + p2p_total + ep_s + cp_s)
    # Megatron-LM's interleaved schedule sends a chunk's activations while the next chunk computes
    # (`--overlap-p2p-communication`, on unless `--no-overlap-p2p-communication`; arguments.py: it acts on
    # the interleaved schedule only, and not in warm-up and flush, whose sends the bubble term holds)
    hidden = train.framework == "megatron" and train.chunks > 1 and train.overlap_p2p_comm
    p2p_s = 0.0 if hidden else p2p_total
    dp = dp_traffic(cfg, train, g, fabric, gpus_per_node, alpha_us, link_efficiency, net)
    reduce_s, gather_s = dp.reduce_s, dp.gather_s
    if overlap_dp or train.overlap_grad_reduce:
        reduce_s = max(dp.last_reduce_s, dp.reduce_s - backward)
    if overlap_dp or train.overlap_param_gather:
        gather_s = max(dp.last_gather_s, dp.gather_s - forward)
    # each round hides behind its own micro-batch's pass (`dp_rounds`)
    reductions, gathers = dp_rounds(train)
    dp_s = reductions * reduce_s + gathers * gather_s
    dp_total_s = reductions * dp.reduce_s + gathers * dp.gather_s
    total = compute_s + tp_s + p2p_s + bubble_s + dp_s + ep_s + cp_s
    return TimeBreakdown(
        compute_s, bubble_s, tp_s, dp_s, total, fraction, dp_total_s, flops, m, p2p_s, optimizer_s, ep_s, cp_s
    )


UB_COMM_SMS = 16
"""SMs a Transformer Engine userbuffers collective of the `pipeline` and `bulk` methods takes, and which
the GEMM beside it leaves to it (`num_sm` 16 and `set_sm_margin` for every method but `ring_exchange`:
transformer_engine/pytorch/module/base.py, `initialize_ub`, `get_default_config`)."""

UB_PIPELINE_SPLITS = 4
"""Chunks a `pipeline` reduce-scatter splits its GEMM into (`num_splits` 4, the same defaults): the
reduce-scatter of the last chunk has no GEMM left to hide behind."""

UB_MARGIN_GEMMS = {"proj": 1, "mlp_down": 1, "qkv": 2, "mlp_up": 2}
"""GEMMs that run beside an SM-taking collective, per forward GEMM's time: the forward of `proj_fprop`
and `fc2_fprop` (pipeline reduce-scatter), and both backward GEMMs of `qkv` and `fc1` (`*_dgrad` and
`*_wgrad`, bulk all-gather and reduce-scatter); `qkv_fprop`, `fc1_fprop`, `proj_dgrad` and `fc2_dgrad`
are ring exchanges on the copy engines, which take no SMs (TE's default methods, as above)."""


def tp_overlap_seconds(
    tp_total: float,
    gemm_s: float,
    layer_ops: tuple[Op, ...],
    cfg: ModelConfig,
    train: TrainConfig,
    gpu: Gpu,
    repeated_s: float = 0.0,
) -> float:
    """What tensor-parallel communication still costs when Transformer Engine overlaps it with the GEMMs
    (Megatron-LM `--tp-comm-overlap`, userbuffers with TE's default methods): the collectives the GEMMs
    cannot cover (`tp_total` beyond the fwd+bwd GEMM time), the last `pipeline` chunk of each forward
    reduce-scatter (a quarter of half of each forward all-reduce's bytes; `repeated_s` of `tp_total`, the
    all-gathers torchtitan's per-operation policy repeats, `tp_repeated_seconds`, has none), and the GEMMs
    that leave `UB_COMM_SMS` SMs to a collective run on the rest (`UB_MARGIN_GEMMS`; the recomputed
    forward of full recomputation too). Overlap is no free lunch: the split GEMMs and the SMs given away are what
    it costs (Wang et al. 2023, "Overlap Communication with Dependent Computation via Decomposition in
    Large Deep Learning Models", ASPLOS: decomposition slows the computation it overlaps)."""
    forward_share = (4 if train.recompute == "full" else 2) / (6 if train.recompute == "full" else 4)
    last_chunks = (tp_total - repeated_s) * forward_share / 2 / UB_PIPELINE_SPLITS
    margin = 0.0
    if gpu.sm_count and gpu.sm_count > UB_COMM_SMS:
        per_layer = sum(op.time_s * UB_MARGIN_GEMMS.get(op.name, 0) for op in layer_ops)
        if train.recompute == "full":
            per_layer += sum(op.time_s for op in layer_ops if op.name in ("proj", "mlp_down"))
        layers = stage_layers(cfg.layers, train.pp, train.embedding_slots)
        margin = per_layer * layers * train.microbatches * UB_COMM_SMS / (gpu.sm_count - UB_COMM_SMS)
    return max(0.0, tp_total - 3 * gemm_s) + last_chunks + margin
