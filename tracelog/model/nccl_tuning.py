"""NCCL's tuning tables: the latencies and bandwidth refinements of its own cost model
(src/graph/tuning.cc `ncclTopoTuneModel`; src/enqueue.cc picks the algorithm and protocol of least
predicted time), which `collectives.algorithms` costs a collective with. Figures from NVIDIA/nccl at
commit 5067397 (2026-06)."""

from __future__ import annotations

DEFAULT_LINK_EFFICIENCY = 0.78
"""Share of a link's unidirectional bandwidth that NCCL busbw reaches on large messages: ~235 of 300 GB/s
on A100 NVLink 3 (nccl-tests all_reduce on 8×A100, the figure FORMULAS.md and the ml-engineering notes
quote as normal). An assumption for other links; pass `efficiency` to override."""


BASE_LATENCY_US: dict[tuple[str, str], float] = {
    ("tree", "ll"): 6.8,
    ("tree", "ll128"): 14.0,
    ("tree", "simple"): 8.4,
    ("ring", "ll"): 6.6,
    ("ring", "ll128"): 14.0,
    ("ring", "simple"): 8.4,
}
"""Fixed cost of one collective call, µs (tuning.cc `baseLatencies`, Tree and Ring rows: LL, LL128,
Simple)."""

STEP_LATENCY_US: dict[tuple[str, str, str], float] = {
    ("nvlink", "tree", "ll"): 0.6,
    ("nvlink", "tree", "ll128"): 1.25,
    ("nvlink", "tree", "simple"): 4.0,
    ("nvlink", "ring", "ll"): 0.6,
    ("nvlink", "ring", "ll128"): 1.9,
    ("nvlink", "ring", "simple"): 3.4,
    ("pcie", "tree", "ll"): 1.0,
    ("pcie", "tree", "ll128"): 1.9,
    ("pcie", "tree", "simple"): 4.0,
    ("pcie", "ring", "ll"): 1.0,
    ("pcie", "ring", "ll128"): 2.5,
    ("pcie", "ring", "simple"): 5.7,
    ("net", "tree", "ll"): 5.0,
    ("net", "tree", "ll128"): 8.5,
    ("net", "tree", "simple"): 14.0,
    ("net", "ring", "ll"): 2.7,
    ("net", "ring", "ll128"): 4.0,
    ("net", "ring", "simple"): 14.0,
}
"""α per step in µs by link class, algorithm and protocol (tuning.cc `hwLatencies`, NVLINK / PCI / NET
tables): about a µs over NVLink, a few over PCIe, 14 over the network with the Simple protocol that
carries large messages. Calibration passes its own as `alpha_us` (per class, Simple protocol; the LL
and LL128 steps keep NCCL's ratio to it)."""

LL_MAX_BUSBW_GBPS: dict[str, float] = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 282.0}
"""Ceiling of the LL protocol's bandwidth on one node, by GPU generation (tuning.cc `llMaxBws`, N1)."""
LL_MAX_BUSBW_ACROSS_NODES_GBPS: dict[int, float] = {2: 39.0, 3: 20.4}
"""The same across two nodes and more (tuning.cc `llMaxBws` for Intel hosts, N2 and N4; NCCL keys it by
CPU vendor, which no log here names, so the Intel row; AMD hosts: 22.5 and 19.0)."""

DEFAULT_ALPHA_US_BY_CLASS: dict[str, float] = {
    cls: STEP_LATENCY_US[(cls, "ring", "simple")] for cls in ("nvlink", "pcie", "net")
}

DEFAULT_NET_EFFICIENCY = 0.96
"""Share of a NIC's unidirectional bandwidth NCCL's busbw reaches: 24 GB/s on a 200 Gb/s HDR port (25
GB/s), the figure NCCL's maintainers quote for nccl-tests at 8 GB (NVIDIA/nccl#412)."""

DEFAULT_EFFICIENCY_BY_CLASS: dict[str, float] = {
    "nvlink": DEFAULT_LINK_EFFICIENCY,
    "pcie": DEFAULT_LINK_EFFICIENCY,
    "net": DEFAULT_NET_EFFICIENCY,
}
"""Bandwidth efficiency per link class. NVLink: ~235 of 300 GB/s on A100 (0.78; NCCL's topology credits
an NVLink 3 link 20.0 of its 25 GB/s, src/graph/topo.h SM80_NVLINK_BW, 0.80). PCIe: the same, an
assumption. Network: `DEFAULT_NET_EFFICIENCY`."""

LL_BANDWIDTH = {"ring": 0.5, "tree": 1 / 3.8}
"""The LL protocol moves 8-byte lines of 4 data bytes plus a flag: NCCL credits ring LL half the bandwidth
and tree LL 1/3.8 of it, under `LL_MAX_BUSBW_GBPS` (tuning.cc "Various model refinements")."""

LL128_BANDWIDTH = 120 / 128
"""LL128 carries 120 data bytes per 128-byte line (tuning.cc: ring × 0.92, tree × 120/128 across nodes,
7/9 on one node). NCCL enables it by default where GPUs meet over NVLink (tuning.cc: `typeIntra <=
PATH_NVB`, NICs up to PXB/PXN), so tracelog weighs it for NVLink-class nodes and one rank per node."""

TREE_EFFICIENCY = 0.92
"""tuning.cc: tree all_reduce bandwidth × 0.92, and its algorithm bandwidth half the tree's bus figure
(`ratio *= .5`): a double binary tree moves each byte up and down."""
