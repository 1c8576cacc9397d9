"""How far a run's rows were checked by the rules that keep their findings between refreshes.

`analysis.loss_spikes` checks only the lines a run gained since its last refresh. A row rewritten below
that mark (a resumed DeepSpeed parse writes the steps that were still open at the end of the last one
again) would never be checked again; `rewind` moves the mark back before it, in the same transaction.
"""

from __future__ import annotations

import duckdb

LOSS_SPIKE_WINDOW = 10
"""Losses in the loss-spike rule's running median: the 10 valid ones before a line."""
VALID_LOSS = "lm_loss IS NOT NULL AND NOT isnan(lm_loss)"


def rewind(con: duckdb.DuckDBPyConnection, run_id: int, line_no: int) -> None:
    """Forget the checks of `run_id` from `line_no` on: its spikes there go, and the next refresh reads
    from the `LOSS_SPIKE_WINDOW` valid losses before that line; the other rules' (`analysis.run_buckets`,
    `analysis.flat_stretches`) read again from where their own context says, before that line."""
    con.execute("DELETE FROM loss_spikes WHERE run_id = ? AND line_no >= ?", [run_id, line_no])
    con.execute(
        f"""
        UPDATE run_progress SET
            checked_line = least(checked_line, $line - 1),
            context_line = CASE WHEN rule <> 'loss_spike' THEN context_line ELSE least(context_line, coalesce((
                SELECT list_min(max(line_no, {LOSS_SPIKE_WINDOW})) FROM iterations
                WHERE run_id = $run AND line_no < $line AND {VALID_LOSS}), -1)) END
        WHERE run_id = $run AND checked_line >= $line
        """,
        {"run": run_id, "line": line_no},
    )


def read(
    con: duckdb.DuckDBPyConnection,
    rule: str,
    runs: str,
    threshold: float | None = None,
    stale: str | None = None,
) -> tuple[dict[int, tuple[int, int]], list[int]]:
    """A rule's marks over the runs in scope, in one query: (checked line, context line) of each run that
    has one, and the runs that have none, in the order of their ids. A mark written at another `threshold`,
    or of a run `stale` says (a predicate over `r`, the run's row), is no mark: it is deleted, and the
    run is read again from its first line. (Each was a statement of its own before each rule's reading:
    the deletions, the marks, the runs in scope.)"""
    where = runs.replace("run_id", "r.run_id")
    same = "p.threshold IS NOT DISTINCT FROM $threshold" if threshold is not None else "true"
    rows = con.execute(
        f"""
        SELECT r.run_id, p.checked_line, p.context_line, p.run_id IS NOT NULL AND {same} AND NOT ({stale or "false"})
        FROM runs r LEFT JOIN run_progress p ON p.run_id = r.run_id AND p.rule = '{rule}'
        WHERE {where} ORDER BY r.run_id
        """,
        {"threshold": threshold} if threshold is not None else {},
    ).fetchall()
    marks = {int(run): (int(checked), int(context)) for run, checked, context, valid in rows if valid}
    dropped = sorted({int(run) for run, checked, _, valid in rows if checked is not None and not valid})
    if dropped:
        con.execute(
            f"DELETE FROM run_progress WHERE rule = '{rule}' AND run_id IN ({', '.join(map(str, dropped))})"
        )
    unmarked = sorted({int(run) for run, *_ in rows} - marks.keys())
    return marks, unmarked
