"""Bandwidths no part of the machine can carry, and the one-rank bench whose busbw is 0 by definition.

A collective row's bandwidth has a ceiling the hardware catalog knows:

- Across two ranks or more, busbw (nccl-tests doc/PERFORMANCE.md) is what each rank's link carries in one
  direction; an NVLink SHARP all-reduce, the switch reducing, can take it towards 2(n-1)/n of the link's
  unidirectional figure, but never past both directions together. So the ceiling is the largest
  bidirectional figure of any link of the GPU (its NVLink/xGMI or PCIe, a bridge, its network ports).
- On one rank, busbw is 0 for every collective whose factor is (n-1)/n or 2(n-1)/n (src/*.cu `GetBw`:
  all_reduce, all_gather, reduce_scatter, alltoall, gather, scatter) and algbw is all there is: a copy
  within the GPU (NCCL's one-rank path, `enqueue.cc`, copies the send buffer into the receive buffer and
  does nothing where they are one, in place). Its ceiling is the GPU's memory bandwidth (a copy reads and
  writes each byte, so from DRAM it reaches half of that; the rest is room for sizes the L2 holds).

A row above its ceiling is no measurement: the time is too short for the bytes (a launch timed, nothing
moved), or the figures come from another run or other sizes than the ones printed.
"""

from __future__ import annotations

from tracelog.analysis.rules import Flag, bench_flag, size_text
from tracelog.analysis.scope import Scope
from tracelog.errors import TracelogError
from tracelog.hardware import Gpu, Link, gpu_for, link
from tracelog.store import Store
from tracelog.thresholds import Thresholds

HINT = (
    "Look at the bench's timing: a few µs for megabytes is a kernel launch, not a transfer (on one rank an "
    "in-place collective copies nothing). Check that the output is this run's (not a result cached or pasted "
    "from another) and that the sizes are the ones it moved (-b/-e/-f, -d). To measure a link, run out of "
    "place on 2 ranks or more."
)
ONE_RANK_HINT = (
    "Run on 2 GPUs or more (-g N, or one rank per GPU with mpirun/srun) to measure NVLink, PCIe or the "
    "network; on one GPU nvbandwidth's device_local_copy measures the copy."
)
ZERO_FACTOR = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "alltoallv", "gather", "scatter")
"""The collectives whose busbw factor is 0 on one rank: 2(n-1)/n or (n-1)/n (nccl-tests src/*.cu)."""


def widest_link(gpu: Gpu) -> Link | None:
    """The link of `gpu` with the largest bidirectional figure: its GPU-to-GPU link, a bridge, its network
    ports, its PCIe slot."""
    ids = [gpu.intra_node_link, gpu.bridge_link, gpu.network_link]
    ids.append(f"pcie{gpu.pcie_gen}-x16" if gpu.pcie_gen else None)
    found = []
    for link_id in filter(None, ids):
        try:
            found.append(link(link_id))
        except TracelogError:  # a PCIe generation the catalog has no slot for
            continue
    return max(found, key=lambda x: x.bidirectional_gbps, default=None)


def impossible(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    """Rows whose bandwidth is above what the GPU can move (see the module's docstring), one flag per bench
    naming the highest; and a one-rank bench whose busbw is 0 by nccl-tests' definition, said once."""
    benches = store.con.execute(
        f"""
        SELECT b.bench_id, b.ranks, b.gpu_model, b.gpu_name, b.collective,
               max(c.algbw_gbps), max(c.busbw_gbps), min(c.line_no)
        FROM benches b JOIN collectives c USING (bench_id)
        WHERE {scope.benches.replace("bench_id", "b.bench_id")} AND b.ranks >= 1
        GROUP BY ALL
        """
    ).fetchall()
    flags = []
    for bench_id, ranks, gpu_model, gpu_name, collective, algbw, busbw, first_line in benches:
        if ranks == 1 and busbw == 0 and (collective is None or collective in ZERO_FACTOR):
            # unnamed, it is one of these all the same: the others' busbw is their algbw
            flags.append(_one_rank(bench_id, collective, first_line))
        collective = collective or "A collective"
        gpu = gpu_for(gpu_model, gpu_name)
        if gpu is None:
            continue
        if ranks == 1:
            column, ceiling, what = "algbw", gpu.memory_bandwidth_gbps, "memory bandwidth"
        else:
            widest = widest_link(gpu)
            if widest is None:
                continue
            column, ceiling = "busbw", widest.bidirectional_gbps
            what = f"{widest.name} bidirectional figure"
        if not ceiling or ((algbw if ranks == 1 else busbw) or 0) <= ceiling:
            continue
        flags.append(_above(store, bench_id, ranks, gpu, collective, column, ceiling, what))
    return flags


def _above(
    store: Store,
    bench_id: int,
    ranks: int,
    gpu: Gpu,
    collective: str,
    column: str,
    ceiling: float,
    what: str,
) -> Flag:
    row = store.con.execute(
        f"""
        SELECT count(*), max({column}_gbps), arg_max(size_bytes, {column}_gbps), arg_max(placement, {column}_gbps),
               arg_max(time_us, {column}_gbps), arg_max(line_no, {column}_gbps), bool_and(placement = 'in-place')
        FROM collectives WHERE bench_id = ? AND {column}_gbps > ?
        """,
        [bench_id, ceiling],
    ).fetchone()
    assert row is not None  # an aggregate without GROUP BY returns one row
    count, value, size, placement, time_us, line, in_place_only = row
    took = f" in {time_us:g} µs" if time_us is not None else ""
    where = "one GPU" if ranks == 1 else f"{ranks} ranks"
    message = (
        f"{collective} on {where}: {column} {value:g} GB/s at {size_text(size)} ({placement}{took}) is "
        f"{value / ceiling:.1f}x the {gpu.name}'s {what}, {ceiling:g} GB/s, the most "
        + ("a copy within the GPU can move" if ranks == 1 else "any of its links carries")
        + f": not a measurement ({count} row(s) above it)."
    )
    if ranks == 1 and in_place_only:
        message += " In place on one rank NCCL has nothing to copy: the time is a launch."
    return bench_flag(
        "impossible_bandwidth",
        "warning",
        bench_id,
        message,
        HINT,
        row_ref=f"line {line}",
        measured=float(value),
        expected=float(ceiling),
        ratio=float(value) / ceiling,
    )


def _one_rank(bench_id: int, collective: str | None, line: int) -> Flag:
    factor = {"all_reduce": "2(n-1)/n", None: "2(n-1)/n or (n-1)/n"}.get(collective, "(n-1)/n")
    return bench_flag(
        "one_rank_bench",
        "info",
        bench_id,
        f"{collective or 'A collective'} on one rank: its busbw and the average are 0 by nccl-tests' definition "
        f"(busbw = algbw x {factor}, 0 for n = 1), not a fault; the run moved data only within the GPU and "
        "measured no link.",
        ONE_RANK_HINT,
        row_ref=f"line {line}",
    )


def evaluate(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    return impossible(store, t, scope)
