"""The comparator: materialise predictions, comparisons and flags in the store.

`refresh` recomputes them for the runs and benches in scope (all by default) in one transaction, so any
DuckDB client sees numbers that match the data. Ingest refreshes the subjects of the file it ingested;
`tracelog flags --refresh` and a changed `--gpu` or tag refresh again.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import duckdb
import pandas as pd

from tracelog import predict, run_inputs
from tracelog.rules import bandwidth, health, model_rules
from tracelog.rules.scope import Scope
from tracelog.run_inputs import RunInputs
from tracelog.store import Store
from tracelog.thresholds import DEFAULT, Thresholds

REFRESH_MEMORY_LIMIT = "384MB"
"""DuckDB's cap while a refresh runs. Since migration 004 the views and most rules are per-run aggregates
(their medians' values are held outside the cap); what the cap still bounds is the loss-spike rule's
rolling-median window, the one window over a whole run left (about 130 MB at 1.8 M iterations)."""
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
FLAG_COLUMNS = (
    "rule",
    "severity",
    "subject_kind",
    "subject_id",
    "row_ref",
    "measured",
    "expected",
    "ratio",
    "message",
    "hint",
)
Family = Callable[[Store, Thresholds, Scope], list[dict[str, Any]]]


def rule_families(runs: list[RunInputs] | None = None) -> list[Family]:
    """Every rule family, in the order their flags are written; `runs` are the model inputs already
    loaded for the refresh (the model rules load them otherwise)."""
    return [partial(model_rules.evaluate, runs=runs), bandwidth.evaluate, health.evaluate]


def _subject_predicate(scope: Scope) -> str:
    return (
        f"((subject_kind = 'run' AND subject_id IN (SELECT run_id FROM runs WHERE {scope.runs})) OR "
        f"(subject_kind IN ('bench', 'collective', 'p2p', 'links') "
        f"AND subject_id IN (SELECT bench_id FROM benches WHERE {scope.benches})))"
    )


def refresh(
    store: Store,
    run_ids: list[int] | None = None,
    bench_ids: list[int] | None = None,
    thresholds: Thresholds = DEFAULT,
) -> int:
    """Recompute predictions, comparisons and flags for the subjects in scope; returns the flag count.

    One transaction; DuckDB is capped meanwhile (window functions over millions of iterations otherwise
    keep every partition in memory), and a refresh that cannot run under the cap runs again without it.
    """
    scope = Scope.of(run_ids, bench_ids)
    try:
        with store.memory_limit(REFRESH_MEMORY_LIMIT):
            return _refresh(store, scope, thresholds)
    except duckdb.OutOfMemoryException:
        return _refresh(store, scope, thresholds)


def _refresh(store: Store, scope: Scope, thresholds: Thresholds) -> int:
    with store.transaction():
        where = _subject_predicate(scope)
        for table in ("predictions", "comparisons", "flags"):
            store.con.execute(f"DELETE FROM {table} WHERE {where}")
        runs = [predict.infer(run) for run in run_inputs.load(store, where=scope.runs)]
        outputs = (predict.predict_runs(store, scope, runs), predict.predict_benches(store, scope))
        for output in outputs:
            for table, rows in output.items():
                if rows:
                    store.insert(table, pd.DataFrame(rows))
        flags = [flag for family in rule_families(runs) for flag in family(store, thresholds, scope)]
        if flags:
            frame = pd.DataFrame([{c: f.get(c) for c in FLAG_COLUMNS} for f in flags])
            store.insert("flags", frame)
    return len(flags)


def flags(
    store: Store,
    severity: str | None = None,
    rule: str | None = None,
    run_ids: list[int] | None = None,
) -> pd.DataFrame:
    """Flags, most severe first, with a readable subject name."""
    clauses, params = [], []
    if severity:
        clauses.append("severity = ?")
        params.append(severity)
    if rule:
        clauses.append("rule = ?")
        params.append(rule)
    if run_ids is not None:
        ids = ", ".join(str(int(r)) for r in run_ids) or "NULL"
        clauses.append(f"subject_kind = 'run' AND subject_id IN ({ids})")
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    return store.query(
        f"""
        SELECT f.flag_id, f.severity, f.rule, f.subject_kind || ' ' || f.subject_id AS subject,
               coalesce(r.name, b.tool || coalesce(' ' || b.collective, '')) AS subject_name,
               f.row_ref, f.measured, f.expected, f.ratio, f.message, f.hint
        FROM flags f
        LEFT JOIN runs r ON f.subject_kind = 'run' AND r.run_id = f.subject_id
        LEFT JOIN benches b ON f.subject_kind <> 'run' AND b.bench_id = f.subject_id
        {where}
        ORDER BY CASE f.severity WHEN 'critical' THEN 0 WHEN 'warning' THEN 1 ELSE 2 END, f.rule, f.flag_id
        """,
        params,
    )
