"""The parser registry and format detection.

Each parser is a module with `FORMAT`, `VERSION`, `detect(head) -> int` (0: not mine; higher: surer)
and `parse(source) -> Iterator[Batch]`. A parser of a binary format also has `detect_binary(head, path) -> int`,
asked about the raw bytes of a head that text detection would reject. Adding a format is one module and one line in `PARSERS`.
"""

from __future__ import annotations

import re
from types import ModuleType

from tracelog.errors import TracelogError
from tracelog.parsers import (
    allreduce_bench,
    automodel,
    composer,
    deepspeed,
    hf_trainer,
    megatron,
    nanotron,
    nccl_tests,
    nccl_tests_json,
    nemo,
    nvbandwidth,
    p2p,
    perftest,
    rccl_tests_report,
    rocm_topo,
    table,
    tensorboard,
    topo,
    torchtitan,
)

PARSERS: list[ModuleType] = [
    megatron,
    nemo,
    deepspeed,
    torchtitan,
    nanotron,
    automodel,
    composer,
    hf_trainer,
    table,
    nccl_tests,
    nccl_tests_json,
    rccl_tests_report,
    p2p,
    nvbandwidth,
    perftest,
    topo,
    rocm_topo,
    allreduce_bench,
    tensorboard,
]

HEAD_BYTES = 64 * 1024
LONG_HEAD_BYTES = 4 * 1024 * 1024


def formats() -> list[str]:
    return [p.FORMAT for p in PARSERS]


def by_format(format_id: str) -> ModuleType:
    for parser in PARSERS:
        if format_id == parser.FORMAT:
            return parser
    raise TracelogError(f"unknown format {format_id!r}; known formats: {', '.join(formats())}")


HTML_RX = re.compile(r"^\s*(?:<!--.*?-->\s*)*<(?:!doctype html|html)\b", re.IGNORECASE | re.DOTALL)


def detect(head: str, path: str) -> ModuleType:
    """Pick the parser most sure of the head of a file; a file nobody claims is an error. An HTML page is
    no log whatever log lines it quotes (tracelog's own report holds them)."""
    if HTML_RX.match(head[:4096]):
        raise TracelogError("an HTML page (a report?), not a log; use --parser to read it anyway", path)
    scored = sorted(((p.detect(head), i, p) for i, p in enumerate(PARSERS)), key=lambda t: (-t[0], t[1]))
    if not scored or scored[0][0] <= 0:
        raise TracelogError(
            f"no parser recognises this file (looked at its first {len(head) // 1024 or 1} KiB); "
            f"use --parser with one of: {', '.join(formats())}",
            path,
        )
    return scored[0][2]


def detect_binary(head: bytes, path: str) -> ModuleType | None:
    """The parser of a binary format most sure of these raw bytes (and file name), or None."""
    scored = [(p.detect_binary(head, path), p) for p in PARSERS if hasattr(p, "detect_binary")]
    best = max(scored, key=lambda t: t[0], default=(0, None))
    return best[1] if best[0] > 0 else None
