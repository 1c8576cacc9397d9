"""The report's opening: the runs table, the overlays, two runs' differences, heatmap scales, and the
same charts from Python (`tracelog.charts`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import tracelog.charts as tc
from tests.test_report import build_store, specs_of
from tracelog import report
from tracelog.errors import TracelogError
from tracelog.store import Store


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int], str]:
    folder = tmp_path_factory.mktemp("overview")
    ids = build_store(folder / "t.duckdb")
    result = report.write_report(folder / "t.duckdb", folder / "report.html")
    return folder / "t.duckdb", ids, result.path.read_text(encoding="utf-8")


def pair_store(path: Path, part_at: int) -> None:
    """Two runs of 100 logged iterations each: equal loss until `part_at`, 10 % apart after it; one
    noisy line at 30 (a gap on one line is not parting); different TP, PP and one argument."""
    with Store(path) as store:
        store.con.execute(
            "INSERT INTO sources (path, fingerprint, bytes, format, parser_version, lines_total, lines_parsed, "
            "lines_unparsed) VALUES ('pair.log', 'x', 0, 'megatron', 't', 0, 0, 0)"
        )
        store.con.execute(
            "INSERT INTO runs (run_id, source_id, run_key, name, framework, tp, pp, seq_len) VALUES "
            "(1, 1, 0, 'base', 'megatron', 4, 2, 2048), (2, 1, 1, 'tp8', 'megatron', 8, 1, 2048)"
        )
        store.con.execute("INSERT INTO run_params VALUES (1, 'lr', '3e-4', 5), (2, 'lr', '1e-4', 5)")
        store.con.execute(
            f"""
            INSERT INTO iterations (run_id, iteration, consumed_samples, elapsed_s, lm_loss, tflops_reported,
                                    line_no)
            SELECT r, i, i * 512, 2.0 * r, 10 - i / 20 + CASE WHEN r = 2 AND (i >= {part_at} OR i = 30)
                                                              THEN 0.8 ELSE 0 END,
                   150.0 / r, 100 + i
            FROM range(1, 3) a(r), range(1, 101) b(i)
            """
        )


def test_two_named_runs_open_on_their_differences(tmp_path):
    db = tmp_path / "pair.duckdb"
    pair_store(db, part_at=61)
    page = report.write_report(db, tmp_path / "ab.html", runs=["1", "2"]).path.read_text(encoding="utf-8")
    assert page.index('id="differences"') < page.index('id="flags"') < page.index('id="runs"')
    differences = page.split('id="differences"')[1].split("</section>")[0]
    assert "loss curves part at iteration 61" in differences  # not 30: one noisy line is not parting
    config = differences.split('id="config-diff"')[1].split("</table>")[0]
    keys = re.findall(r'<tr><td data-v="([^"]+)">', config)
    assert keys == ["pp", "tp", "arg lr"]
    assert (
        "sec/it" in differences and '<td class="n" data-v="2">2</td></tr>' in differences
    )  # b / a of the medians


def test_curves_that_never_part_say_so(tmp_path):
    db = tmp_path / "pair.duckdb"
    pair_store(db, part_at=1000)
    page = report.write_report(db, tmp_path / "ab.html", runs=["1", "2"]).path.read_text(encoding="utf-8")
    assert "loss curves stay together over 100 shared iterations" in page


def test_a_whole_report_has_no_differences_section(built):
    _, _, page = built
    assert 'id="differences"' not in page


def test_the_runs_table_puts_measured_beside_predicted_with_the_gap_coloured(built):
    _, ids, page = built
    table = page.split('id="runs-table"')[1].split("</table>")[0]
    heads = re.findall(r"<th>([^<]+)</th>", table)
    assert heads[heads.index("sec/it") : heads.index("sec/it") + 3] == ["sec/it", "predicted", "of model"]
    with Store(built[0], read_only=True) as store:
        measured, runs = (
            store.con.execute(
                "SELECT sec_per_it FROM run_summary WHERE run_id = ?", [ids["llama"]]
            ).fetchone()[0],
            store.scalar("SELECT count(*) FROM runs"),
        )
    row = table.split(f'data-run="{ids["llama"]}"')[1].split("</tr>")[0]
    shares = re.findall(r'<td class="n gap-(ok|gap|bad)" data-v="([^"]+)">', row)
    predicted = 4.5  # add_predictions in test_report: sec_per_it 4.5 s for the llama run
    assert float(shares[0][1]) == pytest.approx(predicted / measured)
    assert shares[0][0] == (
        "ok" if predicted / measured >= 0.8 else "gap" if predicted / measured >= 0.4 else "bad"
    )
    assert table.count("<tr data-tags") == runs  # every run on one line


def test_runs_overlay_on_iteration_and_tokens_from_one_dataset(built):
    _, ids, page = built
    spec = specs_of(page)["chart-overlays"]
    assert len(spec["datasets"]) == 2  # the series and the warm-up spans, shared by every panel
    text = json.dumps(spec)
    assert '"field": "tokens"' in text and '"field": "it"' in text
    assert '"bind": "legend"' in text
    assert len(spec["vconcat"]) == 3  # sec/it, TFLOP/s, loss
    series = next(v for v in spec["datasets"].values() if v.startswith('"run_id","it",'))
    per_run = {}
    for line in series.splitlines()[1:]:
        per_run[line.split(",")[0]] = per_run.get(line.split(",")[0], 0) + 1
    assert per_run and min(per_run.values()) >= 2  # a run with one value is not drawn
    assert str(ids["llama"]) in per_run


def test_p2p_heatmaps_start_at_zero_and_peer_access_is_yes_or_no(built):
    _, ids, page = built
    charts = specs_of(page)
    bandwidth = json.dumps(charts[f"chart-p2p-{ids['p2p']}-bandwidth_uni_p2p_on"])
    assert '"domainMin": 0' in bandwidth
    for chart_id, spec in charts.items():
        title = json.dumps(spec.get("title") or spec.get("layer", [{}])[0].get("title"))
        if "connectivity" in chart_id or "access" in chart_id:
            assert "latency" not in title and "peer access" in title


def test_notebook_charts_are_the_report_charts(built):
    db, ids, _ = built
    overlay = tc.overlay(db)
    bundle = overlay._repr_mimebundle_()  # what Jupyter calls to show the last expression of a cell
    assert {"text/html", "application/vnd.vegalite.v5+json"} & set(bundle)
    assert json.dumps(overlay.to_dict()).count('"bind": "legend"') == 1
    assert "busbw-all_reduce" in tc.all_charts(db)
    assert tc.busbw(db, "all_reduce").to_dict()["title"].startswith("all_reduce")
    assert "per iteration" in json.dumps(tc.run(db, ids["llama"]).to_dict())
    with pytest.raises(TracelogError, match="no alltoall_v bus bandwidth chart"):
        tc.busbw(db, "alltoall_v")
    with pytest.raises(TracelogError, match="no database"):
        tc.all_charts(db.parent / "missing.duckdb")
