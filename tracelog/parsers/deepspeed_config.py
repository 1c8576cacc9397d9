"""A DeepSpeed run as its log describes it: the configuration echo and the user's JSON, read into run
columns, and what one run keeps while its lines stream by (the open steps lagging ranks still write to,
the loss scale, the parameters kept), as JSON too, for an ingest that resumes where the last one stopped."""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tracelog.parsers import megatron_lines
from tracelog.parsers.base import as_int
from tracelog.parsers.megatron_memory import MEMORY_FIELDS, MEMORY_MARK

# The metric DeepSpeed's running count of skipped steps (`step=2000, skipped=1995`) is kept under: of a
# tail's first step line in DeepSpeed's and the Trainer's logs, of every step line in Megatron-DeepSpeed's.
# The health rules read it: 1995 skipped by step 2000 is a run that barely trained.
SKIPPED_RUNNING = "skipped steps before this line (running count)"
STEP_HEAD = r"\bstep=(\d+), skipped=(\d+), lr="
"""The start of DeepSpeed's step line (`[Rank 0] step=200, skipped=4, lr=[...], mom=[...]`, the engine's
`_report_progress`): the step and the running count of skipped steps, in DeepSpeed's logs and in
Megatron-DeepSpeed's alike."""

# One-line facts of the engine's start, kept as run parameters by name
INFO_PARAMS = (
    (re.compile(r"DeepSpeed info: version=([^,\s]+)"), "deepspeed_version"),
    (re.compile(r"Initializing TorchBackend in DeepSpeed with backend (\w+)"), "backend"),
    (re.compile(r"DeepSpeed Final Optimizer = (\S+)"), "optimizer"),
    (re.compile(r"DeepSpeed Basic Optimizer = (\S+)"), "basic_optimizer"),
    (re.compile(r"using (?:configured|client) LR scheduler(?: = (\S+))?"), "lr_scheduler"),
    (re.compile(r"WORLD INFO DICT: (.*)"), "world_info"),
    (re.compile(r"Creating (.+? optimizer)"), "optimizer_wrapper"),
    (re.compile(r"DeepSpeed Flops Profiler Enabled: (\w+)"), "flops_profiler_enabled"),
    (megatron_lines.REDUCE_BUCKET_RX, "reduce_bucket_size"),
)


# The engine names the optimizer it wraps the model's in (runtime/engine.py `_configure_zero_optimizer`):
# `Creating torch.bfloat16 ZeRO stage 3 optimizer`, its dtype that of the model's parameters since DeepSpeed
# 0.8.1 (#2743, 2023); before, and still on stage 3's first line (`Creating fp16 ZeRO stage 3 optimizer,
# MiCS is enabled ...`), "fp16" whatever the precision: only the stage is read from those.
ZERO_OPTIMIZER_RX = re.compile(
    r"Creating (?:(torch\.(?:float16|bfloat16|float32)) |\S+ )?ZeRO stage (\d) optimizer"
)
MODEL_DTYPES = {"torch.float16": "fp16", "torch.bfloat16": "bf16", "torch.float32": "fp32"}


def zero_optimizer(columns: dict[str, Any], msg: str) -> None:
    """The ZeRO stage, and the precision where the dtype is printed, of an engine's `Creating ... ZeRO
    stage N optimizer` line, as run columns (the configuration echo, printed after it, says the same)."""
    if match := ZERO_OPTIMIZER_RX.search(msg):
        columns.setdefault("zero_stage", int(match.group(2)))
        if match.group(1):
            columns.setdefault("precision", MODEL_DTYPES[match.group(1)])


def timer_step_at(
    msg: str, since_step: dict[str, int], bar_step: int | None, last_step: int | None, from_start: bool
) -> int | None:
    """The step a timer line belongs to, counted in `since_step` (timer lines of each kind, by first
    timer name, since the last step line or training bar). The ZeRO optimizer prints its timers
    (`optimizer_allgather`, ...) in its step(), at every step, before that step's `step=N` line: the k-th
    since the last step line M is step M + k (runtime/zero/stage_1_and_2.py). The engine prints its own
    after the step line: the k-th since M is M + k - 1 (runtime/engine.py; with `steps_per_print` 1 that
    is M). The Trainer's bar moves on to S once step S's timers are printed: the k-th after it is S + k.
    The engine's `_microstep` timers print at every micro-step, so past two gradient-accumulation steps
    their count runs ahead of the steps (the log does not say which micro-step a line is). `from_start`:
    the log holds the engine's configuration echo, so its first step is 1."""
    lead = msg.split("|", 2)[1].split(":", 1)[0].strip() if msg.count("|") >= 1 else ""
    count = since_step.get(lead, 0) + 1
    since_step[lead] = count
    before_step = lead.startswith("optimizer_")
    if bar_step is not None:  # the bar moves on once its step's timers are printed
        return bar_step + count
    if last_step is not None:
        return last_step + count - (0 if before_step else 1)
    if before_step and from_start:  # a log from the engine's start: its first step is 1
        return count
    return None


