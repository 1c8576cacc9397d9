"""Per-iteration flags of nccl-tests (`-I 1`): straggler processes or nodes, and jitter per size.

nccl-tests' own tools/analyze_perf_json.py reads the same numbers: `--straggler` ranks processes by their
time per size (`per_process_max_times_us`, one row per process, max over its GPUs), `--spikes` looks for
iterations far above the average, `--iter0` for the first iteration's weight. Here a straggler is a process
(or a whole node) whose median time sits above its peers' at most of the sizes it ran, not at one: one
slow size is noise, the same process slow everywhere is hardware. Jitter is the -I summary's p99 over the
median (`p50_us` of the JSON report or of the stored iterations; the text output prints no median, so there
the mean `time` column stands in, which a few slow iterations raise: the ratio is then an underestimate).
"""

from __future__ import annotations

from typing import Any

from tracelog.analysis.rules import Flag, bench_flag
from tracelog.analysis.scope import Scope
from tracelog.store import Store
from tracelog.thresholds import Thresholds

# Processes needed before "the median process" means the typical one: with 3, one straggler is outvoted.
MIN_PROCESSES = 3
# Sizes x placements a process must have before "consistently" can be said of it.
MIN_SAMPLES = 3
SIZES_LISTED = 6  # sizes named in a jitter message; the rest are counted


