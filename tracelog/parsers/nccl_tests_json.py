"""nccl-tests `-J file.json` reports (JSON file version 3, nccl-tests 2.17+), read as a stream.

The structure is what src/util.cu writes, in this order: `version`, `start_time`, `args` (the command
line), `env` (every environment variable), `nccl_version`, `config` (the `# nThread ...` fields, flags as
the strings "true"/"false", and `devices`: one object per rank with `rank`, `group`, `pid`, `hostname`,
`device`, `device_hex`, `device_info`), `results` (one object per size: `size`, `count`, `type`, `redop`,
`root` as a padded string, then per placement `out_of_place` / `in_place` with `time` or, under `-C 1`,
`cpu_time`, `alg_bw`, `bus_bw`, `nwrong`, and under `-I 1` `out_of_place_per_iter` / `in_place_per_iter`
with `skipped_iterations`, `min_us` ... `cv_pct`, `times_us` (max over every GPU and process per
iteration) and, with more than one process, `per_process_max_times_us` (one list per process, max over
its GPUs)), `out_of_bounds`, `average_bus_bandwidth`, `errors`, `end_time`. NaN is written as the string
"nan", infinities bare (`%lf`).

Where it lands: one bench (as the text parser's), `bench_devices`, `bench_params` (config, command,
times, NCCL_* variables of `env`; other variables are not kept), `collectives` (with the per-iteration
summary columns) and `collective_iterations` (every per-iteration number, `process` NULL for `times_us`).
The per-iteration arrays are never held: they leave as frames of `FRAME_ROWS` rows. A file that stops
early keeps what it had and says so (`truncated` event, bench `partial`); a value that is not of its
field's kind is NULL with a `bad_value` event; something that is not JSON is the project's error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Generator, Iterator
from typing import Any

import polars as pl

from tracelog.errors import TracelogError
from tracelog.parsers.base import Batch, Emitter, LineSource, guarded
from tracelog.parsers.json_events import Event, JsonEvents, Truncated
from tracelog.parsers.nccl_tests import COMMAND_RX
from tracelog.parsers.nccl_tests_bench import TOOL, Bench

FORMAT = "nccl_tests_json"
VERSION = "1"
READS_LINES = False  # one document, often without a newline: growth is never "a line still being written"

FRAME_ROWS = 50_000  # per-iteration numbers gathered before they leave as one frame
# Items a small value (config, args, a result's scalars) may hold; past it the rest is read and dropped
# with an event. 100k ranks' device records is past any machine nccl-tests has run on.
MAX_VALUE_ITEMS = 100_000
PLACEMENT_KEYS = {"out_of_place": "out-of-place", "in_place": "in-place"}
PER_ITER_KEYS = {"out_of_place_per_iter": "out-of-place", "in_place_per_iter": "in-place"}
SUMMARY_COLUMNS = {
    "min_us": "i_min_us",
    "max_us": "i_max_us",
    "avg_us": "i_avg_us",
    "p50_us": "i_p50_us",
    "p95_us": "i_p95_us",
    "p99_us": "i_p99_us",
    "stdev_us": "i_stdev_us",
    "cv_pct": "i_cv_pct",
}
ITERATION_SCHEMA = {
    "bench_key": pl.Int32,
    "size_bytes": pl.Int64,
    "type": pl.String,
    "redop": pl.String,
    "root": pl.Int32,
    "placement": pl.String,
    "process": pl.Int64,
    "host": pl.String,
}


def detect(head: str) -> int:
    """The writer's first keys: `{"version":3,"start_time":...,"args":[...` (compact, or pretty-printed)."""
    body = head.lstrip()
    if not body.startswith("{") or '"version"' not in body[:200]:
        return 0
    if '"nccl_version"' in head or ('"args"' in head and COMMAND_RX.search(head.replace('"', " "))):
        return 60
    return 0


