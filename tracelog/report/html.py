"""The report page: one HTML file with Vega, Vega-Lite and Vega-Embed inlined, so it opens with no network.

Every string that came from a log is escaped: `html.escape` for the page, and chart specs are JSON inside
`<script type="application/json">` with `<`, `>` and `&` written as `\\u003c` escapes, so no text can close
the tag; Vega then draws text as SVG text and its tooltips escape HTML.
"""

from __future__ import annotations

import functools
import html
import json
import math
import os
import re
from importlib import metadata
from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd
import vl_convert

from tracelog.report.charts import Figure
from tracelog.report.sections import Block, Report

EMBED_OPTIONS = {
    "mode": "vega-lite",
    "renderer": "svg",
    "actions": {"export": True, "source": False, "compiled": False, "editor": False},
}
FLAG_COLUMNS = [
    ("severity", "severity"),
    ("rule", "rule"),
    ("subject_name", "subject"),
    ("row_ref", "where"),
    ("measured", "measured"),
    ("expected", "expected"),
    ("ratio", "ratio"),
    ("message", "message"),
    ("hint", "hint"),
]
ACROSS_COLUMNS = [
    ("name", "run"),
    ("tags", "tags"),
    ("nodes", "nodes"),
    ("gpus", "GPUs"),
    ("dp", "DP"),
    ("tp", "TP"),
    ("pp", "PP"),
    ("mbs", "MBS"),
    ("gbs", "GBS"),
    ("sec_per_it", "sec/it"),
    ("sec_pred", "sec/it predicted"),
    ("tflops", "TFLOP/s per GPU"),
    ("tflops_pred", "TFLOP/s predicted"),
]
RUN_COLUMNS = [
    ("framework", "framework"),
    ("gpu_model", "GPU"),
    ("nodes", "nodes"),
    ("gpus", "GPUs"),
    ("dp", "DP"),
    ("tp", "TP"),
    ("pp", "PP"),
    ("mbs", "MBS"),
    ("gbs", "GBS"),
    ("seq_len", "seq"),
    ("params", "parameters"),
    ("precision", "precision"),
    ("iterations_logged", "lines"),
    ("sec_per_it", "sec/it (steady)"),
    ("tflops_reported", "TFLOP/s per GPU"),
    ("final_loss", "final loss"),
    ("skipped_iterations", "skipped"),
    ("nan_iterations", "NaN"),
    ("peak_reserved_mib", "peak MiB"),
    ("source", "source"),
    ("line_start", "from line"),
]
BENCH_COLUMNS = [
    ("bench_id", "bench"),
    ("tool", "tool"),
    ("gpu_name", "GPU"),
    ("ranks", "ranks"),
    ("nodes", "nodes"),
    ("gpus_per_node", "GPUs/node"),
    ("dtype", "dtype"),
    ("hosts", "hosts"),
    ("status", "status"),
    ("avg_busbw_gbps", "avg busbw (GB/s)"),
    ("wrong_total", "#wrong"),
    ("line_start", "source line"),
]


@functools.cache
def javascript_bundle() -> str:
    """Vega, Vega-Lite and Vega-Embed as one script, bundled by vl-convert with no network. Bundling
    takes seconds, so the result is kept in the user's cache folder, keyed by the versions."""
    version = ".".join(alt.VEGALITE_VERSION.split(".")[:2])
    if version not in vl_convert.get_vegalite_versions():
        version = vl_convert.get_vegalite_versions()[-1]  # the latest it has reads our specs
    cache_home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    cached = cache_home / "tracelog" / f"vega-embed-{metadata.version('vl-convert-python')}-vl{version}.js"
    try:
        return cached.read_text(encoding="utf-8")
    except OSError:
        pass
    bundle = str(vl_convert.javascript_bundle(vl_version=version))  # type: ignore[call-arg]
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(bundle, encoding="utf-8")
        os.replace(partial, cached)
    except OSError:  # a read-only home: bundle again next time
        pass
    return bundle


