"""`nvidia-smi topo -m`: the device-by-device link matrix, GPU and NIC rows, CPU and NUMA affinity.

What nvidia-smi prints and where it lands:

- The header row (`GPU0 GPU1 ... NIC0 ... CPU Affinity  NUMA Affinity  GPU NUMA ID`; older drivers name
  the NICs `mlx5_0` and print fewer affinity columns) opens a bench, one per matrix.
- Every row (`GPU0  X  NV12 ... 0-23  0  N/A`, `NIC0  PXB ...`): one `links` row per cell, the diagonal
  `X` included: a = the row's device, b = the column's, link_kind as printed (X, NV#, PIX, PXB, PHB, NODE,
  SYS, SOC on old drivers), link_count = # for NV#. The affinity cells become `bench_params` named
  `<device> <column>` (e.g. `GPU4 CPU Affinity` = `24-47`), values as printed, N/A included.
- `NIC Legend:` lines (`NIC0: mlx5_0`): `bench_params` named after the NIC. The `Legend:` block is the
  tool's own text, understood and skipped.
- A shell prompt `user@host:~$ nvidia-smi topo -m` or a launcher prefix `host: ` names the host; a prompt
  of `topo -mp` (the PCIe path of every pair, NVLink left out) adds the bench param `matrix` saying so.
- `nvidia-smi topo -p2p r|w|rw|n|a|p` prints a GPU-by-GPU matrix of peer-to-peer support instead (`OK`,
  `NS` not supported, `CNS` chipset, `GNS` GPU, `TNS` topology not supported, `DR` disabled by regkey (the
  driver's registry key, newer drivers), `U` unknown; its legend
  is skipped): a bench of its own, its cells `bench_params` named `<GPU> <GPU> p2p <mode>` (e.g. `GPU0
  GPU1 p2p rw` = `OK`), the mode from the prompt (`p2p_mode`; `unknown` without one). No `links` rows:
  it says what the driver allows, not how the GPUs are wired.

- A matrix pasted without its header row (vllm-project/vllm#16336 starts at `GPU0  X  NV18 ...`): its
  rows are held until the matrix ends, and the columns named from them. Every column's device is known
  when the rows are all there (their labels, in order, each `X` on the diagonal) or a `NICn` row is
  (its `X` says how many GPU columns come first, then NIC0, NIC1, ...); otherwise the GPU columns are
  those of the GPU rows and any after them with an NVLink cell (a NIC has none), and the columns after
  those are not read: the bench param `columns not named` says how many. The affinity cells are named as
  the header would (CPU Affinity, NUMA Affinity, GPU NUMA ID, as many as the rows print).

ranks = GPUs in the matrix, nodes = 1 (the tool sees one machine), gpus_per_node = ranks. A bench is
`complete` when every device of the header has its row, `partial` otherwise. Other lines go to
`unparsed`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tracelog.parsers.base import Batch, Emitter, LineSource, drive, guarded, strip_prefix

FORMAT = "topo"
VERSION = "6"  # "3": a `topo -mp` matrix says its links are PCIe paths only; "4": blank affinity cells of a
# copy with blanks for tabs; "5": a matrix without its header row; "6": the `-p2p` cell `DR` (disabled by regkey)
TOOL = "nvidia-smi-topo"

AFFINITY_RX = re.compile(r"CPU Affinity|NUMA Affinity|GPU NUMA ID")
DEVICE_NAME_RX = re.compile(r"^(?:GPU\d+|NIC\d+|mlx\d+_\d+|[a-z]+\d*_\d+|CPU\d*)$")
CELL_RX = re.compile(r"^(?:X|NV\d+|NVB|PIX|PXB|PHB|NODE|SYS|SOC|N/A)$")
# A paste that lost a tab glues two cells (`PXBNODE`, `SYSSYS`) or two header names (`NIC11NIC12`); each
# is a run of codes the matrix prints, split back into its cells.
GLUED_RX = re.compile(r"(?:X|NV\d+|NVB|PIX|PXB|PHB|NODE|SYS|SOC){2,}|(?:(?:GPU|NIC)\d+){2,}")
GLUED_PART_RX = re.compile(r"X|NV\d+|NVB|PIX|PXB|PHB|NODE|SYS|SOC|(?:GPU|NIC)\d+")
P2P_CELL_RX = re.compile(r"^(?:X|OK|NS|CNS|GNS|TNS|DR|U)$")  # DR: disabled by regkey (newer drivers)
HEADER_DETECT_RX = re.compile(
    r"^(?:[\w.\-]+:)?[ \t]*(?:\[[0-9;]*m)?GPU0(?:[ \t]+\S+)*?[ \t]+CPU Affinity", re.MULTILINE
)
PROMPT_RX = re.compile(
    # `user@host:~$`, `[user@host dir]$` (RHEL), after a conda or venv name `(env) ` / `((env) ) `
    r"^(?:\(+[^$#@]*?\)+\s*)?\[?(?:[\w.-]+@([\w.-]+)[^$#]*[$#]|[$#])\s*nvidia-smi\s+topo\b(?:.*?\s-p2p\s+([a-z]+))?"
)
# a terminal's colour code whose ESC byte was lost in a copy (`[4mGPU0 ... GPU NUMA ID[0m`)
ANSI_RESIDUE_RX = re.compile(r"\[[0-9;]*m")
# `nvidia-smi topo -mp`: the PCIe path between every pair of devices, NVLink left out
PCI_ONLY = (
    "PCIe paths only (topo -mp): GPUs joined by NVLink show their PCIe path; their NVLinks are not shown"
)
LEGEND_RX = re.compile(r"^(?:Legend:|(?:X|SYS|NODE|PHB|PXB|PIX|NV#|NVB|SOC|OK|NS|CNS|GNS|TNS|DR|U)\s+=)")
NIC_LEGEND_RX = re.compile(r"^NIC Legend:|^(NIC\d+):\s*(\S+)\s*$")


# the first rows of a matrix pasted without its header: GPU0 with its diagonal `X`, GPU1 likewise
HEADERLESS_DETECT_RX = re.compile(
    r"^[ \t]*GPU0[ \t]+X[ \t]+(?:NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)\b.*\n[ \t]*GPU1[ \t]+\S+[ \t]+X\b",
    re.MULTILINE,
)
AFFINITY_LABELS = ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]


def detect(head: str) -> int:
    if HEADER_DETECT_RX.search(head):
        return 50
    if HEADERLESS_DETECT_RX.search(head):
        return 30
    if re.search(r"^[ \t]*GPU0[ \t]+X[ \t]", head, re.MULTILINE) and "Legend:" in head:
        return 30
    return 0


@dataclass
class _Bench:
    key: int
    host: str | None
    line_start: int
    line_end: int
    devices: list[str]
    labels: list[str]
    rows: set[str] = field(default_factory=set)
    p2p: str | None = None  # the mode of a `-p2p` matrix (r, w, rw, n, a, p, or unknown)
    header: str = ""  # the header line as printed, kept as unparsed if no row of the matrix follows
    unnamed: set[str] = field(default_factory=set)  # columns of a header-less matrix no row names

    def record(self) -> dict[str, Any]:
        gpus = sum(1 for d in self.devices if d.startswith("GPU")) or None
        return {
            "bench_key": self.key,
            "tool": TOOL,
            "ranks": gpus,
            "nodes": 1,
            "gpus_per_node": gpus,
            "hosts": [self.host] if self.host else [],
            "status": "complete" if self.rows >= set(self.devices) and not self.unnamed else "partial",
            "line_start": self.line_start,
            "line_end": self.line_end,
        }


class _Parser:
    def __init__(self, out: Emitter | None = None, first_key: int = 0) -> None:
        self.out = out or Emitter()
        self.benches: dict[str | None, _Bench] = {}  # the open matrix of each host
        self.next_key = first_key
        self.host: str | None = None  # named by the last prompt
        self.p2p: str | None = None  # the mode the last prompt asked for (`topo -p2p rw`), or None
        self.pci_only = False  # the last prompt asked for the PCIe paths only (`topo -mp`)
        self.text = ""
        # the rows of a matrix pasted without its header, held until it ends: (line, row, host, text)
        self.headerless: list[tuple[int, str, str | None, str]] = []

    def finish(self) -> None:
        self.flush_headerless()
        for host in list(self.benches):
            self.close(host)

    def close(self, host: str | None) -> None:
        bench = self.benches.pop(host, None)
        if bench is None:
            return
        if not bench.rows and bench.p2p is None:
            # a header no row of ours followed (another tool's matrix: rocm-smi --showtopo's weights)
            self.out.add("unparsed", {"line_no": bench.line_start, "text": bench.header})
            return
        missing = [d for d in bench.devices if d not in bench.rows and d not in bench.unnamed]
        if missing:
            self.out.add(
                "events",
                {
                    "bench_key": bench.key,
                    "line_no": bench.line_end,
                    "kind": "incomplete",
                    "text": f"matrix rows missing for {', '.join(missing)}",
                },
            )
        self.out.add("benches", bench.record())

    def line(self, n: int, text: str) -> None:
        if not self.take(n, text):
            self.out.add("unparsed", {"line_no": n, "text": text})

    def take(self, n: int, text: str) -> bool:
        """Read a line of a matrix (or held as one), its legend or its prompt; False for any other line,
        which the caller keeps: another tool's parser reads the matrices printed among its own lines so."""
        if not text.strip():
            return True
        self.text = text  # the line as printed, for a header kept as unparsed (`close`)
        if self.hold_headerless(n, text):
            return True
        self.flush_headerless()
        if self.handle(n, text, None):
            return True
        body, host = strip_prefix(text)
        if not body.strip():
            return True  # a launcher prefix on a blank line
        return body != text and self.handle(n, body, host)

    def handle(self, n: int, text: str, prefix_host: str | None) -> bool:
        body = text.strip()
        if "m" in body and "[" in body:
            body = ANSI_RESIDUE_RX.sub("", body).strip()
        if match := PROMPT_RX.match(body):
            self.host = match.group(1) or prefix_host
            self.p2p = match.group(2)
            self.pci_only = re.search(r"\s-mp\b", body) is not None
            return True
        host = prefix_host or self.host
        tokens = _unglued(body.split())
        if tokens and tokens[0] == "GPU0" and (len(tokens) == 1 or not CELL_RX.match(tokens[1])):
            return self.header(n, body, host)
        bench = self.benches.get(host)
        if bench is not None and tokens and tokens[0] in bench.devices:
            return self.row(n, bench, tokens, body)
        if LEGEND_RX.match(body):
            return True
        if match := NIC_LEGEND_RX.match(body):
            if match.group(1) and bench is not None:
                self.param(bench, match.group(1), match.group(2), n)
                bench.line_end = n
            return True
        return False

    def hold_headerless(self, n: int, text: str) -> bool:
        """Whether `text` is a row of a matrix with no header (none open for its host), held to be read
        when the matrix ends."""
        body, prefix_host = strip_prefix(text)
        host = prefix_host or self.host
        if host in self.benches:
            return False
        body = ANSI_RESIDUE_RX.sub("", body).strip() if "[" in body else body.strip()
        tokens = _unglued(body.split())
        if not re.match(r"^(?:GPU|NIC)\d+$", tokens[0]) or _link_cells(tokens) < 2:
            return False  # (a `-p2p` matrix's row has one: its `X`)
        if self.headerless:
            first = self.headerless[0]
            if first[2] != host or _link_cells(tokens) != _link_cells(_unglued(first[1].split())):
                return False
        elif not (tokens[0].startswith("GPU") and _diagonal(tokens) == int(tokens[0][3:])):
            return False  # a block starts with a GPU row whose own column holds its `X`
        self.headerless.append((n, body, host, text))
        return True

    def flush_headerless(self) -> None:
        """Read the held rows of a header-less matrix under the columns they imply (`_columns`)."""
        held, self.headerless = self.headerless, []
        if not held:
            return
        rows = [_unglued(body.split()) for _, body, _, _ in held]
        columns = _columns(rows)
        if columns is None:
            for n, _, _, text in held:
                self.out.add("unparsed", {"line_no": n, "text": text})
            return
        devices, unnamed = columns
        printed = max(len(r) - 1 - _link_cells(r) for r in rows)
        n0, _, host, _ = held[0]
        labels = AFFINITY_LABELS[: min(printed, len(AFFINITY_LABELS))]
        bench = _Bench(self.next_key, host, n0, n0, devices, labels, unnamed=unnamed)
        self.benches[host] = bench
        self.next_key += 1
        self.param(bench, "header", "not printed: columns named from the rows", n0)
        if unnamed:
            first = devices[-len(unnamed) - 1]
            self.param(
                bench, "columns not named", f"{len(unnamed)} after {first} (GPUs or NICs: no header)", n0
            )
        for n, body, _, text in held:
            if not self.row(n, bench, _unglued(body.split()), body):
                self.out.add("unparsed", {"line_no": n, "text": text})

    def header(self, n: int, body: str, host: str | None) -> bool:
        found = AFFINITY_RX.search(body)
        devices = _unglued((body[: found.start()] if found else body).split())
        if not devices or not all(DEVICE_NAME_RX.match(d) for d in devices):
            return False
        labels = AFFINITY_RX.findall(body)
        self.close(host)
        bench = _Bench(
            self.next_key, host, n, n, devices, labels, p2p=None if labels else self.p2p, header=self.text
        )
        self.benches[host] = bench
        self.next_key += 1
        if bench.p2p is not None:
            self.param(bench, "p2p_mode", bench.p2p, n)
        elif self.pci_only:
            self.param(bench, "matrix", PCI_ONLY, n)
        return True

    def row(self, n: int, bench: _Bench, tokens: list[str], body: str) -> bool:
        name, cells = tokens[0], tokens[1 : 1 + len(bench.devices)]
        extra = tokens[1 + len(bench.devices) :]
        if (
            bench.p2p is None
            and not bench.labels
            and not bench.rows
            and not extra
            and _p2p_cells(cells, bench)
        ):
            bench.p2p = "unknown"  # a `-p2p` matrix pasted without its command
            self.param(bench, "p2p_mode", bench.p2p, n)
        if bench.p2p is not None:
            return self.p2p_row(n, bench, name, cells, extra)
        if len(cells) != len(bench.devices) or not all(CELL_RX.match(c) for c in cells):
            return False
        if "\t" in body:
            extra = _affinity_cells(body, len(bench.devices), len(bench.labels)) or extra
        elif len(extra) < len(bench.labels):
            extra = _spaced_affinity_cells(body, len(bench.devices), len(bench.labels)) or extra
        if len(extra) > len(bench.labels):
            return False
        for other, cell in zip(bench.devices, cells, strict=True):
            if other in bench.unnamed:
                continue
            self.out.add(
                "links",
                {
                    "bench_key": bench.key,
                    "host": bench.host,
                    "a": name,
                    "b": other,
                    "link_kind": cell,
                    "link_count": int(cell[2:]) if re.match(r"NV\d+$", cell) else None,
                    "line_no": n,
                },
            )
        for label, value in zip(bench.labels, extra, strict=False):
            if value:
                self.param(bench, f"{name} {label}", value, n)
        bench.rows.add(name)
        bench.line_end = n
        return True

    def p2p_row(self, n: int, bench: _Bench, name: str, cells: list[str], extra: list[str]) -> bool:
        if extra or not _p2p_cells(cells, bench):
            return False
        for other, cell in zip(bench.devices, cells, strict=True):
            if other != name:
                self.param(bench, f"{name} {other} p2p {bench.p2p}", cell, n)
        bench.rows.add(name)
        bench.line_end = n
        return True

    def param(self, bench: _Bench, name: str, value: str, n: int) -> None:
        self.out.add("bench_params", {"bench_key": bench.key, "name": name, "value": value, "line_no": n})


