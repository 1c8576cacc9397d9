"""DeepSpeed's wall-clock timer lines (`wall_clock_breakdown`: `rank=0 time (ms) | forward: 316.00 | ...`)
and the Hugging Face Trainer's training bar drawn just before one.

tqdm redraws its bar with a carriage return and no newline, so in a log of the Trainer on DeepSpeed the next
line DeepSpeed logs lands on the bar's line (DeepSpeed issue 1436):

    51%|█████▊     | 507/1000 [15:32<16:42,  2.03s/it][2021-10-08 20:18:48,232] [INFO] ... time (ms) | ...

The Trainer moves its bar on in `on_step_end`, after the DeepSpeed engine's `step()` printed that step's
timers: the bar's count is the steps done, its rate tqdm's moving average of seconds per step. The step the
bar names gets that rate as its step time (where DeepSpeed's throughput line gives none), and the timer
lines after it are the next step's (`RunState.timer_step`). A training script's own step line after the
step's timers (`Step 3 time: 166.10ms`) places them alike (`script_step`)."""

from __future__ import annotations

import re
from typing import Any, Protocol

from tracelog.parsers.deepspeed_config import NUM, RunState, memory_row, number
from tracelog.parsers.run_rows import tqdm_seconds


class TimedParser(Protocol):
    """What of the DeepSpeed parser the timer lines and a glued bar read and write."""

    trained: bool
    unplaced_timers: list[dict[str, Any]]  # timer rows of no known step yet, held for a script's step line

    def run(self, line_no: int) -> RunState: ...
    def emit(self, table: str, row: dict[str, Any]) -> None: ...
    def step_row(
        self, run: RunState, step: int, line_no: int, rank: int | None, ts: str | None
    ) -> dict[str, Any] | None: ...


TIMER_PART_RX = re.compile(r"^\s*([\w./ -]+?)\s*:\s*" + NUM + r"\s*(GB)?\s*$")
TIMER_RANK_RX = re.compile(r"rank=(\d+)\s+time \(ms\)")
# tqdm's bar (after any earlier redraws of it) right before DeepSpeed's logger prefix `[2021-10-08 ...`;
# a described bar is another loop's unless it names training
GLUED_BAR_RX = re.compile(
    r"^(?:.*\r)?\s*(?:(?P<about>[^|%\r]*?):\s*)?\d+%\|[^|\r]*\|\s*(?P<step>\d+)/(?P<total>\d+)\s*"
    r"\[(?P<times>[^\]\r]*)\]\s*(?=\[\d{4}-\d\d-\d\d[ T])"
)
RATE_RX = re.compile(r",\s*(\d+(?:\.\d+)?)(s/it|it/s)")  # `[15:32<16:42,  2.03s/it]`, maybe a postfix after


def glued_bar(parser: TimedParser, line_no: int, line: str) -> str:
    """The line past a training bar glued before DeepSpeed's logger prefix, the bar read: its step (of a
    bar as long as the first one, not an evaluation's) with its rate as step time, and the anchor of the
    timer lines after it."""
    match = GLUED_BAR_RX.match(line)
    if match is None:
        return line
    about = (match.group("about") or "").strip().lower()
    if about and not about.startswith(("train", "epoch")):
        return line[match.end() :]
    run = parser.run(line_no)
    step, total = int(match.group("step")), int(match.group("total"))
    run.bar_total = run.bar_total or total
    if total == run.bar_total and step > 0:
        parser.trained = True
        run.bar_step, run.since_step = step, {}
        row = parser.step_row(run, step, line_no, None, None)
        if row is not None and (rate := RATE_RX.search(match.group("times"))) is not None:
            row["_bar_s"] = tqdm_seconds(float(rate.group(1)), rate.group(2))
    return line[match.end() :]


SCRIPT_STEP_RX = re.compile(r"^\s*Step\s+(\d+)\s+time:\s*" + NUM + r"\s*(ms|s)\s*$")
UNPLACED_HELD = 1000
"""Timer rows of no known step held for a script's first step line: a log with that many and none is one
whose timers have no step to be placed at."""


def script_step(parser: TimedParser, line_no: int, msg: str) -> bool:
    """A training script's own line after each step (DeepSpeedExamples' ZenFlow benchmark: `Step 3 time:
    166.10ms`): step N's row with that time. DeepSpeed printed the step's timers before it, so it places
    them as the Trainer's bar does: the timers before a run's first such line that no step placed are
    step N's (while not handed out yet), and the k-th of a kind after it is step N + k."""
    match = SCRIPT_STEP_RX.match(msg)
    if match is None:
        return False
    run = parser.run(line_no)
    step, seconds = int(match.group(1)), number(match.group(2))
    parser.trained = True
    for row in parser.unplaced_timers:
        if row["run_key"] == run.key:
            row["iteration"] = step
    parser.unplaced_timers = []
    run.bar_step, run.since_step = step, {}
    stepped = parser.step_row(run, step, line_no, None, None)
    if stepped is not None and seconds is not None:  # 178.66 ms is 0.17866 s, to the nanosecond
        stepped["elapsed_s"] = round(seconds / 1000.0, 9) if match.group(3) == "ms" else seconds
    return True


def timer_figures(msg: str) -> tuple[int | None, list[tuple[str, float]], dict[str, float]]:
    """A `time (ms) | name: value | ...` line's rank (`rank=0 time (ms)`), its timers in ms, and its `GB`
    figures (`mem_allocated: 1.2GB`) by name, in GiB as DeepSpeed prints them."""
    rank = int(match.group(1)) if (match := TIMER_RANK_RX.search(msg)) else None
    timers: list[tuple[str, float]] = []
    memory: dict[str, float] = {}
    for part in msg.split("|")[1:]:
        match = TIMER_PART_RX.match(part)
        if not match:
            continue
        name, value = match.group(1).strip(), number(match.group(2))
        if match.group(3):
            memory[name] = value
        else:
            timers.append((name, value))
    return rank, timers, memory


def timer_memory(
    key: int, rank: int | None, step: int | None, line_no: int, gib: dict[str, float]
) -> dict[str, Any]:
    """The memory row of a timer line's `GB` figures (GiB: x 1024 gives MiB)."""
    mib = {name: value * 1024.0 for name, value in gib.items()}
    return memory_row(
        key,
        rank,
        step,
        line_no,
        mib.get("mem_allocated"),
        mib.get("max_mem_allocated"),
        mib.get("cache_allocated"),
        mib.get("max_cache_allocated"),
    )


def timer_line(parser: TimedParser, line_no: int, msg: str, rank: int | None) -> None:
    """A `time (ms) | name: value | ...` line: a `timers` row per figure at the step `timer_step` places
    it, its `_GB` figures (`mem_allocated: 1.2GB`) as a memory row."""
    run = parser.run(line_no)
    said_rank, timers, memory = timer_figures(msg)
    rank = said_rank if said_rank is not None else rank
    iteration = run.timer_step(msg)
    for name, value in timers:
        row = {
            "run_key": run.key,
            "rank": rank,
            "iteration": iteration,
            "name": name,
            "time_ms": value,
            "line_no": line_no,
        }
        parser.emit("timers", row)
        if iteration is None and run.bar_step is None and len(parser.unplaced_timers) < UNPLACED_HELD:
            parser.unplaced_timers.append(row)
    if memory:
        parser.emit("memory", timer_memory(run.key, rank, run.last_step, line_no, memory))
