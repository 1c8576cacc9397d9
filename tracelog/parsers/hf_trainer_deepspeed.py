"""DeepSpeed's own lines in a Hugging Face Trainer log run on DeepSpeed (`--deepspeed ds_config.json`):
its configuration echo, `see_memory_usage` reports, engine step lines and their running count of skipped
steps, the fp16 loss scaler's overflows, the world size, the throughput timer and the wall-clock timer
lines. Each is read as the DeepSpeed parser reads it (deepspeed.py, deepspeed_config.py,
deepspeed_timers.py), onto the Trainer's run and at the Trainer's step."""

from __future__ import annotations

import re
from typing import Any, Protocol

from tracelog.parsers.base import Emitter
from tracelog.parsers.deepspeed import (
    CONFIG_LINE_RX,
    SCALE_RX,
    SKIPPED_RUNNING,
    STEPS_PER_PRINT,
)
from tracelog.parsers.deepspeed import STEP_RX as DS_STEP_RX
from tracelog.parsers.deepspeed_config import (
    INFO_PARAMS,
    SEE_MEMORY_RX,
    memory_row,
    see_memory_mib,
    timer_step_at,
)
from tracelog.parsers.deepspeed_timers import timer_figures, timer_memory

WORLD_SIZE_RX = re.compile(r"\bworld_size = (\d+)")
SAMPLES_RX = re.compile(r"\b\d+/(\d+), SamplesPerSec=([\d.]+)")


class DeepSpeedParser(Protocol):
    """What of the Trainer's parser DeepSpeed's lines read and write."""

    out: Emitter
    run_key: int
    config: dict[int, dict[str, str]]  # DeepSpeed's configuration echo, by run
    last_step: int | None  # the Trainer's last logged step
    ds_skipped: int | None  # DeepSpeed's running count of skipped steps, at its last step line
    skipped_pending: int  # steps skipped since the last logged dict
    overflows: int | None  # the loss scaler's overflows since the last dict, once it told of one
    loss_scale: float | None  # the scale it reduced to last
    timer_since: dict[str, int]
    timer_bar: int | None
    ds_last_step: int | None
    bar_step: int | None  # the step the Trainer's training bar was last drawn at
    ds_done: int | None  # DeepSpeed's step N right after the bar at N - 1: the next dict's step

    def run(self, line_no: int) -> dict[str, Any]: ...
    def param(self, line_no: int, name: str, value: Any) -> None: ...
    def metric(self, n: int, step: int, key: str, value: float) -> None: ...


def deepspeed_line(parser: DeepSpeedParser, n: int, match: re.Match[str]) -> bool:
    """DeepSpeed's configuration echo (one `name ..... value` per line), memory reports and step lines
    (`step=N, skipped=K, lr=[...]`: K is DeepSpeed's running count of steps the fp16 loss scaler
    skipped; what it grew by since the last logged dict is that dict's `skipped`)."""
    where, msg = match.group(3), match.group(6)
    if step_line := DS_STEP_RX.search(msg):
        ds_step(parser, n, int(step_line.group(1)), int(step_line.group(2)))
        return True
    if "time (ms)" in msg and "|" in msg:
        timers(parser, n, msg)
        return True
    if memory := SEE_MEMORY_RX.search(msg):
        values = see_memory_mib(memory.groups())
        parser.out.add("memory", memory_row(parser.run_key, None, parser.last_step, n, *values))
        return True
    if (scale := SCALE_RX.search(msg)) or "OVERFLOW!" in msg:  # the fp16 loss scaler skipped a step
        parser.run(n)
        parser.out.add("events", {"run_key": parser.run_key, "line_no": n, "kind": "overflow", "text": msg})
        parser.overflows = (parser.overflows or 0) + 1
        parser.loss_scale = float(scale.group(1)) if scale else parser.loss_scale
        return True
    if msg.strip() == "DeepSpeedEngine configuration:":
        return True
    if world := WORLD_SIZE_RX.search(msg):
        parser.run(n).setdefault("gpus", int(world.group(1)))
        return True
    if rate := SAMPLES_RX.search(msg):  # the engine's throughput timer: `0/2000, SamplesPerSec=9.5`
        parser.metric(n, int(rate.group(1)), "samples per second (DeepSpeed)", float(rate.group(2)))
        return True
    for rx, name in INFO_PARAMS:
        if said := rx.search(msg):
            parser.param(n, f"deepspeed.{name}", (said.group(1) or "").strip())
            return True
    if where == "config.py" and (pair := CONFIG_LINE_RX.match(msg)):
        name, value = pair.group(1), pair.group(2)
        if value.count("{") + value.count("[") > value.count("}") + value.count("]"):
            return False  # a multi-line value: its lines stay unparsed, as they are kept
        parser.config.setdefault(parser.run_key, {})[name] = value
        parser.param(n, f"deepspeed.{name}", value)
        return True
    return False


def timers(parser: DeepSpeedParser, n: int, msg: str) -> None:
    """DeepSpeed's `rank=0 time (ms) | forward: 316.00 | ...` line: a `timers` row per figure at its step,
    its `GB` figures a memory row."""
    parser.run(n)
    rank, timers, memory = timer_figures(msg)
    from_start = bool(parser.config.get(parser.run_key))
    step = timer_step_at(msg, parser.timer_since, parser.timer_bar, parser.ds_last_step, from_start)
    for name, value in timers:
        parser.out.add(
            "timers",
            {
                "run_key": parser.run_key,
                "rank": rank,
                "iteration": step,
                "name": name,
                "time_ms": value,
                "line_no": n,
            },
        )
    if memory:
        parser.out.add("memory", timer_memory(parser.run_key, rank, parser.last_step, n, memory))


def ds_step(parser: DeepSpeedParser, n: int, step: int, total: int) -> None:
    """DeepSpeed's `step=N` line, printed as the engine's step N ends (engine.py `_take_model_step`): the
    steps done. The Trainer's bar, drawn at N - 1 before it, moves to N right after (its `on_step_end`), a
    redraw that a terminal's copy loses where the dict logged at N is printed over it (`tqdm.write`): the
    dict after this line is step N's (transformers#14531: `1999/24128 [...][...] step=2000, ...`)."""
    parser.ds_done = step if parser.bar_step is not None and parser.bar_step == step - 1 else None
    parser.ds_last_step, parser.timer_since, parser.timer_bar = step, {}, None
    if parser.ds_skipped is None and not parser.config.get(parser.run_key) and step > STEPS_PER_PRINT:
        # the first step line of a tail: its count is of steps this log does not hold (see deepspeed.py)
        parser.metric(n, step, SKIPPED_RUNNING, float(total))
    else:
        parser.skipped_pending += max(total - (parser.ds_skipped or 0), 0)
    parser.ds_skipped = total
    parser.run(n)
