"""Hugging Face Trainer output (transformers' `Trainer`, and the tools built on it: TRL, LLaMA-Factory,
axolotl), alone or with DeepSpeed underneath (`--deepspeed ds_config.json`).

The Trainer prints what it logs as a Python dict, every `logging_steps` steps, on the main process
(trainer_callback.py: `ProgressCallback.on_log` writes `str(logs)` through the progress bar, or
`PrinterCallback` prints it when the bar is off):

    {'loss': 1.9012, 'grad_norm': 0.8374, 'learning_rate': 1.8e-05, 'epoch': 0.1}

The dict says no step. The step is the training bar's (tqdm's `50/1000 [02:05<39:35,  2.50s/it]`,
updated by `on_step_end` just before the step's log is printed: in a file the bar's redraws and the dict
share one line, separated by carriage returns); without a bar, `logging_steps` times the count of dicts
when the arguments were printed, else the count (`step_source` says which). Seconds per step are the
bar's rate (`2.50s/it`, `1.25it/s`: tqdm's moving average). A run that logs no dict (shorter than
`logging_steps`, 500 by default) gets a row per step its training bar reached, step time and no loss,
where the `Running training` block names that bar's length. LLaMA-Factory's `trainer_log.jsonl` lines
(`{"current_steps": 87, "total_steps": 11250, "loss": ...}`) carry their step. `eval_*` dicts are metrics
of the step (`eval_loss` as `validation loss`), the closing `train_runtime` dict run parameters; a
`nan` loss is a NaN iteration. Values printed as `np.float64(0.8)` or `tensor(0.8, device='cuda:0')`
(numpy 2, some versions' grad norm) are read as their number.

The run's shape comes from the Trainer's `***** Running training *****` block (micro-batch per device,
total batch, accumulation steps, total steps; data-parallel size is their quotient), the model's
configuration as `from_pretrained` logs it (`Model config LlamaConfig { "hidden_size": 4096, ... }`), a
printed `TrainingArguments(...)` (these two blocks: hf_trainer_shape.py), and DeepSpeed's configuration echo
(`zero_optimization_stage`, precision, batch sizes), `see_memory_usage` lines (memory rows) and wall-clock
timer lines (`timers`, placed as the DeepSpeed parser places them; these lines: hf_trainer_deepspeed.py). A second `Running training` block
after steps starts a new run. Warnings and tracebacks are events; anything else is `unparsed`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from tracelog.parsers.base import Batch, Emitter, LineSource, drive, guarded, strip_prefix
from tracelog.parsers.deepspeed import LOG_PREFIX_RX
from tracelog.parsers.deepspeed import STEP_RX as DS_STEP_RX
from tracelog.parsers.deepspeed_config import config_columns, memory_row
from tracelog.parsers.event_words import EVENT_WORDS_RX, kind_of
from tracelog.parsers.hf_trainer_deepspeed import deepspeed_line
from tracelog.parsers.hf_trainer_dict import (
    BAR_RX,
    DICT_RX,
    HEADER_RX,
    PAIR_RX,
    SAME_STEP_TOLERANCE,
    clock_seconds,
    dict_value,
    figures_agree,
    logged_text,
    logger_clock,
    logger_prefix_end,
    printer_of,
    steps_pair,
    steps_per_epoch,
)
from tracelog.parsers.hf_trainer_shape import block_line, block_start, shape_from_arguments
from tracelog.parsers.prefixes import TORCHRUN_BANNER
from tracelog.parsers.run_rows import RunRows, tqdm_seconds

FORMAT = "hf_trainer"
VERSION = "7"  # "3": a first dict before any bar takes the step of the bar drawn again after it;
# "4": DeepSpeed's AMP off is no fp32; "5": the configuration's norm, rotary and tied-embedding keys and
# `torch_compile` kept; "6": a log viewer's `[1757] ` line numbers; "7": the logger's clock to the millisecond
# where its prefix prints them, and DeepSpeed's `step=N` right after the bar at N - 1 the next dict's step
FRAMEWORK = "hf-trainer"

SAVED_RX = re.compile(r"\bSaving model checkpoint to \S+")
RESUMED_RX = re.compile(r"\bContinuing training from global step \d+")
RELAUNCH_MARK = TORCHRUN_BANNER
# LLaMA-Factory's word that the model recomputes its activations (model/model_utils/checkpointing.py)
GRADIENT_CHECKPOINTING_RX = re.compile(r"\bGradient checkpointing enabled\b")
RUNNING_RX = re.compile(r"\*{5} Running (training|Evaluation|Prediction) \*{5}")
SUMMARY_KEYS = ("train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss")
ROW_KEYS = {"loss": "lm_loss", "grad_norm": "grad_norm", "learning_rate": "learning_rate"}
STEP_KEYS = ("current_steps", "step", "global_step")
COPIES_HELD = 64
"""Logged dicts remembered with the printers that printed them: a node's copy of a dict another node
printed first comes within this many dicts of it."""
BAR_ROWS_HELD = 100_000
"""Bar steps held while a run has logged no dict: more than that many steps before a first dict is a run
that logs none (the Trainer logs every `logging_steps`, 500 by default), and they are handed out."""
LINE_NUMBER_RX = re.compile(r"^\[\d{1,9}\] ")
"""A log viewer's line number in front of every line of a paste (`[1757] {'loss': 0.0, 'grad_norm': ...}`,
LLaMA-Factory#8261), or an MPI launcher's rank tag (`[0] `): neither is the Trainer's, so it comes off first."""
IGNORED_KEYS = {*STEP_KEYS, "total_steps", "percentage", "remaining_time", "total_flos", "memory(GiB)"}


