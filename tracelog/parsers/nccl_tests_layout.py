"""Where the fields of a nccl-tests data line sit (`Layout`), and the figures printed beside the table
(`-S 1` timestamps, `-M 1` memory), as nccl-tests `src/common.cu` and `src/util.cu` print them."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from tracelog.parsers.prefixes import strip_prefix, without_rank_tags

NUMBER_RX = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")
MEMORY_PART_RX = re.compile(r"([A-Za-z][\w-]{0,40})\s+([-\d.]+)\s*(B|KB|MB|GB)\b")
MEMORY_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}  # getMemString: 1024-based

PLACEMENTS = ("out-of-place", "in-place")
PREFIX_NAMES = {"size": "size", "bytes": "size", "count": "count", "n": "count", "type": "type"}
PREFIX_NAMES |= {"redop": "redop", "op": "redop", "root": "root"}
GROUP_NAMES = {"time": "time", "cputime": "time", "algbw": "algbw", "busbw": "busbw"}
GROUP_NAMES |= {"#wrong": "wrong", "wrong": "wrong", "error": "error", "res": "error", "i_cv%": "i_cv"}
STAMP_RX = re.compile(r"\d\d:\d\d:\d\d$")
ROW_START_RX = re.compile(r"^\s*\d+\s+\d+\s+[A-Za-z]")  # size, count, then a type name
VALUE_RX = re.compile(r"^(?:[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|-?nan|-?inf|N/A)$", re.IGNORECASE)
# Consecutive data rows of one shape that make a headerless paste (`kubectl logs --tail`) nccl-tests' table.
TABLE_ROWS = 4
# `-I 1` summary columns (src/util.cu writePerIterReport) and the row columns they land in.
PER_ITER_COLUMNS = {"i_min": "i_min_us", "i_max": "i_max_us", "i_p99": "i_p99_us", "i_cv": "i_cv_pct"}


def printed_time(day: str, clock: str) -> datetime | None:
    """A `-S 1` timestamp, local time of the printing host as nccl-tests prints it; None if no date."""
    try:
        return datetime.strptime(f"{day} {clock}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None


def memory_report(text: str) -> dict[str, int]:
    """`-M 1`'s `Initialization 1.23 GB | User-Allocated 3.00 GB | Collective 512.0 MB | Total 4.73 GB`
    (src/util.cu writeMemInfo) as `memory_<part>_bytes`; the printed figures keep 3 digits, so do these."""
    return {
        f"memory_{name.lower().replace('-', '_')}_bytes": round(float(value) * MEMORY_UNITS[unit])
        for name, value, unit in MEMORY_PART_RX.findall(text)
        if NUMBER_RX.match(value)
    }


@dataclass
class Layout:
    """Where the fields of a data line sit: the leading columns, then one group per placement."""

    prefix: list[str]
    group: list[str]
    timestamp: bool = False
    cputime: bool = False  # `-C 1`: the time column is host wall time, not CUDA time
    groups: int = 2  # placements the header names columns for: one where a user trimmed the table
    time_ms: bool = (
        False  # nccl-tests before cbe7f65 (2019-03): `time` in milliseconds, its check column `res`
    )

    def microseconds(self, time: float | None) -> float | None:
        """A row's printed time in µs: 1.x printed `deltaSec * 1.0E3` (`%7.3f`) under a `res` header."""
        return time * 1e3 if time is not None and self.time_ms else time

    @classmethod
    def from_header(cls, text: str) -> Layout | None:
        names = [t.lower() for t in text.lstrip("#").split()]
        if "algbw" not in names or "busbw" not in names:
            return None
        times = [i for i, n in enumerate(names) if n in ("time", "cputime")]
        if not times:
            return None
        prefix = [PREFIX_NAMES.get(n, n) for n in names[: times[0]]]
        end = times[1] if len(times) > 1 else len(names)
        group = [GROUP_NAMES.get(n, n) for n in names[times[0] : end]]
        return cls(
            prefix,
            group,
            timestamp=names[-1] == "timestamp",
            cputime=names[times[0]] == "cputime",
            groups=min(len(times), 2),
            time_ms="res" in names,
        )

    @classmethod
    def infer(cls, tokens: list[str]) -> Layout | None:
        """The layout of a data line seen without a header, from its number of fields."""
        base = ["time", "algbw", "busbw", "wrong"]
        per_iter = base + ["i_min", "i_max", "i_p99", "i_cv"]
        n = len(tokens)
        if n == 13:
            return cls(["size", "count", "type", "redop", "root"], base)
        if n == 15 and re.match(r"\d\d:\d\d:\d\d$", tokens[-1]):
            return cls(["size", "count", "type", "redop", "root"], base, timestamp=True)
        if n == 21:
            return cls(["size", "count", "type", "redop", "root"], per_iter)
        if n == 23 and STAMP_RX.match(tokens[-1]):
            return cls(["size", "count", "type", "redop", "root"], per_iter, timestamp=True)
        if n == 12:
            fourth = "root" if re.match(r"-?\d+$", tokens[3]) else "redop"
            return cls(["size", "count", "type", fourth], base)
        if n == 11:
            return cls(["size", "count", "type"], base)
        return None

    def split(
        self, tokens: list[str]
    ) -> tuple[dict[str, str], list[tuple[str, dict[str, str]]], datetime | None] | None:
        """The leading fields, per placement printed its fields, and the `-S 1` timestamp (`%Y-%m-%d
        %H:%M:%S`, src/util.cu); None if the line does not fit."""
        stamp = None
        if self.timestamp and len(tokens) >= 2 and STAMP_RX.match(tokens[-1]):
            stamp = printed_time(tokens[-2], tokens[-1])
            tokens = tokens[:-2]
        prefix = self.prefix
        if "redop" in prefix and len(tokens) == len(prefix) - 1 + 2 * len(self.group):
            # Before `none` (2.x, to 2022), all_gather, alltoall and hypercube passed "" as the op name,
            # which `%6s` prints as blanks: the row has no redop field, and a number sits where it would.
            at = prefix.index("redop")
            if NUMBER_RX.match(tokens[at]):
                prefix = prefix[:at] + prefix[at + 1 :]
        p, g = len(prefix), len(self.group)
        if len(tokens) == p + 2 * g:
            placements = list(PLACEMENTS)
        elif len(tokens) == p + g:  # the header's only group is the first; else the in-place half alone
            placements = ["out-of-place" if self.groups == 1 else "in-place"]
        elif (
            p + g < len(tokens) < p + 2 * g
        ):  # a row cut inside its in-place half: the out-of-place one stands
            placements, tokens = ["out-of-place"], tokens[: p + g]
        elif self.group[:3] == ["time", "algbw", "busbw"] and p + 3 <= len(tokens) < p + g:
            # cut inside its out-of-place half, after its busbw (a paste cut there, a killed process's last
            # flush): the figures printed stand, the ones after them are not known
            placements = ["out-of-place"]
        else:
            return None
        head = dict(zip(prefix, tokens[:p], strict=True))
        groups = []
        for k, placement in enumerate(placements):
            part = tokens[p + k * g : p + (k + 1) * g]
            groups.append((placement, dict(zip(self.group, part, strict=len(part) == g))))
        return head, groups, stamp


