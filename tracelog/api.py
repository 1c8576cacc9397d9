"""The library surface: everything the CLI does, as functions returning pandas DataFrames.

Every function takes the store first (an open `Store`, a path, or None for `TRACELOG_DB` / the default
file) and keyword arguments after it; the CLI is a shell over these, and nothing inside the package
imports this module.

    from tracelog import api
    api.ingest("lab.duckdb", ["run.log"], gpu="a100-sxm4-80gb")
    api.runs("lab.duckdb")
    api.sql("lab.duckdb", "SELECT * FROM iterations LIMIT 5")
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from tracelog import clusters as cluster_config
from tracelog import files, resolve
from tracelog import hardware as catalog
from tracelog.analysis import calibration, link_fit, side_by_side
from tracelog.analysis import refresh as refresher
from tracelog.analysis.plan import PlanRequest
from tracelog.analysis.plan import plan as plan_layouts
from tracelog.analysis.what_if import what_if
from tracelog.errors import TracelogError
from tracelog.ingest import IngestResult
from tracelog.intake import FollowRound, IngestFailure, RunState, follow, ingest
from tracelog.locations import DATA_PATH_ENVVAR, config_folder, data_path
from tracelog.parsers import checkpoints
from tracelog.queries import (
    Db,
    benches,
    connect,
    flags,
    note_run,
    refresh,
    refresh_errors,
    remove_run,
    rename_run,
    resolve_bench,
    resolve_run,
    run_label,
    runs,
    show_bench,
    show_run,
    sources,
    sql,
    tag_run,
    untag_run,
)
from tracelog.store import Store, default_db_path, lake
from tracelog.store import benches as bench_lookup
from tracelog.store import export as exporter
from tracelog.store import flags as flag_list
from tracelog.store import runs as run_lookup

if TYPE_CHECKING:  # Altair and vl-convert: loaded when a report is written, not at every start-up
    import pandas as pd

    from tracelog.report import ReportResult

"""Given a path, a context that yields the callback its ingest reports bytes read to (or None)."""

__all__ = [
    "FollowRound",
    "IngestFailure",
    "IngestResult",
    "PlanRequest",
    "RunState",
    "benches",
    "calibrate",
    "calibrations",
    "add_cluster",
    "clusters",
    "remove_cluster",
    "compare_runs",
    "connect",
    "expand_paths",
    "export_parquet",
    "flags",
    "follow",
    "hardware",
    "ingest",
    "note_run",
    "plan",
    "predict",
    "refresh",
    "refresh_errors",
    "remove_run",
    "rename_run",
    "report",
    "resolve_bench",
    "resolve_run",
    "run_label",
    "runs",
    "set_hardware",
    "show_bench",
    "show_run",
    "sources",
    "sql",
    "tag_run",
    "untag_run",
]


def expand_paths(paths: Iterable[str]) -> list[str]:
    """Files as given, folders recursively, globs expanded (a name that exists is never a pattern)."""
    return files.expand_paths(paths)


def export_parquet(db: Db, directory: str, *, overwrite: bool = False) -> pd.DataFrame:
    """Every table as Parquet under `directory`, hive-partitioned by run, bench or source where rows hang
    off one (see `store.export`); one row per table: its name, rows, folder and partition column."""
    import pandas as pd  # loaded by what returns a frame, not at start-up

    done = exporter.export_parquet(connect(db, read_only=True), directory, overwrite=overwrite)
    return pd.DataFrame([vars(e) for e in done])


def compare_runs(db: Db, refs: list[str | int], *, all_params: bool = False) -> dict[str, pd.DataFrame]:
    """Configuration (differences only unless `all_params`) and steady-state metrics against the first run."""
    store = connect(db)
    run_ids = [run_lookup.resolve_run(store, ref) for ref in refs]
    if len(set(run_ids)) < 2:
        raise TracelogError("compare needs at least two different runs")
    return {
        "configuration": side_by_side.config_side_by_side(store, run_ids, all_params),
        "metrics": side_by_side.metrics_side_by_side(store, run_ids),
    }


def predict(
    db: Db = None,
    run: str | int | None = None,
    *,
    gpu: str | None = None,
    fabric: str | None = None,
    efficiency: float | None = None,
    distributed_optimizer: bool | None = None,
    attention_backend: str | None = None,
    calibrated: bool = True,
    run_params: dict[str, str] | None = None,
    checkpoint: str | None = None,
    **config: object,
) -> pd.DataFrame:
    """What the model predicts, with its parts (time, throughput, memory, FLOPs) and what it had to
    assume: for a stored run (`run`, with any value overridden by the keyword arguments), or for a
    configuration given as keywords (runs-table names: layers, hidden, heads, seq_len, vocab, gbs, mbs,
    tp, pp, dp, ...). `gpu` is a catalog id or the name a tool prints (an unknown one is refused, as
    `plan` and `set` refuse it), `fabric` a catalog id; `efficiency` the share of the dense peak;
    `attention_backend` how attention ran (flash, fused, unfused, local: Megatron-LM's names; a run's own
    arguments say it, a configuration alone takes its framework's default, flash for Megatron-LM).
    The constants `calibrate` stored are used unless `calibrated` is False (the textbook model). Without
    a run, `db` is only read for those constants, and only when given. `run_params` are run parameters
    as a log prints them (`torch_compile`, `overlap_grad_reduce`, ...: "True"/"False"), over the run's.
    `checkpoint` names a published checkpoint whose shape stands where the keywords give none."""
    if checkpoint is not None:
        found = _checkpoint(checkpoint)
        config = {**checkpoints.shape_columns(found), **config}
        run_params = {**checkpoints.shape_params(found, checkpoint), **(run_params or {})}
    if run is not None:
        store: Store | None = connect(db)
    else:
        store = connect(db, read_only=True) if db is not None and calibrated else None
    run_id = run_lookup.resolve_run(store, run) if store is not None and run is not None else None
    overrides = {**config, "gpu_model": catalog.resolve_gpu_id(gpu) if gpu else None, "fabric": fabric}
    return what_if(
        store,
        run_id,
        overrides,
        efficiency=efficiency,
        distributed_optimizer=distributed_optimizer,
        attention_backend=attention_backend,
        run_params=run_params,
        calibrated=calibrated,
    )


def calibrate(
    db: Db = None,
    *,
    runs: list[str | int] | None = None,
    tags: dict[str, str] | None = None,
    benches: list[int | str] | None = None,
) -> pd.DataFrame:
    """Fit the model's free constants to the measured runs and benches (only `runs`, runs with `tags` and
    `benches` when any is given: `runs=[1]` fits no bench): a compute scale per GPU model and precision from runs with a steady sec/it,
    α and the link efficiency per intra-node link from single-node nccl-tests benches and per fabric
    from multi-node ones (`analysis.calibration`). Each is stored in `calibrations` with
    the subjects it came from, replacing an earlier fit of the same constant and scope, and every
    prediction, comparison and flag is recomputed with them. Returns one row per constant: value,
    textbook value, n, the error at the fit, on subjects left out of the fit, and uncalibrated."""
    store = connect(db)
    run_ids = [run_lookup.resolve_run(store, r) for r in runs] if runs else None
    if tags:
        tagged = run_lookup.tagged_run_ids(store, tags)
        run_ids = tagged if run_ids is None else [r for r in run_ids if r in tagged]
    bench_ids = [bench_lookup.resolve_bench(store, b) for b in benches] if benches else None
    selected = run_ids is not None or bench_ids is not None
    if selected:  # a selection fits what it names, nothing more
        run_ids, bench_ids = run_ids or [], bench_ids or []
    fits = refresher.calibrate(store, _id_predicate("run_id", run_ids), _id_predicate("bench_id", bench_ids))
    if not fits:
        raise TracelogError(
            f"nothing to calibrate{' among the runs and benches selected' if selected else ''}: no run with "
            "a measured sec/it and the inputs to predict it (shapes, layout, --gpu), and no nccl-tests bench "
            "on a known link"
        )
    frame = calibration.fits_frame(fits)
    frame.attrs["notes"] = link_fit.bound_notes(fits)
    return frame


def _id_predicate(column: str, ids: list[int] | None) -> str:
    if ids is None:
        return "TRUE"
    return f"{column} IN ({', '.join(str(int(i)) for i in ids)})" if ids else "FALSE"


def calibrations(db: Db = None) -> pd.DataFrame:
    """The stored constants: scope, value, the subjects they came from and their errors."""
    return calibration.table(connect(db))


def hardware(gpu_or_link: str | None = None, *, kind: str = "gpus") -> pd.DataFrame:
    """The hardware catalog (`gpus` or `links`), or one GPU or link in full, each figure with its source."""
    if gpu_or_link is None:
        return catalog.catalog(kind)
    return catalog.describe(gpu_or_link)


def set_hardware(
    db: Db,
    ref: str | int,
    *,
    gpu: str | None = None,
    fabric: str | None = None,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    nics_per_node: int | None = None,
) -> tuple[int, int]:
    """Say what a run, or a bench written `bench:ID`, ran on after the fact (catalog ids for `gpu` and
    `fabric`; `nics_per_node` multiplies a fabric given per port), then recompute its predictions and
    flags. Returns its id and its number of flags."""
    store = connect(db)
    values: dict[str, object] = {
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "nics_per_node": nics_per_node,
    }
    if gpu is not None:
        values["gpu_model"] = catalog.resolve_gpu_id(gpu)
    if fabric is not None:
        values["fabric"] = catalog.link(fabric).id
    values = {k: v for k, v in values.items() if v is not None}
    if not values:
        raise TracelogError(
            "nothing to set: give --gpu, --fabric, --nodes, --gpus-per-node, --nics-per-node or --model"
        )
    if bench_lookup.is_bench_ref(ref):
        bench_id = bench_lookup.resolve_bench(store, ref)
        _set_bench(store, bench_id, values)
        refresher.refresh(store, [], [bench_id])
        return bench_id, bench_lookup.flag_count(store, bench_id)
    run_id = run_lookup.resolve_run(store, ref)
    _set_run(store, run_id, values)
    refresher.refresh(store, [run_id], [])
    return run_id, len(flag_list.flags(store, run_ids=[run_id]))


def _checkpoint(name: str) -> checkpoints.Checkpoint:
    found = checkpoints.checkpoint(name)
    if found is None:
        raise TracelogError(
            f"no published checkpoint known by the name {name!r}; tracelog knows {checkpoints.KNOWN} "
            "(a Hugging Face id or a folder of that name)"
        )
    return found


def checkpoint_shape(name: str) -> dict[str, object]:
    """A published checkpoint's shape as `PlanRequest` fields (an unknown name is an error)."""
    found = _checkpoint(name)
    columns = checkpoints.shape_columns(found)
    return {
        **{k: v for k, v in columns.items() if k in PlanRequest.__dataclass_fields__},
        "kv_channels": found.kv_channels,
        "tied_embeddings": found.tied is not False,
        "llama_block": True,
    }


