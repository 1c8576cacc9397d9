"""An iteration line hard-wrapped after a field's name (a pasted log, BigScience's 2021 Megatron-DeepSpeed
notes) is read as the one line Megatron printed, across blocks and across a grown log's cut too."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_growth import land, snapshot
from tests.test_parser_megatron import collect
from tracelog.store import Store

# Modeled on BigScience's lab notes (Jean Zay, `gpt2-meg-ds`): each iteration line wrapped before its loss.
WRAPPED = """\
iteration      640/    1000 | elapsed time per iteration (ms): 1215.4 | learning rate: 1.430E-05 | lm loss:
7.301552E+00 | loss scale: 8192.0 | number of skipped iterations: 0 | number of nan iterations: 0 |
time (ms) | forward: 412.30 | backward: 760.10 | optimizer: 30.02 | batch generator: 1.20
iteration      650/    1000 | elapsed time per iteration (ms): 1210.1 | learning rate: 1.450E-05 | lm loss:
7.287670E+00 | loss scale: 4096.0 | number of skipped iterations: 1 | number of nan iterations: 0 |
time (ms) | forward: 410.00 | backward: 758.40 | optimizer: 29.95 | batch generator: 1.10
"""
EXPECTED = [
    {"iteration": 640, "lm_loss": 7.301552, "loss_scale": 8192.0, "skipped": 0, "nan": 0, "line_no": 1},
    {"iteration": 650, "lm_loss": 7.28767, "loss_scale": 4096.0, "skipped": 1, "nan": 0, "line_no": 4},
]


def read(rows: list[dict]) -> list[dict]:
    return [{key: row[key] for key in EXPECTED[0]} for row in rows]


@pytest.mark.parametrize("block_bytes", [1 << 20, 64, 108, 300])
def test_a_wrapped_iteration_line_is_read_whole(block_bytes: int) -> None:
    """At 108 bytes the first block is the first line's first half alone."""
    out = collect(WRAPPED, block_bytes)
    assert read(out["iterations"]) == EXPECTED
    assert "unparsed" not in out
    assert [(t["iteration"], t["name"]) for t in out["timers"] if t["name"] == "forward"] == [
        (640, "forward"),
        (650, "forward"),
    ]


@pytest.mark.parametrize(
    "lines",
    [
        # the line before it ends in no field's name
        "iteration 5/ 10 | elapsed time per iteration (ms): 1210.1 | lm loss: 7.2E+00 |\n"
        "3.0 | loss scale: 8192.0 |\n",
        # it goes on with no field of an iteration line
        "iteration 5/ 10 | elapsed time per iteration (ms): 1210.1 | lm loss:\n3.0 | my own thing: 1 |\n",
        # it starts with no number
        "iteration 5/ 10 | elapsed time per iteration (ms): 1210.1 | lm loss:\nabc | loss scale: 8192.0 |\n",
        # a blank line between them
        "iteration 5/ 10 | elapsed time per iteration (ms): 1210.1 | lm loss:\n\n3.0 | loss scale: 8192.0 |\n",
    ],
)
def test_no_other_line_is_joined_onto_an_iteration_line(lines: str) -> None:
    out = collect(lines)
    [row] = out["iterations"]
    assert row["loss_scale"] is None
    assert [u["text"] for u in out["unparsed"]] == [lines.rstrip("\n").split("\n")[-1]]


@pytest.mark.parametrize("cut_after_line", [1, 2, 4])
def test_a_grown_log_cut_between_the_halves_ends_as_the_direct_ingest(
    cut_after_line: int, tmp_path: Path
) -> None:
    data = WRAPPED.encode()
    cut = sum(len(line) for line in data.splitlines(keepends=True)[:cut_after_line])
    log = tmp_path / "live.log"
    with Store(tmp_path / "direct.duckdb") as direct:
        log.write_bytes(data)
        land(direct, log, "megatron")
        expected = snapshot(direct)
    with Store(tmp_path / "grown.duckdb") as grown:
        log.write_bytes(data[:cut])
        land(grown, log, "megatron")
        log.write_bytes(data)
        land(grown, log, "megatron")
        assert snapshot(grown) == expected
        rows = grown.con.execute(
            "SELECT iteration, lm_loss, loss_scale, skipped, nan, line_no FROM iterations ORDER BY line_no"
        ).fetchall()
    assert rows == [tuple(row.values()) for row in EXPECTED]
