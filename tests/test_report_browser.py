"""The report in a real headless Chromium: every chart drawn, no console error, no network request, and
log text shown as text. Needs Debian's `chromium` (CI installs it); locally it skips without one.

`python benchmarks/report_screenshot.py` regenerates docs/report-first-screen.png from the sample logs.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.test_report import EVIL, EVIL_TAG, build_store  # noqa: E402
from tracelog import report  # noqa: E402

pytestmark = pytest.mark.browser
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def _missing(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: CI must run the browser tests")
    pytest.skip(f"{reason}; install Debian's chromium (apt-get install chromium) to run the browser tests")


def launch(playwright: Any) -> Any:
    return playwright.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if shutil.which("chromium") is None:
        _missing("no chromium on PATH")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("the playwright package is not installed (pip install '.[test]')")
    with sync_playwright() as playwright:
        opened = launch(playwright)
        yield opened
        opened.close()


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    folder = tmp_path_factory.mktemp("browser")
    ids = build_store(folder / "t.duckdb")
    return report.write_report(folder / "t.duckdb", folder / "report.html").path, ids


class Opened:
    """A page with the report open, every request routed and every console message, error and dialog kept."""

    def __init__(self, browser: Any, path: Path) -> None:
        self.requests: list[str] = []
        self.console: list[tuple[str, str]] = []
        self.dialogs: list[str] = []
        self.page = browser.new_page(viewport={"width": 1280, "height": 900})
        self.page.set_default_timeout(60_000)
        self.page.route("**/*", self._route)
        self.page.on("console", lambda message: self.console.append((message.type, message.text)))
        self.page.on("pageerror", lambda error: self.console.append(("pageerror", str(error))))
        self.page.on("dialog", self._dialog)
        self.page.goto(path.as_uri())
        self.page.evaluate("window.tracelog.drawAll()")

    def _route(self, route: Any) -> None:
        self.requests.append(route.request.url)
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            route.abort()

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def errors(self) -> list[tuple[str, str]]:
        return [(kind, text) for kind, text in self.console if kind in ("error", "pageerror")]


@pytest.fixture(scope="module")
def opened(browser: Any, sample: tuple[Path, dict[str, int]]) -> Iterator[Opened]:
    page = Opened(browser, sample[0])
    yield page
    page.page.close()


def test_no_console_error_and_no_network_request(opened):
    assert opened.errors() == []
    assert [url for url in opened.requests if not url.startswith("file:")] == []
    assert opened.requests and all(url.startswith("file:") for url in opened.requests)


def test_every_chart_is_drawn_with_marks(opened):
    counts = opened.page.evaluate(
        """() => Array.from(document.querySelectorAll('.chart')).map(chart => [
            chart.id,
            chart.querySelectorAll('svg.marks').length,
            chart.querySelectorAll('svg.marks g.role-mark > path, svg.marks g.role-mark > line, '
                                   + 'svg.marks g.role-mark > text, svg.marks g.role-mark > g').length,
        ])"""
    )
    assert len(counts) > 10
    assert [c for c in counts if c[1] != 1 or c[2] == 0] == []
    assert opened.page.get_by_text("This chart could not be drawn").count() == 0
    assert opened.page.evaluate("Object.keys(window.tracelog.views).length") == len(counts)


def test_a_script_in_a_run_name_shows_as_text(opened, sample):
    _, ids = sample
    page = opened.page
    assert opened.dialogs == []
    heading = page.get_by_role("heading", name=f"run {ids['evil']}: {EVIL}", exact=True)
    assert heading.is_visible()
    title = page.evaluate(
        f"document.querySelector('#chart-run-{ids['evil']}-iterations svg.marks .role-title-text').textContent"
    )
    assert title == f"run {ids['evil']}: {EVIL}: per iteration"
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    specs = page.evaluate("document.querySelectorAll('script[type=\"application/json\"]').length")
    assert page.evaluate("document.querySelectorAll('script').length") == specs + 2


def test_tooltips_show_log_text_as_text(opened):
    page = opened.page
    page.evaluate(
        """(name) => {
            const view = window.tracelog.views['chart-across-runs'];
            view.tooltip()(view, {clientX: 20, clientY: 20}, null, {name: name});
        }""",
        EVIL,
    )
    tooltip = page.locator("#vg-tooltip-element")
    assert EVIL in tooltip.text_content()
    assert tooltip.locator("script").count() == 0
    assert opened.dialogs == []


def test_the_tag_selector_filters_the_table_and_the_chart(opened, sample):
    _, ids = sample
    page = opened.page
    page.select_option("#tag-filter", label=f"owner={EVIL_TAG}")
    assert page.locator("#runs-table tbody tr:not([hidden])").count() == 1
    assert page.locator("#runs-table tbody tr:not([hidden]) a").text_content() == f"#{ids['evil']} {EVIL}"
    assert page.evaluate("window.tracelog.views['chart-across-runs'].signal('tag')") == f"owner={EVIL_TAG}"
    page.select_option("#tag-filter", value="")
    assert page.locator("#runs-table tbody tr[hidden]").count() == 0


def test_a_column_heading_sorts_the_table(opened):
    page = opened.page
    page.locator("#runs-table th", has_text="GBS").click()
    values = page.eval_on_selector_all(
        "#runs-table tbody tr td:nth-child(9)", "cells => cells.map(c => c.dataset.v)"
    )
    numbers = [float(v) for v in values if v]
    assert numbers == sorted(numbers)


def test_the_iteration_axis_zooms_and_the_hover_is_shared(opened, sample):
    _, ids = sample
    page = opened.page
    chart = page.locator(f"#chart-run-{ids['llama']}-iterations svg.marks")
    chart.scroll_into_view_if_needed()
    box = chart.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 90, steps=4)
    page.mouse.wheel(0, -400)
    page.wait_for_timeout(300)
    view = f"window.tracelog.views['chart-run-{ids['llama']}-iterations']"
    assert "it" in page.evaluate(f"{view}.signal('zoom')")
    rules = chart.locator("g.mark-rule > path, g.mark-rule > line")
    page.mouse.move(box["x"] - 20, box["y"] - 20)
    page.wait_for_timeout(200)
    before = rules.count()
    page.mouse.move(box["x"] + box["width"] / 2 + 5, box["y"] + 95, steps=3)
    page.wait_for_timeout(300)
    assert len(page.evaluate(f"{view}.data('hover_store')")) == 1
    assert rules.count() - before >= 2  # one hover rule in each panel of the run


def test_the_first_screen_holds_the_flags_and_the_runs_table(browser, sample):
    _, ids = sample
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        page.goto(sample[0].as_uri())
        flags = page.locator("#flags-table").bounding_box()
        assert flags["y"] + flags["height"] < 800
        assert page.locator("#flags-table tbody tr.sev-critical").count() >= 1
        rows = page.locator("#runs-table tbody tr")
        assert rows.count() > 10
        third = rows.nth(2).bounding_box()
        assert third["y"] + third["height"] <= 800  # the heading and the first runs are in view
        predicted = page.locator(
            f'#runs-table tr:has(a[href="#run-{ids["llama"]}"]) td.gap-ok, '
            f'#runs-table tr:has(a[href="#run-{ids["llama"]}"]) td.gap-gap, '
            f'#runs-table tr:has(a[href="#run-{ids["llama"]}"]) td.gap-bad'
        )
        assert predicted.count() >= 1  # measured beside predicted, the share coloured
    finally:
        page.close()


def test_clicking_a_legend_entry_isolates_a_run(opened, sample):
    _, ids = sample
    page = opened.page
    chart = page.locator("#chart-overlays")
    chart.scroll_into_view_if_needed()
    label = chart.locator("g.role-legend-label text", has_text=f"#{ids['llama']} ").first
    lines = chart.locator("g.role-mark.mark-line path")

    def opacities() -> list[float]:
        return lines.evaluate_all("ps => ps.map(p => Number(p.getAttribute('opacity') ?? 1))")

    assert set(opacities()) == {1.0}  # every run drawn before the click
    box = label.bounding_box()  # Vega draws legend text without pointer events: click where a user would
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_timeout(300)
    view = "window.tracelog.views['chart-overlays']"
    store = page.evaluate(f"{view}.data('pick_store')")
    assert len(store) == 1 and store[0]["values"][0].startswith(f"#{ids['llama']} ")
    after = opacities()
    assert after.count(1.0) >= 1 and min(after) < 0.1  # the run picked stands out, the others fade
    svg = chart.locator("svg.marks").bounding_box()  # a blank spot (below the legend) brings all back
    page.mouse.click(svg["x"] + svg["width"] - 5, svg["y"] + svg["height"] - 5)
    page.wait_for_timeout(300)
    assert page.evaluate(f"{view}.data('pick_store')") == []
    assert set(opacities()) == {1.0}


def test_no_chart_is_drawn_from_a_single_value(opened, sample):
    page = opened.page
    single = page.eval_on_selector_all(
        "#runs-table tbody tr",
        "rows => rows.filter(r => r.cells[r.cells.length - 1].dataset.v === '1').map(r => r.dataset.run)",
    )
    assert single  # the lab-note rows: one line each
    for run_id in single:
        assert page.locator(f'[id^="chart-run-{run_id}-"]').count() == 0
        assert page.locator(f"#run-{run_id}").evaluate("node => node.tagName") == "TR"  # a line of the table
    bars = page.eval_on_selector_all(
        "[id$='-memory'].chart", "charts => charts.map(c => c.querySelectorAll('g.mark-rect path').length)"
    )
    assert all(count > 1 for count in bars)


def test_the_main_command_then_a_report_shows_predictions(browser, tmp_path_factory):
    """The README's main command (`tracelog ingest sample_logs/`, which finds the samples' tracelog.toml)
    followed by `tracelog report`: runs carry predicted figures beside measured ones, the gap coloured."""
    from click.testing import CliRunner

    from tracelog.cli import cli

    folder = tmp_path_factory.mktemp("main-command")
    db = folder / "tracelog.duckdb"
    ingested = CliRunner().invoke(cli, ["--db", str(db), "ingest", str(ROOT / "sample_logs")])
    assert ingested.exit_code == 0, ingested.output
    written = CliRunner().invoke(cli, ["--db", str(db), "report", "-o", str(folder / "report.html")])
    assert written.exit_code == 0, written.output
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        page.goto((folder / "report.html").as_uri())
        coloured = page.locator("#runs-table td.gap-ok, #runs-table td.gap-gap, #runs-table td.gap-bad")
        runs = page.eval_on_selector_all(
            "#runs-table tbody tr:has(td.gap-ok, td.gap-gap, td.gap-bad)",
            "rows => rows.map(r => r.dataset.run)",
        )
        assert coloured.count() >= 5 and len(set(runs)) >= 5
    finally:
        page.close()


def test_a_nic_acceptance_sweep_is_drawn_against_what_each_port_allows(browser, tmp_path_factory):
    """The perftest sample (8 NDR NICs of one node, mlx5_5 slow, one run both ways): its section draws
    every run's bandwidth with the dashed plateau its port allows, and its table gives each run's share."""
    folder = tmp_path_factory.mktemp("perftest")
    db = folder / "p.duckdb"
    from tracelog import api

    api.ingest(db, [str(ROOT / "sample_logs" / "perftest_ib_write_bw_ndr_8nics.txt")])
    written = report.write_report(db, folder / "report.html")
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    try:
        page.goto(written.path.as_uri())
        page.wait_for_selector("#chart-perftest-bandwidth svg")
        chart = page.locator("#chart-perftest-bandwidth")
        assert (
            chart.locator("g.mark-symbol path, g.mark-line path").count() >= 10
        )  # 23 sizes of mlx5_0, 9 runs
        assert chart.locator("g.mark-rule line").count() >= 2  # one direction's plateau, and twice it
        rows = page.eval_on_selector_all(
            "#perftest table tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent.trim()))"
        )
        slow = next(r for r in rows if r[2] == "mlx5_5")
        assert slow[6] == "26.91" and slow[7] == "49.68" and slow[8].startswith("0.54")
        both = next(r for r in rows if r[4] == "2")
        assert float(both[7]) == pytest.approx(2 * 49.68, abs=0.02)  # held against both directions
        assert errors == []
    finally:
        page.close()
