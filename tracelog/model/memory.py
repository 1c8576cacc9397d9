"""Memory per GPU: model states by precision and ZeRO stage, activations by parallelism, recomputation
and attention kernel, embeddings and logits on the first and last pipeline stages, the framework's
communication buffers, the CUDA context and the caching allocator's reserve. Bytes throughout.

Two totals answer two questions: `reserved` is what PyTorch's caching allocator holds (Megatron's
`max reserved`), `total` adds the CUDA context, what `nvidia-smi` shows and what must fit the device."""

from __future__ import annotations

from dataclasses import dataclass, replace

from tracelog.errors import TracelogError
from tracelog.hardware import Gpu, normalize_precision
from tracelog.model.checkpointing import op_saved_bytes_per_layer
from tracelog.model.float8 import LOW_PRECISION_GEMMS, keeps_fp8_linear_inputs
from tracelog.model.flops import (
    ModelConfig,
    Recompute,
    TrainConfig,
    expert_params,
    microbatch_tokens,
    params_from_config,
    stage_split,
)
from tracelog.model.nccl_memory import (  # noqa: F401  (re-exported: what a GPU holds)
    LAZY_CONNECT_NCCL,
    MEGATRON_FRAMEWORKS,
    NCCL_COMMUNICATOR_BYTES,
    communicator_sizes,
    nccl_bytes,
    nccl_connects_eagerly,
)
from tracelog.model.torch_native import fsdp2_unsharded_bytes, is_fsdp2, loss_bytes_per_logit

DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}


def storage_precision(precision: str) -> str:
    """The precision of a run's weights, activations, communication and every kernel but its linear
    GEMMs: BF16 for FP8 and FP4 training (LOW_PRECISION_GEMMS), the training precision otherwise."""
    precision = normalize_precision(precision)
    return "bf16" if precision in LOW_PRECISION_GEMMS else precision


def storage_bytes(precision: str) -> int:
    """Bytes per element of the weights, activations and communication of a run trained in `precision`."""
    return DTYPE_BYTES.get(storage_precision(precision), 2)


