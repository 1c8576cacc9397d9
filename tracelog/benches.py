"""One row per fabric benchmark: what ran, on what, how fast at best, and whether it finished.

`peak_busbw_gbps` is the largest busbw of any row of the bench (out-of-place or in-place) and
`peak_size_bytes` the smallest message size that reached it; `avg_busbw_gbps` is the tool's own
`Avg bus bandwidth` line, as printed (nccl-tests averages busbw over every row it printed, small sizes
included, so it sits well below the peak). busbw is nccl-tests' bus bandwidth (doc/PERFORMANCE.md): one
direction, comparable with a link's unidirectional figure. Benches without collectives (p2p matrices,
topologies) have no busbw.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from tracelog.store import Store

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
    b.status
FROM benches b
LEFT JOIN sources s USING (source_id)
LEFT JOIN peak p USING (bench_id)
LEFT JOIN reached r USING (bench_id)
{where}
ORDER BY b.bench_id
"""


def benches(db: str | Store | None = None, tool: str | None = None) -> pd.DataFrame:
    """The benches in the database (only those of `tool` when given, e.g. `nccl-tests`), one row each."""
    from tracelog.api import connect

    store = connect(db)
    where, params = ("WHERE b.tool = ?", [tool]) if tool else ("", [])
    return store.query(BENCHES_SQL.format(where=where), params)
