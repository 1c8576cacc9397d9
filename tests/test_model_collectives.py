"""nccl-tests bandwidth definitions, the alpha–beta model, p2p shares and link choice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.conftest import CORPUS, SAMPLES, alone, corpus_files
from tracelog import api, hardware
from tracelog.cli import cli
from tracelog.errors import TracelogError
from tracelog.model.collectives import (
    BUSBW_FACTOR,
    DEFAULT_NET_EFFICIENCY,
    Placement,
    algbw,
    algorithms,
    bench_placement,
    busbw,
    fit_alpha_beta,
    link_class,
    link_for,
    nccl_curve,
    node_nics,
    normalize_op,
    plateau_busbw,
    predict_collective,
    predict_curve,
    predict_nccl,
    ring_busbw_bound,
)
from tracelog.store import Store


@pytest.mark.parametrize(
    ("op", "factor_at_8"),
    # nccl-tests doc/PERFORMANCE.md and src/*.cu: 2(n-1)/n, (n-1)/n or 1.
    [
        ("all_reduce", 1.75),
        ("reduce_scatter", 0.875),
        ("all_gather", 0.875),
        ("alltoall", 0.875),
        ("gather", 0.875),
        ("scatter", 0.875),
        ("broadcast", 1.0),
        ("reduce", 1.0),
        ("sendrecv", 1.0),
        ("hypercube", 1.0),
    ],
)
def test_busbw_factors(op: str, factor_at_8: float) -> None:
    assert BUSBW_FACTOR[op](8) == factor_at_8
    assert busbw(op, 100.0, 8) == pytest.approx(100.0 * factor_at_8)


@pytest.mark.parametrize("n", [2, 4, 8, 16, 512])
def test_all_reduce_busbw_is_algbw_times_2_n_minus_1_over_n(n: int) -> None:
    assert busbw("all_reduce", 132.0, n) == pytest.approx(132.0 * 2 * (n - 1) / n)


@pytest.mark.parametrize(
    ("size", "time_us", "alg", "bus"),
    # Two DGX Spark (GB10) all_gather_perf rows over 200 GbE, nccl-tests 2.18.3 (corpus nccl_tests/).
    [
        (1073741824, 27211.0, 39.46, 19.73),
        (4294967296, 96986.7, 44.28, 22.14),
        (1073741824, 191408, 5.61, 2.80),
    ],
)
def test_algbw_and_busbw_reproduce_printed_row(size: int, time_us: float, alg: float, bus: float) -> None:
    # nccl-tests prints two decimals: the only slack is rounding.
    measured = algbw(size, time_us)
    assert measured == pytest.approx(alg, abs=0.005)
    assert busbw("all_gather", measured, 2) == pytest.approx(bus, abs=0.005)


def test_hypercube_algbw_counts_the_received_share() -> None:
    assert algbw(8e9, 1e6, op="hypercube_perf", n_ranks=8) == pytest.approx(7.0)
    with pytest.raises(TracelogError):
        algbw(8e9, 1e6, op="hypercube")


@pytest.mark.parametrize(
    ("spelling", "op"),
    [
        ("all_reduce_perf", "all_reduce"),
        ("AllReduce", "all_reduce"),
        ("allgather", "all_gather"),
        ("alltoall", "alltoall"),
    ],
)
def test_op_spellings(spelling: str, op: str) -> None:
    assert normalize_op(spelling) == op


def test_unknown_op() -> None:
    with pytest.raises(TracelogError, match="all_reduce"):
        busbw("allreduce_ring_fancy", 1.0, 8)


def test_a100_nvlink3_plateau_is_about_235() -> None:
    # FORMULAS.md: ~235 GB/s busbw of the 300 GB/s unidirectional NVLink 3 is normal (78%).
    nvlink3 = hardware.link("nvlink3")
    big = predict_collective(
        "all_reduce", 8 * 2**30, 8, nvlink3.unidirectional_gbps, alpha_us=5, efficiency=0.78
    )
    assert big.busbw_gbps == pytest.approx(235, rel=0.01)
    assert big.busbw_gbps < 234  # approaches the plateau from below


def test_curve_rises_with_size_and_matches_thakur() -> None:
    sizes = [2**k for k in range(10, 34, 2)]
    curve = predict_curve("all_reduce", sizes, 8, 300, alpha_us=5, efficiency=0.78)
    assert curve["busbw_gbps"].is_monotonic_increasing
    s, p = 2**30, 8
    thakur_us = 2 * (p - 1) * 5 + 2 * (p - 1) / p * s / (0.78 * 300e9) * 1e6
    assert predict_collective("all_reduce", s, p, 300, 5, 0.78).time_us == pytest.approx(thakur_us)


def test_fit_recovers_alpha_and_bandwidth() -> None:
    sizes = [2**k for k in range(12, 32)]
    times = [predict_collective("all_gather", s, 16, 50, alpha_us=7, efficiency=0.9).time_us for s in sizes]
    alpha, bw = fit_alpha_beta("all_gather", sizes, times, 16)
    assert alpha == pytest.approx(7, rel=1e-6)
    assert bw == pytest.approx(45, rel=1e-6)


def test_a_sweep_that_collapses_fits_no_negative_latency() -> None:
    """Invented all_reduce sweep on 24 ranks in the shape of nccl#1453's: busbw rising to ~29 GB/s at
    32 MiB, then falling to ~5 GB/s from 64 MiB on; unclamped, least squares gave α = -17.7 µs."""
    sizes = [2**k for k in range(20, 30)]
    times_us = [1630, 2330, 620, 990, 1340, 2180, 24400, 48600, 121600, 193000]
    alpha, bw = fit_alpha_beta("all_reduce", sizes, times_us, 24)
    assert alpha == 0.0
    wire = [s * 2 * 23 / 24 for s in sizes]  # the bandwidth term alone: S·f / bw, least squares
    assert bw == pytest.approx(
        sum(w * w for w in wire) / sum(w * t for w, t in zip(wire, times_us, strict=True)) / 1e3
    )
    assert 4 < bw < 6


@pytest.mark.parametrize(
    ("link_id", "measured", "published_share"),
    # p2pBandwidthLatencyTest unidirectional P2P (ml-engineering network notes, corpus p2p/).
    [("nvlink3", 274, 0.913), ("nvlink4", 376, 0.836), ("nvlink5", 746, 0.829)],
)
def test_p2p_shares_of_unidirectional_spec(link_id: str, measured: float, published_share: float) -> None:
    lk = hardware.link(link_id)
    assert lk.share(measured) == pytest.approx(published_share, abs=0.001)
    # Against the bidirectional figure the same number looks like half: the duplex confusion.
    assert lk.share(measured, bidirectional=True) == pytest.approx(published_share / 2, abs=0.001)


def test_link_for_inside_a_node_is_the_gpu_link() -> None:
    assert link_for(8, 8, "h100-sxm5-80gb", hardware.link("ib-ndr-x8")).id == "nvlink4"


def test_link_for_across_nodes_is_the_node_s_nics_not_one_gpu_s_share() -> None:
    # A group spanning whole nodes runs one ring per NIC: the node's 8 x 400 Gb/s, not 400/8.
    across = link_for(16, 8, "h100-sxm5-80gb", hardware.link("ib-ndr-x8"))
    assert across.unidirectional_gbps == 400
    # One rank per node (DP with TP = 8): 8 such groups share the node's NICs.
    dp_group = link_for(8, 8, "a100-sxm4-80gb", hardware.link("ib-hdr-x8"), stride=8)
    assert dp_group.unidirectional_gbps == 25
    # Two ranks per node (TP = 4): 4 groups, 2 NICs each.
    tp4 = link_for(16, 8, "a100-sxm4-80gb", hardware.link("ib-hdr-x8"), stride=4)
    assert tp4.unidirectional_gbps == 50
    assert tp4.id.startswith("ib-hdr-x8/")


def test_link_for_slower_intra_node_link_bounds_the_fabric() -> None:
    slow = link_for(16, 8, "a100-pcie-80gb", hardware.link("ib-xdr-x8"))
    assert slow.id.startswith("ib-xdr-x8/")
    assert slow.unidirectional_gbps == hardware.link("pcie4-x16").unidirectional_gbps


def test_link_for_needs_a_fabric_across_nodes() -> None:
    with pytest.raises(TracelogError, match="fabric"):
        link_for(16, 8, "a100-sxm4-80gb", None)


def test_bad_inputs() -> None:
    with pytest.raises(TracelogError):
        predict_collective("all_reduce", 1e6, 8, 300, efficiency=1.5)
    with pytest.raises(TracelogError):
        algbw(1e6, 0)


# --- NCCL's cost model across nodes -----------------------------------------------------------------

NVLINK3, NVLINK4 = hardware.link("nvlink3"), hardware.link("nvlink4")
HDR_X8, NDR_X8 = hardware.link("ib-hdr-x8"), hardware.link("ib-ndr-x8")


@pytest.mark.parametrize(
    ("link_id", "cls"),
    [("nvlink3", "nvlink"), ("xgmi-mi300x", "nvlink"), ("pcie4-x16", "pcie"), ("ib-hdr-x8", "net"),
     ("ib-ndr", "net"), ("efa-v2", "net"), ("eth-200g", "net"), ("opa-100-x4", "net")],
)  # fmt: skip
def test_link_classes_follow_nccl_s_latency_tables(link_id: str, cls: str) -> None:
    assert link_class(hardware.link(link_id)) == cls


def test_node_nics_from_node_and_port_entries() -> None:
    assert node_nics(HDR_X8) == (8, 25.0)  # DGX A100: 8 x 200 Gb/s
    assert node_nics(hardware.link("ib-hdr")) == (1, 25.0)
    with pytest.raises(TracelogError, match="inside a node"):
        node_nics(NVLINK3)


def test_ring_across_nodes_is_bounded_by_the_node_s_nics() -> None:
    place = Placement(32, 4, NVLINK3, HDR_X8)
    bound, link_label = ring_busbw_bound("all_reduce", place)
    assert bound == pytest.approx(DEFAULT_NET_EFFICIENCY * 200)  # 8 NICs x 25 GB/s, not 25 / 8
    assert "8 of 8 NICs" in link_label
    # The NVLink bound (0.78 x 300) is the looser one here; with NDR the NVLink bound wins.
    assert ring_busbw_bound("all_reduce", Placement(32, 4, NVLINK3, NDR_X8))[1] == "nvlink3"


def test_one_rank_per_node_uses_one_nic() -> None:
    # NVIDIA/nccl-tests#232: one H100 per node on 4 NDR NICs reaches one NIC's ~50 GB/s.
    bound, _ = ring_busbw_bound("all_reduce", Placement(2, 2, None, NDR_X8))
    assert bound == pytest.approx(DEFAULT_NET_EFFICIENCY * 50)


def test_alltoall_on_two_nodes_is_about_twice_the_network_per_gpu() -> None:
    # NVIDIA/nccl-tests#130: alltoall busbw on 2 nodes ~ 2x the network bandwidth per GPU.
    bound, _ = ring_busbw_bound("alltoall", Placement(16, 2, NVLINK4, NDR_X8))
    per_gpu = DEFAULT_NET_EFFICIENCY * 400 / 8
    assert bound == pytest.approx(2 * per_gpu, rel=0.07)


def test_ring_latency_follows_tuning_cc() -> None:
    # tuning.cc, Simple protocol: base 8.4 + (30 - 2) intra steps x 3.4 (NVLink) + 2 inter steps x 14 (NET).
    ring = next(
        a for a in algorithms("all_reduce", Placement(16, 2, NVLINK4, NDR_X8)) if a.protocol == "simple"
    )
    assert ring.name == "ring"
    assert ring.latency_us == pytest.approx(8.4 + 28 * 3.4 + 2 * 14.0)
    # One node: no network step; LL's 0.6 µs per NVLink step (base 6.6).
    ll = next(a for a in algorithms("all_reduce", Placement(8, 1, NVLINK3)) if a.protocol == "ll")
    assert ll.latency_us == pytest.approx(6.6 + 14 * 0.6)


def test_tree_on_two_nodes_beats_the_ring_s_network_bound() -> None:
    # NVIDIA/nccl-tests#196: on two nodes NCCL's tree goes beyond the network bottleneck. With 8 HDR
    # NICs the ring tends to 0.96 x 200 GB/s; the tree to 0.5 x 0.92 x 0.78 x 300 algbw, x 2 x 15/16.
    place = Placement(16, 2, NVLINK3, HDR_X8)
    plateau, best = plateau_busbw("all_reduce", place)
    assert best.name == "tree"
    assert plateau == pytest.approx(0.5 * 0.92 * 0.78 * 300 * 2 * 15 / 16)
    assert plateau > ring_busbw_bound("all_reduce", place)[0]
    # Beyond two nodes the tree halves the network's bandwidth: the ring wins on large messages.
    assert plateau_busbw("all_reduce", Placement(32, 4, NVLINK3, HDR_X8))[1].name == "ring"


def test_small_messages_take_the_low_latency_path() -> None:
    place = Placement(32, 4, NVLINK3, HDR_X8, "ampere")
    small, large = predict_nccl("all_reduce", 8, place), predict_nccl("all_reduce", 2**33, place)
    assert small.protocol == "ll" and large.protocol == "simple"
    assert predict_nccl("all_reduce", 2**22, place).protocol == "ll128"  # NVLink nodes: NCCL enables LL128
    # LL never beats NCCL's ceiling for it (tuning.cc llMaxBws: 20.4 GB/s beyond two nodes).
    ll = next(a for a in algorithms("all_reduce", place) if (a.name, a.protocol) == ("ring", "ll"))
    assert ll.algbw_gbps * BUSBW_FACTOR["all_reduce"](32) == pytest.approx(20.4)
    curve = nccl_curve("all_reduce", [2**k for k in range(3, 34)], place)
    assert curve["busbw_gbps"].is_monotonic_increasing
    assert curve["busbw_gbps"].iloc[-1] < ring_busbw_bound("all_reduce", place)[0]


def test_calibrated_constants_replace_a_class_s_defaults() -> None:
    place = Placement(16, 2, NVLINK4, NDR_X8)
    slower = predict_nccl("all_reduce", 2**20, place, alpha_us={"net": 28.0})
    assert slower.time_us > predict_nccl("all_reduce", 2**20, place).time_us
    # 4 ranks per node use 4 of the 8 NDR NICs (50 GB/s each), at the efficiency given for `net`.
    fitted, _ = plateau_busbw("all_reduce", Placement(16, 4, NVLINK4, NDR_X8), {"net": 0.48})
    assert fitted == pytest.approx(0.48 * 4 * 50)
    one_node = predict_nccl("all_reduce", 2**20, Placement(8, 1, NVLINK4), alpha_us={"net": 28.0})
    assert one_node.time_us == predict_nccl("all_reduce", 2**20, Placement(8, 1, NVLINK4)).time_us


def test_bench_placement_assumes_the_reference_fabric_and_says_so() -> None:
    a100 = hardware.gpu("a100-sxm4-80gb")
    place, assumed = bench_placement(a100, 16, 2, 8, None)
    assert place.fabric is not None and place.fabric.id == "ib-hdr-x8"
    assert len(assumed) == 1 and "ib-hdr-x8" in assumed[0] and "--fabric" in assumed[0]
    named, none_assumed = bench_placement(a100, 16, None, 8, NDR_X8)
    assert named.nodes == 2 and named.fabric == NDR_X8 and not none_assumed
    assert bench_placement(a100, 8, 1, 8, None) == (Placement(8, 1, NVLINK3, None, "ampere"), [])
    with pytest.raises(TracelogError, match="--gpu"):
        bench_placement(None, 16, 2, 8, NDR_X8)


# --- benches in the store: the curve, the fabric given at ingest or set after, the corpus -------------

H100_2X8 = SAMPLES / "nccl_mpi_all_reduce_2x8xh100.txt"
A100_1X8 = SAMPLES / "nccl_all_reduce_8xa100.txt"


def _bench(store: Store, path: Path, **options: Any) -> int:
    api.ingest(store, [str(path)], **options)
    return int(store.scalar("SELECT max(bench_id) FROM benches"))


def _peak(store: Store, bench_id: int) -> tuple[float, float]:
    measured, predicted = store.con.execute(
        "SELECT measured, predicted FROM comparisons WHERE subject_kind = 'collective' AND subject_id = ? "
        "AND metric = 'peak_busbw_gbps'",
        [bench_id],
    ).fetchone()
    return measured, predicted


def _assumptions(store: Store, bench_id: int) -> list[str]:
    rows = store.con.execute(
        "SELECT detail FROM predictions WHERE subject_kind = 'collective' AND subject_id = ? AND metric = 'inputs'",
        [bench_id],
    ).fetchall()
    return [a for (detail,) in rows for a in json.loads(detail).get("assumptions", [])]


def test_two_node_h100_curve_and_plateau_against_measured(store: Store, tmp_path: Path) -> None:
    bench = _bench(
        store, Path(alone(H100_2X8, tmp_path))
    )  # outside sample_logs/: no cluster names its fabric
    measured, predicted = _peak(store, bench)
    assert measured == pytest.approx(365.35)  # the largest out-of-place busbw the output prints (4 GB)
    assert 0.8 < measured / predicted < 1.2
    assert any("ib-ndr-x8" in a for a in _assumptions(store, bench))  # no --fabric: DGX H100's, said so
    rows = store.query(
        "SELECT size_bytes, busbw_gbps FROM collectives WHERE bench_id = ? AND placement = 'out-of-place'",
        [bench],
    )
    curve = store.query(
        "SELECT CAST(json_extract(detail, '$.size_bytes') AS BIGINT) AS size_bytes, value FROM predictions "
        "WHERE subject_kind = 'collective' AND subject_id = ? AND metric = 'busbw_gbps'",
        [bench],
    )
    joined = rows.merge(curve, on="size_bytes")
    assert len(joined) == len(rows) == 15
    # From 2 MB up (the LL128 and tree region included) every size within 20% of what it measured.
    sized = joined[joined.size_bytes >= 2**21]
    assert ((sized.value / sized.busbw_gbps - 1).abs() < 0.2).all()


def test_one_node_a100_stays_at_its_nvlink_plateau(store: Store) -> None:
    measured, predicted = _peak(store, _bench(store, A100_1X8))
    assert measured == pytest.approx(238.24)
    assert predicted == pytest.approx(0.78 * 300)
    assert not _assumptions(store, int(store.scalar("SELECT max(bench_id) FROM benches")))


def test_fabric_given_at_ingest_reaches_the_bench_and_set_recomputes_it(store: Store) -> None:
    bench = _bench(store, H100_2X8, fabric="ib-hdr-x8", nodes=2, gpus_per_node=8)
    assert store.scalar("SELECT fabric FROM benches WHERE bench_id = ?", [bench]) == "ib-hdr-x8"
    assert not _assumptions(store, bench)
    _, on_hdr = _peak(store, bench)
    # the sample's command forces the ring (`-x NCCL_ALGO=Ring`): the node's 8 HDR NICs bound it
    assert on_hdr == pytest.approx(0.96 * 8 * 25)
    bench_id, _flags = api.set_hardware(store, f"bench:{bench}", fabric="ib-ndr-x8")
    assert bench_id == bench
    assert store.scalar("SELECT fabric FROM benches WHERE bench_id = ?", [bench]) == "ib-ndr-x8"
    assert _peak(store, bench)[1] == pytest.approx(0.78 * 450)  # NVLink bounds the ring now


def test_set_still_sets_runs(store: Store) -> None:
    api.ingest(store, [str(SAMPLES / "megatron_lm_llama3_8b_h100.log")])
    run_id, _ = api.set_hardware(store, 1, fabric="ib-ndr-x8")
    assert store.scalar("SELECT fabric FROM runs WHERE run_id = ?", [run_id]) == "ib-ndr-x8"


@pytest.mark.skipif(not corpus_files("nccl_tests"), reason="corpus absent")
def test_corpus_two_dgx_spark_all_gather(store: Store) -> None:
    # Two GB10 over one 200 GbE port each: the first run near one port, the second 7.6x slower (SOURCES.md).
    api.ingest(store, [str(CORPUS / "nccl_tests" / "dgxspark_gb10_allgather_two_runs.txt")])
    (good, bad) = [int(b) for (b,) in store.con.execute("SELECT bench_id FROM benches ORDER BY 1").fetchall()]
    measured, predicted = _peak(store, good)
    assert predicted == pytest.approx(DEFAULT_NET_EFFICIENCY * 25)
    assert 0.8 < measured / predicted < 1.2
    flagged = store.query("SELECT subject_id, ratio FROM flags WHERE rule = 'low_bandwidth'")
    assert flagged.subject_id.tolist() == [bad] and flagged.ratio[0] < 0.2


@pytest.mark.skipif(not corpus_files("allreduce_bench"), reason="corpus absent")
def test_corpus_four_a100_nodes_on_omni_path_fall_far_below_their_nics(store: Store) -> None:
    # BigScience on Jean Zay: 4 nodes of 8 A100 with 4 Omni-Path 100 HFIs each (the NET/IB lines name
    # hfi1_0..3). NCCL's own lines show why the 5.1 GB/s peak is a gap, not a model error: 2 channels,
    # both through NET/IB/1, without GDRDMA. The model predicts the NICs' 4 x 12.5 GB/s and flags it.
    # The fabric is the log's own word: four hfi1 (Omni-Path) devices on its NET/IB line; only the GPU,
    # which the output never names, is given.
    path = CORPUS / "allreduce_bench" / "bigscience_all_reduce_bench-a100-n4.txt"
    bench = _bench(store, path, gpu="a100-sxm4-80gb")
    assert store.con.execute(
        "SELECT fabric, nics_per_node FROM benches WHERE bench_id = ?", [bench]
    ).fetchone() == (
        "opa-100",
        4,
    )
    measured, predicted = _peak(store, bench)
    assert measured == pytest.approx(5.103, abs=0.001)
    assert predicted == pytest.approx(DEFAULT_NET_EFFICIENCY * 50)
    flag = store.query(
        "SELECT ratio, message FROM flags WHERE rule = 'low_bandwidth' AND subject_id = ?", [bench]
    )
    assert len(flag) == 1 and flag.ratio[0] < 0.2 and "opa-100-x4" in flag.message[0]


# An all_reduce bench across two nodes as nccl-tests prints it with NCCL_DEBUG=INFO (invented: the
# NET/IB line as NCCL 2.10 prints it on Omni-Path nodes, four hfi1 HFIs per node; times made up).
OPA_BENCH = (
    """node-a:3110:3110 [0] NCCL INFO Bootstrap : Using ib0:10.148.8.203<0>
