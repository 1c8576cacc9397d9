"""`tracelog report`: one self-contained HTML file that needs no network and escapes what logs say."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracelog import api, report
from tracelog.cli import cli
from tracelog.errors import TracelogError
from tracelog.report.html import Specs, javascript_bundle
from tracelog.store import Store

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_logs"
MEGATRON_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "megatron"
EVIL = "<script>alert(1)</script>"
EVIL_TAG = "<img src=x onerror=alert(2)>"
SAMPLE = "megatron_lm_llama3_8b_h100.log"


def _busbw(size: int, peak: float) -> float:
    """A plausible nccl-tests curve: latency-bound below a few MB, a plateau above."""
    return peak * size / (size + 4_000_000)


def add_benches(store: Store, flagged_run: int) -> dict[str, int]:
    """Benches, collectives, p2p, links, predictions and flags as the parsers and the model write them."""
    con = store.con
    con.execute(
        "INSERT INTO sources (path, fingerprint, bytes, format, parser_version, lines_total, lines_parsed, "
        "lines_unparsed) VALUES ('fabric.txt', 'f00d', 1, 'nccl_tests', '1', 200, 200, 0)"
    )
    source = con.execute("SELECT max(source_id) FROM sources").fetchone()[0]
    ids = {}
    for key, (tool, collective) in enumerate(
        [
            ("nccl-tests", "all_reduce"),
            ("nccl-tests", "all_reduce"),
            ("p2pBandwidthLatencyTest", None),
            ("nvidia-smi-topo", None),
        ]
    ):
        con.execute(
            "INSERT INTO benches (source_id, bench_key, tool, collective, ranks, nodes, gpus_per_node, gpu_name, "
            "gpu_model, dtype, redop, hosts, status, avg_busbw_gbps, wrong_total, line_start, line_end) VALUES "
            "(?, ?, ?, ?, 8, 1, 8, 'NVIDIA A100-SXM4-80GB', 'a100-sxm4-80gb', 'float', 'sum', ['node-a'], "
            "'complete', 98.5, 0, ?, ?)",
            [source, key, tool, collective, 10 + 40 * key, 40 + 40 * key],
        )
        ids[f"{tool}-{key}"] = con.execute("SELECT max(bench_id) FROM benches").fetchone()[0]
    good, slow, p2p, topo = ids.values()
    for bench, peak in ((good, 230.0), (slow, 120.0)):
        con.execute(
            f"""
            INSERT INTO collectives (bench_id, size_bytes, count, type, redop, root, placement, time_us,
                                     algbw_gbps, busbw_gbps, wrong, line_no)
            SELECT {bench}, 1 << e, (1 << e) // 4, 'float', 'sum', -1, placement,
                   (1 << e) / (b / 1.75) / 1e3, b / 1.75, b, 0, 100 + e
            FROM (SELECT e, placement, {peak} * (1 << e) / ((1 << e) + 4000000) AS b
                  FROM range(3, 34) t(e), (VALUES ('out-of-place'), ('in-place')) p(placement))
            """
        )
    con.execute(
        f"""
        INSERT INTO predictions (subject_kind, subject_id, metric, value, unit, formula, detail)
        SELECT 'collective', {good}, 'busbw_gbps', 250.0 * (1 << e) / ((1 << e) + 2000000), 'GB/s', 'alpha-beta',
               '{{"size_bytes": ' || (1 << e) || '}}'
        FROM range(3, 34) t(e)
        """
    )
    con.execute(
        f"""
        INSERT INTO p2p (bench_id, matrix, src, dst, value, unit, line_no)
        SELECT {p2p}, 'bandwidth_uni_p2p_on', s, d,
               CASE WHEN s = d THEN 1581.5 WHEN s = 3 AND d = 5 THEN 41.0 ELSE 274.0 + (s + d) % 3 END,
               'GB/s', 200 + s FROM range(8) a(s), range(8) b(d)
        UNION ALL
        SELECT {p2p}, 'latency_gpu_p2p_on', s, d, CASE WHEN s = d THEN 2.1 ELSE 2.6 END, 'us', 220 + s
        FROM range(8) a(s), range(8) b(d)
        """
    )
    con.execute(
        f"""
        INSERT INTO links (bench_id, host, a, b, link_kind, link_count, line_no)
        SELECT {topo}, 'node-a', 'GPU' || a, 'GPU' || b, CASE WHEN a = b THEN 'X' ELSE 'NV12' END,
               CASE WHEN a = b THEN NULL ELSE 12 END, 300 + a
        FROM range(8) x(a), range(8) y(b)
        UNION ALL SELECT {topo}, 'node-a', 'NIC0', 'GPU' || g, CASE WHEN g < 2 THEN 'PXB' ELSE 'SYS' END, NULL, 310
        FROM range(8) z(g)
        """
    )
    flags = [
        ("low_bandwidth", "warning", "bench", slow, 120.0, 300.0, 0.4, "all_reduce busbw peaks at 120 GB/s."),
        ("p2p_disabled", "warning", "p2p", p2p, 41.0, 274.0, 0.15, "1 GPU pair below the median: 3→5."),
        ("training_health", "critical", "run", flagged_run, 1.0, 0.0, None, f"error line: {EVIL}"),
    ]
    for rule, severity, kind, subject, measured, expected, ratio, message in flags:
        con.execute(
            "INSERT INTO flags (rule, severity, subject_kind, subject_id, measured, expected, ratio, message, hint) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'Check the link.')",
            [rule, severity, kind, subject, measured, expected, ratio, message],
        )
    return {"good": good, "slow": slow, "p2p": p2p, "topo": topo}


def add_predictions(store: Store, run_id: int) -> None:
    rows = [
        ("sec_per_it", 4.5, "s"),
        ("tflops_per_gpu", 390.0, "TFLOP/s"),
        ("gpu_memory_mib", 61234.0, "MiB"),
        ("gpu_capacity_mib", 81559.0, "MiB"),
        ("compute_s", 3.6, "s"),
        ("bubble_s", 0.0, "s"),
        ("tp_comm_s", 0.5, "s"),
        ("dp_comm_s", 0.3, "s"),
    ]
    for metric, value, unit in rows:
        store.con.execute(
            "INSERT INTO predictions (subject_kind, subject_id, metric, value, unit, formula) "
            "VALUES ('run', ?, ?, ?, ?, 'megatron')",
            [run_id, metric, value, unit],
        )


def build_store(path: Path) -> dict[str, int]:
    """The sample logs, one run renamed to a script tag and tagged, predictions for another, benches.
    The logs are copied without their tracelog.toml, so the hand-made predictions are the only ones."""
    logs = path.parent / "logs"
    shutil.copytree(SAMPLES, logs, ignore=shutil.ignore_patterns("tracelog.toml"))
    results = api.ingest(path, [str(logs)])
    assert all(not isinstance(r, api.IngestFailure) for r in results), results
    with Store(path) as store:
        first = store.scalar("SELECT min(run_id) FROM runs WHERE run_id IN (SELECT run_id FROM iterations)")
        llama = store.scalar("SELECT min(run_id) FROM runs WHERE name = ?", [SAMPLE])
        store.con.execute("UPDATE runs SET name = ? WHERE run_id = ?", [EVIL, first])
        store.con.execute(
            "INSERT INTO run_tags VALUES (?, 'exp', 'topology'), (?, 'exp', 'topology'), (?, 'owner', ?)",
            [first, llama, first, EVIL_TAG],
        )
        add_predictions(store, llama)
        ids = add_benches(store, first)
    return {"evil": first, "llama": llama, **ids}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int], str]:
    folder = tmp_path_factory.mktemp("report")
    ids = build_store(folder / "t.duckdb")
    result = report.write_report(folder / "t.duckdb", folder / "report.html")
    return folder / "t.duckdb", ids, result.path.read_text(encoding="utf-8")


def specs_of(page: str) -> dict[str, dict]:
    found = re.findall(r'<script type="application/json" data-chart="([^"]+)">(.*?)</script>', page, re.S)
    return {chart_id: json.loads(text) for chart_id, text in found}


def without_library(page: str) -> str:
    """The page with the inlined Vega / Vega-Lite / Vega-Embed bundle taken out."""
    bundle = javascript_bundle()
    assert page.count(bundle) == 1
    return page.replace(bundle, "")


def test_every_section_is_there(built):
    _, ids, page = built
    for anchor in (
        "flags",
        f"run-{ids['evil']}",
        f"run-{ids['llama']}",
        "across-runs",
        "collective-all_reduce",
        f"bench-{ids['good']}",
        f"bench-{ids['p2p']}",
        f"bench-{ids['topo']}",
    ):
        assert f'id="{anchor}"' in page, anchor
    charts = specs_of(page)
    for chart_id in (
        f"chart-run-{ids['llama']}-iterations",
        f"chart-run-{ids['llama']}-memory",
        f"chart-run-{ids['llama']}-time-split",
        "chart-across-runs",
        "chart-busbw-all_reduce",
        f"chart-p2p-{ids['p2p']}-bandwidth_uni_p2p_on",
        f"chart-p2p-{ids['p2p']}-latency_gpu_p2p_on",
        f"chart-topology-{ids['topo']}-0",
    ):
        assert chart_id in charts, chart_id


def test_the_page_loads_nothing_from_the_network(built):
    _, _, page = built
    assert not re.search(r"<(script|img|link|iframe)[^>]*\s(src|href)\s*=\s*[\"']?https?:", page, re.I)
    assert not re.search(r"<script[^>]*\ssrc\s*=", page, re.I)
    # Outside the inlined library, the page holds no URL at all (the specs drop `$schema`).
    assert not re.search(r"https?://", without_library(page))


def test_the_library_is_inlined_once_and_its_urls_are_inert(built):
    _, _, page = built
    library_urls = set(re.findall(r"https?://[^\s\"'`)]+", javascript_bundle()))
    # XML namespaces, the schema id, an issue link and the editor link of the (disabled) editor action.
    assert all(
        re.match(r"https?://(www\.w3\.org|vega\.github\.io|github\.com)/", url) for url in library_urls
    )
    assert '"editor":false' in page.replace(" ", "")


def test_a_script_in_a_run_name_is_escaped(built):
    _, ids, page = built
    assert EVIL not in page
    assert EVIL_TAG not in page
    assert f"run {ids['evil']}: &lt;script&gt;alert(1)&lt;/script&gt;" in page
    # In chart specs the name is JSON with < and > escaped, so it cannot close the script element.
    spec_text = page.split(f'data-chart="chart-run-{ids["evil"]}-iterations">')[1].split("</script>")[0]
    assert "\\u003cscript\\u003ealert(1)\\u003c/script\\u003e" in spec_text
    assert json.loads(spec_text)["title"] == f"run {ids['evil']}: {EVIL}: per iteration"
    scripts = re.findall(r"<script\b", page)
    assert len(scripts) == 2 + len(specs_of(page))  # the library, the page's own code, one per chart


def test_flags_come_most_severe_first_and_link_to_their_section(built):
    _, ids, page = built
    first = page.split('id="flags-table"')[1].split("</table>")[0]
    assert re.findall(r'<tr class="sev-(\w+)"', first)[0] == "critical"
    assert "sev-info" not in first  # the first screen holds the flags that matter
    table = page.split('id="all-flags"')[1].split("</table>")[0]
    severities = re.findall(r'<tr class="sev-(\w+)"', table)
    order = {"critical": 0, "warning": 1, "info": 2}
    assert severities == sorted(severities, key=order.__getitem__)
    assert severities[0] == "critical"
    assert f'href="#bench-{ids["slow"]}"' in table
    assert f'href="#bench-{ids["p2p"]}"' in table
    assert f'id="bench-{ids["slow"]}"' in page  # the bench row the flag links to


def test_predictions_are_drawn_where_present(built):
    _, ids, page = built
    charts = specs_of(page)
    iterations = json.dumps(charts[f"chart-run-{ids['llama']}-iterations"])
    assert "predicted (megatron)" in iterations
    memory = json.dumps(charts[f"chart-run-{ids['llama']}-memory"])
    assert "capacity 81,559 MiB" in memory and "95 %" in memory and "90 %" in memory
    assert "predicted 61,234 MiB" in memory
    split = json.dumps(charts[f"chart-run-{ids['llama']}-time-split"])
    assert all(part in split for part in ("compute", "bubble", "tp_comm", "dp_comm"))
    busbw = json.dumps(charts["chart-busbw-all_reduce"])
    assert "latency-bound" in busbw and '"type": "log"' in busbw
    assert len(charts["chart-busbw-all_reduce"]["datasets"]) >= 3  # rows, latency region, predicted curve


def test_bandwidth_is_held_against_the_catalog_link(built):
    pytest.importorskip("tracelog.hardware")
    _, ids, page = built
    charts = specs_of(page)
    busbw = json.dumps(charts["chart-busbw-all_reduce"])
    assert "unidirectional 300 GB/s" in busbw and "bidirectional 600 GB/s (busbw is one direction)" in busbw
    p2p = charts[f"chart-p2p-{ids['p2p']}-bandwidth_uni_p2p_on"]
    assert any("unidirectional spec 300 GB/s" in line for line in p2p["title"])


def test_the_p2p_outlier_pair_is_marked(built):
    _, ids, page = built
    spec = specs_of(page)[f"chart-p2p-{ids['p2p']}-bandwidth_uni_p2p_on"]
    cells = list(csv.DictReader(io.StringIO(next(iter(spec["datasets"].values())))))
    assert len(cells) == 64
    assert [(c["src"], c["dst"]) for c in cells if c["outlier"] == "1"] == [("3", "5")]


def test_narrowing_to_a_run_leaves_out_other_runs_and_benches(built, tmp_path):
    db, ids, _ = built
    result = report.write_report(db, tmp_path / "one.html", runs=[ids["llama"]])
    page = result.path.read_text(encoding="utf-8")
    assert f'id="run-{ids["llama"]}"' in page
    assert f'id="run-{ids["evil"]}"' not in page
    assert 'id="across-runs"' not in page and "collective-all_reduce" not in page
    assert "error line" not in page  # the other run's flag
    assert result.sections == [f"run {ids['llama']}: {SAMPLE}"]


def test_narrowing_by_tag_and_by_bench(built, tmp_path):
    db, ids, _ = built
    tagged = report.write_report(db, tmp_path / "tag.html", tags={"exp": "topology"})
    assert sorted(t.split(":")[0] for t in tagged.sections if t.startswith("run ")) == sorted(
        f"run {i}" for i in (ids["evil"], ids["llama"])
    )
    bench = report.write_report(db, tmp_path / "bench.html", benches=[ids["p2p"]])
    assert bench.sections == [f"p2p: bench {ids['p2p']} NVIDIA A100-SXM4-80GB"]


@pytest.mark.parametrize("kwargs", [{"runs": ["no-such-run"]}, {"benches": ["999"]}, {"benches": ["x"]}])
def test_an_unknown_run_or_bench_is_a_user_error(built, tmp_path, kwargs):
    db, _, _ = built
    with pytest.raises(TracelogError):
        report.write_report(db, tmp_path / "x.html", **kwargs)


def test_an_empty_database_gives_a_page_without_sections(tmp_path):
    Store(tmp_path / "empty.duckdb").close()
    result = report.write_report(tmp_path / "empty.duckdb", tmp_path / "empty.html")
    page = result.path.read_text(encoding="utf-8")
    assert result.charts == 0 and result.sections == []
    assert "No flags." in page and "<section" in page


# Invented, in the layout of an nccl-tests table trimmed by its author to the out-of-place columns, with
# no device lines: the bench knows neither its ranks nor its nodes.
TRIMMED_BENCH = """\
# nccl-tests version 2.19.6
#       size         count      type   redop     time   algbw   busbw
     1048576        262144     float     sum     25.35   41.37   62.06
    16777216       4194304     float     sum    100.52  166.91  250.36
   268435456      67108864     float     sum    657.68  408.15  612.23
  1073741824     268435456     float     sum   2489.71  431.27  646.91
