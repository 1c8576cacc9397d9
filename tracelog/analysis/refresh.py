"""The comparator: materialise predictions, comparisons and flags in the store.

`refresh` recomputes them for the runs and benches in scope (all by default) in one transaction, so any
DuckDB client sees numbers that match the data. Ingest refreshes the subjects of the file it ingested;
`tracelog flags --refresh` and a changed `--gpu` or tag refresh again.

A file's rows land with `sources.refresh_pending` set; the refresh of its subjects clears it in its own
transaction. One that fails is recorded on the source (`refresh_error`) and left pending, and
`refresh_pending` redoes every pending one: the next command that opens the store for writing calls it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from functools import partial
from typing import TYPE_CHECKING, Any

import duckdb
import polars as pl

from tracelog.analysis import (
    calibration,
    flat_stretches,
    link_fit,
    loss_spikes,
    nic,
    predictions,
    run_buckets,
    run_ranges,
)
from tracelog.analysis import inputs as run_inputs
from tracelog.analysis.inputs import RunInputs
from tracelog.analysis.rules import (
    bandwidth,
    ceiling,
    fabric,
    health,
    iterations,
    learning,
    model_rules,
    network,
    peer_access,
)
from tracelog.analysis.rules import nic as nic_rules
from tracelog.analysis.scope import Scope
from tracelog.errors import Deferred, TracelogError
from tracelog.store import Store, lake
from tracelog.store.refresh_state import pending_sources
from tracelog.store.tables import BENCH_SUBJECT_KINDS, MODEL_OUTPUT_TABLES
from tracelog.thresholds import DEFAULT, Thresholds

if TYPE_CHECKING:
    from tracelog.ingest import IngestResult

REFRESH_MEMORY_LIMIT = "192MB"
"""DuckDB's cap while a refresh runs. The rules and the medians read per-bucket sums (schema 017); what
the cap still bounds is the loss-spike and flat-loss rules' windows over a run's lines, whole on its first
refresh (the loss spikes' about 130 MB at 1.8 M iterations; at 3.5 M, past the cap, the refresh completes
all the same). The refresh ends an ingest, on top of what the parse
left allocated: with 384 MB the whole ingest of a generated 1 GB log peaked at 601-639 MB and of a 2 GB log
(3.5 M iterations) at 720 MB; with 192 MB at 580-598 and 600-632 MB, in the same time (9.3 s; 17.9-18.5 s
against 18.1 s)."""
REFRESH_THREADS = 1
"""DuckDB's threads while a refresh reads only what its runs gained (every run in scope has its buckets
kept: `run_buckets`): a hundred-odd statements over a few buckets and a few thousand lines each, where a
second thread's start and hand-over cost more than it takes off. The refresh of the 1 GB benchmark log's
growth, fresh processes at load 2.5: 0.24-0.27 s wall and CPU on one thread, 0.25-0.34 s wall and
0.34-0.39 CPU s on two. A refresh that sums a run from its first line keeps DuckDB's own count: after the
ingest of the 95 % (1.76 M lines) it took 1.2-1.9 s on two threads, 1.7 s on one."""
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


def rule_families(runs: list[RunInputs], scope: Scope) -> list[Family]:
    """The rule families that can find something in `scope`, in the order their flags are written: the
    run families (model, health) when runs are in it, the bench families (bandwidth, iterations) when
    benches are. `runs` are the model inputs already loaded for the refresh."""
    families: list[tuple[bool, Family]] = [  # (reads runs, else benches; the family)
        (True, partial(model_rules.evaluate, runs=runs)),
        (False, bandwidth.evaluate),
        (True, health.evaluate),
        (True, learning.evaluate),
        (False, iterations.evaluate),
        (True, network.runs),
        (False, network.benches),
        (False, peer_access.unsupported),
        (False, fabric.missing),
        (False, ceiling.evaluate),
        (False, nic_rules.nic_bandwidth),
    ]
    return [family for of_runs, family in families if (scope.has_runs if of_runs else scope.has_benches)]


def _subject_predicate(scope: Scope) -> str:
    return (
        f"((subject_kind = 'run' AND subject_id IN (SELECT run_id FROM runs WHERE {scope.runs})) OR "
        f"(subject_kind IN ({', '.join(repr(k) for k in BENCH_SUBJECT_KINDS)}) "
        f"AND subject_id IN (SELECT bench_id FROM benches WHERE {scope.benches})))"
    )


def refresh(
    store: Store,
    run_ids: list[int] | None = None,
    bench_ids: list[int] | None = None,
    thresholds: Thresholds = DEFAULT,
    sources: list[int] | None = None,
) -> int:
    """Recompute predictions, comparisons and flags for the subjects in scope; returns the flag count.

    One transaction (on `REFRESH_THREADS` where it reads only what its runs gained); DuckDB is capped
    meanwhile (window functions over millions of iterations otherwise keep every partition in memory),
    and a refresh that cannot run under the cap runs again without it.
    """
    scope = Scope.of(run_ids, bench_ids)

    def once() -> int:
        with store.threads(REFRESH_THREADS) if _incremental(store, scope) else nullcontext():
            try:
                with store.memory_limit(REFRESH_MEMORY_LIMIT):
                    return _refresh(store, scope, thresholds, sources)
            except duckdb.OutOfMemoryException:
                return _refresh(store, scope, thresholds, sources)

    # In a shared DuckLake store another writer may commit first: the refresh is done again over what
    # it committed (see store.lake).
    return lake.retrying(once) if store.lake else once()


def _incremental(store: Store, scope: Scope) -> bool:
    """Whether every run in scope has its buckets kept, so that the refresh reads only what it gained."""
    if not scope.has_runs:
        return True
    unsummed = store.scalar(
        f"SELECT count(*) FROM runs r LEFT JOIN run_progress p ON p.run_id = r.run_id AND p.rule = "
        f"'{run_buckets.RULE}' WHERE {scope.runs.replace('run_id', 'r.run_id')} AND p.run_id IS NULL"
    )
    return not unsummed


def _refresh(store: Store, scope: Scope, thresholds: Thresholds, sources: list[int] | None = None) -> int:
    """`sources`: those whose pending refresh this is (None with an unscoped refresh: all of them)."""
    with store.transaction():
        return _refresh_in(store, scope, thresholds, sources)


def _refresh_in(store: Store, scope: Scope, thresholds: Thresholds, sources: list[int] | None) -> int:
    """The refresh, inside the caller's transaction."""
    if sources is None and scope.runs == scope.benches == "TRUE":
        store.con.execute("UPDATE sources SET refresh_pending = false, refresh_error = NULL")
    elif sources:
        store.con.execute(
            "UPDATE sources SET refresh_pending = false, refresh_error = NULL "
            f"WHERE source_id IN ({', '.join(str(int(s)) for s in sources)})"
        )
    where = _subject_predicate(scope)
    for table in MODEL_OUTPUT_TABLES if not scope.new else ():
        store.con.execute(f"DELETE FROM {table} WHERE {where}")
    constants = calibration.load(store)  # fitted by `tracelog calibrate`; the textbook model if none
    runs: list[RunInputs] = []
    outputs = []
    try:
        if scope.has_runs:
            scope = run_ranges.prepare(store, scope)
            keep_steady_state(store, scope)
            loaded = run_inputs.load(
                store, scope.runs, scope.marks, _figures(store, scope), _kept_summary(scope)
            )
            runs = [predictions.infer(run) for run in loaded]
            outputs.append(predictions.predict_runs(store, scope, runs, constants))
            loss_spikes.update(store, thresholds.loss_spike, scope)
            flat_stretches.update(store, thresholds.flat_loss_lines, scope)
        if scope.has_benches:
            outputs.append(predictions.predict_benches(store, scope, constants))
            outputs.append(nic.predict(store, scope))
        for output in outputs:
            for table, rows in output.items():
                if rows:
                    store.insert(table, _frame(rows))
        flags = [
            flag
            for family in rule_families(runs, scope)
            for flag in sorted(family(store, thresholds, scope), key=_flag_order)
        ]
        if flags:
            store.insert("flags", _frame([{c: f.get(c) for c in FLAG_COLUMNS} for f in flags]))
    finally:
        if scope.has_runs:
            run_ranges.drop(store)
    return len(flags)


