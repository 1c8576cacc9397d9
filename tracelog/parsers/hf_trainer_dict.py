"""The values of a dict the Hugging Face Trainer (and the trainers built on it) logs: its pairs, their
numbers as Python and the JSON writers print them, its clocks, and when two dicts are one step's; and the
line around it: the training bar drawn before it, a logger's prefix, the launcher's tag of who printed it."""

from __future__ import annotations

import math
import re
from datetime import date
from typing import Any

from tracelog.parsers.base import strip_prefix
from tracelog.parsers.run_rows import printed_number

NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf|-inf|NaN|Infinity|-Infinity"
# one `'key': value` of a dict's repr or a JSON object: a number (bare, or wrapped by numpy or torch), a
# string, or a constant
PAIR_RX = re.compile(
    r"""['"]([^'"]+)['"]\s*:\s*(?:(?:np\.\w+|numpy\.\w+|tensor)\(\s*)?"""
    r"""(""" + NUM + r"""|'[^']*'|"[^"]*"|None|null|True|False|true|false)"""
)
NUMBER_RX = re.compile(r"^\s*(?:" + NUM + r")\s*$")


SAME_STEP_TOLERANCE = (("loss", 1e-4, 1.0), ("learning_rate", 1e-3, 0.0), ("epoch", 1e-2, 1.0))
"""(key, relative tolerance, the magnitude below which it is absolute): how far LLaMA-Factory's rounded
figures may sit from the Trainer's for one step (four decimals; the epoch to two)."""


def figures_agree(a: Any, b: Any, tolerance: float, floor: float) -> bool:
    """Two figures of one step, or a figure only one dict has."""
    if not (isinstance(a, float) and isinstance(b, float)):
        return True
    return abs(a - b) <= tolerance * max(abs(a), abs(b), floor) or (a != a and b != b)


def to_number(text: str) -> float | None:
    """A printed figure, JSON's `Infinity` included (`printed_number`)."""
    return printed_number(text.replace("Infinity", "inf"))


UNIT_CLOCK_RX = re.compile(r"^\s*(?:(\d+)d\s*)?(?:(\d+)h\s*)?(?:(\d+)m\s*)?(?:(\d+)s)?\s*$")


def clock_seconds(clock: str) -> float | None:
    """`1:20:52`, `02:05`, `2 days, 4:57:16` (LLaMA-Factory) or `1h 2m 6s` (ms-swift) as seconds."""
    if (units := UNIT_CLOCK_RX.match(clock)) and any(units.groups()):
        d, h, m, sec = (int(g or 0) for g in units.groups())
        return float(((d * 24 + h) * 60 + m) * 60 + sec)
    days = 0
    if "day" in clock:
        head, _, clock = clock.partition(",")
        days = int(head.split()[0])
    parts = clock.strip().split(":")
    if not all(p.isdigit() for p in parts):
        return None
    seconds = 0.0
    for part in parts:
        seconds = seconds * 60 + int(part)
    return days * 86400 + seconds


def steps_pair(pairs: dict[str, Any]) -> tuple[int, int] | None:
    """ms-swift's `'global_step/max_steps': '56/176'`: the step and the run's steps."""
    value = pairs.get("global_step/max_steps")
    if isinstance(value, str) and (match := re.fullmatch(r"\s*(\d+)/(\d+)\s*", value)):
        return int(match.group(1)), int(match.group(2))
    return None


def dict_value(raw: str) -> Any:
    if raw[:1] in "'\"":
        # transformers since 4.50 prints each float as a string (`'loss': '0.3713'`, `f"{v:.4g}"`)
        text = raw[1:-1]
        parsed = to_number(text) if NUMBER_RX.match(text) else None
        return parsed if parsed is not None else text
    if raw in ("None", "null"):
        return None
    if raw in ("True", "true", "False", "false"):
        return raw in ("True", "true")
    return to_number(raw)


# The Trainer's `***** Running training *****` block (trainer.py `_inner_training_loop`)
HEADER_RX = {
    "num_examples": re.compile(r"\bNum examples = ([\d,]+)"),
    "num_epochs": re.compile(r"\bNum Epochs = ([\d,]+)"),
    "mbs": re.compile(r"\bInstantaneous batch size per device = ([\d,]+)"),
    "gbs": re.compile(r"\bTotal train batch size \(w\. parallel, distributed & accumulation\) = ([\d,]+)"),
    "gradient_accumulation_steps": re.compile(r"\bGradient Accumulation steps = ([\d,]+)"),
    "train_iters": re.compile(r"\bTotal optimization steps = ([\d,]+)"),
    "trainable_parameters": re.compile(r"\bNumber of trainable parameters = ([\d,]+)"),
}
# A logger's prefix before a logged dict: transformers' `[INFO|trainer.py:398] 2021-01-15 10:28:50,371 >> `,
# LLaMA-Factory's `[INFO|2024-11-26 22:09:01] logging.py:157 >> `, or the `%(asctime)s - %(levelname)s -
# %(name)s - ` format transformers' example scripts configure and LLaMA-Factory used before 0.6 (llmtuner:
# `03/12/2024 11:24:33 - INFO - llmtuner.extras.callbacks - `)
LOGGER_PREFIX_RX = re.compile(r">> (?=\{)|^.*? - (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) - [\w.]+ - (?=\{)")
# ISO, with the milliseconds of logging's default `asctime` (`2021-01-15 10:28:50,371`: transformers' examples
# with `[%(levelname)s|%(filename)s:%(lineno)s] %(asctime)s >> %(message)s`) where it prints them, or the
# example scripts' `datefmt="%m/%d/%Y %H:%M:%S"` (month first)
LOGGER_STAMP_RX = re.compile(
    r"(?P<y>\d{4})-(?P<m>\d\d)-(?P<d>\d\d)[ T](?P<H>\d\d):(?P<M>\d\d):(?P<S>\d\d)(?:[,.](?P<f>\d{1,6})(?!\d))?"
    r"|(?P<us_m>\d\d)/(?P<us_d>\d\d)/(?P<us_y>\d{4}) (?P<us_H>\d\d):(?P<us_M>\d\d):(?P<us_S>\d\d)"
)


