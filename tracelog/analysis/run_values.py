"""A run's lines counted per value of the figures whose medians a refresh takes, over any range of lines.

A line is counted under its combination of the figures (`FIGURES`: sec/it, whether the step was skipped,
samples/s, the global batch, TFLOP/s), per bucket of line numbers (`iteration_values`, schema 017; buckets
as `run_buckets` sums them). Every median is taken over one figure derived from them (`SERIES`: sec/it over
all lines and over the drift rule's, samples/s as printed and as global batch over sec/it, TFLOP/s as
printed and times sec/it, the global batch), so counts per combination give counts per value of each: the
logs print figures of a few decimals (the benchmark's 1.76 M lines hold 842 combinations), so there are few.

A range's counts are the counts of the buckets inside it and of its own lines in the buckets it cuts. The
buckets inside are not added up one by one: `iteration_value_sums` keeps, for a few buckets of each run,
the counts of all the buckets before it (the buckets where the last refresh's ranges began and ended, and
the bucket of its last line), so the counts of the buckets from a to b are the sum before b minus the sum
before a, each taken from the nearest kept sum and the buckets between (a refresh after a log grew: the
buckets its ranges moved over, and its new buckets). A kept sum stands while the buckets before it do: the
buckets a refresh sums again (`run_buckets.update`) drop the sums past them.
"""

from __future__ import annotations

from tracelog.analysis import run_buckets
from tracelog.analysis.run_buckets import FIGURES, FIGURES_SQL
from tracelog.store import Store

SERIES: tuple[tuple[str, str, str], ...] = (
    # (series, the value of a line, the lines that have one), over `FIGURES`
    ("elapsed", "elapsed_s", "elapsed_s IS NOT NULL"),
    ("drift", "elapsed_s", "elapsed_s > 0 AND unskipped"),
    ("samples", "samples_per_s", "samples_per_s IS NOT NULL"),
    ("rate", "global_batch_size / elapsed_s", "global_batch_size / elapsed_s IS NOT NULL"),
    ("tflops", "tflops_reported", "tflops_reported IS NOT NULL"),
    ("tflop", "tflops_reported * elapsed_s", "tflops_reported * elapsed_s IS NOT NULL"),
    ("gbs", "CAST(global_batch_size AS DOUBLE)", "global_batch_size IS NOT NULL"),
)
"""The figures whose medians are taken: sec/it (all lines, and the drift rule's: above 0, not skipped),
samples/s as printed and as global batch over sec/it, TFLOP/s as printed and times sec/it (the log's FLOPs
per iteration: `analysis.inputs`), the global batch."""

TUPLES = "refresh_tuples"
"""Per run and range: its lines counted per combination of `FIGURES` (made by `count_ranges`)."""


def count_ranges(store: Store, ranges: str, edges: str, new: bool = False) -> None:
    """`TUPLES` for each range of `ranges` (run_id, part, lo, hi: lines after `lo` up to `hi`, either NULL
    for open), whose lines in the buckets it cuts are `edges` (run_id, part and the lines' columns); keeps
    the sums it took in place of the run's others (`new`: the runs have none yet)."""
    B = run_buckets.BUCKET_LINES
    con = store.con
    figures = ", ".join(FIGURES)
    # each range's inner buckets run from `first` to before `stop`; the sums needed are those before each
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE refresh_inner AS
        SELECT r.run_id, r.part,
               CASE WHEN r.lo IS NULL THEN 0 ELSE r.lo // {B} + 1 END AS first,
               CASE WHEN r.hi IS NULL THEN e.last_bucket + 1 ELSE r.hi // {B} END AS stop
        FROM {ranges} r
        JOIN (SELECT run_id, max(bucket) AS last_bucket FROM iteration_buckets GROUP BY run_id) e USING (run_id)
        """
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE refresh_sums AS
        WITH needed AS (
            SELECT DISTINCT run_id, bucket FROM (
                SELECT run_id, first AS bucket FROM refresh_inner WHERE first < stop
                UNION ALL SELECT run_id, stop FROM refresh_inner WHERE first < stop
                -- the bucket of the run's last line: where the next refresh's sums start from
                UNION ALL SELECT run_id, max(bucket) FROM iteration_buckets
                WHERE run_id IN (SELECT run_id FROM refresh_inner) GROUP BY run_id
            )
        ),
        kept AS (
            SELECT DISTINCT run_id, bucket FROM iteration_value_sums WHERE run_id IN (SELECT run_id FROM needed)
            UNION SELECT DISTINCT run_id, 0 FROM needed
        ),
        -- each sum from the kept one nearest to it, and the buckets between (added, or taken off)
        nearest AS (
            SELECT n.run_id, n.bucket, arg_min(k.bucket, abs(n.bucket - k.bucket)) AS kept
            FROM needed n JOIN kept k USING (run_id) GROUP BY ALL
        )
        SELECT run_id, bucket, {figures}, sum(lines) AS lines FROM (
            SELECT n.run_id, n.bucket, {", ".join(f"s.{f}" for f in FIGURES)}, s.lines
            FROM nearest n JOIN iteration_value_sums s ON s.run_id = n.run_id AND s.bucket = n.kept
            UNION ALL
            SELECT n.run_id, n.bucket, {", ".join(f"v.{f}" for f in FIGURES)},
                   CASE WHEN n.bucket > n.kept THEN v.lines ELSE -v.lines END
            FROM nearest n JOIN iteration_values v ON v.run_id = n.run_id
            WHERE v.bucket >= least(n.bucket, n.kept) AND v.bucket < greatest(n.bucket, n.kept)
        )
        GROUP BY run_id, bucket, {figures} HAVING sum(lines) <> 0
        """
    )
    if not new:
        con.execute("DELETE FROM iteration_value_sums WHERE run_id IN (SELECT run_id FROM refresh_inner)")
    con.execute("INSERT INTO iteration_value_sums SELECT * FROM refresh_sums")
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {TUPLES} AS
        SELECT run_id, part, {figures}, sum(lines) AS lines FROM (
            SELECT i.run_id, i.part, {", ".join(f"s.{f}" for f in FIGURES)}, s.lines
            FROM refresh_inner i JOIN refresh_sums s ON s.run_id = i.run_id AND s.bucket = i.stop
            WHERE i.first < i.stop
            UNION ALL
            SELECT i.run_id, i.part, {", ".join(f"s.{f}" for f in FIGURES)}, -s.lines
            FROM refresh_inner i JOIN refresh_sums s ON s.run_id = i.run_id AND s.bucket = i.first
            WHERE i.first < i.stop
            UNION ALL
            SELECT run_id, part, {figures}, count(*) FROM (SELECT run_id, part, {FIGURES_SQL} FROM ({edges}))
            GROUP BY ALL
        )
        GROUP BY run_id, part, {figures} HAVING sum(lines) <> 0
        """
    )


def values_sql(wanted: str) -> str:
    """(run_id, part, series, value, lines): each series' lines per value over each range, of the
    (run_id, part, series) triples of `wanted`."""
    each = " UNION ALL ".join(
        f"SELECT run_id, part, '{name}' AS series, {value} AS value, lines FROM {TUPLES} WHERE {where}"
        for name, value, where in SERIES
    )
    return (
        f"SELECT run_id, part, series, value, sum(lines) AS lines FROM ({each}) "
        f"JOIN ({wanted}) USING (run_id, part, series) GROUP BY run_id, part, series, value"
    )