EFFECTIVE_TFLOPS = "effective tera flops per gpu"


def _kept_summary(scope: Scope) -> str:
    """`run_summary` of the runs in scope, whose steady state `keep_steady_state` has just kept."""
    return run_inputs.KEPT_SUMMARY_SQL.format(where=scope.runs, kept=scope.runs.replace("run_id", "c.run_id"))


def _figures(store: Store, scope: Scope) -> str:
    """The model's measured figures of the runs in scope: from the ranges' medians, but for a run with
    BigScience's `Effective Tera Flops per GPU` lines, whose TFLOP/s stand beside iterations by number (read
    from its lines, as `inputs.FIGURES_SQL` reads them)."""
    beside = [
        int(r)
        for (r,) in store.con.execute(
            f"SELECT DISTINCT run_id FROM iteration_metrics WHERE {scope.runs} AND key = '{EFFECTIVE_TFLOPS}'"
        ).fetchall()
    ]
    if not beside:
        return run_ranges.FIGURES_SQL
    ids = ", ".join(map(str, beside))
    return (
        f"SELECT * FROM ({run_ranges.FIGURES_SQL}) WHERE run_id NOT IN ({ids}) UNION ALL "
        f"SELECT * FROM ({run_inputs.FIGURES_SQL.format(marks=scope.marks, where=f'i.run_id IN ({ids})')})"
    )


