"""Fabric flags: data errors (`corruption`), incomplete benches, latency-bound sizes, bandwidth against the
link's specification (with the duplex confusion spelled out), and p2p pairs far from their peers.

busbw (nccl-tests doc/PERFORMANCE.md) and p2p unidirectional bandwidth are one direction, so the spec
they are held against is the link's unidirectional figure; p2p bidirectional values (both directions
summed) are held against the bidirectional one.
"""

from __future__ import annotations

from typing import Any

from tracelog.analysis.rules import Flag, bench_flag, size_text
from tracelog.analysis.rules.corruption import copy_errors, data_errors
from tracelog.analysis.rules.incomplete import incomplete
from tracelog.analysis.scope import Scope
from tracelog.hardware import bench_link
from tracelog.store import Store
from tracelog.thresholds import Thresholds

PLATEAU_SHARE = 0.8
"""Sizes within this share of a sweep's peak busbw are on its plateau; `latency_bound` and the spec check
need two."""
LINK_HINT = (
    "Check that NVLink/NVSwitch or the NICs are used (NCCL_DEBUG=INFO shows the transport), that "
    "NCCL_P2P_DISABLE/NCCL_IB_DISABLE are unset, the PCIe topology (nvidia-smi topo -m) and GPU clocks."
)
LINK_HINT_AMD = (
    "Check that the Infinity Fabric (xGMI) links or the NICs are used (NCCL_DEBUG=INFO shows RCCL's transport), "
    "that NCCL_P2P_DISABLE/NCCL_IB_DISABLE are unset, the links (rocm-smi --showtopo) and GPU clocks."
)


NAMED = """coalesce(b.collective, (SELECT any_value(replace(p.value, ', ', ' or ')) FROM bench_params p
    WHERE p.bench_id = b.bench_id AND p.name = 'collective_candidates'), 'the')"""
"""A bench's collective as a message names it: its own, else the ones its busbw factor and columns allow."""


