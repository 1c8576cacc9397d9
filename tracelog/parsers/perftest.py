"""perftest (github.com/linux-rdma/perftest): the text output of `ib_write_bw`, `ib_read_bw`, `ib_send_bw`,
`ib_atomic_bw` and their `_lat` variants, client or server side, one bench per invocation.

What the tools print (`src/perftest_parameters.c` `ctx_print_test_info`, `print_full_bw_report`,
`print_report_lat`; the formats in `src/perftest_parameters.h`; `src/perftest_communication.c`
`ctx_print_pingpong_data`; `src/write_bw.c` and its siblings), and where it lands:

- A title between two dashed lines, `RDMA_Write BW Test` (`testsStr[verb]`, then `Bidirectional ` under
  `-b`, `Post List `, then `BW` or `Latency`, `Test`), opens a bench (`benches.tool` perftest, its `op` the
  tool's name, `ib_write_bw`). The header's `Key : value` pairs, two to a line (`Dual-port : OFF\t\tDevice
  : mlx5_0`), become bench params named as printed (`Device`, `Link type`, `Mtu`, `Number of qps`,
  `Connection type`, `Transport type`, ...). The server prints `* Waiting for client to connect... *`
  first (`side` = server; client otherwise). A shell prompt running the tool just before it (`user@host:~$
  ib_write_bw -d mlx5_0 peer`, `# ...`, `+ ...` of `set -x`) names the host and gives `command`, `peer`
  and `ib port` (`-i`). A launcher prefix (`host: `) is stripped, and each host's lines are read apart, so
  that pdsh's interleaved outputs of one command on many nodes stay separate benches.
- The result header ` #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]`
  (`[MB/sec]` before perftest 24.07, `[Gb/sec]` with `--report_gbits`; `#sl` with `--report-qos`, per-port
  and `CPU_Util[%]` columns) or the latency one (`t_min[usec] ... 99.9% percentile[usec]`; `t_avg[usec]
  tps average` with `-D`), then one row per size (`-a`: every power of two), then a dashed line: rows of
  `perftest`. Under `-b --report-both` the summed table is followed by ` Local results: ` and ` Remote
  results: ` tables, whose rows carry `report` = local / remote (NULL for the main table).

Units. "MB/sec" is 2^20 bytes per second, not 10^6: `print_report_bw` divides by `format_factor =
(report_fmt == MBS) ? 0x100000 : 125000000` (src/perftest_parameters.c:4766 at 00b55b6, :3003 in v4.4-0.32),
which is why perftest 24.07 renamed the column `MiB/sec` (commit 1d202bb, "MB is for Megabytes, this is
Mebibyte"); `Gb/sec` is 10^9 bits (125000000 bytes). Bandwidths are stored in GB/s (10^9 bytes/s, as every
bandwidth in tracelog): MB/sec and MiB/sec times 2^20 / 10^9, Gb/sec over 8. A bidirectional run (`-b`)
prints the sum of both directions: `print_full_bw_report` adds the remote side's report to its own
(`bw_avg += rem_bw_rep->bw_avg`, src/perftest_parameters.c:4970-4976), so its rows are both directions
summed, and `bidirectional` says so; every other row is one direction. The server of a one-way write test
prints the client's figures (`print_full_bw_report(&user_param, &rem_bw_rep, NULL)`, src/write_bw.c:289).
Latencies stay in microseconds as printed: half the round trip for write and send, the whole round trip
for read and atomic (`rtt_factor`, `print_report_lat`).

A bench is `complete` when a result table closed with its dashed line, `partial` when the output stops
before (no table, or rows without the closing line: an `incomplete` event says which), `failed` when an
error (`Couldn't connect to host:port`, `Unable to init the socket connection`, `Completion with error`,
...) came before any row; an error without a title (a client that never reached its server) is a failed
bench of the command that ran. `Conflicting CPU frequency values detected` (`get_clock.c`, the CPU's clock
is not fixed, so perftest's cycle-to-time conversion is uncertain) and perftest's `WARNING:` lines are
`warning` events of their bench; the connection details (`local address: LID ...`, `GID: ...`) and notes
are read and skipped. Anything else goes to `unparsed`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tracelog.parsers.base import Batch, Emitter, LineSource, drive, guarded, strip_prefix

FORMAT = "perftest"
VERSION = "3"  # 2: a figure set in markdown bold (`**5544.28**`) is read as the figure; 3: a result header
# whose `#iterations` lost its `#`
TOOL = "perftest"

MIB_TO_GB = (1 << 20) / 1e9  # format_factor 0x100000 for MB/sec and MiB/sec (module docstring)
GBIT_TO_GB = 125_000_000 / 1e9  # format_factor 125000000 for Gb/sec
UNIT_FACTOR = {"MB/sec": MIB_TO_GB, "MiB/sec": MIB_TO_GB, "Gb/sec": GBIT_TO_GB}
VERBS = {
    "Send": "send",
    "Send_imm": "send",
    "RDMA_Write": "write",
    "RDMA_Write_imm": "write",
    "RDMA_Read": "read",
    "Atomic": "atomic",
}
TITLE_RX = re.compile(
    r"^(?P<verb>Send_imm|Send|RDMA_Write_imm|RDMA_Write|RDMA_Read|Atomic)(?: (?:CMP_AND_SWAP|FETCH_AND_ADD))?"
    r"(?P<bi> Bidirectional)?(?: Post List)? (?P<kind>BW|Latency)(?: forwarding)?(?: Multicast)? Test\s*$"
)
HEADER_KEYS = (
    "Dual-port",
    "Device",
    "Number of qps",
    "Transport type",
    "Connection type",
    "Using SRQ",
    "PCIe relax order",
    "Lock-free",
    "ibv_wr* API",
    "Using Enhanced Reorder",
    "TX depth",
    "RX depth",
    "Post List",
    "Recv Post List",
    "CQ Moderation",
    "CQE Poll Batch",
    "Mtu",
    "Link type",
    "Buffer size",
    "GID index2",
    "GID index",
    "Max inline data",
    "Outstand reads",
    "rdma_cm QPs",
    "Use ROCm memory",
    "Use MUSA memory",
    "Data ex. method",
    "TOS",
    "DCS num streams",
    "DCS active num streams",
    "Number of data encryption keys",
    "Block Size",
)
KEY_RX = re.compile(
    r"(?:^|(?<=\s))("
    + "|".join(re.escape(k) for k in sorted(HEADER_KEYS, key=len, reverse=True))
    + r")\s*:\s*"
)
# `#iterations` printed as `iterations` in a copy that lost the mark (openucx/ucx#8852's paste, its dashed
# lines gone too: markdown reads a line of dashes as a rule)
BW_HEAD_RX = re.compile(
    r"^#bytes\s+(?P<sl>#sl\s+)?#?iterations\s+BW peak\[(?P<unit>MB/sec|MiB/sec|Gb/sec)\]\s+"
    r"BW average\[(?P=unit)\]\s+MsgRate\[Mpps\](?P<rest>.*)$"
)
LAT_HEAD_RX = re.compile(r"^#bytes\s+#?iterations\s+t_min\[usec\]\s+t_max\[usec\]\s+t_typical\[usec\]")
LAT_DUR_HEAD_RX = re.compile(r"^#bytes\s+#?iterations\s+t_avg\[usec\]\s+tps average")
NUMBER = r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|-?nan|-?inf"
# `**5544.28**`: a number set in bold by someone pasting the output as markdown (linux-rdma/perftest#65)
BOLD_NUMBER_RX = re.compile(r"\*\*([-+]?\d[\d.]*)\*\*")
ROW_RX = re.compile(rf"^\d+(?:\s+(?:{NUMBER}))+\s*$")
DASHES_RX = re.compile(r"^-{20,}\s*$")
BANNER_RX = re.compile(
    r"^\*\s*Waiting for client to connect\.\.\.\s*\*$|^Waiting for client rdma_cm QP to connect$"
)
STARS_RX = re.compile(r"^\*{10,}$")
ADDRESS_RX = re.compile(r"^(?:(?:local|remote) address: LID\b|M?GID: [\d:]+$)")
REPORT_RX = re.compile(r"^(Local|Remote) results:\s*$")
NOTE_RX = re.compile(
    r"^(?:Disabling dynamic polling|Device not recognized to implement inline feature|Client closed connection"
    r"|Test with events\.|MultiCast runs on UD!|Changing to active mtu|Perftest doesn't supports CUDA tests"
    r"|initializing CUDA|Listing all CUDA devices|CUDA device \d|Picking device No\.|\[pid = \d+, dev = \d+\]"
    r"|allocated \d+ bytes of GPU buffer|using DMA-BUF for GPU buffer)"
)
CPU_FREQ_RX = re.compile(r"^Conflicting CPU frequency values detected\b")
WARNING_RX = re.compile(r"^(?:WARNING:|Requested mtu is higher than active mtu)")
ERROR_RX = re.compile(
    r"^(?:Couldn't|Couldnt|Could not|Unable to|Failed to|Failed status\b|Completion with error|Can't produce a report"
    r"|No IB devices found|IB device \S+ not found|Port number \d+ state is (?!Active)|ethernet_read_keys:|pp_read_keys"
    r"|Segmentation fault|Killed\b|Aborted\b|.*\bcore dumped\b)"
)
TOOL_RX = re.compile(r"(?:^|[\s/])(ib_(?:write|read|send|atomic)_(?:bw|lat)|raw_ethernet_(?:bw|lat))(?=\s|$)")
# `user@host:~$ `, `[root@host dir]# `, a bare `$ ` or `# `, `set -x`'s `+ ` (`#bytes` is no prompt)
PROMPT_RX = re.compile(
    r"^(?:\[?[\w.-]+@(?P<host>[\w.-]+)[^$#\]]*\]?\s*[$#]|[$#+](?=\s|$))\s*(?P<command>.*)$"
)
# perftest options that take a value (`src/perftest_parameters.c` `long_options`/getopt string), so that the
# server name is the bare word left over
VALUED_OPTIONS = frozenset("dipsqxDnmtruMSwIQToylLWJEPfAkK")
NAMED_OPTIONS = {"d": "device", "ib-dev": "device", "i": "ib port", "ib-port": "ib port", "p": "tcp port"}
NAMED_OPTIONS["port"] = "tcp port"
VALUED_LONG = frozenset(["ib-dev", "ib-port", "port", "size", "qp", "gid-index", "duration", "iters", "mtu"])


def detect(head: str) -> int:
    """Sure on a perftest title between its header lines; nearly as sure on a result header; a prompt
    running one of the tools followed by its connection error (a client that never ran) is perftest too."""
    lines = [strip_prefix(line.strip(), limit=1)[0].strip() for line in head.splitlines()[:4000]]
    if any(TITLE_RX.match(line) for line in lines) and any(KEY_RX.match(line) for line in lines):
        return 60
    if any(BW_HEAD_RX.match(line) or LAT_HEAD_RX.match(line) for line in lines):
        return 55
    for i, line in enumerate(lines):
        match = PROMPT_RX.match(line)
        if (
            match
            and TOOL_RX.search(match.group("command"))
            and any(ERROR_RX.match(a) for a in lines[i + 1 : i + 4])
        ):
            return 40
    return 0


def header_pairs(body: str) -> list[tuple[str, str]]:
    """The `Key : value` pairs of one header line, as printed (two to a line, tab or blank separated)."""
    found = list(KEY_RX.finditer(body))
    pairs = []
    for i, match in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(body)
        pairs.append((match.group(1), body[match.end() : end].strip()))
    return pairs


def command_facts(command: str) -> dict[str, str]:
    """What a command line says: the tool, its device, IB port, TCP port and the server it connects to."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    at = next((i for i, w in enumerate(words) if TOOL_RX.search(f" {w}")), None)
    if at is None:
        return {}
    facts = {"test": words[at].rsplit("/", 1)[-1]}
    rest = words[at + 1 :]
    i = 0
    while i < len(rest):
        word, value = rest[i], None
        if word.startswith("--"):
            key, equals, value = word[2:].partition("=")
            if not equals and key in VALUED_LONG:
                value, i = (rest[i + 1] if i + 1 < len(rest) else ""), i + 1
        elif word.startswith("-") and len(word) >= 2:
            key = word[1]
            if key in VALUED_OPTIONS:
                value = word[2:]
                if not value:
                    value, i = (rest[i + 1] if i + 1 < len(rest) else ""), i + 1
        elif word in ("&", "2>&1") or word.startswith((">", "|", "2>")):
            break  # a redirection or a pipe: the command's own words are over
        else:
            key, facts["peer"] = "", word
        if value and key in NAMED_OPTIONS:
            facts[NAMED_OPTIONS[key]] = value
        i += 1
    return facts


