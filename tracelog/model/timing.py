"""Iteration time from first principles: compute at a stated efficiency, the pipeline bubble, tensor- and
data-parallel communication from the collective model; and the linear-layer roofline."""

from __future__ import annotations

from dataclasses import dataclass

from tracelog.errors import TracelogError
from tracelog.hardware import Gpu, Link, link, normalize_precision, peak_tflops
from tracelog.hardware import gpu as catalog_gpu
from tracelog.model.collectives import (
    DEFAULT_ALPHA_US,
    DEFAULT_LINK_EFFICIENCY,
    link_for,
    predict_collective,
)
from tracelog.model.flops import ModelConfig, TrainConfig, hardware_flops
from tracelog.model.memory import DTYPE_BYTES, embedding_params_per_gpu, transformer_params_per_gpu

DEFAULT_COMPUTE_EFFICIENCY = 0.52
"""Share of the dense peak that the GEMMs of a well-tuned run sustain: Narayanan et al. 2021 (SC21,
abstract) report 52% of theoretical peak for the 1T-parameter GPT on 3072 A100s. Override per run."""


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


def bubble_fraction(pp: int, microbatches: int, chunks: int = 1) -> float:
    """Pipeline bubble over ideal time: (p−1)/m for 1F1B, (p−1)/(v·m) with v interleaved chunks per stage
    (Narayanan et al. 2021 §2.2.1, §2.2.2)."""
    if pp < 1 or microbatches < 1 or chunks < 1:
        raise TracelogError(f"need p, m, v ≥ 1; got {pp}, {microbatches}, {chunks}")
    return (pp - 1) / (chunks * microbatches)


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
) -> float:
    """Tensor-parallel all-reduces of one iteration on one GPU: per layer and microbatch 2 in the forward
    and 2 in the backward pass, each of s·b·h activations (Narayanan et al. 2021 §3.2; Shoeybi et al.
    2019 Fig. 4), 2 more for the recomputed forward with full recomputation. Sequence parallelism swaps
    each all-reduce for a reduce-scatter plus an all-gather, the same bytes on the bus (Korthikanti 2022
    §4.2.2). Not overlapped with compute."""
    if train.tp == 1:
        return 0.0
    g = _resolve_gpu(gpu)
    act_bytes = DTYPE_BYTES.get(normalize_precision(train.precision), 2)
    size = (cfg.seq_len // train.cp) * train.mbs * cfg.hidden * act_bytes
    bottleneck = link_for(train.tp, gpus_per_node, g, _resolve_link(fabric))
    one = predict_collective(
        "all_reduce", size, train.tp, bottleneck.unidirectional_gbps, alpha_us, link_efficiency
    )
    per_layer = 6 if train.recompute == "full" else 4
    layers_per_stage = cfg.layers / train.pp
    return per_layer * layers_per_stage * train.microbatches * one.time_us * 1e-6


def dp_comm_seconds(
    cfg: ModelConfig,
    train: TrainConfig,
    gpu: Gpu | str,
    fabric: Link | str | None = None,
    gpus_per_node: int = 8,
    alpha_us: float = DEFAULT_ALPHA_US,
    link_efficiency: float = DEFAULT_LINK_EFFICIENCY,
) -> float:
    """Data-parallel gradient traffic of one iteration on one GPU, over the params it holds
    (params/(tp·pp) plus its embedding): an all-reduce of the grads without sharding; a reduce-scatter of
    the grads plus an all-gather of the weights with ZeRO-1/2 or Megatron's distributed optimizer; with
    ZeRO-3 a second all-gather of the weights for the backward pass (ZeRO paper §7: 1.5× plain DP)."""
    d = train.dp * train.cp
    if d == 1:
        return 0.0
    g = _resolve_gpu(gpu)
    params = transformer_params_per_gpu(cfg, train) + embedding_params_per_gpu(cfg, train)
    weight_bytes = DTYPE_BYTES.get(normalize_precision(train.precision), 2)
    grad_bytes = 4 if (train.fp32_grads or train.distributed_optimizer) else weight_bytes
    bottleneck = link_for(d, gpus_per_node, g, _resolve_link(fabric), stride=train.tp)
    bw = bottleneck.unidirectional_gbps

    def t(op: str, size: float) -> float:
        return predict_collective(op, size, d, bw, alpha_us, link_efficiency).time_us * 1e-6

    if train.zero_stage == 0 and not train.distributed_optimizer:
        return t("all_reduce", params * grad_bytes)
    gathers = 2 if train.zero_stage == 3 else 1
    return t("reduce_scatter", params * grad_bytes) + gathers * t("all_gather", params * weight_bytes)


def predict_iteration(
    cfg: ModelConfig,
    train: TrainConfig,
    gpu: Gpu | str,
    fabric: Link | str | None = None,
    compute_efficiency: float = DEFAULT_COMPUTE_EFFICIENCY,
    *,
    gpus_per_node: int = 8,
    alpha_us: float = DEFAULT_ALPHA_US,
    link_efficiency: float = DEFAULT_LINK_EFFICIENCY,
    overlap_dp: bool = False,
    compute_scale: float = 1.0,
) -> TimeBreakdown:
    """Seconds per iteration = compute + TP communication + bubble + exposed DP communication.
    Compute is the hardware FLOPs per GPU (model FLOPs plus recomputation) at `compute_efficiency` of the
    dense peak for the run's precision; the bubble is (p−1)/(v·m) of compute plus TP time; with
    `overlap_dp` the gradient traffic hides behind the last microbatch's backward pass (≈ 2/3 of its
    compute), which is when the gradients become ready. `compute_scale` multiplies the efficiency: the
    constant `tracelog calibrate` fits to measured runs (1.0, the textbook model, by default)."""
    if compute_scale <= 0:
        raise TracelogError(f"compute scale must be positive, got {compute_scale}")
    if not 0 < compute_efficiency <= 1:
        raise TracelogError(f"compute efficiency must be in (0, 1], got {compute_efficiency}")
    g = _resolve_gpu(gpu)
    m = train.microbatches
    flops = hardware_flops(cfg, train.gbs, train.recompute)
    compute_s = flops / train.gpus / (peak_tflops(g, train.precision) * 1e12 * compute_efficiency)
    compute_s /= compute_scale  # a fitted multiplier on the efficiency (tracelog.analysis.calibration)
    tp_s = tp_comm_seconds(cfg, train, g, fabric, gpus_per_node, alpha_us, link_efficiency)
    fraction = bubble_fraction(train.pp, m, train.chunks)
    bubble_s = fraction * (compute_s + tp_s)
    dp_total = dp_comm_seconds(cfg, train, g, fabric, gpus_per_node, alpha_us, link_efficiency)
    dp_s = max(0.0, dp_total - (compute_s / m) * 2 / 3) if overlap_dp else dp_total
    total = compute_s + tp_s + bubble_s + dp_s
    return TimeBreakdown(compute_s, bubble_s, tp_s, dp_s, total, fraction, dp_total, flops, m)


@dataclass(frozen=True)
class Roofline:
    """Times of one linear layer's forward GEMM on one device; the slowest resource bounds it."""

    flop_s: float
    memory_s: float
    network_s: float
    time_s: float
    bound: str


def linear_layer_roofline(
    m: int,
    k: int,
    n: int,
    tp_in: int,
    tp_out: int,
    dp: int,
    gpu: Gpu | str,
    link: Link | str,
    dtype_bytes: int = 2,
    precision: str = "bf16",
) -> Roofline:
    """Y[m×n] = X[m×k]·W[k×n] with m split over dp, k over tp_in (row-parallel: partial sums need an
    all-reduce) and n over tp_out (column-parallel): time = max(FLOP time, global-memory IO time, network
    IO time). Per device: 2·m·k·n/(dp·tp_in·tp_out) FLOPs at the dense peak; reads X and W shards and
    writes Y shard from HBM; all-reduce traffic 3·(p−1)·N/p words for N = Y-shard words and p = tp_in
    (the team's notebook: reduce-scatter plus receive), over the link's unidirectional bandwidth."""
    if min(m, k, n, tp_in, tp_out, dp) < 1:
        raise TracelogError("matrix sizes and parallel degrees must be positive")
    g = _resolve_gpu(gpu)
    lk = _resolve_link(link)
    assert lk is not None
    rows, inner, cols = m / dp, k / tp_in, n / tp_out
    flop_s = 2 * rows * inner * cols / (peak_tflops(g, precision) * 1e12)
    io_bytes = (rows * inner + inner * cols + rows * cols) * dtype_bytes
    memory_s = io_bytes / (g.memory_bandwidth_gbps * 1e9)
    out_words = rows * cols
    net_bytes = 3 * (tp_in - 1) * out_words / tp_in * dtype_bytes
    network_s = net_bytes / (lk.unidirectional_gbps * 1e9)
    times = {"flop": flop_s, "memory": memory_s, "network": network_s}
    bound = max(times, key=lambda name: times[name])
    return Roofline(flop_s, memory_s, network_s, times[bound], bound)