node-a:3110:3110 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation
node-a:3110:3110 [0] NCCL INFO NET/IB : Using [0]hfi1_1:1/IB [1]hfi1_0:1/IB [2]hfi1_2:1/IB [3]hfi1_3:1/IB ; OOB ib0:10.148.8.203<0>
# nThread 1 nGpus 1 minBytes 1048576 maxBytes 1073741824 step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
"""
    + "".join(
        f"#  Rank {r:2d} Group  0 Pid {3110 + r} on {'node-a' if r < 8 else 'node-b'} device  {r % 8} [0x07] NVIDIA A100-SXM4-80GB\n"
        for r in range(16)
    )
    + """#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    312.5    3.36    6.29      0    311.9    3.36    6.30      0
     4194304       1048576     float     sum      -1    651.0    6.44   12.08      0    650.2    6.45   12.10      0
    16777216       4194304     float     sum      -1   1262.1   13.29   24.93      0   1260.7   13.31   24.95      0
    67108864      16777216     float     sum      -1   3861.2   17.38   32.59      0   3859.4   17.39   32.60      0
   268435456      67108864     float     sum      -1  13472.0   19.93   37.36      0  13470.1   19.93   37.37      0
  1073741824     268435456     float     sum      -1  53190.3   20.19   37.85      0  53188.7   20.19   37.85      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 25.49
