"""`SourceWriter` counts an unparsed row whose line was read too (glued words) from the rows it wrote."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tracelog.parsers.base import PARTLY_READ_EVENT, Batch
from tracelog.source_writer import LineMarks, RunOptions, SourceWriter
from tracelog.store import Store


def test_line_marks_grow_both_ways_and_answer_outside_what_was_marked() -> None:
    marks = LineMarks()
    marks.mark(np.array([1000, 1002], dtype=np.int64))
    marks.mark(np.array([5, 4000], dtype=np.int64))  # below the first line marked, and far above it
    asked = np.array([4, 5, 6, 1000, 1001, 1002, 3999, 4000, 4001, 10**9], dtype=np.int64)
    assert marks.holds(asked).tolist() == [False, True, False, True, False, True, False, True, False, False]
    assert not LineMarks().holds(np.array([1, 2], dtype=np.int64)).any()


def test_unparsed_rows_of_read_lines_are_counted_from_what_was_written(tmp_path: Path) -> None:
    """A NeMo bar with EarlyStopping's words glued behind it (line 11): the bar's step is read, the words
    stay unparsed; line 12 is read only in part (its figure kept, an event says so) and stays counted;
    lines 10 and below were committed by the ingest before a resume."""
    store = Store(tmp_path / "w.duckdb")
    with store.transaction():
        store.con.execute(
            "INSERT INTO sources (source_id, path, fingerprint, bytes, format, parser_version, lines_total, "
            "lines_parsed, lines_unparsed) VALUES (1, 'run.log', '', 0, 'nemo', '1', 0, 0, 0)"
        )
        writer = SourceWriter(store, 1, RunOptions())
        writer.write(Batch("iterations", [{"run_key": 0, "line_no": n, "iteration": n} for n in (9, 11, 12)]))
        writer.write(
            Batch("timers", [{"run_key": 0, "line_no": 14, "iteration": 12, "name": "fwd", "time_ms": 1.5}])
        )
        writer.write(
            Batch(
                "unparsed",
                [
                    {"line_no": n, "text": "[rank: 1] Monitored metric val_loss did not improve"}
                    for n in (9, 11, 12, 13, 14)
                ],
            )
        )
        writer.write(Batch("events", [{"run_key": 0, "line_no": 12, "kind": PARTLY_READ_EVENT, "text": "x"}]))
        assert writer.unparsed == 5
        assert writer.unparsed_but_read(since=10) == 2  # lines 11 and 14
        assert writer.unparsed_but_read(since=0) == 3  # and line 9