class Specs:
    """Vega-Lite specs of figures. Altair builds and validates the first figure of each shape; a figure
    of the same shape (an equal `Figure.key`) reuses that spec with its own datasets and title."""

    def __init__(self) -> None:
        self.templates: dict[tuple[Any, ...], tuple[dict[str, Any], dict[str, str]] | None] = {}

    def __call__(self, figure: Figure) -> dict[str, Any]:
        values = {role: figure.csv(role)[0] for role in figure.frames}
        key = figure.key()
        template = self.templates.get(key)
        if template is None:
            spec = figure.chart().to_dict(validate=key not in self.templates)
            spec.pop("$schema", None)
            if key not in self.templates:  # roles with equal data share a dataset: no reuse then
                self.templates[key] = (spec, values) if len(set(values.values())) == len(values) else None
            return spec
        spec, built_from = template
        swap = {built_from[role]: values[role] for role in values}
        return dict(spec, title=figure.title, datasets={n: swap[v] for n, v in spec["datasets"].items()})


def script_json(value: Any) -> str:
    """JSON that is safe inside a <script> element, whatever strings it carries."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def safe_id(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "x"


def _cell(value: Any) -> tuple[str, str]:
    """(shown text, sort key) of one table cell."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "", ""
    if isinstance(value, bool):
        return str(value).lower(), str(int(value))
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e15):
        return f"{int(value)}", f"{int(value)}"
    if isinstance(value, float):
        return (f"{value:.4g}" if abs(value) < 1e5 else f"{value:,.0f}"), repr(value)
    return str(value), str(value)


def _table(
    frame: pd.DataFrame,
    columns: list[tuple[str, str]],
    link: tuple[str, str] | None = None,
    row_anchor: str | None = None,
    table_id: str | None = None,
    sortable: bool = False,
    tags: str | None = None,
) -> str:
    """An HTML table; `link` = (column, column holding the anchor it links to)."""
    heads = "".join(f"<th>{html.escape(label)}</th>" for _, label in columns)
    rows = []
    for record in frame.to_dict("records"):
        attrs = ""
        if row_anchor:
            attrs += f' id="bench-{int(record[row_anchor])}"'
        if tags:
            attrs += f' data-tags="{html.escape(str(record.get(tags) or ""))}"'
        if "severity" in record:
            attrs += f' class="sev-{html.escape(str(record["severity"]))}"'
        cells = []
        for column, _ in columns:
            shown, key = _cell(record.get(column))
            text = html.escape(shown)
            if link and column == link[0]:
                text = f'<a href="#{html.escape(safe_id(str(record[link[1]])))}">{text or "(unnamed)"}</a>'
            number = isinstance(record.get(column), int | float) and not isinstance(record.get(column), bool)
            kind = ' class="n"' if number else ""
            cells.append(f'<td{kind} data-v="{html.escape(key)}">{text}</td>')
        rows.append(f"<tr{attrs}>{''.join(cells)}</tr>")
    attrs = f' id="{table_id}"' if table_id else ""
    attrs += ' class="sortable"' if sortable else ""
    return f"<table{attrs}><thead><tr>{heads}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _facts(record: dict[str, Any], columns: list[tuple[str, str]]) -> str:
    """One record as labelled values that wrap with the page (the known ones only)."""
    items = []
    for column, label in columns:
        shown, _ = _cell(record.get(column))
        if shown:
            items.append(f"<div><dt>{html.escape(label)}</dt><dd>{html.escape(shown)}</dd></div>")
    return f'<dl class="facts">{"".join(items)}</dl>'


