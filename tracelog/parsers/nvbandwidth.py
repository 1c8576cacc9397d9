"""nvbandwidth (github.com/NVIDIA/nvbandwidth): its text output, v0.1 to v0.10, single node and multinode.

What the tool prints (`output.cpp`, `inline_common.h`, `testcases_*.cpp`, `error_handling.h`; before v0.5
the same lines from `nvbandwidth.cpp` and `common.h`) and where it lands:

- `nvbandwidth Version: v0.8` opens a bench (one per run; a file may hold several). A shell prompt running
  the tool just before it (`user@host:...$ ./nvbandwidth -t ...`) names the host and becomes a `command`
  parameter. `Built from Git version:`, `CUDA Runtime Version:`, `CUDA Driver Version:` (v0.10: `CUDA Driver
  Version (API):`), `Driver Version:` and multinode's `MPI version:` become `bench_params`, named as printed.
- `Device 0: NVIDIA H100 80GB HBM3 (00000000:18:00)` (the bus id from v0.5): `bench_devices`, bus id
  written `dddd:bb:dd` as the p2p parser writes it; v0.8 prints the host name alone on the line before.
  Multinode prints `Process 3 (host): device 3: HGX GB200 (00000019:01:00)`: one device per MPI process,
  hosts, nodes and GPUs per node from them. v0.10 prints no device line: the GPUs are then counted from
  the widest matrix.
- `Running <testcase>.`, then a title such as `memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)`, a
  header of column indices, one row per source (`N/A` where a pair was not measured: skipped), a blank
  line and `SUM <key> <value>` (v0.10 adds `COEFFICIENT_OF_VARIATION <key> <value>`; `--perfFormatter`
  prints `&&&& PERF <key> <value> +GB/s` instead; `-v` adds `MIN|MAX|AVG <key> <value>` and per-sample
  lines, which repeat the matrix and are skipped). Each statistic is a bench param named `<stat> <key>`.
- Waived tests: `Waiving <testcase>.` (to v0.4), `Waived: ` without the name (v0.5 on): a `waived` param,
  its value the name when printed, `?` otherwise.

Matrix names (the `p2p.matrix` column) say what each value is, so that the bandwidth rules hold it
against the right figure (`analysis/rules/bandwidth.py`: `bandwidth_%p2p_on%` against the GPU's link,
`_bi` against its bidirectional figure):

- GPU-to-GPU copies, one pair at a time (`device_to_device_memcpy_read_ce`): one direction, so
  `bandwidth_uni_p2p_on_<testcase>`. Bidirectional tests measure each direction while the other runs
  (README, "Bidirectional Device <-> Device"): their `Read1`/`Read2`/`Write1`/`Write2` matrices (v0.6 on)
  and a CE test's single matrix (to v0.5) are one direction under duplex load, `bandwidth_uni_p2p_on_
  <testcase>_read1`, with `bidirectional` written `duplex` so that no `_bi` makes them look like a sum;
  `Total` is both directions summed, `bandwidth_bi_p2p_on_<testcase, duplex>_total`, as is an SM test's
  single matrix to v0.5 (`MemcpyOperation::TOTAL_BW`).
- Host copies, aggregates (`all_to_one_*`, `host_to_all_*`, multicast), `device_local_copy` and the
  multinode bisection keep their testcase name: a PCIe or C2C figure, or a sum over peers, is no pair's
  NVLink figure. Latency tests are `latency_<testcase>`, printed in ns and stored in us as the p2p parser's.
- src is the printed row, dst the column. A row that is no GPU (the CPU of a host test, or all the other
  GPUs of an aggregate) is numbered n, one past the last GPU of the matrix: `p2p.src` takes no negative
  index (`parsers/ranges.py` drops the row). `device_local_copy` is src = dst; the bisection's rows are
  labelled `0->4`: src 0, dst 4.

A bench is `data_error` when its check of the copied data failed (`Invalid value when checking the
pattern`, `ASSERT in expression h_errorFlag == 0`: `data_error` events, the test in a `verification failed`
param), `failed` after another `ASSERT`, a `[CUDA_ERROR_...]` / `NVML_ERROR` line or a crash (rows printed
before it are kept), `partial` when a matrix has fewer rows than it should
or a test printed no result (a cut output, an `Error:` line), `complete` otherwise. Notes the tool prints
are understood and skipped, its warnings become events; anything else (another program's warning between
rows, mpirun's binding lines) goes to `unparsed`. A launcher prefix (`host: `) is stripped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tracelog.parsers.base import Batch, Emitter, LineSource, drive, guarded, strip_prefix

FORMAT = "nvbandwidth"
VERSION = "3"  # "3": a `Running` line under a markdown quote names its test
TOOL = "nvbandwidth"

VERSION_RX = re.compile(r"^nvbandwidth Version:\s*(\S.*?)\s*$")
FACT_RX = re.compile(
    r"^(Built from Git version|CUDA Runtime Version|CUDA Driver Version(?: \(API\))?|Driver Version"
    r"|MPI version):\s*(\S.*?)\s*$"
)
BUS = r"(?: \(([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)\))?\s*$"
DEVICE_RX = re.compile(r"^Device (\d+): (.+?)" + BUS)
PROCESS_RX = re.compile(r"^Process\s+(\d+) \((.+?)\): device (\d+): (.+?)" + BUS)
HOSTNAME_RX = re.compile(r"^(?=[^:\s]*[A-Za-z])[A-Za-z0-9][\w.-]*$")
# a markdown quote (`> Running host_to_device_memcpy_sm.`, NVIDIA/nvbandwidth#24) quotes the line, not the test
RUNNING_RX = re.compile(r"^(?:>\s*)?Running (\w+)\.\s*$")
WAIVED_RX = re.compile(r"^(?:Waiving (\w+)\.|Waived:\s*(\w*))\s*$")
TITLE_RX = re.compile(
    r"^(?:memcpy (?:CE|SM|local)|memory latency|Device to Device Latency|multicast SM|Bisect benchmarking)\b"
)
UNIT_RX = re.compile(r"\((GB/s|ns|us)\)\s*$")
VARIANT_RX = re.compile(r"\b(Read[12]|Write[12]|Total) bandwidth\b")
COLUMNS_RX = re.compile(r"^0(?:\s+\d+)*$")
ROW_RX = re.compile(r"^(\d+)(?:\s*->\s*(\d+))?\s+(\S.*)$")
CELL_RX = re.compile(r"^(?:N/A|-?\d+\.\d+|-?nan|-?inf)$")
STAT_RX = re.compile(r"^(SUM|COEFFICIENT_OF_VARIATION|MIN|MAX|AVG) (\w+) (\S+)\s*$")
PERF_RX = re.compile(r"^&&&& PERF (\w+) (\S+)")
SAMPLE_RX = re.compile(r"^Sample \d+: ")
NOTE_RX = re.compile(
    r"^(?:NOTE: The reported results may not reflect|Performance can vary with software drivers"
    r"|NOTE: This tool reports current measured bandwidth|Additional system-specific tuning may be required"
    r"|It is suggested to use the default buffer size)"
)
WARNING_RX = re.compile(
    r"^(?:NOTE: You have chosen a buffer size|Warning: there are more processes than GPUs)"
)
FATAL_RX = re.compile(
    r"^(?:ASSERT in expression\b|\[(?:CUDA_ERROR_\w+|cuda[A-Z]\w+)\]|NVML_ERROR: \[|ERROR: Invalid Arguments)"
    r"|Segmentation fault|core dumped|terminate called|\bAborted\b|\bKilled\b|MPI_ABORT was invoked"
)
# The check of the copied data (`memcmpPatternHelper`, on unless `--skipVerification`): from v0.7 the compare
# kernel prints the buffer and the 4-byte word (`at 0x70a640000000`, `Current offset : 11136`) and the
# `ASSERT in expression h_errorFlag == 0` stops the tool; v0.4 to v0.6 print `at <0x...>`, `Current offset
# [ bytes/size]` and abort.
CHECK_RX = re.compile(
    r"^(?:Invalid value when checking the pattern\b|Current offset\s*[:\[]"
    r"|ASSERT in expression h_errorFlag == 0\b)"
)
TEST_ERROR_RX = re.compile(r"^(?:ERROR|Error): \S")
PROMPT_RX = re.compile(r"^(?:[\w.-]+@([\w.-]+)[^$#]*[$#]|[$#])\s*((?:\S.*)?\bnvbandwidth\b.*)$")
# A GPU-to-GPU test whose matrix holds one value per pair: copies (CE or SM, multinode too) and latency.
PAIR_TEST_RX = re.compile(r"(?:^|_)device_to_device_(?:bidirectional_)?(?:memcpy|latency)_")
KEY_SUFFIX_RX = re.compile(r"_(?:read[12]|write[12]|total)$")
HEAD_RX = re.compile(
    r"^(?:\S+:\s+)?(?:>[ \t]*)?Running \w+\.[ \t]*\n(?:[^\n]*\n){0,2}?(?:\S+:\s+)?"
    r"(?:memcpy (?:CE|SM)|memory latency SM|Device to Device Latency SM)\b",
    re.MULTILINE,
)


def detect(head: str) -> int:
    """Sure on the version line every run starts with; nearly as sure on a test's `Running` line followed
    by one of its matrix titles (an excerpt without the header)."""
    if "nvbandwidth Version:" in head:
        return 60
    return 55 if HEAD_RX.search(head) else 0


def matrix_name(testcase: str, variant: str | None, latency: bool, pairwise: bool) -> str:
    """The `p2p.matrix` of one printed matrix (module docstring: why uni, bi, duplex and plain names)."""
    suffix = f"_{variant.lower()}" if variant else ""
    if latency:
        return f"latency_{testcase}{suffix}"
    if not pairwise:
        return f"{testcase}{suffix}"
    stem = testcase.replace("bidirectional", "duplex")
    if variant == "Total":
        return f"bandwidth_bi_p2p_on_{stem}_total"
    name = f"bandwidth_uni_p2p_on_{stem}{suffix}"
    return name if "_bi" not in name.removeprefix("bandwidth_uni") else f"{testcase}{suffix}"


def _slug(title: str) -> str:
    """A name for a matrix whose test is not known (an excerpt without `Running` or `SUM`)."""
    text = UNIT_RX.sub("", title).replace("<->", " and ").replace("->", " to ").replace("<-", " from ")
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


@dataclass
class _Matrix:
    """One printed matrix, held until it ends (its `SUM`, the next test, the end of the file) so that its
    name can come from a `SUM` key when no `Running` line named the test."""

    title: str
    testcase: str | None
    line_no: int
    columns: int = 0
    # (row label, the `->` peer of a labelled row, column, cell as printed, line)
    cells: list[tuple[int, int | None, int, str, int]] = field(default_factory=list)
    rows: set[tuple[int, int | None]] = field(default_factory=set)
    summed: bool = False

    @property
    def variant(self) -> str | None:
        match = VARIANT_RX.search(self.title)
        return match.group(1) if match else None

    @property
    def unit(self) -> tuple[str, float]:
        """The stored unit and the factor from the printed one (latency: ns to us)."""
        match = UNIT_RX.search(self.title)
        printed = match.group(1) if match else "GB/s"
        return ("us", 1e-3) if printed == "ns" else (printed, 1.0)

    def kind(self) -> str:
        """`gpu`: rows are GPUs; `other`: the one row is the CPU or all peers; `self`: a GPU with itself;
        `labelled`: rows name their pair (`0->4`)."""
        testcase = self.testcase or ""
        if self.title.startswith("Bisect"):
            return "labelled"
        if "local GPU(column)" in self.title or testcase == "device_local_copy":
            return "self"
        if testcase:
            return "gpu" if PAIR_TEST_RX.search(testcase) else "other"
        return "gpu" if "GPU(row)" in self.title else "other"

    def expected_rows(self) -> int | None:
        kind = self.kind()
        return self.columns if kind == "gpu" else None if kind == "labelled" else 1

    def name(self) -> str:
        testcase = self.testcase or _slug(self.title)
        latency = self.unit[0] != "GB/s"
        pairwise = bool(self.testcase) and self.kind() == "gpu" and not latency
        variant = self.variant
        if variant is None and "bidirectional" in testcase and testcase.endswith("_sm"):
            # to v0.5 an SM bidirectional test printed one matrix: both directions summed
            # (`MemcpyOperation::TOTAL_BW`; v0.2's README: size/(time on stream1) + size/(time on stream2))
            variant = "Total"
        return matrix_name(testcase, variant, latency, pairwise)

    def whole(self) -> bool:
        expected = self.expected_rows()
        return self.summed and bool(self.rows) if expected is None else len(self.rows) == expected > 0


@dataclass
class _Bench:
    key: int
    line_start: int
    line_end: int
    devices: dict[int, str] = field(default_factory=dict)
    processes: dict[int, tuple[str, str]] = field(default_factory=dict)  # rank -> (host, GPU name)
    host: str | None = None
    gpus: int = 0  # the widest matrix, for outputs that list no device
    matrices: int = 0
    waived: int = 0
    errors: int = 0
    cut: list[str] = field(default_factory=list)
    no_result: list[str] = field(default_factory=list)
    failed: bool = False
    corrupted: bool = False  # its check of the copied data failed
    tests_started: bool = False

    def record(self) -> dict[str, Any]:
        ranks: int | None
        nodes: int | None
        per_node: int | None
        if self.processes:
            hosts = list(dict.fromkeys(host for host, _ in self.processes.values()))
            names = list(dict.fromkeys(name for _, name in self.processes.values()))
            ranks, nodes = len(self.processes), len(hosts)
            per_node = max(sum(1 for h, _ in self.processes.values() if h == host) for host in hosts)
        else:
            hosts = [self.host] if self.host else []
            names = list(dict.fromkeys(self.devices.values()))
            ranks = len(self.devices) or self.gpus or None
            nodes, per_node = (1, ranks) if ranks else (None, None)
        return {
            "bench_key": self.key,
            "tool": TOOL,
            "ranks": ranks,
            "nodes": nodes,
            "gpus_per_node": per_node,
            "gpu_name": ", ".join(names) or None,
            "hosts": hosts,
            "status": self.status(),
            "line_start": self.line_start,
            "line_end": self.line_end,
        }

    def status(self) -> str:
        if self.corrupted:
            return "data_error"
        if self.failed:
            return "failed"
        if self.cut or self.no_result or self.errors or not (self.matrices or self.waived):
            return "partial"
        return "complete"


class _Parser:
    def __init__(self) -> None:
        self.out = Emitter()
        self.bench: _Bench | None = None
        self.next_key = 0
        self.matrix: _Matrix | None = None
        self.running: tuple[str, bool] | None = None  # the test announced last, and whether it printed
        self.host: str | None = None  # named by a shell prompt, with the command it ran
        self.command: tuple[str, int] | None = None
        self.after_fatal = False  # the old CU_ASSERT's message follows on a tab-indented line

    # benches

    def open(self, n: int) -> _Bench:
        self.close()
        bench = self.bench = _Bench(self.next_key, n, n, host=self.host)
        self.next_key += 1
        if self.command is not None:
            self.param("command", *self.command)
        self.host, self.command = None, None
        return bench

    def current(self, n: int) -> _Bench:
        bench = self.bench or self.open(n)
        bench.line_end = n
        return bench

    def finish(self) -> None:
        self.close()

    def close(self) -> None:
        self.end_matrix()
        self.end_test()
        bench, self.bench = self.bench, None
        if bench is None:
            return
        if bench.status() != "complete":
            parts = [
                f"matrices cut short: {', '.join(bench.cut)}" if bench.cut else "",
                f"tests without a result: {', '.join(bench.no_result)}" if bench.no_result else "",
                f"{bench.errors} test error(s)" if bench.errors else "",
                "" if bench.matrices or bench.waived else "no matrix printed",
            ]
            if any(parts):
                text = "output incomplete: " + "; ".join(p for p in parts if p)
                self.event("incomplete", text, bench.line_end, bench)
        self.out.add("benches", bench.record())

    def event(self, kind: str, text: str, n: int, bench: _Bench | None = None) -> None:
        bench = bench or self.bench
        self.out.add(
            "events", {"bench_key": bench.key if bench else None, "line_no": n, "kind": kind, "text": text}
        )

    def param(self, name: str, value: str, n: int) -> None:
        assert self.bench is not None
        self.out.add(
            "bench_params", {"bench_key": self.bench.key, "name": name, "value": value, "line_no": n}
        )

    # tests and matrices

    def start_test(self, testcase: str) -> None:
        self.end_matrix()
        self.end_test()
        self.running = (testcase, False)

    def end_test(self) -> None:
        """A test announced by `Running` that printed no matrix (cut, failed or errored) is missing."""
        if self.running is not None and not self.running[1] and self.bench is not None:
            self.bench.no_result.append(self.running[0])
        self.running = None

    def start_matrix(self, n: int, title: str) -> None:
        self.end_matrix()
        bench = self.current(n)
        bench.tests_started = True
        testcase = None
        if self.running is not None:
            testcase, self.running = self.running[0], (self.running[0], True)
        self.matrix = _Matrix(title, testcase, n)

    def end_matrix(self) -> None:
        matrix, self.matrix = self.matrix, None
        if matrix is None or self.bench is None:
            return
        bench, kind, name = self.bench, matrix.kind(), matrix.name()
        unit, scale = matrix.unit
        bench.matrices += 1
        bench.gpus = max(bench.gpus, len(matrix.rows) if kind == "labelled" else matrix.columns)
        if not matrix.whole():
            expected = matrix.expected_rows()
            bench.cut.append(f"{name} ({len(matrix.rows)} of {expected or '?'} rows)")
        for row, to, col, cell, line in matrix.cells:
            if cell == "N/A" or (kind == "gpu" and row == col and float(cell) == 0):
                continue  # not measured (v0.1 printed a GPU with itself as 0.00, later versions as N/A)
            src, dst = {
                "gpu": (row, col),
                "other": (matrix.columns, col),
                "self": (col, col),
                "labelled": (row, to if to is not None else col),
            }[kind]
            record = {"bench_key": bench.key, "matrix": name, "src": src, "dst": dst}
            record |= {"value": float(cell) * scale, "unit": unit, "line_no": line}
            self.out.add("p2p", record)

    def row(self, match: re.Match[str], n: int) -> bool:
        matrix = self.matrix
        assert matrix is not None
        cells = match.group(3).split()
        label = (int(match.group(1)), int(match.group(2)) if match.group(2) else None)
        if len(cells) != matrix.columns or label in matrix.rows or not all(CELL_RX.match(c) for c in cells):
            return False
        matrix.rows.add(label)
        matrix.cells += [(label[0], label[1], col, cell, n) for col, cell in enumerate(cells)]
        return True

    def stat(self, n: int, stat: str, key: str, value: str) -> None:
        """`SUM`/`PERF` end the matrix they follow, and name it when no `Running` line did."""
        self.param(f"{stat} {key}", value, n)
        matrix = self.matrix
        if stat in ("SUM", "PERF") and matrix is not None and matrix.rows:
            if matrix.testcase is None:
                matrix.testcase = KEY_SUFFIX_RX.sub("", key) if matrix.variant else key
            matrix.summed = True
            self.end_matrix()

    # lines

    def line(self, n: int, text: str) -> None:
        if not text.strip():
            return
        if self.after_fatal and text.startswith("\t"):
            self.event("error", text.strip(), n)
            return
        self.after_fatal = False
        if self.handle(n, text.strip()):
            return
        body = text
        for _ in range(3):  # one prefix at a time: the tool's own lines start with `NOTE: ` or `Error: `
            stripped, host = strip_prefix(body, limit=1)
            if not stripped.strip():
                return  # a launcher prefix on a blank line
            if stripped == body:
                break
            body = stripped
            if self.handle(n, body.strip()):
                if host and self.bench is not None and self.bench.host is None and not self.bench.processes:
                    self.bench.host = host
                return
        if body.strip():
            self.out.add("unparsed", {"line_no": n, "text": text})

    def handle(self, n: int, body: str) -> bool:
        if match := VERSION_RX.match(body):
            self.open(n)
            self.param("nvbandwidth Version", match.group(1), n)
            return True
        if match := PROMPT_RX.match(body):
            self.close()
            self.host, self.command = match.group(1), (match.group(2), n)
            return True
        if match := FACT_RX.match(body):
            self.current(n)
            self.param(match.group(1), match.group(2), n)
            return True
        if (match := DEVICE_RX.match(body)) or (match := PROCESS_RX.match(body)):
            self.device(n, match)
            return True
        if match := RUNNING_RX.match(body):
            self.current(n).tests_started = True
            self.start_test(match.group(1))
            return True
        if match := WAIVED_RX.match(body):
            self.end_matrix()
            self.end_test()
            self.current(n).waived += 1
            self.param("waived", match.group(1) or match.group(2) or "?", n)
            return True
        if TITLE_RX.match(body):
            self.start_matrix(n, body)
            return True
        if self.matrix is not None and self.matrix_line(n, body):
            return True
        if (match := STAT_RX.match(body)) or (match := PERF_RX.match(body)):
            self.current(n)
            stat, key, value = match.groups() if match.re is STAT_RX else ("PERF", *match.groups())
            self.stat(n, stat, key, value)
            return True
        return self.note(n, body)

    def device(self, n: int, match: re.Match[str]) -> None:
        bench = self.current(n)
        if match.re is PROCESS_RX:
            rank, host, device, name, *bus = match.groups()
            bench.processes[int(rank)] = (host, name)
        else:
            (device, name, *bus), rank, host = match.groups(), None, None
            bench.devices[int(device)] = name
        row: dict[str, Any] = {"bench_key": bench.key, "rank": int(rank) if rank is not None else None}
        row["device"] = int(device)
        row |= {"host": host, "pid": None, "gpu_name": name, "line_no": n}
        row["bus_id"] = (
            f"{int(bus[0], 16):04x}:{int(bus[1], 16):02x}:{int(bus[2], 16):02x}" if bus[0] else None
        )
        self.out.add("bench_devices", row)

    def matrix_line(self, n: int, body: str) -> bool:
        matrix = self.matrix
        assert matrix is not None
        if not matrix.columns and COLUMNS_RX.match(body):
            matrix.columns = len(body.split())
            self.current(n)
            return True
        if matrix.columns and (match := ROW_RX.match(body)) and self.row(match, n):
            self.current(n)
            return True
        return False

    def note(self, n: int, body: str) -> bool:
        """The tool's notes, warnings and errors; a bare host name (v0.8) before the device list."""
        if SAMPLE_RX.match(body) or NOTE_RX.match(body):
            if self.bench is not None:
                self.bench.line_end = n
            return True
        if WARNING_RX.match(body):
            self.current(n)
            self.event("warning", body, n)
            return True
        if CHECK_RX.match(body):
            bench = self.current(n)
            self.end_matrix()
            if not bench.corrupted:
                self.param("verification failed", self.running[0] if self.running else "?", n)
            bench.corrupted, self.after_fatal = True, True
            self.event("data_error", body, n)
            return True
        if FATAL_RX.search(body):
            bench = self.current(n)
            self.end_matrix()
            bench.failed, self.after_fatal = True, True
            self.event("error", body, n)
            return True
        if TEST_ERROR_RX.match(body):
            self.current(n).errors += 1
            self.event("error", body, n)
            return True
        opened = self.bench
        if opened is not None and HOSTNAME_RX.match(body) and not (opened.devices or opened.tests_started):
            opened.host, opened.line_end = body, n
            return True
        return False


@guarded
def parse(source: LineSource) -> Iterator[Batch]:
    return drive(_Parser(), source)
