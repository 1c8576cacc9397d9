"""DeepSpeed engine logs: the configuration echo, step lines, throughput and wall-clock timers, memory.

What DeepSpeed prints and where it lands:

- `DeepSpeedEngine configuration:` and its `  name ...... value` lines (and the `json = {...}` user
  config): run parameters, verbatim; ZeRO stage, micro batch, train batch size, fp16/bf16 and the
  data-parallel `world_size` feed run columns. The launcher's `nnodes=`, `num_local_procs=` and
  `dist_world_size=` give nodes, GPUs per node and GPUs.
- `[Rank 0] step=N, skipped=S, lr=[...], mom=[...]`: an `iterations` row for step N (learning rate of
  the first parameter group; `skipped` is the difference of DeepSpeed's running count).
- `epoch=E/micro_step=M/global_step=N, RunningAvgSamplesPerSec=..., CurrSamplesPerSec=...,
  MemAllocated=..GB, MaxMemAllocated=..GB` (ThroughputTimer): `samples_per_s` of step N from
  CurrSamplesPerSec, the running average as an `iteration_metrics` row, and a `memory` row per rank.
  `elapsed_s` is train_batch_size / CurrSamplesPerSec, which is how DeepSpeed computes that rate (else the
  Trainer's bar's rate, else the logger's times of two step lines over the steps between them).
- `time (ms) | fwd: ... | bwd: ... | step: ...` (and the `_microstep` variants): `timers` rows. A training
  bar (tqdm, the Hugging Face Trainer's) glued before such a line gives its step the bar's rate and the
  timers after it their step (deepspeed_timers.py).
- `MA .. GB Max_MA .. GB CA .. GB Max_CA .. GB` (see_memory_usage): `memory` rows.
- The pipeline engine's start lines (`CONFIG: micro_batches=6 micro_batch_size=1`, `RANK=0 STAGE=0 LAYERS=13
  [0, 13) STAGE_PARAMS=... UNIQUE_PARAMS=...`): micro-batch, each stage's layers and parameters, and the
  model's parameter count (deepspeed_config.pipe_engine_line).
- The flops profiler summary: its latencies as timers, its figures as metrics, its FLOPS per GPU as
  the profiled step's `tflops_reported`.
- Loss-scale overflow lines set the loss scale of the following steps; warnings, errors and tracebacks
  are events.

DeepSpeed memory figures are bytes / 1024**3 printed as `GB`, so GB here is GiB: x 1024 gives MiB.
A new run starts at a (re)start (launcher, `DeepSpeed info`, configuration echo) after training steps.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from tracelog.parsers import event_words, megatron
from tracelog.parsers.base import (
    RESUME_TABLE,
    RETRACT_TABLE,
    Batch,
    LineSource,
    batches_of,
    guarded,
    numbers_guarded,
)
from tracelog.parsers.deepspeed_config import (
    INFO_PARAMS,
    LAUNCH_COMMAND_RX,
    NUM,
    SKIPPED_RUNNING,
    STEP_HEAD,
    RunState,
    echo_body_line,
    flatten,
    int_or_none,
    iteration_row,
    launch_command,
    memory_mib,
    memory_row,
    number,
    pipe_engine_line,
    step_seconds,
    summary_line,
    zero_optimizer,
)
from tracelog.parsers.deepspeed_death import DEEPSPEED_FRAME_RX, died_alone
from tracelog.parsers.deepspeed_profiler import profiler_line
from tracelog.parsers.deepspeed_timers import glued_bar, script_step, timer_line

FORMAT = "deepspeed"
# the resume state and what a parse reads: a grown log saved by an earlier version is parsed again whole
VERSION = "12"  # "6": a script's `Step N time` lines, the launcher's command, `[Summary]`;
# "7": AMP off is no fp32; "8": the ZeRO stage (and the dtype since 0.8.1) of `Creating ... ZeRO stage N optimizer`
# "9": the echo's body without its header line; an editor's line numbers; "10": a traceback whose header was lost;
# "11": a step's seconds from the logger's times where nothing else gives them; "12": srun's label on an empty line
# (`0:`, its blank gone in a paste) is an empty line
# A grown log resumes after its last complete line from the state `parse` hands out (`RESUME_TABLE`);
# the rows of these tables are written again whole at the end of every parse, so a resume replaces them.
FINISH_TABLES = ("run_params",)

FLUSH_ROWS = 5000
OPEN_STEPS = 4  # iterations kept open for lines of lagging ranks before they are written

# a launcher's rank label (`[rank3]:`, `3: `), a pdsh host, or an editor's line number pasted before the
# logger's timestamp (vim's `:set number`: `114 [2023-09-12 00:26:13,144] [INFO] ...`), which says no rank
RANK_PREFIX_RX = re.compile(
    r"^\s*(?:\[rank(\d+)\]:\s?|(\d+):(?:\s|$)|([A-Za-z0-9][\w.-]*):\s+(?=\[\d{4}-)|\d{1,9}[ \t]+(?=\[\d{4}-\d\d-\d\d))"
)
LOG_PREFIX_RX = re.compile(
    r"^\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[,.]\d{1,6})?)\d*\]\s*\[(\w+)\]\s*\[([^\]:]+):(\d+):([^\]]+)\]\s?(.*)$"
)
DIST_RANK_RX = re.compile(r"^\[Rank\s*(\d+)\]\s*")
LEVELS = ("WARNING", "ERROR", "CRITICAL")  # logger levels whose line is an event whatever it says
# DeepSpeed's logger (`[asctime] [LEVEL] [file.py:line:function] `): at a line's start, or after a bar not ended
LOGGER_LINE_RX = re.compile(
    r"^(?:\S+:\s?|[^\n]*?\|\s*\d+/\d+ \[[^\]\n]*\])?"
    r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] \[[A-Z]+\] \[\w+\.py:\d+:\w+\]",
    re.M,
)
STEP_RX = re.compile(STEP_HEAD + r"\[([^\]]*)\](?:, mom=\[(.*)\])?")
# The throughput timer (runtime/utils.py ThroughputTimer) since 0.7: `epoch=0/micro_step=80/global_step=20,
# RunningAvgSamplesPerSec=...`; before, `0/20, RunningAvgSamplesPerSec=...` and, until 0.6, `0/40,
# SamplesPerSec=..., MemAllocated=...` (the running average only: the row's samples/s then).
TPUT_STEP_RX = re.compile(
    r"(?:epoch=(\d+)/micro_step=(\d+)/global_step=(\d+)|\b(\d+)/(\d+)),\s*(?:RunningAvg)?SamplesPerSec"
)
OLD_TPUT_RX = re.compile(r"\b\d+/\d+, SamplesPerSec=")
# The pipeline engine's own line (runtime/pipe/engine.py, every steps_per_print): `steps: 200 loss: 5.5508
# lm loss: 5.5103 moe loss: 0.0405 iter time (s): 0.936 samples/sec: 136.706` (the extra losses since 0.14).
PIPE_STEPS_RX = re.compile(
    r"\bsteps: (\d+) loss: " + NUM + r" (.*?)iter time \(s\): " + NUM + r" samples/sec: " + NUM
)
EXTRA_LOSS_RX = re.compile(r"([A-Za-z][\w ]{0,40}?): " + NUM)
TPUT_FIELD_RX = {
    "running": re.compile(r"(?:RunningAvg|(?<![A-Za-z]))SamplesPerSec=" + NUM),
    "current": re.compile(r"CurrSamplesPerSec=" + NUM),
    "alloc": re.compile(r"\bMemAllocated=" + NUM + r"\s*GB"),
    "max_alloc": re.compile(r"MaxMemAllocated=" + NUM + r"\s*GB"),
}
TPUT_LINE_RX = re.compile(  # the whole line as DeepSpeed prints it: one search instead of four
    r"RunningAvgSamplesPerSec="
    + NUM
    + r",\s*CurrSamplesPerSec="
    + NUM
    + r",\s*MemAllocated="
    + NUM
    + r"\s*GB,\s*MaxMemAllocated="
    + NUM
    + r"\s*GB"
)
CONFIG_LINE_RX = re.compile(r"^\s{1,4}([A-Za-z_][\w]*)\s*(?:\.{2,}\s?|\s{2,}|\s(?=[\[{]))(.*?)\s*$")
USER_JSON_RX = re.compile(r"^\s*json = (\{.*)$")
LAUNCH_RX = re.compile(r"nnodes=(\d+), num_local_procs=(\d+)")
WORLD_RX = re.compile(r"\bdist_world_size=(\d+)")
SCALE_RX = re.compile(r"(?:reducing to|loss scale from \S+ to)\s*" + NUM)
# DeepSpeed's default `steps_per_print` until 0.15.2 (runtime/constants.py STEPS_PER_PRINT_DEFAULT; None
# since, which prints no step line): the interval of a log's first step line.
STEPS_PER_PRINT = 10


RESTART_MARKS = ("DeepSpeedEngine configuration:", "DeepSpeed info: version=", "WORLD INFO DICT")
EXCEPTION_RX = re.compile(r"^[\w.]*(?:Error|Exception|Interrupt|Exit)\b:?")
NUM_RX = re.compile(NUM)
NUMBER_RX = re.compile(r"^\s*" + NUM + r"\s*$")


def detect(head: str) -> int:
    """DeepSpeed engine output; a Megatron-DeepSpeed log (which carries these lines too) stays Megatron's."""
    if megatron.own_score(head):
        return 0
    score = 0
    if "DeepSpeedEngine configuration:" in head:
        score += 10
    if STEP_RX.search(head):
        score += 10
    if "RunningAvgSamplesPerSec=" in head or OLD_TPUT_RX.search(head):
        score += 8
    if "DeepSpeed info: version=" in head:
        score += 5
    if PIPE_STEPS_RX.search(head):
        score += 8
    if "DeepSpeed Flops Profiler" in head:  # a profiler's summary saved on its own (`output_file`)
        score += 10
    if "fwd_microstep:" in head or (
        "time (ms) |" in head and ("bwd_allreduce" in head or "forward_microstep:" in head)
    ):
        score += 4
    # DeepSpeed's logger and nothing else of it (see_memory_usage, overflows), or its job's death alone
    return score or (2 if len(LOGGER_LINE_RX.findall(head, 0, 16384)) >= 2 else died_alone(head))