def _block(block: Block, specs: Specs) -> str:
    chart_id = "chart-" + safe_id(block.slug)
    if block.figure is not None:
        spec = script_json(specs(block.figure))
        return f'<div class="chart" id="{chart_id}"></div><script type="application/json" data-chart="{chart_id}">{spec}</script>'

    frame = block.table if block.table is not None else pd.DataFrame()
    if "tags" in block.options:
        frame = frame.assign(anchor="run-" + frame["run_id"].astype(str))
        options = "".join(
            f'<option value="{html.escape(tag)}">{html.escape(tag)}</option>' for tag in block.options["tags"]
        )
        control = (
            f'<label>tag <select id="tag-filter" data-chart="chart-across-runs">'
            f'<option value="">all runs</option>{options}</select></label> <span class="hint">click a '
            "column heading to sort</span>"
        )
        table = _table(frame, ACROSS_COLUMNS, ("name", "anchor"), None, "across-table", True, "tags")
        return control + table
    if "run_id" in frame.columns:
        return _facts(frame.iloc[0].to_dict(), RUN_COLUMNS)
    return _table(frame, BENCH_COLUMNS, row_anchor=block.options.get("row_anchor"), sortable=True)


def _header(report: Report) -> str:
    c = report.counts

    def of(kind: str) -> str:
        total = c[f"{kind}_total"]
        return f"{c[kind]}" + (f" of {total}" if total != c[kind] else "")

    flags = ", ".join(f'<span class="sev-{s}">{n} {s}</span>' for s, n in report.flag_counts.items())
    toc = "".join(
        f'<li><a href="#{safe_id(s.anchor)}">{html.escape(s.title)}</a></li>' for s in report.sections
    )
    return (
        "<header><h1>tracelog report</h1><dl>"
        f"<dt>database</dt><dd>{html.escape(report.db)}</dd>"
        f"<dt>generated</dt><dd>{report.generated_at:%Y-%m-%d %H:%M:%S %Z}</dd>"
        f"<dt>sources</dt><dd>{of('sources')}</dd><dt>runs</dt><dd>{of('runs')}</dd>"
        f"<dt>benches</dt><dd>{of('benches')}</dd><dt>flags</dt><dd>{flags}</dd></dl>"
        f'<nav><ol><li><a href="#flags">flags</a></li>{toc}</ol></nav></header>'
    )


def page(report: Report) -> str:
    """The whole report as one HTML document."""
    body = [_header(report)]
    specs = Specs()
    body.append('<section id="flags"><h2>flags, most severe first</h2>')
    if report.flags.empty:
        body.append("<p>No flags.</p>")
    else:
        body.append(_table(report.flags, FLAG_COLUMNS, ("subject_name", "anchor"), table_id="flags-table"))
    body.append("</section>")
    for section in report.sections:
        body.append(f'<section id="{safe_id(section.anchor)}"><h2>{html.escape(section.title)}</h2>')
        body.extend(_block(block, specs) for block in section.blocks)
        body.append("</section>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,"><title>tracelog report</title>'
        f"<style>{CSS}</style><script>(function () {{\n{javascript_bundle()}\n}})();</script></head>"
        f"<body>{''.join(body)}<script>{RENDER_JS}</script></body></html>\n"
    )


def write_pngs(report: Report, folder: Path, scale: float = 2.0) -> list[Path]:
    """Every chart as a PNG (for slides), named by its slug."""

    folder.mkdir(parents=True, exist_ok=True)
    specs = Specs()
    written = []
    for block in (b for s in report.sections for b in s.blocks):
        if block.figure is None:
            continue
        path = folder / f"{safe_id(block.slug)}.png"
        path.write_bytes(vl_convert.vegalite_to_png(specs(block.figure), scale=scale))
        written.append(path)
    return written


CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1200px;
padding:0 24px 48px;color:#222}
h1{margin:20px 0 4px}h2{margin-top:36px;border-bottom:1px solid #ddd;padding-bottom:4px;font-size:18px}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 12px;margin:8px 0}dt{color:#666}dd{margin:0}
nav ol{columns:3;font-size:13px;padding-left:20px}
table{border-collapse:collapse;margin:8px 0;font-size:12.5px}
th,td{border-bottom:1px solid #e4e4e4;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f6f6f6;position:sticky;top:0}table.sortable th{cursor:pointer}
td{overflow-wrap:anywhere}td.n{white-space:nowrap;overflow-wrap:normal}dd{overflow-wrap:anywhere}.sev-critical{color:#b3261e;font-weight:600}.sev-warning{color:#a35a00}
.sev-info{color:#3b6ea8}tr.sev-critical td:first-child{border-left:4px solid #b3261e}
tr.sev-warning td:first-child{border-left:4px solid #f58518}tr.sev-info td:first-child{border-left:4px solid #4c78a8}
.chart{margin:12px 0;min-height:120px}
dl.facts{display:flex;flex-wrap:wrap;gap:4px 18px;font-size:13px}dl.facts div{display:flex;gap:5px}.hint{color:#888;font-size:12px}:target{scroll-margin-top:8px}
tr:target td{background:#fff6d5}#flags-table td:nth-child(-n+2){white-space:nowrap}
"""

RENDER_JS = """
(function () {
  const options = EMBED_OPTIONS;
  const views = {};
  const drawn = {};
  // A chart is drawn when it comes near the viewport, so a report of hundreds of charts opens at once.
  function draw(node) {
    const id = node.dataset.chart;
    if (!drawn[id]) {
      drawn[id] = vegaEmbed(document.getElementById(id), JSON.parse(node.textContent), options).then(
        function (result) { views[id] = result.view; },
        function (error) {
          document.getElementById(id).textContent = "This chart could not be drawn: " + error;
          console.error(error);
        });
    }
    return drawn[id];
  }
  const nodes = Array.from(document.querySelectorAll("script[type='application/json'][data-chart]"));
  const byId = {};
  nodes.forEach(function (node) { byId[node.dataset.chart] = node; });
  const observer = new IntersectionObserver(function (entries) {
    entries.forEach(function (entry) {
      if (entry.isIntersecting) { observer.unobserve(entry.target); draw(byId[entry.target.id]); }
    });
  }, {rootMargin: "100% 0px"});
  nodes.forEach(function (node) { observer.observe(document.getElementById(node.dataset.chart)); });
  function drawAll() { return Promise.all(nodes.map(draw)); }
  window.addEventListener("beforeprint", drawAll);
  window.tracelog = {views: views, drawAll: drawAll};

  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("th").forEach(function (th, column) {
      th.addEventListener("click", function () {
        const body = table.tBodies[0];
        const down = th.dataset.order !== "asc";
        table.querySelectorAll("th").forEach(function (other) { delete other.dataset.order; });
        th.dataset.order = down ? "asc" : "desc";
        const key = function (row) {
          const text = row.cells[column].dataset.v;
          const number = parseFloat(text);
          return text === "" ? null : (isNaN(number) ? text : number);
        };
        Array.from(body.rows).sort(function (a, b) {
          const x = key(a), y = key(b);
          if (x === null || y === null) { return x === y ? 0 : (x === null ? 1 : -1); }
          const order = x < y ? -1 : (x > y ? 1 : 0);
          return down ? order : -order;
        }).forEach(function (row) { body.appendChild(row); });
      });
    });
  });

  const filter = document.getElementById("tag-filter");
  if (filter) {
    filter.addEventListener("change", function () {
      const tag = filter.value;
      document.querySelectorAll("#across-table tbody tr").forEach(function (row) {
        const tags = " " + row.dataset.tags + " ";
        row.hidden = tag !== "" && tags.indexOf(" " + tag + " ") < 0;
      });
      const view = views[filter.dataset.chart];
      if (view) { view.signal("tag", tag).runAsync(); }
    });
  }
})();
""".replace("EMBED_OPTIONS", json.dumps(EMBED_OPTIONS))