def row_shape(body: str) -> tuple[tuple[object, ...], int] | None:
    """What a line shares with the other rows of its table if it is a nccl-tests data row as
    `writeBenchmarkLinePreamble` and `writeBenchmarkLineBody` (src/util.cu) print it (`%12li  %12li  %8s
    %6s  %6s`, then per placement `  %7s  %6s  %6s  %6g`, the last `N/A` without validation), and its
    size: (fields, type, redop, root), size. None for any other line."""
    if not ROW_START_RX.match(body):
        return None
    tokens = body.split()
    layout = Layout.infer(tokens)
    parts = layout.split(tokens) if layout else None
    if parts is None or len(parts[1]) != 2:
        return None
    head, groups, _ = parts
    try:
        size, count = int(head["size"]), int(head["count"])
    except ValueError:  # more digits than Python reads
        return None
    if count > size or not re.fullmatch(r"[A-Za-z]\w*", head.get("redop", "x")):
        return None
    if not re.fullmatch(r"-?\d+", head.get("root", "0")):
        return None
    if not all(VALUE_RX.match(value) for _, group in groups for value in group.values()):
        return None
    return (len(tokens), head["type"], head.get("redop"), head.get("root")), size


def table_rows(lines: Iterable[str]) -> int:
    """The most consecutive nccl-tests data rows of one shape (`row_shape`: one type, redop and root, sizes
    growing or repeated) among `lines`, launcher prefixes taken off; NCCL's own lines between them and blank
    lines break no run. A table pasted without its header (a `--tail` of a job's log) is recognised by
    these. A size printed again is a row of another process (a build without MPI=1 under mpirun prints
    one table per process, interleaved: NVIDIA/nccl-tests#294); a run of one size alone is no sweep."""
    best = run = 0
    shape: tuple[object, ...] | None = None
    last, first = -1, -1
    for line in lines:
        body = strip_prefix(without_rank_tags(line).strip())[0]
        if not body.strip() or "NCCL INFO" in body or "NCCL WARN" in body:
            continue
        found = row_shape(body)
        if found is None:
            run, shape = 0, None
            continue
        found_shape, size = found
        if found_shape == shape and size >= last:
            run += 1
        else:
            run, shape, first = 1, found_shape, size
        last = size
        if size > first:  # one size printed over and over is no sweep
            best = max(best, run)
    return best
