"""The hardware catalog: GPUs and links from `hardware.toml`, each figure with its source.

The TOML file is the data; this module only loads it (once), types it and answers lookups. A name a log
prints either matches a catalog entry exactly (after case and whitespace folding) or stays unknown:
tracelog never guesses a GPU from a partial name.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from tracelog.errors import TracelogError

if TYPE_CHECKING:
    import pandas as pd

PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")
# The dtypes the catalog records a peak for: the training precisions and fp64, listed for reference only
# (`peak_tflops` and the model take PRECISIONS).
PEAK_PRECISIONS: tuple[str, ...] = ("fp64", *PRECISIONS)
_PRECISION_ALIASES = {
    "float32": "fp32",
    "fp32": "fp32",
    "tf32": "tf32",
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "fp16": "fp16",
    "fp8": "fp8",
    "float8": "fp8",
    "int8": "int8",
    "fp4": "fp4",
}
_CATALOG = "hardware.toml"


@dataclass(frozen=True)
class Link:
    """One interconnect. Bandwidths in GB/s (1e9 bytes/s); `scope` says whose figure it is: one GPU's
    aggregate (`gpu`), one network port (`port`) or one node's NICs together (`node`)."""

    id: str
    name: str
    kind: str
    scope: str
    unidirectional_gbps: float
    bidirectional_gbps: float
    source: str
    links: int | None = None
    latency_us: float | None = None

    def share(self, measured_gbps: float, *, bidirectional: bool = False) -> float:
        """Measured bandwidth as a fraction of this link's figure for the same direction count."""
        spec = self.bidirectional_gbps if bidirectional else self.unidirectional_gbps
        return measured_gbps / spec


@dataclass(frozen=True)
class Gpu:
    """One GPU model (per device as the framework sees it: one GCD for AMD MI250/MI250X)."""

    id: str
    name: str
    vendor: str
    architecture: str
    memory_gb: float
    memory_bytes: int
    memory_bandwidth_gbps: float
    peak_tflops: dict[str, float]
    match: tuple[str, ...]
    source: str
    sources: dict[str, str] = field(default_factory=dict)
    memory_type: str | None = None
    sm_count: int | None = None
    compute_capability: str | None = None
    nvlink_gen: int | None = None
    nvlink_links: int | None = None
    pcie_gen: int | None = None
    intra_node_link: str | None = None
    bridge_link: str | None = None
    network_link: str | None = None
    nvlink_domain: int | None = None  # GPUs one NVLink domain joins across hosts (72: an NVL72 rack)

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / 2**30

    @property
    def memory_mib(self) -> float:
        return self.memory_bytes / 2**20

    def source_of(self, figure: str) -> str:
        """Where one figure comes from: its own source if it has one, else the entry's."""
        return self.sources.get(figure, self.source)


@dataclass(frozen=True)
class _Catalog:
    gpus: dict[str, Gpu]
    links: dict[str, Link]
    by_name: dict[str, str]


def _fold(name: str) -> str:
    return " ".join(name.split()).casefold()


def _gpu_from(gpu_id: str, raw: dict[str, Any]) -> Gpu:
    memory_gb = float(raw["memory_gb"])
    return Gpu(
        id=gpu_id,
        name=raw["name"],
        vendor=raw["vendor"],
        architecture=raw["architecture"],
        memory_gb=memory_gb,
        memory_bytes=int(raw.get("memory_bytes", round(memory_gb * 2**30))),
        memory_bandwidth_gbps=float(raw["memory_bandwidth_gbps"]),
        peak_tflops={k: float(v) for k, v in raw.get("peak_tflops", {}).items()},
        match=tuple(raw.get("match", ())),
        source=raw["source"],
        sources=dict(raw.get("sources", {})),
        memory_type=raw.get("memory_type"),
        sm_count=raw.get("sm_count"),
        compute_capability=raw.get("compute_capability"),
        nvlink_gen=raw.get("nvlink_gen"),
        nvlink_links=raw.get("nvlink_links"),
        pcie_gen=raw.get("pcie_gen"),
        intra_node_link=raw.get("intra_node_link"),
        bridge_link=raw.get("bridge_link"),
        network_link=raw.get("network_link"),
        nvlink_domain=raw.get("nvlink_domain"),
    )