def _frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Rows as a Polars frame for `Store.insert`: Polars builds it without pandas, which an Arrow table
    built from Python lists loads (pyarrow looks for pandas objects among the values), 0.3 s of every
    ingest's start-up. Every row's keys count, and numbers are one type per column."""
    return pl.from_dicts(_numbers_as_one_type(rows), infer_schema_length=None)


def _numbers_as_one_type(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows whose columns mix integers and floats (a FLOP count beside a ratio) with every number of such
    a column a float, as a DOUBLE column stores it (a column typed from its first values would refuse the
    others, or an integer beyond 2^53 as a double)."""
    mixed = {
        key
        for key in {k for row in rows for k in row}
        if any(isinstance(row.get(key), float) for row in rows)
        and any(isinstance(row.get(key), int) and not isinstance(row.get(key), bool) for row in rows)
    }
    if not mixed:
        return rows
    return [
        {
            k: float(v) if k in mixed and isinstance(v, int) and not isinstance(v, bool) else v
            for k, v in row.items()
        }
        for row in rows
    ]


STEADY_COLUMNS = (
    "run_id, iterations_logged, last_iteration, steady_lines, sec_per_it, samples_per_s, tflops_reported, "
    "final_loss, skipped_iterations, nan_iterations"
)


def keep_steady_state(store: Store, scope: Scope) -> None:
    """The steady-state medians of the runs in scope, taken once here from the ranges the refresh made
    (`run_ranges.STEADY_SQL`) and kept (`run_steady_cache`, schema 013) with the count and last line of
    the rows they describe, so that reading commands take them instead of sorting every logged line
    again; the model inputs read right after take them too."""
    scope = run_ranges.prepare(store, scope)
    runs = f"SELECT run_id FROM runs WHERE {scope.runs}"
    if not scope.new:
        store.con.execute(f"DELETE FROM run_steady_cache WHERE run_id IN ({runs})")
    store.con.execute(
        f"INSERT INTO run_steady_cache ({STEADY_COLUMNS}, last_line) "
        f"SELECT * FROM ({run_ranges.STEADY_SQL}) WHERE run_id IN ({runs})"
    )


def refresh_landing(store: Store, result: IngestResult) -> None:
    """A new file's predictions and flags, inside its own ingest transaction (`ingest_file(within=)`), so
    that in a DuckLake store it lands with them in one commit beside other writers instead of updating
    its source afterwards under the store's write lock. A file that joined another's run is left pending
    (the joined run's refresh follows, as always). A failure is `Deferred`: the file lands without its
    refresh, which then runs, or fails and is recorded, the usual way."""
    if result.source_id is None or result.merged:
        return
    try:
        scope = Scope.of(*_subjects(store, result.source_id), new=True)
        _refresh_in(store, scope, DEFAULT, [result.source_id])
        result.refreshed = True
    except (KeyboardInterrupt, duckdb.InterruptException):
        raise
    except Exception as exc:
        if lake.is_conflict(exc) or isinstance(exc, lake.ConflictError):
            raise
        raise Deferred(f"refresh deferred: {type(exc).__name__}") from exc


