"""The report's Altair charts, each drawn from frames DuckDB already aggregated.

A chart is a `Figure`: its data (frames by role), its title, and its shape (the few parameters that
change the spec's structure, part of its `key`). `draw` reads nothing else, so figures with equal keys
differ only in data and title, and `report_html` builds each shape's spec with Altair once per report.

Data goes into a spec as inline CSV (numbers parsed by Vega): compact, never subject to Altair's row
limit, and log text stays data that Vega draws as SVG text, never markup. Units are in titles; bandwidth
is SI (GB/s = 1e9 B/s, as nccl-tests prints it); message sizes are on a log axis.
"""

from __future__ import annotations

import io
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import altair as alt
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv

WIDTH = 720
PANEL_HEIGHT = 150
BLUE, ORANGE, RED, GREEN, GREY = "#4c78a8", "#f58518", "#e45756", "#54a24b", "#9d9d9d"
BYTES_LABEL = (
    "datum.value >= 1073741824 ? format(datum.value / 1073741824, '~g') + ' GiB' : "
    "datum.value >= 1048576 ? format(datum.value / 1048576, '~g') + ' MiB' : "
    "datum.value >= 1024 ? format(datum.value / 1024, '~g') + ' KiB' : datum.value + ' B'"
)
Draw = Callable[["Figure"], alt.TopLevelMixin]


def _tip(field: str, title: str | None = None, fmt: str = ",.5~g", kind: str = "Q") -> alt.Tooltip:
    if kind == "Q":
        return alt.Tooltip(f"{field}:{kind}", title=title or field, format=fmt)
    return alt.Tooltip(f"{field}:{kind}", title=title or field)


@dataclass
class Figure:
    """A chart as data (`frames` by role), `title` and `shape`; `draw` may read nothing else."""

    draw: Draw
    title: str | list[str]
    frames: dict[str, pd.DataFrame]
    shape: dict[str, Any] = field(default_factory=dict)
    _csv: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict, repr=False)

    def csv(self, role: str) -> tuple[str, dict[str, str]]:
        """The role's data as CSV text and the Vega parse types of its columns."""
        if role not in self._csv:
            self._csv[role] = to_csv(self.frames[role])
        return self._csv[role]

    def data(self, role: str) -> alt.InlineData:
        text, parse = self.csv(role)
        return alt.InlineData(values=text, format={"type": "csv", "parse": parse})

    def chart(self) -> alt.TopLevelMixin:
        """The Altair chart (for a notebook)."""
        return self.draw(self)

    def key(self) -> tuple[Any, ...]:
        columns = tuple((role, tuple(sorted(self.csv(role)[1].items()))) for role in sorted(self.frames))
        return (self.draw.__qualname__, tuple(sorted(self.shape.items())), columns)


def significant(values: np.ndarray, digits: int = 6) -> np.ndarray:
    """Floats rounded to `digits` significant digits, so that they print short in CSV."""
    with np.errstate(divide="ignore", invalid="ignore"):
        shift = digits - 1 - np.floor(np.log10(np.abs(values)))
    shift = np.where(np.isfinite(shift), shift, 0)
    up, down = 10.0 ** np.clip(shift, 0, None), 10.0 ** np.clip(-shift, 0, None)
    return np.where(shift >= 0, np.round(values * up) / up, np.round(values / down) * down)


def to_csv(frame: pd.DataFrame) -> tuple[str, dict[str, str]]:
    """A frame as CSV (written by Arrow): integers exact, floats to 6 significant digits, NULL empty."""
    columns: dict[str, Any] = {}
    parse: dict[str, str] = {}
    for name, values in frame.items():
        key = str(name)
        if not (pd.api.types.is_bool_dtype(values) or pd.api.types.is_numeric_dtype(values)):
            columns[key] = pa.array(values.astype("string"), type=pa.string())
            continue
        parse[key] = "number"
        numbers = values.to_numpy(dtype="float64", na_value=np.nan)
        valid = np.isfinite(numbers)
        finite = numbers[valid]
        if (finite == np.round(finite)).all() and np.abs(finite).max(initial=0) < 2**53:
            columns[key] = pa.array(np.where(valid, numbers, 0).astype(np.int64), mask=~valid)
        else:
            columns[key] = pa.array(significant(numbers), mask=~valid)
    out = io.BytesIO()
    pa_csv.write_csv(pa.table(columns), out, pa_csv.WriteOptions(quoting_style="needed"))
    return out.getvalue().decode("utf-8"), parse