def _link_from(link_id: str, raw: dict[str, Any]) -> Link:
    return Link(
        id=link_id,
        name=raw["name"],
        kind=raw["kind"],
        scope=raw["scope"],
        unidirectional_gbps=float(raw["unidirectional_gbps"]),
        bidirectional_gbps=float(raw["bidirectional_gbps"]),
        source=raw["source"],
        links=raw.get("links"),
        latency_us=raw.get("latency_us"),
    )


@cache
def _catalog() -> _Catalog:
    text = resources.files("tracelog").joinpath(_CATALOG).read_text(encoding="utf-8")
    data = tomllib.loads(text)
    gpus = {gid: _gpu_from(gid, raw) for gid, raw in data.get("gpu", {}).items()}
    links = {lid: _link_from(lid, raw) for lid, raw in data.get("link", {}).items()}
    by_name: dict[str, str] = {}
    for g in gpus.values():
        for pattern in (*g.match, g.id):
            key = _fold(pattern)
            if key in by_name and by_name[key] != g.id:
                raise TracelogError(f"{pattern!r} matches both {by_name[key]} and {g.id}", path=_CATALOG)
            by_name[key] = g.id
    return _Catalog(gpus=gpus, links=links, by_name=by_name)


def _unknown(kind: str, wanted: str, known: list[str]) -> TracelogError:
    close = difflib.get_close_matches(wanted.casefold(), known, n=5, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(sorted(known))}"
    return TracelogError(f"unknown {kind} {wanted!r}{hint}")


def gpus() -> list[Gpu]:
    """Every GPU in the catalog, in file order."""
    return list(_catalog().gpus.values())


def links() -> list[Link]:
    """Every link in the catalog, in file order."""
    return list(_catalog().links.values())


def gpu(gpu_id: str) -> Gpu:
    """The catalog GPU with this id (case-insensitive); TracelogError with close matches if unknown."""
    found = _catalog().gpus.get(gpu_id.strip().casefold())
    if found is None:
        raise _unknown("GPU", gpu_id, list(_catalog().gpus))
    return found


def link(link_id: str) -> Link:
    """The catalog link with this id (case-insensitive); TracelogError with close matches if unknown."""
    found = _catalog().links.get(link_id.strip().casefold())
    if found is None:
        raise _unknown("link", link_id, list(_catalog().links))
    return found


def node_fabric(fabric: Link, nics_per_node: int | None) -> Link:
    """The node's network when it has `nics_per_node` ports of a `port` entry (`opa-100` and 4 NICs, as
    a BLOOM node): one node-wide entry, `links` ports at the port's figure each, named `PORT-xN`.

    A catalog `port` entry is one NIC; alone it would put one port under the whole node. A `node` entry
    already counts its NICs (`ib-hdr-x8`) and is kept as it is: a count from a log's NCCL line says
    which NICs NCCL listed, not that the catalog's node is wrong."""
    if fabric.scope != "port" or not nics_per_node or nics_per_node <= 1:
        return fabric
    return _times(fabric, nics_per_node, f"{fabric.id}-x{nics_per_node}", f"{nics_per_node} x {fabric.name}",
                  f"{nics_per_node} per node", nics_per_node)  # fmt: skip


def _times(fabric: Link, factor: int, link_id: str, name: str, why: str, links: int) -> Link:
    """`fabric` `factor` times over, as one node-wide entry of `links` NICs."""
    return replace(
        fabric,
        id=link_id,
        name=name,
        scope="node",
        unidirectional_gbps=fabric.unidirectional_gbps * factor,
        bidirectional_gbps=fabric.bidirectional_gbps * factor,
        source=f"{fabric.source}; {why}",
        links=links,
    )


