"""One row per fabric benchmark: what ran, on what, how fast at best, and whether it finished.

`peak_busbw_gbps` is the largest busbw of any row of the bench (out-of-place or in-place) and
`peak_size_bytes` the smallest message size that reached it; `avg_busbw_gbps` is the tool's own
`Avg bus bandwidth` line, as printed (nccl-tests averages busbw over every row it printed, small sizes
included, so it sits well below the peak). busbw is nccl-tests' bus bandwidth (doc/PERFORMANCE.md): one
direction, comparable with a link's unidirectional figure. Benches without collectives (p2p matrices,
topologies) have no busbw.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from tracelog.errors import TracelogError
from tracelog.store.flags import flags_sql
from tracelog.store.tables import HARDWARE_SQL

if TYPE_CHECKING:
    import pandas as pd

    from tracelog.store import Store

P2P_MATRICES = (
    "connectivity",
    "bandwidth_uni_p2p_off",
    "bandwidth_uni_p2p_on",
    "bandwidth_bi_p2p_off",
    "bandwidth_bi_p2p_on",
    "latency_gpu_p2p_off",
    "latency_cpu_p2p_off",
    "latency_gpu_p2p_on",
    "latency_cpu_p2p_on",
)
"""The `matrix` values of the `p2p` table in a full p2pBandwidthLatencyTest output, in printed order: the
parser's `p2p.STANDARD`, said again here so that the rules read it without loading every parser (a
parser imports nothing from the store; tests/test_parser_p2p.py keeps the two equal)."""
BENCH_REF_RX = re.compile(r"^\s*bench\s*:\s*(\S*?)\s*$", re.IGNORECASE)
# What `show bench:ID` adds to the listing row.
DETAIL_COLUMNS = """,
    b.redop, array_to_string(b.hosts, ', ') AS hosts, b.wrong_total, b.out_of_bounds, b.line_start, b.line_end"""

BENCHES_SQL = """
WITH peak AS (
    SELECT bench_id, max(busbw_gbps) AS peak_busbw_gbps
    FROM collectives WHERE busbw_gbps IS NOT NULL GROUP BY bench_id
), reached AS (
    SELECT c.bench_id, min(c.size_bytes) AS peak_size_bytes
    FROM collectives c JOIN peak p ON c.bench_id = p.bench_id AND c.busbw_gbps = p.peak_busbw_gbps
    GROUP BY c.bench_id
)
SELECT
    b.bench_id,
    s.path AS source,
    b.tool,
    b.collective AS op,
    b.ranks,
    b.nodes,
    b.gpus_per_node,
    coalesce(b.gpu_model, b.gpu_name) AS gpu,
    b.dtype,
    p.peak_busbw_gbps,
    r.peak_size_bytes,
    b.avg_busbw_gbps,
    b.status{detail}
FROM benches b
LEFT JOIN sources s USING (source_id)
LEFT JOIN peak p USING (bench_id)
LEFT JOIN reached r USING (bench_id)
{where}
ORDER BY b.bench_id
"""


def benches(store: Store, tool: str | None = None) -> pd.DataFrame:
    """The benches in the database (only those of `tool` when given, e.g. `nccl-tests`), one row each."""
    where, params = ("WHERE b.tool = ?", [tool]) if tool else ("", [])
    return store.query(BENCHES_SQL.format(where=where, detail=""), params)


def is_bench_ref(ref: str | int) -> bool:
    """`bench:ID` names a bench; anything else is a run (runs and benches have separate ids)."""
    return isinstance(ref, str) and BENCH_REF_RX.match(ref) is not None


def resolve_bench(store: Store, ref: str | int) -> int:
    """A bench by id: `3`, `bench:3`."""
    text = str(ref).strip()
    if match := BENCH_REF_RX.match(text):
        text = match.group(1)
    if not text.isdigit():
        raise TracelogError(
            f"{str(ref)!r} is not a bench id; write bench:ID, e.g. bench:3 (see `tracelog benches`)"
        )
    if not store.scalar("SELECT count(*) FROM benches WHERE bench_id = ?", [int(text)]):
        raise TracelogError(f"no bench with id {int(text)}; see `tracelog benches`")
    return int(text)


MODEL_SQL = """
SELECT c.metric, c.measured, c.predicted AS model, c.ratio, c.formula AS how, p.detail
FROM comparisons c
LEFT JOIN predictions p ON p.subject_kind = c.subject_kind AND p.subject_id = c.subject_id
     AND p.metric = 'model_plateau_busbw_gbps'
