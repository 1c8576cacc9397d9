"""A DeepSpeed log that echoes no batch size and draws no bar still says how long its steps took: the
logger's times of two step lines over the steps between them (deepspeedai/DeepSpeed#1825's notebook log:
step lines every 10 steps, 15.1 s apart, had no seconds per step at all)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import rows_by_table
from tests.test_growth import land, snapshot
from tracelog.parsers import deepspeed
from tracelog.store import Store

# Invented, in DeepSpeed's engine and throughput-timer format (steps_per_print 10), a notebook's output
# between them.
STEPS = """\
[2022-05-02 11:20:01,250] [INFO] [logging.py:69:log_dist] [Rank 0] step=10, skipped=0, lr=[5e-05], mom=[[0.9, 0.999]]
[2022-05-02 11:20:01,251] [INFO] [timer.py:189:stop] 0/10, SamplesPerSec=41.2, MemAllocated=1.1GB, MaxMemAllocated=7.9GB
<IPython.core.display.HTML object>
[2022-05-02 11:20:32,050] [INFO] [logging.py:69:log_dist] [Rank 0] step=20, skipped=0, lr=[5e-05], mom=[[0.9, 0.999]]
[2022-05-02 11:20:32,051] [INFO] [timer.py:189:stop] 0/20, SamplesPerSec=41.6, MemAllocated=1.1GB, MaxMemAllocated=7.9GB
<IPython.core.display.HTML object>
[2022-05-02 11:21:02,650] [INFO] [logging.py:69:log_dist] [Rank 0] step=30, skipped=1, lr=[5e-05], mom=[[0.9, 0.999]]
[2022-05-02 11:21:02,651] [INFO] [timer.py:189:stop] 0/30, SamplesPerSec=41.9, MemAllocated=1.1GB, MaxMemAllocated=7.9GB
"""


def test_the_loggers_times_give_the_seconds_per_step() -> None:
    rows = rows_by_table(deepspeed.parse, STEPS)["iterations"]
    assert [(r["iteration"], r["elapsed_s"]) for r in rows] == [(10, None), (20, 3.08), (30, 3.06)]


def test_deepspeeds_own_figure_wins_where_the_batch_is_known() -> None:
    echo = "[2022-05-02 11:19:58,001] [INFO] [config.py:1063:print]   train_batch_size ............. 128\n"
    rows = rows_by_table(deepspeed.parse, echo + STEPS)["iterations"]
    assert [r["elapsed_s"] for r in rows] == pytest.approx([128 / 41.2, 128 / 41.6, 128 / 41.9])


@pytest.mark.parametrize("cut_after_line", [2, 4, 5])
def test_a_grown_log_ends_as_the_direct_ingest(cut_after_line: int, tmp_path: Path) -> None:
    data = STEPS.encode()
    cut = sum(len(line) for line in data.splitlines(keepends=True)[:cut_after_line])
    log = tmp_path / "live.log"
    with Store(tmp_path / "direct.duckdb") as direct:
        log.write_bytes(data)
        land(direct, log, "deepspeed")
        expected = snapshot(direct)
    with Store(tmp_path / "grown.duckdb") as grown:
        log.write_bytes(data[:cut])
        land(grown, log, "deepspeed")
        log.write_bytes(data)
        land(grown, log, "deepspeed")
        assert snapshot(grown) == expected
        seconds = grown.con.execute("SELECT elapsed_s FROM iterations ORDER BY iteration").fetchall()
    assert seconds == [(None,), (3.08,), (3.06,)]
