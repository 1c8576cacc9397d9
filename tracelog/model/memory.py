"""Memory per GPU: model states by precision and ZeRO stage, activations by parallelism and
recomputation, embeddings on the first and last pipeline stages. Bytes throughout."""

from __future__ import annotations

from dataclasses import dataclass

from tracelog.errors import TracelogError
from tracelog.hardware import Gpu, normalize_precision
from tracelog.model.flops import ModelConfig, Recompute, TrainConfig, params_from_config

DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
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


def zero_state_bytes(stage: int, dp: int, weight_bytes: float = 2, grad_bytes: float = 2) -> StateBytes:
    """ZeRO paper (Rajbhandari et al. 2020) §5, Figure 1, mixed-precision Adam (2 + 2 + 12 = 16 B/param):
    stage 0: 16Ψ; stage 1 (P_os): 4Ψ + 12Ψ/N_d; stage 2 (P_os+g): 2Ψ + 14Ψ/N_d; stage 3 (P_os+g+p): 16Ψ/N_d.
    Other weight and gradient sizes (fp32 grads: 18 B/param) shard the same way."""
    if stage not in (0, 1, 2, 3):
        raise TracelogError(f"ZeRO stage must be 0 to 3, not {stage}")
    optimizer = ADAM_STATE_BYTES / dp if stage >= 1 else ADAM_STATE_BYTES
    grads = grad_bytes / dp if stage >= 2 else grad_bytes
    weights = weight_bytes / dp if stage >= 3 else weight_bytes
    return StateBytes(weights=weights, grads=grads, optimizer=optimizer)


def megatron_state_bytes(dp: int, distributed_optimizer: bool) -> StateBytes:
    """Megatron-LM bf16 with fp32 main grads: 2 + 4 + 12 = 18 B/param; its distributed optimizer shards
    the 12 over data-parallel ranks: 6 + 12/d (megatron/training/theoretical_memory_usage.py)."""
    optimizer = ADAM_STATE_BYTES / dp if distributed_optimizer else ADAM_STATE_BYTES
    return StateBytes(weights=2, grads=4, optimizer=optimizer)


def state_bytes(train: TrainConfig) -> StateBytes:
    """Bytes per parameter for a run: Megatron's distributed-optimizer layout when it is on, else ZeRO's
    at `zero_stage` with weights in the training precision and grads in it too unless `fp32_grads`
    (Megatron's default main grads, the BF16 optimizer of Megatron-DeepSpeed: 18 B/param unsharded).
    Sharding is over the data-parallel group, which spans context-parallel ranks too (dp · cp)."""
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
        return megatron_state_bytes(d, distributed_optimizer=True)
    weight = DTYPE_BYTES.get(precision, 2)
    grad = 4 if train.fp32_grads else weight
    return zero_state_bytes(train.zero_stage, d, weight, grad)


def activation_bytes_per_layer(
    seq_len: int,
    mbs: int,
    hidden: int,
    heads: int,
    tp: int = 1,
    sequence_parallel: bool = False,
    recompute: Recompute = "none",
) -> float:
    """Activation memory of one transformer layer, 16-bit activations (Korthikanti et al. 2022, Table 2):
    no parallelism s·b·h·(34 + 5as/h); tensor parallel s·b·h·(10 + 24/t + 5as/(ht)); tensor + sequence
    parallel s·b·h·(34/t + 5as/(ht)); tensor parallel + selective recompute s·b·h·(10 + 24/t); tensor +
    sequence parallel + selective s·b·h·34/t; full recompute keeps only the layer input, 2·s·b·h (§4.1),
    divided by t when it is sequence-parallel."""
    s, b, h, a, t = seq_len, mbs, hidden, heads, tp
    sbh = s * b * h
    attention = 5 * a * s / (h * t)
    if recompute == "full":
        return 2 * sbh / (t if sequence_parallel else 1)
    if t == 1:
        return sbh * 34 if recompute == "selective" else sbh * (34 + 5 * a * s / h)
    if sequence_parallel:
        return sbh * 34 / t if recompute == "selective" else sbh * (34 / t + attention)
    return sbh * (10 + 24 / t) if recompute == "selective" else sbh * (10 + 24 / t + attention)


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes on the busiest GPU (the first pipeline stage, which also holds the input embedding)."""

    weights: float
    grads: float
    optimizer: float
    activations: float
    embedding: float
    total: float

    @property
    def mib(self) -> dict[str, float]:
        """The same figures in MiB (2^20 bytes), as PyTorch and Megatron print memory."""
        return {k: v / 2**20 for k, v in self.__dict__.items()}


def embedding_params_per_gpu(cfg: ModelConfig, train: TrainConfig) -> float:
    """Word embedding V·h split over TP, on the first stage; the last stage holds the output layer (a
    copy when tied); with one stage both sit on the same GPU unless tied (Megatron-LM
    `setup_embeddings_and_output_layer`). Learned positions s·h are on the first stage, not split."""
    words = cfg.vocab * cfg.hidden / train.tp
    positions = cfg.seq_len * cfg.hidden if cfg.learned_positions else 0
    if train.pp == 1 and not cfg.tied_embeddings:
        return 2 * words + positions
    return words + positions


def transformer_params_per_gpu(cfg: ModelConfig, train: TrainConfig) -> float:
    """Transformer layers of one pipeline stage split over TP: (params without embeddings) / (tp · pp).
    Norms and biases replicated across TP are counted as split, a sub-0.1% simplification."""
    return params_from_config(cfg, include_embeddings=False) / (train.tp * train.pp)


def activations_per_gpu(cfg: ModelConfig, train: TrainConfig) -> float:
    """Activations on the first pipeline stage: it holds min(p, m) microbatches in flight for its l/p
    layers under 1F1B, i.e. up to all l layers' worth, ×(1 + (p−1)/(p·v)) when interleaved (Korthikanti
    et al. 2022 §4.2.3). With full recompute one layer's full activations are rebuilt at a time on top."""
    per_layer = activation_bytes_per_layer(
        cfg.seq_len // train.cp,
        train.mbs,
        cfg.hidden,
        cfg.heads,
        train.tp,
        train.sequence_parallel,
        train.recompute,
    )
    p, m, v = train.pp, train.microbatches, train.chunks
    in_flight = min(p, m)
    total = per_layer * (cfg.layers / p) * in_flight
    if v > 1:
        total *= 1 + (p - 1) / (p * v)
    if train.recompute == "full":
        total += activation_bytes_per_layer(
            cfg.seq_len // train.cp, train.mbs, cfg.hidden, cfg.heads, train.tp, train.sequence_parallel
        )
    return total


def memory_per_gpu(cfg: ModelConfig, train: TrainConfig) -> MemoryBreakdown:
    """Model states, activations and embedding of the first pipeline stage's GPU."""
    per_param = state_bytes(train)
    layer_params = transformer_params_per_gpu(cfg, train)
    embedding = embedding_params_per_gpu(cfg, train) * per_param.total
    weights = layer_params * per_param.weights
    grads = layer_params * per_param.grads
    optimizer = layer_params * per_param.optimizer
    activations = activations_per_gpu(cfg, train)
    total = weights + grads + optimizer + activations + embedding
    return MemoryBreakdown(weights, grads, optimizer, activations, embedding, total)


def fits(breakdown: MemoryBreakdown, gpu: Gpu, usable_fraction: float = 1.0) -> bool:
    """Whether the predicted total fits in `usable_fraction` of the GPU's memory (CUDA context,
    allocator fragmentation and NCCL buffers take the rest; the fraction is the caller's to choose)."""
    return breakdown.total <= gpu.memory_bytes * usable_fraction
