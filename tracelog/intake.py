"""Paths to the store: files, folders and globs ingested one transaction each, each file's predictions
and flags refreshed after it lands, and `follow`, which goes on ingesting what a run adds to its logs.

`ingest.ingest_file` takes one file; this is what a command does with many: expand the paths once,
check what the user said about the runs against the catalog before anything is read, parse ahead in
worker processes when asked (`parse_jobs`), and keep going past a file that fails.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from tracelog import clusters as cluster_config
from tracelog import files, parse_jobs
from tracelog import hardware as catalog
from tracelog.errors import TracelogError
from tracelog.ingest import IngestResult, Progress, RunOptions, Unrecognised, ingest_file
from tracelog.parsers import checkpoints
from tracelog.queries import Db, connect, refresher
from tracelog.store import Store, StoreLocked
from tracelog.store.runs import PREDICTED_SQL
from tracelog.watch import Watch

ProgressFor = Callable[[str], AbstractContextManager[Progress | None]]


@dataclass
class IngestFailure:
    path: str
    error: TracelogError


def ingest(
    db: Db,
    paths: Iterable[str],
    *,
    parser: str | None = None,
    name: str | None = None,
    tags: dict[str, str] | None = None,
    gpu: str | None = None,
    fabric: str | None = None,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    nics_per_node: int | None = None,
    model: str | None = None,
    force: bool = False,
    verify: bool = False,
    progress: ProgressFor | None = None,
    jobs: int = 1,
    complete: bool = False,
) -> list[IngestResult | IngestFailure]:
    """Ingest files, folders, globs or '-' (stdin); each file in its own transaction.

    Paths are expanded once, here. `gpu` is a catalog id or the name a tool prints (`NVIDIA
    A100-SXM4-80GB`), `fabric` a catalog link id (a port's counts `nics_per_node` of them); both are
    checked before anything is read, as is `model`, a published checkpoint the runs trained (its shape
    stands for theirs, `parsers.checkpoints`). `parser`
    skips detection. A file that fails is reported and skipped; the files before and after it still land.
    `verify` checks every MiB of a grown file's old bytes, not a sample (`fingerprint.verify_prefix`).
    `jobs` > 1 parses that many files at once in worker processes while this process writes them, in
    order, one transaction each: the database is the one a serial ingest gives (`parse_jobs`); 0 is one
    worker per core. `complete` says the files are finished: a last line without its newline is read as it
    is, not held back until its newline arrives (`files.holds_last_line`).
    """
    store = connect(db)
    paths = list(paths)
    options = _run_options(
        store,
        paths,
        name=name,
        tags=tags,
        gpu=gpu,
        fabric=fabric,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        nics_per_node=nics_per_node,
        model=model,
    )
    results: list[IngestResult | IngestFailure] = []
    expanded = files.expand(paths)
    results.extend(IngestResult(path, "skipped", warning=why) for path, why in expanded.skipped)
    workers = parse_jobs.worker_count(jobs)
    with (
        parse_jobs.ParsedAhead([p for p, _ in expanded.files], parser, workers, complete)
        if workers > 1 and len(expanded.files) > 1
        else nullcontext()
    ) as ahead:
        _ingest_files(
            store, expanded.files, parser, options, force, verify, progress, ahead, results, complete
        )
    return results


def _run_options(
    store: Store,
    paths: list[str],
    *,
    name: str | None = None,
    tags: dict[str, str] | None = None,
    gpu: str | None = None,
    fabric: str | None = None,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    nics_per_node: int | None = None,
    model: str | None = None,
) -> RunOptions:
    """What `ingest` was told about the runs, checked against the catalog before anything is read."""
    if model is not None and checkpoints.checkpoint(model) is None:
        raise TracelogError(
            f"no published checkpoint known by the name {model!r}; tracelog knows {checkpoints.KNOWN}"
        )
    return RunOptions(
        clusters=cluster_config.load(store.path, paths, store.data_path),
        name=name,
        tags=dict(tags or {}),
        gpu_model=catalog.resolve_gpu_id(gpu) if gpu else None,
        fabric=catalog.link(fabric).id if fabric else None,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        nics_per_node=nics_per_node,
        checkpoint=model,
    )


@dataclass
class FollowRound:
    """What one round of `follow` did: the files it ingested (or failed to), the flags raised since the
    round before, and where each run of those files stands."""

    results: list[IngestResult | IngestFailure]
    new_flags: list[tuple[str, str, str, int, str]]  # rule, severity, subject kind, subject id, message
    runs: list[RunState] = field(default_factory=list)


@dataclass
class RunState:
    """Where a run that gained lines in a round stands: its last iteration and steady-state figures
    (warm-up left out, as `tracelog runs` shows them) beside the model's sec/it."""

    run_id: int
    name: str | None
    last_iteration: int | None
    sec_per_it: float | None
    sec_per_it_predicted: float | None
    final_loss: float | None


def follow(
    db: str | os.PathLike[str] | None,
    paths: Iterable[str],
    *,
    data_path: str | None = None,
    interval_s: float = 5.0,
    idle_s: float | None = None,
    on_round: Callable[[FollowRound], None] | None = None,
    parser: str | None = None,
    verify: bool = False,
    progress: ProgressFor | None = None,
    sleep: Callable[[float], None] = time.sleep,
    **facts: Any,
) -> int:
    """Ingest the files, then what they gain while a run writes them, until Ctrl-C (KeyboardInterrupt)
    or `idle_s` seconds without a change; returns how many rounds ingested something. `facts` are what
    `ingest` is told about the runs: `name`, `tags`, `gpu`, `fabric`, `nodes`, `gpus_per_node`,
    `nics_per_node`, `model`.

    Every `interval_s` the files are looked at (`watch.Watch`: folders and globs expanded again, so a
    new job's log joins); a round ingests those that changed the way `ingest` does (a grown log resumes
    after its last committed line, in its own transaction, and its predictions and flags are
    refreshed), hands `on_round` what landed with the flags that are new since the round before, and
    closes the store. Between rounds the store is closed, so other commands open it: an embedded DuckDB
    file has one writer, and no reader while it is open. Ctrl-C during a round rolls back only the
    growth that round was writing."""
    watch = Watch(list(paths))
    raised: dict[FlagKey, str] | None = None  # the flags standing after the last round
    rounds = 0
    last_change = time.monotonic()
    while True:
        changes = watch.changed()
        if changes:
            last_change = time.monotonic()
            try:
                store = connect(Store(db, create=True, data_path=data_path))
            except StoreLocked:  # a report or a query has the file open: the files wait for the next round
                sleep(interval_s)
                continue
            try:
                if raised is None:
                    raised = _raised(store)
                options = _run_options(store, watch.paths, **facts)
                results: list[IngestResult | IngestFailure] = []
                done = [(c.path, c.from_folder) for c in changes]
                _ingest_files(store, done, parser, options, False, verify, progress, None, results)
                if any(
                    isinstance(r, IngestFailure) and isinstance(r.error, refresher().RefreshInterrupted)
                    for r in results
                ):
                    raise KeyboardInterrupt  # Ctrl-C during a refresh: it stays owed, the next command redoes it
                watch.mark(changes)
                now = _raised(store)
                states = _run_states(store, results)
            finally:
                store.close()
            landed = [r for r in results if not isinstance(r, IngestResult) or r.status != "already ingested"]
            fresh = [(*key[:4], message) for key, message in now.items() if key not in raised]
            raised = now
            rounds += any(isinstance(r, IngestResult) and r.status != "skipped" for r in landed)
            if (landed or fresh) and on_round is not None:
                on_round(FollowRound(landed, fresh, states))
        elif idle_s is not None and time.monotonic() - last_change >= idle_s:
            return rounds
        sleep(interval_s)


def _run_states(store: Store, results: list[IngestResult | IngestFailure]) -> list[RunState]:
    sources = sorted(
        {r.source_id for r in results if isinstance(r, IngestResult) and r.source_id is not None}
        - {r.source_id for r in results if isinstance(r, IngestResult) and r.status == "already ingested"}
    )
    if not sources:
        return []
    rows = store.con.execute(
        "SELECT run_id, name, last_iteration, sec_per_it, sec_per_it_predicted, final_loss FROM run_summary "
        f"{PREDICTED_SQL} WHERE run_id IN (SELECT run_id FROM runs WHERE source_id IN "
        f"({', '.join(str(int(s)) for s in sources)})) ORDER BY run_id"
    ).fetchall()
    return [RunState(*row) for row in rows]


FlagKey = tuple[str, str, str, int, str]
"""A flag as a follow tells it from others: rule, severity, subject kind and id, and the row it names
(a new error line is a new flag; the same rule's count moving on the same subject is not)."""


def _raised(store: Store) -> dict[FlagKey, str]:
    rows = store.con.execute(
        "SELECT rule, severity, subject_kind, subject_id, coalesce(row_ref, ''), min(message) FROM flags "
        "GROUP BY ALL ORDER BY subject_kind, subject_id, rule, 5"
    ).fetchall()
    return {
        (rule, severity, kind, int(subject), ref): message
        for rule, severity, kind, subject, ref, message in rows
    }


def _ingest_files(
    store: Store,
    paths: list[tuple[str, bool]],
    parser: str | None,
    options: RunOptions,
    force: bool,
    verify: bool,
    progress: ProgressFor | None,
    ahead: parse_jobs.ParsedAhead | None,
    results: list[IngestResult | IngestFailure],
    complete: bool = False,
) -> None:
    for path, from_folder in paths:
        with progress(path) if progress is not None else nullcontext() as advance:
            try:
                parsed = ahead.take(path) if ahead is not None else None
                result = ingest_file(
                    store,
                    path,
                    parser,
                    options,
                    force,
                    advance,
                    verify=verify,
                    parsed=parsed,
                    within=refresher().refresh_landing if store.lake else None,
                    complete=complete,
                    meanwhile=refresher,
                )
            except Unrecognised as exc:
                # A folder's README or job script is not a failure; a file named on its own is.
                results.append(
                    IngestResult(path, "skipped", warning=exc.message)
                    if from_folder
                    else IngestFailure(path, exc)
                )
                continue
            except TracelogError as exc:
                results.append(IngestFailure(path, exc))
                continue
        results.append(result)
        if result.source_id is None or result.status == "skipped":
            continue
        pending = "SELECT refresh_pending FROM sources WHERE source_id = ?"
        if result.refreshed or not store.scalar(pending, [result.source_id]):
            continue  # already refreshed: an unchanged file, or a new one in a DuckLake store
        refresh = refresher()
        try:
            result.warning = refresh.try_refresh_source(store, result.source_id)
            for into in result.merged.values():  # a run that gained this file's rows
                joined = store.scalar("SELECT source_id FROM runs WHERE run_id = ?", [into])
                result.warning = result.warning or refresh.try_refresh_source(store, joined)
        except refresh.RefreshInterrupted as exc:
            results.append(IngestFailure(path, exc))
            break  # Ctrl-C: the files after this one are not read
        if result.status == "already ingested" and result.warning is None:
            result.status = "refreshed"