@dataclass
class RunState:
    key: int
    line_start: int
    line_end: int = 0
    params: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, str] = field(default_factory=dict)
    columns: dict[str, Any] = field(default_factory=dict)
    loss_scale: float | None = None
    last_skipped: int | None = None
    last_step: int | None = None
    # timer lines of each kind (by first timer name) since the last step line: the ZeRO optimizer prints
    # its timers at every step, before that step's `step=N` line, whatever steps_per_print is
    since_step: dict[str, int] = field(default_factory=dict)
    # the Trainer's training bar glued before a DeepSpeed line (deepspeed_timers.py): its length, and the
    # step it showed last, when no step line came after it
    bar_total: int | None = None
    bar_step: int | None = None
    open: dict[int, dict[str, Any]] = field(default_factory=dict)
    written: deque[int] = field(default_factory=lambda: deque(maxlen=64))
    _gbs: tuple[int, int | None] | None = None
    scales: dict[str, float] = field(default_factory=dict)
    last_closed: tuple[int, datetime] | None = None  # the step and logger time of the last row written

    def timer_step(self, msg: str) -> int | None:
        """The step a timer line belongs to (`timer_step_at`)."""
        return timer_step_at(msg, self.since_step, self.bar_step, self.last_step, bool(self.config))

    def state(self) -> dict[str, Any]:
        """As JSON, for an ingest that resumes after the last complete line: the open steps go with it,
        since lines of lagging ranks still write to them after the cut."""
        return {
            "key": self.key,
            "line_start": self.line_start,
            "line_end": self.line_end,
            "params": self.params,
            "config": self.config,
            "columns": self.columns,
            "loss_scale": self.loss_scale,
            "last_skipped": self.last_skipped,
            "last_step": self.last_step,
            "since_step": self.since_step,
            "bar": [self.bar_total, self.bar_step],
            "open": [
                {**row, "ts": row["ts"].isoformat() if row["ts"] else None} for row in self.open.values()
            ],
            "written": list(self.written),
            "scales": self.scales,
            "last_closed": [self.last_closed[0], self.last_closed[1].isoformat()]
            if self.last_closed
            else None,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> RunState:
        """The run `state` describes; a state of the wrong shape raises KeyError, TypeError or ValueError
        (the ingest then parses the file again from its start)."""
        run = cls(int(state["key"]), int(state["line_start"]), int(state["line_end"]))
        run.params = [
            {"name": str(p["name"]), "value": p["value"], "line_no": int_or_none(p["line_no"])}
            for p in state["params"]
        ]
        run.config = {str(k): str(v) for k, v in dict(state["config"]).items()}
        run.columns = {str(k): v for k, v in dict(state["columns"]).items()}
        run.loss_scale = float_or_none(state["loss_scale"])
        run.last_skipped = int_or_none(state["last_skipped"])
        run.last_step = int_or_none(state["last_step"])
        run.since_step = {str(k): int(v) for k, v in dict(state["since_step"]).items()}
        run.bar_total, run.bar_step = (int_or_none(v) for v in state["bar"])
        for saved in state["open"]:
            # in the order a new row has its columns; a key newer than the saved state is empty
            row = {k: saved.get(k) for k in ITERATION_KEYS}
            row["ts"] = datetime.fromisoformat(row["ts"]) if row["ts"] else None
            row["_tput"] = tuple(row["_tput"]) if row["_tput"] else None
            run.open[int(row["iteration"])] = row
        run.written.extend(int(step) for step in state["written"])
        run.scales = {str(k): float(v) for k, v in dict(state["scales"]).items()}
        if closed := state["last_closed"]:
            run.last_closed = (int(closed[0]), datetime.fromisoformat(closed[1]))
        return run

    def reopened(self) -> list[dict[str, Any]]:
        """The rows a parse wrote at its end for the steps still open there (their iterations rows and the
        metrics of their throughput line): a resumed parse takes them back, and writes them again when
        those steps close, with what the new lines add (a lagging rank's throughput, the profiler's
        FLOPS, a train_batch_size echoed later)."""
        rows = []
        for row in self.open.values():
            rows.append({"table": "iterations", "run_key": self.key, "line_no": row["line_no"]})
            if row["_tput"]:
                rows.append({"table": "iteration_metrics", "run_key": self.key, "line_no": row["_tput"][2]})
        return rows

    def current_scale(self) -> float | None:
        """fp16 only: the last scale an overflow line set, else the configured static or initial scale."""
        if self.loss_scale is not None:
            return self.loss_scale
        if config_columns(self.config).get("precision") != "fp16":
            return None
        static = self.scales.get("loss_scale")
        return static if static else self.scales.get("initial_dynamic_scale")

    def gbs(self) -> int | None:
        """train_batch_size, from the echo or the user's JSON (cached: asked once per written step)."""
        if self._gbs is None or self._gbs[0] != len(self.config):
            self._gbs = (len(self.config), config_columns(self.config).get("gbs"))
        return self._gbs[1]

    def param(self, name: str, value: str, line_no: int | None, once: bool = False) -> None:
        """Keep a parameter; `once` skips a repeat of the same name and value (every rank prints it)."""
        if once and any(p["name"] == name and p["value"] == value for p in self.params):
            return
        self.params.append({"name": name, "value": value, "line_no": line_no})

    def record(self) -> dict[str, Any]:
        columns = {"framework": "deepspeed", **config_columns(self.config), **self.columns}
        if columns.get("gpus") is None and columns.get("dp") is not None:
            columns["gpus"] = columns["dp"]
            self.param("gpus_from", "world_size (data parallel; no model parallelism printed)", None)
        return {
            "run_key": self.key,
            "line_start": self.line_start,
            "line_end": self.line_end,
            **columns,
            "run_params": self.params,
        }


# The launcher as a shell echoes it (`$ deepspeed --num_gpus=4 train.py ...`): its `--num_gpus` are the GPUs
# per node (deepspeed/launcher/runner.py), `--num_nodes` the nodes; kept as the run's `launch_command`
LAUNCH_COMMAND_RX = re.compile(r"(?:^|[\s/;&])deepspeed(?:\s+--?[\w-]+(?:[= ][^\s-]\S*)?)*\s+\S+\.py\b")
LAUNCH_COUNT_RX = re.compile(r"--num_(gpus|nodes)[= ](\d+)(?![\w.])")
# a benchmark script's closing line of `key=value` figures (DeepSpeedExamples' ZenFlow benchmark:
# `[Summary] pin_memory=False topk_ratio=0.1 ... avg_update_step=171.38ms`): run parameters, verbatim
SUMMARY_RX = re.compile(r"^\s*\[Summary\]\s+(\w+=\S+(?:\s+\w+=\S+)*)\s*$")


def launch_command(run: RunState, line_no: int, msg: str) -> None:
    """The deepspeed launcher's command line: kept verbatim, its GPUs per node and nodes as columns."""
    run.param("launch_command", re.sub(r"^\s*(?:[$>+]\s+)+", "", msg).strip(), line_no, once=True)
    for name, count in LAUNCH_COUNT_RX.findall(msg):
        if 0 < int(count) <= (64 if name == "gpus" else 100_000):
            run.columns["gpus_per_node" if name == "gpus" else "nodes"] = int(count)


def summary_line(run: RunState, line_no: int, msg: str) -> bool:
    match = SUMMARY_RX.match(msg)
    if match is None:
        return False
    for pair in match.group(1).split():
        name, _, value = pair.partition("=")
        run.param(f"summary.{name}", value, line_no)
    return True


ITERATION_KEYS = (
    "run_key",
    "iteration",
    "rank",
    "learning_rate",
    "skipped",
    "loss_scale",
    "samples_per_s",
    "elapsed_s",
    "tflops_reported",
    "global_batch_size",
    "lm_loss",
    "ts",
    "line_no",
    "_rank0",  # whether rank 0's throughput figure is in the row
    "_tput",  # (running average, epoch, line) of the throughput line, written as metrics when it closes
    "_bar_s",  # the Trainer's bar's seconds per step, the step time where DeepSpeed gives none
)


def iteration_row(run: RunState, step: int, line_no: int, rank: int | None, ts: str | None) -> dict[str, Any]:
    """A step's row before its lines have filled it."""
    row: dict[str, Any] = dict.fromkeys(ITERATION_KEYS)
    row.update(
        run_key=run.key,
        iteration=step,
        rank=rank,
        ts=datetime.fromisoformat(ts.replace("T", " ")) if ts else None,
        line_no=line_no,
        _rank0=False,
    )
    return row


def step_seconds(run: RunState, row: dict[str, Any], gbs: int | None, bar_s: float | None) -> float | None:
    """A step's seconds: DeepSpeed's own figure (the train batch over the step's samples per second, as
    DeepSpeed computes that rate), else the Trainer's bar's (a moving average), else the logger's time on
    this step's line less that on the last step's written, over the steps between them (`steps_per_print`
    apart): a log that echoes no batch size and draws no bar still says how long its steps took."""
    last, run.last_closed = run.last_closed, (row["iteration"], row["ts"]) if row["ts"] else None
    if row["elapsed_s"] is not None:
        return row["elapsed_s"]
    if gbs and row["samples_per_s"]:
        return gbs / row["samples_per_s"]
    if bar_s is not None or last is None or row["ts"] is None or row["iteration"] <= last[0]:
        return bar_s
    return round((row["ts"] - last[1]).total_seconds() / (row["iteration"] - last[0]), 6)


def see_memory_mib(printed: tuple[str, ...]) -> tuple[float, float, float, float]:
    """`see_memory_usage`'s MA, Max_MA, CA and Max_CA in MiB. Max_CA alone is rounded to whole GB
    (runtime/utils.py: `round(torch_max_memory_reserved() / (1024 * 1024 * 1024))`, no digits): under
    CA it is that rounding, and CA is the better reading of the peak."""
    allocated, peak, reserved, peak_reserved = (float(v) * 1024.0 for v in printed)
    return allocated, peak, reserved, max(peak_reserved, reserved)


def memory_mib(msg: str) -> tuple[int | None, float | None, float | None, float | None, float | None] | None:
    """A memory line DeepSpeed's parser reads: `see_memory_usage`'s, or Megatron's own report, which
    Megatron-DeepSpeed prints under the pipeline engine (`(after 1 iterations) memory (MB) | allocated: ...`,
    its `[Rank N]` already taken): the iteration it names (None for DeepSpeed's) and the four figures in MiB."""
    if match := SEE_MEMORY_RX.search(msg):
        return (None, *see_memory_mib(match.groups()))
    if MEMORY_MARK not in msg:
        return None
    after = MEGATRON_AFTER_RX.search(msg)
    allocated, peak, reserved, peak_reserved = (
        number(found.group(1)) if (found := re.search(MEMORY_FIELDS[column], msg)) else None
        for column in MEMORY_FIELDS
    )
    return int(after.group(1)) if after else None, allocated, peak, reserved, peak_reserved


def memory_row(
    run_key: int,
    rank: int | None,
    step: int | None,
    line_no: int,
    alloc: float | None,
    max_alloc: float | None,
    reserved: float | None,
    max_reserved: float | None,
) -> dict[str, Any]:
    return {
        "run_key": run_key,
        "rank": rank,
        "iteration": step,
        "allocated_mib": alloc,
        "max_allocated_mib": max_alloc,
        "reserved_mib": reserved,
        "max_reserved_mib": max_reserved,
        "line_no": line_no,
    }


NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf|-inf)"
SEE_MEMORY_RX = re.compile(
    r"MA " + NUM + r" GB\s+Max_MA " + NUM + r" GB\s+CA " + NUM + r" GB\s+Max_CA " + NUM + r" GB"
)
"""`see_memory_usage` (runtime/utils.py): `MA 3.71 GB  Max_MA 3.71 GB  CA 3.72 GB  Max_CA 4 GB`."""
MEGATRON_AFTER_RX = re.compile(r"after\s+(\d+)\s+iterations")

