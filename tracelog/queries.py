"""The read side of the library surface, and the small edits of a run: list, show, query, flag, tag.

`tracelog.api` re-exports every function here, so `api.runs` is this `runs`. It is a module of its own
because `tracelog runs`, `flags`, `sql` and `show` answer from the store: loading the parsers, Polars
and the ingest path (what `api` imports) would be most of what those commands cost on a store of any
size. The model comes along (0.06 s of CPU): a writable store first redoes a refresh a killed ingest
left owed.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tracelog.store import Store, refresh_state
from tracelog.store import benches as bench_lookup
from tracelog.store import flags as flag_list
from tracelog.store import runs as run_lookup
from tracelog.thresholds import DEFAULT

if TYPE_CHECKING:
    from types import ModuleType

    import pandas as pd

    from tracelog.store.rows import Rows

Db = Store | str | os.PathLike[str] | None


def connect(db: Db = None, *, read_only: bool = False) -> Store:
    """An open store: pass a path, an already open `Store`, or nothing for `TRACELOG_DB` / the default.

    A writable store first redoes the refresh of any file whose predictions and flags are still owed (a
    refresh that failed, or was killed, after the file landed); one that fails again stays recorded."""
    store = db if isinstance(db, Store) else Store(db, read_only=read_only)
    if not read_only:
        if refresh_state.pending_sources(store):
            refresher().refresh_pending(store)
        store.owed_refresh_checked = True
    return store


def _open(db: Db) -> Store:
    """`connect`, where an open store is asked for owed refreshes once, not by every function a command
    calls (in a DuckLake store each question is a round of catalog queries)."""
    if isinstance(db, Store) and db.owed_refresh_checked:
        return db
    return connect(db)


def refresher() -> ModuleType:
    """The refresh, loaded when a command changes what it computes or one is owed: the model, the rules
    and pandas are most of a reading command's start-up (0.4-0.5 s on 2 cores), and `runs`, `flags`,
    `show` and `sql` seldom need them."""
    from tracelog.analysis import refresh

    return refresh


def runs(db: Db = None, *, tags: dict[str, str] | None = None, rows: bool = False) -> pd.DataFrame | Rows:
    """One row per run: configuration and steady-state medians (warm-up excluded; see run_summary).

    `rows=True` (in every listing here) returns plain `Rows` instead of a DataFrame: what `tracelog runs`
    prints as a table, without loading pandas."""
    return run_lookup.runs(_open(db), tags, rows=rows)


def resolve_run(db: Db, ref: str | int) -> int:
    """A run by id, by unique name, or by a unique prefix of its name; ambiguity lists the candidates."""
    return run_lookup.resolve_run(_open(db), ref)


def run_label(db: Db, ref: str | int) -> tuple[int, str | None]:
    """A run's id and name, by any reference `resolve_run` takes."""
    return run_lookup.run_label(_open(db), ref)


def show_run(
    db: Db, ref: str | int, *, iterations: bool = False, limit: int | None = None, rows: bool = False
) -> dict[str, pd.DataFrame] | dict[str, Rows]:
    """One run: summary, configuration, tags, parameters, the trend of sec/it, loss and TFLOP/s, timers,
    peak memory per rank and flags; with `iterations`, its iteration lines (the first `limit`)."""
    return run_lookup.show_run(_open(db), ref, iterations=iterations, limit=limit, rows=rows)


def benches(db: Db = None, *, tool: str | None = None) -> pd.DataFrame:
    """The benches in the database (only those of `tool` when given, e.g. `nccl-tests`), one row each."""
    return bench_lookup.benches(_open(db), tool)


def resolve_bench(db: Db, ref: str | int) -> int:
    """A bench by id: `3`, `bench:3`."""
    return bench_lookup.resolve_bench(_open(db), ref)


def show_bench(db: Db, ref: str | int) -> dict[str, pd.DataFrame]:
    """One bench in full: summary, params, devices, its rows as its tool prints them, events and flags."""
    return bench_lookup.show_bench(_open(db), ref)


def sql(db: Db, query: str, *, rows: bool = False) -> pd.DataFrame | Rows:
    """Any SQL over the store."""
    store = _open(db)
    return store.rows(query) if rows else store.query(query)


def sources(db: Db = None) -> pd.DataFrame:
    """The ingested files with their line counts."""
    return _open(db).sources()


def tag_run(db: Db, ref: str | int, tags: dict[str, str]) -> int:
    """Add or replace tags (key = value) on a run; its flags are recomputed. Returns the run id."""
    store = _open(db)
    run_id = run_lookup.resolve_run(store, ref)
    run_lookup.tag(store, run_id, tags)
    refresher().refresh(store, [run_id], [])
    return run_id


def untag_run(db: Db, ref: str | int, keys: list[str]) -> int:
    """Remove tags by key; returns how many were removed."""
    store = _open(db)
    return run_lookup.untag(store, run_lookup.resolve_run(store, ref), keys)


def note_run(db: Db, ref: str | int, text: str) -> int:
    """Append a line to a run's notes. Returns the run id."""
    store = _open(db)
    run_id = run_lookup.resolve_run(store, ref)
    run_lookup.note(store, run_id, text)
    return run_id


def rename_run(db: Db, ref: str | int, name: str) -> int:
    store = _open(db)
    run_id = run_lookup.resolve_run(store, ref)
    run_lookup.rename(store, run_id, name)
    return run_id


def remove_run(db: Db, ref: str | int) -> int:
    """Delete a run with every row that belongs to it. Returns the run id."""
    store = _open(db)
    run_id = run_lookup.resolve_run(store, ref)
    run_lookup.remove(store, run_id)
    return run_id


def refresh(db: Db = None, *, thresholds: dict[str, str] | None = None) -> int:
    """Recompute every prediction, comparison and flag; returns the number of flags."""
    return refresher().refresh_all(_open(db), thresholds=DEFAULT.with_overrides(thresholds or {}))


def refresh_errors(db: Db = None) -> list[tuple[str, str]]:
    """(path, what failed) of each file whose predictions and flags could not be refreshed; every
    command that opens the store for writing tries them again."""
    return refresh_state.refresh_errors(_open(db))


def flags(
    db: Db = None,
    *,
    severity: str | None = None,
    rule: str | None = None,
    runs: list[str | int] | None = None,
    tags: dict[str, str] | None = None,
    rows: bool = False,
) -> pd.DataFrame | Rows:
    """Flags, most severe first: rule, subject, measured against expected, message and a hint."""
    store = _open(db)
    run_ids = [run_lookup.resolve_run(store, r) for r in runs] if runs else None
    if tags:
        tagged = run_lookup.tagged_run_ids(store, tags)
        run_ids = tagged if run_ids is None else [r for r in run_ids if r in tagged]
    return flag_list.flags(store, severity, rule, run_ids, rows=rows)
