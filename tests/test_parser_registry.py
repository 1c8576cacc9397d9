"""The parser registry names each format's module, which is imported when first asked for: detection asks
every one, the resumed parse of a grown log only its own."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import SAMPLES
from tracelog import parsers

PARSERS_DIR = Path(parsers.__file__).parent


def test_each_format_names_the_module_that_reads_it() -> None:
    modules = parsers.PARSERS
    assert [p.FORMAT for p in modules] == parsers.formats() == list(parsers.PARSER_MODULES)
    for format_id, module in zip(parsers.PARSER_MODULES, modules, strict=True):
        assert parsers.by_format(format_id) is module
        assert callable(module.detect) and callable(module.parse)


def test_every_parser_module_is_registered() -> None:
    """A module with a FORMAT, `detect` and a `parse` of its own is a parser: one missing from the registry
    would never be asked."""
    found = set()
    for path in PARSERS_DIR.glob("*.py"):
        module = importlib.import_module(f"tracelog.parsers.{path.stem}")
        parse = getattr(module, "parse", None)
        if (
            hasattr(module, "FORMAT")
            and hasattr(module, "detect")
            and getattr(parse, "__module__", "") == module.__name__
        ):
            found.add(path.stem)
    assert found == set(parsers.PARSER_MODULES.values())


def test_the_describing_formats_are_those_whose_parser_says_so() -> None:
    said = {p.FORMAT for p in parsers.PARSERS if getattr(p, "DESCRIBES_RUNS_OF_OTHER_FILES", False)}
    assert said == set(parsers.DESCRIBING_FORMATS)


LOADED = """
import json, sys
from tracelog.cli import cli
try:
    cli.main(sys.argv[1:], prog_name="tracelog", standalone_mode=False)
finally:
    print(json.dumps(sorted(m for m in sys.modules if m.startswith("tracelog.parsers."))), file=sys.stderr)
"""


def parser_modules(db: Path, log: Path) -> tuple[list[str], str]:
    done = subprocess.run(
        [sys.executable, "-c", LOADED, "--db", str(db), "ingest", str(log)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stderr.strip().splitlines()[-1]), done.stdout


def test_a_grown_log_loads_only_its_own_parser(tmp_path: Path) -> None:
    lines = (SAMPLES / "megatron_lm_llama3_8b_h100.log").read_text().splitlines(keepends=True)
    log, db = tmp_path / "live.log", tmp_path / "t.duckdb"
    log.write_text("".join(lines[: len(lines) // 2]))
    first, said = parser_modules(db, log)
    assert "ingested as megatron" in said
    assert {f"tracelog.parsers.{m}" for m in parsers.PARSER_MODULES.values()} <= set(first)  # detection
    with log.open("a") as growing:
        growing.write("".join(lines[len(lines) // 2 :]))
    grown, said = parser_modules(db, log)
    assert "appended as megatron" in said
    assert "tracelog.parsers.megatron" in grown
    assert not {
        "tracelog.parsers.nccl_tests",
        "tracelog.parsers.tensorboard",
        "tracelog.parsers.torchtitan",
    } & set(grown)
    assert len(grown) < len(first) / 2
