"""GPUs that may not reach each other directly: what `nvidia-smi topo -p2p` says of each pair.

The driver's peer-to-peer support matrix (`topo -p2p r|w|rw|n|a|p`, read by the topo parser as bench
params `GPU0 GPU3 p2p rw` = `CNS`) names the pairs whose copies cannot go GPU to GPU: `CNS` the chipset,
`GNS` the GPU, `TNS` the topology, `NS` otherwise not supported, `DR` turned off by the driver's registry key
(a setting, not the hardware). Between those, CUDA's peer copies and
NCCL's P2P transport are unavailable, and traffic is staged through host memory: p2pBandwidthLatencyTest's
`P2P=Enabled` matrix then shows the same figures as its `P2P=Disabled` one, and a bandwidth held against
the link's spec looks low for a reason the link does not have. Info, not a warning: on many PCIe machines
(consumer GPUs, some server chipsets) it is how the machine is built.
"""

from __future__ import annotations

from tracelog.analysis.rules import Flag, bench_flag
from tracelog.analysis.scope import Scope
from tracelog.store import Store
from tracelog.thresholds import Thresholds

RULE = "p2p_unsupported"
MEANING = {
    "NS": "not supported",
    "CNS": "chipset not supported",
    "GNS": "GPU not supported",
    "TNS": "topology not supported",
    "DR": "disabled by regkey",
}
HINT = (
    "Peer access depends on the chipset, the BIOS (PCIe ACS and the IOMMU send peer traffic through the root "
    "complex) and the driver. Between these GPUs, expect host-staged bandwidth: compare p2pBandwidthLatencyTest's "
    "P2P=Disabled matrix, and check NCCL_DEBUG=INFO for the transport NCCL picks (P2P or SHM)."
)


def unsupported(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    unsupported_cell = f"value IN ({', '.join(repr(v) for v in MEANING)})"
    rows = store.con.execute(
        f"""
        SELECT bench_id, count(*), min(line_no) FILTER ({unsupported_cell}),
               list(name ORDER BY line_no) FILTER ({unsupported_cell}),
               list(value ORDER BY line_no) FILTER ({unsupported_cell})
        FROM bench_params
        WHERE {scope.benches} AND contains(name, ' p2p ')
        GROUP BY bench_id HAVING count(*) FILTER ({unsupported_cell}) > 0 ORDER BY bench_id
        """
    ).fetchall()
    flags = []
    for bench_id, cells, first_line, names, values in rows:
        pairs: dict[tuple[str, str], str] = {}
        mode = names[0].split(" p2p ", 1)[1]
        for name, value in zip(names, values, strict=True):
            a, b = name.split(" p2p ", 1)[0].split(" ", 1)
            pairs.setdefault((min(a, b), max(a, b)), value)
        statuses = sorted(set(pairs.values()))
        listed = ", ".join(f"{a}-{b}" for a, b in sorted(pairs)[:8]) + (" ..." if len(pairs) > 8 else "")
        flags.append(
            bench_flag(
                RULE,
                "info",
                bench_id,
                f"nvidia-smi topo -p2p {mode}: {len(pairs)} of {cells // 2} GPU pairs have no "
                f"peer access ({'; '.join(f'{s}: {MEANING[s]}' for s in statuses)}): {listed}.",
                HINT,
                row_ref=f"line {first_line}",
                measured=float(len(pairs)),
                expected=0.0,
            )
        )
    return flags
