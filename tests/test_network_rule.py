"""The `nccl_socket_network` flag: NCCL fell back to TCP sockets between nodes.

The NCCL lines are written as NCCL 2.x prints them at init with NCCL_DEBUG=INFO (`NET/IB : No device
found.`, `NET/Socket : Using [0]eth0:...`, `Using network Socket`), behind the launcher's `0: ` prefix;
host names and addresses are invented. They are put before the bundled Megatron-LM sample, as a job
script's output would have them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SAMPLES
from tracelog import api
from tracelog.store import Store

MEGATRON = (SAMPLES / "megatron_lm_llama3_8b_h100.log").read_text(encoding="utf-8")


def nccl_init(network: str, hosts: tuple[str, ...]) -> str:
    lines = []
    for rank, host in enumerate(hosts):
        prefix = f"{rank}: {host}:4247{rank}:4247{rank} [0] NCCL INFO"
        if network == "Socket":
            lines += [
                f"{prefix} NET/IB : No device found.",
                f"{prefix} NET/Socket : Using [0]eth0:10.148.8.4{rank}<0>",
            ]
        else:
            lines.append(
                f"{prefix} NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.148.8.4{rank}<0>"
            )
        lines.append(f"{prefix} Using network {network}")
    return "\n".join(lines) + "\n"


def ingest(tmp_path: Path, text: str) -> Path:
    log = tmp_path / "run.log"
    log.write_text(text, encoding="utf-8")
    db = tmp_path / "a.duckdb"
    api.ingest(db, [str(log)])
    return db


def socket_flags(db: Path) -> list[tuple[str, str, str]]:
    flags = api.flags(db)
    hits = flags[flags["rule"] == "nccl_socket_network"]
    return list(zip(hits["subject"], hits["row_ref"], hits["message"], strict=True))


def test_a_run_across_nodes_over_sockets_is_flagged(tmp_path: Path) -> None:
    db = ingest(tmp_path, nccl_init("Socket", ("node-a01", "node-a02")) + MEGATRON)
    with Store(db) as store:
        runs = [r for (r,) in store.con.execute("SELECT run_id FROM runs ORDER BY 1").fetchall()]
        recorded = store.con.execute(
            "SELECT DISTINCT value, detail FROM hardware_sources WHERE fact = 'nccl_network'"
        ).fetchall()
    assert recorded == [("Socket", "line 3 (NCCL)")]
    found = socket_flags(db)
    assert [s for s, _, _ in found] == [f"run {r}" for r in runs]
    assert all(ref == "line 3" and "TCP sockets (line 3" in msg for _, ref, msg in found)
    hint = api.flags(db).query("rule == 'nccl_socket_network'")["hint"].iloc[0]
    assert "NCCL_IB_HCA" in hint and "aws-ofi-nccl" in hint


@pytest.mark.parametrize(
    ("network", "hosts"),
    [
        ("Socket", ("node-a01",)),
        ("IB", ("node-a01", "node-a02")),
        ("AWS Libfabric", ("node-a01", "node-a02")),
    ],
    ids=["sockets inside one node", "InfiniBand across nodes", "the OFI plugin across nodes"],
)
def test_no_flag_where_sockets_carry_nothing_or_rdma_was_found(
    tmp_path: Path, network: str, hosts: tuple[str, ...]
) -> None:
    db = ingest(tmp_path, nccl_init(network, hosts) + MEGATRON)
    assert socket_flags(db) == []
    assert set(api.sql(db, "SELECT value FROM hardware_sources WHERE fact = 'nccl_network'")["value"]) == {
        network
    }


def test_the_flag_survives_growth_after_the_nccl_lines(tmp_path: Path) -> None:
    """A grown log resumes and scans only its new lines: what NCCL said before stays recorded."""
    text = nccl_init("Socket", ("node-a01", "node-a02")) + MEGATRON
    cut = text.index("\n", len(text) // 2) + 1
    log = tmp_path / "run.log"
    log.write_text(text[:cut], encoding="utf-8")
    db = tmp_path / "a.duckdb"
    api.ingest(db, [str(log)])
    before = socket_flags(db)
    log.write_text(text, encoding="utf-8")
    (grown,) = api.ingest(db, [str(log)])
    assert grown.status == "appended"
    assert socket_flags(db)[: len(before)] == before and before


# nccl-tests across two nodes through mpirun, NCCL falling back to sockets (invented; the device lines in
# nccl-tests' format, the NCCL lines as above).
NCCL_TESTS = (
    "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
    "validation: 1 graph: 0\n#\n# Using devices\n"
    + "".join(
        f"#  Rank {r:2d} Group  0 Pid {4000 + r} on {'node-a01' if r < 2 else 'node-a02'} device  {r % 2} [0x07] "
        "NVIDIA A100-SXM4-80GB\n"
        for r in range(4)
    )
    + "node-a01:4000:4000 [0] NCCL INFO NET/IB : No device found.\n"
    + "node-a01:4000:4000 [0] NCCL INFO NET/Socket : Using [0]eth0:10.148.8.41<0>\n"
    + "node-a01:4000:4000 [0] NCCL INFO Using network Socket\n"
    + "#\n#                                                              out-of-place                       in-place\n"
    + "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
    + "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n"
    + "     1048576        262144     float     sum      -1    901.2    1.16    1.75      0    900.8    1.16    1.75      0\n"
    + "     2097152        524288     float     sum      -1   1702.5    1.23    1.85      0   1701.9    1.23    1.85      0\n"
    + "     4194304       1048576     float     sum      -1   3330.7    1.26    1.89      0   3329.2    1.26    1.89      0\n"
    + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1.83\n"
)


def test_a_bench_across_nodes_over_sockets_is_flagged(tmp_path: Path) -> None:
    log = tmp_path / "nccl.txt"
    log.write_text(NCCL_TESTS, encoding="utf-8")
    db = tmp_path / "b.duckdb"
    api.ingest(db, [str(log)])
    assert api.sql(db, "SELECT nodes FROM benches")["nodes"].tolist() == [2]
    found = socket_flags(db)
    assert [(s, ref) for s, ref, _ in found] == [("bench 1", "line 10")]
