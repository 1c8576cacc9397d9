"""Mixture-of-experts layers under expert parallelism: the router, the token dispatch and combine, and
the experts' grouped GEMMs, as Megatron-core runs them (megatron/core/transformer/moe/: `router.py`,
`token_dispatcher.py`, `experts.py`, `moe_utils.py`; its README "MoE parallel folding").

Per GPU and micro-batch, T = b·s/(cp·t) tokens enter an MoE layer (Megatron asserts sequence
parallelism with MoE and TP > 1), each routed to k of E experts; an expert-parallel group of EP ranks
holds E/EP experts each, and expert TP (ETP) splits each expert's width f:

| op | shape | source |
| --- | --- | --- |
| router | T × E × h GEMM | `TopKRouter.gating` |
| expert_up | E/EP GEMMs of R × (2f or f)/ETP × h | `TEGroupedMLP` linear_fc1, one grouped call |
| expert_down | E/EP GEMMs of R × h × f/ETP | linear_fc2 |
| permutation | (3k + 1)·T·h elements, + 4k·T·h·ETP to sort by local expert | `permute`, `sort_chunks_by_idxs`, `unpermute` |
| dispatch, combine | all-to-all of T·k·h over EP (T·r·h with a flex dispatcher) | `MoEAlltoAllTokenDispatcher`, DeepEP |

R = T·k·EP·ETP/E rows per expert: the routing is taken as balanced, as the published benchmarks force it
(`moe_router_force_load_balancing`); an imbalanced router makes the busiest expert the pace.
"""

from __future__ import annotations

import math

from tracelog.errors import TracelogError
from tracelog.hardware import Gpu, Link, gpu_intra_node_link, normalize_precision, peak_tflops
from tracelog.model.collectives import link_for, node_nics, predict_collective, spans_nodes
from tracelog.model.float8 import LOW_PRECISION_GEMMS
from tracelog.model.flops import ModelConfig, TrainConfig, microbatch_tokens, stage_layers
from tracelog.model.gemm import (
    FRAMEWORK_SHARE,
    LOW_PRECISION_CAST_FACTOR,
    Op,
    _gemm,
    _memory,
    layer_forward_ops,
)
from tracelog.model.memory import storage_bytes, storage_precision

DENSE_MLP_OPS = ("mlp_up", "mlp_down", "fp8_casts")
"""The dense layer's operations an MoE layer replaces (its element-wise activation is the same work:
k·T rows of the expert width, `model.gemm`'s `activation` over the routed width)."""


def tokens_per_gpu(cfg: ModelConfig, train: TrainConfig) -> float:
    """T = b·s/(cp·t): the tokens of a micro-batch that enter one GPU's MoE layer."""
    return microbatch_tokens(cfg, train) / train.tp


def ranks_per_token(cfg: ModelConfig, train: TrainConfig) -> float:
    """Expert-parallel ranks a token's k experts sit on, on average under uniform routing:
    EP·(1 − C(E − E/EP, k)/C(E, k)), the chance that a rank holds none of them taken away. A flex
    dispatcher (DeepEP, HybridEP: `--moe-token-dispatcher-type flex`) sends a token once per rank it
    goes to and expands it to its experts there (DeepEP README, "dispatch"); the all-to-all dispatcher
    sends one copy per expert (`permute` before `all_to_all`). Qwen3-30B-A3B (E 128, k 8) at EP 8: 5.3."""
    experts, k, ep = cfg.num_experts or 1, cfg.moe_topk, train.ep
    if train.moe_dispatcher != "flex" or ep == 1:
        return float(k)
    local = experts // ep
    missed = math.comb(experts - local, k) / math.comb(experts, k)
    return ep * (1 - missed)


