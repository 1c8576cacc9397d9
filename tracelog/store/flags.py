"""The flags as people read them: the one query every listing of flags goes through."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from tracelog.store import Store
    from tracelog.store.rows import Rows

FLAG_LIST_COLUMNS = (
    "f.flag_id, f.severity, f.rule, f.subject_kind || ' ' || f.subject_id AS subject, "
    "coalesce(r.name, b.tool || coalesce(' ' || b.collective, '')) AS subject_name, "
    "f.row_ref, f.measured, f.expected, f.ratio, f.message, f.hint"
)


def flags_sql(where: str = "TRUE", columns: str = FLAG_LIST_COLUMNS) -> str:
    """Flags most severe first; `where` filters `flags f`, `columns` may name the subject's run `r` or
    bench `b` (`subject_name` in the default columns is the run's name or the bench's tool and op)."""
    return f"""
        SELECT {columns}
        FROM flags f
        LEFT JOIN runs r ON f.subject_kind = 'run' AND r.run_id = f.subject_id
        LEFT JOIN benches b ON f.subject_kind <> 'run' AND b.bench_id = f.subject_id
        WHERE {where}
        ORDER BY CASE f.severity WHEN 'critical' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END, f.rule, f.flag_id
    """


def flags(
    store: Store,
    severity: str | None = None,
    rule: str | None = None,
    run_ids: list[int] | None = None,
    *,
    rows: bool = False,
) -> pd.DataFrame | Rows:
    """Flags, most severe first, with a readable subject name (as plain `Rows` with `rows`)."""
    clauses, params = [], []
    if severity:
        clauses.append("f.severity = ?")
        params.append(severity)
    if rule:
        clauses.append("f.rule = ?")
        params.append(rule)
    if run_ids is not None:
        ids = ", ".join(str(int(r)) for r in run_ids) or "NULL"
        clauses.append(f"f.subject_kind = 'run' AND f.subject_id IN ({ids})")
    fetch = store.rows if rows else store.query
    return fetch(flags_sql(" AND ".join(clauses) or "TRUE"), params)
