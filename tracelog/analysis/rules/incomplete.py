"""A bench the tool did not finish, or whose output was cut: what is missing, in the tool's own terms
(an nccl-tests sweep that stops early, all_reduce_bench trials, p2pBandwidthLatencyTest matrices, a
topology matrix's rows)."""

from __future__ import annotations

from typing import Any

from tracelog.analysis.rules import Flag, bench_flag
from tracelog.analysis.scope import Scope
from tracelog.store import Store
from tracelog.store.benches import P2P_MATRICES, device_order
from tracelog.thresholds import Thresholds

INCOMPLETE_SQL = """
WITH inc AS (
    SELECT bench_id, tool, status, line_end, ranks FROM benches
    WHERE {scope} AND status IN ('partial', 'failed')
), sweep AS (
    SELECT bench_id, count(*) AS rows, count(DISTINCT size_bytes) AS sizes, max(size_bytes) AS last_size
    FROM collectives
    WHERE bench_id IN (SELECT bench_id FROM inc) GROUP BY bench_id
), params AS (
    SELECT bench_id,
           min(try_cast(value AS BIGINT)) FILTER (name IN ('maxBytes', 'maxBytes reduced to')) AS max_bytes,
           any_value(value) FILTER (name = 'trials') AS trials
    FROM bench_params WHERE bench_id IN (SELECT bench_id FROM inc) GROUP BY bench_id
), matrices AS (
    SELECT p.bench_id, p.matrix, min(p.line_no) AS first_line, count(DISTINCT p.src) AS rows,
           any_value(i.ranks) AS ranks
    FROM p2p p JOIN inc i USING (bench_id) WHERE p.matrix <> 'access_peer' GROUP BY ALL
), printed AS (
    SELECT bench_id, list(matrix ORDER BY first_line) AS printed,
           list(matrix ORDER BY first_line) FILTER (rows < ranks) AS short
    FROM matrices GROUP BY bench_id
), perf AS (
    SELECT bench_id, count(*) AS perf_rows FROM perftest WHERE bench_id IN (SELECT bench_id FROM inc) GROUP BY bench_id
), topo AS (
    SELECT bench_id, count(DISTINCT b) AS devices,
           list(DISTINCT b) FILTER (b NOT IN (SELECT a FROM links r WHERE r.bench_id = l.bench_id)) AS no_row
    FROM links l WHERE bench_id IN (SELECT bench_id FROM inc) GROUP BY bench_id
)
SELECT i.bench_id, i.tool, i.status, i.line_end, i.ranks, coalesce(s.rows, 0) AS rows, s.sizes, s.last_size,
       p.max_bytes, p.trials, m.printed, m.short, t.devices, t.no_row, coalesce(f.perf_rows, 0) AS perf_rows
FROM inc i LEFT JOIN sweep s USING (bench_id) LEFT JOIN params p USING (bench_id) LEFT JOIN perf f USING (bench_id)
LEFT JOIN printed m USING (bench_id) LEFT JOIN topo t USING (bench_id)
ORDER BY i.bench_id
"""


def _sweep_gap(d: dict[str, Any]) -> tuple[str, str]:
    """nccl-tests: how far the sweep from minBytes to maxBytes got (its `maxBytes` header field, or the
    `Reducing maxBytes` note when memory was short)."""
    if not d["rows"]:
        return (
            "no row of its table was printed.",
            "Look at its events (NCCL WARN, Cuda failure, a killed rank) and rerun it.",
        )
    last, top, sizes = d["last_size"], d["max_bytes"], f"{d['sizes']} size(s)"
    hint = "Look at the events of this bench (NCCL WARN, timeouts, a killed rank) and rerun it."
    if top and last >= top:
        return (
            f"the sweep reached maxBytes ({top} bytes, {sizes}) but the test never printed its footer "
            "(# Avg bus bandwidth); the rows are whole, the end of the test is not.",
            hint,
        )
    stop = f"the sweep stopped at {last} bytes ({sizes}), before " + (
        f"maxBytes {top}" if top else "the test's footer"
    )
    return f"{stop}; its large-message figures are missing, so it is not a complete sweep.", hint


def _trials_gap(d: dict[str, Any]) -> tuple[str, str]:
    """all_reduce_bench: one payload, several trials per rank (or rank 0's summary of them)."""
    hint = "Look at the events of this bench (NCCL WARN, a traceback, a killed rank) and rerun the script."
    if d["trials"] is not None:
        lacks = "algbw" if d["rows"] else "busbw"
        return f"its summary over {d['trials']} trials lacks its {lacks} line.", hint
    if not d["rows"]:
        return "no rank printed a result.", hint
    return (
        f"its ranks did not all print the same number of results ({d['rows']} in all from "
        f"{d['ranks'] or '?'} rank(s)): a rank stopped before its last trial.",
        hint,
    )


