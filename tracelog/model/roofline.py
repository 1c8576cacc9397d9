"""The linear-layer roofline of the team's notebook: one GEMM's time as the slowest of its FLOPs, its
global-memory traffic and its tensor-parallel network traffic."""

from __future__ import annotations

from dataclasses import dataclass

from tracelog.errors import TracelogError
from tracelog.hardware import Gpu, Link, peak_tflops
from tracelog.hardware import gpu as catalog_gpu
from tracelog.hardware import link as catalog_link


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
    g = gpu if isinstance(gpu, Gpu) else catalog_gpu(gpu)
    lk = catalog_link(link) if isinstance(link, str) else link
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