"""
)


def test_omni_path_nics_named_by_nccl_make_the_node_s_fabric(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "opa_all_reduce.txt"
    path.write_text(OPA_BENCH, encoding="utf-8")
    bench = _bench(store, path)
    assert store.con.execute(
        "SELECT fabric, nics_per_node FROM benches WHERE bench_id = ?", [bench]
    ).fetchone() == (
        "opa-100",
        4,
    )
    measured, predicted = _peak(store, bench)
    assert measured == pytest.approx(37.85)
    # four 100 Gb/s ports per node, as the catalog's node of four Omni-Path HFIs; one port would be a quarter
    nvlink3 = hardware.link("nvlink3")
    four = plateau_busbw("all_reduce", Placement(16, 2, nvlink3, hardware.link("opa-100-x4")))[0]
    one = plateau_busbw("all_reduce", Placement(16, 2, nvlink3, hardware.link("opa-100")))[0]
    assert predicted == pytest.approx(four) and four == pytest.approx(4 * one)
    # on two nodes NCCL's tree sends each byte across once per direction: the four ports bound it, not NVLink
    best = plateau_busbw("all_reduce", Placement(16, 2, nvlink3, hardware.link("opa-100-x4")))[1]
    assert best.name == "tree" and best.bottleneck == "opa-100-x4 (4 of 4 NICs per node)"
    detail = store.scalar(
        "SELECT detail FROM predictions WHERE subject_kind = 'collective' AND subject_id = ? "
        "AND metric = 'model_plateau_busbw_gbps'",
        [bench],
    )
    assert json.loads(detail)["fabric"] == "opa-100-x4"
    # the user knows better: two of the node's ports carry NCCL's traffic
    api.set_hardware(store, f"bench:{bench}", nics_per_node=2)
    assert _peak(store, bench)[1] == pytest.approx(2 * one)
    source = store.con.execute(
        "SELECT source, detail FROM hardware_sources WHERE subject_id = ? AND fact = 'nics_per_node'", [bench]
    ).fetchone()
    assert source == ("command line", "tracelog set")


def test_nics_given_at_ingest_beat_the_log_s(tmp_path: Path) -> None:
    path = tmp_path / "opa_all_reduce.txt"
    path.write_text(OPA_BENCH, encoding="utf-8")
    db = tmp_path / "b.duckdb"
    out = CliRunner().invoke(cli, ["--db", str(db), "ingest", str(path), "--nics-per-node", "2"])
    assert out.exit_code == 0, out.output
    with Store(db) as store:
        assert store.con.execute("SELECT fabric, nics_per_node FROM benches").fetchone() == ("opa-100", 2)
        assert store.con.execute(
            "SELECT source FROM hardware_sources WHERE fact = 'nics_per_node'"
        ).fetchone() == ("command line",)
        two = _peak(store, 1)[1]
    nvlink3 = hardware.link("nvlink3")
    one_port = plateau_busbw("all_reduce", Placement(16, 2, nvlink3, hardware.link("opa-100")))[0]
    assert two == pytest.approx(2 * one_port)


def test_a_bench_held_to_an_assumed_fabric_is_told_so_not_warned(store: Store, tmp_path: Path) -> None:
    """Without its NET/IB line the bench names no fabric: the model takes the A100's reference (8 HDR
    ports per node), and 37.9 GB/s falls far below it. Whether the nodes are slow or simply have fewer
    ports is not known, so the flag is an info that names the assumption; with the fabric named, the same
    shortfall is a warning."""
    path = tmp_path / "no_net_line.txt"
    path.write_text("".join(line for line in OPA_BENCH.splitlines(True) if "NCCL INFO" not in line))
    bench = _bench(store, path)
    severity, message, hint = store.con.execute(
        "SELECT severity, message, hint FROM flags WHERE rule = 'low_bandwidth' AND subject_id = ?", [bench]
    ).fetchone()
    assert severity == "info"
    assert "for ib-hdr-x8, the GPU's reference fabric, assumed because none was named" in message
    assert "--fabric" in hint
    api.set_hardware(store, f"bench:{bench}", fabric="ib-hdr-x8")
    assert store.con.execute(
        "SELECT severity FROM flags WHERE rule = 'low_bandwidth' AND subject_id = ?", [bench]
    ).fetchone() == ("warning",)
