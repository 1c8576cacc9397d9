"""Fabric flags on benchmark rows written straight into the store (the parsers have their own tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracelog import api
from tracelog.analysis import refresh
from tracelog.store import Store
from tracelog.store.flags import flags

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
    for line, (size, bw, bad) in enumerate(zip(SIZES[: len(busbw)], busbw, wrong, strict=True), start=100):
        store.con.execute(
            "INSERT INTO collectives (bench_id, size_bytes, placement, busbw_gbps, algbw_gbps, wrong, line_no) "
            "VALUES (?, ?, 'out-of-place', ?, ?, ?, ?)",
            [bench_id, size, bw, bw * 8 / 14, bad, line],
        )
    return bench_id


HEALTHY = [0.5, 1.8, 6.5, 21.0, 60.0, 120.0, 180.0, 220.0, 232.0, 235.0, 236.0]


def rules_of(store: Store) -> dict[str, list[dict]]:
    refresh.refresh(store)
    out: dict[str, list[dict]] = {}
    for flag in flags(store).to_dict("records"):
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


def add_param(store: Store, bench_id: int, name: str, value: str) -> None:
    store.con.execute("INSERT INTO bench_params VALUES (?, ?, ?, 3)", [bench_id, name, value])


def add_tool_bench(store: Store, tool: str, status: str, ranks: int = 4) -> int:
    return store.scalar(
        "INSERT INTO benches (source_id, bench_key, tool, ranks, status, line_end) "
        "VALUES (1, (SELECT count(*) FROM benches), ?, ?, ?, 40) RETURNING bench_id",
        [tool, ranks, status],
    )


def nccl_stopped_before_max_bytes(store: Store) -> None:
    bench_id = add_bench(store, HEALTHY, status="partial")  # sizes up to 1 GiB
    add_param(store, bench_id, "maxBytes", "8589934592")


def nccl_max_bytes_reduced(store: Store) -> None:
    bench_id = add_bench(store, HEALTHY, status="partial")
    add_param(store, bench_id, "maxBytes", "8589934592")
    add_param(store, bench_id, "maxBytes reduced to", "1073741824")


def nccl_failed_without_rows(store: Store) -> None:
    add_tool_bench(store, "nccl-tests", "failed")


def p2p_excerpt(store: Store) -> None:
    bench_id = add_tool_bench(store, "p2pBandwidthLatencyTest", "partial")
    for src in range(4):
        for dst in range(4):
            store.con.execute(
                "INSERT INTO p2p VALUES (?, 'bandwidth_uni_p2p_on', ?, ?, 274.0, 'GB/s', ?)",
                [bench_id, src, dst, 10 + src],
            )
    for src in range(2):  # cut after two rows
        for dst in range(4):
            store.con.execute(
                "INSERT INTO p2p VALUES (?, 'bandwidth_bi_p2p_on', ?, ?, 520.0, 'GB/s', ?)",
                [bench_id, src, dst, 20 + src],
            )


def topo_rows_missing(store: Store) -> None:
    bench_id = add_tool_bench(store, "nvidia-smi-topo", "partial")
    devices = ["GPU0", "GPU1", "GPU2", "GPU10", "NIC0"]
    for line, a in enumerate(["GPU0", "GPU1"], start=2):
        for b in devices:
            store.con.execute(
                "INSERT INTO links VALUES (?, 'node-1', ?, ?, ?, NULL, ?)",
                [bench_id, a, b, "X" if a == b else "NV12", line],
            )


def all_reduce_bench_uneven(store: Store) -> None:
    bench_id = add_tool_bench(store, "all_reduce_bench", "partial")
    for line in range(7):  # 4 ranks, 7 results: one rank short of its second trial
        store.con.execute(
            "INSERT INTO collectives (bench_id, size_bytes, placement, busbw_gbps, line_no) "
            "VALUES (?, 4000000000, 'in-place', 93.0, ?)",
            [bench_id, 100 + line],
        )


@pytest.mark.parametrize(
    ("make", "severity", "says"),
    [
        (
            nccl_stopped_before_max_bytes,
            "warning",
            "nccl-tests partial: the sweep stopped at 1073741824 bytes (11 size(s)), before maxBytes 8589934592",
        ),
        (
            nccl_max_bytes_reduced,
            "warning",
            "nccl-tests partial: the sweep reached maxBytes (1073741824 bytes, 11 size(s)) but the test never "
            "printed its footer",
        ),
        (nccl_failed_without_rows, "critical", "nccl-tests failed: no row of its table was printed."),
        (
            p2p_excerpt,
            "warning",
            "p2pBandwidthLatencyTest partial: 2 of the 9 matrices of a full output printed "
            "(bandwidth_uni_p2p_on, bandwidth_bi_p2p_on); missing: connectivity, bandwidth_uni_p2p_off, "
            "bandwidth_bi_p2p_off, latency_gpu_p2p_off, latency_cpu_p2p_off, latency_gpu_p2p_on, "
            "latency_cpu_p2p_on; fewer than 4 rows in: bandwidth_bi_p2p_on.",
        ),
        (
            topo_rows_missing,
            "warning",
            "nvidia-smi-topo partial: rows missing for GPU2, GPU10, NIC0 of the 5 devices its header names",
        ),
        (
            all_reduce_bench_uneven,
            "warning",
            "all_reduce_bench partial: its ranks did not all print the same number of results (7 in all "
            "from 4 rank(s))",
        ),
    ],
    ids=lambda v: getattr(v, "__name__", None),
)
def test_incomplete_says_what_is_missing_in_the_terms_of_its_tool(
    store: Store, make, severity: str, says: str
) -> None:
    make(store)
    (flag,) = rules_of(store)["bench_incomplete"]
    assert flag["severity"] == severity
    assert says in flag["message"]
    if not says.startswith("nccl-tests"):
        assert "message size" not in flag["message"] and "sweep" not in flag["message"]


def test_latency_bound_sizes(store: Store) -> None:
    add_bench(store, HEALTHY)
    (flag,) = rules_of(store)["latency_bound"]
    assert flag["measured"] == 2**18  # 60 GB/s at 256 KiB is under half of the 236 GB/s plateau
    assert flag["expected"] == 2**20  # 120 GB/s at 1 MiB is past half of it


def test_a_dip_past_the_half_plateau_is_not_latency_bound(store: Store) -> None:
    # Invented: a congested fabric whose 64 MiB and 1 GiB points fall back under half the plateau; the
    # latency-bound sizes are still the small ones before the curve first reaches half.
    add_bench(store, [0.5, 1.8, 6.5, 21.0, 60.0, 120.0, 180.0, 90.0, 232.0, 235.0, 101.0])
    (flag,) = rules_of(store)["latency_bound"]
    assert (flag["measured"], flag["expected"]) == (2**18, 2**20)
    assert flag["message"].startswith("Messages up to 262.144 KB reach less than 50%")


def test_a_sweep_cut_before_its_plateau_has_no_latency_bound_sizes(store: Store) -> None:
    # Modeled on a two-node sendrecv that stopped at 4 KiB (nccl-tests#214): the last size printed is
    # the peak, twice the one before; nothing says where the plateau is, so no size is held to it. The
    # same sweep carried on to where it flattens has latency-bound sizes again.
    add_bench(store, [0.01, 0.03, 0.06, 0.13], status="partial")
    assert "latency_bound" not in rules_of(store)
    add_bench(store, [0.01, 0.03, 0.06, 0.13, 0.5, 1.9, 6.0, 10.5, 11.6, 11.9, 12.0])
    (flag,) = rules_of(store)["latency_bound"]
    assert (flag["measured"], flag["expected"]) == (2**20, 2**22)


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


def test_pairs_without_p2p_are_counted_once_across_matrices(store: Store) -> None:
    # Modeled on an 8-GPU box whose GPUs cannot access each other (no P2P): every matrix, unidirectional
    # and bidirectional, shows the same bandwidth with P2P on as off. 8 GPUs have 56 ordered pairs.
    bench_id = store.scalar(
        "INSERT INTO benches (source_id, bench_key, tool) VALUES (1, 0, 'p2pBandwidthLatencyTest') RETURNING bench_id"
    )
    for matrix, value in (("bandwidth_uni_p2p", 10.5), ("bandwidth_bi_p2p", 15.2)):
        for state in ("on", "off"):
            for src in range(8):
                for dst in range(8):
                    store.con.execute(
                        "INSERT INTO p2p VALUES (?, ?, ?, ?, ?, 'GB/s', ?)",
                        [bench_id, f"{matrix}_{state}", src, dst, 400.0 if src == dst else value, 10 + src],
                    )
    (flag,) = rules_of(store)["p2p_disabled"]
    assert flag["measured"] == 56 and flag["message"].startswith("56 GPU pair(s) gain nothing")
    assert flag["message"].endswith("their traffic goes through host memory.")
    # the same with the GPU latency falling tenfold when P2P is on: P2P works, over PCIe (modeled on a
    # p2pBandwidthLatencyTest of 8 A100 in a VM that exposes no NVLink: 20.1 us off, 2.25 us on)
    for state, latency in (("off", 20.1), ("on", 2.25)):
        for src in range(8):
            for dst in range(8):
                store.con.execute(
                    "INSERT INTO p2p VALUES (?, ?, ?, ?, ?, 'us', ?)",
                    [
                        bench_id,
                        f"latency_gpu_p2p_{state}",
                        src,
                        dst,
                        0.0 if src == dst else latency,
                        40 + src,
                    ],
                )
    store.con.execute("DELETE FROM flags")
    (flag,) = rules_of(store)["p2p_disabled"]
    assert (
        "P2P is on (GPU latency 20.1 → 2.25 µs)" in flag["message"] and "PCIe, not NVLink" in flag["message"]
    )


def test_pairs_slower_with_p2p_than_through_host_memory_point_at_acs(store: Store) -> None:
    """Modeled on NVIDIA/nccl#814's 6-GPU PCIe box (invented cells in its shape): about 22 GB/s between
    every pair with P2P off, about 10 with P2P writes on. Not 'no gain' but a detour: the flag says slower
    and points at PCIe ACS; a box at 95 % of its P2P-off figures keeps the 'gain nothing' message."""
    for box, on in ((0, 9.9), (1, 21.0)):
        bench_id = store.scalar(
            "INSERT INTO benches (source_id, bench_key, tool) VALUES (1, ?, 'p2pBandwidthLatencyTest') "
            "RETURNING bench_id",
            [box],
        )
        for matrix, value in (("bandwidth_uni_p2p_off", 22.2), ("bandwidth_uni_p2p_on", on)):
            for src in range(6):
                for dst in range(6):
                    store.con.execute(
                        "INSERT INTO p2p VALUES (?, ?, ?, ?, ?, 'GB/s', ?)",
                        [bench_id, matrix, src, dst, 915.0 if src == dst else value, 10 + src],
                    )
    slower, none = sorted(rules_of(store)["p2p_disabled"], key=lambda f: f["subject"])
    assert slower["measured"] == 30 and slower["ratio"] == pytest.approx(9.9 / 22.2)
    assert "slower with P2P enabled than through host memory (median 45% of it)" in slower["message"]
    assert "ACS" in slower["hint"]
    assert none["message"].startswith("30 GPU pair(s) gain nothing")


def test_a_pair_that_gains_in_its_bidirectional_matrix_is_not_flagged(store: Store) -> None:
    """Modeled on two RTX 4090 on a driver that enables P2P over PCIe: unidirectional 6.34 off against
    6.60 on (no gain), bidirectional 8.66 against 12.88 (+49 %). The pair's traffic does not go through
    host memory, so no flag; a second box whose pair gains nowhere is flagged."""
    for box, bi_on in ((0, 12.88), (1, 8.70)):
        bench_id = store.scalar(
            "INSERT INTO benches (source_id, bench_key, tool) VALUES (1, ?, 'p2pBandwidthLatencyTest') "
            "RETURNING bench_id",
            [box],
        )
        cells = {"bandwidth_uni_p2p_off": 6.34, "bandwidth_uni_p2p_on": 6.60}
        cells |= {"bandwidth_bi_p2p_off": 8.66, "bandwidth_bi_p2p_on": bi_on}
        for matrix, value in cells.items():
            for src, dst in ((0, 1), (1, 0)):
                store.con.execute(
                    "INSERT INTO p2p VALUES (?, ?, ?, ?, ?, 'GB/s', ?)",
                    [bench_id, matrix, src, dst, value, 10],
                )
    flags = rules_of(store)["p2p_disabled"]
    assert [(f["subject"], f["measured"]) for f in flags] == [("p2p 2", 2.0)]


def test_a_sweep_cut_before_its_plateau_is_not_held_to_the_spec(store: Store) -> None:
    """A pasted first row of an MI300X all_reduce (8 MB at 161 GB/s, modeled on an rccl-tests excerpt) says
    nothing of the plateau: an info, not a low-bandwidth warning, and an AMD hint on the full sweep."""
    add_bench(store, [0.3, 1.1, 4.2, 16.0, 161.0][-1:], status="partial", gpu_name="AMD Instinct MI300X")
    (flag,) = rules_of(store)["low_bandwidth"]
    assert flag["severity"] == "info" and "stops before its curve flattens" in flag["message"]
    store.con.execute("DELETE FROM flags")
    store.con.execute("DELETE FROM collectives")
    store.con.execute("DELETE FROM benches")
    add_bench(store, [0.3, 1.1, 4.2, 16.0, 50.0, 120.0, 150.0, 160.0, 161.0], gpu_name="AMD Instinct MI300X")
    (flag,) = rules_of(store)["low_bandwidth"]
    assert flag["severity"] == "warning" and "rocm-smi --showtopo" in flag["hint"]


def test_wrong_values_in_one_row_are_said_at_that_size(store: Store) -> None:
    add_bench(store, HEALTHY, wrong=[0] * 5 + [96] + [0] * 5)
    (flag,) = rules_of(store)["nccl_data_error"]
    assert flag["message"].startswith("96 wrong values in 1 row(s), at 1.04858 MB:")


def test_a_sweep_whose_busbw_collapses_past_a_size_is_warned(store: Store) -> None:
    # Invented, in the shape of a two-node alltoall whose busbw fell twenty-fold past one size and climbed
    # back only at the largest: the sizes under half of the best before them are named.
    add_bench(store, [0.5, 1.8, 6.5, 21.0, 30.2, 1.6, 0.8, 1.2, 4.6, 11.1, 34.2])
    (flag,) = rules_of(store)["bandwidth_collapse"]
    assert (flag["severity"], flag["measured"], flag["expected"], flag["row_ref"]) == (
        "warning",
        1.6,
        30.2,
        "line 105, out-of-place",
    )
    assert flag["message"].startswith(
        "out-of-place busbw falls from 30.2 GB/s at 262.144 KB to 1.6 GB/s at 1.04858 MB: 5 size(s) from 1.04858 MB "
        "to 268.435 MB"
    )


@pytest.mark.parametrize(
    "busbw",
    [HEALTHY, [0.5, 1.8, 6.5, 21.0, 60.0, 120.0, 180.0, 150.0, 232.0, 190.0, 236.0], [9.0, 0.4, 6.5, 21.0]],
    ids=["healthy", "noisy-plateau", "latency-blip-below-1MiB"],
)
def test_noise_and_a_blip_among_small_messages_are_no_collapse(store: Store, busbw: list[float]) -> None:
    add_bench(store, busbw)
    assert "bandwidth_collapse" not in rules_of(store)


def add_placement(store: Store, bench_id: int, placement: str, rows: list[tuple[int, float]]) -> None:
    for line, (size, busbw) in enumerate(rows, start=200):
        store.con.execute(
            "INSERT INTO collectives (bench_id, size_bytes, placement, busbw_gbps, algbw_gbps, wrong, line_no) "
            "VALUES (?, ?, ?, ?, ?, 0, ?)",
            [bench_id, size, placement, busbw, busbw * 8 / 15, line],
        )


def test_an_in_place_collapse_is_warned_where_out_of_place_holds(store: Store) -> None:
    """Invented, in the shape of a published 2 x 8 GPU all_reduce over Spectrum-X (nccl-tests 2.18.3): the
    in-place column falls from 11.07 to 1.76 GB/s at 8 MiB while the out-of-place one rises on."""
    bench_id = store.scalar(
        "INSERT INTO benches (source_id, bench_key, tool, collective, ranks, nodes, gpus_per_node, status) "
        "VALUES (1, 0, 'nccl-tests', 'all_reduce', 16, 2, 8, 'complete') RETURNING bench_id"
    )
    sizes = [1 << k for k in range(20, 28)]
    out_of_place = [1.56, 10.16, 11.07, 11.34, 32.93, 39.40, 44.91, 48.00]
    in_place = [1.58, 10.19, 11.07, 1.76, 32.78, 39.62, 44.86, 47.90]
    add_placement(store, bench_id, "out-of-place", list(zip(sizes, out_of_place, strict=True)))
    add_placement(store, bench_id, "in-place", list(zip(sizes, in_place, strict=True)))
    (flag,) = rules_of(store)["bandwidth_collapse"]
    assert (flag["measured"], flag["expected"], flag["row_ref"]) == (1.76, 11.07, "line 203, in-place")
    assert flag["message"].startswith(
        "in-place busbw falls from 11.07 GB/s at 4.1943 MB to 1.76 GB/s at 8.38861 MB: 1 size(s)"
    )


def test_a_collapse_in_both_placements_is_one_flag_each(store: Store) -> None:
    bench_id = store.scalar(
        "INSERT INTO benches (source_id, bench_key, tool, collective, ranks, nodes, gpus_per_node, status) "
        "VALUES (1, 0, 'nccl-tests', 'all_reduce', 16, 2, 8, 'complete') RETURNING bench_id"
    )
    sizes = [1 << k for k in range(20, 25)]
    add_placement(
        store, bench_id, "out-of-place", list(zip(sizes, [1.66, 9.61, 10.58, 0.72, 25.49], strict=True))
    )
    add_placement(store, bench_id, "in-place", list(zip(sizes, [1.68, 9.75, 6.50, 0.49, 13.63], strict=True)))
    flags = rules_of(store)["bandwidth_collapse"]
    assert sorted((f["message"].split(" busbw")[0], f["measured"], f["expected"]) for f in flags) == [
        ("in-place", 0.49, 9.75),
        ("out-of-place", 0.72, 10.58),
    ]


# alltoall_perf on one RTX 5090 (the shape of nccl-tests issue #287; sizes, pid and host invented): the
# in-place row times a launch (0.78 us for 32 MiB), and busbw is 0 on one rank by nccl-tests' factor.
ONE_GPU_ALLTOALL = """\
$ ./build/alltoall_perf -b 16M -e 32M -f 2
# nThread 1 nGpus 1 minBytes 16777216 maxBytes 33554432 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  41234 on     gpu-ws device  0 [0x01] NVIDIA GeForce RTX 5090
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
    16777216       4194304     float    none      -1    10.41  1611.65    0.00      0     0.79  21237.0    0.00    N/A
    33554432       8388608     float    none      -1    19.56  1715.44    0.00      0     0.78  43046.1    0.00    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0
