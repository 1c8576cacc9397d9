"""rccl-tests' own results file (`--output_file FILE --output_format json|csv`, `-x FILE -Z json|csv`).

Not the `-J` report nccl-tests writes (`nccl_tests_json`): rccl-tests added its own writer first
(ROCm/rccl-tests#93, 2024), one record per size and placement, and kept it beside the `-J` one it later
synced from nccl-tests. What it writes, by the published examples:

- JSON, at first one object per line with no separator between them (the fragments of #93:
  `{"#wrong":"0","algBw":0.0533,"busBw":0.0800,"gpus":4,"inPlace":0,"name":"AllReduce","redop":"sum",
  "size":1024,"time":19.18,"type":"float"}`), since ROCm/rccl-tests#140 (2025) the same objects as one JSON
  list. Builds with MPI_SUPPORT write `nodes`, `ranks`, `ranksPerNode`, `gpusPerRank` and `numCycle`
  instead of `gpus`.
- CSV, a header and one line per record; an MPI build's header is
  `numCycle,collective,ranks,rankspernode,gpusperrank,size,type,redop,inplace,time,algbw,busbw,#wrong`,
  which until ROCm/rocm-systems#6004 named no `nodes` column while every row printed one after
  `collective`: a row one field longer than such a header takes `nodes` there.

Keys are read whatever their case. Where it lands: `collectives` (time in µs, algbw and busbw in GB/s as
nccl-tests defines them, `#wrong` as the row's wrong count; `inPlace` 1 is in-place), one bench per run of
records of one collective whose sizes do not start again (`AllReduce` -> all_reduce, `AlltoAll` ->
alltoall), its ranks from `gpus` or `ranks` x `gpusPerRank`, nodes and GPUs per node where printed. The
file has no footer: a bench with rows is `complete`, `data_error` with a wrong value, and lines that are no
record are `unparsed`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tracelog.parsers.base import Batch, Emitter, LineSource, drive, guarded

FORMAT = "rccl_tests_report"
VERSION = "1"
TOOL = "rccl-tests"

JSON_DETECT_RX = re.compile(r'^\s*\[?\s*\{\s*"(?:#wrong|algBw|busBw|name|numCycle|nodes|gpus)"\s*:')
CSV_KEYS = {"size", "algbw", "busbw", "#wrong"}
SPECIAL_NAMES = {"alltoall": "alltoall", "alltoallv": "alltoallv", "sendrecv": "sendrecv"}
DECODER = json.JSONDecoder()


def detect(head: str) -> int:
    """A JSON record with the writer's keys first (sorted: `#wrong`, `algBw`, ...), or a CSV header
    naming size, algbw, busbw and #wrong."""
    if JSON_DETECT_RX.match(head) and '"algBw"' in head[:2000] and '"busBw"' in head[:2000]:
        return 60
    first = next((line for line in head.split("\n") if line.strip()), "")
    return 60 if {c.strip().strip('"').lower() for c in first.split(",")} >= CSV_KEYS else 0


