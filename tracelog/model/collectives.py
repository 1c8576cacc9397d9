"""Collectives: nccl-tests' bandwidth definitions and an alpha–beta model of time over message size.

Definitions follow nccl-tests doc/PERFORMANCE.md and its `*GetBw` functions: algbw = S/t (GB = 1e9 B),
busbw = algbw × a per-operation factor, one direction. busbw is therefore compared with a link's
*unidirectional* bandwidth.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from tracelog.errors import TracelogError
from tracelog.hardware import Gpu, Link, gpu_intra_node_link


def _ring(n: int) -> float:
    return (n - 1) / n


BUSBW_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": _ring,
    "all_gather": _ring,
    "alltoall": _ring,
    "gather": _ring,
    "scatter": _ring,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
    "hypercube": lambda n: 1.0,
}
"""busbw / algbw per operation, as nccl-tests computes it (doc/PERFORMANCE.md; src/*.cu `*GetBw`).
hypercube_perf has factor 1 because its algbw already counts only the (n−1)/n of S each rank receives."""

RING_STEPS: dict[str, Callable[[int], int]] = {
    "all_reduce": lambda n: 2 * (n - 1),
    "reduce_scatter": lambda n: n - 1,
    "all_gather": lambda n: n - 1,
    "alltoall": lambda n: n - 1,
    "gather": lambda n: n - 1,
    "scatter": lambda n: n - 1,
    "broadcast": lambda n: n - 1,
    "reduce": lambda n: n - 1,
    "sendrecv": lambda n: 1,
    "hypercube": lambda n: max(1, (n - 1).bit_length()),
}
"""Latency terms per operation: a ring pays one α per step (Thakur, Rabenseifner, Gropp 2005, §4);
the hypercube all-gather pays log2(n)."""

DEFAULT_LINK_EFFICIENCY = 0.78
"""Share of a link's unidirectional bandwidth that NCCL busbw reaches on large messages: ~235 of 300 GB/s
on A100 NVLink 3 (nccl-tests all_reduce on 8×A100, the figure FORMULAS.md and the ml-engineering notes
quote as normal). An assumption for other links; pass `efficiency` to override."""

DEFAULT_ALPHA_US = 5.0
"""Latency per ring step in µs. An order-of-magnitude assumption, not a published figure: fit it from the
small-message rows of a measured run with `fit_alpha_beta`, and pass it as `alpha_us`."""

_ALIASES = {
    "allreduce": "all_reduce",
    "reducescatter": "reduce_scatter",
    "allgather": "all_gather",
    "alltoall": "alltoall",
    "all2all": "alltoall",
    "sendrecv": "sendrecv",
    "sendreceive": "sendrecv",
}


def normalize_op(op: str) -> str:
    """`all_reduce_perf`, `AllReduce`, `allreduce` → `all_reduce`; TracelogError if nccl-tests has no such test."""
    key = op.strip().casefold().removesuffix("_perf").replace("_", "").replace("-", "").replace(" ", "")
    name = _ALIASES.get(key, key)
    for known in BUSBW_FACTOR:
        if known.replace("_", "") == name.replace("_", ""):
            return known
    raise TracelogError(f"unknown collective {op!r}; nccl-tests has {', '.join(BUSBW_FACTOR)}")


def busbw(op: str, algbw_gbps: float, n_ranks: int) -> float:
    """busbw = algbw × factor(op, n) (nccl-tests doc/PERFORMANCE.md)."""
    if n_ranks < 1:
        raise TracelogError(f"need at least one rank, got {n_ranks}")
    return algbw_gbps * BUSBW_FACTOR[normalize_op(op)](n_ranks)


def algbw(size_bytes: float, time_us: float, op: str | None = None, n_ranks: int | None = None) -> float:
    """algbw = S / t in GB/s (nccl-tests doc/PERFORMANCE.md), S the size column in bytes, t in µs. For
    hypercube_perf nccl-tests counts S·(n−1)/n (src/hypercube.cu), so pass `op` and `n_ranks` there."""
    if time_us <= 0:
        raise TracelogError(f"time must be positive, got {time_us} µs")
    gbps = size_bytes / (time_us * 1e-6) / 1e9
    if op is not None and normalize_op(op) == "hypercube":
        if not n_ranks:
            raise TracelogError("hypercube algbw needs the rank count")
        gbps *= (n_ranks - 1) / n_ranks
    return gbps


@dataclass(frozen=True)
class CollectivePrediction:
    """Predicted nccl-tests row for one message size."""

    op: str
    size_bytes: float
    n_ranks: int
    time_us: float
    algbw_gbps: float
    busbw_gbps: float


def predict_collective(
    op: str,
    size_bytes: float,
    n_ranks: int,
    link_unidir_gbps: float,
    alpha_us: float = DEFAULT_ALPHA_US,
    efficiency: float = DEFAULT_LINK_EFFICIENCY,
) -> CollectivePrediction:
    """Alpha–beta time of a ring collective (Thakur, Rabenseifner, Gropp 2005): t = steps·α + S·f/(e·B),
    with f the busbw factor, B the link's unidirectional bandwidth and e the efficiency. So busbw rises
    with size and plateaus at e·B, the way nccl-tests curves do; e.g. all_reduce:
    2(p−1)·α + 2((p−1)/p)·S/(e·B). Reduction arithmetic is taken as hidden behind transfers."""
    name = normalize_op(op)
    if n_ranks < 1 or link_unidir_gbps <= 0 or not 0 < efficiency <= 1:
        raise TracelogError(
            f"need ranks ≥ 1, bandwidth > 0 and 0 < efficiency ≤ 1; got {n_ranks}, {link_unidir_gbps}, {efficiency}"
        )
    if n_ranks == 1 and name != "sendrecv":
        return CollectivePrediction(name, size_bytes, 1, 0.0, float("inf"), float("inf"))
    factor = BUSBW_FACTOR[name](n_ranks)
    steps = RING_STEPS[name](n_ranks)
    time_us = steps * alpha_us + size_bytes * factor / (efficiency * link_unidir_gbps * 1e9) * 1e6
    alg = size_bytes / (time_us * 1e-6) / 1e9
    return CollectivePrediction(name, size_bytes, n_ranks, time_us, alg, alg * factor)


def predict_curve(
    op: str,
    sizes_bytes: Sequence[float],
    n_ranks: int,
    link_unidir_gbps: float,
    alpha_us: float = DEFAULT_ALPHA_US,
    efficiency: float = DEFAULT_LINK_EFFICIENCY,
) -> pd.DataFrame:
    """`predict_collective` over message sizes, one row per size (columns as the store names them)."""
    rows = [
        predict_collective(op, s, n_ranks, link_unidir_gbps, alpha_us, efficiency).__dict__
        for s in sizes_bytes
    ]
    return pd.DataFrame(rows)


def fit_alpha_beta(
    op: str, sizes_bytes: Sequence[float], times_us: Sequence[float], n_ranks: int
) -> tuple[float, float]:
    """Least-squares α (µs per step) and plateau busbw (GB/s) that best explain measured times with the
    model of `predict_collective`: t = steps·α + S·f/bw."""
    name = normalize_op(op)
    size = np.asarray(sizes_bytes, dtype=float)
    time = np.asarray(times_us, dtype=float)
    if size.size < 2 or size.size != time.size:
        raise TracelogError("need at least two (size, time) pairs of equal length")
    steps = RING_STEPS[name](n_ranks)
    factor = BUSBW_FACTOR[name](n_ranks)
    design = np.column_stack([np.full_like(size, steps), size * factor])
    (alpha_us, us_per_byte), *_ = np.linalg.lstsq(design, time, rcond=None)
    if us_per_byte <= 0:
        raise TracelogError("sizes do not span the bandwidth-bound range; cannot fit a bandwidth")
    return float(alpha_us), float(1e6 / us_per_byte / 1e9)


def link_for(
    n_ranks: int,
    gpus_per_node: int,
    gpu: Gpu | str,
    fabric_link: Link | None,
    *,
    stride: int = 1,
) -> Link:
    """The bottleneck link of a group of `n_ranks` ranks `stride` apart: the GPU's intra-node link while
    the group fits in one node; across nodes, the per-GPU share of the node's fabric (fabric bandwidth ÷
    GPUs per node; name a ×N aggregate such as ib-ndr-x8 for a node with one NIC per GPU), or the
    intra-node link if that is slower."""
    if n_ranks < 1 or gpus_per_node < 1 or stride < 1:
        raise TracelogError(
            f"need positive ranks, GPUs per node and stride; got {n_ranks}, {gpus_per_node}, {stride}"
        )
    intra = gpu_intra_node_link(gpu) if n_ranks > 1 and gpus_per_node > 1 else None
    if (n_ranks - 1) * stride < gpus_per_node and intra is not None:
        return intra
    if fabric_link is None:
        raise TracelogError(
            f"{n_ranks} ranks {stride} apart span nodes of {gpus_per_node} GPUs: name the fabric link"
        )
    per_node_gpus = gpus_per_node
    share = replace(
        fabric_link,
        id=f"{fabric_link.id}/{per_node_gpus}",
        name=f"{fabric_link.name}, per-GPU share of {per_node_gpus}",
        unidirectional_gbps=fabric_link.unidirectional_gbps / per_node_gpus,
        bidirectional_gbps=fabric_link.bidirectional_gbps / per_node_gpus,
        scope="gpu",
    )
    if intra is not None and intra.unidirectional_gbps < share.unidirectional_gbps:
        return intra
    return share