def domain_hosts(gpu: Gpu | None, gpus_per_host: int | None) -> int:
    """How many hosts of `gpus_per_host` GPUs one NVLink domain joins: 18 compute trays of 4 GB200 in an
    NVL72 rack (the catalog's `nvlink_domain`), 1 where the host is the domain (an HGX board).

    Inside the domain NCCL treats the GPUs of several hosts as one node (multi-node NVLink): rings, trees
    and NVLink SHARP run over NVLink there, and only a collective wider than the domain takes the NICs."""
    domain = gpu.nvlink_domain if gpu is not None else None
    if not domain or not gpus_per_host or gpus_per_host >= domain or domain % gpus_per_host:
        return 1
    return domain // gpus_per_host


def domain_note(gpu: Gpu, gpus_per_host: int) -> str:
    """What a run or a plan assumes where `domain_hosts` joins hosts into one NVLink domain."""
    return (
        f"hosts of {gpus_per_host} {gpu.id} taken as parts of NVLink domains of {gpu.nvlink_domain} GPUs "
        f"({gpu.source_of('nvlink_domain')})"
    )


def domain_fabric(fabric: Link, hosts: int) -> Link:
    """The network of an NVLink domain of `hosts` hosts: their NICs together (a `port` entry is one NIC
    per host, a `node` entry its own count per host)."""
    if hosts <= 1:
        return fabric
    nics = ((fabric.links or 1) if fabric.scope == "node" else 1) * hosts
    link_id = f"{re.sub(r'-x[0-9]+$', '', fabric.id)}-x{nics}"
    name = f"{nics} NICs of an NVLink domain of {hosts} hosts ({fabric.name})"
    return _times(fabric, hosts, link_id, name, f"{hosts} hosts per NVLink domain", nics)


def fabric_of(fabric_id: str | None, nics_per_node: int | None) -> Link | None:
    """A run's or bench's network from its stored facts: the catalog link, across its node's NICs."""
    return node_fabric(link(fabric_id), nics_per_node) if fabric_id else None


def match_gpu(name_as_printed: str | None) -> Gpu | None:
    """The GPU a log names (`NVIDIA A100-SXM4-80GB`, `Tesla V100-SXM2-32GB`, `AMD Instinct MI300X`), or
    None: only exact names from the catalog's `match` lists count, after folding case and spaces."""
    if not name_as_printed:
        return None
    gpu_id = _catalog().by_name.get(_fold(name_as_printed))
    return _catalog().gpus[gpu_id] if gpu_id else None


PLACEHOLDER_GPU_NAMES = frozenset({"nvidia graphics device"})
"""What the NVIDIA driver calls a board its name table does not carry yet (a part newer than the driver, a
pre-release one): coreweave/nccl-tests#43's GB200 NVL72 ranks print `NVIDIA Graphics Device`. It says only
that the GPU is NVIDIA's: no catalog GPU is read from it."""


def unknown_gpu_note(name_as_printed: str) -> str:
    """Why a printed GPU name decided no catalog GPU, for the notes of what could not be predicted."""
    note = f"the log names the GPU {name_as_printed!r}, which is no catalog GPU's name"
    if _fold(name_as_printed) in PLACEHOLDER_GPU_NAMES:
        note += (
            ": the name the NVIDIA driver gives a GPU its name table does not know yet (a part newer than "
            "the driver), so the log does not say which GPU it was"
        )
    return note


def resolve_gpu_id(id_or_name: str) -> str:
    """The catalog id for what a user typed: an id (`a100-sxm4-80gb`) or a name as tools print it
    (`NVIDIA A100-SXM4-80GB`); TracelogError with close matches otherwise."""
    found = _catalog().gpus.get(id_or_name.strip().casefold()) or match_gpu(id_or_name)
    if found is None:
        raise _unknown("GPU", id_or_name, list(_catalog().gpus))
    return found.id


def _as_gpu(g: Gpu | str) -> Gpu:
    return g if isinstance(g, Gpu) else gpu(g)


