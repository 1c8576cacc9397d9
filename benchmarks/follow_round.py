"""What a round of `tracelog ingest --follow` costs when a live run's log grew (README: Ingest, A live run).

    python benchmarks/follow_round.py              # 1000 MB log, 5% growth, 3 runs
    python benchmarks/follow_round.py --mb 250 --runs 1

The log (benchmarks/generate_megatron_log.py, kept in benchmarks/out) is cut after its first 95 % at a
line's end; `api.follow` ingests that in its first round, the rest is appended before its second, and the
second round is timed: from the append to the round's report (resume, write, refresh of the run's
predictions and flags), with where that time went. No process start-up is in it: a follow pays that once.
"""

from __future__ import annotations

import argparse
import functools
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from generate_megatron_log import write_log

from tracelog import api, intake
from tracelog.analysis import refresh

OUT = Path(__file__).parent / "out"


def timed_calls(spent: dict[str, float]) -> None:
    """Add the time of each call of the ingest of a file and of its refresh to `spent`."""

    def wrap(module: Any, name: str) -> None:
        real: Callable[..., Any] = getattr(module, name)

        @functools.wraps(real)
        def measured(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - start

        setattr(module, name, measured)

    wrap(intake, "ingest_file")
    wrap(refresh, "try_refresh_source")


def one_round(log: Path, work: Path, spent: dict[str, float]) -> tuple[float, float]:
    """(first round, growth round) in seconds."""
    data = log.read_bytes()
    cut = data.rindex(b"\n", 0, len(data) * 95 // 100) + 1
    live, db = work / "run.log", work / "follow.duckdb"
    live.write_bytes(data[:cut])
    marks: list[float] = []
    sleeps = [0]

    def grow(_seconds: float) -> None:
        sleeps[0] += 1
        if sleeps[0] == 1:
            spent.clear()
            with live.open("ab") as out:
                out.write(data[cut:])
            marks.append(time.perf_counter())

    start = time.perf_counter()
    api.follow(
        str(db),
        [str(live)],
        interval_s=0,
        idle_s=0,
        on_round=lambda _: marks.append(time.perf_counter()),
        sleep=grow,
    )
    return marks[0] - start, marks[2] - marks[1]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=int, default=1000, help="size of the whole log")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    log = OUT / f"megatron-{args.mb}mb.log"
    if not log.exists():
        write_log(log, args.mb)
    spent: dict[str, float] = {}
    timed_calls(spent)
    print(f"{args.mb} MB log, growth of its last 5 %")
    print("| run | first round s | growth round s | of which resume + write s | refresh s |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="tracelog-follow-") as work:
            first, growth = one_round(log, Path(work), spent)
        print(
            f"| {run + 1} | {first:.2f} | {growth:.2f} | {spent.get('ingest_file', 0):.2f} | "
            f"{spent.get('try_refresh_source', 0):.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
