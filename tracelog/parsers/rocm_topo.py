"""`rocm-smi --showtopo`: how AMD GPUs are wired, as the ROCm System Management Interface prints it.

Its sections, each under a `===== title =====` rule:

- `Weight between two GPUs` and `Hops between two GPUs`: GPU-by-GPU matrices of the kernel driver's
  link weight (15 for one xGMI hop, larger over PCIe) and hop count, each pair a `bench_params` row named
  `<GPU> <GPU> weight` / `... hops` (e.g. `GPU0 GPU1 weight` = `15`).
- `Link Type between two GPUs`: one `links` row per cell, as `nvidia-smi topo -m`'s are: a = the row's
  GPU, b = the column's, link_kind as printed (`XGMI`, `PCIE`), `X` on the diagonal (printed `0`).
- `Numa Nodes`: `GPU[0] : (Topology) Numa Node: 0` and `... Numa Affinity: 0` as `bench_params`
  (`GPU0 NUMA Node`, `GPU0 NUMA Affinity`).

One bench per output (tool `rocm-smi-topo`): ranks = gpus_per_node = the GPUs of the link-type matrix,
nodes = 1. It is `complete` when that matrix has every GPU's row and the `End of ROCm SMI Log` rule was
read, `partial` otherwise. A shell prompt before the command names the host. rocm-smi's warnings are
events; other lines go to `unparsed`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tracelog.parsers.base import Batch, Emitter, LineSource, drive, guarded, strip_prefix

FORMAT = "rocm_topo"
VERSION = "1"
TOOL = "rocm-smi-topo"

HEADER_RX = re.compile(r"^\s*(GPU\d+(?:\s+GPU\d+)*)\s*$")
ROW_RX = re.compile(r"^\s*(GPU\d+)\s+(\S.*)$")  # on a line without its trailing blanks
NUMA_RX = re.compile(r"^GPU\[(\d+)\]\s*:\s*\(Topology\)\s*(Numa Node|Numa Affinity):\s*(\S+)")
SECTIONS = {
    "Weight between two GPUs": "weight",
    "Hops between two GPUs": "hops",
    "Link Type between two GPUs": "link",
    "Numa Nodes": "numa",
}
PROMPT_RX = re.compile(r"^(?:\(+[^$#@]*?\)+\s*)?\[?[\w.-]+@([\w.-]+)[^$#]*[$#]\s*rocm-smi\b")
"""A shell prompt before the command (`[admin@node-02 ~]$ rocm-smi --showtopo`): the host it ran on."""
TITLE = "ROCm System Management Interface"
END = "End of ROCm SMI Log"


def detect(head: str) -> int:
    """rocm-smi's banner or one of its topology sections' rules with a GPU matrix under it."""
    if any(f"= {title} =" in head or f"={title}=" in head for title in SECTIONS) and "GPU0" in head:
        return 50
    return 0


@dataclass
class _Bench:
    key: int
    host: str | None
    line_start: int
    line_end: int
    gpus: list[str] = field(default_factory=list)  # the link-type matrix's header
    rows: set[str] = field(default_factory=set)  # the link-type matrix's rows read
    ended: bool = False

    def record(self) -> dict[str, Any]:
        complete = self.ended and bool(self.gpus) and self.rows >= set(self.gpus)
        return {
            "bench_key": self.key,
            "tool": TOOL,
            "ranks": len(self.gpus) or None,
            "nodes": 1,
            "gpus_per_node": len(self.gpus) or None,
            "hosts": [self.host] if self.host else [],
            "status": "complete" if complete else "partial",
            "line_start": self.line_start,
            "line_end": self.line_end,
        }


class _Parser:
    def __init__(self) -> None:
        self.out = Emitter()
        self.bench: _Bench | None = None
        self.next_key = 0
        self.section: str | None = None
        self.columns: list[str] = []  # the current matrix's header
        self.host: str | None = None  # named by the last prompt

    def open(self, n: int, host: str | None) -> _Bench:
        if self.bench is None:
            self.bench = _Bench(self.next_key, host or self.host, n, n)
            self.next_key += 1
        return self.bench

    def close(self) -> None:
        if self.bench is not None:
            self.out.add("benches", self.bench.record())
            self.bench = None
        self.section, self.columns = None, []

    def finish(self) -> None:
        self.close()

    def line(self, n: int, text: str) -> None:
        if not text.strip():
            return
        body, host = strip_prefix(text)
        if self.handle(n, body.rstrip(), host):
            if self.bench is not None:
                self.bench.line_end = n
            return
        if "WARNING" in text or "ERROR" in text:
            key = self.bench.key if self.bench else None
            kind = "error" if "ERROR" in text else "warning"
            self.out.add("events", {"bench_key": key, "line_no": n, "kind": kind, "text": text})
            return
        self.out.add("unparsed", {"line_no": n, "text": text})

    def handle(self, n: int, body: str, host: str | None) -> bool:
        if match := PROMPT_RX.match(body):
            self.close()
            self.host = match.group(1)
            return True
        if (rule := body.strip()).startswith("=") and rule.endswith("=") and len(rule) > 1:
            title = rule.strip("=").strip()
            if title == TITLE:
                self.close()  # a second output begins
                self.open(n, host)
                return True
            if title == END:
                if self.bench is not None:
                    self.bench.ended = True
                self.close()
                return True
            if title in SECTIONS:
                self.open(n, host)
                self.section, self.columns = SECTIONS[title], []
                return True
            return False
        if self.section is None or self.bench is None:
            return False
        if self.section == "numa":
            if match := NUMA_RX.match(body.strip()):
                name = "NUMA Node" if match.group(2) == "Numa Node" else "NUMA Affinity"
                self.param(f"GPU{match.group(1)} {name}", match.group(3), n)
                return True
            return False
        if not self.columns:
            if match := HEADER_RX.match(body):
                self.columns = match.group(1).split()
                if self.section == "link":
                    self.bench.gpus = list(self.columns)
                return True
            return False
        match = ROW_RX.match(body)
        if match is None:
            return False
        cells = match.group(2).split()
        if len(cells) != len(self.columns):
            return False
        a = match.group(1)
        for b, cell in zip(self.columns, cells, strict=True):
            if self.section == "link":
                kind = "X" if a == b else cell
                self.out.add(
                    "links",
                    {"bench_key": self.bench.key, "host": self.bench.host, "a": a, "b": b}
                    | {"link_kind": kind, "link_count": None, "line_no": n},
                )
            elif a != b:
                self.param(f"{a} {b} {self.section}", cell, n)
        if self.section == "link":
            self.bench.rows.add(a)
        return True

    def param(self, name: str, value: str, n: int) -> None:
        assert self.bench is not None
        self.out.add(
            "bench_params", {"bench_key": self.bench.key, "name": name, "value": value, "line_no": n}
        )


@guarded
def parse(source: LineSource) -> Iterator[Batch]:
    return drive(_Parser(), source)