@dataclass
class _Table:
    """One printed result table: its columns, the unit of its bandwidths and the report it belongs to."""

    kind: str  # bw, lat, lat_duration
    unit: str | None
    qos: bool
    report: str | None
    closed: bool = False
    rows: int = 0


@dataclass
class _Bench:
    key: int
    line_start: int
    line_end: int
    host: str | None = None
    test: str | None = None
    side: str | None = None
    bidirectional: bool | None = None
    title_line: int | None = None
    table: _Table | None = None
    report: str | None = None  # set by ` Local results: ` / ` Remote results: `
    units: str | None = None
    sizes: list[int] = field(default_factory=list)
    rows: int = 0
    closed: bool = False  # a table ended with its dashed line
    errors: int = 0
    facts: dict[str, str] = field(default_factory=dict)
    printed: set[str] = field(default_factory=set)  # header keys printed

    def status(self) -> str:
        if not self.rows:
            return "failed" if self.errors else "partial"
        return "complete" if self.closed else "partial"


@dataclass
class _Stream:
    """The lines of one host (one launcher prefix, or none): a bench open, and what was said before its
    title (a prompt's command, the server's banner, warnings) waiting for it."""

    host: str | None
    bench: _Bench | None = None
    command: tuple[str, int] | None = None
    prompt_host: str | None = None
    server: bool = False
    first_line: int | None = None
    held: list[tuple[str, str, int]] = field(default_factory=list)  # events before the title


