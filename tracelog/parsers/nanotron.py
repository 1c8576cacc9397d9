"""nanotron's training log (huggingface/nanotron): 3D-parallel pretraining, the trainer behind SmolLM.

Its logger prefixes a line with the time, the level and the ranks of the dimensions larger than one
(nanotron/logging/base.py, `set_logger_verbosity_format`), in colours on a terminal:

    01/17/2024 13:47:27 [INFO|DP=0|PP=0|TP=0|ip-26-0-160-225]: iteration: 991 / 1000 | ...
    11/25 13:47:27 [INFO|DP=0|TP=0|node-1]: iteration: 10 / 100 | consumed_tokens: 1.31M | ...

The iteration line (`LoggerWriter.add_scalars_from_list` over `Trainer.train_step_logs`'s items) gives an
`iterations` row per logged step: `time_per_iteration_ms` (`elapsed_time_per_iteration_ms` before 2025),
`lm_loss`, `lr`, `grad_norm`, `model_tflops_per_gpu` as the TFLOP/s per GPU, `consumed_tokens`; the
throughput, `hardware_tflops_per_gpu` and `z_loss` become metrics (and `tokens_per_sec` over
`tokens_per_sec_per_gpu` the GPU count, where the log gives none: `whole`), and `cuda_memory_allocated` /
`cuda_max_memory_reserved` (bytes, printed in the detailed mode) a `memory` row. Values are in
`human_format`: three significant digits and a K, M, B (G before 2025), T suffix of powers of 1000, so
`time_per_iteration_ms: 1.23K` is 1230 ms. `global_batch_size` counts tokens since 2025 and samples
before; it is taken as samples only where it equals the start line's.

The run's configuration: the start line (`mbs: 2 | grad_accum: 8 | cp: 1 | sequence_length: 2048 |
global_batch_size: 16 | train_steps: 100 | start_iteration_step: 0 | ...`), the `Config:` block that
pretty-prints the trainer's dataclasses (`ParallelismArgs(dp=2, pp=1, tp=4, ...)`, `recompute_layer`,
`LlamaConfig(hidden_size=..., num_hidden_layers=..., ...)`, `dtype=torch.bfloat16`, `OptimizerArgs(
zero_stage=0, ...)`, one `key=value` per line), `Total number of parameters: 1.71G (3264.11MiB)`, and
`log_memory`'s `Memory usage: 1234.56MiB. Peak allocated 5504.00MiB. Peak reserved: 22490.00MiB`. A
`Start training` or `Config:` banner after steps were read, a step not above the last one or of another
total (`train_steps`), or the lines a launch prints first (`Loading checkpoint from ...`, `No checkpoint
path provided.`, the loaded `CheckpointMetadata(...)`, whose `last_train_step` is kept) start the next run
(a relaunch, a resume). `Saving checkpoint at ...` and `Loading checkpoint from ...` are events, as are
warnings and tracebacks; anything else is `unparsed`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from tracelog.parsers.base import Batch, Emitter, LineSource, drive, guarded
from tracelog.parsers.event_words import EVENT_WORDS_RX, kind_of
from tracelog.parsers.run_rows import RunRows
from tracelog.parsers.topo import ANSI_RESIDUE_RX

FORMAT = "nanotron"
VERSION = (
    "3"  # "2": a launch's first lines and a changed step total start the next run; "3": GPUs from the rates
)

NANOTRON_PREFIX_RX = re.compile(r"\[(?:INFO|WARNING|ERROR|DEBUG)(?:\|(?:DP|PP|TP|CP|EP)=\d+)+[|\]]")
PREFIX_RX = re.compile(
    r"^(?:\[rank\d+\]:\s*)?(?:(\d\d/\d\d(?:/\d{4})? \d\d:\d\d:\d\d) )?\[(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)"
    r"[^\]]*\]: ?"
)
ITERATION_RX = re.compile(r"\biteration: (\d+) / (\d+)")
HUMAN = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|-?inf)([KMGBTPE]?)"
FIELD_RX = re.compile(r"(?:^|\| )([\w/]+):\s+" + HUMAN + r"(?= \||\s*$)")
SCALE = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "B": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
START_RX = re.compile(r"\bmbs: \d+ \| grad_accum: \d+ \|")
START_FIELD_RX = re.compile(
    r"\b(mbs|grad_accum|cp|sequence_length|global_batch_size|train_steps|start_iteration_step): (\d+)"
)
PARAMS_RX = re.compile(r"\bTotal number of parameters: " + HUMAN)
MEMORY_2023_RX = re.compile(r"Memory usage: ([\d.]+)MB\. Peak reserved memory: ([\d.]+)MB")
MEMORY_RX = re.compile(
    r"Memory usage: ([\d.]+)MiB\. Peak allocated:? ([\d.]+)MiB\.? Peak reserved: ([\d.]+)MiB"
)
CONFIG_RX = re.compile(
    r"\b(dp|pp|tp|context_parallel_size|expert_parallel_size|recompute_layer|hidden_size|"
    r"num_hidden_layers|num_attention_heads|num_key_value_heads|intermediate_size|vocab_size|hidden_act|"
    r"sequence_length|train_steps|micro_batch_size|batch_accumulation_per_replica|zero_stage|dtype|"
    r"accumulate_grad_in_fp32|tie_word_embeddings)=([\w.']+)"
)
BLOCK_RX = re.compile(r"\w*(?:Config|Args)\(")
CHECKPOINT_RX = re.compile(r"\b(Saving|Loading) checkpoint (?:at|from) (\S+)")
# What a launch prints once, as it starts, before its `Config:` banner in releases since 2025 (trainer.py
# `pre_init` -> serialize/main.py `parse_ckpt_path`, `_load_model_checkpoint`, and the loaded
# `CheckpointMetadata(..., metas=TrainingMetadata(consumed_train_samples=N, last_train_step=N, ...))`):
# after steps, the next launch (a resume).
LAUNCH_RX = re.compile(r"^\s*(?:Loading checkpoint from |No checkpoint path provided\.|CheckpointMetadata\()")
LAST_TRAIN_STEP_RX = re.compile(r"^\s*CheckpointMetadata\(.*\blast_train_step=(\d+)")
METRIC_KEYS = {
    "tokens_per_sec": "tokens per second",
    "tokens_per_sec_per_gpu": "tokens per second per device",
    "hardware_tflops_per_gpu": "hardware tflops per gpu",
    "z_loss": "z loss",
}
RUN_COLUMNS = {
    "hidden_size": "hidden",
    "num_hidden_layers": "layers",
    "num_attention_heads": "heads",
    "num_key_value_heads": "query_groups",
    "intermediate_size": "ffn_hidden",
    "vocab_size": "vocab",
    "micro_batch_size": "mbs",
    "sequence_length": "seq_len",
    "train_steps": "train_iters",
    "zero_stage": "zero_stage",
    "tp": "tp",
    "pp": "pp",
    "dp": "dp",
    "context_parallel_size": "cp",
}
DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}


MARKS = ("Memory usage: ", "Config(general=", "Start training", "Total number of parameters: ", "iteration: ")


def detect(head: str) -> int:
    """Two iteration lines of nanotron's shape, or one behind its logger's rank prefix; its prefix
    (`[INFO|DP=0|PP=1|TP=0]`) around one of its own lines."""
    lines = [line for line in head.split("\n") if ITERATION_RX.search(line) and "lm_loss: " in line]
    if len(lines) >= 2 or (lines and NANOTRON_PREFIX_RX.search(head)):
        return 40
    if NANOTRON_PREFIX_RX.search(head) and any(mark in head for mark in MARKS):
        return 30  # its logger around its own lines, before any step (a crash at start, a memory report)
    return 0


def human(value: str, suffix: str = "") -> float:
    """A `human_format` number as a float: `1.23K` is 1230."""
    return float(value) * SCALE[suffix]


def _stamp(text: str | None) -> datetime | None:
    """The prefix's time when it carries the year (`01/17/2024 13:47:27`; since 2025 `11/25 13:47:27`
    has none, and no row gets a time it would have to guess)."""
    if text is None or text.count("/") != 2:
        return None
    return datetime.strptime(text, "%m/%d/%Y %H:%M:%S")


class _Parser(RunRows):
    framework = FORMAT

    def __init__(self) -> None:
        super().__init__()
        self.out = Emitter()
        self.last_step: int | None = None
        self.first_step: int | None = None  # the start line's `start_iteration_step` + 1
        self.last_total: int | None = None  # the `/ T` of the last iteration line: the launch's train_steps
        self.in_config = False
        self.world_by_rates: dict[int, int | None] = {}  # per run: the GPUs its first line's rates give

    def new_run(self) -> None:
        if self.last_step is not None:
            self.run_key += 1
            self.last_step, self.first_step, self.last_total = None, None, None

    def line(self, n: int, text: str) -> None:
        # colour codes are gone already (`LineSource` removes them); those that lost their ESC in a paste to a
        # web page (`[2;3m12/06 14:46:02 [INFO|CP=0|TP=0|nid006683][0m: ...`) only from a line starting with one
        body = text
        if body.startswith("[") and ANSI_RESIDUE_RX.match(body):
            body = ANSI_RESIDUE_RX.sub("", body)
        prefix = PREFIX_RX.match(body)
        message = body[prefix.end() :] if prefix else body
        if prefix:
            banner = message.strip()
            if banner in ("Config:", "Model Config:"):
                if banner == "Config:":
                    self.new_run()
                self.in_config = True
                self.run(n)
                return
            if banner.strip("=") == "" and banner:
                self.out.add("unparsed", {"line_no": n, "text": text})  # the rule around a banner
                return
            # the pretty-printed block's first line carries the prefix; the rest, indented, carry it only
            # in releases before 2025
            self.in_config = self.in_config and bool(BLOCK_RX.match(banner) or message.startswith(" "))
        if match := ITERATION_RX.search(message):
            self.step(n, message, match, prefix.group(1) if prefix else None)
        elif self.in_config and CONFIG_RX.search(message):
            self.config(n, CONFIG_RX.findall(message))
        elif match := MEMORY_RX.search(message):
            self.memory(n, *(float(g) for g in match.groups()))
        elif match := MEMORY_2023_RX.search(message):
            self.memory(n, float(match.group(1)), None, float(match.group(2)))
        elif not self.start(n, message) and body.strip():
            self.other(n, text, message)

    def step(self, n: int, message: str, match: re.Match[str], stamp: str | None) -> None:
        step, total = int(match.group(1)), int(match.group(2))
        if self.last_step is not None and (step <= self.last_step or total != self.last_total):
            # a relaunch from a checkpoint logs its steps again, or runs to another `train_steps`
            self.new_run()
        self.last_total = total
        run = self.run(n)
        run.setdefault("train_iters", total)
        printed = {key: (value, suffix) for key, value, suffix in FIELD_RX.findall(message)}
        fields = {key: human(value, suffix) for key, (value, suffix) in printed.items()}
        ms = fields.get("time_per_iteration_ms", fields.get("elapsed_time_per_iteration_ms"))
        row: dict[str, Any] = {
            "run_key": self.run_key,
            "iteration": step,
            "train_iters": total,
            "elapsed_s": ms / 1000 if ms is not None else None,
            "lm_loss": fields.get("lm_loss"),
            "learning_rate": fields.get("lr"),
            "grad_norm": fields.get("grad_norm"),
            "tflops_reported": fields.get("model_tflops_per_gpu"),
            "consumed_tokens": round(fields["consumed_tokens"]) if "consumed_tokens" in fields else None,
            "consumed_samples": round(fields["consumed_samples"]) if "consumed_samples" in fields else None,
            "ts": _stamp(stamp),
            "line_no": n,
        }
        gbs = fields.get("global_batch_size")
        # samples until the release that renamed the time key (nanotron 2b141c2f, 2025-03): tokens since
        if gbs is not None and ("elapsed_time_per_iteration_ms" in fields or run.get("gbs") == round(gbs)):
            row["global_batch_size"] = round(gbs)
        self.out.add("iterations", row)
        if (
            "tokens_per_sec" in printed
            and "tokens_per_sec_per_gpu" in printed
            and self.run_key not in self.world_by_rates
        ):
            self.world_by_rates[self.run_key] = world_size(
                printed["tokens_per_sec"], printed["tokens_per_sec_per_gpu"]
            )
        for key, name in METRIC_KEYS.items():
            if key in fields:
                metric = {"run_key": self.run_key, "iteration": step, "key": name, "line_no": n}
                self.out.add("iteration_metrics", {**metric, "value": fields[key], "text": None})
        if "cuda_memory_allocated" in fields or "cuda_max_memory_reserved" in fields:
            mib = {
                k: fields[k] / 2**20
                for k in ("cuda_memory_allocated", "cuda_max_memory_reserved")
                if k in fields
            }
            self.out.add(
                "memory",
                {
                    "run_key": self.run_key,
                    "iteration": step,
                    "rank": None,
                    "allocated_mib": mib.get("cuda_memory_allocated"),
                    "max_reserved_mib": mib.get("cuda_max_memory_reserved"),
                    "line_no": n,
                },
            )
        self.last_step = step

    def start(self, n: int, message: str) -> bool:
        """The `Start training` banner and the line after it, the parameter count; False for any other."""
        if message.strip() == "Start training":
            self.new_run()
            self.run(n)
        elif START_RX.search(message):
            start = {key: int(value) for key, value in START_FIELD_RX.findall(message)}
            run = self.run(n)
            for key, column in (("mbs", "mbs"), ("sequence_length", "seq_len"), ("global_batch_size", "gbs"),
                                ("train_steps", "train_iters"), ("cp", "cp")):  # fmt: skip
                if key in start:
                    run[column] = start[key]
            mbs, accumulation, gbs = start.get("mbs"), start.get("grad_accum"), start.get("global_batch_size")
            if mbs and accumulation and gbs and gbs % (mbs * accumulation) == 0:
                run["dp"] = gbs // (mbs * accumulation)
            if accumulation is not None:
                self.param(n, "grad_accum", accumulation)
            if "start_iteration_step" in start:
                self.param(n, "start_iteration_step", start["start_iteration_step"])
                self.first_step = start["start_iteration_step"] + 1
        elif match := PARAMS_RX.search(message):
            self.run(n)["params"] = round(human(match.group(1), match.group(2)))
        else:
            return False
        return True

    def config(self, n: int, pairs: list[tuple[str, str]]) -> None:
        """`key=value` lines of the pretty-printed `Config:` and `Model Config:` blocks."""
        run = self.run(n)
        for key, raw in pairs:
            value = raw.strip("'")
            if key in RUN_COLUMNS and value.isdigit():
                run[RUN_COLUMNS[key]] = int(value)
            elif key == "dtype" and value in DTYPES:
                run["precision"] = DTYPES[value]
            elif key == "recompute_layer":
                run["recompute"] = "full" if value == "True" else "none"
            elif key == "hidden_act":
                run["swiglu"] = value in ("silu", "swiglu")
            elif key in ("accumulate_grad_in_fp32", "tie_word_embeddings", "expert_parallel_size"):
                self.param(n, key, value)
        if all(run.get(k) for k in ("tp", "pp", "dp")):
            run["gpus"] = run["tp"] * run["pp"] * run["dp"] * (run.get("cp") or 1)

    def memory(self, n: int, allocated: float, peak: float | None, reserved: float) -> None:
        """`log_memory` around the first steps' `train_batch_iter`: the step being run, the one after the
        last logged (none while the model is built)."""
        self.run(n)
        step = self.last_step + 1 if self.last_step is not None else self.first_step
        self.out.add(
            "memory",
            {
                "run_key": self.run_key,
                "iteration": step,
                "rank": None,
                "allocated_mib": allocated,
                "max_allocated_mib": peak,
                "max_reserved_mib": reserved,
                "line_no": n,
            },
        )

    def other(self, n: int, text: str, message: str) -> None:
        if LAUNCH_RX.match(message):
            self.new_run()  # the next launch's setup, not the last steps' run
            self.run(n)
        if match := LAST_TRAIN_STEP_RX.match(message):
            self.param(n, "checkpoint last_train_step", int(match.group(1)))
        elif message.strip() == "No checkpoint path provided.":
            return
        elif match := CHECKPOINT_RX.search(message):
            # nanotron says nothing when a save ends: its start is the only line a save leaves
            kind = "checkpoint_saved" if match.group(1) == "Saving" else "checkpoint_loaded"
            self.out.add("events", {"run_key": self.run_key, "line_no": n, "kind": kind, "text": text})
        elif EVENT_WORDS_RX.search(message):
            self.out.add(
                "events", {"run_key": self.run_key, "line_no": n, "kind": kind_of(message), "text": text}
            )
        else:
            self.out.add("unparsed", {"line_no": n, "text": text})

    def finish(self) -> None:
        for key, run in self.runs.items():
            if not run.get("gpus") and (world := self.world_by_rates.get(key)) is not None:
                run["gpus"] = world
            self.out.add("runs", run)


def world_size(rate: tuple[str, str], per_gpu: tuple[str, str]) -> int | None:
    """The GPU count a step line's two rates give where no `Config:` block does: nanotron divides
    `tokens_per_sec` by the world group's size for `tokens_per_sec_per_gpu` (trainer.py `train_step_logs`),
    printing both in `human_format` (three significant digits). The count is the whole number within 1 %
    of their ratio, where it is the only one the printed digits allow (each figure half a unit of its last
    digit either way): `22.8K / 11.4K` is 2, `182K / 699` (260.4: 260 or 261) none."""
    (r, half_r), (g, half_g) = ((human(*f), _half_unit(*f)) for f in (rate, per_gpu))
    if not (g > half_g and math.isfinite(r) and math.isfinite(g)):
        return None
    ratio, low, high = r / g, (r - half_r) / (g + half_g), (r + half_r) / (g - half_g)
    count = round(ratio)
    if count < 1 or abs(ratio - count) > 0.01 * count:
        return None
    return count if math.ceil(low) == math.floor(high) == count else None


def _half_unit(value: str, suffix: str) -> float:
    """Half the unit of a printed number's last digit, in its scale: `11.4K` is 11400 ± 50."""
    if not re.fullmatch(r"\d+(?:\.\d*)?", value):
        return 0.0
    decimals = len(value.split(".")[1]) if "." in value else 0
    return 0.5 * 10.0**-decimals * SCALE[suffix]


@guarded
def parse(source: LineSource) -> Iterator[Batch]:
    return drive(_Parser(), source)
