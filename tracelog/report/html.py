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

from tracelog.report import overview
from tracelog.report.charts import Figure
from tracelog.report.sections import Block, Report
from tracelog.thresholds import DEFAULT

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
FLAG_LINE_COLUMNS = [
    c for c in FLAG_COLUMNS if c[0] in ("severity", "rule", "subject_name", "row_ref", "message")
]
RUNS_COLUMNS = [
    ("name", "run"),
    ("tags", "tags"),
    ("gpu_model", "GPU"),
    ("gpus", "GPUs"),
    ("dp", "DP"),
    ("tp", "TP"),
    ("pp", "PP"),
    ("mbs", "MBS"),
    ("gbs", "GBS"),
    ("sec_per_it", "sec/it"),
    ("sec_pred", "predicted"),
    ("sec_eff", "of model"),
    ("tflops", "TFLOP/s per GPU"),
    ("tflops_pred", "predicted"),
    ("tf_eff", "of model"),
    ("final_loss", "final loss"),
    ("peak_reserved_mib", "peak MiB"),
    ("iterations_logged", "lines"),
]
FLAGS_SHOWN = 6  # flags on the first screen; the rest one click away, so the runs table stays in view
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

PERFTEST_COLUMNS = [
    ("bench_id", "bench"),
    ("test", "test"),
    ("device", "NIC"),
    ("hosts", "host"),
    ("directions", "directions"),
    ("status", "status"),
    ("best_avg_gbps", "best average (GB/s)"),
    ("plateau_gbps", "the port allows (GB/s)"),
    ("ratio", "share"),
]
TABLE_COLUMNS = {"perftest": PERFTEST_COLUMNS}
"""A bench table's columns by its block's `columns` option (nccl-tests and p2p benches by default)."""


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
            full = f' title="{html.escape(shown)}"' if len(shown) > 40 else ""  # text an ellipsis may cut
            cells.append(f'<td{kind}{full} data-v="{html.escape(key)}">{text}</td>')
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
    if "run_id" in frame.columns:
        return _facts(frame.iloc[0].to_dict(), RUN_COLUMNS)
    columns = TABLE_COLUMNS.get(block.options.get("columns", ""), BENCH_COLUMNS)
    return _table(frame, columns, row_anchor=block.options.get("row_anchor"), sortable=True)


def _header(report: Report) -> str:
    c = report.counts

    def of(kind: str) -> str:
        total = c[f"{kind}_total"]
        return f"{c[kind]}" + (f" of {total}" if total != c[kind] else "")

    flags = ", ".join(f'<span class="sev-{s}">{n} {s}</span>' for s, n in report.flag_counts.items())
    toc = "".join(
        f'<a href="#{safe_id(s.anchor)}">{html.escape(s.title)}</a>'
        for s in report.sections
        if not s.anchor.startswith(("run-", "bench-"))
    )
    differences = '<a href="#differences">differences</a>' if report.compare is not None else ""
    return (
        '<header><h1>tracelog report</h1><p class="meta">'
        f"{of('runs')} runs, {of('benches')} benches from {of('sources')} sources · flags: {flags} · "
        f"{html.escape(report.db)} · {report.generated_at:%Y-%m-%d %H:%M %Z}</p>"
        f'<nav>{differences}<a href="#flags">flags</a><a href="#runs">runs</a>{toc}</nav></header>'
    )


def _gap(value: Any, threshold: float) -> str:
    """A share of the model's figure as a coloured cell: below the efficiency-gap rule's threshold
    (thresholds.efficiency_gap) is the gap the flags speak of."""
    if value is None or pd.isna(value):
        return '<td class="n" data-v=""></td>'
    kind = "ok" if value >= threshold else ("bad" if value < threshold / 2 else "gap")
    return f'<td class="n gap-{kind}" data-v="{float(value)!r}">{float(value):.0%}</td>'


