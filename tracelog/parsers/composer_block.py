"""One block of Composer's console output, and what its `key: value` lines mean.

ConsoleLogger (composer/loggers/console_logger.py, since Composer 0.12.0, November 2022) prints, every
`console_log_interval`, the metrics logged since the last print under one progress header:

    [batch=366/48000]:
             Train time/batch: 365
             Train loss/train/total: 10.3750

(`[epoch=1][batch=5/5]:` where `max_duration` is in epochs, `[token=N/M]:` in tokens), and the evaluation's
under `[Eval batch=4/4] Eval on eval data:` (since 0.12.1; under the training header before), each line
`\\t {Train |Eval }{key}: {value}` (a tab and a space before the phase: spaces above, as a paste shows
them). Values are `format_log_data_value`'s (composer/loggers/logger.py): a float to four decimals
(`f'{data:.4f}'`), an int as it is, `nan` for a NaN. Before (August to November 2022, ProgressBarLogger) each metric was a line of its
own behind the header, `[batch=16/100]: loss/train/total: 2.3000`; both are read, and so is a paste that
joined a block onto its header line.

The keys (their callbacks in composer/callbacks/):

- `loss/train/total` (`loss/train` before August 2022) is the loss, `nan` when it is one;
- `lr-{optimizer}/group{N}` (LRMonitor): the learning rate to four decimals, so a rate under 5e-5 prints
  `0.0000`: the first optimizer's group 0 is the `learning_rate` column where it prints above 0; a
  `0.0000` is kept only as a metric under its key (NULL in the column: it says the rate is below 5e-5,
  not that it is 0, and the rules read a 0 as a frozen optimizer);
- `throughput/batches_per_sec`, `samples_per_sec`, `tokens_per_sec` and their `device/` shares
  (SpeedMonitor: averages over its last `window_size` batches, logged once that many have run; the
  samples per second are the `samples_per_s` column, the tokens per second metrics), `throughput/device/
  flops_per_sec` (the model's own `flops_per_batch` over time: the reported TFLOP/s per GPU) and
  `throughput/device/mfu` (that over the GPU's dense peak, a fraction: kept as `mfu (%)`);
- `time/train` (the training wall clock so far, evaluation left out, in SpeedMonitor's `time_unit`:
  hours unless the configuration says otherwise; `wall_clock/train` before Composer 0.14.0, in seconds
  before 0.13.0, is kept as a metric only); `time/batch`, `time/sample`, `time/token` are the
  Timestamp's counts when the batch started (trainer.py, `BATCH_START`), so `time/batch` is the batch's
  number less one, no duration;
- `memory/{current,peak}_{allocated,active,inactive,reserved}_mem` (MemoryMonitor, since Composer 0.16.1;
  `allocated_mem`, `reserved_mem` ..., the current figures, from 0.13.0): gigabytes of 1e9 bytes,
  rounded to five significant digits; before 0.13.0 the same names held bytes, printed as ints;
- `l2_norm/grad/global` (OptimizerMonitor): the gradient norm;
- `metrics/{label}/LanguageCrossEntropy` and `LanguagePerplexity` of an evaluation (`Eval ` lines):
  the validation loss and its perplexity (label `eval`, llm-foundry's `eval_loader`; another label is
  named in the key).

Every other key is kept as a metric under its own name, its text as printed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

HEADER_RX = re.compile(
    r"^(?:\[epoch=(?P<epoch>\d+)\])?\[(?P<unit>batch|sample|token|iteration|duration|second)="
    r"(?P<value>\d+)(?:/(?P<total>\d+))?\](?P<colon>:?)(?P<rest>.*)$"
)
EVAL_HEADER_RX = re.compile(r"^\[Eval batch=(\d+)/(\d+)\] Eval on (\S+) data(:?)\s*$")
LINE_RX = re.compile(r"^\s*(?P<phase>Train|Eval) (?P<key>[^\s:][^\s]*?): (?P<value>.*)$")
KEY_RX = re.compile(r"[A-Za-z_][\w./-]*")


def pairs_of(rest: str) -> tuple[list[tuple[str, str, str]], int]:
    """The `key: value` pairs behind a header on its own line, (phase, key, value) each, and the words that
    are none: `[batch=16/100]: loss/train: 2.3000` (2022), or a paste that joined a block onto its header
    (`[batch=1/50]:  Train loss/train/total: 1.6896  LanguageCrossEntropy: 1.6547`). Read word by word, in
    time linear in the line however it is garbled."""
    words, pairs, other, at = rest.split(), [], 0, 0
    while at < len(words):
        phase = ""
        if words[at] in ("Train", "Eval") and at + 1 < len(words) and words[at + 1].endswith(":"):
            phase, at = words[at], at + 1
        word = words[at]
        if word.endswith(":") and at + 1 < len(words) and KEY_RX.fullmatch(word[:-1]):
            pairs.append((phase, word[:-1], words[at + 1]))
            at += 2
        else:
            other += 1
            at += 1
    return pairs, other


NUMBER_RX = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)$|^[-+]?(?:nan|inf)$")
CUT_RX = re.compile(r"^[-+]?\d+\.\d{0,3}$")
"""A float Composer did not print whole: it prints every float to four decimals, so fewer were cut off (a
log that stops mid-line); the figure is not kept."""
LR_RX = re.compile(r"^lr-[\w.]+/group(\d+)$")
GB_MIB = 1e9 / 2**20  # MemoryMonitor's gigabytes (1e9 bytes, memory_monitor.py `_get_memory_report`) in MiB
MEMORY_COLUMNS = {
    "memory/current_allocated_mem": "allocated_mib",
    "memory/allocated_mem": "allocated_mib",
    "memory/current_reserved_mem": "reserved_mib",
    "memory/reserved_mem": "reserved_mib",
    "memory/peak_allocated_mem": "max_allocated_mib",
    "memory/peak_reserved_mem": "max_reserved_mib",
}
METRIC_NAMES = {
    "throughput/tokens_per_sec": "tokens per second",
    "throughput/device/tokens_per_sec": "tokens per second per device",
}
MFU_KEY = "throughput/device/mfu"
FLOPS_KEY = "throughput/device/flops_per_sec"
COLUMN_KEYS = frozenset(
    {
        "loss/train/total", "loss/train", "l2_norm/grad/global", "throughput/samples_per_sec",
        FLOPS_KEY, *MEMORY_COLUMNS,
    }
)  # fmt: skip
"""Keys read into columns: not kept a second time as metrics."""
ENTROPY_RX = re.compile(r"^metrics/(?P<label>[^/]+)/Language(?P<what>CrossEntropy|Perplexity)$")


@dataclass
class Figure:
    """One `key: value` of a block, as printed."""

    key: str
    text: str
    value: float
    line_no: int
    line: str  # the line it was read from, for `unparsed` where its block comes to nothing


@dataclass
class Block:
    """The lines under one progress header, until the same rank prints its next header."""

    run_key: int
    line_no: int
    rank: int | None
    phase: str  # "train" or "eval"
    unit: str = "batch"
    value: int | None = None
    total: int | None = None
    epoch: int | None = None
    header: str = ""
    iteration: int | None = None  # an evaluation's, decided when its header is read
    label: str = "eval"
    figures: dict[str, Figure] = field(default_factory=dict)
    evals: list[Figure] = field(default_factory=list)

    def add(self, phase: str, figure: Figure) -> None:
        if phase == "Eval" or self.phase == "eval":
            self.evals.append(figure)
        else:
            self.figures.setdefault(figure.key, figure)

    def batch(self) -> int | None:
        """The batch this block was printed after: the header's where it counts batches of the run,
        else `time/batch` (the batches before it) plus one, else the epoch's batch past the epochs before."""
        if self.unit == "batch" and self.epoch is None:
            return self.value
        counted = self.figures.get("time/batch") or self.figures.get("trainer/global_step")  # before 0.14.0
        if counted is not None and math.isfinite(counted.value):
            return int(counted.value) + 1
        if self.unit == "batch" and self.epoch and self.total and self.value is not None:
            return (self.epoch - 1) * self.total + self.value
        return None