# The pipeline engine's start lines (runtime/pipe/engine.py `PipelineEngine.__init__`): `CONFIG: micro_batches=6
# micro_batch_size=1` (a step's micro-batches: its gradient accumulation), and from the first data-parallel rank
# of every stage `RANK=0 STAGE=0 LAYERS=13 [0, 13) STAGE_PARAMS=2646199296 (2646.199M) TOTAL_PARAMS=...
# UNIQUE_PARAMS=20553056256 (20553.056M)`: TOTAL_PARAMS sums the model-parallel group's shards (a tied embedding
# twice), UNIQUE_PARAMS counts each parameter once, the model's size.
PIPE_CONFIG_RX = re.compile(r"\bCONFIG: micro_batches=(\d+) micro_batch_size=(\d+)")
PIPE_STAGE_RX = re.compile(
    r"\bRANK=\d+ STAGE=(\d+) LAYERS=\d+ \[(\d+), (\d+)\) STAGE_PARAMS=(\d+) .*?\bUNIQUE_PARAMS=(\d+)"
)


def pipe_engine_line(run: RunState, line_no: int, msg: str) -> bool:
    """A pipeline engine start line read into the run (micro-batch, accumulation, each stage's layers and
    parameters, the model's parameter count); False for any other line."""
    if match := PIPE_CONFIG_RX.search(msg):
        run.columns.setdefault("mbs", int(match.group(2)))
        run.param("pipeline micro_batches", match.group(1), line_no, once=True)
        return True
    if match := PIPE_STAGE_RX.search(msg):
        run.columns["params"] = int(match.group(5))
        stage, first, stop = match.group(1), match.group(2), match.group(3)
        run.param(f"pipeline stage {stage} layers", f"[{first}, {stop})", line_no, once=True)
        run.param(f"pipeline stage {stage} parameters", match.group(4), line_no, once=True)
        return True
    return False


