"""nccl-tests bandwidth definitions, the alpha–beta model, p2p shares and link choice."""

from __future__ import annotations

import pytest

from tracelog import hardware
from tracelog.errors import TracelogError
from tracelog.model.collectives import (
    BUSBW_FACTOR,
    algbw,
    busbw,
    fit_alpha_beta,
    link_for,
    normalize_op,
    predict_collective,
    predict_curve,
)


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


def test_link_for_across_nodes_is_the_per_gpu_fabric_share() -> None:
    across = link_for(16, 8, "h100-sxm5-80gb", hardware.link("ib-ndr-x8"))
    assert across.unidirectional_gbps == 50  # 8 x 400 Gb/s NICs shared by 8 GPUs
    dp_group = link_for(8, 8, "a100-sxm4-80gb", hardware.link("ib-hdr-x8"), stride=8)  # one rank per node
    assert dp_group.unidirectional_gbps == 25


def test_link_for_slower_intra_node_link_wins() -> None:
    slow = link_for(16, 8, "a100-pcie-80gb", hardware.link("ib-xdr-x8"))
    assert slow.id == "pcie4-x16"


def test_link_for_needs_a_fabric_across_nodes() -> None:
    with pytest.raises(TracelogError, match="fabric"):
        link_for(16, 8, "a100-sxm4-80gb", None)


def test_bad_inputs() -> None:
    with pytest.raises(TracelogError):
        predict_collective("all_reduce", 1e6, 8, 300, efficiency=1.5)
    with pytest.raises(TracelogError):
        algbw(1e6, 0)
