"""Flag rules, one module per family. Each rule reads the store and returns flag rows (dicts) with
rule, severity, subject_kind, subject_id, row_ref, measured, expected, ratio, message and hint."""

from __future__ import annotations

from typing import Any

Flag = dict[str, Any]


def run_flag(rule: str, severity: str, run_id: int, message: str, hint: str, **extra: Any) -> Flag:
    """A flag about a run; `extra` carries row_ref, measured, expected and ratio where the rule has them."""
    return {
        "rule": rule,
        "severity": severity,
        "subject_kind": "run",
        "subject_id": int(run_id),
        "message": message,
        "hint": hint,
        **extra,
    }