def number(text: str) -> float:
    """A number as DeepSpeed prints it (`nan` and `inf` included)."""
    return float(text)


def int_or_none(value: Any) -> int | None:
    """A number from a saved state (JSON) as an int, None kept."""
    return None if value is None else int(value)


def float_or_none(value: Any) -> float | None:
    """A number from a saved state (JSON) as a float, None kept."""
    return None if value is None else float(value)


# DeepSpeedConfig.print (runtime/config.py): `logger.info("  {} {} {}".format(arg, dots, value))`, dots
# "." * (29 - len(arg)): name and dots fill 29 columns, a longer name is followed by two spaces
ECHO_BODY_RX = re.compile(r"^  ([a-z][a-z0-9_]*) (\.*) \S")
ECHO_NAME_COLUMNS = 29


def echo_body_line(msg: str) -> bool:
    """A line of DeepSpeed's configuration echo by its padding alone (`ECHO_BODY_RX`)."""
    match = ECHO_BODY_RX.match(msg)
    if match is None:
        return False
    name, dots = match.group(1), match.group(2)
    return len(name) + len(dots) == ECHO_NAME_COLUMNS if dots else len(name) >= ECHO_NAME_COLUMNS


def config_columns(config: dict[str, str]) -> dict[str, Any]:
    """Run columns from the configuration echo (or the user's JSON config where the echo lacks them)."""

    def first(*names: str) -> str | None:
        return next((config[n] for n in names if config.get(n) not in (None, "", "None", "null")), None)

    def integer(*names: str) -> int | None:
        raw = first(*names)
        try:
            return as_int(float(raw)) if raw is not None else None  # type: ignore[return-value]
        except ValueError:
            return None

    def enabled(*names: str) -> bool | None:
        raw = first(*names)
        if raw is None:
            return None
        return raw.strip().lower() in ("true", "1") or "enabled=true" in raw.lower().replace(" ", "")

    out: dict[str, Any] = {
        "zero_stage": integer("zero_optimization_stage", "json.zero_optimization.stage"),
        "mbs": integer("train_micro_batch_size_per_gpu", "json.train_micro_batch_size_per_gpu"),
        "gbs": integer("train_batch_size", "json.train_batch_size"),
        "dp": integer("world_size"),
    }
    bf16 = enabled("bfloat16_enabled", "bfloat16_config", "json.bf16.enabled", "json.bfloat16.enabled")
    fp16 = enabled("fp16_enabled", "float16_config", "json.fp16.enabled")
    # apex AMP on is fp16 mixed precision; off, it says nothing of fp16 or bf16 (an echo cut after its `amp_`
    # lines, which come first, is no fp32 run)
    if bf16:
        out["precision"] = "bf16"
    elif fp16 or enabled("amp_enabled"):
        out["precision"] = "fp16"
    elif bf16 is not None or fp16 is not None:
        out["precision"] = "fp32"
    return {k: v for k, v in out.items() if v is not None}


def flatten(value: Any, prefix: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from flatten(inner, f"{prefix}.{key}")
    else:
        yield prefix, json.dumps(value) if not isinstance(value, str) else value
