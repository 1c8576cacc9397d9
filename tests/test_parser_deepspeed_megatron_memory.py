"""Megatron's own memory reports in a log DeepSpeed's parser reads (Megatron-DeepSpeed under the pipeline
engine prints `[Rank N] (after N iterations) memory (MB) | ...` between its `steps:` lines), and such reports
pasted on their own, which the Megatron parser reads."""

from __future__ import annotations

from pathlib import Path

from tests.test_parser_deepspeed import collect
from tracelog import api, parsers
from tracelog.parsers import megatron
from tracelog.parsers.base import head_text

# Invented, in the shape of deepspeedai/Megatron-DeepSpeed#199 (a 600M GPT on 64 V100, pipeline engine):
# DeepSpeed's step line, the pipeline engine's `steps:` line, then every rank's Megatron memory report.
PIPE_LOG = """\
[2023-08-08 14:29:00,841] [INFO] [logging.py:96:log_dist] [Rank 0] step=1, skipped=0, lr=[1.5e-07, 1.5e-07], mom=[(0.9, 0.95), (0.9, 0.95)]
steps: 1 loss: 12.6199 iter time (s): 5.400 samples/sec: 47.411
[Rank 1] (after 1 iterations) memory (MB) | allocated: 882.5 | max allocated: 13808.25 | reserved: 14718.0 | max reserved: 14718.0
[Rank 0] (after 1 iterations) memory (MB) | allocated: 880.0 | max allocated: 13800.5 | reserved: 14716.0 | max reserved: 14720.0
[2023-08-08 14:29:03,915] [INFO] [logging.py:96:log_dist] [Rank 0] step=2, skipped=0, lr=[3e-07, 3e-07], mom=[(0.9, 0.95), (0.9, 0.95)]
steps: 2 loss: 12.6157 iter time (s): 2.673 samples/sec: 95.775
"""

# Invented, in the shape of a Megatron-LM design note comparing pipeline stages' memory (four ranks' reports
# of one iteration, nothing else of the log).
REPORTS_ONLY = """\
[Rank 0] (after 10 iterations) memory (MB) | allocated: 24761.0 | max allocated: 65203.9 | reserved: 64438.0 | max reserved: 74306.0
[Rank 16] (after 10 iterations) memory (MB) | allocated: 18907.7 | max allocated: 52228.2 | reserved: 58770.0 | max reserved: 58770.0
[Rank 32] (after 10 iterations) memory (MB) | allocated: 18907.8 | max allocated: 45200.8 | reserved: 51772.0 | max reserved: 51772.0
"""


def test_megatron_memory_reports_under_deepspeed_s_parser_are_memory_rows() -> None:
    out = collect(PIPE_LOG)
    assert "unparsed" not in out
    rows = sorted(
        (m["rank"], m["iteration"], m["allocated_mib"], m["max_allocated_mib"], m["max_reserved_mib"])
        for m in out["memory"]
    )
    assert rows == [(0, 1, 880.0, 13800.5, 14720.0), (1, 1, 882.5, 13808.25, 14718.0)]
    assert [(r["iteration"], r["elapsed_s"]) for r in out["iterations"]] == [(1, 5.4), (2, 2.673)]


def test_memory_reports_pasted_on_their_own_are_megatron_s(tmp_path: Path) -> None:
    assert parsers.detect(head_text(REPORTS_ONLY.encode()), "stages.log") is megatron
    log = tmp_path / "stages.log"
    log.write_text(REPORTS_ONLY)
    db = tmp_path / "t.duckdb"
    (result,) = api.ingest(db, [str(log)])
    assert (result.format, result.runs) == ("megatron", 1)
    rows = api.sql(db, "SELECT rank, iteration, max_reserved_mib FROM memory ORDER BY rank").values.tolist()
    assert rows == [[0, 10, 74306.0], [16, 10, 58770.0], [32, 10, 51772.0]]
