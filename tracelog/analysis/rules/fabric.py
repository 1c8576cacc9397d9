"""A GPU that dropped off its node's GPU fabric: what a topology matrix says of each GPU's links.

On a node whose GPUs are wired by NVLink (`nvidia-smi topo -m` prints `NV#`, # the links bonded between
the pair) or xGMI (`rocm-smi --showtopo`'s `XGMI`), every GPU has the same share of fabric links to its
peers: all of them behind an NVSwitch (HGX H100/B200: `NV18` to every GPU), a fixed few in a hybrid cube
mesh (DGX-1: four NVLink peers each). A GPU whose NVLinks are down (a link training error, an NVSwitch
or Fabric Manager fault, vllm-project/vllm#16336's B200 GPU2 printing `NODE`/`SYS` to every GPU while
the other seven are `NV18` to each other) is printed with the PCIe path instead, and NCCL routes every
collective that includes it over PCIe and the CPU interconnect: the whole ring runs at PCIe speed.

The rule reads the `links` rows of a matrix between two different GPUs, each pair once (from either
row: a cut matrix has one of them). It looks only at a node where most pairs are fabric links and at
least three GPUs are printed (a 2-GPU NVLink bridge has no peers to compare with; PCIe-only nodes and
`topo -mp`'s PCIe paths have no fabric link). Then:

- critical: a GPU with no fabric link to any GPU;
- warning: among the others, a GPU with fabric links to a smaller share of its printed peers than the
  median GPU's (`NV#` to only some of them), or fewer NVLinks per fabric peer than the median GPU's
  (`NV12` where its peers are `NV18` to each other).
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from typing import Any

from tracelog.analysis.rules import Flag, bench_flag
from tracelog.analysis.scope import Scope
from tracelog.store import Store
from tracelog.store.benches import device_order
from tracelog.thresholds import Thresholds

RULE = "nvlink_missing"
FABRIC_RX = re.compile(r"^(?:NV\d+|XGMI)$")
HINT_NVLINK = (
    "Check the GPU's links with `nvidia-smi nvlink --status -i <gpu>` (inactive or missing links) and "
    "`nvidia-smi -q -i <gpu> | grep -i -A3 fabric` (on NVSwitch systems, Hopper and Blackwell: the fabric "
    "state and status; NVLink5 nodes need the NVLink subnet manager as well as Fabric Manager), then the "
    "Fabric Manager service and its log (`systemctl status nvidia-fabricmanager`) and `dmesg` for Xid "
    "errors; a GPU reset (`nvidia-smi -r -i <gpu>`) or a node reboot usually brings the links back. "
    "Until then, NCCL traffic that includes this GPU goes over PCIe and the CPU interconnect."
)
HINT_XGMI = (
    "Check the GPU's links with `rocm-smi --showtopo` and `amd-smi xgmi` (link status and errors), and "
    "`dmesg` for xGMI or amdgpu errors; a GPU reset or a node reboot usually brings the links back. Until "
    "then, RCCL traffic that includes this GPU goes over PCIe."
)

LINKS_SQL = """
SELECT bench_id, coalesce(host, '') AS host, a, b, link_kind, link_count, line_no
FROM links
WHERE {scope} AND a <> b AND link_kind <> 'X' AND a LIKE 'GPU%' AND b LIKE 'GPU%'
ORDER BY bench_id, host, line_no
"""


def missing(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    rows = store.con.execute(LINKS_SQL.format(scope=scope.benches)).fetchall()
    matrices: dict[tuple[int, str], list[tuple[Any, ...]]] = defaultdict(list)
    for bench_id, host, *cell in rows:
        matrices[(bench_id, host)].append(tuple(cell))
    flags: list[Flag] = []
    for (bench_id, host), cells in matrices.items():
        flags += _matrix_flags(bench_id, host, cells)
    return flags


def _matrix_flags(bench_id: int, host: str, cells: list[tuple[Any, ...]]) -> list[Flag]:
    pairs: dict[frozenset[str], tuple[str, int | None]] = {}
    first_line: dict[str, int] = {}
    for a, b, kind, count, line_no in cells:
        first_line.setdefault(a, line_no)
        pair = frozenset((a, b))
        if pair not in pairs or (FABRIC_RX.match(kind) and not FABRIC_RX.match(pairs[pair][0])):
            pairs[pair] = (kind, count)
    gpus = sorted({g for pair in pairs for g in pair}, key=device_order)
    fabric = [p for p, (kind, _) in pairs.items() if FABRIC_RX.match(kind)]
    if len(gpus) < 3 or len(fabric) * 2 <= len(pairs):
        return []
    xgmi = any(pairs[p][0] == "XGMI" for p in fabric)
    name, links, hint = ("xGMI link", "xGMI links", HINT_XGMI) if xgmi else ("NVLink", "NVLinks", HINT_NVLINK)
    where = f" on {host}" if host else ""
    peers = {g: {next(iter(p - {g})): pairs[p] for p in pairs if g in p} for g in gpus}
    off = [g for g in gpus if not any(FABRIC_RX.match(kind) for kind, _ in peers[g].values())]
    on = [g for g in gpus if g not in off]
    flags = []
    if off:
        rest = _links_text({p: k for p, k in pairs.items() if p <= set(on)})
        flags.append(
            bench_flag(
                RULE,
                "critical",
                bench_id,
                f"{_names(off)}{where} {'has' if len(off) == 1 else 'have'} no {name} to any GPU "
                f"({'; '.join(f'{g}: {_peer_text(peers[g])}' for g in off)}) while the other "
                f"{len(on)} GPUs are {rest} to each other: "
                f"{'its' if len(off) == 1 else 'their'} traffic, and every collective that includes "
                f"{'it' if len(off) == 1 else 'them'}, runs over PCIe and the CPU interconnect.",
                hint,
                kind="links",
                row_ref=f"line {first_line.get(off[0], min(first_line.values()))}",
                measured=0.0,
                expected=float(round(statistics.median(_share(peers[g], on) for g in on) * (len(gpus) - 1))),
            )
        )
    if len(on) < 3:
        return flags
    inner = {g: {p: k for p, k in peers[g].items() if p in on} for g in on}
    share = {g: _share(inner[g], on) for g in on if inner[g]}
    per_peer = {g: _links_per_peer(inner[g]) for g in on}
    typical_share = statistics.median(share.values())
    counted = [v for v in per_peer.values() if v is not None]
    typical_count = statistics.median(counted) if counted else None
    short = [g for g in on if typical_count is not None and (per_peer[g] or typical_count) < typical_count]
    for gpu in sorted(share, key=lambda g: share[g]):  # the GPU missing the most pairs first
        # a pair without a fabric link to a GPU already named is that GPU's doing (when
        # GPU3 misses GPU6 and GPU7: GPU6 and GPU7 then miss nothing of their own)
        unexplained = {p: k for p, k in inner[gpu].items() if p not in short or FABRIC_RX.match(k[0])}
        if gpu not in short and _share(unexplained, on) < typical_share:
            short.append(gpu)
    short.sort(key=device_order)
    if short and len(short) * 2 < len(on):
        others = {p: k for p, k in pairs.items() if p <= set(on) - set(short)}
        flags.append(
            bench_flag(
                RULE,
                "warning",
                bench_id,
                f"{_names(short)}{where} {'has' if len(short) == 1 else 'have'} fewer {links} than "
                f"{'its' if len(short) == 1 else 'their'} peers "
                f"({'; '.join(f'{g}: {_peer_text(inner[g])}' for g in short)}) while the other "
                f"{len(on) - len(short)} GPUs are {_links_text(others)} to each other: collectives "
                f"that include {'it' if len(short) == 1 else 'them'} run at "
                f"{'its' if len(short) == 1 else 'their'} links' speed.",
                hint,
                kind="links",
                row_ref=f"line {first_line.get(short[0], min(first_line.values()))}",
                **_shortfall(short[0], share, typical_share, per_peer, typical_count, len(inner[short[0]])),
            )
        )
    return flags


def _share(links: dict[str, tuple[str, int | None]], among: list[str]) -> float:
    """The share of a GPU's printed peers in `among` it has a fabric link to."""
    printed = [kind for peer, (kind, _) in links.items() if peer in among]
    return sum(1 for kind in printed if FABRIC_RX.match(kind)) / len(printed) if printed else 0.0