# Avg bus bandwidth: 390.79 GB/s
"""


def test_a_bench_that_never_printed_its_ranks_or_nodes_is_drawn(tmp_path):
    path = tmp_path / "trimmed.txt"
    path.write_text(TRIMMED_BENCH)
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(path)])
    # no device line, launch or node count: the nodes stay unknown (the ranks now come from the busbw factor)
    assert api.sql(db, "SELECT nodes FROM benches").isna().all(axis=None)
    result = report.write_report(db, tmp_path / "r.html")
    page = result.path.read_text(encoding="utf-8")
    assert result.charts >= 1 and "646.91" in page


def test_a_missing_database_is_a_user_error(tmp_path):
    with pytest.raises(TracelogError, match="no database"):
        report.write_report(tmp_path / "nothing.duckdb", tmp_path / "x.html")


def test_long_runs_are_downsampled_in_the_database(tmp_path):
    db = tmp_path / "long.duckdb"
    with Store(db) as store:
        store.con.execute("INSERT INTO runs (source_id, run_key, name) VALUES (1, 0, 'long')")
        store.con.execute(
            """
            INSERT INTO iterations (run_id, iteration, elapsed_s, lm_loss, loss_scale, skipped, nan, line_no)
            SELECT 1, i, CASE WHEN i = 25000 THEN 9.0 ELSE 1.0 + (i % 7) / 100 END, 10 - i / 10000, 65536,
                   0, CASE WHEN i = 30000 THEN 1 ELSE 0 END, i + 100
            FROM range(1, 50001) t(i)
            """
        )
        built_report = report.build(store)
    figure = built_report.sections[0].blocks[1].figure
    series = figure.frames["series"]
    assert len(series) == report.POINTS_PER_RUN
    assert series["lines"].sum() == 50000
    assert series["s_hi"].max() == 9.0  # a one-line spike survives in its bucket's max
    assert series["nan"].sum() == 1
    spec = Specs()(figure)
    assert len(next(iter(spec["datasets"].values())).splitlines()) == report.POINTS_PER_RUN + 1


def test_charts_of_one_shape_reuse_the_spec_with_their_own_data(built):
    db, _, _ = built
    with Store(db, read_only=True) as store:
        figures = [b.figure for s in report.build(store).sections for b in s.blocks if b.figure is not None]
    specs = Specs()
    reused = [specs(f) for f in figures]
    assert len(specs.templates) < len(figures)  # some shapes repeat in the sample logs

    def resolved(spec: dict) -> str:
        names = spec.get("datasets", {})
        text = json.dumps({k: v for k, v in spec.items() if k != "datasets"}, sort_keys=True)
        for name, values in names.items():
            text = text.replace(name, values)
        return text

    for figure, spec in zip(figures, reused, strict=True):
        fresh = figure.chart().to_dict()
        fresh.pop("$schema")
        assert resolved(spec) == resolved(fresh)


def test_the_cli_writes_the_report_and_pngs(built, tmp_path):
    db, ids, _ = built
    out, pngs = tmp_path / "cli.html", tmp_path / "png"
    result = CliRunner().invoke(
        cli, ["--db", str(db), "report", str(ids["llama"]), "-o", str(out), "--png", str(pngs)]
    )
    assert result.exit_code == 0, result.output
    assert out.exists() and str(out) in result.output
    written = sorted(p.name for p in pngs.iterdir())
    assert f"run-{ids['llama']}-iterations.png" in written
    assert all((pngs / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for name in written)


def test_the_cli_reports_a_bad_reference_as_a_user_error(built, tmp_path):
    db, _, _ = built
    result = CliRunner().invoke(
        cli, ["--db", str(db), "report", "--bench", "999", "-o", str(tmp_path / "x.html")]
    )
    assert result.exit_code == 1
    assert "no bench with id '999'" in result.output


def test_the_api_returns_what_it_wrote(built, tmp_path):
    db, _, _ = built
    result = api.report(str(db), output=tmp_path / "api.html", tags={"exp": "topology"})
    assert result.path.exists() and result.bytes == result.path.stat().st_size and result.charts > 0


@pytest.mark.skipif(not MEGATRON_CORPUS.is_dir(), reason="the shared Megatron corpus is not checked out here")
def test_every_corpus_run_gets_a_section(tmp_path):
    files = sorted(str(p) for p in MEGATRON_CORPUS.iterdir() if p.suffix in {".out", ".log", ".txt"})
    api.ingest(tmp_path / "corpus.duckdb", files)
    result = report.write_report(tmp_path / "corpus.duckdb", tmp_path / "corpus.html")
    with Store(tmp_path / "corpus.duckdb", read_only=True) as store:
        runs = store.scalar("SELECT count(*) FROM runs")
    assert sum(title.startswith("run ") for title in result.sections) == runs > 0
    assert result.bytes < 5_000_000
