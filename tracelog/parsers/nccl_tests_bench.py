"""One nccl-tests bench as the parser gathers it (`Bench`), and the `benches` row it becomes: its ranks,
nodes and GPUs per node from the device lines, its status, and the collective named by its busbw factor."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tracelog.parsers.megatron_state import MPI_LAUNCH_RX, MPI_PER_NODE_RX, MPI_RANKS_RX
from tracelog.parsers.nccl_tests_factor import (
    RING_FAMILY,
    FactorRanks,
    counted_ranks,
    factor_ranks,
    one_rank,
)
from tracelog.parsers.nccl_tests_layout import Layout

TOOL = "nccl-tests"
# The test binary in a launch command (`mpirun -n 256 -npernode 16 ./build/all_reduce_perf -b 8 -g 1`): the
# launcher's options before it, the test's after it (whose `-n` is its iterations, not processes).
PERF_BINARY_RX = re.compile(r"[\w./-]*_perf(?:_mpi)?\b")
SRUN_RX = re.compile(r"(?:^|[\s$>+;&/])srun\s")
SRUN_TASKS_RX = re.compile(r"\s(?:-n|--ntasks)(?:\s+|=)(\d+)(?![\w.])")
SRUN_NODES_RX = re.compile(r"\s(?:-N|--nodes)(?:\s+|=)(\d+)(?![\w.])")
SRUN_PER_NODE_RX = re.compile(r"\s--ntasks-per-node(?:\s+|=)(\d+)(?![\w.])")
# each process's GPUs and threads (src/common.cu: `-g, --ngpus`, `-t, --nthreads`): ranks per process
PER_PROCESS_RX = re.compile(r"\s(?:-g|--ngpus|-t|--nthreads)(?:\s+|=)(\d+)(?![\w.])")
# What may stand before a test started by hand, with no launcher: a shell prompt (`user@host:~/dir$`, `$`,
# `#`, a conda `(env)`), variables (`NCCL_DEBUG=INFO`), `sudo`/`env`/`time`, the binary's folder.
BY_HAND_RX = re.compile(
    r"^\s*(?:\([\w.-]+\)\s*)?(?:[\w.-]+@[\w.-]+:\S*?\s?[#$]\s*|[#$]\s*)?"
    r"(?:(?:[A-Za-z_]\w*=\S*|sudo|env|time|nohup)\s+)*[\w./~-]*$"
)


def launched(command: str) -> tuple[int, int | None] | None:
    """The ranks, and ranks per node, an MPI or Slurm launch of a test starts: its processes (`mpirun -n`,
    `srun -n` or `-N` x `--ntasks-per-node`; one for a test typed with no launcher) times each one's GPUs and
    threads; None where the command launches no test or does not say how many processes."""
    binary = PERF_BINARY_RX.search(command)
    if binary is None:
        return None
    launcher, test = f" {command[: binary.start()]}", f" {command[binary.end() :]}"
    per_process = 1
    for match in PER_PROCESS_RX.finditer(test):
        per_process *= int(match.group(1))
    procs = per_node = None
    if MPI_LAUNCH_RX.search(launcher) and (ranks := MPI_RANKS_RX.findall(launcher)):
        procs = int(ranks[-1])
        if found := MPI_PER_NODE_RX.search(launcher):
            per_node = int(found.group(1) or found.group(2))
    elif BY_HAND_RX.match(launcher):
        procs, per_node = 1, 1  # one process, on the machine it was typed on
    elif SRUN_RX.search(launcher):
        tasks, nodes = SRUN_TASKS_RX.search(launcher), SRUN_NODES_RX.search(launcher)
        if found := SRUN_PER_NODE_RX.search(launcher):
            per_node = int(found.group(1))
        if tasks:
            procs = int(tasks.group(1))
        elif nodes and per_node:
            procs = int(nodes.group(1)) * per_node
    if not procs:
        return None
    return procs * per_process, per_node * per_process if per_node else None


SCALE_ZERO = ("all_reduce", *RING_FAMILY)
"""The collectives whose busbw factor is 0 on one rank."""
# nccl-tests doc/PERFORMANCE.md: busbw = algbw x factor; only all_reduce has 2(n-1)/n.
ALL_REDUCE_FACTOR_TOLERANCE = 0.01


@dataclass
class Bench:
    key: int
    line_start: int
    line_end: int
    phase: int = 0  # 0 version, 1 starting, 2 nThread, 3 devices, 4 table header, 5 rows, 6 footer
    tool: str = TOOL  # `rccl-tests` where the file says so (its version line, `RCCL version :`)
    collective: str | None = None
    collective_source: str | None = None
    layout: Layout | None = None
    devices: list[tuple[str, str]] = field(default_factory=list)  # (host, "" where none printed; gpu name)
    pids: list[int | None] = field(
        default_factory=list
    )  # the process of each device line (None: not printed)
    groups: list[int | None] = field(default_factory=list)  # NCCL_TESTS_SPLIT's `Group` per device line
    numbers: list[tuple[int, int]] = field(default_factory=list)  # (rank, device index) per device line
    elided: bool = False  # a `...` line in the device list: someone shortened it
    commanded: bool = False  # its shell command was read
    types: dict[str, None] = field(default_factory=dict)
    redops: dict[str, None] = field(default_factory=dict)
    rows: int = 0
    last_size: int | None = None
    wrong_total: int | None = None
    max_error: tuple[float, int] | None = None
    best: tuple[float, float] | None = None  # (algbw, busbw) of the row with the largest algbw
    out_of_bounds: int | None = None
    avg_busbw: float | None = None
    footer: bool = False
    failed: bool = False
    init_ranks: int | None = None  # NCCL's `comm 0x... rank R nranks N`, where no device list was printed
    header: str | None = None  # its `# nThread ...` line as printed
    copies: int = 1  # processes that printed that header (each its own test where built without MPI)
    footers: list[float] = field(default_factory=list)  # every `Avg bus bandwidth` it printed
    command: str | None = None  # its shell command, where one was read
    factors: list[tuple[float, ...]] = field(default_factory=list)  # (algbw, factor ranges) per row
    roots: set[int] = field(default_factory=set)  # the root column's values, -1 included
    count_ratios: dict[int, str] = field(default_factory=dict)  # size / (count x bytes) per row: its type
    zero_busbw: list[float] = field(default_factory=list)  # the algbw of each row printing busbw 0.00
    busbw_above_zero: bool = False  # a row printed a busbw above 0

    def communicator(self) -> list[tuple[str, str]]:
        """The devices of the communicator whose numbers are printed: with NCCL_TESTS_SPLIT every group is
        a communicator of its own and only process 0 prints (src/common.cu run()), so rank 0's group."""
        if len(set(self.groups)) <= 1 or len(self.groups) != len(self.devices):
            return self.devices
        return [d for d, g in zip(self.devices, self.groups, strict=True) if g == self.groups[0]]

    def record(self) -> dict[str, Any]:
        ranks, nodes, per_node = self.placement()
        if found := self.factor_override(ranks):
            # more ranks than the device lines show: they are a part of the list, which says nothing of
            # how many nodes there are or how many GPUs each has
            ranks, nodes, per_node = found.low, None, None
            if found.low == 1:  # one rank is one GPU of one node
                nodes, per_node = 1, 1
        return {
            "bench_key": self.key,
            "tool": self.tool,
            "collective": self.collective,
            "ranks": ranks,
            "nodes": nodes,
            "gpus_per_node": per_node,
            "gpu_name": ", ".join(dict.fromkeys(n for _, n in self.devices if n)) or None,
            "dtype": ",".join(self.types) or None,
            "redop": ",".join(self.redops) or None,
            "hosts": list(dict.fromkeys(h for h, _ in self.devices if h)),
            "status": self.status(),
            "avg_busbw_gbps": self.avg_busbw,
            "wrong_total": self.wrong_total,
            "out_of_bounds": self.out_of_bounds,
            "line_start": self.line_start,
            "line_end": self.line_end,
        }

    def placement(self) -> tuple[int | None, int | None, int | None]:
        """Its ranks, nodes and GPUs per node as its device lines, NCCL's init or its launch say them."""
        devices = self.communicator()
        hosts = list(dict.fromkeys(h for h, _ in devices))
        per_host = Counter(h for h, _ in devices)
        ranks = len(devices) or self.init_ranks
        nodes, per_node = (
            len(hosts) or None,
            per_host[hosts[0]] if hosts and len(set(per_host.values())) == 1 else None,
        )
        if "" in hosts:  # no host name printed: one node where one process ran every GPU, else unknown
            nodes, per_node = (
                (1, ranks) if len(set(self.pids)) == 1 and None not in self.pids else (None, None)
            )
        if self.shortened():
            # the highest rank printed says the size; the highest device index how many GPUs a node has
            ranks = self.listed_ranks()
            per_node = max(d for _, d in self.numbers) + 1
            nodes = ranks // per_node if ranks % per_node == 0 else None
        elif self.one_gpu_runs():
            ranks, nodes, per_node = 1, 1, 1
        elif self.separate_runs():
            ranks = self.listed_ranks()  # each process's own test, on its node
            nodes, per_node = 1, ranks
        elif not ranks and (launch := self.launch()):  # no device line: what the command started
            ranks, per_node = launch
            nodes = ranks // per_node if per_node and ranks % per_node == 0 else None
        return ranks, nodes, per_node

    def launch(self) -> tuple[int, int | None] | None:
        """The ranks and ranks per node its MPI or Slurm command started (`launched`)."""
        return launched(self.command) if self.command else None

    def shortened(self) -> bool:
        """A device list someone cut (`...` between its lines) or whose rank numbers run past its lines."""
        if not self.numbers or len(set(self.groups)) > 1:
            return False
        return self.elided or self.listed_ranks() > len(self.numbers)

    def listed_ranks(self) -> int:
        """The ranks the device lines' numbers say there are: the highest one printed, plus one."""
        return max(r for r, _ in self.numbers) + 1

    def one_gpu_runs(self) -> bool:
        """Every device line says `Rank 0`: nccl-tests built without MPI and started once per GPU (srun,
        mpirun) runs as many one-GPU tests, each printing its own rank 0."""
        return len(self.numbers) > 1 and all(r == 0 for r, _ in self.numbers)

    def separate_runs(self) -> bool:
        """Rank numbers start again at 0 in one device list: processes built without MPI (`mpirun -np 2 ...
        -g 2`), each running its own test of its own GPUs and printing its own ranks from 0."""
        ranks = [r for r, _ in self.numbers]
        return len(set(self.groups)) <= 1 and len(ranks) > len(set(ranks)) and max(ranks) > 0

    def factor(self) -> FactorRanks | None:
        """The ranks the rows' figures prove (`nccl_tests_factor`), for the collective named, if any: the
        count column where every row's size is count x bytes x the same n > 1 (the (n-1)/n family, unless
        the factor or the name says all_reduce) and the factor does not already pin that n, else
        busbw/algbw; one rank where every busbw is 0.00."""
        if self.one_gpu_runs():
            return None
        named = self.collective if self.collective_source not in ("busbw factor", "count column") else None
        found = factor_ranks(named, self.factors)
        if len(self.count_ratios) == 1 and (named is None or named in RING_FAMILY):
            ((ranks, type_name),) = self.count_ratios.items()
            exact = found is not None and found.low == found.high == ranks  # both say it: the factor's words
            if ranks > 1 and (found is None or not found.all_reduce) and not exact:
                return counted_ranks(type_name, ranks)
        if found is None and not self.busbw_above_zero and (named is None or named in SCALE_ZERO):
            return one_rank(self.zero_busbw)
        return found

    def factor_override(self, ranks: int | None) -> FactorRanks | None:
        """The factor's ranks where they are more than the device lines, NCCL's init or the launch say: a
        paste that kept a part of the device list (nccl-tests#322 kept rank 0 of 1024), or none of it and no
        launch either (NVIDIA/nccl#644's table alone)."""
        found = self.factor()
        return found if found is not None and (not ranks or found.low > ranks) else None

    def candidates(self) -> list[str]:
        """The collectives an unnamed bench of the (n-1)/n factor can be, by the columns its rows print
        (nccl-tests src/*.cu `print_line_header`, `TimeTest`): reduce_scatter and alltoall print a redop in
        every layout, reduce_scatter a real one; gather and scatter a root, not -1."""
        found = self.factor()
        if self.collective or found is None or found.all_reduce or found.low == 1:
            return []
        names = list(RING_FAMILY)
        prefix = self.layout.prefix if self.layout is not None else []
        if "redop" not in prefix:
            names = [n for n in names if n not in ("reduce_scatter", "alltoall")]
        elif self.redops:
            names = [n for n in names if n == "reduce_scatter"]
        else:
            names.remove("reduce_scatter")
        if "root" in prefix:
            rooted = any(r >= 0 for r in self.roots)
            names = [n for n in names if (n in ("gather", "scatter")) == rooted]
        return names

    def infer_collective(self) -> None:
        """An all-reduce is the one collective whose busbw/algbw is 2(n-1)/n (n > 2), the one above 1: name it
        when unnamed; and the (n-1)/n family's one member a row's columns allow (a real redop:
        reduce_scatter)."""
        ranks = len(self.communicator()) or self.init_ranks or (self.launch() or (0, None))[0]
        if self.shortened() or self.separate_runs():
            ranks = self.listed_ranks()
        if self.collective or self.one_gpu_runs():
            return
        if (found := self.factor_override(ranks)) is not None:
            if found.all_reduce:
                self.collective, self.collective_source = "all_reduce", "busbw factor"
        elif ranks > 2 and self.best:
            algbw, busbw = self.best
            if abs(busbw / algbw - 2 * (ranks - 1) / ranks) <= ALL_REDUCE_FACTOR_TOLERANCE * busbw / algbw:
                self.collective, self.collective_source = "all_reduce", "busbw factor"
        if not self.collective and len(names := self.candidates()) == 1:
            basis = self.factor()  # not None: it gave the candidates
            self.collective = names[0]
            self.collective_source = "count column" if basis is not None and basis.said else "busbw factor"

    def status(self) -> str:
        if not self.footer:
            return "partial" if self.rows and not self.failed else "failed"
        if (self.wrong_total or 0) > 0 or (self.out_of_bounds or 0) > 0:
            return "data_error"
        return "complete"
