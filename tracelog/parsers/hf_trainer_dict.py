"""The values of a dict the Hugging Face Trainer (and the trainers built on it) logs: its pairs, their
numbers as Python and the JSON writers print them, its clocks, and when two dicts are one step's."""

from __future__ import annotations

import re
from typing import Any

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
