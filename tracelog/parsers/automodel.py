"""NeMo Automodel's training log (NVIDIA-NeMo/Automodel): Hugging Face models fine-tuned or pretrained on
FSDP2, TP, CP and PP, its recipes' step lines behind its logger's `time | LEVEL | name | ` prefix:

    2026-08-10 16:00:44 | INFO | root | step 8 | epoch 0 | loss 0.7839 | grad_norm 1.7024 | lr 1.00e-05 |
    mem 24.06 GiB | tps 31346.32(3918.29/gpu) | num_label_tokens 45579

(one line; `recipes/llm/train_ft.py`, `log_train_metrics`, every step; the VLM, sequence-classification,
retrieval and distillation recipes print the same shape with their own losses). Each gives an
`iterations` row: the loss, grad norm and learning rate; `mem` (the step's `max_memory_allocated`, the
peak statistics reset after each line) a `memory` row; `tps` and its per-GPU share, and any other
`key value` pair (`dllm_loss`, `kd_loss`, `accuracy`, `num_label_tokens`), metrics. Seconds per step are
printed only by the retrieval recipes (`time 2.31s`); elsewhere they are the time between step lines over
the steps between, over the last `WINDOW` step lines: the logger's clock counts whole seconds, so one
second-long step's own delta is 1 or 2 s. A slow step is then spread over the lines of its window, and a
validation or a checkpoint save starts the window again (their time is not a step's).
`[val] ... | step N | ... | loss L` is the validation loss at step N.

The run's configuration: `Experiment_details:` (`World size: 8`, `Model name: ...`), the recipe's YAML
printed whole before training (`step_scheduler:` global and local batch, `max_steps`; `distributed:`
`tp_size`, `cp_size`, `pp_size`, `ep_size`; `dataset:` `seq_len`), and the benchmark recipe's summary
(`Total parameters: N`, `TFLOPs/GPU: X`, `Average iteration time: X seconds`, `Average MFU: X%`). A step
not above the last one starts the next run. Warnings, tracebacks and checkpoint saves are events;
anything else is `unparsed`.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator
from datetime import datetime

from tracelog.parsers.base import Batch, Emitter, LineSource, drive, guarded
from tracelog.parsers.event_words import EVENT_WORDS_RX, kind_of
from tracelog.parsers.run_rows import RunRows, printed_number

FORMAT = "nemo_automodel"
VERSION = "1"

PREFIX_RX = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) \| (DEBUG|INFO|WARNING|ERROR|CRITICAL) \| [^|]*\| "
)
# Python's default logging format (`logging.basicConfig()`: `INFO:root:step 4 | ...`), as Automodel's own
# documentation shows its output (docs/guides/llm/finetune.mdx, "Sample Output")
BASIC_PREFIX_RX = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]*:")
LEVEL_KIND = {"WARNING": "warning", "ERROR": "error", "CRITICAL": "error"}
NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf"
STEP_RX = re.compile(r"(?:^|\| |^[A-Z]+:[\w.]*:|^\[val\] )step (\d+) \| epoch (\d+) \| ")
VAL_RX = re.compile(r"^\[val\] ")
PAIR_RX = re.compile(r"(?:^|\| )(\w+):? (" + NUM + r")(?: GiB|s)?(?:\((" + NUM + r")/gpu\))?(?= \||\s*$)")
YAML_SECTION_RX = re.compile(r"^([A-Za-z_]\w*):\s*$")
YAML_KEY_RX = re.compile(r"^  (\w+):\s*([^\s#]+)")
YAML_KEYS = {
    ("step_scheduler", "global_batch_size"): "gbs",
    ("step_scheduler", "local_batch_size"): "mbs",
    ("step_scheduler", "max_steps"): "train_iters",
    ("distributed", "tp_size"): "tp",
    ("distributed", "cp_size"): "cp",
    ("distributed", "pp_size"): "pp",
    ("distributed", "dp_size"): "dp",
    ("dataset", "seq_len"): "seq_len",
}
YAML_PARAMS = {
    ("distributed", "strategy"),
    ("distributed", "ep_size"),
    ("model", "pretrained_model_name_or_path"),
}
DETAIL_RX = re.compile(r"^(World size|Model name|Recipe): (.+)$")
SUMMARY_RX = re.compile(
    r"^(Total parameters|Trainable parameters|TFLOPs/GPU|Average iteration time|Average MFU|Total setup time):"
    r"\s+([\d,.]+)"
)
SAVE_RX = re.compile(r"^Saving checkpoint to ")
WINDOW = 10
"""Step lines the seconds per step are measured over: a whole-second clock is off by up to a second, so
one line's delta by up to a second and ten lines' by a tenth of one."""
COLUMNS = {"loss": "lm_loss", "grad_norm": "grad_norm", "lr": "learning_rate"}
METRICS = {"tps": "tokens per second", "num_label_tokens": "label tokens"}


def detect(head: str) -> int:
    """Two step lines of Automodel's shape, or one behind its logger's prefix."""
    steps = [line for line in head.split("\n") if STEP_RX.search(line) and "| loss " in line]
    if len(steps) >= 2:
        return 40
    if steps and any(PREFIX_RX.match(line) or BASIC_PREFIX_RX.match(line) for line in steps):
        return 35
    return 0


class _Parser(RunRows):
    framework = "nemo-automodel"

    def __init__(self) -> None:
        super().__init__()
        self.out = Emitter()
        self.last_step: int | None = None
        self.clock: deque[tuple[int, datetime]] = deque(maxlen=WINDOW + 1)
        self.section: str | None = None

    def new_run(self) -> None:
        if self.last_step is not None:
            self.run_key += 1
            self.last_step = None
            self.clock.clear()

    def line(self, n: int, text: str) -> None:
        # colour codes are gone already (`LineSource` removes them)
        prefix = PREFIX_RX.match(text)
        basic = None if prefix else BASIC_PREFIX_RX.match(text)
        message = text[(prefix or basic).end() :] if prefix or basic else text  # type: ignore[union-attr]
        level = prefix.group(2) if prefix else basic.group(1) if basic else None
        if VAL_RX.match(message) and (match := STEP_RX.search(message)):
            self.validation(n, message, int(match.group(1)))
        elif match := STEP_RX.search(message):
            stamp = datetime.strptime(prefix.group(1), "%Y-%m-%d %H:%M:%S") if prefix else None
            self.step(n, message, match, stamp)
        elif not (prefix or basic) and self.yaml(n, text):
            pass
        elif not self.detail(n, message) and text.strip():
            self.other(n, text, message, LEVEL_KIND.get(level) if level else None)

    def step(self, n: int, message: str, match: re.Match[str], stamp: datetime | None) -> None:
        step = int(match.group(1))
        if self.last_step is not None and step <= self.last_step:
            self.new_run()  # a relaunch logs its steps again
        self.run(n)
        pairs = {key: (value, per_gpu) for key, value, per_gpu in PAIR_RX.findall(message[match.end() - 2 :])}
        elapsed = printed_number(pairs["time"][0]) if "time" in pairs else None
        if stamp is not None:
            if elapsed is None and self.clock:
                back_step, back_stamp = self.clock[0]
                if step > back_step:
                    elapsed = round((stamp - back_stamp).total_seconds() / (step - back_step), 6)
            self.clock.append((step, stamp))
        row = {"run_key": self.run_key, "iteration": step, "elapsed_s": elapsed, "ts": stamp, "line_no": n}
        for key, column in COLUMNS.items():
            if key in pairs:
                row[column] = printed_number(pairs[key][0])
        self.out.add("iterations", row)
        at = {"run_key": self.run_key, "iteration": step, "line_no": n}
        if "mem" in pairs and (gib := printed_number(pairs["mem"][0])) is not None:
            self.out.add("memory", {**at, "rank": None, "max_allocated_mib": gib * 1024})
        for key, (value, per_gpu) in pairs.items():
            if key in COLUMNS or key in ("mem", "time", "epoch"):
                continue
            name = METRICS.get(key, key)
            self.out.add(
                "iteration_metrics", {**at, "key": name, "value": printed_number(value), "text": value}
            )
            if per_gpu:
                metric = {
                    **at,
                    "key": f"{name} per device",
                    "value": printed_number(per_gpu),
                    "text": per_gpu,
                }
                self.out.add("iteration_metrics", metric)
        self.last_step = step

    def validation(self, n: int, message: str, step: int) -> None:
        self.clock.clear()  # the evaluation's time is no step's
        pairs = {key: value for key, value, _ in PAIR_RX.findall(message)}
        if "loss" in pairs:
            metric = {"run_key": self.run_key, "iteration": step, "key": "validation loss", "line_no": n}
            self.out.add(
                "iteration_metrics", {**metric, "value": printed_number(pairs["loss"]), "text": pairs["loss"]}
            )
        else:
            self.out.add("unparsed", {"line_no": n, "text": message})

    def yaml(self, n: int, body: str) -> bool:
        """A line of the recipe's YAML as it prints it before training; True when it is one of ours."""
        if match := YAML_SECTION_RX.match(body):
            self.section = match.group(1)
            return False  # a section header alone says nothing: kept unparsed
        match = YAML_KEY_RX.match(body)
        if match is None or self.section is None:
            if not body.startswith(" "):
                self.section = None
            return False
        key = (self.section, match.group(1))
        value = match.group(2).strip("'\"")
        if key in YAML_KEYS and value.isdigit():
            if self.last_step is not None:
                self.new_run()  # the next launch prints its configuration again
            self.run(n)[YAML_KEYS[key]] = int(value)
            return True
        if key in YAML_PARAMS:
            self.param(n, f"{key[0]}.{key[1]}", value)
            return True
        return False

    def detail(self, n: int, message: str) -> bool:
        if match := DETAIL_RX.match(message.strip()):
            name, value = match.groups()
            if name == "World size" and value.strip().isdigit():
                if self.last_step is not None:
                    self.new_run()
                self.run(n)["gpus"] = int(value)
            else:
                self.param(n, name.lower().replace(" ", "_"), value.strip())
            return True
        if match := SUMMARY_RX.match(message.strip()):
            name, value = match.groups()
            if name == "Total parameters":
                self.run(n)["params"] = int(value.replace(",", ""))
            else:
                self.param(n, name, value.rstrip("."))
            return True
        return False

    def other(self, n: int, text: str, message: str, level: str | None) -> None:
        """A save, a line with a warning's or an error's word, or one the logger printed at that level."""
        if SAVE_RX.match(message):
            self.clock.clear()  # nor is the save's
            kind = "checkpoint_saved"  # Automodel prints no line when a save ends
            self.out.add("events", {"run_key": self.run_key, "line_no": n, "kind": kind, "text": text})
        elif level is not None or EVENT_WORDS_RX.search(message):
            kind = kind_of(message, level or "warning", leveled=level is not None)
            self.out.add("events", {"run_key": self.run_key, "line_no": n, "kind": kind, "text": text})
        else:
            self.out.add("unparsed", {"line_no": n, "text": text})

    def finish(self) -> None:
        for run in self.runs.values():
            tp, pp, cp = (run.get(k) or 1 for k in ("tp", "pp", "cp"))
            if run.get("gpus") and not run.get("dp") and run["gpus"] % (tp * pp * cp) == 0:
                run["dp"] = run["gpus"] // (tp * pp * cp)  # `dp_size: none`: what the other dimensions leave
            self.out.add("runs", run)


@guarded
def parse(source: LineSource) -> Iterator[Batch]:
    return drive(_Parser(), source)
