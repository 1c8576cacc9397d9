"""A NIC whose perftest bandwidth stays under what its link allows.

The comparison `nic_plateau_gbps` (analysis/nic.py) holds a perftest bandwidth bench's best `BW average`
from 64 KiB on against its port's line rate times the wire efficiency at the MTU it ran (model/nic.py),
twice that for a bidirectional run, whose figure is both directions summed. Under `nic_bandwidth` (90 %)
of it the NIC does not carry what it should: a warning where the fabric was named, information where its
speed was assumed from the printed link type.
"""

from __future__ import annotations

import json

from tracelog.analysis.rules import Flag, bench_flag
from tracelog.analysis.scope import Scope
from tracelog.store import Store
from tracelog.thresholds import Thresholds

RULE = "nic_bandwidth"
HINT = (
    "Usual causes: the NIC's PCIe link (a Gen4 x16 slot carries about 26 GB/s, half an NDR port's 50; "
    "`lspci -vv` LnkSta against LnkCap), a port trained down in speed or width (`ibstat`, `mlxlink -d <dev>`), "
    "the test pinned to the wrong NUMA node or a GPU buffer behind another PCIe switch (`numactl -N`, "
    "`nvidia-smi topo -m`), or too little in flight (one QP: rerun with -q 4; ib_read_bw: -o). Rerun with "
    "--report_gbits -a to see the curve."
)


def bytes_text(n: int) -> str:
    """A perftest message size as it is chosen: a power of two (`1 MiB`, `64 KiB`, `2 B`)."""
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def nic_bandwidth(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    rows = store.con.execute(
        f"""
        SELECT c.subject_id, c.measured, c.predicted, c.ratio, p.detail
        FROM comparisons c
        JOIN predictions p ON p.subject_kind = 'bench' AND p.subject_id = c.subject_id AND p.metric = c.metric
        WHERE c.subject_kind = 'bench' AND c.metric = 'nic_plateau_gbps' AND c.ratio < ?
          AND {scope.benches.replace("bench_id", "c.subject_id")}
        ORDER BY c.subject_id
        """,
        [t.nic_bandwidth],
    ).fetchall()
    flags = []
    for bench_id, measured, plateau, ratio, detail_text in rows:
        d = json.loads(detail_text)
        line = d["line_rate_one_direction_gbps"]
        rate = (
            f"both directions summed: 2 x {line:g} GB/s ({2 * line * 8:g} Gb/s)"
            if d["directions"] == 2
            else f"one direction: {line:g} GB/s ({line * 8:g} Gb/s)"
        )
        where = " on " + d["device"] if d.get("device") else ""
        message = (
            f"{d.get('test') or 'perftest'}{where}: {measured:.1f} GB/s ({measured * 8:.0f} Gb/s) at "
            f"{bytes_text(d['measured_at_size'])}, {ratio:.0%} of the {plateau:.1f} GB/s its NIC allows ({rate} of "
            f"{d['nic']}, times {d['wire_efficiency']:.1%} for {d['header_bytes']} B of headers per {d['mtu_bytes']} B "
            "packet)."
        )
        if d["assumed"]:
            message += " The NIC's speed was assumed: name the fabric (--fabric) to hold it to its own."
        flags.append(
            bench_flag(
                RULE,
                "info" if d["assumed"] else "warning",
                bench_id,
                message,
                HINT,
                row_ref=f"line {d['measured_at_line']}",
                measured=float(measured),
                expected=float(plateau),
                ratio=float(ratio),
            )
        )
    return flags
