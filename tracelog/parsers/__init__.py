"""The parser registry and format detection.

Each parser is a module with `FORMAT`, `VERSION`, `detect(head) -> int` (0: not mine; higher: surer)
and `parse(source) -> Iterator[Batch]`. A parser of a binary format also has `detect_binary(head, path) -> int`,
asked about the raw bytes of a head that text detection would reject. Adding a format is one module and one line in `PARSER_MODULES`.
"""

from __future__ import annotations

import importlib
import re
from types import ModuleType
from typing import Any

from tracelog.errors import TracelogError

PARSER_MODULES: dict[str, str] = {
    # format id: the module of `tracelog.parsers` that reads it, in the order detection breaks a tie
    "megatron": "megatron",
    "nemo": "nemo",
    "deepspeed": "deepspeed",
    "torchtitan": "torchtitan",
    "nanotron": "nanotron",
    "nemo_automodel": "automodel",
    "composer": "composer",
    "hf_trainer": "hf_trainer",
    "table": "table",
    "nccl_tests": "nccl_tests",
    "nccl_tests_json": "nccl_tests_json",
    "rccl_tests_report": "rccl_tests_report",
    "p2p": "p2p",
    "nvbandwidth": "nvbandwidth",
    "perftest": "perftest",
    "topo": "topo",
    "rocm_topo": "rocm_topo",
    "allreduce_bench": "allreduce_bench",
    "tensorboard": "tensorboard",
}
"""The registry. A parser's module is imported when it is first asked for: detection asks them all, the
resumed parse of a grown log only its own (the other 39 modules of the parsers and their regexes were
some 50 ms of its start-up). `PARSERS`, the modules themselves, imports every one."""

DESCRIBING_FORMATS = frozenset({"tensorboard"})
"""The formats whose parser says `DESCRIBES_RUNS_OF_OTHER_FILES` (`store.merge`), known without importing
them: every ingest asks."""


def __getattr__(name: str) -> Any:
    if name == "PARSERS":
        return [by_format(format_id) for format_id in PARSER_MODULES]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


HEAD_BYTES = 64 * 1024
LONG_HEAD_BYTES = 4 * 1024 * 1024


def formats() -> list[str]:
    return list(PARSER_MODULES)


def by_format(format_id: str) -> ModuleType:
    if format_id not in PARSER_MODULES:
        raise TracelogError(f"unknown format {format_id!r}; known formats: {', '.join(formats())}")
    return importlib.import_module(f"{__name__}.{PARSER_MODULES[format_id]}")


HTML_RX = re.compile(r"^\s*(?:<!--.*?-->\s*)*<(?:!doctype html|html)\b", re.IGNORECASE | re.DOTALL)


def detect(head: str, path: str) -> ModuleType:
    """Pick the parser most sure of the head of a file; a file nobody claims is an error. An HTML page is
    no log whatever log lines it quotes (tracelog's own report holds them)."""
    if HTML_RX.match(head[:4096]):
        raise TracelogError("an HTML page (a report?), not a log; use --parser to read it anyway", path)
    parsers = [by_format(format_id) for format_id in PARSER_MODULES]
    scored = sorted(((p.detect(head), i, p) for i, p in enumerate(parsers)), key=lambda t: (-t[0], t[1]))
    if not scored or scored[0][0] <= 0:
        raise TracelogError(
            f"no parser recognises this file (looked at its first {len(head) // 1024 or 1} KiB); "
            f"use --parser with one of: {', '.join(formats())}",
            path,
        )
    return scored[0][2]


def detect_binary(head: bytes, path: str) -> ModuleType | None:
    """The parser of a binary format most sure of these raw bytes (and file name), or None."""
    parsers = [by_format(format_id) for format_id in PARSER_MODULES]
    scored = [(p.detect_binary(head, path), p) for p in parsers if hasattr(p, "detect_binary")]
    best = max(scored, key=lambda t: t[0], default=(0, None))
    return best[1] if best[0] > 0 else None
