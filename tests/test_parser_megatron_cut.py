"""An iteration line cut inside its last figure (a paste that stops mid-line, a log killed mid-write) keeps
its whole fields and drops the figure it ends in: Megatron closes every field with ` |`, so a figure with no
` |` after it may have lost digits (epfLLM/Megatron-LLM#11's excerpt ends ` lm loss: 2`, read as 2.0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_growth import land, snapshot
from tests.test_parser_megatron import collect
from tracelog.store import Store

# Invented, modeled on a bf16 Megatron-LM run pasted into an issue: the paste stops inside the last line.
HEAD = """\
 iteration      310/  250000 | consumed samples:       317440 | elapsed time per iteration (ms): 71254.9 | \
learning rate: 2.325E-05 | global batch size:  1024 | lm loss: 2.418530E+00 | loss scale: 1.0 | grad norm: 0.274 | \
number of skipped iterations:   0 | number of nan iterations:   0 |
 iteration      311/  250000 | consumed samples:       318464 | elapsed time per iteration (ms): 72010.3 | \
learning rate: 2.333E-05 | global batch size:  1024 | lm loss: 2.431187E+00 | loss scale: 1.0 | grad norm: 0.268 | \
number of skipped iterations:   0 | number of nan iterations:   0 |
"""
CUT_IN_LOSS = (
    " iteration      312/  250000 | consumed samples:       319488 | elapsed time per iteration (ms): 71877.4 | "
    "learning rate: 2.340E-05 | global batch size:  1024 | lm loss: 2"
)


def test_the_figure_a_line_was_cut_in_is_not_kept() -> None:
    out = collect(HEAD + CUT_IN_LOSS + "\n")
    rows = {row["iteration"]: row for row in out["iterations"]}
    assert [rows[i]["lm_loss"] for i in (310, 311)] == [2.41853, 2.431187]
    assert rows[312]["lm_loss"] is None
    assert rows[312]["elapsed_s"] == pytest.approx(71.8774)
    assert rows[312]["global_batch_size"] == 1024
    assert [u["text"] for u in out["unparsed"]] == [CUT_IN_LOSS]
    [event] = [e for e in out["events"] if e["kind"] == "unread_figures"]
    assert event["line_no"] == 3 and "`lm loss: 2`" in event["text"]


def test_a_line_cut_inside_its_time_keeps_no_time() -> None:
    line = (
        " iteration      312/  250000 | consumed samples:       319488 | elapsed time per iteration (ms): 71"
    )
    rows = {row["iteration"]: row for row in collect(HEAD + line + "\n")["iterations"]}
    assert rows[312]["elapsed_s"] is None
    assert rows[312]["consumed_samples"] == 319488


@pytest.mark.parametrize(
    "line",
    [
        # closed by ` |`: whole
        " iteration  5/ 10 | elapsed time per iteration (ms): 1210.1 | lm loss: 7.2E+00 |",
        # a fork's last field that is no figure (an ETA, `0:12:34`)
        " iteration  5/ 10 | elapsed time per iteration (ms): 1210.1 | lm loss: 7.2E+00 | ETA Time: 0:12:34",
    ],
)
def test_a_whole_line_keeps_its_figures(line: str) -> None:
    out = collect(line + "\n")
    [row] = out["iterations"]
    assert row["lm_loss"] == 7.2 and row["elapsed_s"] == pytest.approx(1.2101)
    assert not [e for e in out.get("events", []) if "cut inside" in (e["text"] or "")]


def test_a_live_log_cut_mid_figure_then_grown_ends_as_the_direct_ingest(tmp_path: Path) -> None:
    whole = (
        HEAD + CUT_IN_LOSS + ".438402E+00 | loss scale: 1.0 | grad norm: 0.281 | "
        "number of skipped iterations:   0 | number of nan iterations:   0 |\n"
    ).encode()
    log = tmp_path / "live.log"
    with Store(tmp_path / "direct.duckdb") as direct:
        log.write_bytes(whole)
        land(direct, log, "megatron")
        expected = snapshot(direct)
    with Store(tmp_path / "grown.duckdb") as grown:
        log.write_bytes((HEAD + CUT_IN_LOSS).encode())
        land(grown, log, "megatron")
        log.write_bytes(whole)
        land(grown, log, "megatron")
        assert snapshot(grown) == expected
        losses = grown.con.execute("SELECT lm_loss FROM iterations ORDER BY line_no").fetchall()
    assert losses == [(2.41853,), (2.431187,), (2.438402,)]


def test_a_line_naming_no_iteration_is_left_as_it_is() -> None:
    """Only iteration lines lose a cut figure: another line with the time's words stays unparsed, once."""
    other = "notes | elapsed time per iteration (ms): 85"
    out = collect(HEAD + other + "\n")
    assert [u["text"] for u in out["unparsed"]] == [other]
    assert not [e for e in out.get("events", []) if "cut inside" in (e["text"] or "")]