def _shortfall(
    gpu: str,
    share: dict[str, float],
    typical_share: float,
    per_peer: dict[str, float | None],
    typical_count: float | None,
    printed: int,
) -> dict[str, float]:
    """measured and expected of a warning, for its first GPU: its fabric peers against the median GPU's
    share of its printed peers, or else its NVLinks per fabric peer against the median GPU's."""
    if share.get(gpu, 1.0) < typical_share:
        return {"measured": round(share[gpu] * printed, 3), "expected": round(typical_share * printed, 3)}
    return {"measured": round(per_peer[gpu] or 0.0, 3), "expected": round(typical_count or 0.0, 3)}


def _links_per_peer(links: dict[str, tuple[str, int | None]]) -> float | None:
    """The mean NVLink count over a GPU's NVLink peers (None for xGMI, which prints no count)."""
    counts = [count for kind, count in links.values() if FABRIC_RX.match(kind) and count is not None]
    return sum(counts) / len(counts) if counts else None


def _peer_text(links: dict[str, tuple[str, int | None]]) -> str:
    """`NODE to GPU0, GPU1, GPU3; SYS to GPU4, GPU5, GPU6, GPU7`: a GPU's links, grouped by kind."""
    by_kind: dict[str, list[str]] = defaultdict(list)
    for peer in sorted(links, key=device_order):
        by_kind[links[peer][0]].append(peer)
    return "; ".join(f"{kind} to {', '.join(peers)}" for kind, peers in by_kind.items())


def _links_text(pairs: dict[frozenset[str], tuple[str, int | None]]) -> str:
    """The kinds of link among a set of GPUs, most common first: `NV18`, or `NV18 (2 pairs SYS)`."""
    kinds: dict[str, int] = defaultdict(int)
    for kind, _ in pairs.values():
        kinds[kind] += 1
    ranked = sorted(kinds.items(), key=lambda item: -item[1])
    if not ranked:
        return "linked"
    head, *rest = ranked
    return head[0] + (f" ({', '.join(f'{n} pair(s) {k}' for k, n in rest)})" if rest else "")


def _names(gpus: list[str]) -> str:
    return ", ".join(gpus)
