"""`tracelog report`: one self-contained HTML file of charts and tables over the store.

The report only reads the database, and every aggregate happens in DuckDB before a chart sees the data:
iterations are cut into at most `POINTS_PER_RUN` equal-count buckets per run (mean, min and max of each;
fewer per run when many runs share `POINTS_TOTAL`), memory is one peak per rank, and benches, p2p
matrices and topology are small by nature. That keeps a report over 100 runs and a million iterations
under 10 s and 20 MB (`benchmarks/report_bench.py` measures it).

Predictions are drawn where the model wrote them (`RUN_METRICS`, `TIME_SPLIT`, `BUSBW_METRIC`); every
section tolerates their absence, and a section with no data is left out.

This module gathers the data; `charts` draws it and `html` writes the page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd

from tracelog import hardware
from tracelog.errors import TracelogError
from tracelog.report import charts, nic_charts, overlays, overview
from tracelog.store import Store
from tracelog.store.flags import flags_sql
from tracelog.store.runs import resolve_run, tagged_run_ids
from tracelog.store.tables import SEVERITIES
from tracelog.thresholds import DEFAULT, Thresholds

DEFAULT_OUTPUT = Path("reports") / "tracelog-report.html"
POINTS_PER_RUN = 2000
POINTS_TOTAL = 100_000
POINTS_MIN = 200
# Prediction metrics (subject_kind 'run') by role; the first name present wins.
RUN_METRICS = {
    "sec_per_it": ("sec_per_it", "total_s", "iteration_s"),
    "tflops": ("tflops_per_gpu", "tflops"),
    "gpu_capacity_mib": ("gpu_capacity_mib",),
    "gpu_memory_mib": ("gpu_memory_mib",),
}
TIME_SPLIT = ("compute_s", "bubble_s", "tp_comm_s", "dp_comm_s", "p2p_s")
# Predicted busbw (subject_kind 'collective' or 'bench', subject_id the bench): the message size is
# `detail` as JSON {"size_bytes": N}, or the metric is spelled `busbw_gbps@N`.
BUSBW_METRIC = "busbw_gbps"


@dataclass
class Block:
    """One chart (a `Figure`) or one table (a frame `report_html` renders, with its `options`)."""

    slug: str
    figure: charts.Figure | None = None
    table: pd.DataFrame | None = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Section:
    anchor: str
    title: str
    blocks: list[Block] = field(default_factory=list)


@dataclass
class Report:
    db: str
    generated_at: datetime
    counts: dict[str, int]
    flag_counts: dict[str, int]
    flags: pd.DataFrame
    sections: list[Section]
    runs: pd.DataFrame = field(default_factory=pd.DataFrame)
    tag_options: list[str] = field(default_factory=list)
    detailed: set[int] = field(default_factory=set)
    compare: dict[str, Any] | None = None

    def charts(self) -> dict[str, alt.TopLevelMixin]:
        """Every chart by slug, as Altair charts (for a notebook)."""
        return {b.slug: b.figure.chart() for s in self.sections for b in s.blocks if b.figure is not None}


@dataclass(frozen=True)
class Selection:
    """The runs and benches a report covers (an empty tuple covers none)."""

    run_ids: tuple[int, ...]
    bench_ids: tuple[int, ...]

    def sql(self, kind: str, column: str | None = None) -> str:
        ids = self.run_ids if kind == "run" else self.bench_ids
        return f"{column or kind + '_id'} IN ({', '.join(map(str, ids)) or 'NULL'})"


def resolve_selection(
    store: Store,
    runs: Sequence[str | int] | None = None,
    tags: dict[str, str] | None = None,
    benches: Sequence[int | str] | None = None,
) -> Selection:
    """Everything by default. Naming runs or tags narrows to those runs (and no benches unless named);
    naming benches narrows to those benches (and no runs unless named or tagged)."""
    all_benches = {int(b[0]) for b in store.con.execute("SELECT bench_id FROM benches").fetchall()}
    if runs:
        run_ids = [resolve_run(store, ref) for ref in runs]
    elif tags or not benches:
        run_ids = [int(r[0]) for r in store.con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()]
    else:
        run_ids = []
    if tags:
        tagged = set(tagged_run_ids(store, tags))
        run_ids = [r for r in run_ids if r in tagged]
    bench_ids = [] if runs or tags else sorted(all_benches)
    if benches:
        bench_ids = []
        for ref in benches:
            text = str(ref).strip()
            if not text.isdigit() or int(text) not in all_benches:
                raise TracelogError(
                    f"no bench with id {text!r}; list them with `tracelog sql 'FROM benches'`"
                )
            bench_ids.append(int(text))
    return Selection(tuple(dict.fromkeys(run_ids)), tuple(dict.fromkeys(bench_ids)))


def build(
    store: Store,
    runs: Sequence[str | int] | None = None,
    tags: dict[str, str] | None = None,
    benches: Sequence[int | str] | None = None,
    thresholds: Thresholds = DEFAULT,
) -> Report:
    """Gather every section for the runs and benches in scope, with its charts."""
    scope = resolve_selection(store, runs, tags, benches)
    flags = _flags(store, scope)
    pred = store.query(
        f"""
        SELECT subject_id AS run_id, metric, value, unit, coalesce(formula, 'model') AS formula
        FROM predictions WHERE subject_kind = 'run' AND {scope.sql("run", "subject_id")} AND value IS NOT NULL
        ORDER BY subject_id, metric, formula
        """
    )
    table = overview.runs_table(store, scope, pred, _pick)
    series = _series(store, scope)
    details = _run_sections(store, scope, pred, series)
    sections = [
        *_overlay_sections(store, scope, table, series),
        *_across_runs(table),
        *_collective_sections(store, scope, thresholds),
        *details,
        *_p2p_sections(store, scope, thresholds),
        *_nic_sections(store, scope),
        *_topology_sections(store, scope),
    ]
    compare = None
    if runs and len(scope.run_ids) == 2:
        a, b = scope.run_ids
        compare = {"a": a, "b": b, **overview.differences(store, a, b)}
        compare["labels"] = {
            r: overview.run_label(r, n) for r, n in zip(table["run_id"], table["name"], strict=True)
        }
    return Report(
        db=store.path,
        generated_at=datetime.now().astimezone(),
        counts=_counts(store, scope),
        flag_counts={s: int((flags["severity"] == s).sum()) for s in SEVERITIES},
        flags=flags,
        sections=[s for s in sections if s.blocks],
        runs=table,
        tag_options=[
            f"{k}={v or ''}"
            for k, v in store.con.execute(
                f"SELECT DISTINCT key, value FROM run_tags WHERE {scope.sql('run')} ORDER BY ALL"
            ).fetchall()
        ],
        detailed={int(s.anchor.removeprefix("run-")) for s in details if s.blocks},
        compare=compare,
    )


def _overlay_sections(
    store: Store, scope: Selection, table: pd.DataFrame, buckets: pd.DataFrame
) -> list[Section]:
    """The runs on shared axes, when at least two runs have two points to draw."""
    seq_len = dict(store.con.execute(f"SELECT run_id, seq_len FROM runs WHERE {scope.sql('run')}").fetchall())
    series = overview.overlay_series(buckets, seq_len, len(scope.run_ids))
    if series.empty:
        return []
    labels = {
        int(r): overview.run_label(int(r), n) for r, n in zip(table["run_id"], table["name"], strict=True)
    }
    figure = overlays.overlay(series, overview.warmup_spans(series), labels)
    if figure is None:
        return []
    return [Section("overlays", "runs overlaid: sec/it, TFLOP/s and loss", [Block("overlays", figure)])]


def _counts(store: Store, scope: Selection) -> dict[str, int]:
    row = store.con.execute(
        f"""
        SELECT (SELECT count(DISTINCT source_id) FROM (
                   SELECT source_id FROM runs WHERE {scope.sql("run")}
                   UNION ALL SELECT source_id FROM benches WHERE {scope.sql("bench")})),
               (SELECT count(*) FROM sources), (SELECT count(*) FROM runs), (SELECT count(*) FROM benches)
        """
    ).fetchone()
    assert row is not None
    return {
        "sources": int(row[0]),
        "sources_total": int(row[1]),
        "runs": len(scope.run_ids),
        "runs_total": int(row[2]),
        "benches": len(scope.bench_ids),
        "benches_total": int(row[3]),
    }


def _flags(store: Store, scope: Selection) -> pd.DataFrame:
    return store.query(
        flags_sql(
            f"""(f.subject_kind = 'run' AND {scope.sql("run", "f.subject_id")})
             OR (f.subject_kind <> 'run' AND {scope.sql("bench", "f.subject_id")})""",
            """f.severity, f.rule, f.subject_kind, f.subject_id,
               coalesce(r.name, b.tool || coalesce(' ' || b.collective, '')) AS subject_name,
               f.row_ref, f.measured, f.expected, f.ratio, f.message, f.hint,
               CASE WHEN f.subject_kind = 'run' THEN 'run-' ELSE 'bench-' END || f.subject_id AS anchor""",
        )
    )


def _pick(pred: pd.DataFrame, role: str) -> pd.DataFrame:
    for name in RUN_METRICS[role]:
        rows = pred[pred["metric"] == name]
        if not rows.empty:
            return rows
    return pred.iloc[0:0]


# What each bucket of a run's iterations shows (`_series`).
SERIES_FIGURES = """
    min(iteration) AS it0, max(iteration) AS it, count(*) AS lines, min(line_no) AS line,
    avg(elapsed_s) AS s, min(elapsed_s) AS s_lo, max(elapsed_s) AS s_hi,
    avg(tflops_reported) AS tf, min(tflops_reported) AS tf_lo, max(tflops_reported) AS tf_hi,
    avg(lm_loss) AS loss, min(lm_loss) AS loss_lo, max(lm_loss) AS loss_hi, min(loss_scale) AS scale,
    sum(coalesce(skipped, 0))::BIGINT AS skipped, sum(coalesce(nan, 0))::BIGINT AS nan,
    bool_or(warmup)::INTEGER AS warmup, max(consumed_tokens) AS tok, max(consumed_samples) AS samples