def gpu_intra_node_link(g: Gpu | str) -> Link:
    """The link between two GPUs of one node: NVLink/xGMI where a switch or mesh joins all of them, PCIe
    for cards whose NVLink bridge joins only a pair."""
    g = _as_gpu(g)
    if not g.intra_node_link:
        raise TracelogError(
            f"{g.id} has no GPU-to-GPU link inside a node"
            + (f"; several of them talk over {g.network_link}" if g.network_link else "")
        )
    return link(g.intra_node_link)


def normalize_precision(precision: str) -> str:
    """`bf16`, `bfloat16`, `BF16` → `bf16`; TracelogError for anything else."""
    key = precision.strip().casefold()
    if key not in _PRECISION_ALIASES:
        raise TracelogError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")
    return _PRECISION_ALIASES[key]


def peak_tflops(g: Gpu | str, precision: str) -> float:
    """Dense peak TFLOP/s of `g` at `precision` (no sparsity doubling); TracelogError if the catalog has
    no such figure for it (the part lacks the dtype, or no source gives it)."""
    g = _as_gpu(g)
    p = normalize_precision(precision)
    if p not in g.peak_tflops:
        have = ", ".join(k for k in PRECISIONS if k in g.peak_tflops)
        raise TracelogError(f"{g.id} has no {p} peak in the catalog (it has: {have})")
    return g.peak_tflops[p]


def catalog(kind: str = "gpus") -> pd.DataFrame:
    """The catalog as a table for listing: `gpus` or `links`."""
    import pandas as pd  # loaded by what returns a frame, not at start-up

    if kind == "links":
        return pd.DataFrame(
            [
                {
                    "id": lk.id,
                    "name": lk.name,
                    "kind": lk.kind,
                    "scope": lk.scope,
                    "links": lk.links,
                    "unidirectional_gbps": lk.unidirectional_gbps,
                    "bidirectional_gbps": lk.bidirectional_gbps,
                    "latency_us": lk.latency_us,
                    "source": lk.source,
                }
                for lk in links()
            ]
        )
    if kind != "gpus":
        raise TracelogError(f"unknown catalog {kind!r}; use gpus or links")
    rows = []
    for g in gpus():
        intra = link(g.intra_node_link) if g.intra_node_link else None
        rows.append(
            {
                "id": g.id,
                "name": g.name,
                "vendor": g.vendor,
                "memory_gb": g.memory_gb,
                "memory_gib": g.memory_gib,
                "memory_bandwidth_gbps": g.memory_bandwidth_gbps,
                "sm_count": g.sm_count,
                **{f"{p}_tflops": g.peak_tflops.get(p) for p in PEAK_PRECISIONS},
                "intra_node_link": g.intra_node_link,
                "intra_unidirectional_gbps": intra.unidirectional_gbps if intra else None,
                "intra_bidirectional_gbps": intra.bidirectional_gbps if intra else None,
                "source": g.source,
            }
        )
    return pd.DataFrame(rows)