def read_value(text: str) -> tuple[float | None, bool]:
    """A printed value as a number, and whether it was cut (a float with fewer than four decimals);
    (None, False) for a value that is no number (a string, a table, an object's repr)."""
    if not NUMBER_RX.match(text):
        return None, False
    if CUT_RX.match(text):
        return None, True
    return float(text), False


def memory_mib(figure: Figure) -> float:
    """A MemoryMonitor figure in MiB: gigabytes since February 2023 (always printed with decimals), bytes
    before (an int)."""
    if "." in figure.text:
        return figure.value * GB_MIB
    return figure.value / 2**20


def eval_key(key: str) -> str:
    """The name an evaluation figure is kept under: the language-model loss of the `eval` loader as
    `validation loss` (the name every parser gives it) and its perplexity as `validation loss PPL`;
    another loader's with its label; anything else as printed."""
    match = ENTROPY_RX.match(key)
    if match is None:
        return key
    name = (
        "validation loss" if match.group("label") == "eval" else f"validation loss ({match.group('label')})"
    )
    return name + (" PPL" if match.group("what") == "Perplexity" else "")


def rate_seconds(figures: dict[str, Figure], gbs: int | None) -> tuple[float | None, str | None]:
    """Seconds per batch from SpeedMonitor's rates, and which: `throughput/batches_per_sec` printed to four
    decimals (0.0027 is 370 s give or take 7), refined where the samples per second over the global batch
    agree with it within that rounding (the same window, a constant batch: more digits)."""
    batches = figures.get("throughput/batches_per_sec")
    if batches is None or not batches.value > 0 or not math.isfinite(batches.value):
        return None, None
    samples = figures.get("throughput/samples_per_sec")
    if (
        gbs
        and samples is not None
        and samples.value > 0
        and abs(samples.value / gbs - batches.value) <= 5.01e-5
    ):
        return gbs / samples.value, "throughput/samples_per_sec over global_train_batch_size"
    return 1.0 / batches.value, "throughput/batches_per_sec"


def memory_row(block: Block, iteration: int) -> dict[str, object] | None:
    """MemoryMonitor's figures of a block as a `memory` row (the printing rank's, at the block's line)."""
    columns = {
        MEMORY_COLUMNS[key]: memory_mib(figure)
        for key, figure in block.figures.items()
        if key in MEMORY_COLUMNS and math.isfinite(figure.value)
    }
    if not columns:
        return None
    return {
        "run_key": block.run_key,
        "iteration": iteration,
        "rank": block.rank,
        "line_no": block.line_no,
        **columns,
    }
