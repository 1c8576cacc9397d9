"""Charts that put several runs on one axis: sec/it, TFLOP/s and loss against iteration and tokens, one
colour per run, a legend that isolates a run on click, warm-up shaded in the run's colour.

Every panel reads the same dataset and the same legend selection, so one click isolates the run in all of
them; a click on a blank spot of the chart brings every run back.
"""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

from tracelog.report.charts import GREY, Figure, _tip

OVERLAY_WIDTH = 430
OVERLAY_HEIGHT = 170
FADED = 0.07  # opacity of the runs the legend did not pick: visible as context, not as data
METRICS = (("s", "sec/it (s)"), ("tf", "TFLOP/s per GPU"), ("loss", "lm loss"))
AXES = (("it", "iteration", "d"), ("tokens", "tokens (consumed samples × seq length)", "~s"))


def overlay(series: pd.DataFrame, spans: pd.DataFrame, labels: dict[int, str]) -> Figure | None:
    """The overlay grid, or None when fewer than two runs have two points (nothing to compare)."""
    if series["run_id"].nunique() < 2:
        return None
    data = series.assign(run=series["run_id"].map(labels))
    metrics = tuple(m for m, _ in METRICS if data[m].notna().any())
    axes = tuple(a for a, _, _ in AXES if data[a].notna().any())
    if not metrics or not axes:
        return None
    frames = {"series": data}
    if not spans.empty:
        frames["warmup"] = spans.assign(run=spans["run_id"].map(labels))
    runs = tuple(labels[r] for r in sorted(series["run_id"].unique()))
    title = [
        "runs overlaid: bucket means of the logged iterations (grey: warm-up of the runs shown)",
        "click a run in the legend to isolate it; click a blank spot of the chart to bring all back",
    ]
    return Figure(_draw_overlay, title, frames, {"metrics": metrics, "axes": axes, "runs": runs})


def _draw_overlay(fig: Figure) -> alt.TopLevelMixin:
    pick = alt.selection_point(name="pick", fields=["run"], bind="legend")
    runs = list(fig.shape["runs"])
    colour = alt.Color(
        "run:N",
        title="run",
        scale=alt.Scale(domain=runs, scheme="category20" if len(runs) > 10 else "category10"),
        legend=alt.Legend(labelLimit=320, symbolLimit=0, columns=1, symbolType="stroke", symbolStrokeWidth=3),
    )
    opacity = alt.when(pick).then(alt.value(1.0)).otherwise(alt.value(FADED))
    shade_opacity = alt.when(pick).then(alt.value(0.18)).otherwise(alt.value(0.0))
    rows = []
    first = True
    for metric in fig.shape["metrics"]:
        title = dict(METRICS)[metric]
        cells = []
        for axis in fig.shape["axes"]:
            _, x_title, fmt = next(a for a in AXES if a[0] == axis)
            x = alt.X(f"{axis}:Q", title=x_title, axis=alt.Axis(format=fmt))
            y = alt.Y(f"{metric}:Q", title=title, scale=alt.Scale(zero=False))
            layers: list[Any] = []
            if "warmup" in fig.frames:
                lo, hi = ("it0", "it1") if axis == "it" else ("tok0", "tok1")
                shade = alt.Chart(fig.data("warmup")).transform_filter(f"isValid(datum.{lo})")
                layers.append(
                    shade.mark_rect(color=GREY).encode(
                        x=alt.X(f"{lo}:Q"), x2=f"{hi}:Q", opacity=shade_opacity
                    )
                )
            tips = [_tip("run", kind="N"), _tip("it", "iteration", "d"), _tip("tokens", "tokens", ",d")]
            tips.append(_tip(metric, title))
            line = (
                alt.Chart(fig.data("series"))
                .transform_filter(f"isValid(datum.{metric}) && isValid(datum.{axis})")
                .mark_line(point=alt.OverlayMarkDef(size=12), strokeWidth=1.5)
                .encode(x=x, y=y, color=colour, opacity=opacity, detail="run:N", tooltip=tips)
            )
            if first:
                line, first = line.add_params(pick), False
            layers.append(line)
            cells.append(alt.layer(*layers).properties(width=OVERLAY_WIDTH, height=OVERLAY_HEIGHT))
        rows.append(alt.hconcat(*cells))
    return alt.vconcat(*rows, title=fig.title).resolve_scale(color="shared").configure_view(strokeWidth=0)