WHERE c.subject_kind = 'collective' AND c.subject_id = ?
UNION ALL BY NAME
SELECT p.metric, c.measured, p.value AS model, c.ratio, p.formula AS how, p.detail
FROM predictions p
LEFT JOIN comparisons c ON c.subject_kind = p.subject_kind AND c.subject_id = p.subject_id AND c.metric = p.metric
WHERE p.subject_id = ? AND (p.subject_kind = 'p2p'
      OR (p.subject_kind = 'collective' AND p.metric IN ('inputs', 'alpha_us', 'plateau_busbw_gbps')))
UNION ALL BY NAME
SELECT p.metric, c.measured, p.value AS model, c.ratio, p.formula AS how, p.detail
FROM predictions p
LEFT JOIN comparisons c ON c.subject_kind = p.subject_kind AND c.subject_id = p.subject_id AND c.metric = p.metric
WHERE p.subject_kind = 'bench' AND p.subject_id = ? AND p.metric IN ('nic_plateau_gbps', 'nic_line_rate_gbps')
"""
"""What the model says of a bench beside what it measured: the peak busbw against the plateau NCCL's
cost model gives (the algorithm, the bounding link and what the log said NCCL could use, in `detail`),
what had to be assumed or was missing, the α and plateau fitted to its own rows, the p2p link figures
beside each matrix's median GPU pair; a
perftest bench's large-message bandwidth against the plateau its NIC's line rate allows (analysis/nic.py)."""


def show_bench(store: Store, ref: str | int) -> dict[str, pd.DataFrame]:
    """One bench in full, by id (`3` or `bench:3`): `summary` (its listing row, redop, hosts, lines),
    `hardware`, `model` (`MODEL_SQL`), `params`, `devices`, its rows, `events` and `flags`.

    Its rows as its tool prints them: `perftest` (a NIC's test, GB/s), `collectives` (nccl-tests,
    all_reduce_bench) out-of-place first,
    then by type, op, root and size; one frame per p2p matrix, keyed by the matrix name (e.g.
    `bandwidth_uni_p2p_on`), src GPU down and dst GPU across; the topology as `links`, device by device
    with the link kinds `nvidia-smi topo -m` printed. The long forms are in the `p2p` and `links` tables.
    """
    bench_id = resolve_bench(store, ref)
    one = [bench_id]
    return {
        "summary": store.query(BENCHES_SQL.format(where="WHERE b.bench_id = ?", detail=DETAIL_COLUMNS), one),
        "hardware": store.query(
            HARDWARE_SQL.format(table="bench_hardware", id_col="bench_id", id=int(bench_id))
        ),
        "model": store.query(MODEL_SQL, [bench_id, bench_id, bench_id]),
        "params": store.query(
            "SELECT name, value, line_no FROM bench_params WHERE bench_id = ? ORDER BY line_no, name", one
        ),
        "devices": store.query(
            "SELECT rank, device, host, pid, bus_id, gpu_name, line_no FROM bench_devices "
            "WHERE bench_id = ? ORDER BY rank, line_no",
            one,
        ),
        "collectives": store.query(
            "SELECT placement, size_bytes, count, type, redop, root, time_us, algbw_gbps, busbw_gbps, wrong, "
            "line_no FROM collectives WHERE bench_id = ? "
            "ORDER BY placement = 'in-place', type, redop, root, size_bytes, line_no",
            one,
        ),
        "perftest": _perftest_rows(store, bench_id),
        **_p2p_matrices(store, bench_id),
        **_topology(store, bench_id),
        "events": store.query(
            "SELECT line_no, kind, text FROM events WHERE bench_id = ? ORDER BY line_no", one
        ),
        "flags": store.query(
            flags_sql(
                "f.subject_kind <> 'run' AND f.subject_id = ?",
                "f.severity, f.rule, f.subject_kind, f.row_ref, f.measured, f.expected, f.ratio, f.message, f.hint",
            ),
            one,
        ),
    }


def _perftest_rows(store: Store, bench_id: int) -> pd.DataFrame:
    """perftest's table as printed (GB/s, 1e9 bytes/s), without the columns its kind of test has not
    (a bandwidth run has no latencies)."""
    frame = store.query(
        "SELECT report, size_bytes, iters, bw_peak_gbps, bw_avg_gbps, msg_rate_mpps, t_min_us, t_max_us, "
        "t_typical_us, t_avg_us, t_stdev_us, t_p99_us, t_p999_us, tps, line_no FROM perftest WHERE bench_id = ? "
        "ORDER BY report NULLS FIRST, line_no",
        [bench_id],
    )
    return frame.dropna(axis=1, how="all")


def _p2p_matrices(store: Store, bench_id: int) -> dict[str, pd.DataFrame]:
    cells = store.query(
        "SELECT matrix, src, dst, value, min(line_no) OVER (PARTITION BY matrix) AS first_line "
        "FROM p2p WHERE bench_id = ? ORDER BY first_line, src, dst",
        [bench_id],
    )
    return {
        str(matrix): _square(group, "src", "dst", "value", sorted(set(group["dst"])))
        for matrix, group in cells.groupby("matrix", sort=False)
    }


def _topology(store: Store, bench_id: int) -> dict[str, pd.DataFrame]:
    cells = store.query(
        "SELECT coalesce(host, '') AS host, a, b, link_kind, line_no FROM links WHERE bench_id = ? "
        "ORDER BY host, line_no, a, b",
        [bench_id],
    )
    frames = {}
    for host, group in cells.groupby("host", sort=False):
        # nvidia-smi prints the rows in the order of its header's columns; a device whose row is missing
        # keeps its column, after the others.
        printed = list(dict.fromkeys(group["a"]))
        columns = printed + sorted(set(group["b"]) - set(printed), key=device_order)
        frames["links" if cells["host"].nunique() == 1 else f"links {host}"] = _square(
            group, "a", "b", "link_kind", columns
        )
    return frames


def device_order(name: str) -> tuple[str, int]:
    """GPU2 before GPU10, as nvidia-smi prints them."""
    head = name.rstrip("0123456789")
    return head, int(name[len(head) :] or -1)


def _square(cells: pd.DataFrame, row: str, column: str, value: str, columns: list[Any]) -> pd.DataFrame:
    """Long cells as the tool's matrix: `row` down, `columns` across."""
    rows = list(dict.fromkeys(cells[row]))
    square = cells.pivot(index=row, columns=column, values=value).reindex(index=rows, columns=columns)
    square.columns = [str(c) for c in square.columns]
    return square.rename_axis(row).reset_index()


def set_columns(store: Store, bench_id: int, values: dict[str, object]) -> None:
    """Set hardware columns of a bench (gpu_model, fabric, nodes, GPUs and NICs per node) the output did not
    state; the model's outputs about it are the caller's to refresh."""
    allowed = {"gpu_model", "fabric", "nodes", "gpus_per_node", "nics_per_node"}
    assert set(values) <= allowed, set(values) - allowed
    sets = ", ".join(f'"{k}" = ?' for k in values)
    store.con.execute(f"UPDATE benches SET {sets} WHERE bench_id = ?", [*values.values(), bench_id])


def flag_count(store: Store, bench_id: int) -> int:
    """How many flags a bench carries (on itself, its rows or its p2p matrices)."""
    return int(
        store.scalar("SELECT count(*) FROM flags WHERE subject_kind <> 'run' AND subject_id = ?", [bench_id])
        or 0
    )
