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
(`Total parameters: N`, `TFLOPs/GPU: X`, `Average iteration time: X seconds`, `Average MFU: X%`). The
blocks the recipes log before training (recipes/base_recipe.py): `Step scheduler:` (`- Gradient
accumulation steps: 8`, `- Max train steps: 18500`, the checkpoint and validation intervals), `LR scheduler:`
(the `OptimizerParamScheduler(...)` repr: warm-up, decay steps and style, the learning rates) and
`Optimizer:` (torch's repr, `AdamW (`, `Parameter Group 0`, its settings) as run parameters, the step total
as `train_iters`. The global batch over the local batch and the accumulation is the data-parallel size;
the step line's tokens per second over its per-GPU share is the data-parallel times the context-parallel
ranks (train_ft.py: `tps / cp / dp`), kept as `dp_x_cp_from_tps` where the two round to a whole count,
and the GPUs where the log gives the other degrees. A step not above the last one starts the next run. Warnings, tracebacks and checkpoint saves are events;
anything else is `unparsed`.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator
from datetime import datetime

from tracelog.parsers.base import Batch, Emitter, LineSource, drive, guarded
from tracelog.parsers.checkpoints import fill_run
from tracelog.parsers.event_words import EVENT_WORDS_RX, kind_of
from tracelog.parsers.run_rows import RunRows, printed_number

FORMAT = "nemo_automodel"
VERSION = (
    "3"  # "2": the step scheduler, LR scheduler and optimizer blocks; "3": the shape of the checkpoint named
)

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
BLOCK_HEADS = {
    "Step scheduler:": "step_scheduler",
    "LR scheduler:": "lr_scheduler",
    "Optimizer:": "optimizer",
}
ITEM_RX = re.compile(r"^- ([^:]+): (.*?)\s*$")  # `- Gradient accumulation steps: 8`
REPR_OPEN_RX = re.compile(r"^(\w+) ?\($")  # `AdamW (`, `OptimizerParamScheduler(`
REPR_KEY_RX = re.compile(r"^( {4,})(\w+):(?: (.*?))?\s*$")  # `    lr: 6e-05`, `    learning_rate:`
GROUP_RX = re.compile(r"^Parameter Group (\d+)$")
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
        self.block: str | None = None  # the `Step scheduler:`, `LR scheduler:` or `Optimizer:` block read
        self.block_path: list[str] = []  # the keys open in a repr block, by its indent
        self.group = 0  # the optimizer's parameter group being read

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
        elif (self.block or message.strip() in BLOCK_HEADS) and self.block_line(n, message):
            pass  # a line of a block the recipe logs before training
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
        if "tps" in pairs and pairs["tps"][1]:
            self.ranks_from_tps(n, pairs["tps"][0], pairs["tps"][1])
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

    def ranks_from_tps(self, n: int, tps: str, per_gpu: str) -> None:
        """The data-parallel times context-parallel ranks the first step line's `tps 144711.55(72355.78/gpu)`
        says: where they divide to a whole count within the two printed decimals."""
        run, total, share = self.run(n), printed_number(tps), printed_number(per_gpu)
        if "_tps_ranks" in run or not total or not share:
            return
        ranks = round(total / share)
        run["_tps_ranks"] = (
            ranks if ranks >= 1 and abs(total - ranks * share) <= 0.005 * (ranks + 1) else None
        )

    def block_line(self, n: int, message: str) -> bool:
        """A line of a block the recipe logs before training (see the module's docstring); False ends it."""
        if (head := BLOCK_HEADS.get(message.strip())) is not None:
            if self.last_step is not None:
                self.new_run()  # the next launch logs its blocks again
            self.block, self.block_path, self.group = head, [], 0
            self.run(n)
            return True
        if self.block == "step_scheduler" and (item := ITEM_RX.match(message)):
            name, value = item.group(1).strip(), item.group(2)
            if name == "Max train steps" and value.isdigit():
                self.run(n).setdefault("train_iters", int(value))
            key = "_".join(name.lower().split())
            self.param(n, key if key == "gradient_accumulation_steps" else f"step_scheduler.{key}", value)
            return True
        if self.block in ("lr_scheduler", "optimizer"):
            if opened := REPR_OPEN_RX.match(message.strip()):
                self.param(n, self.block, opened.group(1))
                return True
            if group := GROUP_RX.match(message.strip()):
                self.group = int(group.group(1))
                return True
            if message.strip() == ")":
                self.block = None
                return True
            if setting := REPR_KEY_RX.match(message):
                depth = len(setting.group(1)) // 4
                self.block_path = [*self.block_path[: depth - 1], setting.group(2)]
                if setting.group(3):
                    at = [f"group{self.group}"] if self.group else []
                    self.param(n, ".".join([self.block, *at, *self.block_path]), setting.group(3))
                return True
        self.block = None
        return False

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
            said = {p["name"]: p["value"] for p in run["run_params"]}
            accumulation = said.get("gradient_accumulation_steps", "")
            mbs, gbs = run.get("mbs"), run.get("gbs")
            per_dp = mbs * int(accumulation) if mbs and accumulation.isdigit() else 0
            if not run.get("dp") and per_dp and gbs and gbs % per_dp == 0:
                run["dp"] = gbs // per_dp  # global = local x data-parallel x accumulation
            if ranks := run.pop("_tps_ranks", None):
                run["run_params"].append({"name": "dp_x_cp_from_tps", "value": str(ranks), "line_no": None})
                if all(run.get(k) for k in ("tp", "pp", "cp")) and ranks % cp == 0:
                    run.setdefault("dp", ranks // cp)
                    run.setdefault("gpus", ranks * tp * pp)
            if run.get("gpus") and not run.get("dp") and run["gpus"] % (tp * pp * cp) == 0:
                run["dp"] = run["gpus"] // (tp * pp * cp)  # `dp_size: none`: what the other dimensions leave
            fill_run(run, ("model.pretrained_model_name_or_path", "model_name"))  # it prints no shape
            self.out.add("runs", run)


@guarded
def parse(source: LineSource) -> Iterator[Batch]:
    return drive(_Parser(), source)