def runs_table(report: Report, threshold: float = DEFAULT.efficiency_gap) -> str:
    """Every run on one line, measured beside predicted, sortable and filterable by tag. A run with a
    detail section links to it; the row of a run without one carries the run's anchor itself."""
    frame = report.runs
    if frame.empty:
        return '<section id="runs"><h2>runs</h2><p>No runs.</p></section>'
    options = "".join(
        f'<option value="{html.escape(tag)}">{html.escape(tag)}</option>' for tag in report.tag_options
    )
    heads = "".join(f"<th>{html.escape(label)}</th>" for _, label in RUNS_COLUMNS)
    rows = []
    records = frame.to_dict("records")
    # The runs the model predicted come first: the first screen opens on measured beside predicted.
    records.sort(key=lambda r: (pd.isna(r.get("sec_eff")) and pd.isna(r.get("tf_eff")), int(r["run_id"])))
    for record in records:
        run_id = int(record["run_id"])
        detailed = run_id in report.detailed
        attrs = f' data-tags="{html.escape(str(record.get("tags") or ""))}" data-run="{run_id}"'
        attrs += "" if detailed else f' id="run-{run_id}"'
        cells = []
        for column, _ in RUNS_COLUMNS:
            if column in ("sec_eff", "tf_eff"):
                cells.append(_gap(record.get(column), threshold))
                continue
            shown, key = _cell(record.get(column))
            text = html.escape(shown)
            if column == "name":
                text = html.escape(f"#{run_id} {shown or 'unnamed'}")
                text = f'<a href="#run-{run_id}">{text}</a>' if detailed else text
            number = isinstance(record.get(column), int | float) and not isinstance(record.get(column), bool)
            cells.append(f'<td{" class=n" if number else ""} data-v="{html.escape(key)}">{text}</td>')
        rows.append(f"<tr{attrs}>{''.join(cells)}</tr>")
    control = (
        f'<p class="controls"><label>tag <select id="tag-filter" data-chart="chart-across-runs">'
        f'<option value="">all runs</option>{options}</select></label> <span class="hint">click a column '
        "heading to sort; “of model”: predicted ÷ measured time, measured ÷ predicted TFLOP/s (green at "
        f"{threshold:.0%} or more, the efficiency-gap flag below)</span></p>"
    )
    table = (
        f'<div class="wide"><table id="runs-table" class="sortable"><thead><tr>{heads}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )
    return f'<section id="runs"><h2>runs: measured beside predicted</h2>{control}{table}</section>'


def flags_section(report: Report) -> str:
    """The flags that matter (critical, then warnings) on the first screen; the others folded."""
    if report.flags.empty:
        return '<section id="flags"><h2>flags</h2><p>No flags.</p></section>'
    link = ("subject_name", "anchor")
    serious = report.flags[report.flags["severity"].isin(["critical", "warning"])]
    top, rest = serious.head(FLAGS_SHOWN), report.flags.drop(serious.head(FLAGS_SHOWN).index)
    parts = ['<section id="flags"><h2>flags that matter</h2>']
    if top.empty:
        parts.append("<p>No critical or warning flags.</p>")
    else:
        parts.append(_table(top, FLAG_LINE_COLUMNS, link, table_id="flags-table"))
    more = f"{len(rest)} more flags, and every flag with its figures and hint" if not rest.empty else "hints"
    parts.append(
        f"<details><summary>{more}</summary>"
        f"{_table(report.flags, FLAG_COLUMNS, link, table_id='all-flags')}</details>"
    )
    parts.append("</section>")
    return "".join(parts)


def compare_section(report: Report) -> str:
    """For two named runs: what differs, before anything else."""
    c = report.compare
    if c is None:
        return ""
    a, b = (
        html.escape(c["labels"].get(c["a"], f"#{c['a']}")),
        html.escape(c["labels"].get(c["b"], f"#{c['b']}")),
    )
    parts = [f'<section id="differences"><h2>differences: {a} (a) against {b} (b)</h2>']
    if c["parted"] is not None:
        parts.append(f"<p><strong>loss curves part at iteration {c['parted']:,}</strong> ")
    elif c["shared"]:
        parts.append(f"<p>loss curves stay together over {c['shared']:,} shared iterations ")
    else:
        parts.append("<p>no iteration with a loss in both runs ")
    parts.append(
        f"(a relative gap over {overview.LOSS_PART:.0%} for {overview.LOSS_PART_STEPS} shared lines in a row)</p>"
    )
    metrics = c["metrics"]
    if not metrics.empty:
        parts.append("<h3>steady-state medians</h3>")
        parts.append(_table(metrics, [("metric", "metric"), ("a", "a"), ("b", "b"), ("b / a", "b ÷ a")]))
    config = c["config"]
    parts.append("<h3>configuration keys that differ</h3>")
    if config.empty:
        parts.append("<p>None: same layout, arguments and tags.</p>")
    else:
        table = _table(config, [("key", "key"), ("a", "a"), ("b", "b")], table_id="config-diff")
        parts.append(f'<div class="scroll">{table}</div>')  # a long argument list must not bury the flags
    parts.append("</section>")
    return "".join(parts)


def page(report: Report) -> str:
    """The whole report as one HTML document: the answer first (differences of two runs, flags, the runs
    table), then the overlays, the layout comparison, the benches and the detail of each run."""
    body = [_header(report), compare_section(report), flags_section(report), runs_table(report)]
    specs = Specs()
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
h1{margin:14px 0 2px;font-size:22px}.meta{margin:0;color:#555;font-size:13px}
nav{display:flex;flex-wrap:wrap;gap:2px 14px;font-size:13px;margin:4px 0}h3{font-size:15px;margin:14px 0 4px}
td.gap-ok{background:#e3f1df}td.gap-gap{background:#fde7c8}td.gap-bad{background:#f8d0cc}
.controls{margin:4px 0}.scroll{max-height:280px;overflow:auto}details summary{cursor:pointer;color:#3b6ea8;font-size:13px}
#runs-table{font-size:12px}#runs-table td{padding:2px 6px;white-space:nowrap;overflow-wrap:normal}.wide{overflow-x:auto}#runs-table td:first-child{max-width:300px;overflow:hidden;text-overflow:ellipsis}h2{margin:22px 0 6px;border-bottom:1px solid #ddd;padding-bottom:4px;font-size:18px}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 12px;margin:8px 0}dt{color:#666}dd{margin:0}
table{border-collapse:collapse;margin:8px 0;font-size:12.5px}
th,td{border-bottom:1px solid #e4e4e4;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f6f6f6;position:sticky;top:0}table.sortable th{cursor:pointer}
td{overflow-wrap:anywhere}td.n{white-space:nowrap;overflow-wrap:normal}dd{overflow-wrap:anywhere}.sev-critical{color:#b3261e;font-weight:600}.sev-warning{color:#a35a00}
.sev-info{color:#3b6ea8}tr.sev-critical td:first-child{border-left:4px solid #b3261e}
tr.sev-warning td:first-child{border-left:4px solid #f58518}tr.sev-info td:first-child{border-left:4px solid #4c78a8}
.chart{margin:12px 0;min-height:120px}
dl.facts{display:flex;flex-wrap:wrap;gap:4px 18px;font-size:13px}dl.facts div{display:flex;gap:5px}.hint{color:#888;font-size:12px}:target{scroll-margin-top:8px}
tr:target td{background:#fff6d5}#flags-table td:nth-child(-n+2),#all-flags td:nth-child(-n+2){white-space:nowrap}
#flags-table{table-layout:fixed;width:100%}#flags-table td{white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
#flags-table th:nth-child(1){width:64px}#flags-table th:nth-child(2){width:150px}#flags-table th:nth-child(3){width:230px}
#flags-table th:nth-child(4){width:70px}
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
      document.querySelectorAll("#runs-table tbody tr").forEach(function (row) {
        const tags = " " + row.dataset.tags + " ";
        row.hidden = tag !== "" && tags.indexOf(" " + tag + " ") < 0;
      });
      const view = views[filter.dataset.chart];
      if (view) { view.signal("tag", tag).runAsync(); }
    });
  }
})();
""".replace("EMBED_OPTIONS", json.dumps(EMBED_OPTIONS))
