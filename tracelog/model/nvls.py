"""NVLink SHARP: the all-reduce an NVSwitch does itself (NCCL's NVLS on one node, NVLSTree across nodes),
and which of NCCL's algorithms a bench could use (its NCCL version, `NCCL_ALGO`, `NCCL_NVLS_ENABLE`).

On Hopper and Blackwell nodes whose GPUs meet through NVSwitch, NCCL (2.17 and later) reduces in the
switch: each GPU sends its data to the switch once and reads the reduced result once, so nccl-tests'
busbw, which counts the 2(n−1)/n of a ring, rises past the link's unidirectional figure. On 8 H100 the
ring reaches ~370 GB/s and NVLS ~480 (algbw ~275 GB/s), as NCCL's maintainers put it
(NVIDIA/nccl-tests#212). NCCL's own cost model credits NVLS `nvlsEfficiency` (0.85 Hopper, 0.74
Blackwell) of the NVLink bandwidth it counts (src/graph/tuning.cc); tracelog takes the measured algbw
share on Hopper and scales it to Blackwell by that ratio. Measurements that did not set the figure, for
checking: 8 × H200 475 GB/s (NVIDIA/nccl-tests#272, NCCL 2.20.3; predicted 481), 8 × H800 215 GB/s on
NVLink's 200 GB/s (NVIDIA/nccl#1374; predicted 214), 8 × B200 "830+" (NVIDIA/nccl#1807, NCCL 2.27.1;
predicted 838).

Across nodes, NVLSTree reduces inside each node through the switch and between nodes along a tree. On
two nodes each byte crosses the network once per direction, so the nodes' NICs bound its algbw by their
whole bandwidth (tuning.cc doubles the inter-node bandwidth of NVLSTree for nNodes ≤ 2); beyond, a tree
moves each byte up and down, half that. 8 × H100 with 8 × 400 Gb/s per node measured 330 GB/s without
NVLS and 430 with it, on one node and on two; 320 GB/s either way on four (NVIDIA/nccl#1221).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NVLS_ALGBW_SHARE: dict[str, float] = {
    "hopper": 275.0 / 450.0,
    "blackwell": 275.0 / 450.0 * 0.74 / 0.85,
}
"""NVLS all-reduce algbw over the NVLink's unidirectional figure, by GPU generation. Hopper: ~275 of 450
GB/s on 8 H100 (NVIDIA/nccl-tests#212, NCCL's maintainers). Blackwell: the same scaled by NCCL's
`nvlsEfficiency` Blackwell / Hopper (0.74 / 0.85; src/graph/tuning.cc at 5067397)."""

NVLS_LATENCY_US = 25.0
"""NVLS and NVLSTree's intra-node latency, µs (tuning.cc `hwLatencies`, NVLINK row, Simple; NCCL gives
NVLS no base latency). Far above a ring's: NCCL keeps rings for small messages."""

NVLS_NET_LATENCY_US = {"nvls": 18.0, "nvlstree": 20.9}
"""The network's latency per tree level (NVLSTree) or once (NVLS across nodes), µs (tuning.cc
`hwLatencies`, NET row, Simple)."""

NVLS_SINCE = (2, 17)
NVLSTREE_SINCE = (2, 18)
"""NCCL releases that brought them: NVLS in 2.17.1, NVLSTree in 2.18.1 (NVIDIA/nccl release notes)."""

NCCL_ALGORITHMS = ("ring", "tree", "nvls", "nvlstree", "collnetdirect", "collnetchain", "pat")
"""NCCL's algorithm names (src/include/nccl_common.h `ncclAlgoStr`, lower-cased)."""

_FUNCTIONS = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "sendrecv": "sendrecv",
}


def has_nvls(architecture: str | None, intra_link_id: str | None) -> bool:
    """Whether the GPUs of a node can reduce in an NVSwitch: Hopper or Blackwell whose intra-node link is
    NVLink through a switch (an SXM board), not a bridge between two cards or PCIe."""
    return (
        architecture in NVLS_ALGBW_SHARE
        and intra_link_id is not None
        and intra_link_id.startswith("nvlink")
        and "bridge" not in intra_link_id
    )


def nccl_version(text: str | None) -> tuple[int, int] | None:
    """(major, minor) of what a log prints: `2.23.4+cuda12.6`, or nccl-tests' `nccl-library=22304`
    (major·10000 + minor·100 + patch since 2.9; major·1000 + minor·100 + patch before)."""
    if not text:
        return None
    text = text.strip()
    if match := re.match(r"(\d+)\.(\d+)", text):
        return int(match.group(1)), int(match.group(2))
    if text.isdigit():
        code = int(text)
        if code >= 20900:
            return code // 10000, code // 100 % 100
        if code >= 2000:
            return code // 1000, code // 100 % 10
    return None


