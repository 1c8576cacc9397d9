"""Every chart of `tracelog report` as an Altair chart, for a notebook: the last expression of a Jupyter
cell renders inline.

    import tracelog.charts as tc
    tc.overlay("tracelog.duckdb")                       # runs overlaid: sec/it, TFLOP/s, loss
    tc.busbw("tracelog.duckdb", "all_reduce")           # every all_reduce bench on one chart
    tc.run("tracelog.duckdb", 7)                        # run 7 over its iterations
    tc.all_charts("tracelog.duckdb", runs=["176b-tp4"])  # every chart of that report, by slug

The charts are the report's own (same data, same aggregation in DuckDB), so a figure seen in a notebook
is the figure in the HTML file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import altair as alt

from tracelog.errors import TracelogError
from tracelog.locations import is_lake
from tracelog.report.sections import build
from tracelog.store import Store, default_db_path

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["all_charts", "busbw", "layouts", "overlay", "run"]


def all_charts(
    db: str | os.PathLike[str] | None = None,
    runs: Sequence[str | int] | None = None,
    tags: dict[str, str] | None = None,
    benches: Sequence[int | str] | None = None,
) -> dict[str, alt.TopLevelMixin]:
    """Every chart of the report over these runs and benches, by slug (`overlays`, `across-runs`,
    `busbw-all_reduce`, `run-7-iterations`, `p2p-3-bandwidth_uni_p2p_on`...), in the report's order."""
    location = str(db) if db is not None else default_db_path()
    if not is_lake(location) and not Path(location).exists():
        raise TracelogError("no database here; ingest some logs first", location)
    with Store(location, read_only=True) as store:
        return build(store, runs, tags, benches).charts()


def _one(slug: str, charts: dict[str, alt.TopLevelMixin], what: str) -> alt.TopLevelMixin:
    if slug not in charts:
        raise TracelogError(f"no {what} chart in this database (the report draws none from one value)")
    return charts[slug]


def overlay(
    db: str | os.PathLike[str] | None = None,
    runs: Sequence[str | int] | None = None,
    tags: dict[str, str] | None = None,
) -> alt.TopLevelMixin:
    """sec/it, TFLOP/s and loss of every run on shared axes; click a legend entry to isolate a run."""
    return _one("overlays", all_charts(db, runs, tags, benches=[]), "overlay")


def layouts(
    db: str | os.PathLike[str] | None = None,
    runs: Sequence[str | int] | None = None,
    tags: dict[str, str] | None = None,
) -> alt.TopLevelMixin:
    """Measured and predicted sec/it and TFLOP/s per run, labelled by layout."""
    return _one("across-runs", all_charts(db, runs, tags, benches=[]), "layout comparison")


def busbw(db: str | os.PathLike[str] | None = None, op: str = "all_reduce") -> alt.TopLevelMixin:
    """Bus bandwidth of every bench of one collective against message size."""
    charts = all_charts(db)
    return _one(f"busbw-{op}", charts, f"{op} bus bandwidth")


def run(db: str | os.PathLike[str] | None, ref: str | int) -> alt.TopLevelMixin:
    """One run over its iterations (sec/it, TFLOP/s, loss, loss scale), by id or name."""
    charts = all_charts(db, runs=[ref], benches=[])
    found = [chart for slug, chart in charts.items() if slug.endswith("-iterations")]
    if not found:
        raise TracelogError(f"run {ref!r} has fewer than two logged iterations: nothing to draw")
    return found[0]