class _Parser:
    def __init__(self) -> None:
        self.out = Emitter()
        self.streams: dict[str | None, _Stream] = {}
        self.next_key = 0

    # benches

    def open(self, stream: _Stream, n: int) -> _Bench:
        self.close(stream, keep_pending=True)
        start = stream.first_line if stream.first_line is not None else n
        bench = _Bench(self.next_key, start, n, host=stream.host or stream.prompt_host)
        self.next_key += 1
        stream.bench = bench
        if stream.server:
            bench.side = "server"
        if stream.command is not None:
            command, line = stream.command
            self.param(bench, "command", command, line)
            bench.facts = command_facts(command)
            bench.test = bench.facts.get("test")
        for kind, text, line in stream.held:
            self.event(bench, kind, text, line)
        stream.command, stream.prompt_host, stream.server, stream.first_line = None, None, False, None
        stream.held = []
        return bench

    def close(self, stream: _Stream, keep_pending: bool = False) -> None:
        bench, stream.bench = stream.bench, None
        if bench is not None:
            self.finish_bench(bench)
        if not keep_pending:
            for kind, text, line in stream.held:
                self.event(None, kind, text, line)
            stream.held, stream.command, stream.server, stream.first_line = [], None, False, None

    def finish_bench(self, bench: _Bench) -> None:
        line = bench.title_line or bench.line_start
        for name, value in (
            ("test", bench.test),
            ("side", bench.side or "client"),
            (
                "bidirectional",
                None if bench.bidirectional is None else ("yes" if bench.bidirectional else "no"),
            ),
            ("units", _units_text(bench.units)),
            ("Device", None if "Device" in bench.printed else bench.facts.get("device")),
            ("sizes", _sizes_text(bench.sizes)),
            ("ib port", bench.facts.get("ib port")),
            ("tcp port", bench.facts.get("tcp port")),
            ("peer", bench.facts.get("peer")),
        ):
            if value is not None:
                self.param(bench, name, value, line)
        status = bench.status()
        if status != "complete":
            if not bench.rows:
                what = "no result row printed" + ("" if bench.errors else " (output cut before the table)")
            else:
                what = f"the result table stops after {bench.rows} row(s), before its closing line"
            self.event(bench, "incomplete", f"output incomplete: {what}", bench.line_end)
        self.out.add(
            "benches",
            {
                "bench_key": bench.key,
                "tool": TOOL,
                "collective": bench.test,
                "ranks": None,
                "nodes": None,
                "gpus_per_node": None,
                "gpu_name": None,
                "hosts": [bench.host] if bench.host else [],
                "status": status,
                "line_start": bench.line_start,
                "line_end": bench.line_end,
            },
        )

    def finish(self) -> None:
        for stream in self.streams.values():
            self.close(stream)

    def event(self, bench: _Bench | None, kind: str, text: str, n: int) -> None:
        self.out.add(
            "events", {"bench_key": bench.key if bench else None, "line_no": n, "kind": kind, "text": text}
        )

    def param(self, bench: _Bench, name: str, value: str, n: int) -> None:
        self.out.add("bench_params", {"bench_key": bench.key, "name": name, "value": value, "line_no": n})

    # lines

    def stream(self, host: str | None) -> _Stream:
        if host not in self.streams:
            self.streams[host] = _Stream(host)
        return self.streams[host]

    def line(self, n: int, text: str) -> None:
        if not text.strip():
            return
        if "**" in text:
            text = BOLD_NUMBER_RX.sub(r"\1", text)  # a figure a paste set in markdown bold
        if self.handle(self.stream(None), n, text.strip()):
            return
        stripped, host = strip_prefix(text, limit=1)
        if stripped != text and stripped.strip():
            stream = self.stream(host) if host else self.stream(None)
            if self.handle(stream, n, stripped.strip()):
                return
        elif stripped != text:
            return  # a launcher prefix on a blank line
        self.out.add("unparsed", {"line_no": n, "text": text})

    def handle(self, stream: _Stream, n: int, body: str) -> bool:
        bench = stream.bench
        if match := TITLE_RX.match(body):
            self.title(stream, n, match)
            return True
        if match := PROMPT_RX.match(body):
            command = match.group("command").strip()
            if command and not TOOL_RX.search(command):
                return False  # another command at a prompt: not perftest's
            self.close(stream)
            stream.prompt_host = match.group("host")
            stream.command = (command, n) if command else None
            stream.first_line = n if command else None
            return True
        if bench is not None and bench.table is not None and ROW_RX.match(body):
            return self.row(bench, n, body)
        if (
            bench is not None
            and bench.title_line is not None
            and not bench.rows
            and bench.table is None
            and KEY_RX.match(body)
            and (pairs := header_pairs(body))
        ):
            for key, value in pairs:
                self.param(bench, key, value, n)
                bench.printed.add(key)
            bench.line_end = n
            return True
        if (match := BW_HEAD_RX.match(body)) or LAT_HEAD_RX.match(body) or LAT_DUR_HEAD_RX.match(body):
            bench = bench or self.open(stream, n)
            self.result_header(bench, match, body, n)
            return True
        return self.other(stream, n, body)

    def title(self, stream: _Stream, n: int, match: re.Match[str]) -> None:
        bench = stream.bench
        if bench is None or bench.title_line is not None:
            bench = self.open(stream, n)
        bench.title_line, bench.line_end = n, n
        kind = "bw" if match.group("kind") == "BW" else "lat"
        bench.bidirectional = bool(match.group("bi")) if kind == "bw" else None
        printed = f"ib_{VERBS[match.group('verb')]}_{kind}"
        if bench.test is None or not bench.test.startswith("ib_"):
            bench.test = printed
        self.param(bench, "title", match.group(0).strip(), n)

    def result_header(self, bench: _Bench, match: re.Match[str] | None, body: str, n: int) -> None:
        if match is not None:
            unit = match.group("unit")
            bench.units = bench.units or unit
            bench.table = _Table("bw", unit, bool(match.group("sl")), bench.report)
        else:
            kind = "lat" if LAT_HEAD_RX.match(body) else "lat_duration"
            bench.units = bench.units or "usec"
            bench.table = _Table(kind, None, False, bench.report)
        bench.line_end = n

    def row(self, bench: _Bench, n: int, body: str) -> bool:
        table = bench.table
        assert table is not None
        cells = body.split()
        need = {"bw": 6 if table.qos else 5, "lat": 9, "lat_duration": 4}[table.kind]
        if len(cells) < need:
            return False
        size, iters = int(cells[0]), int(cells[2 if table.qos else 1])
        values = [float(c) for c in cells]
        record: dict[str, Any] = {"bench_key": bench.key, "size_bytes": size, "iters": iters}
        record["report"] = table.report
        keys = ("bw_peak_gbps", "bw_avg_gbps", "msg_rate_mpps", "t_min_us", "t_max_us", "t_typical_us")
        record |= dict.fromkeys(keys)
        record |= dict.fromkeys(("t_avg_us", "t_stdev_us", "t_p99_us", "t_p999_us", "tps"))
        if table.kind == "bw":
            factor = UNIT_FACTOR[table.unit or "MB/sec"]
            peak, avg, rate = values[3:6] if table.qos else values[2:5]
            record |= {"bw_peak_gbps": peak * factor, "bw_avg_gbps": avg * factor, "msg_rate_mpps": rate}
        elif table.kind == "lat":
            names = (
                "t_min_us",
                "t_max_us",
                "t_typical_us",
                "t_avg_us",
                "t_stdev_us",
                "t_p99_us",
                "t_p999_us",
            )
            record |= dict(zip(names, values[2:9], strict=True))
        else:
            record |= {"t_avg_us": values[2], "tps": values[3]}
        record["line_no"] = n
        self.out.add("perftest", record)
        table.rows += 1
        bench.rows += 1
        bench.line_end = n
        if size not in bench.sizes:
            bench.sizes.append(size)
        return True

    def other(self, stream: _Stream, n: int, body: str) -> bool:
        bench = stream.bench
        if DASHES_RX.match(body):
            if bench is not None:
                bench.line_end = n
                if bench.table is not None and bench.table.rows:
                    bench.table.closed, bench.closed = True, True
                    bench.table = None
            return True
        if STARS_RX.match(body):
            return True
        if BANNER_RX.match(body):
            if bench is not None and bench.title_line is not None:
                self.close(stream, keep_pending=True)
            stream.server = True
            stream.first_line = stream.first_line if stream.first_line is not None else n
            return True
        if match := REPORT_RX.match(body):
            if bench is not None:
                bench.report, bench.line_end = match.group(1).lower(), n
            return True
        if ADDRESS_RX.match(body) or NOTE_RX.match(body):
            if bench is not None:
                bench.line_end = n
            return True
        if CPU_FREQ_RX.match(body) or WARNING_RX.match(body):
            self.said(stream, "warning", body, n)
            return True
        if ERROR_RX.match(body):
            if bench is None and (stream.command is not None or stream.server):
                bench = self.open(stream, n)  # a run that stopped before its title
            if bench is not None:
                bench.errors += 1
                bench.line_end = n
            self.said(stream, "error", body, n)
            return True
        return False

    def said(self, stream: _Stream, kind: str, text: str, n: int) -> None:
        """An event of the open bench, or held for the one whose title follows."""
        if stream.bench is not None:
            stream.bench.line_end = n
            self.event(stream.bench, kind, text, n)
        else:
            stream.held.append((kind, text, n))
            stream.first_line = stream.first_line if stream.first_line is not None else n


def _units_text(units: str | None) -> str | None:
    if units is None or units == "usec":
        return units
    return f"{units} (stored as GB/s, 1e9 bytes/s)"


def _sizes_text(sizes: list[int]) -> str | None:
    if not sizes:
        return None
    if len(sizes) == 1:
        return str(sizes[0])
    return f"{min(sizes)}-{max(sizes)} ({len(sizes)} sizes)"


@guarded
def parse(source: LineSource) -> Iterator[Batch]:
    return drive(_Parser(), source)
