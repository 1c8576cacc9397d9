"""Collectives: nccl-tests' bandwidth definitions, an alpha–beta model of time over message size over one
link, and NCCL's own cost model (ring or tree, LL/LL128/Simple) for ranks on one node or many, with the
node's NICs as the bound across nodes (`predict_nccl`; docs/MODEL.md "Collectives").

Definitions follow nccl-tests doc/PERFORMANCE.md and its `*GetBw` functions: algbw = S/t (GB = 1e9 B),
busbw = algbw × a per-operation factor, one direction. busbw is therefore compared with a link's
*unidirectional* bandwidth.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from tracelog.errors import TracelogError
from tracelog.hardware import Gpu, Link, beyond_one_host, domain_hosts, gpu_intra_node_link, link
from tracelog.model.nccl_tuning import (  # noqa: F401  (re-exported: the model's public constants)
    BASE_LATENCY_US,
    DEFAULT_ALPHA_US_BY_CLASS,
    DEFAULT_EFFICIENCY_BY_CLASS,
    DEFAULT_LINK_EFFICIENCY,
    DEFAULT_NET_EFFICIENCY,
    LL128_BANDWIDTH,
    LL_BANDWIDTH,
    LL_MAX_BUSBW_ACROSS_NODES_GBPS,
    LL_MAX_BUSBW_GBPS,
    STEP_LATENCY_US,
    TREE_EFFICIENCY,
)
from tracelog.model.nvls import has_nvls, nvls_algorithms

if TYPE_CHECKING:
    import pandas as pd


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

DEFAULT_ALPHA_US = 5.0
"""Latency per ring step in µs of the single-link model (`predict_collective`). An order-of-magnitude
assumption, near NCCL's NVLink/PCIe steps but well below its 14 µs per network step (`STEP_LATENCY_US`,
which `predict_nccl` uses by link class): fit it with `fit_alpha_beta` and pass it as `alpha_us`."""

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


COSTED_ALIKE = frozenset({"all_gather", "reduce_scatter", "gather", "scatter"})
"""Collectives this model costs alike on any placement: busbw factor (n-1)/n, n-1 ring steps, the ring's
bound and no tree or NVLS (`algorithms` and `ring_busbw_bound` single out all_reduce, alltoall and sendrecv
only). A bench known to be one of them is predicted whichever it is."""


def costed_as(ops: Sequence[str]) -> str | None:
    """The one collective that stands for all of `ops` in this model, or None where their costs differ."""
    names = sorted({normalize_op(op) for op in ops})
    if len(names) == 1 or (names and set(names) <= COSTED_ALIKE):
        return names[0]
    return None


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
    import pandas as pd  # loaded by what returns a frame, not at start-up

    rows = [
        predict_collective(op, s, n_ranks, link_unidir_gbps, alpha_us, efficiency).__dict__
        for s in sizes_bytes
    ]
    return pd.DataFrame(rows)


def fit_alpha_beta(
    op: str, sizes_bytes: Sequence[float], times_us: Sequence[float], n_ranks: int
) -> tuple[float, float]:
    """Least-squares α (µs per step) and plateau busbw (GB/s) that best explain measured times with the
    model of `predict_collective`: t = steps·α + S·f/bw. α is at least 0: a sweep whose large sizes are
    slower than its small ones' trend (nccl#1453's bandwidth collapse at 64 MB) would otherwise fit a
    negative latency; then the bandwidth term alone is fitted, as `link_fit.fit_alpha_efficiency` does."""
    name = normalize_op(op)
    size = np.asarray(sizes_bytes, dtype=float)
    time = np.asarray(times_us, dtype=float)
    if size.size < 2 or size.size != time.size:
        raise TracelogError("need at least two (size, time) pairs of equal length")
    steps = RING_STEPS[name](n_ranks)
    factor = BUSBW_FACTOR[name](n_ranks)
    design = np.column_stack([np.full_like(size, steps), size * factor])
    (alpha_us, us_per_byte), *_ = np.linalg.lstsq(design, time, rcond=None)
    if alpha_us < 0:  # latency cannot be negative
        alpha_us, wire = 0.0, size * factor
        us_per_byte = float(wire @ time / (wire @ wire))
    if us_per_byte <= 0:
        raise TracelogError("sizes do not span the bandwidth-bound range; cannot fit a bandwidth")
    return float(alpha_us), float(1e6 / us_per_byte / 1e9)


# ------------------------------------------------------------------------------------------------------
# Where the ranks sit: the GPU's link inside a node, the node's NICs across nodes.


def link_class(lk: Link) -> str:
    """The class NCCL's tuning tables key latencies by (src/graph/tuning.cc `hwLatencies`: NVLINK, PCI,
    NET): `pcie`; `net` for a network between nodes (a catalog entry per port or per node: InfiniBand,
    RoCE, EFA, Ethernet, Omni-Path, ...); `nvlink` for a direct GPU-to-GPU fabric inside a node (NVLink,
    xGMI, Gaudi's in-server RoCE)."""
    if lk.kind == "pcie":
        return "pcie"
    if lk.scope in ("port", "node"):
        return "net"
    return "nvlink"


def node_nics(fabric: Link) -> tuple[int, float]:
    """(NICs per node, one NIC's unidirectional GB/s) of a fabric entry: a `node` entry carries the NIC
    count in `links` and the node's aggregate; a `port` entry is one NIC, the node's only one."""
    if fabric.scope == "node":
        nics = fabric.links or 1
        return nics, fabric.unidirectional_gbps / nics
    if fabric.scope == "port":
        return 1, fabric.unidirectional_gbps
    raise TracelogError(
        f"{fabric.id} joins GPUs inside a node (scope {fabric.scope}); name a network fabric across nodes"
    )


def nic_label(fabric: Link, used: int, nics: int) -> str:
    """How a bound set by a node's NICs is named: `ib-hdr-x8 (8 of 8 NICs per node)`."""
    return f"{fabric.id} ({used} of {nics} NIC{'s' * (nics != 1)} per node)"


def spans_nodes(n_ranks: int, gpus_per_node: int, stride: int = 1) -> bool:
    """Whether a group of `n_ranks` ranks `stride` apart leaves its node (Megatron's rank order puts
    consecutive ranks on one node): its collectives then cross the network (`link_for`)."""
    return n_ranks > 1 and (gpus_per_node <= 1 or (n_ranks - 1) * stride >= gpus_per_node)


def link_for(
    n_ranks: int,
    gpus_per_node: int,
    gpu: Gpu | str,
    fabric_link: Link | None,
    *,
    stride: int = 1,
) -> Link:
    """The bottleneck link of a group of `n_ranks` ranks `stride` apart, while every GPU of the node runs
    such a group (as in training, where all TP shards reduce their gradients at once): the GPU's
    intra-node link while the group fits in one node; across nodes, the node's NIC bandwidth shared by
    the groups of a node. A group with m members in a node is one of gpus_per_node / m groups there and
    gets m / gpus_per_node of the NICs: all of them when the group spans whole nodes (NCCL runs one ring
    per NIC, each crossing nodes on its own NIC; NVIDIA/nccl#412: a node's NICs add up, "up to 160GB/s
    which is the NVLink intra-node bandwidth"), one GPU's share when the group has one rank per node.
    The link keeps the fabric's id (`ib-hdr-x8/4`: shared by 4 groups) and takes the intra-node link's
    bandwidth where that is slower: a ring across nodes also runs over NVLink or PCIe inside them."""
    if n_ranks < 1 or gpus_per_node < 1 or stride < 1:
        raise TracelogError(
            f"need positive ranks, GPUs per node and stride; got {n_ranks}, {gpus_per_node}, {stride}"
        )
    intra = gpu_intra_node_link(gpu) if n_ranks > 1 and gpus_per_node > 1 else None
    if not spans_nodes(n_ranks, gpus_per_node, stride) and intra is not None:
        return intra
    if fabric_link is None:
        raise TracelogError(
            f"{n_ranks} ranks {stride} apart span nodes of {gpus_per_node} GPUs: name the fabric link"
        )
    members = max(1, min(n_ranks, gpus_per_node // stride))
    groups = max(1, gpus_per_node // members)
    uni = fabric_link.unidirectional_gbps / groups
    bi = fabric_link.bidirectional_gbps / groups
    name = f"{fabric_link.name}, shared by {groups} group(s) of {members} GPU(s) per node"
    if members > 1 and intra is not None and intra.unidirectional_gbps < uni:
        uni, bi = intra.unidirectional_gbps, intra.bidirectional_gbps
        name += f", bounded by {intra.id} inside the node"
    return replace(
        fabric_link,
        id=f"{fabric_link.id}/{groups}",
        name=name,
        unidirectional_gbps=uni,
        bidirectional_gbps=bi,
        scope="gpu" if members == 1 else "node",
    )


@dataclass(frozen=True)
class Placement:
    """Where a collective's ranks sit: how many, on how many nodes, the GPU-to-GPU link inside a node
    (None with one rank per node) and the network between nodes (None on one node)."""

    ranks: int
    nodes: int = 1
    intra: Link | None = None
    fabric: Link | None = None
    architecture: str | None = None  # the GPU generation (catalog `architecture`), for NCCL's LL ceiling
    nvls: bool = False  # the node's GPUs reduce in an NVSwitch (`nvls.has_nvls`)
    allowed: frozenset[str] | None = None  # the algorithms NCCL may use (`nvls.NcclOffer`); None: any

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.nodes < 1 or self.nodes > self.ranks:
            raise TracelogError(f"need 1 ≤ nodes ≤ ranks; got {self.nodes} nodes, {self.ranks} ranks")
        if self.ranks_per_node > 1 and self.intra is None:
            raise TracelogError(f"{self.ranks_per_node} ranks per node need the GPU's intra-node link")
        if self.nodes > 1 and self.fabric is None:
            raise TracelogError(f"{self.nodes} nodes need the fabric between them")

    @property
    def ranks_per_node(self) -> int:
        return -(-self.ranks // self.nodes)


@dataclass(frozen=True)
class Algorithm:
    """One way NCCL can run the collective: its latency and the algorithm bandwidth it tends to, and
    which link bounds it."""

    name: str  # ring or tree
    protocol: str  # ll, ll128 or simple
    latency_us: float
    algbw_gbps: float
    bottleneck: str

    def time_us(self, size_bytes: float) -> float:
        return self.latency_us + size_bytes / (self.algbw_gbps * 1e3)


def _merge(defaults: dict[str, float], given: dict[str, float] | None) -> dict[str, float]:
    return {**defaults, **(given or {})}


def ring_busbw_bound(
    op: str, place: Placement, link_efficiency: dict[str, float] | None = None
) -> tuple[float, str]:
    """The busbw a ring (or nccl-tests' alltoall, sendrecv) tends to on large messages, and the link that
    bounds it.

    Inside a node every rank sends busbw × t bytes over its own link (that is what busbw means, nccl-tests
    doc/PERFORMANCE.md), so busbw ≤ e·B_intra. Across nodes NCCL builds one ring per channel; each ring
    leaves a node once per direction, through one NIC, so a node's NICs together carry the busbw of all
    rings: busbw ≤ e_net·(NICs used)·B_nic, the node's aggregate, not one GPU's share of it. A rank uses
    the NIC nearest to it, so a node with fewer ranks than NICs uses as many NICs as ranks (one rank per
    node on 4 NICs reaches one NIC's bandwidth: NVIDIA/nccl-tests#232). sendrecv crosses nodes on one pair
    of ranks, one NIC. alltoall sends (n−r)/n of each rank's data off the node, r ranks per node, so its
    busbw (factor (n−1)/n) ≤ e_net·B_node·(n−1)/(r·(n−r)): N/(N−1) × the network bandwidth per GPU, as
    NCCL's maintainers put it (NVIDIA/nccl-tests#130)."""
    eff = _merge(DEFAULT_EFFICIENCY_BY_CLASS, link_efficiency)
    name = normalize_op(op)
    bounds: list[tuple[float, str]] = []
    r, n = place.ranks_per_node, place.ranks
    if r > 1 and place.intra is not None:
        bounds.append((eff[link_class(place.intra)] * place.intra.unidirectional_gbps, place.intra.id))
    if place.nodes > 1 and place.fabric is not None:
        nics, per_nic = node_nics(place.fabric)
        used = 1 if name == "sendrecv" else min(nics, r)
        node = eff["net"] * used * per_nic
        label = nic_label(place.fabric, used, nics)
        if name == "alltoall":
            node *= (n - 1) / (r * (n - r))
        bounds.append((node, label))
    if not bounds:
        raise TracelogError("one rank on one node moves nothing")
    return min(bounds)


def _ll_ceiling(place: Placement) -> float:
    if place.nodes > 1:
        return LL_MAX_BUSBW_ACROSS_NODES_GBPS[min(place.nodes, 3)]
    return LL_MAX_BUSBW_GBPS.get(place.architecture or "", float("inf"))


def _protocol_busbw(algo: str, proto: str, busbw: float, place: Placement) -> float:
    """The bus bandwidth NCCL credits a protocol (tuning.cc "Various model refinements")."""
    if proto == "ll":
        return min(_ll_ceiling(place), busbw * LL_BANDWIDTH[algo])
    if proto == "ll128":
        return busbw * (0.92 if algo == "ring" else (7 / 9 if place.nodes == 1 else LL128_BANDWIDTH))
    return busbw


def algorithms(
    op: str,
    place: Placement,
    alpha_us: dict[str, float] | None = None,
    link_efficiency: dict[str, float] | None = None,
) -> list[Algorithm]:
    """Every (algorithm, protocol) NCCL weighs for `op` at this placement, costed as tuning.cc does.

    Ring latency: base + (steps − inter)·α_intra + inter·α_net, inter = 2(N−1) network steps of an
    all_reduce across N nodes, N−1 for the others (tuning.cc `nInterSteps`). Tree (all_reduce across
    nodes only): base + 2·((r−1)·α_intra + log2(N)·α_net); bandwidth 0.92 × the intra-node link's on two
    nodes (tuning.cc uses `bwIntra` for nNodes ≤ 2: the network then carries each byte once per
    direction, so it can exceed the ring's network bound; NVIDIA/nccl-tests#196) and the ring's bound
    beyond, halved into algorithm bandwidth. Protocols: LL (`LL_BANDWIDTH`, under NCCL's LL ceiling),
    LL128 on NVLink-class nodes (`LL128_BANDWIDTH`), Simple. `alpha_us` overrides the Simple-protocol α
    per link class (`nvlink`, `pcie`, `net`; LL and LL128 keep NCCL's ratio to it); `link_efficiency`
    the efficiency per class."""
    name = normalize_op(op)
    eff = _merge(DEFAULT_EFFICIENCY_BY_CLASS, link_efficiency)
    alpha = _merge(DEFAULT_ALPHA_US_BY_CLASS, alpha_us)

    def step(cls: str, algo: str, proto: str) -> float:
        scale = alpha[cls] / DEFAULT_ALPHA_US_BY_CLASS[cls]
        return STEP_LATENCY_US[(cls, algo, proto)] * scale

    n, nodes, r = place.ranks, place.nodes, place.ranks_per_node
    intra_cls = link_class(place.intra) if place.intra is not None else "nvlink"
    protocols = ("ll", "ll128", "simple") if intra_cls == "nvlink" else ("ll", "simple")
    busbw, bottleneck = ring_busbw_bound(name, place, link_efficiency)
    factor = BUSBW_FACTOR[name](n)
    steps = RING_STEPS[name](n)
    inter = 0 if nodes == 1 else (2 * (nodes - 1) if name == "all_reduce" else nodes - 1)
    if r == 1:
        inter = steps
    out = []
    for proto in protocols:
        latency = (
            BASE_LATENCY_US[("ring", proto)]
            + (steps - inter) * step(intra_cls, "ring", proto)
            + inter * step("net", "ring", proto)
        )
        bw = _protocol_busbw("ring", proto, busbw, place)
        out.append(Algorithm("ring", proto, latency, bw / factor, bottleneck))
    if name == "all_reduce" and nodes > 1:
        if nodes <= 2 and place.intra is not None and r > 1:
            tree_bw = eff[intra_cls] * place.intra.unidirectional_gbps
            nics, per_nic = node_nics(place.fabric)  # type: ignore[arg-type]
            network = eff["net"] * min(nics, r) * per_nic  # each byte crosses once per direction
            tree_label = place.intra.id
            network_label = nic_label(place.fabric, min(nics, r), nics)  # type: ignore[arg-type]
        else:
            tree_bw, tree_label = busbw, bottleneck
            network, network_label = float("inf"), bottleneck
        for proto in protocols:
            latency = BASE_LATENCY_US[("tree", proto)] + 2 * (
                (r - 1) * step(intra_cls, "tree", proto)
                + max(1, (nodes - 1).bit_length()) * step("net", "tree", proto)
            )
            tree_bus = _protocol_busbw("tree", proto, TREE_EFFICIENCY * tree_bw, place)
            bound, label = min((0.5 * tree_bus, tree_label), (network, network_label))
            out.append(Algorithm("tree", proto, latency, bound, label))
    if name == "all_reduce" and place.nvls and place.intra is not None:
        nics, per_nic = node_nics(place.fabric) if place.fabric is not None else (0, 0.0)
        used = min(nics, r)
        for algo, latency, bw, label in nvls_algorithms(
            architecture=place.architecture,
            intra_id=place.intra.id,
            intra_unidirectional_gbps=place.intra.unidirectional_gbps,
            intra_scale=eff[intra_cls] / DEFAULT_EFFICIENCY_BY_CLASS[intra_cls],
            nodes=nodes,
            ranks_per_node=r,
            network_gbps=eff["net"] * used * per_nic if place.fabric is not None else None,
            network_label=nic_label(place.fabric, used, nics) if place.fabric is not None else None,
        ):
            out.append(Algorithm(algo, "simple", latency, bw, label))
    if place.allowed is not None:
        out = [a for a in out if a.name in place.allowed]
        if not out:
            raise TracelogError(f"NCCL_ALGO leaves {name} no algorithm tracelog models here")
    return out


@dataclass(frozen=True)
class NcclPrediction(CollectivePrediction):
    """A predicted nccl-tests row with the algorithm and protocol NCCL's model picks at that size."""

    algorithm: str = "ring"
    protocol: str = "simple"
    bottleneck: str = ""


def predict_nccl(
    op: str,
    size_bytes: float,
    place: Placement,
    alpha_us: dict[str, float] | None = None,
    link_efficiency: dict[str, float] | None = None,
) -> NcclPrediction:
    """The nccl-tests row NCCL's cost model predicts for one message size: the (algorithm, protocol)
    of least latency + size/bandwidth (src/enqueue.cc), algbw = S/t, busbw = algbw × factor."""
    name = normalize_op(op)
    if place.ranks == 1:
        return NcclPrediction(name, size_bytes, 1, 0.0, float("inf"), float("inf"))
    best = min(algorithms(name, place, alpha_us, link_efficiency), key=lambda a: a.time_us(size_bytes))
    time_us = best.time_us(size_bytes)
    alg = size_bytes / (time_us * 1e3)
    factor = BUSBW_FACTOR[name](place.ranks)
    return NcclPrediction(
        name, size_bytes, place.ranks, time_us, alg, alg * factor, best.name, best.protocol, best.bottleneck
    )


def nccl_curve(
    op: str,
    sizes_bytes: Sequence[float],
    place: Placement,
    alpha_us: dict[str, float] | None = None,
    link_efficiency: dict[str, float] | None = None,
) -> pd.DataFrame:
    """`predict_nccl` over message sizes, one row per size."""
    import pandas as pd  # loaded by what returns a frame, not at start-up

    return pd.DataFrame([predict_nccl(op, s, place, alpha_us, link_efficiency).__dict__ for s in sizes_bytes])


def plateau_busbw(
    op: str,
    place: Placement,
    link_efficiency: dict[str, float] | None = None,
) -> tuple[float, Algorithm]:
    """The busbw the curve tends to on large messages, and the algorithm that reaches it."""
    name = normalize_op(op)
    best = max(algorithms(name, place, None, link_efficiency), key=lambda a: a.algbw_gbps)
    return best.algbw_gbps * BUSBW_FACTOR[name](place.ranks), best


ASSUMED_GPUS_PER_NODE = 8
"""GPUs per node of a bench too wide for one host whose device lines do not say how many (an HGX board; the
runs' own default, analysis.inputs)."""


def bench_placement(
    gpu: Gpu | None,
    ranks: int,
    nodes: int | None,
    gpus_per_node: int | None,
    fabric: Link | None,
    allowed: frozenset[str] | None = None,
) -> tuple[Placement, list[str]]:
    """The placement of a benchmark's ranks from what is known of it, and what had to be assumed: nodes
    from ranks ÷ GPUs per node when not given; across nodes without a named fabric, the GPU generation's
    reference system fabric (the catalog's `network_link`, e.g. 8 × HDR for DGX A100)."""
    assumptions: list[str] = []
    if not nodes and not gpus_per_node and beyond_one_host(ranks):
        gpus_per_node = ASSUMED_GPUS_PER_NODE
        assumptions.append(
            f"{ranks} ranks are more than one host holds, its GPUs per node unknown: "
            f"{ASSUMED_GPUS_PER_NODE} per node assumed"
        )
    if not nodes:
        nodes = -(-ranks // gpus_per_node) if gpus_per_node else 1
    nodes = min(nodes, ranks)
    per_node = -(-ranks // nodes)
    hosts = domain_hosts(gpu, per_node) if nodes > 1 else 1
    if hosts > 1 and gpu is not None:
        # NCCL's node is then the NVLink domain (multi-node NVLink): its hosts' NICs serve it together
        assumptions.append(
            f"{nodes} hosts of {per_node} {gpu.id} taken as {-(-nodes // hosts)} NVLink domain(s) of up to "
            f"{gpu.nvlink_domain} GPUs ({gpu.source_of('nvlink_domain')})"
        )
        nodes = -(-nodes // hosts)
        if nodes > 1:
            raise TracelogError(
                f"{ranks} ranks span {nodes} NVLink domains of {gpu.nvlink_domain} {gpu.id}: how NCCL "
                "crosses between domains (which of their NICs its trees use) is not modelled"
            )
        per_node = ranks
    intra = None
    if per_node > 1:
        if gpu is None:
            raise TracelogError("unknown GPU: give --gpu to predict its links")
        intra = gpu_intra_node_link(gpu)
    if nodes > 1 and fabric is None:
        if gpu is None or not gpu.network_link:
            raise TracelogError(f"{nodes} nodes and no fabric: give --fabric (a catalog link id)")
        fabric = link(gpu.network_link)
        assumptions.append(
            f"fabric {fabric.id}: the reference fabric of {gpu.id} ({gpu.source_of('network_link')}); "
            "give --fabric"
        )
    arch = gpu.architecture if gpu is not None else None
    nvls = has_nvls(arch, intra.id if intra is not None else None)
    return Placement(ranks, nodes, intra, fabric if nodes > 1 else None, arch, nvls, allowed), assumptions