def _lines(rows: list[tuple[float, str, str]], role: str, quiet: tuple[str, ...] = ()) -> pd.DataFrame:
    """Reference lines (value, label, colour); labels in `quiet` show in tooltips only. The role column
    keeps each role's data distinct."""
    frame = pd.DataFrame(rows, columns=["value", "label", "colour"])
    return frame.assign(role=role, quiet=frame["label"].isin(quiet).astype(int))


def _reference(data: alt.InlineData, axis: str = "y") -> alt.LayerChart:
    """Dashed labelled rules: spec figures, capacity, predictions."""
    base = alt.Chart(data)
    labelled = base.transform_filter("datum.quiet != 1")
    colour = alt.Color("colour:N", scale=None)
    if axis == "y":
        at: dict[str, Any] = {"y": alt.Y("value:Q")}
        text = labelled.mark_text(align="right", baseline="top", dx=-2, dy=2, fontSize=10)
        text = text.encode(**at, x=alt.value(WIDTH), text="label:N", color=colour)
    else:
        at = {"x": alt.X("value:Q")}
        text = labelled.mark_text(align="left", baseline="top", dx=3, fontSize=10)
        text = text.encode(**at, y=alt.value(0), text="label:N", color=colour)
    tips = [alt.Tooltip("label:N", title="line"), alt.Tooltip("value:Q", format=",.4~g")]
    return alt.LayerChart(
        layer=[base.mark_rule(strokeDash=[6, 3]).encode(**at, color=colour, tooltip=tips), text]
    )


# ---- one run: iterations, memory, predicted time split -------------------------------------------------


def run_timeline(
    series: pd.DataFrame,
    label: str,
    warmup: tuple[float, float] | None,
    predicted_sec: pd.DataFrame,
    predicted_tflops: pd.DataFrame,
) -> Figure | None:
    """sec/it, TFLOPs, loss and loss scale over the iterations of one run, on one zoomable iteration
    axis (drag to pan, wheel to zoom) with a hover rule shared by the panels."""
    frames = {"series": series.drop(columns=["run_id"], errors="ignore")}
    if warmup is not None:
        frames["warmup"] = pd.DataFrame([{"x": warmup[0], "x2": warmup[1], "label": "warm-up"}])
    for role, predicted in (("pred_s", predicted_sec), ("pred_tf", predicted_tflops)):
        if not predicted.empty:
            rows = [
                (v, f"predicted ({f})", "black")
                for v, f in zip(predicted["value"], predicted["formula"], strict=True)
            ]
            frames[role] = _lines(rows, role)
    shape = {
        "sec": bool(series["s"].notna().any() or "pred_s" in frames),
        "tflops": bool(series["tf"].notna().any() or "pred_tf" in frames),
        "loss": bool(series["loss"].notna().any()),
        "scale": bool(series["scale"].nunique() > 1),
        "skipped": bool(series["skipped"].gt(0).any()),
        "nan": bool(series["nan"].gt(0).any()),
        "bucketed": bool(series["lines"].max() > 1),
    }
    if not (shape["sec"] or shape["tflops"] or shape["loss"] or shape["scale"]):
        return None
    note = (
        f" (mean of each bucket of log lines, band min–max; {len(series)} buckets)"
        if shape["bucketed"]
        else ""
    )
    return Figure(_draw_timeline, f"{label}: per iteration{note}", frames, shape)


def _hover_points(
    base: alt.Chart, x: alt.X, y: alt.Y, colour: str, tips: list[Any], *params: Any
) -> alt.Chart:
    """Points shown only under the pointer, carrying the tooltips and the panel's selections (Vega-Lite
    wants a selection shared by several views to live on the same unit of each)."""
    hover = params[-1]
    opacity = alt.when(hover).then(alt.value(1)).otherwise(alt.value(0))
    return (
        base.mark_point(color=colour, filled=True, size=30)
        .encode(x=x, y=y, opacity=opacity, tooltip=tips)
        .add_params(*params)
    )