def describe(entry_id: str) -> pd.DataFrame:
    """One GPU or link in full: every figure with the source it comes from (field, value, source)."""
    import pandas as pd  # loaded by what returns a frame, not at start-up

    key = entry_id.strip().casefold()
    if key in _catalog().gpus:
        g = _catalog().gpus[key]
        rows = [
            ("id", g.id, ""),
            ("name", g.name, g.source),
            ("vendor", g.vendor, ""),
            ("architecture", g.architecture, ""),
            ("memory_gb", g.memory_gb, g.source_of("memory_gb")),
            ("memory_gib", round(g.memory_gib, 2), "memory_gb as 2^30 bytes (JEDEC)"),
            ("memory_type", g.memory_type, g.source_of("memory_type")),
            ("memory_bandwidth_gbps", g.memory_bandwidth_gbps, g.source_of("memory_bandwidth_gbps")),
            ("sm_count", g.sm_count, g.source_of("sm_count")),
            ("compute_capability", g.compute_capability, g.source_of("compute_capability")),
            *(
                (f"{p}_tflops (dense)", g.peak_tflops[p], g.source_of(p))
                for p in PEAK_PRECISIONS
                if p in g.peak_tflops
            ),
            ("nvlink_gen", g.nvlink_gen, g.source_of("nvlink_gen")),
            ("nvlink_links", g.nvlink_links, g.source_of("nvlink_links")),
            ("pcie_gen", g.pcie_gen, g.source_of("pcie_gen")),
            ("intra_node_link", g.intra_node_link, g.source_of("intra_node_link")),
            ("network_link", g.network_link, g.source_of("network_link")),
            ("names matched", ", ".join(g.match), "as logs print them (case and spaces folded)"),
        ]
        for link_id in (g.intra_node_link, g.network_link):
            if link_id and link_id in _catalog().links:
                lk = _catalog().links[link_id]
                rows.append((f"{link_id} unidirectional_gbps", lk.unidirectional_gbps, lk.source))
                rows.append((f"{link_id} bidirectional_gbps", lk.bidirectional_gbps, lk.source))
    elif key in _catalog().links:
        lk = _catalog().links[key]
        rows = [
            ("id", lk.id, ""),
            ("name", lk.name, lk.source),
            ("kind", lk.kind, ""),
            ("scope", lk.scope, "gpu: one GPU's aggregate; port: one network port; node: a node's NICs"),
            ("links", lk.links, lk.source),
            (
                "unidirectional_gbps",
                lk.unidirectional_gbps,
                "one direction: compare busbw and p2p uni with it",
            ),
            ("bidirectional_gbps", lk.bidirectional_gbps, "both directions summed, as datasheets quote"),
            ("latency_us", lk.latency_us, lk.source if lk.latency_us else ""),
        ]
    else:
        raise _unknown("GPU or link", entry_id, [*_catalog().gpus, *_catalog().links])
    frame = pd.DataFrame(rows, columns=["field", "value", "source"])
    frame["value"] = frame["value"].map(lambda v: "" if v is None else str(v))
    return frame[frame["value"] != ""].reset_index(drop=True)


def gpu_for(gpu_model: str | None, gpu_name: str | None) -> Gpu | None:
    """The catalog GPU by id (as the user gave it) or by the name the tool printed; None if unknown.
    Either may come from a frame, where missing is NaN rather than None."""
    gpu_model = gpu_model if isinstance(gpu_model, str) else None
    gpu_name = gpu_name if isinstance(gpu_name, str) else None
    if gpu_model:
        try:
            return gpu(gpu_model)
        except TracelogError:  # an unknown id given by the user stays unknown here; `hardware` explains
            return None
    return match_gpu(gpu_name) if gpu_name else None


LARGEST_HOST_GPUS = 16
"""The most GPUs one host joins over its own links: DGX-2 / HGX-2 (16 V100) and HGX A100 16-GPU boards,
NVSwitch-joined; 8-GPU boards are the rule since. A bench of more ranks spans hosts, whatever its count per
node (an NVLink domain of several hosts, GB200 NVL72, is the model's `domain_hosts`)."""


def beyond_one_host(ranks: int) -> bool:
    """Whether `ranks` GPUs cannot all sit in one host (`LARGEST_HOST_GPUS`): a bench whose device lines
    were cut, its GPUs per node unknown, still crosses the network."""
    return ranks > LARGEST_HOST_GPUS


def bench_link(
    gpu_model: str | None,
    gpu_name: str | None,
    nodes: int | None,
    ranks: int | None,
    gpus_per_node: int | None,
) -> Link | None:
    """The intra-node link of a single-node benchmark (NVLink or PCIe of its GPU); None across nodes,
    where the fabric is the user's to name, and for more ranks than one host holds (`beyond_one_host`)."""
    if nodes is not None and nodes > 1:
        return None
    if nodes is None and ranks and gpus_per_node and ranks > gpus_per_node:
        return None
    if nodes is None and not gpus_per_node and ranks and beyond_one_host(ranks):
        return None
    found = gpu_for(gpu_model, gpu_name)
    return gpu_intra_node_link(found) if found is not None else None