def set_model(db: Db, ref: str | int, checkpoint: str) -> tuple[int, int]:
    """Say which published checkpoint a run trained, where its log printed no shape (or the wrong one): the
    run takes the checkpoint's shape (`parsers.checkpoints`) and its predictions and flags are recomputed.
    Returns its id and its number of flags."""
    found = _checkpoint(checkpoint)
    store = connect(db)
    run_id = run_lookup.resolve_run(store, ref)
    params = checkpoints.shape_params(found, checkpoint)
    params["shape_from"] = f"checkpoint {checkpoint.strip()} (tracelog set)"
    run_lookup.set_shape(store, run_id, checkpoints.shape_columns(found), params)
    refresher.refresh(store, [run_id], [])
    return run_id, len(flag_list.flags(store, run_ids=[run_id]))


@lake.retried
def _set_bench(store: Store, bench_id: int, values: dict[str, object]) -> None:
    with store.transaction():
        bench_lookup.set_columns(store, bench_id, values)
        resolve.record_set(store, "benches", bench_id, values)


@lake.retried
def _set_run(store: Store, run_id: int, values: dict[str, object]) -> None:
    with store.transaction():
        gpus, nodes, per_node = store.con.execute(
            "SELECT gpus, nodes, gpus_per_node FROM runs WHERE run_id = ?", [run_id]
        ).fetchone() or (None, None, None)
        nodes, per_node = values.get("nodes", nodes), values.get("gpus_per_node", per_node)
        if gpus and nodes and per_node and (gpus > nodes * per_node or gpus <= (nodes - 1) * per_node):  # type: ignore[operator]
            raise TracelogError(
                f"run {run_id} has {gpus} GPUs: they do not take {nodes} node(s) of {per_node} GPUs"
            )
        run_lookup.set_columns_in(store, run_id, values)
        resolve.record_set(store, "runs", run_id, values)