def moe_layer_ops(cfg: ModelConfig, train: TrainConfig, gpu: Gpu, compute_scale: float = 1.0) -> list[Op]:
    """One layer's forward operations on one GPU and micro-batch (`model.gemm.layer_forward_ops`), with an
    MoE layer's MLP as Megatron-core runs it (module docstring): the router GEMM, the experts' grouped
    GEMMs of R rows each (the per-GEMM efficiency of `model.gemm` applies to their shape, so few rows per
    expert lose throughput), a shared expert as a dense TP-split MLP, the permutations around the
    dispatch, and the FP8 casts of the expert inputs (k copies of each token). A dense model, or one mixing
    dense and MoE layers, keeps the dense operations."""
    ops = layer_forward_ops(cfg, train, gpu, compute_scale)
    if not cfg.all_moe:
        return ops
    linear_precision = normalize_precision(train.precision)
    precision = storage_precision(linear_precision)
    act = storage_bytes(linear_precision)
    linear_peak = peak_tflops(gpu, linear_precision) * 1e12
    peak = peak_tflops(gpu, precision) * 1e12
    scale = compute_scale * FRAMEWORK_SHARE.get(train.framework, 1.0)
    t, etp, ep = train.tp, train.expert_tp, train.ep
    h, k, f = cfg.hidden, cfg.moe_topk, cfg.moe_ffn_hidden or cfg.ffn
    experts = cfg.num_experts or 1
    local = max(1, experts // ep)
    tokens = tokens_per_gpu(cfg, train)
    m = microbatch_tokens(cfg, train)
    rows = max(1, round(tokens * k * ep * etp / experts))
    up = 2 * f if cfg.swiglu else f

    def linear(name: str, r: int, n: int, inner: int, batch: int = 1) -> Op:
        return _gemm(
            name, r, n, inner, gpu, linear_peak, act, scale, batch, precision=linear_precision,
            kernels=batch,
        )  # fmt: skip

    moe = [
        _gemm("router", max(1, round(tokens)), experts, h, gpu, peak, act, scale, precision=precision),
        linear("expert_up", rows, up // etp, h, local),
        linear("expert_down", rows, h, f // etp, local),
    ]
    shared = cfg.moe_shared_ffn_hidden or 0
    if shared:
        shared_up = 2 * shared if cfg.swiglu else shared
        moe += [linear("shared_up", m, shared_up // t, h), linear("shared_down", m, h, shared // t)]
    sorts = 4 * k * tokens * etp if train.moe_dispatcher != "flex" and local > 1 else 0.0
    moe.append(_memory("permutation", ((3 * k + 1) * tokens + sorts) * h * act, gpu, kernels=4))
    if linear_precision in LOW_PRECISION_GEMMS:
        # Transformer Engine casts each linear GEMM's input (and writes its transpose): the attention's
        # two, the experts' k·T token copies of h and of f, and the shared expert's two (`model.gemm`)
        q = cfg.q_width
        elements = m * (h + q // t) + tokens * k * (etp * h + f) + (m * (h + shared // t) if shared else 0)
        cast = LOW_PRECISION_CAST_FACTOR.get(linear_precision, 1.0)
        moe.append(_memory("fp8_casts", elements * (act + 2) * cast, gpu, kernels=4))
    return [op for op in ops if op.name not in DENSE_MLP_OPS] + moe


def alltoall_seconds(
    size_bytes: float,
    n_ranks: int,
    gpus_per_node: int,
    gpu: Gpu,
    fabric: Link | None,
    alpha_us: float,
    efficiency: float,
    stride: int = 1,
) -> float:
    """One all-to-all in which every rank sends `size_bytes` spread evenly over `n_ranks` ranks `stride`
    apart, while every GPU of the node runs one (as all EP groups dispatch at once). Of its S, a rank keeps
    S/n, sends S·(r − 1)/n to the r − 1 others of its node over its intra-node link and S·(n − r)/n off
    the node, where the node's GPUs share its NICs: time = (n − 1)·α + max(S·(r − 1)/n / (e·B_gpu),
    G·S·(n − r)/n / (e·B_node)), with G GPUs per node. The NICs bound is the one `ring_busbw_bound` gives
    nccl-tests' alltoall (N/(N − 1) × the network bandwidth per GPU, NVIDIA/nccl-tests#130)."""
    if n_ranks <= 1 or size_bytes <= 0:
        return 0.0
    members = max(1, min(n_ranks, gpus_per_node // stride))
    intra = gpu_intra_node_link(gpu) if gpus_per_node > 1 else None
    times = [0.0]
    if members > 1 and intra is not None:
        times.append(size_bytes * (members - 1) / n_ranks / (efficiency * intra.unidirectional_gbps * 1e9))
    if spans_nodes(n_ranks, gpus_per_node, stride):
        if fabric is None:
            raise TracelogError(
                f"{n_ranks} expert-parallel ranks span nodes of {gpus_per_node} GPUs: name the fabric"
            )
        nics, per_nic = node_nics(fabric)
        off_node = gpus_per_node * size_bytes * (n_ranks - members) / n_ranks
        times.append(off_node / (efficiency * nics * per_nic * 1e9))
    return (n_ranks - 1) * alpha_us * 1e-6 + max(times)


def dispatch_bytes(cfg: ModelConfig, train: TrainConfig) -> float:
    """What one GPU sends in one dispatch (and one combine) of a micro-batch: T·c·h in the training dtype's
    16 bits (FP8 recipes dispatch BF16 activations), c the copies per token (`ranks_per_token`: k for
    the all-to-all dispatcher). Summed over the EP group's ranks, (EP − 1)/EP of it leaves the GPU."""
    act = storage_bytes(storage_precision(normalize_precision(train.precision)))
    return tokens_per_gpu(cfg, train) * ranks_per_token(cfg, train) * cfg.hidden * act


def expert_parallel_seconds(
    cfg: ModelConfig,
    train: TrainConfig,
    gpu: Gpu,
    fabric: Link | None,
    gpus_per_node: int,
    alpha_us: float,
    link_efficiency: float,
    net: tuple[float, float] | None = None,
) -> float:
    """The token dispatcher's communication of one iteration on one GPU, before any overlap: per MoE layer
    of the fullest stage and micro-batch, a dispatch and a combine all-to-all over the EP group
    (`alltoall_seconds` of `dispatch_bytes`) in the forward pass, their mirror images in the backward
    pass, and again in a fully recomputed forward; with expert TP, an all-gather of the received tokens
    over the ETP group after the dispatch and a reduce-scatter before the combine
    (`MoEAlltoAllTokenDispatcher.dispatch_postprocess`, `combine_preprocess`). EP ranks are ETP apart
    (Megatron-core's expert rank order `tp-ep-dp-pp`, parallel_state.py); a group that spans nodes takes
    `net`'s α and efficiency, as the run's other groups do."""
    if not cfg.all_moe or (train.ep == 1 and train.expert_tp == 1):
        return 0.0
    size = dispatch_bytes(cfg, train)
    stride = train.expert_tp
    alpha, eff = alpha_us, link_efficiency
    if net is not None and spans_nodes(train.ep, gpus_per_node, stride):
        alpha, eff = net
    one = alltoall_seconds(size, train.ep, gpus_per_node, gpu, fabric, alpha, eff, stride)
    if train.expert_tp > 1:
        etp_link = link_for(train.expert_tp, gpus_per_node, gpu, fabric)
        gathered = predict_collective(
            "all_gather", size * train.expert_tp, train.expert_tp, etp_link.unidirectional_gbps, alpha_us,
            link_efficiency,
        )  # fmt: skip
        one += gathered.time_us * 1e-6
    passes = 6 if train.recompute == "full" else 4
    layers = stage_layers(cfg.layers, train.pp, train.embedding_slots)
    return passes * one * layers * train.microbatches