"""


def _series(store: Store, scope: Selection) -> pd.DataFrame:
    """Iterations per run in equal-count buckets of consecutive log lines (one line each when few).

    A line's place in its run (`n`, its rank: one plus the iterations logged on earlier lines) is counted
    over the run's line numbers alone, then joined to the marks, instead of read from `iteration_phase.n`,
    whose window sorts every column of a run at once (a run of 1.76 M logged lines: 0.42 s and 780 MB at
    peak, against 0.24 s and 200 MB). The iterations one physical line carries (a progress bar that
    redraws itself with carriage returns, several steps to a line) share their line's rank, so they fall
    in one bucket, where the window's numbering split them in whatever order it met them."""
    points = max(POINTS_MIN, min(POINTS_PER_RUN, POINTS_TOTAL // max(1, len(scope.run_ids))))
    return store.query(
        f"""
        WITH ranked AS (
            SELECT run_id, line_no,
                   CAST(sum(count(*)) OVER (PARTITION BY run_id ORDER BY line_no) - count(*) + 1 AS BIGINT) AS n
            FROM iterations WHERE {scope.sql("run")} GROUP BY run_id, line_no
        )
        SELECT run_id, {SERIES_FIGURES}
        FROM iteration_marks JOIN ranked USING (run_id, line_no) WHERE {scope.sql("run")}
        GROUP BY run_id, (n - 1) * {points} // logged ORDER BY run_id, it
        """
    )


def _warmup(store: Store, scope: Selection) -> dict[int, tuple[float, float]]:
    """Warm-up span per run: from the start of the first logged interval to the last warm-up line. The
    interval is the iterations between the run's first two logged iterations (`arg_min(..., 2)`, no
    window; by line, then iteration, when one line carries several)."""
    rows = store.con.execute(
        f"""
        SELECT run_id, last_warmup, first - coalesce(first_two[2] - first_two[1], 0)
        FROM (
            SELECT run_id, max(iteration) FILTER (warmup) AS last_warmup, min(iteration) AS first,
                   arg_min(iteration, {{'line': line_no, 'iteration': iteration}}, 2) AS first_two
            FROM iteration_marks WHERE {scope.sql("run")} GROUP BY run_id
        )
        """
    ).fetchall()
    return {
        int(r): (max(0.0, float(lo)), float(hi)) for r, hi, lo in rows if hi is not None and lo is not None
    }


def _memory(store: Store, scope: Selection) -> pd.DataFrame:
    peak = "coalesce(max_reserved_mib, reserved_mib, max_allocated_mib, allocated_mib)"
    return store.query(
        f"""
        SELECT run_id, rank, max({peak}) AS peak_mib, max(coalesce(max_allocated_mib, allocated_mib)) AS alloc_mib,
               arg_max(iteration, {peak}) AS iteration, arg_max(line_no, {peak}) AS line
        FROM memory WHERE {scope.sql("run")} GROUP BY run_id, rank HAVING max({peak}) IS NOT NULL
        ORDER BY run_id, rank NULLS FIRST
        """
    )


def _capacity_mib(gpu_model: str | None) -> float | None:
    gpu = hardware.gpu_for(gpu_model, None)
    for attr, mib_per_unit in (("memory_mib", 1.0), ("memory_gib", 1024.0), ("memory_gb", 1e9 / 2**20)):
        value = getattr(gpu, attr, None)
        if isinstance(value, int | float) and value > 0:
            return float(value) * mib_per_unit
    return None


def _run_sections(store: Store, scope: Selection, pred: pd.DataFrame, buckets: pd.DataFrame) -> list[Section]:
    if not scope.run_ids:
        return []
    runs = store.query(
        f"""
        SELECT r.run_id, r.name, r.gpu_model, src.path AS source, r.line_start, r.line_end, r.framework,
               r.precision, r.seq_len, s.* EXCLUDE (run_id, name, framework, gpu_model, layers, hidden, heads,
               seq_len, vocab, last_iteration, samples_per_s)
        FROM runs r JOIN run_summary s USING (run_id) LEFT JOIN sources src USING (source_id)
        WHERE {scope.sql("run", "r.run_id")} ORDER BY r.run_id
        """
    )
    series = {int(k): g.drop(columns=["tok", "samples"]) for k, g in buckets.groupby("run_id")}
    memory = {int(k): g for k, g in _memory(store, scope).groupby("run_id")}
    by_run = {int(k): g for k, g in pred.groupby("run_id")}
    warmup = _warmup(store, scope)
    sections = []
    for row in runs.itertuples(index=False):
        run_id, gpu_model = int(row.run_id), row.gpu_model
        label = f"run {run_id}: {row.name or 'unnamed'}"
        section = Section(f"run-{run_id}", label)
        p = by_run.get(run_id, pred.iloc[0:0])
        if run_id in series and len(series[run_id]) > 1:
            figure = charts.run_timeline(
                series[run_id], label, warmup.get(run_id), _pick(p, "sec_per_it"), _pick(p, "tflops")
            )
            if figure is not None:
                section.blocks.append(Block(f"run-{run_id}-iterations", figure))
        if run_id in memory and len(memory[run_id]) > 1:  # one peak is a cell of the runs table
            cap, model = _pick(p, "gpu_capacity_mib"), _pick(p, "gpu_memory_mib")
            capacity = float(cap["value"].iloc[0]) if not cap.empty else _capacity_mib(gpu_model)
            predicted = float(model["value"].iloc[0]) if not model.empty else None
            chart = charts.memory(memory[run_id], label, capacity, gpu_model, predicted)
            section.blocks.append(Block(f"run-{run_id}-memory", chart))
        split = p[p["metric"].isin(TIME_SPLIT)]
        if not split.empty:
            measured = None if pd.isna(row.sec_per_it) else float(row.sec_per_it)
            section.blocks.append(
                Block(f"run-{run_id}-time-split", charts.time_split(split, label, measured))
            )
        if section.blocks:
            section.blocks.insert(0, Block(f"run-{run_id}-summary", table=runs[runs["run_id"] == run_id]))
        sections.append(section)
    return sections


def _across_runs(table: pd.DataFrame) -> list[Section]:
    """The layout comparison: measured and predicted per run, for runs with a figure of either."""
    frame = table[["run_id", "name", "tags", "nodes", "gpus", "dp", "tp", "pp", "mbs", "gbs", "sec_per_it"]]
    frame = frame.assign(sec_pred=table["sec_pred"], tflops=table["tflops"], tflops_pred=table["tflops_pred"])
    known = frame[["sec_per_it", "tflops", "sec_pred", "tflops_pred"]].notna().any(axis=1)
    if known.sum() < 2:
        return []
    frame = frame[known].sort_values(["sec_per_it", "run_id"], na_position="last").reset_index(drop=True)
    section = Section("across-runs", "layout comparison: parallel layout against sec/it and TFLOP/s")
    section.blocks.append(Block("across-runs", charts.topology(frame)))
    return [section]


def _benches(store: Store, scope: Selection, where: str) -> pd.DataFrame:
    return store.query(
        f"""
        SELECT bench_id, tool, collective, ranks, nodes, gpus_per_node, gpu_name, gpu_model, dtype,
               array_to_string(hosts, ', ') AS hosts, status, avg_busbw_gbps, wrong_total, line_start
        FROM benches WHERE {scope.sql("bench")} AND {where} ORDER BY bench_id
        """
    )


def _link(bench: Any) -> Any:
    """The catalog link of a bench row; a count the output never printed (pandas' NA) is None here."""
    known = [
        None if pd.isna(v) else v
        for v in (bench.gpu_model, bench.gpu_name, bench.nodes, bench.ranks, bench.gpus_per_node)
    ]
    return hardware.bench_link(*known)


def _collective_sections(store: Store, scope: Selection, t: Thresholds) -> list[Section]:
    benches = _benches(store, scope, "bench_id IN (SELECT bench_id FROM collectives)")
    if benches.empty:
        return []
    label = "'#' || b.bench_id || ' ' || coalesce(b.gpus_per_node::VARCHAR, '?') || 'x' || coalesce(b.nodes::VARCHAR, '?') || coalesce(' ' || b.gpu_name, '')"
    rows = store.query(
        f"""
        SELECT c.bench_id, {label} AS bench, size_bytes, placement, time_us, algbw_gbps, busbw_gbps, wrong,
               line_no AS line
        FROM collectives c JOIN benches b USING (bench_id)
        WHERE {scope.sql("bench", "c.bench_id")} AND busbw_gbps IS NOT NULL ORDER BY 1, placement, size_bytes
        """
    )
    predicted = store.query(
        f"""
        SELECT p.subject_id AS bench_id, {label} AS bench, p.value AS busbw_gbps, coalesce(
                   TRY_CAST(CASE WHEN json_valid(detail) THEN json_extract_string(detail, '$.size_bytes') END AS BIGINT),
                   TRY_CAST(split_part(metric, '@', 2) AS BIGINT)) AS size_bytes
        FROM predictions p JOIN benches b ON b.bench_id = p.subject_id
        WHERE p.subject_kind IN ('collective', 'bench') AND {scope.sql("bench", "p.subject_id")}
          AND split_part(p.metric, '@', 1) = '{BUSBW_METRIC}' AND p.value IS NOT NULL ORDER BY 1, size_bytes
        """
    ).dropna()
    sections = []
    for collective, group in benches.groupby(benches["collective"].fillna("collective"), sort=True):
        ids = set(group["bench_id"])
        links = [link for link in map(_link, group.itertuples()) if link is not None]
        specs = sorted({(link.name, link.unidirectional_gbps, link.bidirectional_gbps) for link in links})
        data, pred = rows[rows["bench_id"].isin(ids)], predicted[predicted["bench_id"].isin(ids)]
        section = Section(f"collective-{collective}", f"nccl-tests: {collective} bus bandwidth")
        chart = charts.busbw(data, str(collective), specs, pred, t.latency_bound)
        section.blocks.append(Block(f"busbw-{collective}", chart))
        section.blocks.append(Block(f"benches-{collective}", table=group, options={"row_anchor": "bench_id"}))
        sections.append(section)
    return sections


def _p2p_sections(store: Store, scope: Selection, t: Thresholds) -> list[Section]:
    benches = _benches(store, scope, "bench_id IN (SELECT bench_id FROM p2p)")
    if benches.empty:
        return []
    cells = store.query(
        f"""
        SELECT bench_id, matrix, src, dst, value, unit, line_no AS line,
               (unit = 'GB/s' AND src <> dst AND value < ? * median(value) FILTER (src <> dst)
                    OVER (PARTITION BY bench_id, matrix))::INTEGER AS outlier
        FROM p2p WHERE {scope.sql("bench")} ORDER BY bench_id, matrix, src, dst
        """,
        [t.p2p_outlier],
    )
    sections = []
    for bench in benches.itertuples():
        section = Section(
            f"bench-{bench.bench_id}", f"p2p: bench {bench.bench_id} {bench.gpu_name or ''}".strip()
        )
        link = _link(bench)
        for matrix, group in cells[cells["bench_id"] == bench.bench_id].groupby("matrix", sort=False):
            spec = ""
            if link is not None and group["unit"].iloc[0] == "GB/s":
                both = "_bi" in str(matrix)
                figure = link.bidirectional_gbps if both else link.unidirectional_gbps
                spec = f"{link.name} {'bi' if both else 'uni'}directional spec {figure:g} GB/s"
            chart = charts.p2p(group, f"bench {bench.bench_id} {matrix}", spec)
            section.blocks.append(Block(f"p2p-{bench.bench_id}-{matrix}", chart))
        sections.append(section)
    return sections


def _nic_sections(store: Store, scope: Selection) -> list[Section]:
    """perftest's runs: one chart of every run's bandwidth over size with what its port allows, and the
    runs' table (a bandwidth run's result rows only: the per-side tables of --report-both repeat them)."""
    runs = store.query(
        f"""
        WITH param AS (
            SELECT bench_id, max(value) FILTER (name = 'test') AS test,
                   max(value) FILTER (name = 'Device') AS device,
                   max(value) FILTER (name = 'bidirectional') AS bidirectional
            FROM bench_params WHERE {scope.sql("bench")} GROUP BY bench_id
        )
        SELECT b.bench_id, '#' || b.bench_id || coalesce(' ' || p.device, '') || coalesce(' ' || p.test, '')
                   || CASE WHEN p.bidirectional = 'yes' THEN ' (both ways)' ELSE '' END AS run,
               p.test, p.device, array_to_string(b.hosts, ', ') AS hosts,
               CASE WHEN p.bidirectional = 'yes' THEN 2 ELSE 1 END AS directions,
               b.status, max(t.bw_avg_gbps) AS best_avg_gbps, c.predicted AS plateau_gbps, c.ratio
        FROM benches b JOIN param p USING (bench_id)
        LEFT JOIN perftest t ON t.bench_id = b.bench_id AND t.report IS NULL AND t.bw_avg_gbps > 0
        LEFT JOIN comparisons c ON c.subject_kind = 'bench' AND c.subject_id = b.bench_id
             AND c.metric = 'nic_plateau_gbps'
        WHERE b.tool = 'perftest' AND {scope.sql("bench", "b.bench_id")}
        GROUP BY ALL ORDER BY b.bench_id
        """
    )
    if runs.empty:
        return []
    rows = store.query(
        f"""
        SELECT t.bench_id, t.size_bytes, t.bw_avg_gbps, t.bw_peak_gbps, t.msg_rate_mpps, t.line_no AS line
        FROM perftest t JOIN benches b USING (bench_id)
        WHERE b.tool = 'perftest' AND {scope.sql("bench", "t.bench_id")} AND t.report IS NULL
          AND t.bw_avg_gbps > 0 ORDER BY t.bench_id, t.size_bytes
        """
    )
    section = Section("perftest", "perftest: NIC bandwidth")
    if not rows.empty:
        names = runs.set_index("bench_id")["run"]
        drawn = rows.assign(run=rows["bench_id"].map(names)).drop(columns=["bench_id"])
        plateaus = runs.dropna(subset=["plateau_gbps"])[["run", "plateau_gbps"]]
        section.blocks.append(Block("perftest-bandwidth", nic_charts.nic_bandwidth(drawn, plateaus)))
    section.blocks.append(
        Block("perftest-runs", table=runs, options={"row_anchor": "bench_id", "columns": "perftest"})
    )
    return [section]


def _topology_sections(store: Store, scope: Selection) -> list[Section]:
    links = store.query(
        f"SELECT bench_id, coalesce(host, '') AS host, a, b, link_kind, link_count, line_no AS line "
        f"FROM links WHERE {scope.sql('bench')} ORDER BY bench_id, host, line_no"
    )
    sections = []
    for bench_id, group in links.groupby("bench_id"):
        section = Section(f"bench-{bench_id}", f"topology: bench {bench_id}")
        for host, per_host in group.groupby("host", sort=False):
            title = f"bench {bench_id} {host}".strip()
            section.blocks.append(
                Block(f"topology-{bench_id}-{len(section.blocks)}", charts.links(per_host, title))
            )
        sections.append(section)
    return sections
