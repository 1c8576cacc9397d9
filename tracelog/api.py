"""The library surface: everything the CLI does, as functions returning pandas DataFrames.

import tracelog
tracelog.ingest(["run.log"], db="lab.duckdb")
tracelog.runs(db="lab.duckdb")
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from tracelog.benches import benches as benches  # re-exported: the library surface is this module
from tracelog.benches import resolve_bench as resolve_bench
from tracelog.benches import show_bench as show_bench
from tracelog.errors import TracelogError
from tracelog.ingest import IngestResult, Progress, RunOptions, expand_paths, ingest_file
from tracelog.store import Store

if TYPE_CHECKING:  # the report module loads Altair: only when a report is written
    from tracelog.report import ReportResult

RUN_LIST_COLUMNS = [
    "run_id",
    "name",
    "framework",
    "gpu_model",
    "nodes",
    "gpus",
    "dp",
    "tp",
    "pp",
    "mbs",
    "gbs",
    "layers",
    "hidden",
    "heads",
    "seq_len",
    "vocab",
    "params",
    "sec_per_it",
    "samples_per_s",
    "tflops_reported",
    "final_loss",
]


def connect(db: str | Store | None = None, read_only: bool = False) -> Store:
    """An open store: pass a path, an already open `Store`, or nothing for `TRACELOG_DB` / the default."""
    return db if isinstance(db, Store) else Store(db, read_only=read_only)


@dataclass
class IngestFailure:
    path: str
    error: TracelogError


def ingest(
    paths: Iterable[str],
    db: str | Store | None = None,
    format: str | None = None,
    name: str | None = None,
    tags: dict[str, str] | None = None,
    gpu: str | None = None,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    force: bool = False,
    progress: Progress | None = None,
    fabric: str | None = None,
) -> list[IngestResult | IngestFailure]:
    """Ingest files, folders, globs or '-' (stdin); each file in its own transaction.

    `gpu` is a catalog id or the name a tool prints (`NVIDIA A100-SXM4-80GB`), `fabric` a catalog link
    id; both are checked before anything is read. A file that fails is reported and skipped; the files
    before and after it still land.
    """
    from tracelog import hardware

    gpu_model = hardware.resolve_gpu_id(gpu) if gpu else None
    fabric_id = hardware.link(fabric).id if fabric else None
    store = connect(db)
    options = RunOptions(
        name=name,
        tags=dict(tags or {}),
        gpu_model=gpu_model,
        fabric=fabric_id,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
    )
    results: list[IngestResult | IngestFailure] = []
    for path in expand_paths(paths):
        try:
            result = ingest_file(store, path, format, options, force, progress)
        except TracelogError as exc:
            results.append(IngestFailure(path, exc))
            continue
        results.append(result)
        if result.status != "already ingested" and result.source_id is not None:
            refresh_source(store, result.source_id)
    return results


def refresh_source(store: Store, source_id: int) -> int:
    """Recompute the model's predictions and the flags for one source's runs and benches."""
    from tracelog import compare

    run_ids = [
        r[0] for r in store.con.execute("SELECT run_id FROM runs WHERE source_id = ?", [source_id]).fetchall()
    ]
    bench_ids = [
        b[0]
        for b in store.con.execute("SELECT bench_id FROM benches WHERE source_id = ?", [source_id]).fetchall()
    ]
    return compare.refresh(store, run_ids, bench_ids)


def _tag_filter(tags: dict[str, str] | None) -> tuple[str, list[str]]:
    if not tags:
        return "", []
    clauses, params = [], []
    for key, value in tags.items():
        clauses.append("run_id IN (SELECT run_id FROM run_tags WHERE key = ? AND value = ?)")
        params += [key, value]
    return " WHERE " + " AND ".join(clauses), params


def runs(db: str | Store | None = None, tags: dict[str, str] | None = None) -> pd.DataFrame:
    """One row per run: configuration and steady-state medians (warm-up excluded; see run_summary)."""
    store = connect(db)
    where, params = _tag_filter(tags)
    cols = ", ".join(RUN_LIST_COLUMNS)
    return store.query(f"SELECT {cols} FROM run_summary{where} ORDER BY run_id", params)


def resolve_run(store: Store, ref: str | int) -> int:
    """A run by id, by unique name, or by a unique prefix of its name; ambiguity lists the candidates."""
    text = str(ref).strip()
    if text.isdigit() and store.scalar("SELECT count(*) FROM runs WHERE run_id = ?", [int(text)]):
        return int(text)
    exact = store.con.execute("SELECT run_id FROM runs WHERE name = ?", [text]).fetchall()
    if len(exact) == 1:
        return int(exact[0][0])
    found = (
        exact
        or store.con.execute(
            "SELECT run_id FROM runs WHERE starts_with(name, ?) ORDER BY run_id", [text]
        ).fetchall()
    )
    if len(found) == 1:
        return int(found[0][0])
    if not found:
        raise TracelogError(f"no run matches {text!r} (by id, name or name prefix); see `tracelog runs`")
    names = store.con.execute(
        f"SELECT run_id, name FROM runs WHERE run_id IN ({', '.join(str(r[0]) for r in found)}) ORDER BY run_id"
    ).fetchall()
    listing = "; ".join(f"{rid}: {name}" for rid, name in names[:20])
    raise TracelogError(f"{text!r} matches {len(found)} runs, name one of them: {listing}")


def show_run(ref: str | int, db: str | Store | None = None) -> dict[str, pd.DataFrame]:
    """One run in full: summary, configuration, tags, parameters, iterations, memory and timers."""
    store = connect(db)
    run_id = resolve_run(store, ref)
    one = [run_id]
    return {
        "summary": store.query("SELECT * FROM run_summary WHERE run_id = ?", one),
        "run": store.query("SELECT * FROM runs WHERE run_id = ?", one),
        "tags": store.query("SELECT key, value FROM run_tags WHERE run_id = ? ORDER BY key", one),
        "params": store.query(
            "SELECT name, value, line_no FROM run_params WHERE run_id = ? ORDER BY line_no", one
        ),
        "iterations": store.query(
            "SELECT iteration, elapsed_s, tflops_reported, samples_per_s, lm_loss, loss_scale, grad_norm, "
            "skipped, nan, warmup, line_no FROM iteration_phase WHERE run_id = ? ORDER BY line_no",
            one,
        ),
        "memory": store.query(
            "SELECT rank, iteration, allocated_mib, max_allocated_mib, reserved_mib, max_reserved_mib, line_no "
            "FROM memory WHERE run_id = ? ORDER BY line_no",
            one,
        ),
        "timers": store.query(
            "SELECT name, count(*) AS lines, median(time_ms) AS median_ms, max(time_ms) AS max_ms "
            "FROM timers WHERE run_id = ? GROUP BY name ORDER BY median_ms DESC",
            one,
        ),
    }


def sql(query: str, db: str | Store | None = None) -> pd.DataFrame:
    """Any SQL over the store."""
    return connect(db).query(query)


def sources(db: str | Store | None = None) -> pd.DataFrame:
    return connect(db).query("SELECT * FROM sources ORDER BY source_id")


def compare_runs(
    refs: list[str | int], db: str | Store | None = None, all_params: bool = False
) -> dict[str, pd.DataFrame]:
    """Configuration (differences only unless `all_params`) and steady-state metrics against the first run."""
    from tracelog import experiments

    store = connect(db)
    run_ids = [resolve_run(store, ref) for ref in refs]
    if len(set(run_ids)) < 2:
        raise TracelogError("compare needs at least two different runs")
    return {
        "configuration": experiments.config_side_by_side(store, run_ids, all_params),
        "metrics": experiments.metrics_side_by_side(store, run_ids),
    }


def tag_run(ref: str | int, tags: dict[str, str], db: str | Store | None = None) -> int:
    from tracelog import annotate, compare

    store = connect(db)
    run_id = resolve_run(store, ref)
    annotate.tag(store, run_id, tags)
    compare.refresh(store, [run_id], [])
    return run_id


def untag_run(ref: str | int, keys: list[str], db: str | Store | None = None) -> int:
    from tracelog import annotate

    store = connect(db)
    return annotate.untag(store, resolve_run(store, ref), keys)


def note_run(ref: str | int, text: str, db: str | Store | None = None) -> int:
    from tracelog import annotate

    store = connect(db)
    run_id = resolve_run(store, ref)
    annotate.note(store, run_id, text)
    return run_id


def rename_run(ref: str | int, name: str, db: str | Store | None = None) -> int:
    from tracelog import annotate

    store = connect(db)
    run_id = resolve_run(store, ref)
    annotate.rename(store, run_id, name)
    return run_id


def remove_run(ref: str | int, db: str | Store | None = None) -> int:
    from tracelog import annotate

    store = connect(db)
    run_id = resolve_run(store, ref)
    annotate.remove(store, run_id)
    return run_id


def refresh(db: str | Store | None = None, thresholds: dict[str, str] | None = None) -> int:
    """Recompute every prediction, comparison and flag; returns the number of flags."""
    from tracelog import compare
    from tracelog.thresholds import DEFAULT

    return compare.refresh(connect(db), thresholds=DEFAULT.with_overrides(thresholds or {}))


PREDICT_CONFIG_KEYS = (
    "layers", "hidden", "heads", "seq_len", "vocab", "ffn_hidden", "query_groups", "swiglu", "params",
    "gbs", "mbs", "tp", "pp", "dp", "cp", "vp", "sequence_parallel", "recompute", "zero_stage", "precision",
    "gpus", "nodes", "gpus_per_node", "framework",
)  # fmt: skip


def predict(
    run: str | int | None = None,
    db: str | Store | None = None,
    *,
    gpu: str | None = None,
    fabric: str | None = None,
    efficiency: float | None = None,
    distributed_optimizer: bool | None = None,
    **config: object,
) -> pd.DataFrame:
    """What the model predicts, with its parts (time, throughput, memory, FLOPs) and what it had to
    assume: for a stored run (`run`, with any value overridden by the keyword arguments), or for a
    configuration given as keywords (runs-table names: layers, hidden, heads, seq_len, vocab, gbs, mbs,
    tp, pp, dp, ...). `gpu` and `fabric` are catalog ids; `efficiency` the share of the dense peak."""
    from tracelog import predict as model
    from tracelog import run_inputs
    from tracelog.model.timing import DEFAULT_COMPUTE_EFFICIENCY

    unknown = sorted(set(config) - set(PREDICT_CONFIG_KEYS))
    if unknown:
        raise TracelogError(
            f"unknown configuration {', '.join(unknown)}; known: {', '.join(PREDICT_CONFIG_KEYS)}"
        )
    overrides = {k: v for k, v in {**config, "gpu_model": gpu, "fabric": fabric}.items() if v is not None}
    if run is not None:
        store = connect(db)
        run_id = resolve_run(store, run)
        ((row, params),) = run_inputs.load_rows(store, f"run_id = {run_id}")
    else:
        if not config.get("layers"):
            raise TracelogError(
                "name a run, or give the model (layers, hidden, heads, seq, vocab) and layout"
            )
        row, params = {"run_id": 0, "framework": "megatron"}, {}
    row.update(overrides)
    if distributed_optimizer is not None:
        params["use_distributed_optimizer"] = str(distributed_optimizer)
    inputs = run_inputs.build(row, params)
    rows = model.run_prediction(inputs, DEFAULT_COMPUTE_EFFICIENCY if efficiency is None else efficiency)
    return model.prediction_table(rows)


def hardware(gpu_or_link: str | None = None, kind: str = "gpus") -> pd.DataFrame:
    """The hardware catalog (`gpus` or `links`), or one GPU or link in full, each figure with its source."""
    from tracelog import hardware as catalog

    if gpu_or_link is None:
        return catalog.catalog(kind)
    return catalog.describe(gpu_or_link)


def set_hardware(
    ref: str | int,
    db: str | Store | None = None,
    *,
    gpu: str | None = None,
    fabric: str | None = None,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
) -> int:
    """Say what a run ran on after the fact (catalog ids for `gpu` and `fabric`), then recompute its
    predictions and flags. Returns the run id."""
    from tracelog import annotate, compare
    from tracelog import hardware as catalog

    store = connect(db)
    run_id = resolve_run(store, ref)
    values: dict[str, object] = {"nodes": nodes, "gpus_per_node": gpus_per_node}
    if gpu is not None:
        values["gpu_model"] = catalog.resolve_gpu_id(gpu)
    if fabric is not None:
        values["fabric"] = catalog.link(fabric).id
    values = {k: v for k, v in values.items() if v is not None}
    if not values:
        raise TracelogError("nothing to set: give --gpu, --fabric, --nodes or --gpus-per-node")
    annotate.set_columns(store, run_id, values)
    compare.refresh(store, [run_id], [])
    return run_id


def flags(
    db: str | Store | None = None,
    severity: str | None = None,
    rule: str | None = None,
    runs: list[str | int] | None = None,
    tags: dict[str, str] | None = None,
) -> pd.DataFrame:
    """Flags, most severe first: rule, subject, measured against expected, message and a hint."""
    from tracelog import compare

    store = connect(db)
    run_ids = [resolve_run(store, r) for r in runs] if runs else None
    if tags:
        tagged = list(runs_frame_ids(store, tags))
        run_ids = tagged if run_ids is None else [r for r in run_ids if r in tagged]
    return compare.flags(store, severity, rule, run_ids)


def runs_frame_ids(store: Store, tags: dict[str, str]) -> list[int]:
    where, params = _tag_filter(tags)
    return [int(r[0]) for r in store.con.execute(f"SELECT run_id FROM runs{where}", params).fetchall()]


def report(
    db: str | Store | None = None,
    output: str | None = None,
    runs: list[str | int] | None = None,
    tags: dict[str, str] | None = None,
    benches: list[int | str] | None = None,
    png_dir: str | None = None,
) -> ReportResult:
    """Write the self-contained HTML report (default `reports/tracelog-report.html`); narrowed to runs,
    tags or benches when given; `png_dir` also writes each chart as a PNG. Returns a `ReportResult`."""
    from tracelog.report import write_report

    return write_report(db, output, runs, tags, benches, png_dir)


def plan(
    gpus: int,
    gpu: str,
    layers: int,
    hidden: int,
    heads: int,
    seq_len: int,
    vocab: int,
    gbs: int,
    *,
    gpus_per_node: int = 8,
    zero_stage: int = 0,
    precision: str = "bf16",
    recompute: str = "full",
    sequence_parallel: bool = False,
    fabric: str | None = None,
    efficiency: float | None = None,
    constraints: Iterable[str] = (),
    top: int | None = 20,
    include_rejected: bool = False,
    db: str | Store | None = None,
) -> pd.DataFrame:
    """DP×TP×PP×MBS layouts of a GPT on `gpus` GPUs of catalog id `gpu`, feasible ones ranked by predicted
    sec/it (see `tracelog.plan.plan_layouts`); `include_rejected` adds the others with their reason.
    `efficiency` is the share of the dense peak the GEMMs sustain (default 0.52). With `db`, layouts
    already measured there show the run and its sec/it and TFLOPs; without it nothing is looked up (no
    database is opened or created). Notes on what was assumed are in `frame.attrs["notes"]`."""
    from tracelog import hardware
    from tracelog.model import DEFAULT_COMPUTE_EFFICIENCY, ModelConfig
    from tracelog.plan import mark_measured, plan_layouts

    cfg = ModelConfig(layers=layers, hidden=hidden, heads=heads, seq_len=seq_len, vocab=vocab)
    frame = plan_layouts(
        cfg,
        gpus,
        gpu,
        gbs,
        gpus_per_node=gpus_per_node,
        zero_stage=zero_stage,
        precision=precision,
        recompute=recompute,
        sequence_parallel=sequence_parallel,
        fabric=fabric,
        compute_efficiency=DEFAULT_COMPUTE_EFFICIENCY if efficiency is None else efficiency,
        constraints=list(constraints),
        top=top,
        include_rejected=include_rejected,
    )
    if db is None:
        return frame
    return mark_measured(frame, connect(db), cfg, hardware.gpu(gpu).id, gpus, gbs, gpus_per_node)