def detect(head: str) -> int:
    """The Trainer's `Running training` block, or logged dicts with a loss and a learning rate or epoch
    (two, or one in a head without DeepSpeed's step lines): above DeepSpeed's own lines, which an HF log
    run on DeepSpeed carries too."""
    if RUNNING_RX.search(head) and ("Total optimization steps" in head or "Num examples" in head):
        return 45
    if re.search(r"""\{['"]train_runtime['"]: """, head):  # the dict `train()` ends with (a log's tail)
        return 45
    logged = 0
    for line in head.split("\n"):
        for part in LINE_NUMBER_RX.sub("", line, count=1).split("\r"):
            part = logged_text(strip_prefix(part)[0])
            if (
                DICT_RX.match(part)
                and re.search(r"""['"]loss['"]\s*:""", part)
                and ("learning_rate" in part or "epoch" in part)
            ):
                logged += 1
    # one dict is enough where no DeepSpeed step line says the log is DeepSpeed's (quoting the Trainer once)
    return 45 if logged >= 2 or (logged == 1 and DS_STEP_RX.search(head) is None) else 0


class _Parser(RunRows):
    framework = FRAMEWORK

    def __init__(self) -> None:
        super().__init__()
        self.out = Emitter()
        self.config: dict[int, dict[str, str]] = {}
        self.train_total: int | None = None
        self.bar_step: int | None = None
        self.bar_rate: float | None = None  # seconds per step
        self.last_step: int | None = None
        self.logged = 0  # training dicts of this run
        self.bar_rows: list[tuple[int, float | None, int]] = []  # bar steps not yet rows (`bar`)
        self.logging_steps: int | None = None
        # (step, seconds since start) of LLaMA-Factory's last line
        self.clock: tuple[int, float] | None = None
        self.block: str | None = None  # "model" or "args" while such a block is open
        self.depth = 0  # brackets open inside the model's configuration (a list of architectures)
        self.step_source: str | None = None
        self.args: dict[int, dict[str, str]] = {}
        self.ended = False  # the run's closing `train_runtime` dict was read
        self.bar_placed = False  # the last row's step was the bar's
        self.from_bar = False  # the step `_step_of` gave last came from the bar
        self.guessed = False  # the step `_step_of` gave last was counted: no key nor bar said it
        # a counted row that the bar drawn right after it may place (`_place`): its dict's line, the row,
        # the step before it, and that bar's step and rate once drawn
        self.unplaced: tuple[int, dict[str, Any], int, int | None, float | None] | None = None
        self.seen: tuple[int, int] = (0, 0)  # the last two lines with text, the last one last
        self.step_keys: set[str] = set()  # the keys of the last row's dict
        self.last_row: dict[str, Any] | None = None
        self.last_pairs: dict[str, Any] = {}  # the last training dict's values
        self.logger_dict_at: int | None = None  # the line of the last training dict behind a `>> ` logger
        self.printer: str | None = None  # the host or rank a launcher's prefix names on the line being read
        self.printed: dict[str, set[str | None]] = {}  # the last logged dicts' texts -> who printed them
        self.stamp: float | None = None  # the time the logger's prefix gave the dict being read
        self.section = "training"  # the Trainer block being read: training, Evaluation or Prediction
        # DeepSpeed's running count of skipped steps, at its last step line
        self.ds_skipped: int | None = None
        self.skipped_pending = 0  # steps skipped since the last logged dict
        self.overflows: int | None = (
            None  # the loss scaler's overflows since the last dict, once it told of one
        )
        self.loss_scale: float | None = None  # the scale it reduced to last
        # DeepSpeed's wall-clock timer lines (`wall_clock_breakdown`) take their step as the DeepSpeed
        # parser's do (`timer_step_at`): counted from the training bar or DeepSpeed's last step line
        self.timer_since: dict[str, int] = {}
        self.timer_bar: int | None = None
        self.ds_last_step: int | None = None
        self.ds_done: int | None = None

    # ------------------------------------------------------------------------------------------ runs
    def new_run(self) -> None:
        if self.last_step is not None or self.logged:
            self._close_run()
            self.run_key += 1
            self.last_step, self.logged, self.clock = None, 0, None
            self.bar_step, self.bar_rate, self.train_total, self.bar_rows = None, None, None, []
            self.step_source = None
            self.ds_skipped, self.skipped_pending, self.overflows, self.loss_scale = None, 0, None, None
            self.timer_since, self.timer_bar, self.ds_last_step, self.ds_done = {}, None, None, None
            self.ended, self.bar_placed, self.step_keys, self.unplaced = False, False, set(), None
            self.printed = {}

    def _close_run(self) -> None:
        self._place()
        if self.logged == 0:
            self._emit_bar_rows()
        if self.step_source is not None and self.run_key in self.runs:
            self.param(self.runs[self.run_key]["line_end"], "step_source", self.step_source)

    # ----------------------------------------------------------------------------------------- lines
    def line(self, n: int, text: str) -> None:
        understood = False
        body = LINE_NUMBER_RX.sub("", text, count=1)
        if body.strip():
            self.seen = (self.seen[1], n)
        self.printer = None  # a launcher prefixes a line once, before the bar's first redraw
        for part in body.split("\r"):
            if part.strip():
                understood = self.part(n, part) or understood
            elif "\r" in body:
                understood = True  # tqdm's clearing of its bar
        if understood or not body.strip():
            return
        self.run(n)
        if EVENT_WORDS_RX.search(text):
            self.out.add(
                "events", {"run_key": self.run_key, "line_no": n, "kind": kind_of(text), "text": text}
            )
        else:
            self.out.add("unparsed", {"line_no": n, "text": text})

    def part(self, n: int, part: str) -> bool:
        if self.block is not None:
            return self.in_block(n, part)
        if match := BAR_RX.match(part):
            described = (match.group(1) or "").strip().lower()
            # a described bar is another loop's (`Loading checkpoint shards: `), unless it names training
            if not described or described.startswith(("train", "epoch")):
                self.bar(n, int(match.group(2)), int(match.group(3)), match.group(5), match.group(6))
            rest = part[match.end() :]  # a line another process wrote behind the bar, without a newline
            return self.part(n, rest) if rest.strip() else True
        logged = logged_text(part)
        if DICT_RX.match(logged):
            self.stamp = logger_clock(part)
            return self.logged_dict(n, logged, via_logger=logger_prefix_end(part) >= 0)
        if (match := LOG_PREFIX_RX.match(part.strip())) is not None:
            return deepspeed_line(self, n, match)
        if self.header(n, part):
            return True
        bare, printer = printer_of(part)  # a launcher's `host: ` or time before any of the above
        if bare == part or not bare.strip():
            return False
        self.printer = printer or self.printer
        return self.part(n, bare)

    def bar(self, n: int, step: int, total: int, rate: str | None, unit: str | None) -> None:
        """A training bar's position and rate; bars of another length (evaluation's) are not the steps'.
        Until the run logs a dict, each step the bar reaches is held as a row (`_emit_bar_rows`)."""
        if self.train_total is None:
            self.train_total = total
        if total != self.train_total:
            return
        if rate is not None and unit is not None:
            self.bar_rate = tqdm_seconds(float(rate), unit)
        if self.unplaced is not None and self.unplaced[3] is None:  # the first bar after a counted row
            right_after = self.unplaced[0] in (n, self.seen[0])
            self.unplaced = (*self.unplaced[:3], step, self.bar_rate) if right_after else None
        if step != self.bar_step and step > 0:
            self.timer_since, self.timer_bar = {}, step
        self.bar_step, self.ds_done = step, None
        named = self.runs.get(self.run_key, {}).get("train_iters") == total
        if self.logged == 0 and not self.ended and step > 0 and named:
            if self.bar_rows and self.bar_rows[-1][0] == step:
                self.bar_rows[-1] = (step, self.bar_rate, n)  # the same step drawn again
            elif not self.bar_rows or self.bar_rows[-1][0] < step:
                self.bar_rows.append((step, self.bar_rate, n))
            if len(self.bar_rows) >= BAR_ROWS_HELD:
                self._emit_bar_rows()

    def _emit_bar_rows(self) -> None:
        """The steps the training bar reached in a run that logged no dict: each a row with its step time
        from the bar's rate (tqdm's moving average) and no loss. Held until the run ends (a dict after
        them makes them nothing: the run's rows are its dicts'), at most `BAR_ROWS_HELD` at a time. Only
        for a bar the `Running training` block's step count names: a bar of another loop is no run's."""
        for step, elapsed, n in self.bar_rows:
            self.run(n)
            row = {"run_key": self.run_key, "iteration": step, "elapsed_s": elapsed, "line_no": n}
            self.out.add("iterations", {**row, **dict.fromkeys(ROW_KEYS.values())})
            self.last_step = step
            self.step_source = self.step_source or "tqdm bar, no logged dict"
        self.bar_rows = []

    def logged_dict(self, n: int, part: str, via_logger: bool = False) -> bool:
        pairs = {key: dict_value(raw) for key, raw in PAIR_RX.findall(part)}
        if not pairs:
            return False
        if self._a_copy(part.strip()):
            return True
        if "train_runtime" in pairs:
            for key in SUMMARY_KEYS:
                if pairs.get(key) is not None:
                    self.param(n, key, pairs[key])
            self.ended = True  # the training loop returned: a dict after this is another launch's
            return True
        if isinstance(pairs.get("loss"), float):
            if self.ended:
                self.new_run()
            self.training_row(n, pairs)
            self.logger_dict_at = n if via_logger else None
            return True
        if "current_steps" in pairs:
            return True  # LLaMA-Factory's last line: the final step, without a loss
        if any(key.startswith("eval_") and isinstance(value, float) for key, value in pairs.items()):
            step = self._step_of(pairs, advance=False)
            for key, value in pairs.items():
                if key.startswith("eval_") and isinstance(value, float):
                    self.metric(n, step, key, value)
            return True
        return False

    def _a_copy(self, text: str) -> bool:
        """Whether a dict is another node's (or rank's) print of one a different printer printed first
        (LLaMA-Factory on several nodes: each node's main process logs, pdsh prefixes its host): the same
        text from a printer that has not printed it yet. The first print is the step's; the same printer
        printing the same dict again is a step of its own."""
        printers = self.printed.get(text)
        if self.printer is not None and printers is not None and self.printer not in printers:
            printers.add(self.printer)
            return True
        self.printed.pop(text, None)
        self.printed[text] = {self.printer}
        if len(self.printed) > COPIES_HELD:
            del self.printed[next(iter(self.printed))]
        return False

    def _step_of(self, pairs: dict[str, Any], advance: bool, n: int = 0) -> int:
        """The step a logged dict belongs to (see the module's docstring); `advance`: a training dict,
        which moves the count on."""
        self.from_bar, self.guessed = False, advance
        for key in STEP_KEYS:
            if isinstance(pairs.get(key), float):
                self.step_source, self.guessed = self.step_source or "logged step", False
                return int(pairs[key])
        if (of := steps_pair(pairs)) is not None:
            self.step_source, self.guessed = self.step_source or "logged step", False
            return of[0]
        last = self.last_step or 0
        if advance and self._same_step(pairs, n):
            self.guessed = False
            return last  # LLaMA-Factory logs each step twice: through its logger, then plain
        if advance and self.ds_done is not None and self.ds_done > last:
            self.step_source = self.step_source or "tqdm bar"  # and DeepSpeed's step line after it
            self.guessed = False
            return self.ds_done
        if self.bar_step is not None and (self.bar_step > last or not advance):
            self.step_source = self.step_source or "tqdm bar"
            self.from_bar, self.guessed = True, False
            return self.bar_step
        if not advance:
            return last
        per = None if self.logging_steps else steps_per_epoch(self.runs.get(self.run_key, {}))
        if per and isinstance(epoch := pairs.get("epoch"), float) and (step := round(epoch * per)) > last:
            self.step_source = self.step_source or "epoch x steps per epoch"
            if last and step - last == last:  # a second dict confirms the first's interval: exact from here
                self.logging_steps = last  # (an epoch of two decimals places a step only to spe/200)
            return step
        if self.logging_steps:
            self.step_source = self.step_source or "count x logging_steps"
            return last + self.logging_steps
        self.step_source = self.step_source or "count of logged lines"
        return last + 1

    def _same_step(self, pairs: dict[str, Any], n: int) -> bool:
        """Whether a training dict repeats the last one's step: LLaMA-Factory's logger line and the
        Trainer's own dict of one step, on the line after it or at the bar that placed it, saying the
        same loss, learning rate and epoch (its logger rounds them to four decimals)."""
        if self.last_step is None:
            return False
        after_logger = self.logger_dict_at is not None and n - self.logger_dict_at <= 1
        at_bar = self.bar_step is not None and self.bar_step == self.last_step and self.bar_placed
        if not (after_logger or at_bar):
            return False
        return all(
            figures_agree(pairs.get(key), self.last_pairs.get(key), tolerance, floor)
            for key, tolerance, floor in SAME_STEP_TOLERANCE
        )

    def training_row(self, n: int, pairs: dict[str, Any]) -> None:
        self.bar_rows = []  # a run that logs dicts has its dicts' rows
        if self.unplaced is not None and (self.unplaced[3] or 0) < (self.bar_step or 0):
            self._place()  # the bar after the last dict was its own: another bar came for this one
        step = self._step_of(pairs, advance=True, n=n)
        if step == self.last_step and (self.bar_placed or self.logger_dict_at is not None):
            pending = self.out.tables.get("iterations") or []
            for key, value in pairs.items():  # the same step again: only what the first dict did not say
                if key in self.step_keys or key in IGNORED_KEYS or not isinstance(value, float):
                    continue
                self.step_keys.add(key)
                if key in ROW_KEYS and pending and pending[-1] is self.last_row:  # not handed out yet
                    self.last_row[ROW_KEYS[key]] = value
                else:
                    self.metric(n, step, key, value)
            if self.unplaced is not None:
                self.unplaced = (n, *self.unplaced[1:])  # the bar after this copy is the step's
            return
        self.bar_placed = self.from_bar
        self.step_keys = set(pairs)
        self.last_pairs = pairs
        if self.last_step is not None and step <= self.last_step and "current_steps" in pairs:
            self.new_run()  # LLaMA-Factory's log of a restarted run counts again
        unplaced = self.guessed and self.bar_step is None
        self.unplaced = (n, {}, self.last_step or 0, None, None) if unplaced else None
        self.logged += 1
        run = self.run(n)
        if isinstance(pairs.get("total_steps"), float):
            run.setdefault("train_iters", int(pairs["total_steps"]))
        if (of := steps_pair(pairs)) is not None:
            run.setdefault("train_iters", of[1])
        if isinstance(pairs.get("memory(GiB)"), float):  # ms-swift: the devices' max_memory_reserved
            self.out.add(
                "memory",
                memory_row(self.run_key, None, step, n, None, None, None, pairs["memory(GiB)"] * 1024),
            )
        elapsed = self.bar_rate if self.bar_step == step else None
        clock = clock_seconds(pairs["elapsed_time"]) if isinstance(pairs.get("elapsed_time"), str) else None
        clock = self.stamp if clock is None and elapsed is None else clock  # the logger's prefix: its time
        if clock is not None:
            if self.clock is not None and step > self.clock[0]:
                elapsed = round((clock - self.clock[1]) / (step - self.clock[0]), 6)
            self.clock = (step, clock)
        row = {"run_key": self.run_key, "iteration": step, "elapsed_s": elapsed, "line_no": n}
        if self.ds_skipped is not None:
            row["skipped"], self.skipped_pending = self.skipped_pending, 0
        elif self.overflows is not None:  # no step line counts them: the overflows told of since the last
            row["skipped"], self.overflows = self.overflows, 0
        row["loss_scale"] = self.loss_scale
        for key, column in ROW_KEYS.items():
            value = pairs.get(key)
            row[column] = value if isinstance(value, float) else None
        self.out.add("iterations", row)
        self.last_row = row
        if self.unplaced is not None:
            self.unplaced = (n, row, *self.unplaced[2:])
        for key, value in pairs.items():
            if key in ROW_KEYS or key in IGNORED_KEYS or not isinstance(value, float):
                continue
            self.metric(n, step, key, value)
        self.last_step = step

    def _place(self) -> None:
        """A counted row placed by the training bar drawn right after its dict (only blank lines between,
        or behind it on its line): tqdm's `write` prints a dict over the bar and draws the bar again where
        it stood, at the dict's step (LLaMA-Factory's first dict before any bar: `{'loss': ...}`, then
        `6/390 [01:33<1:26:53, 13.58s/it]`). That bar is the dict's own once another bar comes before the
        next dict (`7/390`), or when no dict follows; only while the row is not handed out yet."""
        _, row, before, step, rate = self.unplaced or (0, {}, 0, None, None)
        self.unplaced = None
        pending = self.out.tables.get("iterations") or []
        if step is None or step <= before or not pending or pending[-1] is not row:
            return
        counted, row["iteration"] = row["iteration"], step
        for metric in reversed(self.out.tables.get("iteration_metrics") or []):
            if metric["line_no"] < row["line_no"]:
                break
            if metric["iteration"] == counted and metric["run_key"] == self.run_key:
                metric["iteration"] = step
        row["elapsed_s"] = row["elapsed_s"] if row["elapsed_s"] is not None else rate
        if self.clock is not None and self.clock[0] == counted:
            self.clock = (step, self.clock[1])
        self.last_step, self.bar_placed = step, True
        if self.logged == 1:
            self.step_source = "tqdm bar"

    def metric(self, n: int, step: int, key: str, value: float) -> None:
        key = "validation loss" if key == "eval_loss" else key  # the name other parsers give it
        self.out.add(
            "iteration_metrics",
            {
                "run_key": self.run_key,
                "iteration": step,
                "key": key,
                "value": value,
                "text": str(value),
                "line_no": n,
            },
        )

    def header(self, n: int, part: str) -> bool:
        for rx, kind in ((SAVED_RX, "checkpoint_saved"), (RESUMED_RX, "checkpoint_loaded")):
            if rx.search(part):
                self.out.add(
                    "events", {"run_key": self.run_key, "line_no": n, "kind": kind, "text": part.strip()}
                )
                return True
        if match := RUNNING_RX.search(part):
            self.section = match.group(1)
            if match.group(1) == "training":
                self.new_run()
                self.run(n)
            return True
        if RELAUNCH_MARK in part:
            self.new_run()  # torchrun's banner: a new launch of the job writing to the same file
            return False
        if GRADIENT_CHECKPOINTING_RX.search(part):
            self.run(n).setdefault("recompute", "full")
            return True
        for name, rx in HEADER_RX.items():
            if match := rx.search(part):
                if self.section != "training":
                    return True  # the evaluation's own examples and batch: not the run's
                value = int(match.group(1).replace(",", ""))
                run = self.run(n)
                if name in ("mbs", "gbs", "train_iters"):
                    run[name] = value
                    if name == "train_iters":
                        self.train_total = value
                else:
                    self.param(n, name, value)
                    if name == "gradient_accumulation_steps":
                        run["_accumulation"] = value
                return True
        return block_start(self, n, part)

    def in_block(self, n: int, part: str) -> bool:
        """A line of the model's configuration or printed arguments; a line of neither shape ends the
        block and is read as any other."""
        return block_line(self, n, part) or self.part(n, part)

    def finish(self) -> None:
        self._close_run()
        for key, run in self.runs.items():
            columns = config_columns(self.config.get(key, {}))
            columns.pop("dp", None)  # DeepSpeed's world_size: every rank, not the data-parallel size
            shape_from_arguments(run, self.args.get(key, {}), columns)
            for name, value in columns.items():
                run.setdefault(name, value)
            accumulation = run.pop("_accumulation", None)
            mbs, gbs = run.get("mbs"), run.get("gbs")
            if mbs and gbs and accumulation and gbs % (mbs * accumulation) == 0:
                run.setdefault("dp", gbs // (mbs * accumulation))
                run.setdefault("gpus", run["dp"])
            self.out.add("runs", run)


@guarded
def parse(source: LineSource) -> Iterator[Batch]:
    parser = _Parser()
    return drive(parser, source)
