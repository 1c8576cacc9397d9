"""The PyTorch `all_reduce_bench.py` script (torch.distributed all-reduce of one large fp32 tensor).

Two generations of the script print differently, and both land in `collectives` (type float, redop sum,
placement in-place: `dist.all_reduce` works in place):

- The early per-rank version (jeffra's gist, BigScience `experiments/bandwidth`): every rank prints
  `N data size: 4.0 GB`, then per trial `N:` / ` duration: 0.0483 sec` / ` algo throughput: ... bps,
  ... Gbps` / ` busbw: ... Gbps`. Its "algo throughput" is 2·S/t in bits per second (the script counts
  the payload twice), so nccl-tests' algbw S/t (doc/PERFORMANCE.md) in GB/s is bps / 16 / 1e9; its busbw
  is S/t · 2(n-1)/n in bits, / 8 for GB/s. One row per printed busbw line. Ranks print concurrently and
  their lines interleave, so a busbw is paired with the throughput it was computed from (busbw = throughput
  x (n-1)/n) and a throughput with the duration that reproduces the payload; time_us stays NULL when no
  duration matches.
- The later version (ml-engineering): rank 0 prints `The average bandwidth of all_reduce with a 4.0GB
  payload (5 trials, 16 ranks):` then ` algbw: X GBps (Y Gbps)` and ` busbw: X GBps (Y Gbps)`: one row,
  time NULL (not printed).

ranks come from the rank numbers printed (or the summary), hosts from the `host:pid:tid [dev] NCCL ...`
prefixes of NCCL's own lines, nodes from the hosts; the GPU name is not printed. A bench is `complete`
when every rank printed the same number of results (or the summary has both figures), else `partial`.
NCCL WARN lines and tracebacks are events; NCCL INFO lines, launcher banners and the like are `unparsed`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tracelog.parsers.base import (
    NCCL_WARN_RX,
    Batch,
    Emitter,
    LineSource,
    as_rounded,
    drive,
    guarded,
    strip_prefix,
)

FORMAT = "allreduce_bench"
VERSION = "1"
TOOL = "all_reduce_bench"

NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
DATA_SIZE_RX = re.compile(r"^(\d+) data size:\s*" + NUM + r"\s*GB$")
RANK_RX = re.compile(r"^(\d+):$")
DURATION_RX = re.compile(r"^duration:\s*" + NUM + r"\s*sec$")
TPUT_RX = re.compile(r"^algo throughput:\s*" + NUM + r"\s*bps,\s*" + NUM + r"\s*Gbps$")
BUSBW_RX = re.compile(r"^busbw:\s*" + NUM + r"\s*Gbps$")
SUMMARY_RX = re.compile(
    r"^The average bandwidth of all_reduce with a\s*" + NUM + r"\s*GB payload \((\d+) trials, (\d+) ranks\):$"
)
SUMMARY_BW_RX = re.compile(r"^(algbw|busbw):\s*" + NUM + r"\s*GBps\b")
NOISE_RX = re.compile(r"^(?:ignore me\b|local_rank:\s*\d+$|Trial \d+$|\d+$|Starting benchmark\.\.\.$)")
NCCL_LINE_RX = re.compile(r"^([\w.-]+):(\d+):(\d+) \[(\d+)\] NCCL (INFO|WARN)")
NCCL_VERSION_RX = re.compile(r"^NCCL version\s+(\S+)")
ERROR_RX = re.compile(r"Traceback \(most recent call last\)|\b\w*Error\b|Segmentation fault|\bKilled\b")
FP32_BYTES = 4
PAYLOAD_TOLERANCE = 0.01
BUSBW_TOLERANCE = 0.001  # busbw and throughput are printed with 4 decimals in Gbps
PENDING_MAX = 256


def detect(head: str) -> int:
    """A whole line the parser reads as a result: prose that names the lines (`algo throughput: ...
    bps`) or quotes them inline is not output of the script."""
    score = 0
    for line in head.split("\n"):
        if "bps" not in line and "payload" not in line and "data size" not in line:
            continue
        for body in {line.strip(), strip_prefix(line)[0].strip()}:
            if TPUT_RX.match(body) or SUMMARY_RX.match(body):
                return 50
            if DATA_SIZE_RX.match(body):
                score = 40
    return score


@dataclass
class _Bench:
    key: int
    line_start: int
    line_end: int
    size_bytes: int | float | None = None  # a float only when not finite (reported as a bad value)
    ranks_seen: Counter[int] = field(default_factory=Counter)  # rank -> result blocks started
    ranks_declared: int | None = None
    hosts: dict[str, None] = field(default_factory=dict)
    rows: int = 0
    summary: set[str] = field(default_factory=set)

    def record(self) -> dict[str, Any]:
        ranks = self.ranks_declared or (max(self.ranks_seen) + 1 if self.ranks_seen else None)
        hosts = list(self.hosts)
        nodes = len(hosts) or None
        return {
            "bench_key": self.key,
            "tool": TOOL,
            "collective": "all_reduce",
            "ranks": ranks,
            "nodes": nodes,
            "gpus_per_node": ranks // nodes if ranks and nodes and ranks % nodes == 0 else None,
            "dtype": "float",
            "redop": "sum",
            "hosts": hosts,
            "status": self.status(),
            "line_start": self.line_start,
            "line_end": self.line_end,
        }

    def status(self) -> str:
        if self.summary:
            return "complete" if self.summary == {"algbw", "busbw"} else "partial"
        blocks = set(self.ranks_seen.values())
        if self.rows and len(blocks) == 1 and sum(self.ranks_seen.values()) == self.rows:
            return "complete"
        return "partial" if self.rows else "failed"


class _Parser:
    def __init__(self) -> None:
        self.out = Emitter()
        self.bench: _Bench | None = None
        self.next_key = 0
        # Lines of concurrent ranks interleave: durations and throughputs wait here until a later line
        # matches them (a duration reproduces the payload with a throughput; a busbw is its throughput x
        # (n-1)/n, the script's 2(n-1)/n over its doubled payload).
        self.durations: list[float] = []
        self.tputs: list[tuple[float, float | None]] = []  # (bits per second, its duration)
        self.summary_algbw: float | None = None
        self.hosts: dict[str, None] = {}  # seen before the bench opened
        self.pending: list[tuple[str, str, int]] = []

    def current(self, n: int) -> _Bench:
        if self.bench is None:
            self.bench = _Bench(self.next_key, n, n)
            self.next_key += 1
            self.bench.hosts.update(self.hosts)
            for name, value, at in self.pending:
                self.param(name, value, at)
            self.pending = []
        self.bench.line_end = n
        return self.bench

    def finish(self) -> None:
        self.close()

    def close(self) -> None:
        bench, self.bench = self.bench, None
        if bench is not None:
            self.out.add("benches", bench.record())

    def param(self, name: str, value: str, n: int) -> None:
        if self.bench is None:
            self.pending.append((name, value, n))
            return
        self.out.add(
            "bench_params", {"bench_key": self.bench.key, "name": name, "value": value, "line_no": n}
        )

    def line(self, n: int, text: str) -> None:
        if not text.strip():
            return
        if self.handle(n, text.strip()):
            return
        body = text
        for _ in range(3):  # one prefix at a time: `[host:0]: algbw: 44.9 GBps` is not two prefixes
            body, before = strip_prefix(body, limit=1)[0], body
            if body == before:
                break
            if not body.strip():
                return  # a launcher prefix on a blank line
            if self.handle(n, body.strip()):
                return
        self.out.add("unparsed", {"line_no": n, "text": text})

    def handle(self, n: int, body: str) -> bool:
        if match := NCCL_LINE_RX.match(body):
            host = match.group(1)
            self.hosts[host] = None
            if self.bench is not None:
                self.bench.hosts[host] = None
            if match.group(5) == "WARN":
                self.event("nccl_warn", body, n)
                return True
            return False  # NCCL INFO: unparsed, its host noted
        if match := DATA_SIZE_RX.match(body):
            bench = self.bench
            if bench is not None and bench.rows:
                self.close()
            bench = self.current(n)
            bench.size_bytes = as_rounded(float(match.group(2)) * 1e9)
            bench.ranks_seen.setdefault(int(match.group(1)), 0)
            return True
        if match := RANK_RX.match(body):
            self.current(n).ranks_seen[int(match.group(1))] += 1
            return True
        if match := DURATION_RX.match(body):
            self.current(n)
            self.durations = [*self.durations[-PENDING_MAX:], float(match.group(1))]
            return True
        if match := TPUT_RX.match(body):
            self.throughput(self.current(n), float(match.group(1)))
            return True
        if match := BUSBW_RX.match(body):
            self.result(n, float(match.group(1)) / 8)
            return True
        if match := SUMMARY_RX.match(body):
            if self.bench is not None and (self.bench.rows or self.bench.summary):
                self.close()
            bench = self.current(n)
            bench.size_bytes = as_rounded(float(match.group(1)) * 1e9)
            bench.ranks_declared = int(match.group(3))
            self.param("trials", match.group(2), n)
            return True
        if (match := SUMMARY_BW_RX.match(body)) and self.bench is not None and self.bench.ranks_declared:
            self.summary(n, match.group(1), float(match.group(2)))
            return True
        if match := NCCL_VERSION_RX.match(body):
            self.param("NCCL version", match.group(1), n)
            return True
        if NOISE_RX.match(body):
            return True
        if NCCL_WARN_RX.search(body) or ERROR_RX.search(body):
            self.event("nccl_warn" if NCCL_WARN_RX.search(body) else "error", body, n)
            return True
        return False

    def event(self, kind: str, text: str, n: int) -> None:
        key = self.bench.key if self.bench else None
        self.out.add("events", {"bench_key": key, "line_no": n, "kind": kind, "text": text})

    def throughput(self, bench: _Bench, bps: float) -> None:
        """Pair a throughput with the pending duration that reproduces the payload: 2·S = bps/8 · t."""
        duration = None
        if bench.size_bytes:
            size = bench.size_bytes
            for k, t in enumerate(self.durations):
                if abs(bps * t / 16 - size) <= PAYLOAD_TOLERANCE * size:
                    duration = self.durations.pop(k)
                    break
        self.tputs = [*self.tputs[-PENDING_MAX:], (bps, duration)]

    def result(self, n: int, busbw_gbps: float) -> None:
        bench = self.current(n)
        ranks = max(bench.ranks_seen) + 1 if bench.ranks_seen else None
        match = None
        if self.tputs:
            if ranks and ranks > 1:
                expected = busbw_gbps * 8e9 * ranks / (ranks - 1)
                k = min(range(len(self.tputs)), key=lambda i: abs(self.tputs[i][0] - expected))
                if abs(self.tputs[k][0] - expected) <= BUSBW_TOLERANCE * expected:
                    match = self.tputs.pop(k)
            else:
                match = self.tputs.pop(0)
        bps, duration = match if match else (None, None)
        algbw = bps / 16 / 1e9 if bps is not None else None
        size = bench.size_bytes
        if size is None and bps is not None and duration:
            size = round(bps * duration / 16)
        self.row(bench, size, duration * 1e6 if duration else None, algbw, busbw_gbps, n)

    def summary(self, n: int, which: str, value_gbps: float) -> None:
        bench = self.current(n)
        bench.summary.add(which)
        if which == "algbw":
            self.summary_algbw = value_gbps
            return
        self.row(bench, bench.size_bytes, None, self.summary_algbw, value_gbps, n)
        self.summary_algbw = None

    def row(
        self,
        bench: _Bench,
        size: int | float | None,
        time_us: float | None,
        algbw: float | None,
        busbw: float,
        n: int,
    ) -> None:
        if size is None:
            self.event("warning", "result without a payload size: not stored", n)
            return
        bench.rows += 1
        self.out.add(
            "collectives",
            {
                "bench_key": bench.key,
                "size_bytes": size,
                "count": size // FP32_BYTES,
                "type": "float",
                "redop": "sum",
                "root": None,
                "placement": "in-place",
                "time_us": time_us,
                "algbw_gbps": algbw,
                "busbw_gbps": busbw,
                "wrong": None,
                "line_no": n,
            },
        )


@guarded
def parse(source: LineSource) -> Iterator[Batch]:
    return drive(_Parser(), source)
