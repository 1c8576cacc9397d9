"""Loss spikes found once and kept: a refresh checks only the lines a run gained since the last one.

A spike is local (a loss against the median of the 10 valid losses before it), so the lines already
checked keep their verdict when a log grows: the next check reads the new lines and the 10 valid losses
before the first of them, and appends what it finds to `loss_spikes` (schema 012). A refresh of a grown
1.8 M-iteration run then windows over its new lines, not over the whole run again.

A run is checked from its first line again when its threshold changed, when it has no progress row (never
checked, or its rows were merged with another file's: `store.merge` drops its progress); a row rewritten
below the mark (`store.progress.rewind`) moves the mark back before it. The result is
the same rows a check from scratch gives: the window is over the same losses, in the same order.
"""

from __future__ import annotations

from tracelog.analysis.run_buckets import rows_from
from tracelog.analysis.scope import Scope
from tracelog.store import Store, progress
from tracelog.store.progress import LOSS_SPIKE_WINDOW as WINDOW
from tracelog.store.progress import VALID_LOSS as VALID

RULE = "loss_spike"
MIN_BEFORE = 2
"""Fewer valid losses before a line than this: no median to hold it against (the run's first line). Two
are enough: a loss that explodes on a run's third logged step (a TRL fine-tune of gpt-oss-120b whose
published log goes 3.08, 3.28, 748.06) is the spike a user must hear of first, and at the 1.5x threshold
a loss falling or rising as training starts stays far below it."""


def update(store: Store, threshold: float, scope: Scope) -> None:
    """Bring `loss_spikes` and `run_progress` up to the last line of every run in scope."""
    con = store.con
    # a run checked with another threshold is checked again from its first line: its progress goes, and
    # a run with no progress row has no spikes kept either (both go together); new runs have neither
    marks, unmarked = progress.read(con, RULE, scope.runs, threshold)
    if unmarked and not scope.new:
        con.execute(f"DELETE FROM loss_spikes WHERE run_id IN ({', '.join(map(str, unmarked))})")
    # each run's lines from its context line on, by a literal range per run (DuckDB then reads those row
    # groups only; a range joined from run_progress read the whole run)
    starts: dict[int, int | None] = {
        **{run: context for run, (_, context) in marks.items()},
        **dict.fromkeys(unmarked),
    }
    checked = " ".join(f"WHEN {run} THEN {line}" for run, (line, _) in marks.items())
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE loss_window AS
        SELECT run_id, line_no, iteration, lm_loss,
               {f"CASE run_id {checked} ELSE -1 END" if checked else "-1"} AS checked_line
        FROM ({rows_from(starts, "run_id, line_no, iteration, lm_loss", VALID)})
        """
    )
    con.execute(
        f"""
        INSERT INTO loss_spikes
        SELECT run_id, line_no, iteration, lm_loss, before, lm_loss / before
        FROM (
            SELECT *,
                   median(lm_loss) OVER w AS before,
                   count(lm_loss) OVER w AS n_before
            FROM loss_window
            WINDOW w AS (PARTITION BY run_id ORDER BY line_no ROWS BETWEEN {WINDOW} PRECEDING AND 1 PRECEDING)
        )
        WHERE line_no > checked_line AND n_before >= {MIN_BEFORE} AND before > 0
          AND lm_loss > $threshold * before
        ORDER BY run_id, line_no
        """,
        {"threshold": threshold},
    )
    if not scope.new:
        con.execute(
            f"""
            DELETE FROM run_progress
            WHERE rule = '{RULE}' AND run_id IN (SELECT DISTINCT run_id FROM loss_window)
            """
        )
    con.execute(
        f"""
        INSERT INTO run_progress
        SELECT run_id, '{RULE}', max(line_no), list_min(max(line_no, {WINDOW})), $threshold
        FROM loss_window GROUP BY run_id ORDER BY run_id
        """,
        {"threshold": threshold},
    )
    con.execute("DROP TABLE loss_window")