#
"""


def ingested_flags(tmp_path: Path, text: str) -> dict[str, list[dict]]:
    log = tmp_path / "bench.txt"
    log.write_text(text, encoding="utf-8")
    db = tmp_path / "b.duckdb"
    api.ingest(db, [str(log)])
    out: dict[str, list[dict]] = {}
    for flag in api.flags(db).to_dict("records"):
        out.setdefault(flag["rule"], []).append(flag)
    return out


def test_one_gpu_faster_than_its_memory_is_no_measurement(tmp_path: Path) -> None:
    found = ingested_flags(tmp_path, ONE_GPU_ALLTOALL)
    (flag,) = found["impossible_bandwidth"]
    assert (flag["severity"], flag["measured"], flag["expected"], flag["row_ref"]) == (
        "warning",
        43046.1,
        1792.0,
        "line 11",
    )
    assert flag["message"].startswith(
        "alltoall on one GPU: algbw 43046.1 GB/s at 33.5544 MB (in-place in 0.78 µs) is 24.0x the NVIDIA GeForce "
        "RTX 5090's memory bandwidth, 1792 GB/s"
    )
    assert "(2 row(s) above it)" in flag["message"] and "nothing to copy" in flag["message"]
    (note,) = found["one_rank_bench"]
    assert note["severity"] == "info" and "(n-1)/n, 0 for n = 1" in note["message"]


def test_a_one_gpu_broadcast_is_not_said_to_have_busbw_0(tmp_path: Path) -> None:
    """broadcast's busbw factor is 1 (src/broadcast.cu): on one rank its busbw is its algbw, a copy."""
    text = ONE_GPU_ALLTOALL.replace("alltoall_perf", "broadcast_perf").replace(
        "    none      -1", "    none       0"
    )
    text = text.replace("1611.65    0.00", "1611.65 1611.65").replace("1715.44    0.00", "1715.44 1715.44")
    text = text.replace("21237.0    0.00", "  900.0   900.0").replace("43046.1    0.00", " 1700.0  1700.0")
    assert ingested_flags(tmp_path, text).keys().isdisjoint({"impossible_bandwidth", "one_rank_bench"})


