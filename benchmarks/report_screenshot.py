"""Regenerate docs/report-first-screen.png: the first screen (1280x800) of the report a new user gets from
the README's main command, `tracelog ingest sample_logs/ && tracelog report`, in headless Chromium.

    python benchmarks/report_screenshot.py [output.png]

Needs Debian's `chromium` and the playwright package (pip install '.[test]').
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from tracelog import api, report

ROOT = Path(__file__).resolve().parents[1]
VIEWPORT = {"width": 1280, "height": 800}  # a laptop screen: what "the first screen" means in the README
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


def screenshot(target: Path) -> None:
    here = Path.cwd()
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)  # relative paths, as a user of the quick start sees them
        try:
            shutil.copytree(ROOT / "sample_logs", "sample_logs")
            api.ingest("tracelog.duckdb", ["sample_logs/"])
            result = report.write_report("tracelog.duckdb", "report.html")
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS
                )
                page = browser.new_page(viewport=VIEWPORT)
                page.route(
                    "**/*",
                    lambda route: (
                        route.continue_() if route.request.url.startswith("file:") else route.abort()
                    ),
                )
                page.goto(result.path.resolve().as_uri())
                page.evaluate("window.tracelog.drawAll()")
                page.screenshot(path=str(target))
                browser.close()
        finally:
            os.chdir(here)


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "report-first-screen.png"
    screenshot(out.resolve())
    print(out)
