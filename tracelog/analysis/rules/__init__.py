"""Flag rules, one module per family. Each rule reads the store and returns flag rows (dicts) with
rule, severity, subject_kind, subject_id, row_ref, measured, expected, ratio, message and hint."""

from __future__ import annotations

from typing import Any

Flag = dict[str, Any]


def flag(
    rule: str, severity: str, subject_kind: str, subject_id: int, message: str, hint: str, **extra: Any
) -> Flag:
    """A flag row; `extra` carries row_ref, measured, expected and ratio where the rule has them."""
    return {
        "rule": rule,
        "severity": severity,
        "subject_kind": subject_kind,
        "subject_id": int(subject_id),
        "message": message,
        "hint": hint,
        **extra,
    }


def run_flag(rule: str, severity: str, run_id: int, message: str, hint: str, **extra: Any) -> Flag:
    """A flag about a run."""
    return flag(rule, severity, "run", run_id, message, hint, **extra)


def bench_flag(
    rule: str, severity: str, bench_id: int, message: str, hint: str, kind: str = "bench", **extra: Any
) -> Flag:
    """A flag about a bench, or one of its parts (`kind`: collective, p2p, links)."""
    return flag(rule, severity, kind, bench_id, message, hint, **extra)


def size_text(n: float) -> str:
    """A message size as a flag says it: decimal units, as nccl-tests' sizes are (`1.04858 MB`)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{int(n)} B"