def _size(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{int(n)} B"


STRAGGLER_SQL = """
WITH proc AS (
    SELECT bench_id, placement, size_bytes, process, any_value(host) AS host, median(time_us) AS t
    FROM collective_iterations
    WHERE {scope} AND process IS NOT NULL AND time_us IS NOT NULL
    GROUP BY ALL
), sized AS (
    SELECT *, median(t) OVER (PARTITION BY bench_id, placement, size_bytes) AS typical,
           count(*) OVER (PARTITION BY bench_id, placement, size_bytes) AS processes
    FROM proc
), by_process AS (
    SELECT bench_id, process, any_value(host) AS host, count(*) AS samples,
           count(*) FILTER (t > ? * typical) AS slow, median(t / typical) AS ratio,
           max(processes) AS processes
    FROM sized WHERE typical > 0 AND processes >= {min_processes}
    GROUP BY ALL
), host_size AS (
    SELECT bench_id, placement, size_bytes, host, median(t) AS t, count(*) AS members FROM proc
    WHERE host IS NOT NULL GROUP BY ALL
), host_peers AS (
    SELECT a.bench_id, a.placement, a.size_bytes, a.host, a.members, a.t, median(b.t) AS peers
    FROM host_size a JOIN host_size b
      ON a.bench_id = b.bench_id AND a.placement = b.placement AND a.size_bytes = b.size_bytes
     AND a.host <> b.host
    GROUP BY ALL
), by_host AS (
    SELECT bench_id, host, count(*) AS samples, count(*) FILTER (t > ? * peers) AS slow,
           median(t / peers) AS ratio, max(members) AS members
    FROM host_peers WHERE peers > 0 GROUP BY ALL
)
SELECT 'node' AS kind, bench_id, NULL AS process, host, samples, slow, ratio, members FROM by_host
WHERE samples >= {min_samples} AND slow >= ? * samples AND members > 1
UNION ALL
SELECT 'process', bench_id, process, host, samples, slow, ratio, processes FROM by_process
WHERE samples >= {min_samples} AND slow >= ? * samples
ORDER BY bench_id, kind, ratio DESC
"""


def stragglers(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    sql = STRAGGLER_SQL.format(scope=scope.benches, min_processes=MIN_PROCESSES, min_samples=MIN_SAMPLES)
    margin, share = t.straggler_process, t.straggler_share
    rows = store.con.execute(sql, [margin, margin, share, share]).fetchall()
    slow_nodes = {(r[1], r[3]) for r in rows if r[0] == "node"}
    flags = []
    for kind, bench_id, process, host, samples, slow, ratio, peers in rows:
        if kind == "process" and (bench_id, host) in slow_nodes:
            continue  # said once for the node
        if kind == "node":
            who = f"node {host} (all {peers} of its processes)"
            than = "the other nodes"
            where = f"on {host}"
        else:
            who = f"process {process}" + (f" on {host}" if host else "")
            than = f"the median of the {peers} processes"
            where = f"on {host}" if host else f"with process {process}'s GPUs"
        flags.append(
            bench_flag(
                "nccl_straggler",
                "warning",
                bench_id,
                f"{who}: its median per-iteration time sits {ratio - 1:.0%} above {than}, and more than "
                f"{t.straggler_process - 1:.0%} above at {slow} of {samples} sizes x placements.",
                "A process slow at every size is its hardware, not the message: run the test "
                f"{where} alone and beside a known-good node (`all_reduce_perf -b 8 -e 8G -f 2 -g <gpus> -I 1`), "
                "and look at its GPU clocks and Xid lines, NVLink and NIC counters. nccl-tests' "
                "tools/analyze_perf_json.py --straggler --nodes shows the same per size.",
                kind="collective",
                row_ref=f"host {host}" if kind == "node" else f"process {process}",
                measured=float(ratio),
                expected=1.0,
                ratio=float(ratio),
            )
        )
    return flags


JITTER_SQL = """
WITH it AS (
    SELECT bench_id, placement, size_bytes, quantile_disc(time_us, 0.5) AS p50,
           quantile_disc(time_us, 0.99) AS p99, count(*) AS n
    FROM collective_iterations WHERE {scope} AND process IS NULL AND time_us IS NOT NULL GROUP BY ALL
), sized AS (
    SELECT c.bench_id, c.placement, c.size_bytes, min(c.line_no) AS line_no,
           coalesce(max(c.i_p99_us), max(it.p99)) AS p99,
           coalesce(max(c.i_p50_us), max(it.p50)) AS p50,
           coalesce(max(c.i_avg_us), max(c.time_us)) AS mean,
           max(it.n) AS n
    FROM collectives c LEFT JOIN it USING (bench_id, placement, size_bytes)
    WHERE {scope} GROUP BY ALL
), rated AS (
    SELECT *, p99 / coalesce(p50, mean) AS ratio, p50 IS NULL AS against_mean FROM sized
    WHERE p99 IS NOT NULL AND coalesce(p50, mean) > 0
)
SELECT bench_id, list(size_bytes ORDER BY size_bytes) AS sizes, max(ratio) AS worst,
       arg_max(size_bytes, ratio) AS worst_size, arg_max(p99, ratio) AS worst_p99,
       arg_max(coalesce(p50, mean), ratio) AS worst_median, bool_or(against_mean) AS against_mean,
       min(line_no) AS line_no, count(DISTINCT size_bytes) AS jittery,
       any_value(tested) AS tested
FROM (SELECT *, count(DISTINCT size_bytes) OVER (PARTITION BY bench_id) AS tested FROM rated)
WHERE ratio > ?
GROUP BY bench_id ORDER BY bench_id
"""


def jitter(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    sql = JITTER_SQL.format(scope=scope.benches)
    flags = []
    for row in store.con.execute(sql, [t.jitter]).fetchall():
        bench_id, sizes, worst, size, p99, median, against_mean, line_no, jittery, tested = row
        sizes = list(dict.fromkeys(sizes))
        named = ", ".join(_size(s) for s in sizes[:SIZES_LISTED])
        more = f" and {len(sizes) - SIZES_LISTED} more" if len(sizes) > SIZES_LISTED else ""
        median_word = "mean time (the text output prints no median)" if against_mean else "median"
        extra: dict[str, Any] = {"row_ref": f"line {line_no}"} if line_no else {}
        flags.append(
            bench_flag(
                "nccl_jitter",
                "warning" if jittery * 2 >= tested else "info",
                bench_id,
                f"p99 over {median_word} above {t.jitter:g}x at {jittery} of {tested} sizes ({named}{more}); "
                f"the worst at {_size(size)}: p99 {p99:.1f} us against {median:.1f} us ({worst:.2f}x).",
                "A few slow iterations in an otherwise steady sweep: with few iterations (-n) the p99 is the "
                "slowest one, so rerun with -n 200 -I 1 -J to see whether it repeats, and -K 1 to leave the "
                "first iteration out of the summary. Spikes on every process at once point at the fabric or "
                "a noisy neighbour, on one process at that process (tools/analyze_perf_json.py --spikes "
                "tells them apart).",
                kind="collective",
                measured=float(worst),
                expected=float(t.jitter),
                ratio=float(worst),
                **extra,
            )
        )
    return flags


RULES = (stragglers, jitter)


def evaluate(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    return [flag for rule in RULES for flag in rule(store, t, scope)]
