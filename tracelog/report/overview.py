"""The report's opening: the runs table (measured beside predicted), the overlays across runs, and for two
named runs their differences.

Everything is aggregated in DuckDB: overlays merge the per-run buckets the run charts already read into at
most `OVERLAY_POINTS_TOTAL` over all runs (one dataset shared by every panel), so 100 runs add about a
megabyte to the page and no second pass over the iterations.
"""

from __future__ import annotations

from typing import Any, Protocol

import pandas as pd

from tracelog.store import Store


class Selection(Protocol):
    """The runs in scope (`sections.Selection`, which gathers this module's data)."""

    @property
    def run_ids(self) -> tuple[int, ...]: ...

    def sql(self, kind: str, column: str | None = None) -> str: ...


# Points per run in the overlays: the overlay is for comparing runs, the per-run chart below keeps the
# detail (`sections.POINTS_PER_RUN`). 20,000 over all runs keeps the shared dataset near 1 MB of CSV.
OVERLAY_POINTS_TOTAL = 20_000
OVERLAY_POINTS_PER_RUN = 400
OVERLAY_POINTS_MIN = 50
# Loss curves "part" where their relative gap exceeds this on a shared iteration and on the next
# `LOSS_PART_STEPS - 1` shared iterations: a tracelog choice, above the ~1 % run-to-run noise of bf16
# loss at one seed and a few steps apart, so one noisy line does not count as parting.
LOSS_PART = 0.02
LOSS_PART_STEPS = 3
# Configuration compared between two runs: the parsed layout (runs columns); every echoed argument
# (run_params) and tag is compared too.
CONFIG_COLUMNS = (
    "framework", "gpu_model", "fabric", "nodes", "gpus", "gpus_per_node", "tp", "pp", "dp", "cp", "vp",
    "sequence_parallel", "mbs", "gbs", "seq_len", "layers", "hidden", "heads", "query_groups", "ffn_hidden",
    "vocab", "params", "precision", "zero_stage", "recompute", "swiglu", "train_iters",
)  # fmt: skip


def run_label(run_id: int, name: Any) -> str:
    return f"#{run_id} {name or 'unnamed'}"


def runs_table(store: Store, scope: Selection, pred: pd.DataFrame, pick: Any) -> pd.DataFrame:
    """One row per run in scope: layout, measured and predicted sec/it and TFLOP/s, and their ratios
    (`sec_eff` = predicted / measured time, `tf_eff` = measured / predicted TFLOP/s: 1 is the model's
    figure reached, below 1 is the gap)."""
    frame = store.query(
        f"""
        SELECT s.run_id, s.name, coalesce(t.tags, '') AS tags, s.gpu_model, s.nodes, s.gpus, s.dp, s.tp, s.pp,
               s.mbs, s.gbs, s.iterations_logged, s.sec_per_it, s.tflops_reported AS tflops, s.final_loss,
               s.peak_reserved_mib
        FROM run_summary s LEFT JOIN (
            SELECT run_id, string_agg(key || '=' || coalesce(value, ''), ' ' ORDER BY key) AS tags
            FROM run_tags GROUP BY run_id
        ) t USING (run_id)
        WHERE {scope.sql("run", "s.run_id")} ORDER BY s.run_id
        """
    )
    for role, column in (("sec_per_it", "sec_pred"), ("tflops", "tflops_pred")):
        picked = pd.concat([pick(g, role).head(1) for _, g in pred.groupby("run_id")] or [pred.iloc[0:0]])
        frame[column] = frame["run_id"].map(dict(zip(picked["run_id"], picked["value"], strict=True)))
    frame["sec_eff"] = frame["sec_pred"] / frame["sec_per_it"]
    frame["tf_eff"] = frame["tflops"] / frame["tflops_pred"]
    return frame


