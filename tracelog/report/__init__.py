"""`tracelog report`: one self-contained HTML file of charts and tables over the store.

`sections` gathers the data (every aggregate in DuckDB), `charts` draws it with Altair, and `html` writes
the page with the Vega scripts inlined; this module ties them to a file on disk.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tracelog.errors import TracelogError
from tracelog.locations import is_lake
from tracelog.report import html
from tracelog.report.sections import DEFAULT_OUTPUT, POINTS_PER_RUN, Report, build
from tracelog.store import Store, default_db_path

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["DEFAULT_OUTPUT", "POINTS_PER_RUN", "Report", "ReportResult", "build", "write_report"]


@dataclass
class ReportResult:
    path: Path
    bytes: int
    charts: int
    sections: list[str]
    pngs: list[Path]


def write_report(
    db: str | os.PathLike[str] | Store | None = None,
    output: str | os.PathLike[str] | None = None,
    runs: Sequence[str | int] | None = None,
    tags: dict[str, str] | None = None,
    benches: Sequence[int | str] | None = None,
    png_dir: str | os.PathLike[str] | None = None,
) -> ReportResult:
    """Write the report to `output` (default `reports/tracelog-report.html`) and, with `png_dir`, each
    chart as a PNG; returns what was written. The database is opened read-only."""
    if isinstance(db, Store):
        store, owned = db, False
    else:
        location = str(db) if db is not None else default_db_path()
        if not is_lake(location) and not Path(location).exists():
            raise TracelogError("no database here; ingest some logs first", location)
        store, owned = Store(location, read_only=True), True
    try:
        report = build(store, runs, tags, benches)
        path = Path(output) if output is not None else DEFAULT_OUTPUT
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(html.page(report), encoding="utf-8")
        pngs = html.write_pngs(report, Path(png_dir)) if png_dir is not None else []
    finally:
        if owned:
            store.close()
    count = sum(b.figure is not None for s in report.sections for b in s.blocks)
    return ReportResult(path, path.stat().st_size, count, [s.title for s in report.sections], pngs)