ADAM_STATE_BYTES = 12
"""fp32 master weights, momentum and variance: K = 12 in the ZeRO paper (Rajbhandari et al. 2020 §3.1)."""


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter held by one GPU for weights, gradients and optimizer state."""

    weights: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer


def zero_state_bytes(
    stage: int,
    dp: int,
    weight_bytes: float = 2,
    grad_bytes: float = 2,
    optimizer_bytes: float = ADAM_STATE_BYTES,
) -> StateBytes:
    """ZeRO paper (Rajbhandari et al. 2020) §5, Figure 1, mixed-precision Adam (2 + 2 + 12 = 16 B/param):
    stage 0: 16Ψ; stage 1 (P_os): 4Ψ + 12Ψ/N_d; stage 2 (P_os+g): 2Ψ + 14Ψ/N_d; stage 3 (P_os+g+p): 16Ψ/N_d.
    Other weight, gradient and optimizer-state sizes (fp32 grads: 18 B/param) shard the same way."""
    if stage not in (0, 1, 2, 3):
        raise TracelogError(f"ZeRO stage must be 0 to 3, not {stage}")
    optimizer = optimizer_bytes / dp if stage >= 1 else optimizer_bytes
    grads = grad_bytes / dp if stage >= 2 else grad_bytes
    weights = weight_bytes / dp if stage >= 3 else weight_bytes
    return StateBytes(weights=weights, grads=grads, optimizer=optimizer)


def megatron_state_bytes(
    dp: int, distributed_optimizer: bool, grad_bytes: float = 4, optimizer_bytes: float = ADAM_STATE_BYTES
) -> StateBytes:
    """Megatron-LM bf16 with fp32 main grads: 2 + 4 + 12 = 18 B/param; its distributed optimizer shards
    the 12 over data-parallel ranks: 6 + 12/d (megatron/training/theoretical_memory_usage.py). With its
    gradient buffer in the training dtype (`grad_reduce_in_fp32` off) the grads are 2 bytes; with Adam's
    state kept narrower (`TrainConfig.adam_state_bytes`) the 12 is that."""
    optimizer = optimizer_bytes / dp if distributed_optimizer else optimizer_bytes
    return StateBytes(weights=2, grads=grad_bytes, optimizer=optimizer)


def state_bytes(train: TrainConfig) -> StateBytes:
    """Bytes per parameter for a run: Megatron's distributed-optimizer layout when it is on, else ZeRO's
    at `zero_stage` with weights in the training precision and grads in it too unless `fp32_grads`
    (Megatron's default main grads, the BF16 optimizer of Megatron-DeepSpeed: 18 B/param unsharded).
    Sharding is over the data-parallel group, which spans context-parallel ranks too (dp · cp). Adam's
    master weights and moments take `train.adam_state_bytes` (12 unless the run keeps them narrower)."""
    d = train.dp * train.cp
    precision = normalize_precision(train.precision)
    if precision == "fp32":
        # Plain fp32 Adam: weights 4, grads 4, momentum and variance 8 (no separate master copy).
        weight, grad, optim = 4.0, 4.0, 8.0
        return StateBytes(
            weights=weight / d if train.zero_stage >= 3 else weight,
            grads=grad / d if train.zero_stage >= 2 else grad,
            optimizer=optim / d if train.zero_stage >= 1 else optim,
        )
    if train.distributed_optimizer and train.zero_stage <= 1:
        grad_bytes = 4 if train.fp32_grad_buffer else storage_bytes(precision)
        return megatron_state_bytes(d, True, grad_bytes, train.adam_state_bytes)
    weight = storage_bytes(precision)
    grad = 4 if train.fp32_grads else weight
    return zero_state_bytes(train.zero_stage, d, weight, grad, train.adam_state_bytes)


def activation_bytes_per_layer(
    seq_len: int,
    mbs: int,
    hidden: int,
    heads: int,
    tp: int = 1,
    sequence_parallel: bool = False,
    recompute: Recompute = "none",
    flash_attention: bool = False,
    *,
    q_width: int | None = None,
    kv_width: int | None = None,
    ffn: int | None = None,
    gated: bool = False,
    dropout: bool = True,
    fp8_inputs: bool = False,
) -> float:
    """Activation memory of one transformer layer, 16-bit activations (Korthikanti et al. 2022, Table 2):
    no parallelism s·b·h·(34 + 5as/h); tensor parallel s·b·h·(10 + 24/t + 5as/(ht)); tensor + sequence
    parallel s·b·h·(34/t + 5as/(ht)); tensor parallel + selective recompute s·b·h·(10 + 24/t); tensor +
    sequence parallel + selective s·b·h·34/t; full recompute keeps only the layer input, 2·s·b·h (§4.1),
    divided by t when it is sequence-parallel. Flash attention (Dao et al. 2022 §3.1) never materialises
    the s×s scores, softmax and dropout mask: the 5as/h term goes, as with selective recomputation (its
    per-row softmax statistics, 4·a·s·b/t bytes, are under 0.1% of the rest and left out).

    The 10 and 24 are §4.1's sum for GPT-3's shapes, per token: the two layer-norm inputs (4h), the QKV
    input (2h), the MLP input (2h) and two dropout masks (2h) stay whole without sequence parallelism;
    Q and K (4h), V (2h), the projection input (2h), the GeLU input (8h = 2·4h) and output (8h) split over
    t. The same terms from the layer's own widths: Q and the projection input 2q each, K and V 2kv each
    (grouped-query attention keeps g·d, not h), the MLP's up output 2·f (2·2f gated, SwiGLU keeps both
    halves) and its down input 2·f; no masks without dropout (`dropout=False`: the 2h masks go, and the
    unfused attention keeps its softmax output alone, 2as/h instead of 5as/h). With the defaults (q = kv
    = h, f = 4h, ungated, dropout) the result is Table 2's to the byte.

    `fp8_inputs`: Transformer Engine's FP8 linear layers keep the FP8 cast of their input for the weight
    gradient instead of the 16-bit tensor (`te.Linear` and `LayerNormLinear` save the quantized input): the
    QKV and MLP inputs and the down projection's input take 1 byte per element, not 2, while the output
    projection keeps an FP8 copy of the attention output beside the 16-bit one attention keeps. Set for
    Transformer Engine runs only (`model.float8.keeps_fp8_linear_inputs`): torchao's float8 keeps 16-bit
    inputs."""
    s, b, h, a, t = seq_len, mbs, hidden, heads, tp
    sbh = s * b * h
    if recompute == "full":
        return 2 * sbh / (t if sequence_parallel else 1)
    q = q_width if q_width is not None else h
    kv = kv_width if kv_width is not None else h
    f = ffn if ffn is not None else 4 * h
    linear_input = 1 if fp8_inputs else 2  # bytes per element of a linear layer's saved input
    whole = 4 * h + linear_input * h + linear_input * h + (2 * h if dropout else 0)  # per token, bytes
    split = 2 * q + 2 * kv + 2 * kv + 2 * q + 2 * (2 * f if gated else f) + linear_input * f
    if fp8_inputs:
        split += q  # the projection's FP8 copy of the attention output
    scores = 0.0 if flash_attention or recompute == "selective" else (5 if dropout else 2) * a * s / t
    per_token = (whole / t if sequence_parallel else whole) + split / t
    return s * b * (per_token + scores)


MIB = 2**20

CUDA_CONTEXT_BYTES = {"volta": 1271 * MIB, "default": 1573 * MIB}
"""What a process holds on the device before its first tensor (CUDA context and kernel images): 1271 MiB
on V100 32GB and 1573 MiB on A100 40GB, measured with `torch.ones(1).cuda()` and `nvidia-smi`
(BigScience tr11-176B-ml chronicles-prequel.md, "104B topology / memory usage" and "Possible topologies
for 200B"). Later parts are taken at the A100 figure."""

ALLOCATOR_OVERHEAD = 0.17
"""Reserved over allocated memory, less one: PyTorch's caching allocator keeps freed blocks and
fragments. Median of Megatron's `max reserved` / `max allocated` over the BigScience Megatron-DeepSpeed
perf logs (3D n16 with DeepSpeed twice, ZeRO-3 n16 twice, GPT-2 n4 tp4 pp4 and n64 tp4 pp64: 1.167,
1.168, 1.093, 1.081, 1.176, 1.194; median 1.17). The 3D n16 log without DeepSpeed, whose `max
allocated` never moves from its first value, shows 1.40 and is left out."""

ALLOCATOR_FLOOR = 0.045
"""The part of the reserve the allocator keeps even at the device's limit, as a share of what is
allocated. PyTorch's caching allocator holds freed blocks only while memory is free: when a cudaMalloc
fails it releases its cached blocks and tries again (`release_cached_blocks`, c10/cuda/
CUDACachingAllocator.cpp) before it raises out-of-memory. A run near capacity therefore reserves less over
what it allocates: the Nemotron 3.5 Lightning H100 performance recipe of Megatron-Bridge, at 72.066 GiB
allocated, reserved 75.340 (1.045; examples/model_verification_cards/nemotron-3.5-lightning/card.yaml,
pretrain_performance.H100), while its Gemma 4 26B SFT card, 7 GiB below the limit, shows 65.223 / 72.356
(1.109) and its Nemotron 3 Super 120B card, 10 GiB below, 58.079 / 70.336 (1.211). All three ran with
`expandable_segments:True`; a floor for the default allocator is not published, so the same is taken."""


DEEPSPEED_BUCKET_ELEMENTS = 5e8
"""DeepSpeed `zero_optimization.reduce_bucket_size` and `allgather_bucket_size` defaults, in elements
(DeepSpeed config docs, "ZeRO Optimizations for FP16 Training")."""

STAGE3_MAX_LIVE_PARAMETERS = 1e9
"""DeepSpeed `stage3_max_live_parameters` default: the cap on parameters gathered at once by ZeRO-3."""

MEMORY_OPT_ALLREDUCE_SIZE = 5e8
"""Elements per flattened bucket of DeepSpeed's `buffered_allreduce_fallback` (runtime/engine.py,
`MEMORY_OPT_ALLREDUCE_SIZE = 500000000`): the pipeline engine's BF16 path (`_bf16_reduce_grads`,
runtime/pipe/engine.py) all-reduces the fp32 gradients through one flat copy of up to that many."""

FP16_OPTIMIZER_STEP_BYTES = 8
"""Bytes per parameter DeepSpeed's ZeRO-0 16-bit optimizer (`FP16_Optimizer`, runtime/fp16/
fused_optimizer.py, taken for a fused Adam: DeepSpeed's or, from late 2021, apex's) holds at its step
beyond the 16 of mixed-precision Adam: `step` builds `[p.grad.to(torch.float32) for p in group]` and
flattens it into the master weights' `.grad` (`_flatten_dense_tensors`), so an fp32 copy of every
gradient (4) and their flat concatenation (4) live at once."""

FP16_UNFUSED_STEP_BYTES = 4
"""The same for `FP16_UnfusedOptimizer` (runtime/fp16/unfused_optimizer.py; "Creating fp16 unfused
optimizer" in the log, any other optimizer): one fp32 `.grad` per master weight, all alive through the
optimizer's step."""

MEGATRON_MAIN_GRAD_BYTES = 4
"""The fp32 main gradient Megatron-LM's 16-bit optimizer makes of each fp16 one at its step, when the
data-parallel buffer holds fp16 gradients (`step_copy_bytes`)."""

DEEPSPEED_FRAMEWORKS = ("deepspeed", "megatron-deepspeed")


def deepspeed_pipe_buffers(train: TrainConfig, stage: str) -> int:
    """Pipeline buffers of a DeepSpeed stage, each keeping the stage's output of one micro-batch until its
    backward pass: `TrainSchedule.num_pipe_buffers` = max(2, min(p − stage_id + 1, m)) (DeepSpeed
    runtime/pipe/schedule.py, 2022; `pipe_buffers['outputs']` in runtime/pipe/engine.py). None without a
    pipeline or outside DeepSpeed's engine."""
    if train.pp == 1 or train.framework not in DEEPSPEED_FRAMEWORKS:
        return 0
    stage_id = {"middle": 1, "last": train.pp - 1}.get(stage, 0)
    return max(2, min(train.pp - stage_id + 1, train.microbatches))


def cuda_context_bytes(gpu: Gpu | None) -> float:
    """The CUDA context of one process on `gpu` (`CUDA_CONTEXT_BYTES`), the A100 figure when unknown."""
    arch = gpu.architecture if gpu is not None else "default"
    return CUDA_CONTEXT_BYTES.get(arch, CUDA_CONTEXT_BYTES["default"])


@dataclass(frozen=True)
class MemoryOptions:
    """What the layout alone does not say. `reduce_bucket_size`: DeepSpeed's gradient bucket in
    elements. `partition_activations`: DeepSpeed activation checkpointing splits each checkpointed layer
    input over the tensor-parallel group (÷t); `checkpoint_in_cpu` moves them to host memory.
    `cuda_context_bytes`, `allocator_overhead` and `allocator_floor`: see `CUDA_CONTEXT_BYTES`,
    `ALLOCATOR_OVERHEAD`, `ALLOCATOR_FLOOR`. `capacity_bytes`: the device's memory, which the allocator's
    reserve yields to (down to its floor); None leaves the reserve whole. `fused_fp16_optimizer`:
    DeepSpeed's ZeRO-0 optimizer is the fused one (`step_copy_bytes`). `nccl_eager`: NCCL connects every
    communicator's rings and trees when it starts (releases before 2.22), so its buffers count
    (`nccl_bytes`); from 2.22 it connects what a collective needs at its first call (`NCCL_RUNTIME_CONNECT`,
    on by default), which holds less by an amount not published, and they are left out."""

    reduce_bucket_size: float = DEEPSPEED_BUCKET_ELEMENTS
    partition_activations: bool = False
    checkpoint_in_cpu: bool = False
    cuda_context_bytes: float = CUDA_CONTEXT_BYTES["default"]
    allocator_overhead: float = ALLOCATOR_OVERHEAD
    allocator_floor: float = ALLOCATOR_FLOOR
    capacity_bytes: float | None = None
    fused_fp16_optimizer: bool = True
    nccl_eager: bool = False


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes on the busiest GPU: the pipeline stage (first, middle or last) with the largest total. `buffers` are
    the framework's communication buffers beyond the model states, `allocator` the caching allocator's
    reserve over what is allocated, `cuda_context` the process's context."""

    weights: float
    grads: float
    optimizer: float
    activations: float
    embedding: float
    buffers: float
    allocator: float
    cuda_context: float
    nccl: float
    total: float

    @property
    def allocated(self) -> float:
        """What tensors hold at the peak (Megatron's `max allocated`)."""
        return self.weights + self.grads + self.optimizer + self.activations + self.embedding + self.buffers

    @property
    def reserved(self) -> float:
        """What the caching allocator holds (Megatron's `max reserved`): allocated plus its reserve."""
        return self.allocated + self.allocator

    def needed(self, allocator_floor: float = ALLOCATOR_FLOOR) -> float:
        """What must fit on the device: the tensors, the CUDA context, NCCL's buffers and the allocator's
        floor (`ALLOCATOR_FLOOR`), the fragments it cannot give back. The rest of `allocator` is cache that
        the allocator yields before it raises out-of-memory: a `total` equal to the device's memory (the
        cache filling the room left) is a layout that fits with `total - needed` to spare."""
        return self.allocated * (1 + allocator_floor) + self.cuda_context + self.nccl

    @property
    def mib(self) -> dict[str, float]:
        """The same figures in MiB (2^20 bytes), as PyTorch and Megatron print memory."""
        return {k: v / MIB for k, v in self.__dict__.items()}


STAGES = ("first", "middle", "last", "fullest")
"""The pipeline stages memory is computed for: the first (input embedding, p micro-batches in flight), a
middle one (the fullest layer count, p − 1 in flight), the last (output layer, logits, one in flight);
`fullest` names the stage with the most layers, whose compute sets the pace (`stage_split`)."""


def embedding_params_per_gpu(cfg: ModelConfig, train: TrainConfig, stage: str = "first") -> float:
    """Word embedding V·h split over TP, on the first stage; the last stage holds the output layer (a
    copy when tied); with one stage both sit on the same GPU unless tied (Megatron-LM
    `setup_embeddings_and_output_layer`). Learned positions s·h are on the first stage, not split.
    A middle stage holds none."""
    words = cfg.vocab * cfg.hidden / train.tp
    positions = cfg.seq_len * cfg.hidden if cfg.learned_positions else 0
    if train.pp == 1:
        return (words if cfg.tied_embeddings else 2 * words) + positions
    if stage == "middle":
        return 0.0
    return words if stage == "last" else words + positions


def stage_layer_count(cfg: ModelConfig, train: TrainConfig, stage: str = "fullest") -> int:
    """Transformer layers on `stage` (`STAGES`), from the partition rule of `stage_split`."""
    first, fullest, last = stage_split(cfg.layers, train.pp, train.embedding_slots)
    return {"first": first, "middle": fullest, "last": last}.get(stage, fullest)


def transformer_params_per_gpu(cfg: ModelConfig, train: TrainConfig, stage: str = "fullest") -> float:
    """Transformer layers of a pipeline stage (the fullest by default: ⌈L/p⌉, `stage_split`) split over
    TP. Norms and biases replicated across TP are counted as split, a sub-0.1% simplification. Routed
    experts are split over EP × expert TP instead (`expert_params_per_gpu`)."""
    per_layer = (params_from_config(cfg, include_embeddings=False) - expert_params(cfg)) / cfg.layers
    return per_layer * stage_layer_count(cfg, train, stage) / train.tp + expert_params_per_gpu(
        cfg, train, stage
    )


def expert_params_per_gpu(cfg: ModelConfig, train: TrainConfig, stage: str = "fullest") -> float:
    """The routed experts a GPU holds: a stage's share of the MoE layers, each layer's experts split over
    the expert-parallel group (E/EP experts per GPU) and each expert over expert TP (Megatron-core
    `MoELayer`: `num_local_experts = num_moe_experts // expert_model_parallel_size`; TEGroupedMLP splits
    its FC1/FC2 over `expt_tp`)."""
    experts = expert_params(cfg) / cfg.layers
    return experts * stage_layer_count(cfg, train, stage) / (train.ep * train.expert_tp)


def _layer_activations(cfg: ModelConfig, train: TrainConfig, recompute: Recompute) -> float:
    return activation_bytes_per_layer(
        cfg.seq_len // train.cp,
        train.mbs,
        cfg.hidden,
        cfg.heads,
        train.tp,
        train.sequence_parallel,
        recompute,
        train.flash_attention,
        q_width=cfg.q_width,
        kv_width=cfg.kv_width,
        ffn=cfg.token_ffn,
        gated=cfg.swiglu,
        dropout=cfg.dropout,
        fp8_inputs=keeps_fp8_linear_inputs(train),
    ) + moe_dispatch_activation_bytes(cfg, train)


def moe_dispatch_activation_bytes(cfg: ModelConfig, train: TrainConfig) -> float:
    """Beyond a dense layer of the routed width: the experts' FC1 keeps k copies of each token (permuted by
    the token dispatcher), the dense MLP input one: (k − 1)·T·h more, FP8 under a Transformer Engine FP8
    recipe (`keeps_fp8_linear_inputs`), with T = b·s/(cp·t) tokens per GPU (Megatron requires sequence
    parallelism with MoE and TP)."""
    if not cfg.all_moe or cfg.moe_topk <= 1:
        return 0.0
    tokens = microbatch_tokens(cfg, train) / train.tp
    fp8 = keeps_fp8_linear_inputs(train)
    return (cfg.moe_topk - 1) * tokens * cfg.hidden * (1 if fp8 else storage_bytes(train.precision))


def layers_in_flight(cfg: ModelConfig, train: TrainConfig, stage: str = "first") -> float:
    """Layers × micro-batches whose activations a pipeline stage holds at its peak. Under 1F1B stage i
    holds min(p − i, m) micro-batches of its layers (Narayanan et al. 2021 §2.2): the first min(p, m),
    the second (`middle`) min(p − 1, m), the last one. Interleaved with v chunks of c = k/v layers (k
    layers on a full stage), rank r runs 2(p − 1 − r) + (v − 1)·p warm-up forward passes of chunks, p
    micro-batches per chunk in turn, before its first backward pass (Megatron-core
    `get_pp_rank_microbatches`, pipeline_parallel/schedules.py), so it holds that many plus one chunk
    passes (at most m·v): on the first stage (vp + p − 1)·c = k·p·(1 + (p−1)/(p·v)), Korthikanti et al.
    2022 §4.2.3; on the second (vp + p − 3)·c; on the last ((v − 1)·p + 1)·c. A stage short of layers
    (the embedding or the loss taking a layer's slot, `stage_split`) lacks them in its first chunk on the
    first stage, of which 2p − 1 passes are in flight (the first p and the p − 1 after chunk v − 1's),
    and in its last chunk on the last stage, of which one is."""
    p, m, v = train.pp, train.microbatches, train.chunks
    layers = stage_layer_count(cfg, train, stage)
    if p == 1 or v == 1:
        return layers * ({"middle": min(p - 1, m), "last": 1}.get(stage, min(p, m)) if p > 1 else 1)
    rank = {"middle": 1, "last": p - 1}.get(stage, 0)
    full = stage_layer_count(cfg, train, "middle")
    passes = min(m * v, 2 * (p - 1 - rank) + (v - 1) * p + 1)
    short_passes = min(m, 2 * p - 1) if rank == 0 else 1
    return passes * full / v - (full - layers) * short_passes


def activations_per_gpu(
    cfg: ModelConfig, train: TrainConfig, options: MemoryOptions | None = None, stage: str = "first"
) -> float:
    """Activations of a pipeline stage: its layers' activations for the micro-batches it holds in flight
    (`layers_in_flight`). Under torchtitan's per-operation policy what it saves (`model.checkpointing`),
    and one layer's full activations on top, rebuilt. With full recompute the checkpointed layer inputs stay (÷t with DeepSpeed's `partition_activations`,
    none on the GPU with `checkpoint_in_cpu`) and one layer's full activations are rebuilt on top. The
    last stage (or the only one) also holds the fp32 logits of one micro-batch, 4·s·b·V/t bytes, which
    the vocabulary-parallel cross entropy computes in fp32 (Megatron `vocab_parallel_cross_entropy`);
    10·s·b·V/t under PyTorch's own cross entropy (torchtitan, `model.torch_native`)."""
    options = options or MemoryOptions()
    p = train.pp
    if train.recompute == "op":
        stored = op_saved_bytes_per_layer(cfg, train) + moe_dispatch_activation_bytes(cfg, train)
    else:
        stored = _layer_activations(cfg, train, train.recompute)
    if train.recompute == "full":
        if options.checkpoint_in_cpu:
            stored = 0.0
        elif options.partition_activations and not train.sequence_parallel:
            stored /= train.tp
    total = stored * layers_in_flight(cfg, train, stage)
    if train.recompute in ("full", "op"):
        total += _layer_activations(cfg, train, "none")
    if stage == "last" or p == 1:
        logits = microbatch_tokens(cfg, train) * cfg.vocab / train.tp
        total += loss_bytes_per_logit(train) * logits
    act_bytes = storage_bytes(train.precision)
    sbh = microbatch_tokens(cfg, train) * cfg.hidden
    return total + deepspeed_pipe_buffers(train, stage) * sbh * act_bytes


def buffer_bytes(cfg: ModelConfig, train: TrainConfig, params_on_gpu: float, options: MemoryOptions) -> float:
    """Communication buffers beyond the model states. DeepSpeed ZeRO-1/2 with 16-bit gradients
    (`DeepSpeedZeroOptimizer`, runtime/zero/stage_1_and_2.py): the fp32 gradient of its partition,
    4Ψ/N_d, built at the step, and the contiguous gradient bucket of `reduce_bucket_size` elements in
    the training dtype, doubled with `overlap_comm` when there is no pipeline (`ipg_buffer`, `buf_0`,
    `buf_1`). torchtitan's FSDP2: the unsharded parameters and gradients of `model.torch_native`.
    DeepSpeed's ZeRO-3 adds the parameters gathered at once: the layer being computed and the one
    prefetched, capped at `stage3_max_live_parameters`. The BF16 optimizer of Megatron-DeepSpeed
    (`fp32_grads`: fp32 gradients for every parameter, unsharded, in `grads`) keeps the 16-bit `.grad`
    of every parameter too, 2Ψ: its pipeline engine accumulates with `update_hp_grads(
    clear_lp_grads=False)` (DeepSpeed runtime/pipe/engine.py), the "4 bytes × params, not sharded" more
    than fp16 ZeRO-1 the BigScience tr11 notes record. Megatron-LM's contiguous fp32 gradient buffer and
    its distributed optimizer's shards are the `grads` and `optimizer` parts already; its buckets are
    views into that buffer. ZeRO-0's copies at the step are `step_copy_bytes`."""
    dtype = storage_bytes(train.precision)
    if is_fsdp2(train):
        return fsdp2_unsharded_bytes(cfg, train, params_on_gpu, dtype)
    if train.framework not in DEEPSPEED_FRAMEWORKS or dtype == 4:
        return 0.0
    if train.fp32_grads:
        bucket = 4 * min(params_on_gpu, MEMORY_OPT_ALLREDUCE_SIZE) if train.pp > 1 else 0.0
        return dtype * params_on_gpu + bucket
    if train.zero_stage == 0:
        return 0.0  # what its step holds comes after the backward pass: `step_copy_bytes`
    d = train.dp * train.cp
    buckets = 2 if train.overlap_grad_reduce and train.pp == 1 else 1
    total = 4 * params_on_gpu / d + buckets * options.reduce_bucket_size * dtype
    if train.zero_stage == 3:
        layer = params_from_config(cfg, include_embeddings=False) / (cfg.layers * train.tp)
        total += min(2 * layer, STAGE3_MAX_LIVE_PARAMETERS) * dtype
    return total


def step_copy_bytes(train: TrainConfig, params_on_gpu: float, options: MemoryOptions) -> float:
    """What an optimizer allocates at its step, after the backward pass has freed the activations.
    DeepSpeed's ZeRO-0 16-bit optimizer: `FP16_OPTIMIZER_STEP_BYTES` per parameter,
    `FP16_UNFUSED_STEP_BYTES` for the unfused one (`options.fused_fp16_optimizer`); the engine's flat
    all-reduce bucket of up to `MEMORY_OPT_ALLREDUCE_SIZE` 16-bit gradients (`buffered_allreduce_fallback`)
    comes and goes between the two and is smaller than either. Megatron-LM with 16-bit gradients
    (`fp32_grads` off, no distributed optimizer): `Float16OptimizerWithFloat16Params`'s
    `_copy_model_grads_to_main_grads` gives every fp32 main parameter `main_grad.float()`, 4 bytes a
    parameter (megatron/core/optimizer/optimizer.py). Nothing for other stages or precisions."""
    if train.fp32_grads or storage_bytes(train.precision) == 4:
        return 0.0
    if train.framework == "megatron" and not train.distributed_optimizer:
        return MEGATRON_MAIN_GRAD_BYTES * params_on_gpu
    if train.framework not in DEEPSPEED_FRAMEWORKS or train.zero_stage != 0:
        return 0.0
    per_param = FP16_OPTIMIZER_STEP_BYTES if options.fused_fp16_optimizer else FP16_UNFUSED_STEP_BYTES
    return per_param * params_on_gpu


def stage_memory(
    cfg: ModelConfig, train: TrainConfig, options: MemoryOptions | None = None, stage: str = "first"
) -> MemoryBreakdown:
    """One pipeline stage's GPU (`stage` "first" or "last"): states of its layers and embedding,
    its activations, buffers, the allocator's reserve over all that, the CUDA context and NCCL's buffers.
    What an optimizer allocates only at its step (`step_copy_bytes`) counts in `buffers` for the part the
    activations, freed by then, do not cover, and the allocator keeps the smaller of the two cached
    beside the other. The corpus's Megatron-DeepSpeed ZeRO-0 run on V100s (BigScience meg_ds_3d
    ds-on, unfused optimizer) bears both out: its first stage's `max allocated` is 16 B/param plus its
    activations, not plus both, and its `max reserved` is all three."""
    options = options or MemoryOptions()
    per_param = state_bytes(train)
    layer_params = transformer_params_per_gpu(cfg, train, stage)
    expert_params = expert_params_per_gpu(cfg, train, stage)
    embedding_params = embedding_params_per_gpu(cfg, train, stage)
    embedding = embedding_params * per_param.total
    weights = layer_params * per_param.weights
    grads = layer_params * per_param.grads
    # routed experts shard their optimizer state over the expert-data-parallel group, not DP x CP
    # (megatron/core/optimizer: a separate distributed optimizer over `expt_dp`)
    expert_state = state_bytes(replace(train, dp=train.expert_dp, cp=1, ep=1, etp=None, tp=1))
    optimizer = (layer_params - expert_params) * per_param.optimizer + expert_params * expert_state.optimizer
    activations = activations_per_gpu(cfg, train, options, stage)
    buffers = buffer_bytes(cfg, train, layer_params + embedding_params, options)
    # the step's copies take the room the freed activations leave: the peak is the larger of the two
    step = step_copy_bytes(train, layer_params + embedding_params, options)
    buffers += max(0.0, step - activations - buffers)
    allocated = weights + grads + optimizer + activations + embedding + buffers
    context = options.cuda_context_bytes
    nccl = nccl_bytes(train, stage) if options.nccl_eager else 0.0
    # ... but not the cached blocks: each copy is larger than any activation block the allocator keeps,
    # so it reserves new segments while the activations' stay cached (the smaller of the two is held)
    allocator = allocator_reserve(allocated, context + nccl, options, held=min(activations, step))
    total = allocated + allocator + context + nccl
    return MemoryBreakdown(
        weights, grads, optimizer, activations, embedding, buffers, allocator, context, nccl, total
    )


def allocator_reserve(allocated: float, context: float, options: MemoryOptions, held: float = 0.0) -> float:
    """The caching allocator's reserve over `allocated` (`context`: what the device holds outside the
    allocator, the CUDA context and NCCL's buffers): `allocator_overhead` of it, or the freed blocks
    it is known to hold (`held`) when they are more, where the device has room; what room is left where it has less
    (it frees cached blocks before it raises out-of-memory), and never under `allocator_floor` (the
    fragments it cannot give back). So a footprint over the device's memory is one whose tensors,
    context and floor are."""
    reserve = max(allocated * options.allocator_overhead, held)
    if options.capacity_bytes is None:
        return reserve
    room = options.capacity_bytes - context - allocated
    return min(reserve, max(allocated * options.allocator_floor, room))


def memory_per_gpu(
    cfg: ModelConfig, train: TrainConfig, options: MemoryOptions | None = None
) -> MemoryBreakdown:
    """The busiest GPU: the first pipeline stage (most micro-batches in flight, input embedding), a
    middle one (the most layers when the partition gives the first stage fewer, `stage_split`) or the
    last (output layer, fp32 logits), whichever holds more."""
    first = stage_memory(cfg, train, options, "first")
    if train.pp == 1:
        return first
    others = [
        stage_memory(cfg, train, options, s) for s in (("middle", "last") if train.pp > 2 else ("last",))
    ]
    return max([first, *others], key=lambda b: b.total)


def fits(breakdown: MemoryBreakdown, gpu: Gpu, usable_fraction: float = 1.0) -> bool:
    """Whether the predicted total (context included) fits in `usable_fraction` of the GPU's memory."""
    return breakdown.total <= gpu.memory_bytes * usable_fraction