def latency_bound(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    rows = store.con.execute(
        f"""
        WITH oop AS (
            SELECT bench_id, size_bytes, busbw_gbps FROM collectives
            WHERE {scope.benches} AND placement = 'out-of-place' AND busbw_gbps IS NOT NULL
        ), plateau AS (SELECT bench_id, max(busbw_gbps) AS peak FROM oop GROUP BY bench_id),
        half AS (
            SELECT o.bench_id, min(o.size_bytes) FILTER (o.busbw_gbps >= ? * p.peak) AS half_at, any_value(p.peak) AS peak
            FROM oop o JOIN plateau p USING (bench_id) WHERE p.peak > 0 GROUP BY o.bench_id
            -- a plateau is where the curve flattens: a sweep cut short (a failed bench, a small -e) whose
            -- peak is its last size, far above the one before, has none to hold its sizes to
            HAVING count(*) FILTER (o.busbw_gbps >= ? * p.peak) >= 2
        )
        -- the small messages below the first size that reaches the share: a size past it that dips
        -- under (a noisy or congested point) is not latency-bound
        SELECT o.bench_id, max(o.size_bytes) FILTER (o.busbw_gbps < ? * h.peak AND o.size_bytes < h.half_at),
               any_value(h.half_at), any_value(h.peak)
        FROM oop o JOIN half h USING (bench_id) GROUP BY o.bench_id
        """,
        [t.latency_bound, PLATEAU_SHARE, t.latency_bound],
    ).fetchall()
    flags = []
    for bench_id, bound_up_to, half_at, peak in rows:
        if bound_up_to is None:
            continue
        flags.append(
            bench_flag(
                "latency_bound",
                "info",
                bench_id,
                f"Messages up to {size_text(bound_up_to)} reach less than {t.latency_bound:.0%} of the {peak:.1f} GB/s "
                f"plateau: they are latency-bound"
                + (f"; half the plateau is reached from {size_text(half_at)}." if half_at else "."),
                "Keep the collectives a job issues above that size: larger gradient buckets (DDP bucket_cap_mb, "
                "DeepSpeed reduce_bucket_size) or fewer, fused all-reduces.",
                measured=float(bound_up_to),
                expected=float(half_at) if half_at else None,
            )
        )
    return flags


COLLAPSE_FROM = 1 << 20
"""Sizes from 1 MiB on are past the latency-bound start of a sweep, where each size carries at least the
bandwidth a smaller one did; below it a latency blip can halve a tiny busbw."""


def collapse(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    """Sizes whose busbw falls under `bandwidth_collapse` of what a smaller size of the same sweep reached:
    a healthy curve only rises towards its plateau, so such a fall is the path, not the message size (an
    algorithm or protocol NCCL switched to at that size, a route through a slower link, congestion). Each
    placement is a sweep of its own (an in-place run can fall where the out-of-place one held): one flag
    per bench and placement, naming it."""
    rows = store.con.execute(
        f"""
        WITH sweep AS (
            SELECT bench_id, placement, size_bytes, busbw_gbps, line_no,
                   max(busbw_gbps) OVER before AS best_before, arg_max(size_bytes, busbw_gbps) OVER before AS best_at
            FROM collectives
            WHERE {scope.benches} AND busbw_gbps IS NOT NULL
            WINDOW before AS (PARTITION BY bench_id, placement ORDER BY size_bytes
                              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
        )
        SELECT bench_id, placement, count(*), min(size_bytes), max(size_bytes), arg_min(busbw_gbps, size_bytes),
               arg_min(best_before, size_bytes), arg_min(best_at, size_bytes), min(busbw_gbps),
               arg_min(line_no, size_bytes)
        FROM sweep WHERE size_bytes >= {COLLAPSE_FROM} AND busbw_gbps < ? * best_before
        GROUP BY bench_id, placement
        -- out-of-place first, as nccl-tests prints its columns
        ORDER BY bench_id, placement = 'in-place'
        """,
        [t.bandwidth_collapse],
    ).fetchall()
    return [
        bench_flag(
            "bandwidth_collapse",
            "warning",
            bench_id,
            f"{placement} busbw falls from {best:g} GB/s at {size_text(best_at)} to {first:g} GB/s at "
            f"{size_text(start)}: {count} size(s) from {size_text(start)} to {size_text(end)} reach under "
            f"{t.bandwidth_collapse:.0%} of what a smaller message reached (the lowest {lowest:g} GB/s).",
            "Bandwidth does not fall as messages grow on a healthy path: at that size NCCL switched algorithm, "
            "protocol or route, or the fabric congested. Rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING "
            "to see what it chose there, pin NCCL_ALGO/NCCL_PROTO to compare, and check the links it crosses.",
            row_ref=f"line {line}, {placement}",
            measured=float(first),
            expected=float(best),
            ratio=float(first) / float(best),
        )
        for bench_id, placement, count, start, end, first, best, best_at, lowest, line in rows
    ]


def against_spec(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    rows = store.con.execute(
        f"""
        WITH peaks AS (
            SELECT b.bench_id, {NAMED} AS collective, b.gpu_name, b.gpu_model, b.nodes, b.ranks, b.gpus_per_node,
                   max(c.busbw_gbps) AS peak, arg_max(c.size_bytes, c.busbw_gbps) AS at_size,
                   arg_max(c.line_no, c.busbw_gbps) AS at_line
            FROM benches b JOIN collectives c USING (bench_id)
            WHERE {scope.benches.replace("bench_id", "b.bench_id")} AND c.busbw_gbps IS NOT NULL
            GROUP BY ALL
        )
        -- sizes near the peak: a sweep cut before its curve flattens (one row, or the peak at its last size
        -- far above the one before) holds no plateau to hold to a spec
        SELECT p.*, (SELECT count(DISTINCT c.size_bytes) FROM collectives c
                     WHERE c.bench_id = p.bench_id AND c.busbw_gbps >= ? * p.peak) AS near_peak
        FROM peaks p
        """,
        [PLATEAU_SHARE],
    ).fetchall()
    flags = []
    for bench_id, collective, gpu_name, gpu_model, nodes, ranks, gpn, peak, at_size, line, near in rows:
        link = bench_link(gpu_model, gpu_name, nodes, ranks, gpn)
        if link is None or not peak:
            continue
        uni, bi = link.unidirectional_gbps, link.bidirectional_gbps
        share = peak / uni
        common: dict[str, Any] = dict(row_ref=f"line {line}", measured=float(peak))
        if share < t.low_bandwidth and near < 2:
            flags.append(
                bench_flag(
                    "low_bandwidth",
                    "info",
                    bench_id,
                    f"{collective} busbw peaks at {peak:.1f} GB/s ({size_text(at_size)}), {share:.0%} of the {link.name} "
                    f"unidirectional {uni:g} GB/s, but the sweep stops before its curve flattens: not held to the "
                    "spec.",
                    "Run the sweep up to large messages (nccl-tests -e 8G) to see the plateau.",
                    expected=float(uni),
                    ratio=share,
                    **common,
                )
            )
        elif share < t.low_bandwidth:
            flags.append(
                bench_flag(
                    "low_bandwidth",
                    "warning",
                    bench_id,
                    f"{collective} busbw peaks at {peak:.1f} GB/s ({size_text(at_size)}): {share:.0%} of the "
                    f"{link.name} unidirectional {uni:g} GB/s.",
                    LINK_HINT_AMD if link.id.startswith("xgmi") or "Infinity" in link.name else LINK_HINT,
                    expected=float(uni),
                    ratio=share,
                    **common,
                )
            )
        if bi and t.duplex_band_low <= peak / bi <= t.duplex_band_high and share >= t.low_bandwidth:
            flags.append(
                bench_flag(
                    "duplex_confusion",
                    "info",
                    bench_id,
                    f"{peak:.1f} GB/s looks like {peak / bi:.0%} of the {link.name} figure of {bi:g} GB/s, but that "
                    f"figure is bidirectional; busbw is one direction: {share:.0%} of the {uni:g} GB/s unidirectional "
                    "spec, which is healthy.",
                    "Compare nccl-tests busbw and p2p unidirectional bandwidth with the unidirectional spec.",
                    expected=float(uni),
                    ratio=share,
                    **common,
                )
            )
    return flags


def p2p_outliers(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    rows = store.con.execute(
        f"""
        WITH m AS (
            SELECT bench_id, matrix, src, dst, value, line_no,
                   median(value) OVER (PARTITION BY bench_id, matrix) AS typical
            FROM p2p WHERE {scope.benches} AND src <> dst AND unit = 'GB/s' AND value IS NOT NULL
              -- GPU pairs only: nvbandwidth's host and aggregate tests (a row for the CPU or all peers,
              -- some under deliberate interfering traffic) are no pair of links
              AND starts_with(matrix, 'bandwidth_')
        )
        SELECT bench_id, matrix, list(src || '→' || dst ORDER BY value), min(value), any_value(typical),
               min(line_no), count(*)
        FROM m WHERE value < ? * typical GROUP BY bench_id, matrix
        """,
        [t.p2p_outlier],
    ).fetchall()
    flags = []
    for bench_id, matrix, pairs, low, typical, line, count in rows:
        rule = "p2p_disabled" if "p2p_on" in matrix and low < 0.3 * typical else "asymmetric_link"
        flags.append(
            bench_flag(
                rule,
                "warning",
                bench_id,
                f"{count} GPU pair(s) in {matrix} below {t.p2p_outlier:.0%} of the median {typical:.1f} GB/s: "
                f"{', '.join(pairs[:8])}{' …' if len(pairs) > 8 else ''} (lowest {low:.1f} GB/s).",
                "A pair far below its peers crosses a slower path (PCIe/SMP instead of NVLink) or has P2P "
                "disabled: compare with nvidia-smi topo -m and nvidia-smi nvlink --status for those GPUs.",
                kind="p2p",
                row_ref=f"line {line}",
                measured=float(low),
                expected=float(typical),
                ratio=low / typical,
            )
        )
    no_gain = store.con.execute(
        f"""
        -- a pair once, and only when none of its matrices (unidirectional, bidirectional, reads) gains:
        -- a pair that gains in one direction only is not one whose traffic goes through host memory
        WITH latency AS (
            -- the GPU latency with P2P off and on: a direct path that answers far faster is in use
            SELECT bench_id, median(value) FILTER (matrix = 'latency_gpu_p2p_off') AS off_us,
                   median(value) FILTER (matrix = 'latency_gpu_p2p_on') AS on_us
            FROM p2p WHERE {scope.benches} AND src <> dst GROUP BY bench_id
        ), pairs AS (
            SELECT on_.bench_id, on_.src, on_.dst, min(on_.line_no) FILTER (on_.value <= 1.1 * off.value) AS line,
                   median(on_.value / off.value) FILTER (off.value > 0) AS share
            FROM p2p on_ JOIN p2p off ON on_.bench_id = off.bench_id AND on_.src = off.src AND on_.dst = off.dst
             AND off.matrix = replace(on_.matrix, 'p2p_on', 'p2p_off')
            WHERE {scope.benches.replace("bench_id", "on_.bench_id")} AND on_.matrix LIKE 'bandwidth_%p2p_on%'
              AND on_.src <> on_.dst
            GROUP BY ALL HAVING bool_and(on_.value <= 1.1 * off.value)
        )
        SELECT p.bench_id, count(*), min(p.line), any_value(l.off_us), any_value(l.on_us), median(p.share)
        FROM pairs p LEFT JOIN latency l USING (bench_id)
        GROUP BY p.bench_id
        """
    ).fetchall()
    for bench_id, count, line, off_us, on_us, share in no_gain:
        direct = off_us is not None and on_us is not None and on_us < 0.5 * off_us
        if share is not None and share < t.p2p_slower:
            flags.append(p2p_slower(bench_id, count, line, share))
            continue
        flags.append(
            bench_flag(
                "p2p_disabled",
                "warning",
                bench_id,
                f"{count} GPU pair(s) gain nothing from enabling P2P: "
                + (
                    f"P2P is on (GPU latency {off_us:.3g} → {on_us:.3g} µs), but the direct path moves data no faster "
                    "than through host memory: PCIe, not NVLink."
                    if direct
                    else "their traffic goes through host memory."
                ),
                "NVLink is not carrying these pairs: check nvidia-smi nvlink --status and nvidia-smi topo -m (a VM or "
                "container may expose PCIe only)."
                if direct
                else "Check that P2P is supported between those GPUs (CAN Access Peer lines), IOMMU/ACS settings on "
                "the PCIe switches, and that the driver exposes NVLink.",
                kind="p2p",
                row_ref=f"line {line}",
                measured=float(count),
                expected=0.0,
            )
        )
    return flags


def p2p_slower(bench_id: int, count: int, line: int | None, share: float) -> Flag:
    """Peer traffic slower than staged through host memory: the PCIe switches send peer TLPs up to the root
    complex (ACS P2P redirect, which an enabled IOMMU turns on), where they 'will perform poorly' (L.
    Gunthorpe, PCI p2pdma ACS patch, linux-block 2018-01-04); NVIDIA/nccl#814's 6 GPUs: 9.9 GB/s with P2P,
    22 without."""
    return bench_flag(
        "p2p_disabled",
        "warning",
        bench_id,
        f"{count} GPU pair(s) are slower with P2P enabled than through host memory (median {share:.0%} of "
        "it): peer traffic is taking a detour, not a direct path.",
        "PCIe ACS redirect on the switches (or an IOMMU that enables it) sends peer traffic up to the CPU's root "
        "complex: check `lspci -vvv | grep ACSCtl` for SrcValid+/ReqRedir+, boot with iommu=pt or disable ACS on "
        "the switches; meanwhile NCCL_P2P_DISABLE=1 (or NCCL_P2P_LEVEL) routes through host memory, the faster "
        "path here.",
        kind="p2p",
        row_ref=f"line {line}",
        measured=float(count),
        expected=0.0,
        ratio=share,
    )


def p2p_against_spec(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    rows = store.con.execute(
        f"""
        SELECT p.bench_id, b.gpu_model, b.gpu_name, p.matrix, median(p.value), min(p.line_no)
        FROM p2p p JOIN benches b USING (bench_id)
        WHERE {scope.benches.replace("bench_id", "p.bench_id")} AND p.src <> p.dst AND p.unit = 'GB/s'
          AND p.matrix LIKE 'bandwidth_%_p2p_on%'
        GROUP BY ALL
        """
    ).fetchall()
    flags = []
    for bench_id, gpu_model, gpu_name, matrix, typical, line in rows:
        link = bench_link(gpu_model, gpu_name, 1, None, None)
        if link is None or not typical:
            continue
        bidirectional = "_bi" in matrix
        spec = link.bidirectional_gbps if bidirectional else link.unidirectional_gbps
        if not spec:
            continue
        share = typical / spec
        common: dict[str, Any] = dict(
            kind="p2p", row_ref=f"line {line}", measured=float(typical), expected=float(spec), ratio=share
        )
        if share < t.low_bandwidth:
            flags.append(
                bench_flag(
                    "low_bandwidth",
                    "warning",
                    bench_id,
                    f"{matrix}: median pair {typical:.1f} GB/s is {share:.0%} of the {link.name} "
                    f"{'bidirectional' if bidirectional else 'unidirectional'} {spec:g} GB/s.",
                    "Check the link state (nvidia-smi nvlink --status), clocks and the topology.",
                    **common,
                )
            )
        elif (
            not bidirectional
            and link.bidirectional_gbps
            and (t.duplex_band_low <= typical / link.bidirectional_gbps <= t.duplex_band_high)
        ):
            flags.append(
                bench_flag(
                    "duplex_confusion",
                    "info",
                    bench_id,
                    f"{matrix}: {typical:.1f} GB/s is {share:.0%} of the {spec:g} GB/s unidirectional spec (healthy); "
                    f"against the {link.bidirectional_gbps:g} GB/s bidirectional figure it would look like "
                    f"{typical / link.bidirectional_gbps:.0%}.",
                    "Unidirectional matrices measure one direction: hold them against the unidirectional figure.",
                    **common,
                )
            )
    return flags


def across_nodes(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    """A bench across nodes against the busbw plateau the model predicts for it (the node's NICs, or the
    intra-node link if slower: `model.collectives.ring_busbw_bound`); one node is `against_spec`'s."""
    rows = store.con.execute(
        f"""
        WITH model AS (
            SELECT subject_id AS bench_id, value AS plateau, formula,
                   json_extract_string(detail, '$.link') AS link,
                   json_extract_string(detail, '$.fabric') AS fabric,
                   coalesce(json_extract(detail, '$.fabric_assumed')::BOOLEAN, false) AS assumed
            FROM predictions
            WHERE subject_kind = 'collective' AND metric = 'model_plateau_busbw_gbps' AND value > 0
              AND json_extract(detail, '$.nodes')::INTEGER > 1
        )
        SELECT b.bench_id, {NAMED} AS collective, m.plateau, m.link, m.fabric, m.assumed, max(c.busbw_gbps) AS peak,
               arg_max(c.size_bytes, c.busbw_gbps) AS at_size, arg_max(c.line_no, c.busbw_gbps) AS at_line
        FROM benches b JOIN model m USING (bench_id) JOIN collectives c USING (bench_id)
        WHERE {scope.benches.replace("bench_id", "b.bench_id")} AND c.busbw_gbps IS NOT NULL
        GROUP BY ALL
        """
    ).fetchall()
    flags = []
    for bench_id, collective, plateau, link, fabric, assumed, peak, at_size, line in rows:
        share = peak / plateau
        if share >= t.low_bandwidth:
            continue
        measured = f"{collective} busbw peaks at {peak:.1f} GB/s ({size_text(at_size)}): {share:.0%} of the"
        if assumed:
            # The nodes' fabric is not known: a shortfall against the reference system's NICs says as
            # much about the assumption as about the nodes (ABCI's A100 nodes have 4 HDR ports, not 8).
            severity = "info"
            message = (
                f"{measured} {plateau:.1f} GB/s the model predicts across nodes for {fabric}, the GPU's "
                f"reference fabric, assumed because none was named (bounded by {link})."
            )
            hint = (
                "Name the nodes' fabric (ingest --fabric, with --nics-per-node for a per-port entry, or "
                "`tracelog set --fabric`) to hold this bench to their NICs."
            )
        else:
            severity = "warning"
            message = f"{measured} {plateau:.1f} GB/s the model predicts across nodes (bounded by {link})."
            hint = (
                "Check that NCCL uses every NIC with GPUDirect RDMA (NCCL_DEBUG=INFO: one `via NET/IB/k/GDRDMA` "
                "per NIC), that the fabric named with --fabric is the one the nodes have, and the switch "
                "ports and cables (ibstat; a link that trained down or retransmits)."
            )
        flags.append(
            bench_flag(
                "low_bandwidth",
                severity,
                bench_id,
                message,
                hint,
                row_ref=f"line {line}",
                measured=float(peak),
                expected=float(plateau),
                ratio=share,
            )
        )
    return flags


RULES = (
    data_errors,
    copy_errors,
    incomplete,
    latency_bound,
    collapse,
    against_spec,
    across_nodes,
    p2p_outliers,
    p2p_against_spec,
)


def evaluate(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    return [flag for rule in RULES for flag in rule(store, t, scope)]
