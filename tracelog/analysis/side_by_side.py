"""Runs side by side: what differs in their configuration, and how their steady state compares.

All numbers come from the `run_summary` view (steady state, warm-up excluded); ratios are against the
first run given, so `tracelog compare BASELINE CANDIDATE...` reads as "candidate versus baseline".
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tracelog.store import Store

if TYPE_CHECKING:
    import pandas as pd

CONFIG_COLUMNS = [
    "name",
    "framework",
    "gpu_model",
    "fabric",
    "nodes",
    "gpus",
    "gpus_per_node",
    "dp",
    "tp",
    "pp",
    "cp",
    "vp",
    "sequence_parallel",
    "mbs",
    "gbs",
    "seq_len",
    "layers",
    "hidden",
    "heads",
    "query_groups",
    "ffn_hidden",
    "vocab",
    "params",
    "precision",
    "zero_stage",
    "recompute",
    "swiglu",
    "status",
]
# metric -> (SQL over run_summary, higher is better)
METRICS: dict[str, tuple[str, bool]] = {
    "sec_per_it": ("sec_per_it", False),
    "samples_per_s": ("samples_per_s", True),
    "tflops_reported": ("tflops_reported", True),
    "peak_reserved_mib": ("peak_reserved_mib", False),
    "final_loss": ("final_loss", False),
}


def _ids(run_ids: list[int]) -> str:
    return ", ".join(str(int(r)) for r in run_ids)


def config_side_by_side(store: Store, run_ids: list[int], all_params: bool = False) -> pd.DataFrame:
    """One row per parameter, one column per run; only the parameters that differ unless `all_params`."""
    import pandas as pd  # loaded by what returns a frame, not at start-up

    cols = ", ".join(f'CAST("{c}" AS VARCHAR) AS "{c}"' for c in CONFIG_COLUMNS)
    wide = store.query(f"SELECT run_id, {cols} FROM runs WHERE run_id IN ({_ids(run_ids)})")
    long_cols = wide.melt(id_vars="run_id", var_name="parameter", value_name="value")
    params = store.query(
        f"SELECT run_id, 'arg:' || name AS parameter, last(value ORDER BY line_no) AS value "
        f"FROM run_params WHERE run_id IN ({_ids(run_ids)}) GROUP BY run_id, name"
    )
    tags = store.query(
        f"SELECT run_id, 'tag:' || key AS parameter, value FROM run_tags WHERE run_id IN ({_ids(run_ids)})"
    )
    table = pd.concat([long_cols, params, tags], ignore_index=True)
    table = table.pivot_table(
        index="parameter", columns="run_id", values="value", aggfunc="first", dropna=False
    )
    table = table.reindex(columns=run_ids)
    order = {c: i for i, c in enumerate(CONFIG_COLUMNS)}
    table = table.loc[sorted(table.index, key=lambda p: (order.get(p, len(order)), p))]
    if not all_params:
        differs = table.astype("string").fillna("∅").nunique(axis=1) > 1
        per_rank = table.index.str.startswith("arg:parameters_on_rank_")
        table = table[(differs & ~per_rank) | (table.index == "name")]
    table = table.astype("string").fillna("")
    table.columns = [f"run {r}" for r in table.columns]
    return table.reset_index()


def matched_loss_iteration(store: Store, run_ids: list[int]) -> int | None:
    """The last iteration every run logged a loss for: the fair point to compare losses."""
    value = store.scalar(
        f"SELECT min(last_it) FROM (SELECT run_id, max(iteration) AS last_it FROM iterations "
        f"WHERE run_id IN ({_ids(run_ids)}) AND lm_loss IS NOT NULL AND NOT isnan(lm_loss) GROUP BY run_id "
        f"HAVING count(*) > 0)"
    )
    counted = store.scalar(
        f"SELECT count(DISTINCT run_id) FROM iterations WHERE run_id IN ({_ids(run_ids)}) AND lm_loss IS NOT NULL"
    )
    return int(value) if value is not None and counted == len(run_ids) else None


def metrics_side_by_side(store: Store, run_ids: list[int]) -> pd.DataFrame:
    """Steady-state metrics per run with the delta and ratio against the first run."""
    import pandas as pd  # loaded by what returns a frame, not at start-up

    summary = store.query(f"SELECT * FROM run_summary WHERE run_id IN ({_ids(run_ids)})").set_index("run_id")
    rows = []
    metrics = dict(METRICS)
    mfu = _mfu(store, run_ids)
    for metric, (column, higher_better) in metrics.items():
        rows.append(
            _metric_row(
                metric,
                {r: summary.at[r, column] if r in summary.index else None for r in run_ids},
                run_ids,
                higher_better,
            )
        )
    if mfu:
        rows.append(_metric_row("mfu", mfu, run_ids, True))
    at = matched_loss_iteration(store, run_ids)
    if at is not None:
        losses = dict(
            store.con.execute(
                f"SELECT run_id, arg_max(lm_loss, line_no) FROM iterations WHERE run_id IN ({_ids(run_ids)}) "
                f"AND iteration <= ? AND lm_loss IS NOT NULL GROUP BY run_id",
                [at],
            ).fetchall()
        )
        rows.append(_metric_row(f"lm_loss at iteration {at}", losses, run_ids, False))
    flags = dict(
        store.con.execute(
            f"SELECT subject_id, count(*) FROM flags WHERE subject_kind = 'run' AND subject_id IN ({_ids(run_ids)}) "
            f"AND severity IN ('critical', 'warning') GROUP BY subject_id"
        ).fetchall()
    )
    rows.append(
        _metric_row("flags (critical + warning)", {r: flags.get(r, 0) for r in run_ids}, run_ids, False)
    )
    return pd.DataFrame(rows)


def _mfu(store: Store, run_ids: list[int]) -> dict[int, float]:
    return dict(
        store.con.execute(
            f"SELECT subject_id, value FROM predictions WHERE subject_kind = 'run' AND metric = 'mfu_measured' "
            f"AND subject_id IN ({_ids(run_ids)})"
        ).fetchall()
    )


def _metric_row(metric: str, values: Mapping[int, object], run_ids: list[int], higher_better: bool) -> dict:
    row: dict[str, object] = {"metric": metric, "better": "higher" if higher_better else "lower"}
    base = _num(values.get(run_ids[0]))
    for run_id in run_ids:
        value = _num(values.get(run_id))
        row[f"run {run_id}"] = value
        if run_id != run_ids[0]:
            row[f"Δ {run_id}"] = None if value is None or base is None else value - base
            row[f"× {run_id}"] = None if value is None or not base else value / base
    return row


def _num(value: object) -> float | None:
    if value is None or value is sys.modules["pandas"].NA:  # a frame's missing value: pandas is loaded
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if number != number else number