def _flag_order(flag: dict[str, Any]) -> tuple[Any, ...]:
    """Within a family, flags by subject, then rule and place: their ids do not depend on the order a
    rule's query returned rows in (which DuckDB's threads decide)."""
    return (
        flag.get("subject_kind") or "",
        flag.get("subject_id") or 0,
        flag.get("rule") or "",
        str(flag.get("row_ref") or ""),
        flag.get("message") or "",
    )


def refresh_source(store: Store, source_id: int, thresholds: Thresholds = DEFAULT) -> int:
    """Recompute the model's predictions and the flags for one source's runs and benches."""
    return refresh(store, *_subjects(store, source_id), thresholds, sources=[source_id])


def _subjects(store: Store, source_id: int) -> tuple[list[int], list[int]]:
    """The run ids and bench ids of one source."""
    runs = store.con.execute("SELECT run_id FROM runs WHERE source_id = ?", [source_id]).fetchall()
    benches = store.con.execute("SELECT bench_id FROM benches WHERE source_id = ?", [source_id]).fetchall()
    return [r for (r,) in runs], [b for (b,) in benches]


class RefreshInterrupted(TracelogError):
    """Ctrl-C during a refresh: rolled back, still pending, redone by the next command."""


def refresh_all(store: Store, thresholds: Thresholds = DEFAULT) -> int:
    """Every prediction, comparison and flag; when that fails, source by source, so that one file whose
    refresh fails (recorded on it, see `try_refresh_source`) does not leave the others unrefreshed."""
    try:
        return refresh(store, thresholds=thresholds)
    except (KeyboardInterrupt, duckdb.InterruptException):
        raise RefreshInterrupted("interrupted during the refresh of predictions and flags") from None
    except Exception:  # one subject broke the whole: redo it per source and record which failed
        sources = [s for (s,) in store.con.execute("SELECT source_id FROM sources ORDER BY 1").fetchall()]
        for source_id in sources:
            try_refresh_source(store, source_id, thresholds)
        return int(store.scalar("SELECT count(*) FROM flags"))


def try_refresh_source(store: Store, source_id: int, thresholds: Thresholds = DEFAULT) -> str | None:
    """`refresh_source`, a failure recorded on the source and returned as a sentence instead of raised.

    Ctrl-C raises `RefreshInterrupted` (the refresh rolled back and stays pending)."""
    try:
        refresh_source(store, source_id, thresholds)
    except (KeyboardInterrupt, duckdb.InterruptException):
        raise RefreshInterrupted(
            "interrupted during the refresh of predictions and flags; the file's rows are stored and the "
            "next tracelog command redoes its refresh"
        ) from None
    except Exception as exc:  # any failure of a rule or of the model must not undo a landed file
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        message = f"predictions and flags not refreshed ({type(exc).__name__}: {text})"
        store.con.execute(
            "UPDATE sources SET refresh_pending = true, refresh_error = ? WHERE source_id = ?",
            [message, source_id],
        )
        return message
    return None


def refresh_pending(store: Store) -> dict[int, str]:
    """Redo the refresh of every source whose refresh failed or never ran (a kill during it); returns
    the sources whose refresh failed again, with what failed. A read-only store is left as it is."""
    failed = {}
    for source_id in pending_sources(store):
        message = try_refresh_source(store, source_id)
        if message is not None:
            failed[source_id] = message
    return failed


def calibrate(store: Store, runs_where: str = "TRUE", benches_where: str = "TRUE") -> list[calibration.Fit]:
    """Fit the model's constants to the runs and benches matching the predicates (over `run_id` and
    `bench_id`), store them, and refresh every prediction, comparison and flag with them."""
    runs = [predictions.infer(run) for run in run_inputs.load(store, where=runs_where)]
    # the intra-node links on the single-node benches, then the fabrics on the multi-node ones with those
    # links in place, then the compute scales with every fitted collective in place
    fits = link_fit.fit_collectives(link_fit.bench_curves(store, benches_where))
    calibration.save(store, fits)
    fabric_fits = link_fit.fit_fabrics(link_fit.fabric_curves(store, benches_where), calibration.load(store))
    calibration.save(store, fabric_fits)
    compute_fits = calibration.fit_compute(runs, calibration.load(store))
    calibration.save(store, compute_fits)
    fits += fabric_fits + compute_fits
    refresh(store)
    return fits
