"""NCCL talking between nodes over TCP sockets: the network a run or bench was meant to use was not found.

NCCL says which transport it took between nodes in one INFO line (`NCCL INFO Using network IB`; with a
plugin, its name: `AWS Libfabric`). `Socket` is its fallback when it finds no RDMA device or plugin (a
container without `/dev/infiniband`, `NCCL_IB_HCA` naming a device that is not there, `NCCL_NET=Socket`
left set, aws-ofi-nccl not on the library path): every collective across nodes then runs over TCP on
the host's Ethernet port, often an order of magnitude under the fabric, with no error. `resolve` records
the line per run and bench (`nccl_network` in `hardware_sources`); only subjects that span nodes are
flagged, since inside one node NCCL uses NVLink, PCIe or shared memory whatever it says of the network.
"""

from __future__ import annotations

from tracelog.analysis.rules import Flag, bench_flag, run_flag
from tracelog.analysis.scope import Scope
from tracelog.store import Store
from tracelog.thresholds import Thresholds

RULE = "nccl_socket_network"
HINT = (
    "NCCL found no RDMA network and fell back to TCP: check that the InfiniBand/RoCE devices are visible "
    "where the job runs (`ibv_devinfo` inside the container, `--device /dev/infiniband`), that NCCL_IB_HCA "
    "names devices that exist and NCCL_NET is not set to Socket, and on EFA or Slingshot that the OFI "
    "plugin (aws-ofi-nccl) is on the library path; NCCL_DEBUG=INFO then prints 'Using network IB' or the "
    "plugin's name."
)
SPANS_NODES = "(coalesce({t}.nodes, 1) > 1 OR len(coalesce({t}.hosts, [])) > 1)"


def _line(detail: str) -> str:
    return detail.split(" (")[0]  # `line 12 (NCCL)`: the line


def _message(what: str, detail: str) -> str:
    return (
        f"NCCL runs this {what}'s traffic between nodes over TCP sockets ({_line(detail)}: 'Using network "
        "Socket'): collectives across nodes get the host Ethernet's bandwidth, not the fabric's"
    )


def runs(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    rows = store.con.execute(
        f"""
        SELECT h.run_id, h.detail FROM run_hardware h JOIN runs r USING (run_id)
        WHERE {scope.runs} AND h.fact = 'nccl_network' AND h.value = 'Socket'
          AND ({SPANS_NODES.format(t="r")} OR r.gpus > coalesce(r.gpus_per_node, r.gpus))
        ORDER BY h.run_id
        """
    ).fetchall()
    return [
        run_flag(RULE, "warning", run_id, _message("run", detail), HINT, row_ref=_line(detail))
        for run_id, detail in rows
    ]


def benches(store: Store, t: Thresholds, scope: Scope) -> list[Flag]:
    rows = store.con.execute(
        f"""
        SELECT h.bench_id, h.detail FROM bench_hardware h JOIN benches b USING (bench_id)
        WHERE {scope.benches} AND h.fact = 'nccl_network'
          AND h.value = 'Socket' AND {SPANS_NODES.format(t="b")}
        ORDER BY h.bench_id
        """
    ).fetchall()
    return [
        bench_flag(RULE, "warning", bench_id, _message("bench", detail), HINT, row_ref=_line(detail))
        for bench_id, detail in rows
    ]