def _unglued(tokens: list[str]) -> list[str]:
    return [part for t in tokens for part in (GLUED_PART_RX.findall(t) if GLUED_RX.fullmatch(t) else [t])]


def _link_cells(tokens: list[str]) -> int:
    """How many link cells follow a row's device name (its affinity cells after them)."""
    count = 0
    for token in tokens[1:]:
        if not CELL_RX.match(token) or token == "N/A":
            break
        count += 1
    return count


def _diagonal(tokens: list[str]) -> int | None:
    """The column of a row's `X`: the row's own."""
    cells = tokens[1 : 1 + _link_cells(tokens)]
    return cells.index("X") if cells.count("X") == 1 else None


def _columns(rows: list[list[str]]) -> tuple[list[str], set[str]] | None:
    """The devices of a header-less matrix's columns, and those no row names; None where the rows do not
    agree with nvidia-smi's order (GPUs first, then NICs, each row's `X` in its own column)."""
    width = _link_cells(rows[0])
    labels = [r[0] for r in rows]
    found = [_diagonal(r) for r in rows]
    diagonal = [d for d in found if d is not None]
    if len(set(labels)) != len(labels) or len(diagonal) != len(rows):
        return None
    places = list(zip(labels, diagonal, strict=True))
    gpu_rows = [(int(label[3:]), d) for label, d in places if label.startswith("GPU")]
    nic_rows = [(int(label[3:]), d) for label, d in places if label.startswith("NIC")]
    if any(i != d for i, d in gpu_rows) or len({d - i for i, d in nic_rows}) > 1:
        return None
    if nic_rows:
        gpus = nic_rows[0][1] - nic_rows[0][0]
        if gpus <= max(i for i, _ in gpu_rows):
            return None
        return [f"GPU{i}" for i in range(gpus)] + [f"NIC{i}" for i in range(width - gpus)], set()
    gpus = max(i for i, _ in gpu_rows) + 1
    while gpus < width and any(re.match(r"NV\d+$", r[1 + gpus]) for r in rows):
        gpus += 1  # a column with an NVLink cell is a GPU's: a NIC has none
    unnamed = [f"column {i + 1}" for i in range(gpus, width)]
    return [f"GPU{i}" for i in range(gpus)] + unnamed, set(unnamed)


