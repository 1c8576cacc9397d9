"""nccl-tests output (`all_reduce_perf`, `all_gather_perf`, ... any `*_perf` binary), every layout it has printed.

What the tool prints and where it lands (nccl-tests `src/common.cu`, `src/util.cu`):

- `# nccl-tests version 2.18.3 nccl-headers=... nccl-library=...`, `# Collective test starting: X_perf`,
  `# nThread 1 nGpus 8 minBytes ... step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1
  graph: 0 unalign: 0` (older versions stop earlier; rccl-tests writes `nThread:` and `warmupIters:`),
  `NCCL version 2.x`, the `# Blocking/Parallel Init/Per-Iteration` notes and a shell command naming the
  binary: `bench_params`, one row per field, names as printed.
- `#  Rank  0 Group  0 Pid 1234 on host device  0 [0000:07:00] NVIDIA A100-SXM4-80GB` (older: no
  `Group`, `#   Rank`, `#Rank`, bus id `[0x07]`; 1.x: no `Pid`, and its table's `time` in ms under `res`):
  `bench_devices`; ranks, nodes (distinct hosts), GPUs per node (when every host has the same count) and
  the GPU name of the bench come from these lines.
- The table: its column header decides the layout (`size count type [redop] [root]`, then per placement
  `time|cputime algbw busbw #wrong|error`, optionally the per-iteration `i_min i_max i_p99 i_cv%` and a
  trailing timestamp). Each data line gives one `collectives` row per placement (out-of-place, in-place).
  `#wrong` is a count (`N/A` without validation: NULL); the older `error` column is the largest relative
  error, not a count, so `wrong` stays NULL and the bench gets a `max_error` parameter. Root -1 and
  redop `none` mean "does not apply" and are stored as NULL. Without a header the layout is inferred from
  the number of fields.
- `# Out of bounds values : N OK|FAILED` and `# Avg bus bandwidth : X`: the bench's `out_of_bounds` and
  `avg_busbw_gbps`, and events.
- `NCCL WARN` lines, `Test NCCL failure`, `Test CUDA failure`, `Test failure`, timeouts, MPI aborts and
  crashes: events; a failure before the footer marks the bench `failed`. Kernel `NVRM: Xid` lines are
  events of their own kind (they say what broke; the test's own lines say whether it stopped).

A bench is `complete` when its footer was printed, `data_error` when a row had `#wrong` > 0 or values were
out of bounds, `partial` when its table stopped before the footer, `failed` when it stopped on an error or
printed no row. The collective is the one named by `Collective test starting:` or by a `*_perf` command
line; failing both, an all-reduce is recognised by its busbw/algbw factor 2(n-1)/n (nccl-tests
doc/PERFORMANCE.md), which no other collective has for n > 2, and `collective_source` says which. Where
that factor proves more ranks than the device lines show (a paste keeping one of 1024), the bench takes the
fewest it allows (`nccl_tests_factor`), nodes and GPUs per node unknown, and `ranks_source` says so; so
does a table printed alone. An unnamed (n-1)/n factor keeps the collective NULL and lists in
`collective_candidates` those its columns allow (no redop column: not reduce_scatter or alltoall).

MPI launchers prefix lines (`[1,0]<stdout>:`, `host: `, `0: `, timestamps); a line is read as printed
first and then without its prefix. NCCL's `NCCL_ALGO` / `NCCL_PROTO` / `NCCL_NVLS_ENABLE set by environment to
...` INFO lines are the bench's `env NCCL_ALGO` ... parameters (once per bench); other NCCL INFO lines and
anything else not listed here go to `unparsed`. An `nvidia-smi topo -m` matrix printed among the test's lines
(a job script running both, a paste of both) is read as the topo parser reads it, a bench of its own.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

from tracelog.parsers import topo
from tracelog.parsers.base import NCCL_WARN_RX, Batch, Emitter, LineSource, drive, guarded, strip_prefix
from tracelog.parsers.nccl_tests_bench import TOOL, Bench
from tracelog.parsers.nccl_tests_factor import count_ratio, row_range
from tracelog.parsers.nccl_tests_layout import (
    NUMBER_RX,
    PER_ITER_COLUMNS,
    TABLE_ROWS,
    Layout,
    memory_report,
    table_rows,
)
from tracelog.parsers.nccl_tests_lines import (
    AMD_GPU_RX,
    AVG_RX,
    COMM_RX,
    COMMAND_RX,
    COMPILED_RX,
    CONCLUDED_RX,
    DEVICE_RX,
    ENV_SET_RX,
    ERROR_LINE_RX,
    FAILURE_RX,
    HASHLESS_RX,
    HEADER_FIELD_RX,
    INLINE_CODE_RX,
    MEMORY_RX,
    NCCL_VERSION_RX,
    NOTE_RX,
    NTHREAD_RX,
    OOB_RX,
    RCCL_FACT_RX,
    RCCL_HEADER_RX,
    RCCL_PRINTED_RX,
    RCCL_VERSION_RX,
    REDUCED_RX,
    SHELL_PROMPT_RX,
    STARTING_RX,
    UNITS_RX,
    VERSION_RX,
    XID_RX,
)
from tracelog.parsers.prefixes import without_rank_tags

FORMAT = "nccl_tests"
VERSION = "20"  # 2: processes built without MPI printing one test each make one bench of their size; NCCL's
# `NCCL_ALGO set by environment to Ring` lines are `env NCCL_ALGO` params; 3: a 2.x row with a blank
# redop; 4: a last row cut after its out-of-place busbw; 5: ranks from the launch where no device line
# 6: ranks from the busbw factor where the device lines show fewer; 7: or no device line, launch or init says
# any, and the collectives an unnamed (n-1)/n factor and the row's columns allow
# 8: an MPI launcher under its distribution's name (`mpirun.mpich -np 16`) gives the ranks
# 9: a device line whose host is blank
# 10: the header and footer lines copied without their `#`
# 11: MPICH's `[0] ` rank tags, inside a row too
# 12: the busbw factor also from size / time, where its digits narrow it
# 13: a topology matrix among the lines; a test typed with no launcher is one process; busbw = algbw of an
# all_gather or reduce_scatter (nccl-tests before mid-2020) proves no rank count
# 14: nccl-tests 1.x (before 2019-03): device lines without `Pid`, the `res` table's time in ms
# 15: ranks from the count column (size = count x bytes x n for the (n-1)/n family); a collective the
# columns narrow that family to (a real redop: reduce_scatter) is named
# 16: one rank where every row prints busbw 0.00 while algbw is 1 GB/s or more
# 17: rccl-tests named by its asterisk legend, its `nThreads: nGpus: nRanks:` header and AMD devices
# 18: 1.x's `NCCL failure file.cu:N` is an error that fails the bench; its `compiled with NCCL` line a param
# 19: a command typed at a Singularity or Apptainer prompt
# 20: a paste in markdown's inline code: the backtick before its first line and after its last


TOPO_KEYS = 1_000_000  # the first bench key of the topology matrices read among a test's lines
DETECT_WORDS = ("nThread", "Rank", "algbw", "nccl-tests", "Collective test", "Out of bounds", "Avg bus")


def detect(head: str) -> int:
    """By its header lines; failing them, by its footer or a run of data rows (a tail pasted without them).
    Sure enough of it, above `nvidia-smi topo -m` in the same head: this parser reads those matrices too."""
    score = _detect(head)
    return max(score, topo.detect(head) + 1) if score >= 30 and topo.detect(head) else score


def _detect(head: str) -> int:
    score = 0
    for line in head.split("\n") if any(word in head for word in DETECT_WORDS) else ():
        body = strip_prefix(without_rank_tags(line).strip())[0].strip()
        if NTHREAD_RX.match(body) or STARTING_RX.match(body) or VERSION_RX.match(body):
            return 50
        if DEVICE_RX.match(body) or (body.startswith("#") and "algbw" in body and "busbw" in body):
            score = 40
        elif CONCLUDED_RX.match(body) or OOB_RX.match(body) or AVG_RX.match(body):
            score = max(score, 30)  # a tail cut after the header: its rows and footer
    return score or (30 if table_rows(head.split("\n")) >= TABLE_ROWS else 0)


def _number(text: str | None) -> float | None:
    if text is None or text.upper() == "N/A":
        return None
    return float(text) if NUMBER_RX.match(text) or text.lower() in ("nan", "inf") else None


class _Parser:
    def __init__(self) -> None:
        self.out = Emitter()
        self.bench: Bench | None = None
        self.next_key = 0
        self.last: Bench | None = None  # the bench closed last: `-M 1` prints after its conclusion
        self.pending: list[
            tuple[str, str, int, str]
        ] = []  # params seen before their bench opened, with the line
        self.init_ranks: int | None = None  # the last `nranks` NCCL's init lines said
        self.tool = TOOL  # which fork the file's lines named last
        self.continued: list[tuple[int, str]] = []  # the lines of a shell command continued with `\`
        self.env_seen: set[tuple[int | None, str]] = set()  # (bench, env param) already kept
        # an `nvidia-smi topo -m` matrix printed in the same output (a job's script, a paste of both): its
        # benches keyed apart from the tests'
        self.topo = topo.reader(self.out, first_key=TOPO_KEYS)

    # -- bench lifecycle ------------------------------------------------------------------------------
    def open(self, line_no: int, phase: int) -> Bench:
        self.close()
        bench = Bench(self.next_key, line_no, line_no, phase, tool=self.tool)
        self.next_key += 1
        self.bench = bench
        pending, self.pending = self.pending, []
        for name, value, at, _ in pending:
            self.param(name, value, at)
            if name == "command":
                self.name_collective(value, "command")
                bench.commanded, bench.command = True, value
        return bench

    def named_tool(self, tool: str) -> None:
        """The fork a line names, for the bench it belongs to and those after it."""
        self.tool = tool
        if self.bench is not None:
            self.bench.tool = tool

    def at(self, line_no: int, phase: int, opens: bool = True) -> Bench:
        """The bench a line of `phase` belongs to: the open one if it has not passed that phase yet."""
        bench = self.bench
        if bench is None or (opens and bench.phase >= phase):
            bench = self.open(line_no, phase)
        bench.phase = max(bench.phase, phase)
        bench.line_end = line_no
        return bench

    def finish(self) -> None:
        for n, t in self.continued:
            self.out.add("unparsed", {"line_no": n, "text": t})
        self.close()
        self.topo.finish()
        for _, _, n, text in self.pending:
            self.out.add("unparsed", {"line_no": n, "text": text})

    def close(self) -> None:
        bench, self.bench = self.bench, None
        if bench is None:
            return
        self.last = bench
        if not bench.devices and self.init_ranks:  # a tail cut before the device list (a pasted log)
            bench.init_ranks = self.init_ranks
        if found := bench.factor_override(bench.placement()[0]):
            self.param("ranks_source", found.source(), bench.line_start, bench)
        elif bench.init_ranks:
            self.param("ranks_source", "NCCL INFO comm ... nranks", bench.line_start, bench)
        elif not bench.devices and bench.launch():
            self.param("ranks_source", "the launch command (processes x -g x -t)", bench.line_start, bench)
        if len(set(bench.groups)) > 1:
            self.param("comm_groups", str(len(set(bench.groups))), bench.line_start, bench)
            self.param("world_ranks", str(len(bench.devices)), bench.line_start, bench)
        if len(bench.footers) > 1:
            self.param(
                "Avg bus bandwidth (each process)",
                ", ".join(f"{v:g}" for v in bench.footers),
                bench.line_end,
                bench,
            )
        if bench.max_error is not None:
            self.param("max_error", f"{bench.max_error[0]:g}", bench.max_error[1], bench)
        if bench.shortened() and not found:
            self.param("ranks_source", "the highest rank of a shortened device list", bench.line_start, bench)
        elif bench.separate_runs():
            self.param("processes", str(sum(r == 0 for r, _ in bench.numbers)), bench.line_start, bench)
            self.event(
                "warning",
                f"the device list counts from rank 0 again ({len(bench.numbers)} device lines for ranks 0 to "
                f"{bench.listed_ranks() - 1}): nccl-tests built without MPI=1 and started as "
                f"{sum(r == 0 for r, _ in bench.numbers)} processes runs as many separate "
                f"{bench.listed_ranks()}-GPU tests, whose rows interleave here; rebuild with MPI=1 and launch "
                "with mpirun or srun --mpi",
                bench.line_start,
                bench,
            )
        elif bench.one_gpu_runs():
            self.event(
                "warning",
                f"every one of the {len(bench.numbers)} device lines says Rank 0: nccl-tests built without MPI=1 "
                "and started once per GPU runs that many separate one-GPU tests; rebuild with MPI=1 and launch "
                "with mpirun or srun --mpi",
                bench.line_start,
                bench,
            )
        bench.infer_collective()
        if bench.collective_source:
            self.param("collective_source", bench.collective_source, bench.line_start, bench)
        elif len(names := bench.candidates()) > 1:
            self.param("collective_candidates", ", ".join(names), bench.line_start, bench)
        if not bench.footer:
            what = f"after {bench.rows} row(s)" + (
                f", last size {bench.last_size} bytes" if bench.last_size is not None else ""
            )
            self.event("incomplete", f"the test stopped before its footer {what}", bench.line_end, bench)
        self.out.add("benches", bench.record())

    # -- rows -----------------------------------------------------------------------------------------
    def param(self, name: str, value: str, line_no: int, bench: Bench | None = None, text: str = "") -> None:
        bench = bench or self.bench
        if bench is None:
            self.pending.append((name, value, line_no, text or value))
            return
        self.out.add(
            "bench_params", {"bench_key": bench.key, "name": name, "value": value, "line_no": line_no}
        )

    def event(self, kind: str, text: str, line_no: int, bench: Bench | None = None) -> None:
        bench = bench or self.bench
        key = bench.key if bench else None
        self.out.add("events", {"bench_key": key, "line_no": line_no, "kind": kind, "text": text})

    def name_collective(self, text: str, source: str) -> None:
        match = COMMAND_RX.search(" " + text)
        if self.bench is not None and match and self.bench.collective_source in (None, "command"):
            self.bench.collective, self.bench.collective_source = match.group(1), source

    # -- lines ----------------------------------------------------------------------------------------
    def line(self, line_no: int, text: str) -> None:
        text = without_rank_tags(text)
        if "`" in text and not text.lstrip().startswith("```"):
            # a paste set in markdown's inline code, one backtick before its first line and after its last
            # (NVIDIA/nccl#948): the lines as printed
            text = INLINE_CODE_RX.sub("", text)
        if not text.strip():
            return
        if self.continued or (text.rstrip().endswith("\\") and not text.lstrip().startswith("#")):
            # a command written over several lines (`mpirun -np 2 \`): one command, at its first line
            self.continued.append((line_no, text))
            if text.rstrip().endswith("\\"):
                return
            lines, self.continued = self.continued, []
            if not self.handle(lines[0][0], " ".join(t.rstrip().rstrip("\\").strip() for _, t in lines)):
                for n, t in lines:
                    self.out.add("unparsed", {"line_no": n, "text": t})
            return
        if " NCCL INFO " in text:  # the bulk of a debug log: kept as unparsed, read no further
            if " set by environment to " in text and (match := ENV_SET_RX.search(text.rstrip())):
                name, key = f"env {match.group(1)}", self.bench.key if self.bench else None
                if (key, name) not in self.env_seen:  # every rank says it: one parameter per bench
                    self.env_seen.add((key, name))
                    self.param(name, match.group(2), line_no, text=text)
                return
            if " nranks " in text and (match := COMM_RX.search(text)):
                self.init_ranks = int(match.group(1))  # the communicator's size, as NCCL's init says it
            self.out.add("unparsed", {"line_no": line_no, "text": text})
            return
        if self.handle(line_no, text):
            return
        body, _ = strip_prefix(text)
        if not body.strip():
            return  # a launcher prefix on a blank line
        if body != text and self.handle(line_no, body):
            return
        if not self.topo.take(line_no, text):
            self.out.add("unparsed", {"line_no": line_no, "text": text})

    def failure(self, n: int, text: str) -> bool:
        # after a bench's end (`Test failure common.cu:1189` follows the footer of the test it failed), its own
        self.event("error", text, n, self.bench or self.last)
        if self.bench is not None and not self.bench.footer:
            self.bench.failed = True
            self.bench.line_end = n
        return True

    def handle(self, n: int, text: str) -> bool:
        body = text.strip()
        if body.startswith("#") or HASHLESS_RX.match(body):
            return self.comment(n, body)
        tokens = body.split()
        if len(tokens) >= 4 and tokens[0].isdigit() and tokens[1].isdigit():
            # a row cut short by the failure that stopped the test (`2097152  32768  float  none  -1
            # node0: Test CUDA failure common.cu:389 'an illegal memory access was encountered'`)
            return self.data(n, tokens) or (FAILURE_RX.search(body) is not None and self.failure(n, text))
        if match := NCCL_VERSION_RX.match(body):
            if self.bench is not None:
                self.bench.line_end = n
            self.param("NCCL version", match.group(1), n, text=text)
            return True
        if match := RCCL_VERSION_RX.match(body):
            self.named_tool("rccl-tests")
            self.param("rccl-tests version", match.group(1), n, text=text)
            return True
        if match := RCCL_PRINTED_RX.match(body):
            self.named_tool("rccl-tests")
            self.param("RCCL version", match.group(1), n, text=text)
            return True
        if match := RCCL_FACT_RX.match(body):  # rccl-tests' block: `RCCL version : 2.28.3`, `Hostname : ...`
            self.named_tool("rccl-tests")
            self.param(match.group(1), match.group(2), n, text=text)
            return True
        if NCCL_WARN_RX.search(body):
            self.event("nccl_warn", text, n)
            return True
        if XID_RX.search(body):
            self.event("xid", text, n)
            return True
        if FAILURE_RX.search(body):
            return self.failure(n, text)
        body = SHELL_PROMPT_RX.sub("", body, count=1)  # `root@node:~/nccl-tests# ./build/all_reduce_perf`
        if "#" not in body and "NCCL INFO" not in body and COMMAND_RX.search(" " + body):
            # a command after a bench's rows (or its failure, or its own command) starts the next bench,
            # footer or not (a run cut short)
            if self.bench is None or self.bench.phase >= 5 or self.bench.failed or self.bench.commanded:
                self.close()
                self.pending.append(("command", body, n, text))
            else:
                self.param("command", body, n)
                self.name_collective(body, "command")
                self.bench.commanded, self.bench.command = True, body
            return True
        return False

    def comment(self, n: int, body: str) -> bool:
        if body.startswith("# Errors with asterisks indicate"):  # rccl-tests' legend above its footer
            self.named_tool("rccl-tests")  # src/common.cu prints it where it checks data; nccl-tests never
            return True
        if match := VERSION_RX.match(body):
            self.tool = f"{match.group(1)}-tests"
            bench = self.open(n, 0)
            self.param(f"{match.group(1)}-tests version", match.group(2), n, bench)
            for name, value in re.findall(r"([\w-]{1,64})=(\S+)", match.group(3)):
                self.param(name, value, n, bench)
            return True
        if match := STARTING_RX.match(body):
            bench = self.at(n, 1)
            self.param("collective test", match.group(1), n, bench)
            bench.collective_source = None
            self.name_collective(match.group(1), "printed")
            return True
        if NTHREAD_RX.match(body):
            if (
                (copy := self.bench) is not None
                and copy.header == body
                and not copy.devices
                and not copy.rows
            ):
                copy.copies += 1  # another process's print of the same test (a build without MPI)
                copy.line_end = n
                return True
            bench = self.at(n, 2)
            bench.header = body
            if RCCL_HEADER_RX.match(body):
                self.named_tool("rccl-tests")
            for name, value in HEADER_FIELD_RX.findall(body.lstrip("#")):
                self.param(name.strip(), value, n, bench)
            return True
        if body.lstrip("#").strip() == "Using devices":
            if (copy := self.bench) is not None and copy.copies > 1 and copy.phase == 3 and not copy.devices:
                copy.line_end = n  # the header's copy's own line
                return True
            self.at(n, 3)
            return True
        if match := DEVICE_RX.match(body):
            self.device(n, match)
            return True
        if layout := Layout.from_header(body):
            bench = self.at(n, 4, opens=self.bench is not None and self.bench.phase > 4)
            bench.layout = layout
            return True
        if UNITS_RX.match(body) or "out-of-place" in body or "in-place" in body:
            if self.bench is not None:
                self.bench.line_end = n
            return True
        if match := OOB_RX.match(body):
            return self.footer(n, body, "out_of_bounds", out_of_bounds=int(match.group(1)))
        if match := AVG_RX.match(body):
            return self.footer(n, body, "avg_busbw", avg_busbw=float(match.group(1)))
        if match := CONCLUDED_RX.match(body):
            if self.bench is not None:
                self.bench.line_end = n
                if not self.bench.collective:  # a tail cut after its `starting` line: named at its end
                    self.name_collective(match.group(1), "printed")
                self.close()
            return True
        if match := COMPILED_RX.match(body):
            self.param("compiled with NCCL", match.group(1), n, text=body)
            return True
        if match := REDUCED_RX.match(body):
            self.param("maxBytes reduced to", match.group(1), n, text=body)
            return True
        if match := MEMORY_RX.match(body):
            owner = self.bench or self.last
            self.param("GPU memory usage", match.group(1), n, owner, text=body)
            for name, value in memory_report(match.group(1)).items():
                self.param(name, str(value), n, owner)
            return True
        if match := NOTE_RX.match(body):
            self.param(match.group(1), match.group(2), n, text=body)
            return True
        if match := ERROR_LINE_RX.match(body):
            if match.group(1):
                self.event("error", body, n)
                if self.bench is not None and not self.bench.footer:
                    self.bench.failed = True
            return True
        if body.strip("#").strip() in ("", "..."):
            if self.bench is not None and self.bench.phase < 6:
                self.bench.line_end = n
                if "..." in body and self.bench.devices and self.bench.rows == 0:
                    self.bench.elided = True
            return True
        return False

    def device(self, n: int, match: re.Match[str]) -> None:
        bench = self.at(n, 3, opens=self.bench is not None and self.bench.phase > 3)
        rank, group, pid, host, device, bus, name = match.groups()
        if AMD_GPU_RX.match(name):
            self.named_tool("rccl-tests")  # nccl-tests runs on NVIDIA GPUs only
        bench.devices.append((host or "", name))
        bench.pids.append(int(pid) if pid is not None else None)
        bench.groups.append(int(group) if group is not None else None)
        bench.numbers.append((int(rank), int(device)))
        self.out.add(
            "bench_devices",
            {
                "bench_key": bench.key,
                "rank": int(rank),
                "device": int(device),
                "host": host,
                "pid": int(pid) if pid is not None else None,
                "bus_id": bus,
                "gpu_name": name or None,
                "comm_group": int(group) if group is not None else None,
                "line_no": n,
            },
        )

    def footer(self, n: int, body: str, kind: str, **values: Any) -> bool:
        bench = self.bench
        if bench is None:
            return False
        bench.line_end = n
        bench.phase = 6
        if "avg_busbw" in values:
            bench.footer = True
            bench.footers.append(values["avg_busbw"])
            bench.avg_busbw = bench.footers[0]  # the first process's, where several print one
        else:
            bench.out_of_bounds = values["out_of_bounds"]
        self.event(kind, body, n)
        return True

    def data(self, n: int, tokens: list[str]) -> bool:
        bench = self.bench
        layout = bench.layout if bench is not None and bench.phase < 6 else None
        layout = layout or Layout.infer(tokens)
        if layout is None:
            return False
        parts = layout.split(tokens)
        if parts is None:
            return False
        head, groups, stamp = parts
        try:
            size, count = int(head["size"]), int(head["count"])
            values = [
                (placement, _number(g.get("time")), _number(g.get("algbw")), _number(g.get("busbw")))
                for placement, g in groups
            ]
            root = int(head["root"]) if "root" in head else None
        except (KeyError, ValueError):
            return False
        if "type" in head and not re.match(r"[A-Za-z]", head["type"]):
            return False
        # a row after a footer is the next test's, unless another process of this one has yet to finish
        bench = self.at(
            n, 5, opens=bench is None or (bench.phase >= 6 and len(bench.footers) >= bench.copies)
        )
        bench.layout = layout
        type_, redop = head.get("type"), head.get("redop")
        redop = None if redop in (None, "none") else redop
        if type_:
            bench.types[type_] = None
        if redop:
            bench.redops[redop] = None
        if root is not None:
            bench.roots.add(root)
        if not layout.time_ms and (ratio := count_ratio(size, count, type_)) is not None:
            bench.count_ratios.setdefault(ratio, type_ or "")
        for (placement, g), (_, time_us, algbw, busbw) in zip(groups, values, strict=True):
            wrong = None
            if "wrong" in g and g["wrong"].upper() != "N/A":
                wrong_value = _number(g["wrong"])
                if wrong_value is not None and (
                    not math.isfinite(wrong_value) or wrong_value < 0 or wrong_value >= 2**63
                ):
                    # Not a count: the tool printed something it calls wrong values, but no number to
                    # add up; the row keeps NULL and the event says what was printed.
                    self.event(
                        "bad_value", f"#wrong = {g['wrong']!r} is not a count; stored as NULL", n, bench
                    )
                    wrong_value = None
                wrong = int(wrong_value) if wrong_value is not None else None
            if wrong is not None:
                bench.wrong_total = (bench.wrong_total or 0) + wrong
            error = _number(g.get("error"))
            if error is not None and (bench.max_error is None or error > bench.max_error[0]):
                bench.max_error = (error, n)
            if algbw is not None and busbw is not None:
                if busbw > 0:
                    bench.busbw_above_zero = True
                elif busbw == 0:
                    bench.zero_busbw.append(algbw)
            if algbw and busbw is not None and (bench.best is None or algbw > bench.best[0]):
                bench.best = (algbw, busbw)
            timed = None if layout.time_ms else g.get("time")  # 1.x's milliseconds are not size / algbw
            if algbw and busbw and (factor := row_range(g["algbw"], g["busbw"], size, timed)):
                bench.factors.append((algbw, *factor))
            row = {
                "bench_key": bench.key,
                "size_bytes": size,
                "count": count,
                "type": type_,
                "redop": redop,
                "root": None if root is None or root < 0 else root,
                "placement": placement,
                "time_us": None if layout.cputime else layout.microseconds(time_us),
                "cpu_time_us": time_us if layout.cputime else None,
                "algbw_gbps": algbw,
                "busbw_gbps": busbw,
                "wrong": wrong,
                "printed_at": stamp,
                "line_no": n,
            }
            for name, column in PER_ITER_COLUMNS.items():
                if name in g:
                    row[column] = _number(g[name])
            self.out.add("collectives", row)
        bench.rows += 1
        bench.last_size = size
        return True


@guarded
def parse(source: LineSource) -> Iterator[Batch]:
    return drive(_Parser(), source)
