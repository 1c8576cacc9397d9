"""p2pBandwidthLatencyTest (CUDA samples): the device list, peer access, and every matrix it prints.

What the sample prints (`p2pBandwidthLatencyTest.cu`) and where it lands:

- `[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]` opens a bench (one per run; a file may hold several).
  A shell prompt running the sample just before it (`user@host:...$ ./p2pBandwidthLatencyTest`) names the
  host and becomes a `command` parameter.
- `Device: 0, NVIDIA A100-SXM4-80GB, pciBusID: 7, pciDeviceID: 0, pciDomainID:0`: `bench_devices`
  (bus id written `dddd:bb:dd` as nccl-tests does); the GPU name of the bench.
- `Device=0 CAN Access Peer Device=1` (or `CANNOT`): `p2p` rows of matrix `access_peer`, unit `bool`.
- `P2P Connectivity Matrix`: `connectivity` (bool); `Unidirectional|Bidirectional P2P=Enabled|Disabled
  Bandwidth [(P2P Writes|Reads)] Matrix (GB/s)`: `bandwidth_uni|bi_p2p_on|off` (GB/s);
  `P2P=Enabled|Disabled Latency [(P2P Writes|Reads)] Matrix (us)` with its `GPU` and `CPU` halves:
  `latency_gpu|cpu_p2p_on|off` (us). Writes are what the sample does by default (older versions print no
  `(P2P Writes)`), so they keep the plain name and pair with the P2P-disabled matrix; `--p2p_read` adds
  the `_reads` matrices. One `p2p` row per cell: src is the row (the GPU that issues the copy), dst the
  column.

Unidirectional values are one direction; bidirectional values are both directions summed (FORMULAS.md).
A bench is `complete` when all nine standard matrices are there with n rows each, `partial` otherwise (an
excerpt, a run cut short), `failed` after a `Cuda failure` line. The tool runs on one host: nodes = 1,
GPUs per node = ranks = the number of GPUs. Notes the sample prints are understood and skipped; anything
else (excerpt marks such as `[...]`, code fences) goes to `unparsed`. A paste from an editor with its line
numbers in front of every line (`  3      0   2.61  14.95`) is read through them (`prefixes.without_gutter`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tracelog.parsers.base import PARTLY_READ_EVENT, Batch, Emitter, LineSource, drive, guarded, strip_prefix

FORMAT = "p2p"
VERSION = "3"  # "3": a row cut inside its last figure keeps its other figures, the cut one not kept
TOOL = "p2pBandwidthLatencyTest"

TITLE_RX = re.compile(r"^\[P2P \(Peer-to-Peer\) GPU Bandwidth Latency Test\]")
DEVICE_RX = re.compile(
    r"^Device:\s*(\d+),\s*(.+?),\s*pciBusID:\s*([0-9a-fA-F]+),\s*pciDeviceID:\s*([0-9a-fA-F]+),"
    r"\s*pciDomainID:\s*([0-9a-fA-F]+)"
)
ACCESS_RX = re.compile(r"^Device=(\d+)\s+(CAN|CANNOT)\s+Access Peer Device=(\d+)")
CONNECTIVITY_RX = re.compile(r"^P2P Connectivity Matrix")
BANDWIDTH_RX = re.compile(
    r"^(Unidirectional|Bidirectional) P2P=(Enabled|Disabled) Bandwidth(?: \(P2P (Writes|Reads)\))? Matrix"
)
LATENCY_RX = re.compile(r"^P2P=(Enabled|Disabled) Latency(?: \(P2P (Writes|Reads)\))? Matrix")
COLUMNS_RX = re.compile(r"^(D\\D|GPU|CPU)((?:\s+\d+)+)\s*$")
ROW_RX = re.compile(r"^(\d+)\s+(.*)$")
FAILURE_RX = re.compile(r"Cuda failure|CUDA error|Segmentation fault|\bAborted\b|\bKilled\b")
PROMPT_RX = re.compile(r"^(?:[\w.-]+@([\w.-]+)[^$#]*[$#]|[$#])\s*(\S*p2pBandwidthLatencyTest\b.*)$")
PRINTED_FIGURE_RX = re.compile(r"^-?\d+\.\d\d$")
"""A bandwidth or latency figure as the sample prints every one (`printf("%6.02f ", ...)`); a row's last
figure with fewer decimals was cut short, by a paste or a log that stops mid-line."""
NOTE_RX = re.compile(
    r"^(\*{3}NOTE: In case a device|So you can see lesser Bandwidth|NOTE: The CUDA Samples are not meant)"
)
STANDARD = (
    "connectivity",
    "bandwidth_uni_p2p_off",
    "bandwidth_uni_p2p_on",
    "bandwidth_bi_p2p_off",
    "bandwidth_bi_p2p_on",
    "latency_gpu_p2p_off",
    "latency_cpu_p2p_off",
    "latency_gpu_p2p_on",
    "latency_cpu_p2p_on",
)


def detect(head: str) -> int:
    if TITLE_RX.search(head) or "P2P Connectivity Matrix" in head:
        return 50
    if re.search(r"(?:Unidirectional|Bidirectional) P2P=(?:Enabled|Disabled) Bandwidth", head):
        return 50
    if re.search(r"P2P=(?:Enabled|Disabled) Latency|Device=\d+ CAN(?:NOT)? Access Peer Device=\d+", head):
        return 40
    return 0


def _latency_kind(header: str, state: str, variant: str) -> str:
    return f"latency_{header.lower()}_p2p_{state}{variant}"


@dataclass
class _Bench:
    key: int
    line_start: int
    line_end: int
    devices: dict[int, str] = field(default_factory=dict)
    matrices: dict[str, int] = field(default_factory=dict)  # kind -> rows seen
    size: int = 0
    failed: bool = False
    host: str | None = None

    def record(self) -> dict[str, Any]:
        names = list(dict.fromkeys(self.devices.values()))
        gpus = len(self.devices) or self.size or None
        return {
            "bench_key": self.key,
            "tool": TOOL,
            "ranks": gpus,
            "nodes": 1 if gpus else None,
            "gpus_per_node": gpus,
            "gpu_name": ", ".join(names) or None,
            "hosts": [self.host] if self.host else [],
            "status": self.status(),
            "line_start": self.line_start,
            "line_end": self.line_end,
        }

    def status(self) -> str:
        if self.failed:
            return "failed"
        full = all(self.matrices.get(kind) == self.size for kind in STANDARD)
        return "complete" if self.size and full else "partial"


class _Parser:
    def __init__(self) -> None:
        self.out = Emitter()
        self.bench: _Bench | None = None
        self.next_key = 0
        self.title: tuple[str, str, str] | None = None  # (family, p2p state, variant) of the printed title
        self.kind: str | None = None  # the matrix whose rows come next
        self.unit = ""
        self.columns: list[int] = []
        self.host: str | None = None  # named by a shell prompt, with the command it ran
        self.command: tuple[str, int] | None = None

    def open(self, n: int) -> _Bench:
        self.close()
        self.bench = _Bench(self.next_key, n, n)
        self.next_key += 1
        self.kind, self.title = None, None
        return self.bench

    def current(self, n: int) -> _Bench:
        if self.bench is None:
            self.open(n)
            self.bench_host()
        assert self.bench is not None
        self.bench.line_end = n
        return self.bench

    def bench_host(self) -> None:
        """The host and command of the prompt just before the bench, if there was one."""
        assert self.bench is not None
        self.bench.host = self.host
        if self.command is not None:
            text, at = self.command
            self.out.add(
                "bench_params", {"bench_key": self.bench.key, "name": "command", "value": text, "line_no": at}
            )
        self.host, self.command = None, None

    def finish(self) -> None:
        self.close()

    def close(self) -> None:
        bench, self.bench = self.bench, None
        if bench is None:
            return
        short = [k for k, rows in bench.matrices.items() if rows < bench.size]
        if short or bench.status() == "partial":
            missing = [k for k in STANDARD if k not in bench.matrices]
            text = "output incomplete: " + "; ".join(
                part
                for part in (
                    f"matrices with fewer than {bench.size} rows: {', '.join(short)}" if short else "",
                    f"matrices not printed: {', '.join(missing)}" if missing else "",
                )
                if part
            )
            self.event("incomplete", text, bench.line_end, bench)
        self.out.add("benches", bench.record())

    def event(self, kind: str, text: str, n: int, bench: _Bench | None = None) -> None:
        bench = bench or self.bench
        key = bench.key if bench else None
        self.out.add("events", {"bench_key": key, "line_no": n, "kind": kind, "text": text})

    def line(self, n: int, text: str) -> None:
        if not text.strip():
            return
        if self.handle(n, text.strip()):
            return
        body, _ = strip_prefix(text)
        if not body.strip():
            return  # a launcher prefix on a blank line
        if body != text and self.handle(n, body.strip()):
            return
        self.out.add("unparsed", {"line_no": n, "text": text})

    def handle(self, n: int, body: str) -> bool:
        if TITLE_RX.match(body):
            self.open(n)
            self.bench_host()
            return True
        if match := PROMPT_RX.match(body):
            self.close()
            self.host, self.command = match.group(1), (match.group(2), n)
            return True
        if match := DEVICE_RX.match(body):
            bench = self.current(n)
            device, name, bus, dev, domain = match.groups()
            bench.devices[int(device)] = name
            self.out.add(
                "bench_devices",
                {
                    "bench_key": bench.key,
                    "rank": None,
                    "device": int(device),
                    "host": None,
                    "pid": None,
                    "bus_id": f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}",
                    "gpu_name": name,
                    "line_no": n,
                },
            )
            return True
        if match := ACCESS_RX.match(body):
            bench = self.current(n)
            src, can, dst = match.groups()
            self.cell(bench, "access_peer", int(src), int(dst), 1.0 if can == "CAN" else 0.0, "bool", n)
            return True
        if self.matrix_title(n, body):
            return True
        if match := COLUMNS_RX.match(body):
            return self.columns_line(n, match)
        if (match := ROW_RX.match(body)) and self.kind is not None:
            return self.row(n, int(match.group(1)), match.group(2).split(), body)
        if NOTE_RX.match(body):
            if self.bench is not None:
                self.bench.line_end = n
            return True
        if FAILURE_RX.search(body):
            self.event("error", body, n)
            if self.bench is not None:
                self.bench.failed = True
                self.bench.line_end = n
            return True
        return False

    def matrix_title(self, n: int, body: str) -> bool:
        if not (CONNECTIVITY_RX.match(body) or BANDWIDTH_RX.match(body) or LATENCY_RX.match(body)):
            return False
        self.current(n)
        if CONNECTIVITY_RX.match(body):
            self.title, self.unit = ("connectivity", "", ""), "bool"
        elif match := BANDWIDTH_RX.match(body):
            direction = "uni" if match.group(1) == "Unidirectional" else "bi"
            state = "on" if match.group(2) == "Enabled" else "off"
            variant = "_reads" if match.group(3) == "Reads" else ""
            self.title, self.unit = (f"bandwidth_{direction}", state, variant), "GB/s"
        elif match := LATENCY_RX.match(body):
            state = "on" if match.group(1) == "Enabled" else "off"
            variant = "_reads" if match.group(2) == "Reads" else ""
            self.title, self.unit = ("latency", state, variant), "us"
        self.kind = None
        return True

    def columns_line(self, n: int, match: re.Match[str]) -> bool:
        if self.title is None:
            return False
        family, state, variant = self.title
        label = match.group(1)
        if family == "latency":
            if label == "D\\D":
                return False
            kind = _latency_kind(label, state, variant)
        elif label != "D\\D":
            return False
        else:
            kind = family if family == "connectivity" else f"{family}_p2p_{state}{variant}"
        bench = self.current(n)
        self.columns = [int(c) for c in match.group(2).split()]
        self.kind = kind
        bench.matrices[kind] = 0
        bench.size = max(bench.size, len(self.columns))
        return True

    def row(self, n: int, src: int, cells: list[str], text: str) -> bool:
        if len(cells) != len(self.columns) or self.bench is None or self.kind is None:
            return False
        try:
            values = [float(c) for c in cells]
        except ValueError:
            return False
        bench = self.current(n)
        cut = self.unit != "bool" and not PRINTED_FIGURE_RX.match(cells[-1])
        if (
            cut
        ):  # a paste or a log that stops inside the row's last figure: `375.6` of `375.60`, `3` of `375.94`
            values.pop()
            self.out.add("unparsed", {"line_no": n, "text": text})
            self.event(PARTLY_READ_EVENT, f"matrix row cut inside its last figure, `{cells[-1]}` not kept", n)
        for dst, value in zip(self.columns, values, strict=False):
            self.cell(bench, self.kind, src, dst, value, self.unit, n)
        bench.matrices[self.kind] += 0 if cut else 1  # a row short of a cell leaves its matrix partial
        return True

    def cell(self, bench: _Bench, kind: str, src: int, dst: int, value: float, unit: str, n: int) -> None:
        self.out.add(
            "p2p",
            {
                "bench_key": bench.key,
                "matrix": kind,
                "src": src,
                "dst": dst,
                "value": value,
                "unit": unit,
                "line_no": n,
            },
        )


@guarded
def parse(source: LineSource) -> Iterator[Batch]:
    return drive(_Parser(), source, gutter=True)