def allowed_algorithms(setting: str | None, op: str) -> frozenset[str] | None:
    """The algorithms `NCCL_ALGO` leaves `op` (None: NCCL's own choice). NCCL's syntax (tuning.cc
    `parseList`): a comma list, `^` in front to exclude it instead, and `function:list` mappings after
    `;` that override the list for one function (`ring,tree;allreduce:nvls`)."""
    if not setting:
        return None
    chosen: frozenset[str] | None = None
    for i, part in enumerate(s.strip() for s in setting.strip().strip("'\"").split(";")):
        if not part:
            continue
        if ":" in part:
            function, part = part.split(":", 1)
            if _FUNCTIONS.get(function.strip().lower().replace("_", "")) != op:
                continue
        elif i > 0:
            continue
        names = part.strip()
        exclude = names.startswith("^")
        listed = {n.strip().lower() for n in names.lstrip("^").split(",") if n.strip()}
        chosen = frozenset(set(NCCL_ALGORITHMS) - listed) if exclude else frozenset(listed)
    return chosen


@dataclass(frozen=True)
class NcclOffer:
    """What a bench's NCCL may choose from, as far as its log tells: its version, `NCCL_ALGO` and
    `NCCL_NVLS_ENABLE` (0 turns NVLS off)."""

    version: tuple[int, int] | None = None
    algo: str | None = None
    nvls_enable: str | None = None

    def allowed(self, op: str) -> frozenset[str] | None:
        """The algorithm names NCCL may use for `op`, None for any."""
        allowed = allowed_algorithms(self.algo, op)
        banned = set()
        if self.nvls_enable is not None and self.nvls_enable.strip() == "0":
            banned |= {"nvls", "nvlstree"}
        if self.version is not None and self.version < NVLS_SINCE:
            banned.add("nvls")
        if self.version is not None and self.version < NVLSTREE_SINCE:
            banned.add("nvlstree")
        if not banned:
            return allowed
        return frozenset((allowed if allowed is not None else set(NCCL_ALGORITHMS)) - banned)

    def describe(self) -> dict[str, str]:
        """What was read, for a prediction's detail."""
        out = {}
        if self.version is not None:
            out["nccl_version"] = f"{self.version[0]}.{self.version[1]}"
        if self.algo:
            out["NCCL_ALGO"] = self.algo
        if self.nvls_enable is not None:
            out["NCCL_NVLS_ENABLE"] = self.nvls_enable
        return out


ENV_RX = re.compile(r"(?:^|[\s;'\"])(?:-x\s+|--env\s+|export\s+)?(NCCL_ALGO|NCCL_NVLS_ENABLE)=([^\s'\"]+)")


def offer_from(params: dict[str, str]) -> NcclOffer:
    """The offer a bench's parameters tell: `NCCL version`, `nccl-library` or the JSON's `nccl_version`,
    and `NCCL_ALGO` / `NCCL_NVLS_ENABLE` from NCCL's own `... set by environment to ...` lines (`env
    NCCL_ALGO`), the JSON's environment (`NCCL_ALGO`) or the command that started it (`-x NCCL_ALGO=Ring`,
    `NCCL_ALGO=Ring ./all_reduce_perf`)."""
    version = next(
        filter(None, (nccl_version(params.get(k)) for k in ("NCCL version", "nccl-library", "nccl_version"))),
        None,
    )
    env = {k: v for k, v in ENV_RX.findall(params.get("command") or "")}
    for name in ("NCCL_ALGO", "NCCL_NVLS_ENABLE"):
        # nccl-tests' JSON keeps its environment's NCCL_* variables under their own names
        if value := params.get(f"env {name}") or params.get(name):
            env[name] = value.rstrip(".")
    return NcclOffer(version, env.get("NCCL_ALGO"), env.get("NCCL_NVLS_ENABLE"))


def nvls_algorithms(
    *,
    architecture: str | None,
    intra_id: str,
    intra_unidirectional_gbps: float,
    intra_scale: float,
    nodes: int,
    ranks_per_node: int,
    network_gbps: float | None,
    network_label: str | None,
) -> list[tuple[str, float, float, str]]:
    """(name, latency µs, algbw GB/s, bounding link) of NVLS on one node or NVLSTree across nodes, for an
    all-reduce on GPUs that `has_nvls`. `intra_scale`: a fitted NVLink efficiency over the textbook one
    (1.0 uncalibrated); `network_gbps`: the node's NICs together, at their efficiency."""
    if architecture not in NVLS_ALGBW_SHARE or ranks_per_node < 2:
        return []
    intra = NVLS_ALGBW_SHARE[architecture] * intra_unidirectional_gbps * intra_scale
    if nodes == 1:
        return [("nvls", NVLS_LATENCY_US, intra, intra_id)]
    if network_gbps is None:
        return []
    network = network_gbps if nodes <= 2 else network_gbps / 2
    levels = max(1, (nodes - 1).bit_length())
    latency = NVLS_LATENCY_US + 2 * levels * NVLS_NET_LATENCY_US["nvlstree"]
    bound, label = min((intra, intra_id), (network, network_label or "network"))
    return [("nvlstree", latency, bound, label)]