def _draw_timeline(fig: Figure) -> alt.TopLevelMixin:
    s = fig.shape
    zoom = alt.selection_interval(name="zoom", encodings=["x"], bind="scales")
    hover = alt.selection_point(
        name="hover", fields=["it"], nearest=True, on="pointerover", clear="pointerout", empty=False
    )
    x = alt.X("it:Q", title="iteration", axis=alt.Axis(format="d"))
    tips = [_tip("it0", "first iteration", "d"), _tip("it", "iteration", "d")]
    tips += [_tip("line", "source line", "d"), _tip("lines", "log lines", "d")]

    def panel(field: str, title: str, colour: str, predicted: str | None, extra: list[Any]) -> alt.LayerChart:
        y = alt.Y(f"{field}:Q", title=title, scale=alt.Scale(zero=False))
        field_tips = [_tip(field, "mean" if s["bucketed"] else title)]
        layers: list[Any] = []
        if "warmup" in fig.frames:
            shade = alt.Chart(fig.data("warmup")).mark_rect(color=GREY, opacity=0.18)
            layers.append(
                shade.encode(x=alt.X("x:Q"), x2="x2:Q", tooltip=[alt.Tooltip("label:N", title="phase")])
            )
        base = alt.Chart().transform_filter(f"isValid(datum.{field})")
        if s["bucketed"]:
            field_tips += [_tip(f"{field}_lo", "min"), _tip(f"{field}_hi", "max")]
            band = alt.Y(f"{field}_lo:Q", title=title, scale=alt.Scale(zero=False))
            layers.append(base.mark_area(color=colour, opacity=0.25).encode(x=x, y=band, y2=f"{field}_hi:Q"))
        layers.append(base.mark_line(color=colour, strokeWidth=1.2).encode(x=x, y=y))
        layers.append(_hover_points(base, x, y, colour, tips + field_tips, zoom, hover))
        layers += extra
        layers.append(alt.Chart().mark_rule(color=GREY).encode(x=x).transform_filter(hover))
        if predicted in fig.frames:
            layers.append(_reference(fig.data(predicted)))
        return alt.LayerChart(layer=layers).properties(width=WIDTH, height=PANEL_HEIGHT)

    panels = []
    if s["sec"]:
        panels.append(panel("s", "sec/it (s)", BLUE, "pred_s", []))
    if s["tflops"]:
        panels.append(panel("tf", "TFLOP/s per GPU", ORANGE, "pred_tf", []))
    if s["loss"]:
        marks = []
        for column, colour, name in (
            ("skipped", ORANGE, "skipped iterations"),
            ("nan", RED, "NaN iterations"),
        ):
            if s[column]:
                rule = (
                    alt.Chart()
                    .mark_rule(color=colour, strokeWidth=1.5)
                    .transform_filter(f"datum.{column} > 0")
                )
                marks.append(rule.encode(x=x, tooltip=[*tips, _tip(column, name, "d")]))
        panels.append(panel("loss", "lm loss (orange: skipped, red: NaN)", GREEN, None, marks))
    if s["scale"]:
        y = alt.Y("scale:Q", title="loss scale (log)", scale=alt.Scale(type="log"))
        base = alt.Chart().transform_filter("isValid(datum.scale)")
        line = base.mark_line(interpolate="step-after", color="#b279a2").encode(x=x, y=y)
        points = _hover_points(base, x, y, "#b279a2", [*tips, _tip("scale", "loss scale")], zoom, hover)
        panels.append(alt.LayerChart(layer=[line, points]).properties(width=WIDTH, height=PANEL_HEIGHT // 2))
    with warnings.catch_warnings():  # one zoom and one hover on every panel is the point: shared selections
        warnings.filterwarnings("ignore", message="Automatically deduplicated selection parameter")
        chart = alt.vconcat(*panels, data=fig.data("series"), title=fig.title)
    return chart.resolve_scale(x="shared").configure_view(strokeWidth=0)


def memory(
    frame: pd.DataFrame,
    label: str,
    capacity: float | None,
    gpu_model: str | None,
    predicted: float | None = None,
) -> Figure:
    """Peak memory per rank (reserved where printed) against the device, with the 90 % and 95 % lines
    and the model's footprint of the first pipeline stage where it has one."""
    data = frame.drop(columns=["run_id"], errors="ignore").assign(
        rank=frame["rank"].fillna(-1), share=frame["peak_mib"] / capacity if capacity else float("nan")
    )
    frames = {"memory": data}
    lines = [(predicted, f"predicted {predicted:,.0f} MiB", GREY)] if predicted else []
    if capacity:
        lines += [
            (capacity, f"capacity {capacity:,.0f} MiB", "black"),
            (0.95 * capacity, "95 %", RED),
            (0.9 * capacity, "90 %", ORANGE),
        ]
    if lines:
        frames["capacity"] = _lines(lines, "capacity", quiet=("95 %", "90 %"))
    if capacity:
        what = f"capacity {capacity:,.0f} MiB" + (f" ({gpu_model})" if gpu_model else "")
        what += "; dashed red: 95 %, orange: 90 % of it"
    else:
        what = "device capacity unknown: name the GPU with `tracelog ingest --gpu`"
    title = [f"{label}: peak memory per rank (MiB; bar: reserved, tick: allocated)", what]
    shape = {
        "many": bool(data["rank"].nunique() > 128),
        "allocated": bool(data["alloc_mib"].notna().any()),
        "unranked": bool(frame["rank"].isna().any()),
    }
    return Figure(_draw_memory, title, frames, shape)


def _draw_memory(fig: Figure) -> alt.TopLevelMixin:
    x = (
        alt.X("rank:Q", title="rank")
        if fig.shape["many"]
        else alt.X("rank:O", title="rank (-1: the log names none)" if fig.shape["unranked"] else "rank")
    )
    colour = (
        alt.when("datum.share >= 0.95")
        .then(alt.value(RED))
        .when("datum.share >= 0.9")
        .then(alt.value(ORANGE))
    )
    tips = [
        _tip("rank", fmt="d"),
        _tip("peak_mib", "peak MiB", ",.0f"),
        _tip("alloc_mib", "max allocated MiB", ",.0f"),
    ]
    tips += [
        _tip("share", "of capacity", ".1%"),
        _tip("iteration", fmt="d"),
        _tip("line", "source line", "d"),
    ]
    base = alt.Chart(fig.data("memory"))
    mark = base.mark_point(filled=True) if fig.shape["many"] else base.mark_bar()
    y = alt.Y("peak_mib:Q", title="peak memory (MiB)")
    layers: list[Any] = [mark.encode(x=x, y=y, color=colour.otherwise(alt.value(BLUE)), tooltip=tips)]
    if fig.shape["allocated"]:
        layers.append(base.mark_tick(color="black", thickness=1).encode(x=x, y="alloc_mib:Q", tooltip=tips))
    if "capacity" in fig.frames:
        layers.append(_reference(fig.data("capacity")))
    return alt.layer(*layers).properties(width=WIDTH, height=200, title=fig.title)


def time_split(split: pd.DataFrame, label: str, measured: float | None) -> Figure:
    """The model's time per iteration, stacked by part, against the measured steady sec/it."""
    parts = pd.DataFrame({"part": split["metric"].str.removesuffix("_s"), "value": split["value"]})
    frames = {"parts": parts.assign(order=range(len(parts)))}
    if measured:
        frames["measured"] = _lines([(measured, "measured sec/it", "black")], "measured")
    title = f"{label}: predicted time per iteration (s): compute, pipeline bubble, TP and DP communication"
    return Figure(_draw_time_split, title, frames)


def _draw_time_split(fig: Figure) -> alt.TopLevelMixin:
    bars = (
        alt.Chart(fig.data("parts"))
        .mark_bar()
        .encode(
            x=alt.X("sum(value):Q", title="seconds per iteration"),
            color=alt.Color("part:N", title="predicted part"),
            order="order:Q",
            tooltip=[_tip("part", kind="N"), _tip("value", "seconds")],
        )
    )
    layers: list[Any] = [bars]
    if "measured" in fig.frames:
        layers.append(_reference(fig.data("measured"), axis="x"))
    return alt.layer(*layers).properties(width=WIDTH, height=50, title=fig.title)


# ---- across runs ----------------------------------------------------------------------------------------


def _n(value: Any) -> str:
    return "?" if value is None or pd.isna(value) else str(int(value))


def topology(frame: pd.DataFrame) -> Figure:
    """BLOOM-style layout comparison: sec/it and TFLOPs per run, measured and predicted side by side,
    filtered by the `tag` parameter (the page's tag selector sets it)."""
    data = frame.assign(
        order=range(len(frame)),
        run=[
            f"#{r.run_id} {r.name or ''} (DP{_n(r.dp)} TP{_n(r.tp)} PP{_n(r.pp)} MBS{_n(r.mbs)})"
            for r in frame.itertuples()
        ],
    )
    title = "steady-state sec/it and TFLOPs per run: measured (circle) and predicted (diamond)"
    return Figure(_draw_topology, title, {"runs": data})


def _draw_topology(fig: Figure) -> alt.TopLevelMixin:
    tag = alt.param(name="tag", value="")
    keep = "tag == '' || indexof(' ' + datum.tags + ' ', ' ' + tag + ' ') >= 0"
    tips = [_tip("name", kind="N"), _tip("tags", kind="N"), _tip("nodes", fmt="d"), _tip("gpus", "GPUs", "d")]
    tips += [_tip(c, c.upper(), "d") for c in ("dp", "tp", "pp", "mbs", "gbs")]
    kinds = alt.Scale(domain=["measured", "predicted"], range=[BLUE, "black"])
    shapes = alt.Scale(domain=["measured", "predicted"], range=["circle", "diamond"])

    def side(measured: str, predicted: str, title: str, labels: bool) -> alt.Chart:
        axis = alt.Axis(labelLimit=300) if labels else None
        return (
            alt.Chart()
            .transform_filter(keep)
            .transform_fold([measured, predicted], as_=["kind", "value"])
            .transform_filter("isValid(datum.value)")
            .transform_calculate(kind=f"datum.kind == '{measured}' ? 'measured' : 'predicted'")
            .mark_point(filled=True, size=70)
            .encode(
                y=alt.Y("run:N", sort=alt.EncodingSortField("order"), title=None, axis=axis),
                x=alt.X("value:Q", title=title, scale=alt.Scale(zero=False)),
                color=alt.Color("kind:N", scale=kinds, title=None),
                shape=alt.Shape("kind:N", scale=shapes, title=None),
                tooltip=[*tips, _tip("kind", kind="N"), _tip("value")],
            )
            .properties(width=280, height=alt.Step(18))
        )

    return alt.hconcat(
        side("sec_per_it", "sec_pred", "sec/it (s)", True).add_params(tag),
        side("tflops", "tflops_pred", "TFLOP/s per GPU", False),
        data=fig.data("runs"),
        title=fig.title,
    ).resolve_scale(y="shared")


# ---- benches --------------------------------------------------------------------------------------------


def _size_ticks(low: float, high: float) -> tuple[int, ...]:
    exponents = range(max(0, int(low).bit_length() - 1), int(high).bit_length())
    step = max(1, len(exponents) // 10)
    return tuple(2**e for e in exponents if e % step == 0)


def busbw(
    data: pd.DataFrame,
    collective: str,
    specs: list[tuple[str, float, float | None]],
    predicted: pd.DataFrame,
    latency_bound: float,
) -> Figure:
    """busbw over message size per bench, overlaid, with the link's spec lines, the predicted curve and
    the latency-bound sizes (busbw below `latency_bound` of the bench's plateau) shaded."""
    frames = {"rows": data.drop(columns=["bench_id"])}
    oop = data[data["placement"] == "out-of-place"]
    oop = oop if not oop.empty else data
    bound = oop[oop["busbw_gbps"] < latency_bound * oop.groupby("bench_id")["busbw_gbps"].transform("max")]
    if not bound.empty:
        label = f"latency-bound: below {latency_bound:.0%} of the plateau"
        frames["latency"] = pd.DataFrame(
            [{"x": data["size_bytes"].min(), "x2": bound["size_bytes"].max(), "label": label}]
        )
    if not predicted.empty:
        frames["predicted"] = predicted.drop(columns=["bench_id"])
    lines = []
    for name, uni, bi in specs:
        lines.append((uni, f"{name} unidirectional {uni:g} GB/s", "black"))
        if bi:
            lines.append((bi, f"{name} bidirectional {bi:g} GB/s (busbw is one direction)", GREY))
    if lines:
        frames["specs"] = _lines(lines, "specs")
    title = f"{collective}: bus bandwidth against message size (GB/s; dotted: predicted)"
    ticks = _size_ticks(data["size_bytes"].min(), data["size_bytes"].max())
    return Figure(_draw_busbw, title, frames, {"ticks": ticks})


def size_axis(ticks: tuple[int, ...]) -> alt.X:
    """Message size on a log-2 axis, ticks at powers of two labelled in B, KiB, MiB, GiB."""
    return alt.X(
        "size_bytes:Q",
        title="message size (bytes, log)",
        scale=alt.Scale(type="log", base=2),
        axis=alt.Axis(values=list(ticks), labelExpr=BYTES_LABEL),
    )


def _draw_busbw(fig: Figure) -> alt.TopLevelMixin:
    x = size_axis(fig.shape["ticks"])
    y = alt.Y("busbw_gbps:Q", title="bus bandwidth (GB/s, 1e9 B/s)")
    layers: list[Any] = []
    if "latency" in fig.frames:
        shade = alt.Chart(fig.data("latency"))
        layers.append(
            shade.mark_rect(color=GREY, opacity=0.15).encode(x=alt.X("x:Q"), x2="x2:Q", tooltip=["label:N"])
        )
        text = shade.mark_text(align="left", baseline="top", dx=3, dy=3, fontSize=10, color="#555")
        layers.append(text.encode(x="x:Q", y=alt.value(0), text="label:N"))
    tips = [_tip("bench", kind="N"), _tip("placement", kind="N"), _tip("size_bytes", "size (bytes)", ",d")]
    tips += [
        _tip("time_us", "time (µs)"),
        _tip("algbw_gbps", "algbw (GB/s)"),
        _tip("busbw_gbps", "busbw (GB/s)"),
    ]
    tips += [_tip("wrong", "#wrong", "d"), _tip("line", "source line", "d")]
    zoom = alt.selection_interval(name="zoom", bind="scales")
    curves = alt.Chart(fig.data("rows")).mark_line(point=True)
    colour, dash = alt.Color("bench:N", title="bench"), alt.StrokeDash("placement:N", title="placement")
    layers.append(curves.encode(x=x, y=y, color=colour, strokeDash=dash, tooltip=tips).add_params(zoom))
    if "predicted" in fig.frames:
        predicted = alt.Chart(fig.data("predicted")).mark_line(color="black", strokeDash=[2, 2])
        pred_tips = [_tip("bench", kind="N"), _tip("size_bytes", "size (bytes)", ",d")]
        pred_tips.append(_tip("busbw_gbps", "predicted busbw (GB/s)"))
        layers.append(
            predicted.encode(
                x=alt.X("size_bytes:Q"), y=alt.Y("busbw_gbps:Q"), detail="bench:N", tooltip=pred_tips
            )
        )
    if "specs" in fig.frames:
        layers.append(_reference(fig.data("specs")))
    return alt.layer(*layers).properties(width=WIDTH, height=300, title=fig.title)


def p2p(cells: pd.DataFrame, title: str, spec: str) -> Figure:
    """One p2pBandwidthLatencyTest matrix as a heatmap: the diagonal (a GPU with itself) grey and out of
    the colour scale, outlier pairs boxed in red."""
    unit = str(cells["unit"].iloc[0])
    gpus = int(cells["src"].nunique())
    notes = [
        spec or "no spec for this GPU in the catalog",
        "red box: a pair below the outlier share of the median",
    ]
    if unit == "bool":
        notes = ["1: the pair can access each other's memory directly (peer access), 0: it cannot"]
    elif unit != "GB/s":
        notes = ["latency: lower is better; colour from 0"]
    full = [f"{title} ({unit})", *notes]
    shape = {"unit": unit, "labels": gpus <= 16, "side": max(160, min(560, 28 * gpus))}
    return Figure(_draw_p2p, full, {"cells": cells.drop(columns=["bench_id", "matrix", "unit"])}, shape)


def _draw_p2p(fig: Figure) -> alt.TopLevelMixin:
    unit = fig.shape["unit"]
    x, y = alt.X("dst:O", title="destination GPU"), alt.Y("src:O", title="source GPU")
    base = alt.Chart(fig.data("cells"))
    tips = [_tip("src", "source GPU", "d"), _tip("dst", "destination GPU", "d"), _tip("value", unit)]
    tips += [_tip("outlier", "outlier (1 = yes)", "d"), _tip("line", "source line", "d")]
    # From zero, so a 5 % spread looks like 5 % and not like a fault (a scale stretched over 39-41 GB/s
    # paints a healthy matrix in both ends of the palette); peer access is yes or no, two colours.
    if unit == "bool":
        colour = alt.Color(
            "access:N", title="peer access", scale=alt.Scale(domain=["yes", "no"], range=[GREEN, "#d9d9d9"])
        )
        base = base.transform_calculate(access="datum.value > 0 ? 'yes' : 'no'")
    else:
        scale = alt.Scale(scheme="viridis" if unit == "GB/s" else "magma", domainMin=0, zero=True)
        colour = alt.Color("value:Q", title=unit, scale=scale)
    layers: list[Any] = [
        base.transform_filter("datum.src != datum.dst")
        .mark_rect()
        .encode(x=x, y=y, color=colour, tooltip=tips),
        base.transform_filter("datum.src == datum.dst")
        .mark_rect(color="#e0e0e0")
        .encode(x=x, y=y, tooltip=tips),
        base.transform_filter("datum.outlier == 1")
        .mark_rect(fill=None, stroke=RED, strokeWidth=2.5)
        .encode(x=x, y=y, tooltip=tips),
    ]
    if fig.shape["labels"]:
        text = alt.Text("value:Q", format=".2f" if unit == "us" else ".0f")
        ink = alt.when("datum.src == datum.dst").then(alt.value("#444")).otherwise(alt.value("white"))
        layers.append(base.mark_text(fontSize=9).encode(x=x, y=y, text=text, color=ink))
    side = fig.shape["side"]
    return alt.layer(*layers).properties(width=side, height=side, title=fig.title)


def _natural(name: str) -> tuple[Any, ...]:
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", name))


def _link_colour(kind: str) -> str:
    if kind.startswith("NV"):
        return GREEN
    return {"X": "#e0e0e0", "PIX": BLUE, "PXB": "#72b7b2", "PHB": ORANGE, "NODE": "#eeca3b", "SYS": RED}.get(
        kind, "#b279a2"
    )


def links(frame: pd.DataFrame, title: str) -> Figure:
    """`nvidia-smi topo -m` as a heatmap of the link kind between each pair of devices."""
    devices = tuple(sorted(set(frame["a"]) | set(frame["b"]), key=_natural))
    kinds = tuple(sorted(frame["link_kind"].unique(), key=_natural))
    full = f"{title}: link between each pair (NV#: NVLink count, SYS: across CPU sockets)"
    return Figure(
        _draw_links, full, {"links": frame.drop(columns=["bench_id"])}, {"devices": devices, "kinds": kinds}
    )


def _draw_links(fig: Figure) -> alt.TopLevelMixin:
    devices, kinds = list(fig.shape["devices"]), list(fig.shape["kinds"])
    base = alt.Chart(fig.data("links"))
    x = alt.X("b:N", sort=devices, title=None, axis=alt.Axis(orient="top", labelAngle=-45))
    y = alt.Y("a:N", sort=devices, title=None)
    tips = [_tip(c, kind="N") for c in ("host", "a", "b", "link_kind")]
    tips += [_tip("link_count", "NVLinks", "d"), _tip("line", "source line", "d")]
    colour = alt.Color(
        "link_kind:N", title="link", scale=alt.Scale(domain=kinds, range=[_link_colour(k) for k in kinds])
    )
    side = max(160, min(560, 30 * len(devices)))
    return alt.layer(
        base.mark_rect().encode(x=x, y=y, color=colour, tooltip=tips),
        base.mark_text(fontSize=9).encode(x=x, y=y, text="link_kind:N"),
    ).properties(width=side, height=side, title=fig.title)