def _p2p_cells(cells: list[str], bench: _Bench) -> bool:
    """A row of a `-p2p` matrix: a support status in every cell, one that is not the topology's `X`."""
    return (
        len(cells) == len(bench.devices)
        and all(P2P_CELL_RX.match(c) for c in cells)
        and any(c not in ("X", "U") for c in cells)
    )


def _affinity_cells(body: str, devices: int, labels: int) -> list[str] | None:
    """The affinity cells of a tab-separated row by position: nvidia-smi leaves a GPU without CPU affinity
    an empty cell (`GPU1\tNV18\t X \tNV18\tNV18\t\t1\t\tN/A`), which splitting on whitespace would close
    up, shifting NUMA affinity into CPU affinity; and it prints an empty cell before `GPU NUMA ID`. None
    when the tabs do not line up with the device columns (a hand-edited paste)."""
    cells = [c.strip() for c in body.split("\t")]
    if len(cells) < 1 + devices or not all(CELL_RX.match(c) for c in cells[1 : 1 + devices]):
        return None
    after = cells[1 + devices :]
    kept = after[:2] + [c for c in after[2:] if c]  # CPU and NUMA affinity by place, then what is printed
    return kept[:labels] if len([c for c in after if c]) <= labels else None


def _spaced_affinity_cells(body: str, devices: int, labels: int) -> list[str] | None:
    """The affinity cells of a row whose tabs a copy turned into blanks (to the next multiple of 8, as a
    terminal shows them), by the tab stops between its values: a GPU without CPU or NUMA affinity leaves
    those cells empty (`PXB     PXB                             N/A`, vllm-project/vllm#19607), and the
    values left would shift into them. None where the words do not match the row's tokens."""
    words = list(re.finditer(r"\S+", body))
    if len(words) < 1 + devices:
        return None
    after: list[str] = []
    stop = (words[devices].end() // 8 + 1) * 8  # the tab after the last device cell
    for word in words[1 + devices :]:
        if word.start() < stop or (word.start() - stop) % 8:
            return None  # not on a tab stop: blanks of some other making
        after += [""] * ((word.start() - stop) // 8) + [word.group()]
        stop = (word.end() // 8 + 1) * 8
    kept = after[:2] + [c for c in after[2:] if c]  # as `_affinity_cells` reads a tab-separated row
    return kept[:labels] if len([c for c in after if c]) <= labels else None


def reader(out: Emitter, first_key: int) -> _Parser:
    """A reader of the matrices printed among another tool's lines: rows into that tool's `out`, bench keys
    from `first_key` on (apart from its own), lines offered one by one through `take`."""
    return _Parser(out, first_key)


@guarded
def parse(source: LineSource) -> Iterator[Batch]:
    return drive(_Parser(), source)