def _matrices_gap(d: dict[str, Any]) -> tuple[str, str]:
    """p2pBandwidthLatencyTest: which of the matrices of a full output were printed."""
    printed = [m for m in d["printed"] or [] if m in P2P_MATRICES]
    missing = [m for m in P2P_MATRICES if m not in printed]
    parts = [f"{len(printed)} of the {len(P2P_MATRICES)} matrices of a full output printed"]
    if printed:
        parts[0] += f" ({', '.join(printed)})"
    if missing:
        parts.append(f"missing: {', '.join(missing)}")
    if d["short"]:
        parts.append(f"fewer than {d['ranks']} rows in: {', '.join(d['short'])}")
    return (
        "; ".join(parts) + ". The matrices printed are used as they are.",
        "An excerpt (as published) says nothing against the machine: ingest the full output for every "
        "matrix. A run cut short: look at its events (Cuda failure) and rerun p2pBandwidthLatencyTest.",
    )


def _missing_rows(d: dict[str, Any], rows: str, devices: str) -> str | None:
    """`rows missing for GPU4, GPU5 of the 8 devices its header names`, or None when every one has its row."""
    missing = sorted(d["no_row"] or [], key=device_order)
    return (
        f"{rows} missing for {', '.join(missing)} of the {d['devices']} {devices} its header names"
        if missing
        else None
    )


def _rows_gap(d: dict[str, Any]) -> tuple[str, str]:
    """nvidia-smi topo -m: the devices of the header row without a row of their own."""
    what = _missing_rows(d, "rows", "devices") or "no row of its matrix was printed"
    return (
        f"{what}; the links from those devices are unknown.",
        "Rerun nvidia-smi topo -m and keep the whole matrix (a pager or a cut paste drops rows).",
    )


def _rocm_rows_gap(d: dict[str, Any]) -> tuple[str, str]:
    """rocm-smi --showtopo: GPUs of the link-type matrix without a row, or an output cut before its end."""
    what = _missing_rows(d, "link-type rows", "GPUs") or (
        "the output stops before rocm-smi's `End of ROCm SMI Log`"
        if d["devices"]
        else "no link-type matrix was printed"
    )
    return (
        f"{what}; what was not printed is unknown.",
        "Rerun rocm-smi --showtopo and keep the whole output (a pager or a cut paste drops sections).",
    )


def _perftest_gap(d: dict[str, Any]) -> tuple[str, str]:
    """perftest: a run that printed no result (it never connected, or died), or a table cut short."""
    if not d["perf_rows"]:
        what = (
            "it printed no result: it stopped before its test ran (its events say why: `Couldn't connect to` "
            "is a server not listening on that port or host)."
            if d["status"] == "failed"
            else "the output stops before its result table."
        )
        return what, (
            "Start the server side first (same -d, -p and options, no host name), check that the client reaches "
            "it (the TCP port, -p, and a firewall), and rerun."
        )
    return (
        f"its result table stops after {d['perf_rows']} row(s): the sizes after them were not measured.",
        "Look at its events (Completion with error, a killed process) and rerun it.",
    )


INCOMPLETE_DETAIL = {
    "perftest": _perftest_gap,
    "nccl-tests": _sweep_gap,
    "rccl-tests": _sweep_gap,
    "all_reduce_bench": _trials_gap,
    "p2pBandwidthLatencyTest": _matrices_gap,
    "nvidia-smi-topo": _rows_gap,
    "rocm-smi-topo": _rocm_rows_gap,
}


def incomplete(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    """A partial (warning) or failed (critical) bench, with what is missing in the terms of its tool."""
    cursor = store.con.execute(INCOMPLETE_SQL.format(scope=scope.benches))
    names = [c[0] for c in cursor.description]
    flags = []
    for row in cursor.fetchall():
        d = dict(zip(names, row, strict=True))
        detail = INCOMPLETE_DETAIL.get(d["tool"])
        message, hint = (
            detail(d)
            if detail
            else (
                "its output stops early; figures from it are not complete.",
                "Look at its events and rerun it.",
            )
        )
        flags.append(
            bench_flag(
                "bench_incomplete",
                "warning" if d["status"] == "partial" else "critical",
                d["bench_id"],
                f"{d['tool']} {d['status']}: {message}",
                hint,
                row_ref=f"line {d['line_end']}",
            )
        )
    return flags