def collective_of(name: str) -> str | None:
    """rccl-tests' test name as the collective nccl-tests' binaries are named after (`AllReduce` ->
    all_reduce)."""
    flat = name.replace("_", "").lower()
    if not flat.isalpha():
        return None
    if flat in SPECIAL_NAMES:
        return SPECIAL_NAMES[flat]
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", name).lower()


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _integer(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None and number.is_integer() else None


@dataclass
class _Bench:
    key: int
    collective: str | None
    line_start: int
    line_end: int
    ranks: int | None = None
    nodes: int | None = None
    per_node: int | None = None
    rows: int = 0
    wrong_total: int | None = None
    last_size: tuple[int, int] | None = None  # (size, placement flag) of its last record
    types: tuple[str, ...] = ()
    redops: tuple[str, ...] = ()

    def record(self) -> dict[str, Any]:
        return {
            "bench_key": self.key,
            "tool": TOOL,
            "collective": self.collective,
            "ranks": self.ranks,
            "nodes": self.nodes,
            "gpus_per_node": self.per_node,
            "dtype": ",".join(self.types) or None,
            "redop": ",".join(self.redops) or None,
            "status": "data_error" if (self.wrong_total or 0) > 0 else "complete",
            "wrong_total": self.wrong_total,
            "line_start": self.line_start,
            "line_end": self.line_end,
        }


class _Parser:
    def __init__(self) -> None:
        self.out = Emitter()
        self.bench: _Bench | None = None
        self.next_key = 0
        self.header: list[str] | None = None  # the CSV header, lower-cased

    def finish(self) -> None:
        self.close()

    def close(self) -> None:
        if self.bench is not None:
            self.out.add("benches", self.bench.record())
        self.bench = None

    def line(self, n: int, text: str) -> None:
        body = text.strip()
        if not body or body in ("[", "]", "],", ","):
            return
        records = self.json_records(body) if "{" in body else self.csv_record(body)
        if records is None:
            self.out.add("unparsed", {"line_no": n, "text": text})
            return
        for record in records:
            if not self.add(n, {str(k).lower(): v for k, v in record.items()}):
                self.out.add("unparsed", {"line_no": n, "text": text})
                return

    def json_records(self, body: str) -> list[dict[str, Any]] | None:
        """The objects of a line: one fragment, or a list's items with its brackets and commas."""
        records, at = [], 0
        while at < len(body):
            while at < len(body) and body[at] in " \t[],":
                at += 1
            if at == len(body):
                break
            try:
                value, at = DECODER.raw_decode(body, at)
            except json.JSONDecodeError:
                return None
            if not isinstance(value, dict):
                return None
            records.append(value)
        return records or None

    def csv_record(self, body: str) -> list[dict[str, Any]] | None:
        cells = [c.strip().strip('"') for c in body.split(",")]
        lowered = [c.lower() for c in cells]
        if set(lowered) >= CSV_KEYS:
            self.header = lowered
            return []
        header = self.header
        if header is None:
            return None
        if len(cells) == len(header) + 1 and "nodes" not in header and "collective" in header:
            # an MPI build's header before ROCm/rocm-systems#6004: its rows print `nodes` after collective
            at = header.index("collective") + 1
            header = [*header[:at], "nodes", *header[at:]]
        if len(cells) != len(header):
            return None
        return [dict(zip(header, cells, strict=True))]

    def add(self, n: int, record: dict[str, Any]) -> bool:
        size = _integer(record.get("size"))
        name = record.get("name", record.get("collective"))
        if size is None or size < 0 or not isinstance(name, str):
            return False
        in_place = _integer(record.get("inplace")) == 1
        collective = collective_of(name)
        bench = self.bench
        if (
            bench is None
            or bench.collective != collective
            or (bench.last_size is not None and (size, in_place) <= bench.last_size)
        ):
            bench = self.open(n, collective, record)
        wrong = _integer(record.get("#wrong"))
        if wrong is not None and wrong >= 0:
            bench.wrong_total = (bench.wrong_total or 0) + wrong
        type_ = record.get("type") if isinstance(record.get("type"), str) else None
        redop = record.get("redop") if isinstance(record.get("redop"), str) else None
        redop = None if redop in (None, "", "none") else redop
        if type_ and type_ not in bench.types:
            bench.types += (type_,)
        if redop and redop not in bench.redops:
            bench.redops += (redop,)
        self.out.add(
            "collectives",
            {
                "bench_key": bench.key,
                "size_bytes": size,
                "count": _integer(record.get("count")),
                "type": type_,
                "redop": redop,
                "placement": "in-place" if in_place else "out-of-place",
                "time_us": _number(record.get("time")),
                "algbw_gbps": _number(record.get("algbw")),
                "busbw_gbps": _number(record.get("busbw")),
                "wrong": wrong if wrong is not None and wrong >= 0 else None,
                "line_no": n,
            },
        )
        bench.rows += 1
        bench.line_end = n
        bench.last_size = (size, in_place)
        return True

    def open(self, n: int, collective: str | None, record: dict[str, Any]) -> _Bench:
        """A new bench: its placement from the record's `gpus`, or an MPI build's ranks, GPUs per rank and
        ranks per node."""
        self.close()
        bench = _Bench(self.next_key, collective, n, n)
        self.next_key += 1
        per_rank = _integer(record.get("gpusperrank")) or 1
        ranks = _integer(record.get("ranks"))
        bench.ranks = ranks * per_rank if ranks else _integer(record.get("gpus"))
        per_node = _integer(record.get("rankspernode"))
        bench.per_node = per_node * per_rank if per_node else None
        bench.nodes = _integer(record.get("nodes"))
        if bench.nodes is None and bench.ranks and bench.per_node and bench.ranks % bench.per_node == 0:
            bench.nodes = bench.ranks // bench.per_node
        if bench.nodes is None and "gpus" in record and "ranks" not in record:
            bench.nodes, bench.per_node = 1, bench.ranks  # one process drove every GPU: one node
        self.bench = bench
        return bench


@guarded
def parse(source: LineSource) -> Iterator[Batch]:
    return drive(_Parser(), source)