def add_ranks_bench(store: Store, gpu_name: str, busbw: list[float]) -> None:
    bench_id = add_bench(store, busbw, gpu_name=gpu_name)
    store.con.execute(
        "UPDATE collectives SET algbw_gbps = busbw_gbps * 8 / 14 WHERE bench_id = ?", [bench_id]
    )


def test_busbw_above_both_directions_of_every_link_is_no_measurement(store: Store) -> None:
    """8 x A100 SXM (NVLink 3: 300 GB/s each way, 600 both): an invented 650 GB/s at 1 GiB cannot be."""
    add_ranks_bench(store, "NVIDIA A100-SXM4-80GB", HEALTHY[:-1] + [650.0])
    (flag,) = rules_of(store)["impossible_bandwidth"]
    assert (flag["measured"], flag["expected"], flag["row_ref"]) == (650.0, 600.0, "line 110")
    assert "8 ranks: busbw 650 GB/s at 1.07374 GB (out-of-place) is 1.1x" in flag["message"]
    assert "NVLink 3 (12 links) bidirectional figure" in flag["message"]


@pytest.mark.parametrize(
    "gpu_name, peak",
    [("NVIDIA H100 80GB HBM3", 480.0), ("NVIDIA GeForce RTX 9999", 5000.0)],
    ids=["NVLS all-reduce above the one-way figure", "GPU the catalog does not know"],
)
def test_busbw_a_link_can_carry_is_left_alone(store: Store, gpu_name: str, peak: float) -> None:
    add_ranks_bench(store, gpu_name, HEALTHY[:-1] + [peak])
    assert "impossible_bandwidth" not in rules_of(store)