def report(
    db: Db = None,
    *,
    output: str | os.PathLike[str] | None = None,
    runs: list[str | int] | None = None,
    tags: dict[str, str] | None = None,
    benches: list[int | str] | None = None,
    png_dir: str | os.PathLike[str] | None = None,
) -> ReportResult:
    """Write the self-contained HTML report (default `reports/tracelog-report.html`); narrowed to runs,
    tags or benches when given; `png_dir` also writes each chart as a PNG. Returns a `ReportResult`.
    The database is opened read-only."""
    # Lazy on purpose (Altair at every start-up otherwise): LAZY_IMPORTS in tests/test_architecture.py.
    from tracelog.report import write_report

    return write_report(db, output, runs, tags, benches, png_dir)


def plan(db: Db, request: PlanRequest) -> pd.DataFrame:
    """DP×TP×PP×MBS layouts of a GPT (`PlanRequest`), feasible ones ranked by predicted sec/it;
    `request.include_rejected` adds the others with their reason. With a database, layouts already
    measured there show the run and its sec/it and TFLOPs; with None nothing is looked up (no database
    is opened or created). Notes on what was assumed are in `frame.attrs["notes"]`."""
    return plan_layouts(request, connect(db, read_only=True) if db is not None else None)


def clusters(db: Db = None, paths: Iterable[str] = ()) -> pd.DataFrame:
    """The `[cluster.NAME]` sections that apply to this database (and to files under `paths`), first
    found first, with the tracelog.toml each comes from."""
    import pandas as pd  # loaded by what returns a frame, not at start-up

    found = cluster_config.load(*_location(db, paths)).found
    rows = [
        {
            "name": c.name,
            "gpu": c.gpu_model,
            "gpus_per_node": c.gpus_per_node,
            "fabric": c.fabric,
            "nics_per_node": c.nics_per_node,
            "hosts": ", ".join(c.hosts),
            "paths": ", ".join(c.paths),
            "config": c.config,
        }
        for c in found
    ]
    columns = ["name", "gpu", "gpus_per_node", "fabric", "nics_per_node", "hosts", "paths", "config"]
    return pd.DataFrame(rows, columns=columns).astype({"gpus_per_node": "Int64", "nics_per_node": "Int64"})


