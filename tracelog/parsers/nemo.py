"""NeMo 2 (NeMo Run / PyTorch Lightning) training logs.

What NeMo prints and where it lands (sources: NVIDIA/NeMo `nemo/lightning/pytorch/callbacks/`
`progress_printer.py`, `progress_bar.py`, `flops_callback.py`; NVIDIA/Megatron-LM `megatron/core/timers.py`):

- `ProgressPrinter` lines, `Training epoch E, iteration N/T | lr: 1.5e-05 | global_batch_size: 256 |
  global_step: 10 | reduced_train_loss: 10.47 | train_step_timing in s: 4.06 | consumed_samples: 2816`:
  one `iterations` row. The printer formats `prefix + f" epoch {epoch}, iteration {n-1}/{total-1}"`, so
  the run's step count is T + 1; `global_step` (which keeps counting across epochs and restarts) is the
  iteration where printed. Values are averages over the log interval except `global_step`.
  `train_step_timing in s` (TimingCallback) is seconds per step, `TFLOPS_per_GPU` (FLOPsMeasurementCallback)
  the log's own TFLOP/s per GPU. Every other key (`val_loss`, `TFLOPS`, `epoch`, ...) is an
  `iteration_metrics` row. `Validation: iteration N/M` lines are progress only.
- `MegatronProgressBar` (tqdm) lines, `Epoch 0:  10%|█  | 10/100 [00:40<06:00, reduced_train_loss=10.50,
  global_step=9.000, consumed_samples=2560.0, train_step_timing in s=4.060]`, written over each other with
  carriage returns (or the `^M` a terminal copy shows for one): each update in a line is read, and one row
  kept per step (the last drawn). Where the bar rounds `global_step` (`3.1e+4`), the step is read with the
  bar's own count (`lightning_bar`).
- Megatron timer blocks the printer passes on (`(min, max) time across ranks (ms):`, `max time across
  ranks (ms):`, `times across ranks (ms):` with one `rank N:` line per rank): `timers` rows.
- The configuration dump (`Experiment configuration` followed by the YAML of the recipe or Hydra config):
  every leaf as a `run_params` row named by its dotted path; the leaves the model needs (parallel sizes,
  batch sizes, sequence length, layers, hidden, heads, precision, nodes, devices, max_steps) map onto run
  columns by their last name, the first one printed winning (nemo_config.py).
- `Padded vocab_size: 128256, original vocab_size: 128256, dummy tokens: 0.`: the run's vocabulary.
- Lightning's model summary (`2.0 B     Total params`, or the rich summary's box and `Total params: 6.5
  B`; lightning_summary.py): its totals as `run_params`; the total as the run's parameter count only where
  the log says no tensor or pipeline parallelism splits the model, or says nothing of them (an assumption
  kept as `params_from`), since it counts one model-parallel shard.

NeMo's logger prefix (`[NeMo I 2025-01-01 12:00:00 nemo_logging:393] `) and launcher prefixes are
stripped first. Warnings and tracebacks are events; anything else goes to `unparsed`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from tracelog.parsers.base import (
    Batch,
    Emitter,
    LineSource,
    as_int,
    drive,
    guarded,
    strip_prefix,
)
from tracelog.parsers.event_words import CRASH_WORDS, kind_of
from tracelog.parsers.lightning_bar import (
    BAR_RX,
    RATE_RX,
    REDRAW_SPLIT_RX,
    bar_step,
    is_redraws,
    logged_number,
)
from tracelog.parsers.lightning_summary import summary_line, whole_model_params
from tracelog.parsers.megatron_lines import (
    ITER_MARK,
    TIMER_ALL_HEAD,
    TIMER_BLOCK_LINE_RX,
    TIMER_NAME_RX,
    TIMER_RANK_RX,
)
from tracelog.parsers.nemo_config import CONFIG_START_RX, config_line
from tracelog.parsers.prefixes import RAY_PREFIX_RX
from tracelog.parsers.run_rows import tqdm_seconds

FORMAT = "nemo"
VERSION = "6"  # "3": a rounded `global_step` read with the bar's count; "4": a pasted `^M` between redraws;
# "5": the rich model summary, and its total as the parameter count where no model parallelism splits it; "6": the
# bar of a run of unknown length (`614/?`), and a bar whose every value is blank as progress only
# A grown log resumes after its last complete line from the state `parse` hands out (`RESUME_TABLE`);
# the rows of these tables are written again whole at the end of every parse, so a resume replaces them.
FINISH_TABLES = ("run_params",)

NEMO_PREFIX_RX = re.compile(r"^\s*\[NeMo ([DIWEC]) [^\]]*\]\s?")
GLOG_RX = re.compile(r"^([WEF])\d{4} \d\d:\d\d:\d\d")  # torchrun's own warnings: W0302 08:00:01.000000
LEVEL_KINDS = {"W": "warning", "E": "error", "C": "error", "F": "error"}
RANK_PREFIX_RX = re.compile(r"^\s*(?:\[(?:default|rank)(\d+)\]:|\[[Rr]ank\s*(\d+)\]:?|(\d+):\s)\s?")
TORCHRUN_RANK_RX = re.compile(r"\[(?:default|rank)(\d+)\]:")
PRINTER_RX = re.compile(r"^\s*Training epoch (\d+), iteration (\d+)/(\d+)\s*(\|.*)?$")
PROGRESS_ONLY_RX = re.compile(
    r"^\s*(?:Sanity checking )?(?:Validation|Testing)(?: epoch \d+)?: iteration \d+/\S+"
)
# nemo/lightning/base.py `get_vocab_size`: the padded vocabulary the model's embedding really has
PADDED_VOCAB_RX = re.compile(r"Padded vocab_size: (\d+), original vocab_size: (\d+)")
# NeMo 2's `Setting up optimizer with config OptimizerConfig(optimizer='adam', ..., fp16=False, bf16=True, ...,
# use_distributed_optimizer=True, ...)` (Megatron-Core's OptimizerConfig as its dataclass repr prints it)
OPTIMIZER_CONFIG_RX = re.compile(r"\bOptimizerConfig\((.*)\)")
# NeMo's megatron_init (nemo/collections/nlp/modules/common/megatron/megatron_init.py) lists every group of
# each parallel dimension: `All tensor model parallel group ranks: [[0, 1], [2, 3], ...]`; a group's size is
# the degree, all of them together the world. Megatron-core's per-rank parameter counts sum to the model.
GROUPS_RX = re.compile(
    r"All (tensor model|pipeline model|context|data) parallel group ranks( with context parallel combined)?: "
    r"(\[\[[\d, \[\]]*\]\])\s*$"
)
GROUP_KINDS = {"tensor model": "tp", "pipeline model": "pp", "context": "cp", "data": "dp"}
RANK_PARAMS_RX = re.compile(
    r"number of parameters on \(tensor, pipeline\) model parallel rank \((\d+), (\d+)\):\s*(\d+)"
)
# the OptimizerConfig fields kept as run parameters: the optimizer, whether it shards its state, and the
# dtypes of that state (Megatron-core's precision-aware optimizer: `main_params_dtype=torch.float32,
# exp_avg_dtype=torch.bfloat16, ...`; `fp8_recipe` says who keeps the master weights)
OPTIMIZER_PARAM_FIELDS = (
    "optimizer", "use_distributed_optimizer", "use_precision_aware_optimizer", "main_params_dtype",
    "exp_avg_dtype", "exp_avg_sq_dtype", "store_param_remainders", "fp8_recipe",
)  # fmt: skip
OPTIMIZER_FIELD_RX = re.compile(r"\b(fp16|bf16|" + "|".join(OPTIMIZER_PARAM_FIELDS) + r")=('?[\w.]+'?)")
WARNING_RX = re.compile(
    # `error\b`, not `\w*error\b`: a search only asks whether a word ends in "error", and the `\w*` made
    # it quadratic on a long word (64 KiB of letters: minutes).
    r"(?i)traceback \(most recent call last\)|error\b|exception|nccl warn|\bwarn(?:ing)?\b|out of memory"
    r"|\bkilled\b|segmentation fault|" + CRASH_WORDS
)
ENDS_TIMER_HEAD = ("(min, max) time across ranks (ms):", "max time across ranks (ms):")

# key as printed -> iterations column; the printer's `:` keys and the bar's `=` keys are the same names.
ITERATION_KEYS: dict[str, str] = {
    "lr": "learning_rate",
    "global_batch_size": "global_batch_size",
    "reduced_train_loss": "lm_loss",
    # a plain Lightning module's bar (`self.log("train_loss", ..., prog_bar=True)`), or a script's own tqdm
    # bar in the same shape: its loss
    "train_loss": "lm_loss",
    "loss": "lm_loss",
    "train_step_timing in s": "elapsed_s",
    "consumed_samples": "consumed_samples",
    "TFLOPS_per_GPU": "tflops_reported",
    "grad_norm": "grad_norm",
    "loss_scale": "loss_scale",
}
INT_COLUMNS = {"global_batch_size", "consumed_samples"}
# a launcher's ISO time before the line, its zone dropped (the store keeps naive local times)
STAMP_RX = re.compile(r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d)")
# Peak memory in bytes as NeMo 2's performance recipes print it on the printer's line (torch.cuda's
# `max_memory_reserved()`, `max_memory_allocated()`: `max_memory_reserved: 57466159104`, NVIDIA/NeMo#14850):
# a memory row of the printing rank, in MiB. Before NVIDIA/NeMo#13982 (June 2025) the same logging
# (MegatronStrategy with `NEMO_LOG_MEMORY_USAGE=1`) named them otherwise: `peak_memory_usage` was
# torch.cuda.max_memory_reserved() and `memory_allocated` torch.cuda.memory_allocated(), the current figure.
MEMORY_KEYS = {
    "max_memory_reserved": "max_reserved_mib",
    "max_memory_allocated": "max_allocated_mib",
    "peak_memory_usage": "max_reserved_mib",
    "memory_allocated": "allocated_mib",
}
SKIPPED_KEYS = {"global_step", "v_num"}


def detect(head: str) -> int:
    """Sure on the printer's or the bar's lines; never on a head that also has Megatron's own iteration
    lines (a Megatron-LM log that mentions NeMo stays Megatron's)."""
    if ITER_MARK in head:
        return 0
    score = 0
    if re.search(r"Training epoch \d+, iteration \d+/\d+ \|", head):
        score += 40
    if re.search(r"Epoch \d+:.*\d+/(?:\d+|\?) \[[^\]]*(?:reduced_train_loss|global_step)=", head):
        score += 30
    if score and "[NeMo " in head:
        score += 5
    elif head.count("[NeMo ") >= 3:
        # NeMo's own logger before its first printer line (a long setup): NeMo's, though Megatron-core's
        # `number of parameters on (tensor, pipeline)` lines in it speak for Megatron
        score += 12
    return score


class _Parser:
    def __init__(self) -> None:
        self.out = Emitter()
        self.params: list[dict[str, Any]] = []
        self.columns: dict[str, Any] = {}
        self.line_start: int | None = None
        self.line_end: int | None = None
        self.in_config = False
        self.config_seen = False  # a key was read since the configuration's title
        self.path: list[tuple[int, str]] = []  # (indent, name) of the open YAML mappings
        self.timer_mode: str | None = None  # "minmax" (both layouts) or "all"
        self.timer_name: str | None = None
        self.iteration: int | None = None
        self.logged_gbs: int | None = None  # the last `global_batch_size` a printer or bar line said
        self.stamp: datetime | None = None  # the time a launcher wrote before the line being read
        self.last_val_loss: float | None = None
        self.bar_offset: int | None = None  # the bar's count less the step of its last redraw read

    def state(self) -> dict[str, Any]:
        """What crosses the last complete line, as JSON: the run's parameters and columns so far, the
        configuration dump or timer block being read, the last iteration (timers attach to it, a
        redrawn bar repeats it). Every row but the run's is handed out with its line."""
        return {
            "params": self.params,
            "columns": self.columns,
            "lines": [self.line_start, self.line_end],
            "config": [self.in_config, self.config_seen, self.path],
            "timer": [self.timer_mode, self.timer_name],
            "iteration": self.iteration,
            "logged_gbs": self.logged_gbs,
            "last_val_loss": self.last_val_loss,
            "bar_offset": self.bar_offset,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> _Parser:
        """The parser `state` describes; a state of the wrong shape raises KeyError, TypeError or
        ValueError (the ingest then parses the file again from its start)."""
        parser = cls()
        parser.params = [
            {"name": str(p["name"]), "value": str(p["value"]), "line_no": int(p["line_no"])}
            for p in state["params"]
        ]
        parser.columns = {str(k): v for k, v in dict(state["columns"]).items()}
        start, end = state["lines"]
        parser.line_start, parser.line_end = _int_or_none(start), _int_or_none(end)
        in_config, config_seen, path = state["config"]
        parser.in_config, parser.config_seen = bool(in_config), bool(config_seen)
        parser.path = [(int(indent), str(name)) for indent, name in path]
        mode, name = state["timer"]
        parser.timer_mode = str(mode) if mode is not None else None
        parser.timer_name = str(name) if name is not None else None
        parser.iteration = _int_or_none(state["iteration"])
        parser.logged_gbs = _int_or_none(state.get("logged_gbs"))  # absent from states saved before it
        last_val = state.get("last_val_loss")
        parser.last_val_loss = None if last_val is None else float(last_val)
        parser.bar_offset = _int_or_none(state["bar_offset"])
        return parser

    def line(self, n: int, text: str) -> None:
        self.line_start = self.line_start or n
        self.line_end = n
        self.stamp = None
        if is_redraws(text):
            self.bar_line(n, text)
            return
        ray = RAY_PREFIX_RX.match(text)  # SkyPilot's Ray: taken off first, or a config dump's lines end it
        body, rank, level = self.stripped(text[ray.end() :] if ray else text)
        if not body.strip():
            self.in_config = self.in_config and not self.config_seen
            return
        if self.handle(n, body, rank):
            return
        launcher_free, _host = strip_prefix(body)
        if launcher_free != body:
            stamp = STAMP_RX.search(body[: len(body) - len(launcher_free)])
            self.stamp = datetime.fromisoformat(stamp.group(1).replace("T", " ")) if stamp else None
            # a launcher's prefix before torchrun's: NeMo-Run's `retraining/0 [default0]:`, a timestamp
            named = TORCHRUN_RANK_RX.search(body[: len(body) - len(launcher_free)])
            body, inner_rank, inner_level = self.stripped(launcher_free)
            rank = next(
                (r for r in (rank, int(named.group(1)) if named else None, inner_rank) if r is not None), None
            )
            level = level or inner_level
            if not body.strip() or self.handle(n, body, rank):
                return
        glog = GLOG_RX.match(body)
        if level in LEVEL_KINDS or glog or WARNING_RX.search(body):
            default = LEVEL_KINDS.get(level or (glog.group(1) if glog else "W"), "warning")
            self.event(n, body, text, default, leveled=level is not None or glog is not None)
            return
        self.out.add("unparsed", {"line_no": n, "text": text})

    def event(self, n: int, body: str, text: str, default: str = "warning", leveled: bool = False) -> None:
        kind = kind_of(body, default, leveled)
        self.out.add("events", {"run_key": 0, "line_no": n, "kind": kind, "text": text})

    def leftover(self, n: int, text: str, rest: list[str]) -> None:
        """What another stream wrote onto a bar's line (a watchdog's error glued behind the bar, or between
        its redraws): an event when it tells of one, else the whole line is unparsed; never dropped."""
        told = [part for part in rest if WARNING_RX.search(part)]
        if told:
            self.event(n, " ".join(told), " ".join(part.strip() for part in told))
        else:
            self.out.add("unparsed", {"line_no": n, "text": text})

    @staticmethod
    def stripped(text: str) -> tuple[str, int | None, str | None]:
        """The line without torchrun's `[default0]:` (or `[rank0]:`) and NeMo's logger prefix; the rank and
        the log level they named."""
        rank = None
        if match := RANK_PREFIX_RX.match(text):
            rank = int(next(g for g in match.groups() if g is not None))
            text = text[match.end() :]
        level = None
        if match := NEMO_PREFIX_RX.match(text):
            level = match.group(1)
            text = text[match.end() :]
        return text, rank, level

    def handle(self, n: int, body: str, rank: int | None) -> bool:
        if self.in_config and config_line(self, n, body):
            return True
        self.in_config = False
        if match := PRINTER_RX.match(body):
            self.printer(n, match, rank)
            return True
        if PROGRESS_ONLY_RX.match(body):
            return True
        if CONFIG_START_RX.search(body):
            self.in_config, self.config_seen, self.path = True, False, []
            return True
        if self.timer_line(n, body):
            return True
        if BAR_RX.search(body):
            return self.bar(n, body, rank)
        if match := PADDED_VOCAB_RX.search(body):
            self.columns["vocab"] = int(match.group(1))
            return True
        if match := OPTIMIZER_CONFIG_RX.search(body):
            fields = {k: v.strip("'") for k, v in OPTIMIZER_FIELD_RX.findall(match.group(1))}
            for flag in ("bf16", "fp16"):
                if fields.get(flag) == "True" and "precision" not in self.columns:
                    self.columns["precision"] = flag
            for name, value in fields.items():
                if name in OPTIMIZER_PARAM_FIELDS:
                    self.params.append({"name": name, "value": value, "line_no": n})
            return True
        if (match := GROUPS_RX.search(body)) or (match := RANK_PARAMS_RX.search(body)):
            if match.re is GROUPS_RX:
                groups = re.findall(r"\[([\d, ]*)\]", match.group(3))
                name = f"{match.group(1)} parallel size" + (" with context" if match.group(2) else "")
                self.param_once(n, name, str(len(groups[0].split(","))))
                self.param_once(
                    n, "world size (parallel groups)", str(sum(len(g.split(",")) for g in groups))
                )
            else:
                self.param_once(
                    n,
                    f"parameters on (tensor, pipeline) rank ({match.group(1)}, {match.group(2)})",
                    match.group(3),
                )
            return True
        summary = summary_line(body)
        if isinstance(summary, tuple):
            self.params.append({"name": f"lightning {summary[0]}", "value": summary[1], "line_no": n})
        return bool(summary)

    def timer_line(self, n: int, body: str) -> bool:
        stripped = body.strip()
        if stripped.endswith(ENDS_TIMER_HEAD):
            self.timer_mode, self.timer_name = "minmax", None
            return True
        if stripped.endswith(TIMER_ALL_HEAD):
            self.timer_mode, self.timer_name = "all", None
            return True
        if self.timer_mode == "minmax" and (match := TIMER_BLOCK_LINE_RX.match(body)):
            low, high = match.group(2), match.group(3)
            self.timer(n, None, match.group(1), float(high if high is not None else low), low, high)
            return True
        if self.timer_mode == "all":
            if match := TIMER_RANK_RX.match(body):
                if self.timer_name is not None:
                    self.timer(n, int(match.group(1)), self.timer_name, float(match.group(2)), None, None)
                    return True
            elif match := TIMER_NAME_RX.match(body):
                self.timer_name = match.group(1)
                return True
        self.timer_mode = None
        return False

    def timer(
        self, n: int, rank: int | None, name: str, value: float, low: str | None, high: str | None
    ) -> None:
        self.out.add(
            "timers",
            {
                "run_key": 0,
                "rank": rank,
                "iteration": self.iteration,
                "name": name,
                "time_ms": value,
                "time_min_ms": float(low) if low is not None and high is not None else None,
                "line_no": n,
            },
        )

    def printer(self, n: int, match: re.Match[str], rank: int | None) -> None:
        fields = []
        for part in (match.group(4) or "").split("|"):
            key, sep, raw = part.partition(": ")
            if sep:
                fields.append((key.strip(), raw.strip()))
        self.iteration_row(n, int(match.group(2)), int(match.group(3)) + 1, fields, rank)

    def bar_line(self, n: int, text: str) -> None:
        """A carriage-return progress bar: every redraw in the line, one row per step (the last drawn)."""
        latest: dict[int, tuple[str, int | None]] = {}
        other = []
        for segment in REDRAW_SPLIT_RX.split(text):
            body, rank, _level = self.stripped(segment)
            match = BAR_RX.search(body)
            if match:
                latest[int(match.group(2))] = (body[: match.end()], rank)
                if body[match.end() :].strip():
                    other.append(body[match.end() :])
            elif body.strip():
                other.append(body)
        for body, rank in latest.values():
            self.bar(n, body, rank)
        if other:
            self.leftover(n, text, other)

    def bar(self, n: int, body: str, rank: int | None) -> bool:
        match = BAR_RX.search(body)
        if match is None:
            return False
        if body[match.end() :].strip():  # `bar_line` hands out each redraw cut at its end
            self.leftover(n, body, [body[match.end() :]])
        fields = []
        for part in match.group(4).split(", ")[1:]:
            key, sep, raw = part.partition("=")
            if sep:
                fields.append((key.strip(), raw.strip()))
        step = int(match.group(2))
        if not any((key in ITERATION_KEYS or key == "global_step") and raw for key, raw in fields):
            return True  # a bar drawn before any metric (or with every value blank): progress only
        rate = RATE_RX.match(match.group(4).split(", ")[1]) if ", " in match.group(4) else None
        seconds = tqdm_seconds(float(rate.group(1)), rate.group(2)) if rate else None
        if seconds is not None and "train_step_timing in s" not in dict(fields):
            # no step timing logged: the bar's own rate (tqdm's moving average) is the seconds per step
            fields.append(("train_step_timing in s", repr(round(seconds, 6))))
        total = int(match.group(3)) if match.group(3).isdigit() else None  # `?`: a run of unknown length
        self.iteration_row(n, step, total, fields, rank, bar=True)
        return True

    def iteration_row(
        self,
        n: int,
        step: int,
        total: int | None,
        fields: list[tuple[str, str]],
        rank: int | None,
        bar: bool = False,
    ) -> None:
        values = dict(fields)
        iteration: int | float
        if bar:  # the bar may round `global_step` (`3.1e+4`) and count more than steps: `bar_step`
            iteration, self.bar_offset = bar_step(step, values.get("global_step"), self.bar_offset)
        else:
            global_step = logged_number(values.get("global_step", ""))
            iteration = as_int(global_step) if global_step is not None else step
        if bar and iteration == self.iteration:
            return  # the bar redrawn at a step already read (from the printer or an earlier redraw)
        self.iteration = int(iteration)
        row: dict[str, Any] = {"run_key": 0, "iteration": iteration, "train_iters": total, "rank": rank}
        if (
            self.stamp is not None
        ):  # the launcher's time before the line (NeMo-Run's `[2025-11-20T14:55:23+08:00]`)
            row["ts"], self.stamp = self.stamp, None
        memory: dict[str, Any] = {}
        for key, raw in fields:
            column = ITERATION_KEYS.get(key)
            value = logged_number(raw)
            if key in MEMORY_KEYS and value is not None:
                memory[MEMORY_KEYS[key]] = value / 2**20
            elif column is not None:
                row[column] = as_int(value) if column in INT_COLUMNS and value is not None else value
            elif key not in SKIPPED_KEYS:
                metric = {"run_key": 0, "iteration": iteration, "key": key, "value": value, "text": raw}
                if key == "val_loss" and value is not None and value != self.last_val_loss:
                    # Lightning repeats the last validation's `val_loss` on every line until the next one: a
                    # new value is a validation, kept under the name `show` trends (other parsers' name)
                    self.last_val_loss = value
                    self.out.add("iteration_metrics", {**metric, "key": "validation loss", "line_no": n})
                self.out.add("iteration_metrics", {**metric, "line_no": n})
        self.out.add("iterations", {**row, "line_no": n})
        if memory:
            self.out.add(
                "memory", {"run_key": 0, "iteration": iteration, "rank": rank, **memory, "line_no": n}
            )
        self.columns.setdefault("train_iters", total)
        if row.get("global_batch_size") is not None:
            self.logged_gbs = row["global_batch_size"]

    def param_once(self, n: int, name: str, value: str) -> None:
        if not any(p["name"] == name for p in self.params):  # every rank prints it
            self.params.append({"name": name, "value": value, "line_no": n})

    def finish(self) -> None:
        columns = dict(self.columns)
        said = {p["name"]: p["value"] for p in self.params}
        for kind, column in GROUP_KINDS.items():
            if f"{kind} parallel size" in said:
                columns.setdefault(column, int(said[f"{kind} parallel size"]))
        if "world size (parallel groups)" in said and not (
            columns.get("nodes") and columns.get("gpus_per_node")
        ):
            columns.setdefault("gpus", int(said["world size (parallel groups)"]))
        shards = [int(v) for k, v in said.items() if k.startswith("parameters on (tensor, pipeline) rank")]
        if shards and len(shards) == (columns.get("tp") or 1) * (columns.get("pp") or 1):
            columns.setdefault("params", sum(shards))
        if "params" not in columns and (whole := whole_model_params(said, columns)) is not None:
            columns["params"] = whole[0]
            self.param_once(self.line_end or 0, "params_from", whole[1])
        if self.logged_gbs is not None:  # a log without its configuration dump: what its lines said last
            columns.setdefault("gbs", self.logged_gbs)
        if columns.get("nodes") and columns.get("gpus_per_node"):
            columns["gpus"] = columns["nodes"] * columns["gpus_per_node"]
        model_parallel = (columns.get("tp") or 1) * (columns.get("pp") or 1) * (columns.get("cp") or 1)
        if columns.get("gpus") and columns["gpus"] % model_parallel == 0:
            columns["dp"] = columns["gpus"] // model_parallel  # Megatron's world = tp * pp * cp * dp
        self.out.add(
            "runs",
            {
                "run_key": 0,
                "framework": "nemo",
                "line_start": self.line_start,
                "line_end": self.line_end,
                **columns,
                "run_params": self.params,
            },
        )


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


@guarded
def parse(source: LineSource, state: dict[str, Any] | None = None) -> Iterator[Batch]:
    """Batches of every table for a NeMo log; `state` is what an earlier parse of the same file handed
    out after its last complete line, and `source` starts at the next line."""
    parser = _Parser.from_state(state) if state is not None else _Parser()
    return drive(parser, source, parser.state)
