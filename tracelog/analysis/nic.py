"""The model of a perftest bandwidth bench: the line rate of the one NIC it measured, the plateau that rate
allows (`model.nic`), and the bench's large-message bandwidth beside it.

Which NIC: the bench's fabric (`--fabric`, a cluster profile, a bench of the same hosts): a port entry
(`ib-ndr`, `roce-200g`) is the NIC itself; a node entry (`ib-ndr-x8`, `roce-400g-x8`) is its `links`
ports together, so one NIC is its figure over their count. A bench whose fabric nobody named is taken at
the link type it printed: InfiniBand as NDR (`ib-ndr`, ConnectX-7, the NIC of the H100 and B200
reference systems) and Ethernet as 400 GbE RoCE, an assumption its prediction's detail states and its
flag's severity (info) carries.

Rows (subject_kind 'bench'): predictions `nic_line_rate_gbps` (the line rate of the directions measured)
and `nic_plateau_gbps` (times the wire efficiency), and the comparison `nic_plateau_gbps`: the bench's
best `BW average` from 64 KiB on (its main table: a bidirectional run's sum, not its --report-both
sides) over the plateau. All in GB/s (10^9 bytes/s).
"""

from __future__ import annotations

import json
from typing import Any

from tracelog import hardware
from tracelog.analysis.scope import Scope
from tracelog.errors import TracelogError
from tracelog.hardware import Link
from tracelog.model.nic import PLATEAU_FROM_BYTES, nic_plateau
from tracelog.store import Store

ASSUMED_BY_LINK_TYPE = {"ib": "ib-ndr", "ethernet": "roce-400g"}
NIC_KINDS = ("infiniband", "roce", "ethernet", "efa", "omnipath", "slingshot")

BENCHES_SQL = """
WITH facts AS (
    SELECT bench_id,
           any_value(value) FILTER (name = 'Link type') AS link_type,
           try_cast(regexp_extract(any_value(value) FILTER (name = 'Mtu'), '^(\\d+)', 1) AS INTEGER) AS mtu,
           any_value(value) FILTER (name = 'bidirectional') AS bidirectional,
           any_value(value) FILTER (name = 'Device') AS device
    FROM bench_params WHERE {scope} GROUP BY bench_id
), best AS (
    SELECT bench_id, max(bw_avg_gbps) AS plateau, arg_max(size_bytes, bw_avg_gbps) AS at_size,
           arg_max(line_no, bw_avg_gbps) AS at_line
    FROM perftest WHERE {scope} AND report IS NULL AND size_bytes >= {plateau_from} AND bw_avg_gbps > 0
    GROUP BY bench_id
)
SELECT b.bench_id, b.collective, b.fabric, f.link_type, f.mtu, f.bidirectional = 'yes' AS bidirectional,
       f.device, s.plateau, s.at_size, s.at_line
FROM benches b JOIN facts f USING (bench_id) LEFT JOIN best s USING (bench_id)
WHERE b.tool = 'perftest' AND f.bidirectional IS NOT NULL
ORDER BY b.bench_id
"""


def nic_of(fabric: str | None, link_type: str | None) -> tuple[Link, float, str, bool] | None:
    """The NIC's catalog link, its line rate in GB/s (one direction), how it was found and whether it was
    assumed; None where neither the fabric nor the link type names a network."""
    if fabric:
        try:
            link = hardware.link(fabric)
        except TracelogError:
            link = None
        if link is not None and link.kind in NIC_KINDS:
            ports = link.links if link.scope == "node" and link.links else 1
            how = f"{link.id}" + (f", one of its {ports} NICs" if ports > 1 else "")
            return link, link.unidirectional_gbps / ports, how, False
    assumed = ASSUMED_BY_LINK_TYPE.get((link_type or "").strip().lower())
    if assumed is None:
        return None
    link = hardware.link(assumed)
    how = (
        f"{assumed}, assumed from `Link type : {link_type}` (no fabric named: --fabric or a cluster profile)"
    )
    return link, link.unidirectional_gbps, how, True


def predict(store: Store, scope: Scope) -> dict[str, list[dict[str, Any]]]:
    """Predictions and comparisons of the perftest bandwidth benches in scope (module docstring)."""
    predictions: list[dict[str, Any]] = []
    comparisons: list[dict[str, Any]] = []
    sql = BENCHES_SQL.format(scope=scope.benches, plateau_from=PLATEAU_FROM_BYTES)
    for (
        bench_id,
        test,
        fabric,
        link_type,
        mtu,
        bidirectional,
        device,
        measured,
        at_size,
        at_line,
    ) in store.con.execute(sql).fetchall():
        found = nic_of(fabric, link_type)
        if found is None:
            continue
        link, line_gbps, how, assumed = found
        model = nic_plateau(line_gbps, mtu, link_type, bool(bidirectional))
        subject = {"subject_kind": "bench", "subject_id": int(bench_id)}
        detail = {
            "link": link.id,
            "nic": how,
            "line_rate_one_direction_gbps": line_gbps,
            "directions": model.directions,
            "mtu_bytes": model.mtu_bytes,
            "mtu_assumed": mtu is None,
            "header_bytes": model.header_bytes,
            "wire_efficiency": round(model.wire_efficiency, 5),
            "assumed": assumed,
            "source": link.source,
            "device": device,
            "test": test,
        }
        both = " x 2 (both directions summed)" if bidirectional else ""
        predictions.append(
            {
                **subject,
                "metric": "nic_line_rate_gbps",
                "value": model.allowed_gbps,
                "unit": "GB/s",
                "formula": f"{link.id} line rate{both}",
                "detail": json.dumps(detail),
            }
        )
        formula = f"line rate{both} x MTU/(MTU + {model.header_bytes} B headers)"
        predictions.append(
            {
                **subject,
                "metric": "nic_plateau_gbps",
                "value": model.plateau_gbps,
                "unit": "GB/s",
                "formula": formula,
                "detail": json.dumps(detail | {"measured_at_size": at_size, "measured_at_line": at_line}),
            }
        )
        if measured is not None:
            comparisons.append(
                {
                    **subject,
                    "metric": "nic_plateau_gbps",
                    "measured": float(measured),
                    "predicted": model.plateau_gbps,
                    "ratio": float(measured) / model.plateau_gbps,
                    "unit": "GB/s",
                }
            )
    return {"predictions": predictions, "comparisons": comparisons}