def number(value: Any) -> float | None:
    """A JSON value as a float: the writer's "nan" string is NaN; anything else not a number is None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:  # an integer past any float (hundreds of digits): no figure, not a crash
            return None
    if isinstance(value, str) and value.strip().lower() in ("nan", "-nan", "inf", "-inf"):
        return float(value.strip().lower().lstrip("-")) * (-1 if value.strip().startswith("-") else 1)
    return None


def integer(value: Any) -> int | None:
    """A count, size or index: an int, a float without fraction, or a numeric string (`root`)."""
    if isinstance(value, str):
        value = value.strip()
        return int(value) if value.lstrip("-").isdigit() and len(value) < 20 else None
    as_float = number(value)
    if as_float is None or not math.isfinite(as_float) or as_float != int(as_float) or abs(as_float) >= 2**63:
        return None  # past int64 (a size of 1e40): no figure, as for any number no column can hold
    return int(as_float)


class _Iterations:
    """Per-iteration rows gathered as columns across arrays, out as one frame of about FRAME_ROWS rows
    (a frame per array costs more in polars than the array's numbers)."""

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {
            name: [] for name in [*ITERATION_SCHEMA, "iteration", "time_us"]
        }
        self.rows = 0

    def add(self, constants: dict[str, Any], times: list[float | None], start: int) -> None:
        for name in ITERATION_SCHEMA:
            self.columns[name].extend([constants.get(name)] * len(times))
        self.columns["iteration"].extend(range(start, start + len(times)))
        self.columns["time_us"].extend(times)
        self.rows += len(times)

    def flush(self) -> Batch:
        schema = {**ITERATION_SCHEMA, "iteration": pl.Int64, "time_us": pl.Float64}
        # strict=False: a value the column's type cannot hold (a root past int32) is null, not a crash;
        # the same value in the bench's `collectives` row is range-checked into a `bad_value` event
        frame = pl.DataFrame(self.columns, schema=schema, strict=False)
        self.columns = {name: [] for name in schema}
        self.rows = 0
        return Batch("collective_iterations", frame)


class _Reader:
    def __init__(self, source: LineSource) -> None:
        self.source = source
        self.events = JsonEvents(self._read, source.name)
        self.stream = iter(self.events)
        self.out = Emitter()
        self.bench = Bench(0, 1, 1)
        self.devices: list[dict[str, Any]] = []
        self.per_process = (
            1  # GPUs per process: nthreads x ngpus (src/common.cu: rank = proc*nThreads*nGpus+i)
        )
        self.results = 0
        self.pending = _Iterations()

    def _read(self, size: int) -> bytes:
        chunk = self.source.stream.read(size)
        self.source.bytes_read += len(chunk)
        for callback in self.source.on_bytes:
            callback(chunk)
        return chunk

    def next(self) -> Event:
        return next(self.stream)

    # -- rows ------------------------------------------------------------------------------------------
    def param(self, name: str, value: Any) -> None:
        text = value if isinstance(value, str) else json.dumps(value)
        row = {"bench_key": 0, "name": name, "value": text[:2000], "line_no": self.events.line}
        self.out.add("bench_params", row)

    def event(self, kind: str, text: str) -> None:
        self.out.add("events", {"bench_key": 0, "line_no": self.events.line, "kind": kind, "text": text})

    def value(self, first: Event) -> Any:
        """The whole value that starts with `first`, keeping at most MAX_VALUE_ITEMS items."""
        kept = [0]

        def build(event: Event) -> Any:
            kind, payload = event
            if kind == "value":
                return payload
            if kind == "start_array":
                items: list[Any] = []
                while (item := self.next())[0] != "end_array":
                    built = build(item)
                    kept[0] += 1
                    if kept[0] <= MAX_VALUE_ITEMS:
                        items.append(built)
                return items
            members: dict[str, Any] = {}
            while (key := self.next())[0] != "end_map":
                built = build(self.next())
                kept[0] += 1
                if kept[0] <= MAX_VALUE_ITEMS:
                    members[str(key[1])] = built
            return members

        built = build(first)
        if kept[0] > MAX_VALUE_ITEMS:
            self.event("value_cut", f"a value of {kept[0]} items; the first {MAX_VALUE_ITEMS} were kept")
        return built

    # -- the document ----------------------------------------------------------------------------------
    def run(self) -> Iterator[Batch]:
        try:
            if self.next()[0] != "start_map":
                raise TracelogError("not an nccl-tests JSON report: the document is not an object")
            while (member := self.next())[0] != "end_map":
                yield from self.member(str(member[1]))
                if self.out.due():
                    yield from self.out.flush()
            next(self.stream, None)  # only checks that nothing follows the document
        except Truncated as exc:
            self.event("truncated", f"{exc.message}; kept the {self.results} result(s) read before it")
            self.bench.failed = not self.results
        except TracelogError as exc:
            raise TracelogError(exc.message, self.source.name, self.events.line) from None
        self.source.lines_total = self.events.line
        self.finish()
        if self.pending.rows:
            yield self.pending.flush()
        yield from self.out.flush()

    def member(self, key: str) -> Iterator[Batch]:
        first = self.next()
        if key == "results" and first[0] == "start_array":
            while (item := self.next())[0] != "end_array":
                if item[0] == "start_map":
                    yield from self.result()
                else:
                    self.event("bad_value", f"a result that is not an object: {self.value(item)!r:.80}")
            return
        if key == "env" and first[0] == "start_array":
            while (item := self.next())[0] != "end_array":
                entry = self.value(item)
                if isinstance(entry, str) and entry.startswith("NCCL") and "=" in entry:
                    name, _, setting = entry.partition("=")
                    self.param(name, setting)
            return
        value = self.value(first)
        if key == "config" and isinstance(value, dict):
            self.config(value)
        elif key == "args" and isinstance(value, list):
            command = " ".join(str(a) for a in value)
            self.param("command", command)
            if match := COMMAND_RX.search(" " + command):
                self.bench.collective, self.bench.collective_source = match.group(1), "command"
        elif key == "out_of_bounds" and isinstance(value, dict):
            self.bench.out_of_bounds = integer(value.get("count"))
            self.param("out_of_bounds", value)
        elif key == "average_bus_bandwidth" and isinstance(value, dict):
            self.bench.avg_busbw = number(value.get("bandwidth"))
            self.bench.footer = True
            self.param("average_bus_bandwidth", value)
        elif key == "errors":
            for error in value if isinstance(value, list) else [value]:
                if error:
                    self.event("error", str(error))
                    self.bench.failed = True
        else:
            self.param("json " + key if key == "version" else key, value)

    def config(self, config: dict[str, Any]) -> None:
        devices = config.pop("devices", [])
        for name, setting in config.items():
            self.param(name, setting)
        self.per_process = max(
            1, (integer(config.get("nthreads")) or 1) * (integer(config.get("ngpus")) or 1)
        )
        for device in devices if isinstance(devices, list) else []:
            if not isinstance(device, dict):
                continue
            host = device.get("hostname") if isinstance(device.get("hostname"), str) else None
            gpu = device.get("device_info") if isinstance(device.get("device_info"), str) else None
            group = integer(device.get("group"))
            self.devices.append(device)
            self.bench.devices.append((host or "", gpu or ""))
            self.bench.groups.append(group)
            row: dict[str, Any] = {
                "bench_key": 0,
                "rank": integer(device.get("rank")),
                "device": integer(device.get("device")),
            }
            row |= {"host": host, "pid": integer(device.get("pid")), "bus_id": device.get("device_hex")}
            row |= {"gpu_name": gpu, "comm_group": group, "line_no": self.events.line}
            self.out.add("bench_devices", row)

    def host_of(self, process: int | None) -> str | None:
        rank = None if process is None else process * self.per_process
        if rank is None or rank >= len(self.devices):
            return None
        host = self.devices[rank].get("hostname")
        return host if isinstance(host, str) else None

    # -- one size --------------------------------------------------------------------------------------
    def result(self) -> Iterator[Batch]:
        line = self.events.line
        fields: dict[str, Any] = {}
        placements: dict[str, dict[str, Any]] = {}
        while (member := self.next())[0] != "end_map":
            key = str(member[1])
            if key in PER_ITER_KEYS:
                first = self.next()
                if first[0] != "start_map":
                    self.event("bad_value", f"{key} is not an object")
                    self.value(first)
                    continue
                summary = yield from self.per_iteration(PER_ITER_KEYS[key], fields)
                placements.setdefault(PER_ITER_KEYS[key], {}).update(summary)
            elif key in PLACEMENT_KEYS:
                body = self.value(self.next())
                if isinstance(body, dict):
                    placements.setdefault(PLACEMENT_KEYS[key], {}).update(body)
            else:
                fields[key] = self.value(self.next())
        self.results += 1
        self.collectives(fields, placements, line)

    def keys_of(self, fields: dict[str, Any]) -> dict[str, Any] | None:
        size = integer(fields.get("size"))
        if size is None or size < 0:
            return None
        root = integer(fields.get("root"))
        redop = fields.get("redop") if isinstance(fields.get("redop"), str) else None
        return {
            "size_bytes": size,
            "type": fields.get("type") if isinstance(fields.get("type"), str) else None,
            "redop": None if redop in (None, "none") else redop,
            "root": None if root is None or root < 0 else root,
        }

    def collectives(self, fields: dict[str, Any], placements: dict[str, dict[str, Any]], line: int) -> None:
        keys = self.keys_of(fields)
        if keys is None:
            self.event("bad_value", f"a result without a size ({fields.get('size')!r:.40}): skipped")
            return
        if keys["type"]:
            self.bench.types[keys["type"]] = None
        if keys["redop"]:
            self.bench.redops[keys["redop"]] = None
        for placement in ("out-of-place", "in-place"):
            body = placements.get(placement)
            if not body:
                continue
            wrong = number(body.get("nwrong"))
            count = None if wrong is None or not math.isfinite(wrong) or wrong < 0 else int(wrong)
            if count is not None:
                self.bench.wrong_total = (self.bench.wrong_total or 0) + count
            algbw, busbw = number(body.get("alg_bw")), number(body.get("bus_bw"))
            if algbw and busbw is not None and (self.bench.best is None or algbw > self.bench.best[0]):
                self.bench.best = (algbw, busbw)
            row = {"bench_key": 0, **keys, "count": integer(fields.get("count")), "placement": placement}
            row |= {"time_us": number(body.get("time")), "cpu_time_us": number(body.get("cpu_time"))}
            row |= {"algbw_gbps": algbw, "busbw_gbps": busbw, "wrong": count, "line_no": line}
            row |= {column: number(body.get(name)) for name, column in SUMMARY_COLUMNS.items()}
            row["i_skipped"] = integer(body.get("skipped_iterations"))
            self.out.add("collectives", row)
        self.bench.rows += 1
        self.bench.last_size = keys["size_bytes"]

    def per_iteration(self, placement: str, fields: dict[str, Any]) -> Generator[Batch, None, dict[str, Any]]:
        """The `*_per_iter` object after its `{`: summary scalars returned, the arrays streamed out."""
        summary: dict[str, Any] = {}
        while (member := self.next())[0] != "end_map":
            key, first = str(member[1]), self.next()
            if key == "times_us" and first[0] == "start_array":
                yield from self.times(placement, fields, None)
            elif key == "per_process_max_times_us" and first[0] == "start_array":
                process = 0
                while (row := self.next())[0] != "end_array":
                    if row[0] == "start_array":
                        yield from self.times(placement, fields, process)
                    else:
                        self.value(row)
                    process += 1
            else:
                summary[key] = self.value(first)
        return summary

    def times(self, placement: str, fields: dict[str, Any], process: int | None) -> Iterator[Batch]:
        """One array of per-iteration times after its `[`, out as frames of at most FRAME_ROWS rows."""
        keys = self.keys_of(fields)
        if keys is None:
            self.event("bad_value", "per-iteration times before their result's size: skipped")
        constants = {**(keys or {}), "bench_key": 0, "placement": placement, "process": process}
        constants["host"] = self.host_of(process)
        start, odd = 0, 0
        for run in self.events.numbers():
            bad = sum(1 for v in run if v is None or not 0 <= v < math.inf)
            if bad:
                odd += bad
                run = [v if v is not None and 0 <= v < math.inf else None for v in run]
            at = 0
            while keys is not None and at < len(run):
                take = min(len(run) - at, FRAME_ROWS - self.pending.rows)
                self.pending.add(constants, run[at : at + take], start + at)
                at += take
                if self.pending.rows >= FRAME_ROWS:
                    yield self.pending.flush()
            start += len(run)
        if odd:
            who = "all processes" if process is None else f"process {process}"
            self.event("bad_value", f"{odd} per-iteration time(s) of {who} were not numbers: stored as NULL")

    def finish(self) -> None:
        bench = self.bench
        bench.line_end = self.events.line
        bench.infer_collective()
        if bench.collective_source and bench.collective_source != "command":
            self.param("collective_source", bench.collective_source)
        if len(set(bench.groups)) > 1:
            self.param("comm_groups", len(set(bench.groups)))
            self.param("world_ranks", len(bench.devices))
        record = bench.record()
        record["hosts"] = [h for h in record["hosts"] if h]
        record["gpu_name"] = record["gpu_name"] or None
        record["tool"] = TOOL
        self.out.add("benches", record)


@guarded
def parse(source: LineSource) -> Iterator[Batch]:
    return _Reader(source).run()
