"""Fabric flags on benchmark rows written straight into the store (the parsers have their own tests)."""

from __future__ import annotations

import pytest

from tracelog import compare
from tracelog.store import Store

SIZES = [2**k for k in range(10, 31, 2)]  # 1 KiB .. 1 GiB


def add_bench(
    store: Store,
    busbw: list[float],
    wrong: list[int] | None = None,
    status: str = "complete",
    gpu_name: str = "NVIDIA A100-SXM4-80GB",
    nodes: int = 1,
) -> int:
    bench_id = store.scalar(
        "INSERT INTO benches (source_id, bench_key, tool, collective, ranks, nodes, gpus_per_node, gpu_name, status) "
        "VALUES (1, (SELECT count(*) FROM benches), 'nccl-tests', 'all_reduce', 8, ?, 8, ?, ?) RETURNING bench_id",
        [nodes, gpu_name, status],
    )
    wrong = wrong or [0] * len(busbw)
    for line, (size, bw, bad) in enumerate(zip(SIZES, busbw, wrong, strict=True), start=100):
        store.con.execute(
            "INSERT INTO collectives (bench_id, size_bytes, placement, busbw_gbps, algbw_gbps, wrong, line_no) "
            "VALUES (?, ?, 'out-of-place', ?, ?, ?, ?)",
            [bench_id, size, bw, bw * 8 / 14, bad, line],
        )
    return bench_id


HEALTHY = [0.5, 1.8, 6.5, 21.0, 60.0, 120.0, 180.0, 220.0, 232.0, 235.0, 236.0]


def rules_of(store: Store) -> dict[str, list[dict]]:
    compare.refresh(store)
    out: dict[str, list[dict]] = {}
    for flag in compare.flags(store).to_dict("records"):
        out.setdefault(flag["rule"], []).append(flag)
    return out


def test_wrong_values_are_a_critical_data_error(store: Store) -> None:
    add_bench(store, HEALTHY, wrong=[0] * 9 + [3, 5])
    (flag,) = rules_of(store)["nccl_data_error"]
    assert flag["severity"] == "critical" and flag["measured"] == 8
    assert "268.435 MB" in flag["message"] and flag["row_ref"] == "line 109"


def test_partial_bench_is_marked(store: Store) -> None:
    add_bench(store, HEALTHY, status="partial")
    (flag,) = rules_of(store)["bench_incomplete"]
    assert flag["severity"] == "warning"


def test_latency_bound_sizes(store: Store) -> None:
    add_bench(store, HEALTHY)
    (flag,) = rules_of(store)["latency_bound"]
    assert flag["measured"] == 2**18  # 60 GB/s at 256 KiB is under half of the 236 GB/s plateau
    assert flag["expected"] == 2**20  # 120 GB/s at 1 MiB is past half of it


def test_p2p_outlier_pair(store: Store) -> None:
    bench_id = store.scalar(
        "INSERT INTO benches (source_id, bench_key, tool) VALUES (1, 0, 'p2pBandwidthLatencyTest') RETURNING bench_id"
    )
    for src in range(4):
        for dst in range(4):
            value = 1500.0 if src == dst else (40.0 if (src, dst) == (1, 3) else 274.0)
            store.con.execute(
                "INSERT INTO p2p VALUES (?, 'bandwidth_uni_p2p_on', ?, ?, ?, 'GB/s', ?)",
                [bench_id, src, dst, value, 10 + src],
            )
    (flag,) = rules_of(store)["p2p_disabled"]
    assert "1→3" in flag["message"] and flag["measured"] == pytest.approx(40.0)
