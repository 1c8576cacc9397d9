"""The runs a line-at-a-time parser opens, kept by their `run_key` as the `runs` table takes them, and the
numbers such parsers read."""

from __future__ import annotations

from typing import Any


class RunRows:
    """`runs` rows by run key: the run a line belongs to is `run(line_no)`, which opens it at its first line
    and moves its last line on; `param` keeps one of its `run_params` (a configuration echo, verbatim).
    A parser starts the next run by moving `run_key` on."""

    framework = ""

    def __init__(self) -> None:
        self.run_key = 0
        self.runs: dict[int, dict[str, Any]] = {}

    def run(self, line_no: int) -> dict[str, Any]:
        run = self.runs.setdefault(
            self.run_key,
            {"run_key": self.run_key, "framework": self.framework, "line_start": line_no, "run_params": []},
        )
        run["line_end"] = line_no
        return run

    def param(self, line_no: int, name: str, value: Any) -> None:
        """Kept once per run: ranks that all print the trainer's start lines say the same thing eight times."""
        params = self.run(line_no)["run_params"]
        if not any(p["name"] == name and p["value"] == str(value) for p in params):
            params.append({"name": name, "value": str(value), "line_no": line_no})


def printed_number(text: str) -> float | None:
    """A figure as a trainer's line prints it (`7,282`, `1.00e-05`, `nan`), or None."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def tqdm_seconds(rate: float, unit: str) -> float | None:
    """Seconds per step from a tqdm bar's rate: `2.50s/it` as printed, `1.25it/s` inverted (`0.00it/s`, a
    bar that has not measured yet, has none)."""
    if unit == "s/it":
        return rate
    return 1.0 / rate if rate else None
