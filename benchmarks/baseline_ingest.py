"""The script a user would write instead of tracelog: the baseline `ingest_bench.py` measures against.

    python benchmarks/baseline_ingest.py run.log out.duckdb

Iteration lines only (7 columns), read with `re`, collected in pandas, written to DuckDB in one
`CREATE TABLE ... AS`. No timers, memory reports, configuration, unparsed lines, events, duplicate
detection, growth or predictions: what tracelog writes beyond this is its own cost.
"""

from __future__ import annotations

import re
import sys

import duckdb
import pandas as pd

ITERATION = re.compile(
    r"iteration\s+(\d+)/\s*\d+ \|.*?consumed samples:\s+(\d+).*?"
    r"elapsed time per iteration \(ms\):\s+([\d.]+).*?learning rate:\s+([\d.E+-]+).*?"
    r"lm loss:\s+([\d.E+-]+).*?loss scale:\s+([\d.]+).*?grad norm:\s+([\d.]+)"
)
COLUMNS = ["iteration", "consumed_samples", "elapsed_ms", "lr", "loss", "loss_scale", "grad_norm"]


def main(log: str, db: str) -> int:
    rows = []
    with open(log, encoding="utf-8", errors="replace") as f:
        for line in f:
            if "iteration" in line and (m := ITERATION.search(line)):
                rows.append(m.groups())
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame = frame.astype(
        {"iteration": "int64", "consumed_samples": "int64", "elapsed_ms": "float64", "lr": "float64"}
    ).astype({"loss": "float64", "loss_scale": "float64", "grad_norm": "float64"})
    con = duckdb.connect(db)
    con.execute("CREATE OR REPLACE TABLE iterations AS SELECT * FROM frame")
    con.close()
    return len(frame)


if __name__ == "__main__":
    print(main(sys.argv[1], sys.argv[2]))