def cluster_file(db: Db = None) -> Path:
    """The tracelog.toml `cluster add` and `cluster rm` edit: the one next to the database."""
    path, _, data = _location(db)
    folder = config_folder(path, data)
    if folder is None and "://" in (data_path(data) or ""):
        raise TracelogError(
            "a DuckLake store whose data is on object storage has no folder for its tracelog.toml: put "
            "the cluster in a tracelog.toml beside the logs, or in the user's (~/.config/tracelog/)",
            path,
        )
    if folder is None:
        raise TracelogError(
            "a DuckLake store keeps its tracelog.toml in its data folder: give --data-path "
            f"(or {DATA_PATH_ENVVAR}), a local or shared folder",
            path,
        )
    return folder / cluster_config.CONFIG_NAME


def _location(db: Db, paths: Iterable[str] = ()) -> tuple[str, list[str], str | None]:
    """(the store's address, `paths`, its data folder) for the tracelog.toml lookup: an open store
    knows its data folder (given, or the one a DuckLake store recorded); an address only the
    environment's."""
    if isinstance(db, Store):
        return db.path, list(paths), db.data_path
    return str(db or default_db_path()), list(paths), None


def add_cluster(
    db: Db,
    name: str,
    *,
    gpu: str | None = None,
    gpus_per_node: int | None = None,
    fabric: str | None = None,
    nics_per_node: int | None = None,
    hosts: Iterable[str] = (),
    paths: Iterable[str] = (),
) -> Path:
    """Add (or replace) `[cluster.NAME]` in the tracelog.toml next to the database; returns that file.
    The files ingested after it that match its hosts or paths take its facts where nothing nearer says."""
    config = cluster_file(db)
    cluster = cluster_config.Cluster(
        name=name,
        config=str(config),
        gpu_model=catalog.resolve_gpu_id(gpu) if gpu else None,
        gpus_per_node=gpus_per_node,
        fabric=catalog.link(fabric).id if fabric else None,
        nics_per_node=nics_per_node,
        hosts=tuple(hosts),
        paths=tuple(paths),
    )
    if not cluster.facts():
        raise TracelogError(
            "a cluster needs at least one of --gpu, --gpus-per-node, --fabric, --nics-per-node"
        )
    if not cluster.hosts and not cluster.paths:
        raise TracelogError("say which logs belong to the cluster: --host PATTERN or --path GLOB")
    cluster_config.write_cluster(config, cluster)
    return config


def remove_cluster(db: Db, name: str) -> Path:
    """Remove `[cluster.NAME]` from the tracelog.toml next to the database; returns that file."""
    config = cluster_file(db)
    cluster_config.remove_cluster(config, name)
    return config
