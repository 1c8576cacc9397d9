"""Stretches of one loss on consecutive lines, found once and kept: a refresh reads only the lines a run
gained since the last one (and the stretch still open then).

The not_learning rule's flat loss is a stretch: a line and the lines after it that print the same loss, among
the lines that updated the weights (`LINES`), over at least `flat_loss_lines` of them and as many different
iterations. A stretch depends on its own lines only, so the stretches of a run's lines up to the start of the
last one (its anchor: a line whose loss differs from the line before it, or the run's first) stay as they
were when the log grows: the next refresh reads the lines from that anchor on, finds the stretches there and
replaces the ones it kept from it (schema 017's `flat_loss_stretches`; `run_progress` holds the last line
read and the anchor, rule `RULE`). The rule reads the kept stretches.

A run is read from its first line when its threshold changed or it has no progress row (never read, or its
rows merged with another file's or parsed again: both drop it). Rows rewritten from a line on (a resumed
DeepSpeed parse, `store.progress.rewind`) move the last line read back before them; an anchor that was
among them is replaced by the last one before them, found among the lines of the bucket's width before.
"""

from __future__ import annotations

from tracelog.analysis import run_buckets
from tracelog.analysis.run_buckets import UPDATING, rows_from
from tracelog.analysis.scope import Scope
from tracelog.store import Store, progress

RULE = "flat_loss"
LINES = f"isfinite(lm_loss) AND lm_loss <> 0 AND {UPDATING}"
"""The lines a stretch is made of: a finite loss other than 0, on a step that updated the weights."""

MARKED_SQL = """
SELECT run_id, line_no, iteration, v, row_number() OVER w AS k, v = lag(v) OVER w AS same,
       lag(iteration) OVER w AS prev_it, lag(line_no) OVER w AS prev_line
FROM ({rows}) WINDOW w AS (PARTITION BY run_id ORDER BY line_no)
"""
"""One sort of a run's lines: each beside the line before it, and its place among them."""

STRETCHES_SQL = """
WITH marked AS ({marked}),
-- a stretch is a line and the lines after it that repeat its value: the repeats (few, in a healthy run)
-- numbered among themselves, consecutive places making one stretch
repeats AS (
    SELECT *, k - row_number() OVER (PARTITION BY run_id ORDER BY k) AS island FROM marked WHERE same
),
stretches AS (
    SELECT run_id, any_value(v) AS v,
           length(list_distinct(list(iteration) || [arg_min(prev_it, k)])) AS steps,
           arg_min(prev_line, k) AS first_line, max(line_no) AS last_line,
           least(min(iteration), arg_min(prev_it, k)) AS first_it, max(iteration) AS last_it
    FROM repeats GROUP BY run_id, island HAVING count(*) >= $threshold - 1
)
SELECT * FROM stretches WHERE steps >= $threshold
"""


def update(store: Store, threshold: float, scope: Scope) -> None:
    """Bring `flat_loss_stretches` and `run_progress` up to the last line of every run in scope."""
    con = store.con
    # a run read with another threshold is read again from its first line
    marks, unmarked = progress.read(con, RULE, scope.runs, threshold)
    starts: dict[int, int | None] = {
        **{
            run: (anchor if anchor <= checked else _anchor_before(store, run, checked + 1))
            for run, (checked, anchor) in marks.items()
        },
        **dict.fromkeys(unmarked),
    }
    if not scope.new:
        whole = [run for run, start in starts.items() if start is None]
        if whole:
            con.execute(f"DELETE FROM flat_loss_stretches WHERE run_id IN ({', '.join(map(str, whole))})")
        for run, start in starts.items():
            if start is not None:
                con.execute(f"DELETE FROM flat_loss_stretches WHERE run_id = {run} AND first_line >= {start}")
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE flat_loss_window AS "
        f"{MARKED_SQL.format(rows=rows_from(starts, 'run_id, line_no, iteration, lm_loss AS v', LINES))}"
    )
    con.execute(
        "INSERT INTO flat_loss_stretches "
        + STRETCHES_SQL.format(marked="SELECT * FROM flat_loss_window")
        + " ORDER BY run_id, first_line",
        {"threshold": threshold},
    )
    read = "SELECT DISTINCT run_id FROM flat_loss_window"
    if not scope.new:
        con.execute(f"DELETE FROM run_progress WHERE rule = '{RULE}' AND run_id IN ({read})")
    # the last line read, and the anchor of the stretch it ends: the last line not repeating the one before
    con.execute(
        f"""
        INSERT INTO run_progress
        SELECT run_id, '{RULE}', max(line_no), max(line_no) FILTER (same IS NOT TRUE), $t
        FROM flat_loss_window GROUP BY run_id ORDER BY run_id
        """,
        {"t": threshold},
    )
    con.execute("DROP TABLE flat_loss_window")


def _anchor_before(store: Store, run_id: int, line_no: int) -> int | None:
    """The last anchor of a run before `line_no` (its rows from there were rewritten), among the lines of
    one bucket's width before it; None where there is none (the run is read from its first line)."""
    since = max(0, line_no - run_buckets.BUCKET_LINES)
    rows = (
        f"SELECT run_id, line_no, iteration, lm_loss AS v FROM iterations WHERE run_id = {int(run_id)} "
        + (f"AND line_no >= {since} AND line_no < {int(line_no)} AND {LINES}")
    )
    found = store.scalar(f"SELECT max(line_no) FROM ({MARKED_SQL.format(rows=rows)}) WHERE same = false")
    return int(found) if found is not None else None