def logger_prefix_end(part: str) -> int:
    """Where the dict behind a logger's prefix starts; -1 for a dict no logger printed."""
    match = LOGGER_PREFIX_RX.search(part)
    return match.end() if match else -1


def logger_clock(part: str) -> float | None:
    """The time a logger's prefix gives a dict (`LOGGER_PREFIX_RX`) as seconds since the prefix's midnight
    plus its day (differenced between dicts; to the second, or to the millisecond where the prefix prints
    them); None without one."""
    at = logger_prefix_end(part)
    stamp = LOGGER_STAMP_RX.search(part, 0, at) if at > 0 else None
    if stamp is None:
        return None
    us = "us_" if stamp.group("y") is None else ""
    y, m, d, hour, minute, second = (int(stamp.group(us + key)) for key in ("y", "m", "d", "H", "M", "S"))
    try:
        day = date(y, m, d).toordinal()
    except ValueError:  # day first after all: no date to tell
        return None
    fraction = stamp.group("f") if not us else None
    return ((day * 24 + hour) * 60 + minute) * 60 + second + (float("0." + fraction) if fraction else 0.0)


def steps_per_epoch(run: dict[str, Any]) -> int | None:
    """Optimizer steps in one epoch as the Trainer counts them (`num_update_steps_per_epoch`: the
    dataloader's batches over the accumulation steps), from its `Running training` block: the examples
    over the per-device batch times the data-parallel ranks, over the accumulation. A logged dict's
    `epoch` times this is its step, where nothing else says the step (the epoch is that quotient)."""
    said = {p["name"]: str(p["value"]) for p in run.get("run_params", [])}
    counts = [
        str(c)
        for c in (
            said.get("num_examples"),
            said.get("gradient_accumulation_steps"),
            run.get("mbs"),
            run.get("gbs"),
        )
    ]
    if not all(c.isdigit() and int(c) > 0 for c in counts):
        return None
    examples, accumulation, mbs, gbs = (int(c) for c in counts)
    if gbs % (mbs * accumulation):
        return None
    ranks = gbs // (mbs * accumulation)
    return max(math.ceil(examples / (mbs * ranks)) // accumulation, 1)


DICT_RX = re.compile(r"""^\s*\{\s*['"][^'"]+['"]\s*:.*\}\s*$""")
# tqdm's bar: `  5%|▌         | 50/1000 [02:05<39:35,  2.50s/it]` (a postfix may follow the rate)
BAR_RX = re.compile(
    r"^\s*([^|%]*?:\s*)?\d+%(?:\|[^|]*\|)?\s*(\d+)/(\d+)\s*\[([\d:]+)<[^,\]]*,\s*"
    r"(?:(\d+(?:\.\d+)?)(s/it|it/s)|\?\w*/\w+)[^\]]*\]"
)
STAMP_PREFIX_RX = re.compile(r"\[?\d{4}-\d\d-\d\d")


def logged_text(part: str) -> str:
    """What a logged dict's line holds past a bar drawn before it and a logger's prefix (`[INFO|trainer.py:398]
    2021-01-15 10:28:50,371 >> `, LLaMA-Factory's `[INFO|...] llamafactory.train.callbacks:143 >> `, its
    older `03/12/2024 11:24:33 - INFO - llmtuner.extras.callbacks - `: `LOGGER_PREFIX_RX`)."""
    if (bar := BAR_RX.match(part) or BAR_RX.match(strip_prefix(part)[0])) is not None:
        part = part[part.find(bar.group(0)) + len(bar.group(0)) :]
    at = logger_prefix_end(part)
    return part[at:] if at >= 0 else part


def printer_of(part: str) -> tuple[str, str | None]:
    """A line past its launchers' prefixes, and who printed it: the host (`10.96.202.43: `) or rank tag
    (`[default0]:`) those prefixes name, without their time; None for a line no launcher tagged."""
    tags = []
    for _ in range(3):
        bare, host = strip_prefix(part, limit=1)
        if bare == part:
            break
        tag = part[: len(part) - len(bare)].strip()
        if not STAMP_PREFIX_RX.match(tag):
            tags.append(host or tag)
        part = bare
    return part, " ".join(tags) or None
