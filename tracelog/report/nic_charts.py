"""The report's chart of perftest runs: each NIC's RDMA bandwidth over message size, beside what its port
allows (the plateau `tracelog.model.nic` gives), so a slow NIC of an acceptance sweep stands out at a glance.

Kept apart from `charts` (the training and nccl-tests charts), with which it shares the `Figure` frame."""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

from tracelog.report.charts import WIDTH, Figure, _size_ticks, _tip, size_axis


def nic_bandwidth(rows: pd.DataFrame, plateaus: pd.DataFrame) -> Figure:
    """`bw_avg_gbps` over `size_bytes` per run (column `run`), overlaid; each run's plateau (`plateau_gbps`)
    as a dashed rule in the run's colour. A bidirectional run's figures are both directions summed, and so
    is its plateau."""
    frames = {"rows": rows}
    if not plateaus.empty:
        frames["plateaus"] = plateaus
    title = "perftest: RDMA bandwidth against message size (GB/s; dashed: what each run's port allows)"
    ticks = _size_ticks(rows["size_bytes"].min(), rows["size_bytes"].max())
    return Figure(_draw, title, frames, {"ticks": ticks})


def _draw(fig: Figure) -> alt.TopLevelMixin:
    x = size_axis(fig.shape["ticks"])
    y = alt.Y("bw_avg_gbps:Q", title="average bandwidth (GB/s, 1e9 B/s)")
    colour = alt.Color("run:N", title="run", sort=None, legend=alt.Legend(labelLimit=260))
    tips = [_tip("run", kind="N"), _tip("size_bytes", "size (bytes)", ",d")]
    tips += [_tip("bw_avg_gbps", "average (GB/s)"), _tip("bw_peak_gbps", "peak (GB/s)")]
    tips += [_tip("msg_rate_mpps", "message rate (Mpps)"), _tip("line", "source line", "d")]
    zoom = alt.selection_interval(name="zoom", bind="scales")
    layers: list[Any] = [
        alt.Chart(fig.data("rows"))
        .mark_line(point=True)
        .encode(x=x, y=y, color=colour, tooltip=tips)
        .add_params(zoom)
    ]
    if "plateaus" in fig.frames:
        rule = alt.Chart(fig.data("plateaus")).mark_rule(strokeDash=[4, 3])
        rule_tips = [_tip("run", kind="N"), _tip("plateau_gbps", "the port allows (GB/s)")]
        layers.append(rule.encode(y=alt.Y("plateau_gbps:Q"), color=colour, tooltip=rule_tips))
    return alt.layer(*layers).properties(width=WIDTH, height=300, title=fig.title)