def overlay_series(series: pd.DataFrame, seq_len: dict[int, Any], runs: int) -> pd.DataFrame:
    """The per-run buckets (`sections._series`, already aggregated in DuckDB) merged into fewer, for the
    runs with at least two: a single value is a line in the runs table, never a chart. Means are weighted
    by the log lines of each bucket; tokens are consumed tokens, else consumed samples x seq length."""
    columns = ["run_id", "it", "tokens", "s", "tf", "loss", "warmup"]
    if series.empty:
        return pd.DataFrame(columns=columns)
    points = max(OVERLAY_POINTS_MIN, min(OVERLAY_POINTS_PER_RUN, OVERLAY_POINTS_TOTAL // max(1, runs)))
    frame = series.assign(
        tokens=series["tok"].fillna(series["samples"] * series["run_id"].map(seq_len).astype("Float64")),
        k=series.groupby("run_id").cumcount(),
        count=series.groupby("run_id")["it"].transform("size"),
    )
    frame["bucket"] = frame["k"] * points // frame["count"]
    weights = {}
    for metric in ("s", "tf", "loss"):
        known = frame[metric].notna()
        frame[f"{metric}_w"] = (frame[metric] * frame["lines"]).where(known)
        frame[f"{metric}_n"] = frame["lines"].where(known)
        weights[metric] = (f"{metric}_w", f"{metric}_n")
    grouped = frame.groupby(["run_id", "bucket"], sort=True)
    out = grouped.agg(
        it=("it", "max"),
        tokens=("tokens", "max"),
        warmup=("warmup", "min"),
        **{f"{m}_w": (w, "sum") for m, (w, _) in weights.items()},
        **{f"{m}_n": (n, "sum") for m, (_, n) in weights.items()},
    ).reset_index()
    for metric in weights:
        out[metric] = (out[f"{metric}_w"] / out[f"{metric}_n"]).where(out[f"{metric}_n"] > 0)
    out = out[columns]
    counts = out.groupby("run_id")["it"].transform("size")
    return out[counts > 1].reset_index(drop=True)


def warmup_spans(series: pd.DataFrame) -> pd.DataFrame:
    """Per run, the warm-up buckets' span in iterations and tokens (from the run's first point)."""
    rows = []
    for run_id, group in series.groupby("run_id", sort=True):
        warm = group[group["warmup"] == 1]
        if warm.empty:
            continue
        rows.append(
            {
                "run_id": run_id,
                "it0": group["it"].min(),
                "it1": warm["it"].max(),
                "tok0": group["tokens"].min(),
                "tok1": warm["tokens"].max(),
            }
        )
    return pd.DataFrame(rows, columns=["run_id", "it0", "it1", "tok0", "tok1"])


def differences(store: Store, a: int, b: int) -> dict[str, pd.DataFrame | int | None]:
    """What differs between two runs: configuration keys, metric medians, and the first iteration where
    the loss curves part (`None` when they never do, or share no iteration)."""
    columns = ", ".join(f"{c}::VARCHAR AS {c}" for c in CONFIG_COLUMNS)
    config = store.query(
        f"""
        WITH facts AS (
            SELECT run_id, key, value FROM (SELECT run_id, {columns} FROM runs WHERE run_id IN ({a}, {b}))
                UNPIVOT INCLUDE NULLS (value FOR key IN ({", ".join(CONFIG_COLUMNS)}))
            UNION ALL SELECT run_id, 'arg ' || name, string_agg(value, ' | ' ORDER BY line_no)
                FROM run_params WHERE run_id IN ({a}, {b}) GROUP BY run_id, name
            UNION ALL SELECT run_id, 'tag ' || key, value FROM run_tags WHERE run_id IN ({a}, {b})
        )
        SELECT key, any_value(value) FILTER (run_id = {a}) AS a, any_value(value) FILTER (run_id = {b}) AS b
        FROM facts GROUP BY key
        HAVING (a IS DISTINCT FROM b)
        ORDER BY key LIKE 'arg %', key LIKE 'tag %', key
        """
    )
    metrics = store.query(
        f"""
        SELECT metric, median(v) FILTER (run_id = {a}) AS a, median(v) FILTER (run_id = {b}) AS b
        FROM (
            SELECT run_id, unnest(['sec/it', 'TFLOP/s per GPU', 'samples/s', 'lm loss', 'grad norm']) AS metric,
                   unnest([elapsed_s, tflops_reported, samples_per_s, lm_loss, grad_norm]) AS v
            FROM iteration_marks WHERE run_id IN ({a}, {b}) AND NOT warmup
        ) GROUP BY metric HAVING a IS NOT NULL OR b IS NOT NULL
        ORDER BY list_position(['sec/it', 'TFLOP/s per GPU', 'samples/s', 'lm loss', 'grad norm'], metric)
        """
    )
    metrics["b / a"] = metrics["b"] / metrics["a"]
    row = store.con.execute(
        f"""
        WITH shared AS (
            SELECT x.iteration, abs(x.lm_loss - y.lm_loss) / ((abs(x.lm_loss) + abs(y.lm_loss)) / 2) > {LOSS_PART}
                       AS apart
            FROM iterations x JOIN iterations y ON x.iteration = y.iteration
            WHERE x.run_id = {a} AND y.run_id = {b} AND x.lm_loss IS NOT NULL AND y.lm_loss IS NOT NULL
        ), runs AS (
            SELECT iteration, apart,
                   bool_and(apart) OVER (ORDER BY iteration ROWS BETWEEN CURRENT ROW AND {LOSS_PART_STEPS - 1}
                                         FOLLOWING) AS stays
            FROM shared
        )
        SELECT min(iteration) FILTER (apart AND stays), count(*) FROM runs
        """
    ).fetchone()
    parted = None if row is None or row[0] is None else int(row[0])
    shared = 0 if row is None else int(row[1])
    return {"config": config, "metrics": metrics, "parted": parted, "shared": shared}