class _Parser:
    def __init__(self) -> None:
        self.runs: list[RunState] = []
        self.trained = False  # steps logged since the last (re)start marker
        self.out: dict[str, list[dict[str, Any]]] = {}
        self.pending = 0  # rows held in `out`
        self.config_streams: set[int | None] = set()  # streams inside a configuration echo
        self.json_lines: list[str] | None = None  # a multi-line value being collected
        self.json_name = ""
        self.json_line = 0
        self.json_source: int | None = None
        self.event_kind: dict[int | None, str] = {}  # per stream: the traceback or warning being continued
        self.profiler_step: int | None = None
        self.in_profiler = False
        self.unplaced_timers: list[dict[str, Any]] = []

    # ---- resuming -----------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """What crosses the last complete line, as JSON: the runs (their parameters, configuration and open
        steps), whether training was logged since the last (re)start, the streams inside a configuration
        echo, a multi-line value being collected, the warning or traceback each stream continues, and
        the flops profiler block being read. The rows not yet handed out are not in it: `finish` writes
        them."""
        return {
            "runs": [run.state() for run in self.runs],
            "trained": self.trained,
            "config_streams": sorted(self.config_streams, key=lambda s: -1 if s is None else s),
            "json": [self.json_lines, self.json_name, self.json_line, self.json_source],
            "event_kind": [[source, kind] for source, kind in self.event_kind.items()],
            "profiler": [self.profiler_step, self.in_profiler],
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> _Parser:
        parser = cls()
        parser.runs = [RunState.from_state(run) for run in state["runs"]]
        parser.trained = bool(state["trained"])
        parser.config_streams = {int_or_none(s) for s in state["config_streams"]}
        lines, name, line, source = state["json"]
        parser.json_lines = [str(text) for text in lines] if lines is not None else None
        parser.json_name, parser.json_line, parser.json_source = str(name), int(line), int_or_none(source)
        parser.event_kind = {int_or_none(source): str(kind) for source, kind in state["event_kind"]}
        step, in_profiler = state["profiler"]
        parser.profiler_step, parser.in_profiler = int_or_none(step), bool(in_profiler)
        return parser

    # ---- output -------------------------------------------------------------------------------------
    def emit(self, table: str, row: dict[str, Any]) -> None:
        self.out.setdefault(table, []).append(row)
        self.pending += 1

    def batches(self) -> Iterator[Batch]:
        for table in ("iterations", "iteration_metrics", "memory", "timers", "events", "unparsed"):
            rows = self.out.pop(table, None)
            if rows:
                yield from batches_of(table, rows)
        self.pending = 0

    def run(self, line_no: int) -> RunState:
        if not self.runs:
            self.runs.append(RunState(0, line_no))
        run = self.runs[-1]
        run.line_end = max(run.line_end, line_no)
        return run

    # ---- iterations ---------------------------------------------------------------------------------
    def step_row(
        self, run: RunState, step: int, line_no: int, rank: int | None, ts: str | None
    ) -> dict | None:
        """The open iterations row of a step (opened if new); None for a step already written."""
        if step in run.open:
            return run.open[step]
        if step in run.written:
            return None
        row = iteration_row(run, step, line_no, rank, ts)
        run.open[step] = row
        while len(run.open) > OPEN_STEPS:
            self.close(run, next(iter(run.open)))
        return row

    def close(self, run: RunState, step: int) -> None:
        row = run.open.pop(step)
        del row["_rank0"]
        bar_s = row.pop("_bar_s")
        if tput := row.pop("_tput"):
            running, epoch, tput_line = tput
            if running is not None:
                self.metric(run, step, "RunningAvgSamplesPerSec", running, "", tput_line)
            if epoch is not None:
                self.metric(run, step, "epoch", float(epoch), "", tput_line)
        run.written.append(step)
        gbs = run.gbs()
        row["global_batch_size"] = gbs
        row["elapsed_s"] = step_seconds(run, row, gbs, bar_s)
        self.emit("iterations", row)

    def metric(
        self, run: RunState, step: int | None, key: str, value: float | None, text: str, line_no: int
    ) -> None:
        self.emit(
            "iteration_metrics",
            {
                "run_key": run.key,
                "iteration": step,
                "key": key,
                "value": value,
                "text": text,
                "line_no": line_no,
            },
        )

    # ---- lines --------------------------------------------------------------------------------------
    def feed(self, line_no: int, raw: str) -> None:
        line, rank = raw, None
        if match := RANK_PREFIX_RX.match(line):
            label = match.group(1) or match.group(2)
            rank = int(label) if label else None
            line = line[match.end() :]
        if "%|" in line:  # the Trainer's bar, with DeepSpeed's next line on its own (deepspeed_timers.py)
            line = glued_bar(self, line_no, line)
        source = rank  # the stream a line came from (ranks interleave; their state is kept apart)
        if self.json_lines is not None and source == self.json_source:
            if not LOG_PREFIX_RX.match(line):
                self.json_lines.append(line)
                if self._json_done():
                    self._finish_json()
                return
            self._finish_json()
        ts = None
        prefixed = LOG_PREFIX_RX.match(line)
        level = ""
        if prefixed:
            ts = prefixed.group(1)
            level = prefixed.group(2).upper()
            message = prefixed.group(6)
            func = f"{prefixed.group(3)}:{prefixed.group(5)}"
        else:
            message, func = line, ""
        if dist := DIST_RANK_RX.match(message):
            rank = int(dist.group(1))
            message = message[dist.end() :]
        if not message.strip():
            self.event_kind.pop(source, None)
            return
        if self._understood(line_no, message, func, rank, ts, source):
            self.event_kind.pop(source, None)
            return
        self._event_or_unparsed(line_no, raw, message, level, source)

    def _understood(
        self, line_no: int, msg: str, func: str, rank: int | None, ts: str | None, source: int | None
    ) -> bool:
        if "SamplesPerSec=" in msg:  # the most frequent lines first
            self._throughput(line_no, msg, rank, ts)
            return True
        if "iter time (s):" in msg and (match := PIPE_STEPS_RX.search(msg)):
            self._pipe_steps(line_no, match, rank, ts)
            return True
        if "step=" in msg and (match := STEP_RX.search(msg)):
            self.config_streams.discard(source)
            self._step(line_no, match, rank, ts)
            return True
        if "time (ms)" in msg and "|" in msg:
            timer_line(self, line_no, msg, rank)
            return True
        if ("DeepSpeed" in msg or "WORLD INFO DICT" in msg) and any(mark in msg for mark in RESTART_MARKS):
            self._restart(line_no)
        if "DeepSpeedEngine configuration:" in msg:
            self.run(line_no)
            self.config_streams.add(source)
            return True
        if source in self.config_streams:
            if (func.rpartition(":")[2].startswith("print") or not func) and self._config_line(
                line_no, msg, source
            ):
                return True
            self.config_streams.discard(source)
        elif func.endswith("config.py:print") and echo_body_line(msg):
            # the echo's body where a cut took its `DeepSpeedEngine configuration:` line: DeepSpeed's own
            # printer and its padding say what the line is
            self._restart(line_no)
            self.config_streams.add(source)
            return self._config_line(line_no, msg, source)
        if (memory := memory_mib(msg)) is not None:
            run = self.run(line_no)
            step = run.last_step if memory[0] is None else memory[0]
            self.emit("memory", memory_row(run.key, rank, step, line_no, *memory[1:]))
            return True
        if (match := SCALE_RX.search(msg)) or "Grad overflow on iteration" in msg or "OVERFLOW!" in msg:
            # a step the fp16 loss scaler skipped: kept as an event (a log without step lines counts none)
            self.emit(
                "events",
                {"run_key": self.run(line_no).key, "line_no": line_no, "kind": "overflow", "text": msg},
            )
            if match:
                self.run(line_no).loss_scale = number(match.group(1))
            return True
        if profiler_line(self, line_no, msg):
            return True
        if match := LAUNCH_RX.search(msg):
            run = self.run(line_no)
            run.columns["nodes"], run.columns["gpus_per_node"] = int(match.group(1)), int(match.group(2))
            return True
        if match := WORLD_RX.search(msg):
            self.run(line_no).columns["gpus"] = int(match.group(1))
            return True
        for rx, name in INFO_PARAMS:
            if match := rx.search(msg):
                self.run(line_no).param(name, (match.group(1) or "").strip(), line_no, once=True)
                if name == "optimizer_wrapper":
                    zero_optimizer(self.run(line_no).columns, msg)
                return True
        if ("_PARAMS=" in msg or "micro_batches=" in msg) and pipe_engine_line(
            self.run(line_no), line_no, msg
        ):
            return True
        if "time:" in msg and script_step(self, line_no, msg):
            return True
        if "deepspeed" in msg and LAUNCH_COMMAND_RX.search(msg):
            self._restart(line_no)
            launch_command(self.run(line_no), line_no, msg)
            return True
        if "[Summary]" in msg and summary_line(self.run(line_no), line_no, msg):
            return True
        if "Checkpoint global_step" in msg or "Saving model checkpoint" in msg:
            self.emit(
                "events",
                {
                    "run_key": self.run(line_no).key,
                    "line_no": line_no,
                    "kind": "checkpoint_saved",
                    "text": msg,
                },
            )
            return True
        return False

    def _restart(self, line_no: int) -> None:
        """A (re)start marker begins a new run when training was logged since the previous one."""
        if self.trained and self.runs:
            previous = self.runs[-1]
            for step in list(previous.open):
                self.close(previous, step)
            self.runs.append(RunState(previous.key + 1, line_no))
        self.trained = False

    def _config_line(self, line_no: int, msg: str, source: int | None) -> bool:
        run = self.run(line_no)
        if match := USER_JSON_RX.match(msg):
            self._start_json("json", match.group(1), line_no, source)
            return True
        match = CONFIG_LINE_RX.match(msg)
        if not match:
            return False
        name, value = match.group(1), match.group(2)
        if value.rstrip().endswith(("{", "[")) and value.count("{") + value.count("[") > value.count(
            "}"
        ) + value.count("]"):
            self._start_json(name, value, line_no, source)
            return True
        run.config[name] = value
        run.param(name, value, line_no)
        if name in ("initial_dynamic_scale", "loss_scale") and NUMBER_RX.match(value):
            run.scales[name] = float(value)
        return True

    def _start_json(self, name: str, first: str, line_no: int, source: int | None) -> None:
        self.json_name, self.json_line, self.json_lines, self.json_source = name, line_no, [first], source
        if self._json_done():
            self._finish_json()

    def _json_done(self) -> bool:
        text = "\n".join(self.json_lines or [])
        return text.count("{") + text.count("[") <= text.count("}") + text.count("]")

    def _finish_json(self) -> None:
        lines, self.json_lines = self.json_lines or [], None
        text = " ".join(part.strip() for part in lines)
        run = self.run(self.json_line)
        run.param(self.json_name, text, self.json_line)
        if self.json_name == "json":
            try:
                user = json.loads(text)
            except ValueError:
                return
            for key, value in flatten(user, "json"):
                run.config[key] = value
                run.param(key, value, self.json_line)
        else:
            run.config[self.json_name] = text

    def _step(self, line_no: int, match: re.Match[str], rank: int | None, ts: str | None) -> None:
        run = self.run(line_no)
        step, skipped_total = int(match.group(1)), int(match.group(2))
        lrs = NUM_RX.findall(match.group(3))
        run.last_step, run.since_step, run.bar_step = step, {}, None
        if step == 0:
            run.last_skipped = skipped_total
            return
        self.trained = True
        row = self.step_row(run, step, line_no, rank, ts)
        if run.last_skipped is None and not run.config and step > STEPS_PER_PRINT:
            # The first step line of a log that starts later, without the engine's echo of its start (a
            # tail, a job's output cut): DeepSpeed's count is of every step before it, which this log does
            # not hold, not of this line's interval. Kept as it was printed.
            skipped = None
            self.metric(run, step, SKIPPED_RUNNING, skipped_total, str(skipped_total), line_no)
        else:
            skipped = max(skipped_total - (run.last_skipped or 0), 0)
        run.last_skipped = skipped_total
        if row is None:
            return
        row["learning_rate"] = float(lrs[0]) if lrs else None
        row["skipped"] = skipped
        row["loss_scale"] = run.current_scale()
        if len(set(lrs)) > 1:
            self.metric(run, step, "lr", None, f"[{match.group(3)}]", line_no)
        if match.group(4):
            first_mom = NUM_RX.search(match.group(4))
            self.metric(
                run,
                step,
                "mom",
                float(first_mom.group(1)) if first_mom else None,
                f"[{match.group(4)}]",
                line_no,
            )

    def _pipe_steps(self, line_no: int, match: re.Match[str], rank: int | None, ts: str | None) -> None:
        run = self.run(line_no)
        self.trained = True
        step = int(match.group(1))
        run.last_step, run.since_step, run.bar_step = step, {}, None
        row = self.step_row(run, step, line_no, rank, ts)
        if row is None:
            return
        row["lm_loss"] = number(match.group(2))
        row["elapsed_s"] = number(match.group(4))
        row["samples_per_s"] = number(match.group(5))
        for name, value in EXTRA_LOSS_RX.findall(match.group(3)):
            self.metric(run, step, name.strip(), number(value), value, line_no)

    def _throughput(self, line_no: int, msg: str, rank: int | None, ts: str | None) -> None:
        run = self.run(line_no)
        self.trained = True
        if whole := TPUT_LINE_RX.search(msg):
            fields: dict[str, float | None] = dict(
                zip(TPUT_FIELD_RX, map(float, whole.groups()), strict=True)
            )
        else:
            fields = {
                k: (number(m.group(1)) if (m := rx.search(msg)) else None) for k, rx in TPUT_FIELD_RX.items()
            }
        step = run.last_step
        epoch = None
        if match := TPUT_STEP_RX.search(msg):
            if match.group(3):
                step, epoch = int(match.group(3)), int(match.group(1))
            elif step is None:
                step, epoch = int(match.group(5)), int(match.group(4))
        if step is not None:
            first = step not in run.open and step not in run.written
            row = self.step_row(run, step, line_no, rank, ts)
            # every rank may print this line: rank 0's figure wins, else the first one seen
            if row is not None and (row["samples_per_s"] is None or (rank == 0 and not row["_rank0"])):
                row["samples_per_s"] = (
                    fields["current"] if fields["current"] is not None else fields["running"]
                )
                row["_rank0"] = rank == 0
                row["_tput"] = (fields["running"], epoch, line_no)
                if first:
                    row["rank"] = rank
        if fields["alloc"] is not None or fields["max_alloc"] is not None:
            alloc = fields["alloc"] * 1024.0 if fields["alloc"] is not None else None
            peak = fields["max_alloc"] * 1024.0 if fields["max_alloc"] is not None else None
            self.emit("memory", memory_row(run.key, rank, step, line_no, alloc, peak, None, None))

    def _event_or_unparsed(self, line_no: int, raw: str, msg: str, level: str, source: int | None) -> None:
        """Warnings, errors and tracebacks (with their indented continuation lines) are events."""
        text = msg.strip()
        exception = EXCEPTION_RX.match(text)
        open_kind = self.event_kind.get(source)
        if "Traceback (most recent call last)" in text or (not open_kind and DEEPSPEED_FRAME_RX.match(msg)):
            kind = self.event_kind[source] = "traceback"
        elif open_kind and (msg[:1].isspace() or exception):
            kind = event_words.kind_of(text) if exception else open_kind
            if exception and open_kind == "traceback":
                del self.event_kind[source]
        elif level in LEVELS or event_words.EVENT_WORDS_RX.search(text):
            fallback = "error" if level in ("ERROR", "CRITICAL") else "warning"  # the logger's word wins
            kind = self.event_kind[source] = event_words.kind_of(text, fallback, leveled=level in LEVELS)
        else:
            self.event_kind.pop(source, None)
            self.emit("unparsed", {"line_no": line_no, "text": raw})
            return
        self.emit("events", {"run_key": self.run(line_no).key, "line_no": line_no, "kind": kind, "text": raw})

    def finish(self) -> Iterator[Batch]:
        if self.json_lines is not None:
            self._finish_json()
        for run in self.runs:
            for step in list(run.open):
                self.close(run, step)
        yield from self.batches()
        for run in self.runs:
            yield Batch("runs", [run.record()])


@guarded
def parse(source: LineSource, state: dict[str, Any] | None = None) -> Iterator[Batch]:
    """Batches of every table for a DeepSpeed log.

    `state` is what an earlier parse of the same file handed out after its last complete line: the
    parse goes on from there (`source` starts at the next line), as if it had never stopped; the rows
    that parse wrote for steps still open are taken back first (`RETRACT_TABLE`) and written again
    when those steps close."""
    parser = _Parser.from_state(state) if state is not None else _Parser()
    if reopened := [row for run in parser.runs for row in run.reopened()]:
        yield Batch(RETRACT_TABLE, reopened)
    for line_no, line in source.lines():
        with numbers_guarded(line_no, line, parser.emit):
            parser.feed(line_no, line)
        if parser.pending >= FLUSH_ROWS:
            yield from parser.batches()
    yield Batch(RESUME_TABLE, [{"state": json.dumps(parser.state(), sort_keys=True)}])
    yield from parser.finish()
