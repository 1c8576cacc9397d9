"""A DeepSpeed run as its log describes it: the configuration echo and the user's JSON, read into run
columns, and what one run keeps while its lines stream by (the open steps lagging ranks still write to,
the loss scale, the parameters kept)."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tracelog.parsers.base import as_int


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
    open: dict[int, dict[str, Any]] = field(default_factory=dict)
    written: deque[int] = field(default_factory=lambda: deque(maxlen=64))
    _gbs: tuple[int, int | None] | None = None
    scales: dict[str, float] = field(default_factory=dict)

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
    fp16 = enabled("fp16_enabled", "float16_config", "json.fp16.enabled", "amp_enabled")
    if bf16:
        out["precision"] = "bf16"
    elif fp16:
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
