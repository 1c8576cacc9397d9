"""The hardware catalog: published figures, name matching, lookups and errors."""

from __future__ import annotations

import pytest

from tracelog import hardware
from tracelog.errors import TracelogError


@pytest.mark.parametrize(
    ("gpu_id", "precision", "tflops"),
    [
        # Dense datasheet/whitepaper figures; the sparsity figure is exactly double.
        ("a100-sxm4-80gb", "bf16", 312),
        ("a100-sxm4-80gb", "tf32", 156),
        ("a100-sxm4-40gb", "fp16", 312),
        ("h100-sxm5-80gb", "bf16", 989.4),
        ("h100-sxm5-80gb", "fp8", 1978.9),
        ("h100-pcie-80gb", "bf16", 756),
        ("h200-sxm-141gb", "bf16", 989.4),
        ("b200-sxm-180gb", "bf16", 2250),
        ("gb200", "bf16", 2500),
        ("v100-sxm2-32gb", "fp16", 125),
        ("mi300x", "bf16", 1307.4),
        ("l40s", "fp8", 733),
    ],
)
def test_dense_peaks(gpu_id: str, precision: str, tflops: float) -> None:
    assert hardware.peak_tflops(gpu_id, precision) == pytest.approx(tflops)


def test_h100_bf16_is_the_dense_989_not_the_sparse_1979() -> None:
    # FORMULAS.md: MFU divides by the dense peak; the datasheet's 1,979 assumes 2:4 sparsity.
    assert round(hardware.peak_tflops("h100-sxm5-80gb", "bf16")) == 989


@pytest.mark.parametrize("alias", ["bf16", "BF16", "bfloat16"])
def test_precision_aliases(alias: str) -> None:
    assert hardware.peak_tflops("a100-sxm4-80gb", alias) == 312


@pytest.mark.parametrize(
    ("gpu_id", "precision"),
    [("v100-sxm2-32gb", "bf16"), ("a100-sxm4-80gb", "fp8"), ("gb10", "bf16"), ("a100-sxm4-80gb", "fp64x")],
)
def test_missing_peak_is_an_error_not_zero(gpu_id: str, precision: str) -> None:
    with pytest.raises(TracelogError):
        hardware.peak_tflops(gpu_id, precision)


@pytest.mark.parametrize(
    ("printed", "gpu_id"),
    [
        ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
        ("A100-SXM4-40GB", "a100-sxm4-40gb"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm5-80gb"),
        ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"),
        ("NVIDIA GB10", "gb10"),
        ("NVIDIA GB200", "gb200"),
        ("AMD Instinct MI300X", "mi300x"),
        ("AMD Instinct MI250", "mi250"),
        ("AMD Instinct MI250X", "mi250x"),
        ("  nvidia   a100-sxm4-80gb ", "a100-sxm4-80gb"),
    ],
)
def test_match_gpu_names_as_logs_print_them(printed: str, gpu_id: str) -> None:
    found = hardware.match_gpu(printed)
    assert found is not None and found.id == gpu_id


@pytest.mark.parametrize(
    "printed",
    ["NVIDIA H200 NVL", "NVIDIA A100", "NVIDIA A800-SXM4-80GB", "AMD Instinct MI250X/MI250", "", None],
)
def test_unknown_names_stay_unknown(printed: str | None) -> None:
    assert hardware.match_gpu(printed) is None


def test_unknown_id_names_close_matches() -> None:
    with pytest.raises(TracelogError, match="a100-sxm4-80gb"):
        hardware.gpu("a100-80gb")
    with pytest.raises(TracelogError, match="nvlink4"):
        hardware.link("nvlnk4")


@pytest.mark.parametrize(
    ("link_id", "uni", "bi"),
    [("nvlink2", 150, 300), ("nvlink3", 300, 600), ("nvlink4", 450, 900), ("nvlink5", 900, 1800)],
)
def test_nvlink_per_gpu_aggregates(link_id: str, uni: float, bi: float) -> None:
    lk = hardware.link(link_id)
    assert (lk.unidirectional_gbps, lk.bidirectional_gbps) == (uni, bi)


def test_every_link_is_duplex_and_sourced() -> None:
    for lk in hardware.links():
        assert lk.bidirectional_gbps == pytest.approx(2 * lk.unidirectional_gbps), lk.id
        assert lk.source.strip(), lk.id


def test_every_gpu_is_sourced_and_matches_only_itself() -> None:
    for g in hardware.gpus():
        assert g.source.strip(), g.id
        for name in g.match:
            assert hardware.match_gpu(name) is g, name
        assert all(p in hardware.PRECISIONS for p in g.peak_tflops), g.id


@pytest.mark.parametrize(
    ("gpu_id", "link_id"),
    [
        ("a100-sxm4-80gb", "nvlink3"),
        ("h100-sxm5-80gb", "nvlink4"),
        ("b200-sxm-180gb", "nvlink5"),
        ("v100-sxm2-16gb", "nvlink2"),
        ("a100-pcie-80gb", "pcie4-x16"),  # the NVLink bridge joins a pair only
        ("mi300x", "xgmi-mi300x"),
    ],
)
def test_intra_node_link(gpu_id: str, link_id: str) -> None:
    assert hardware.gpu_intra_node_link(gpu_id).id == link_id


def test_gb10_has_no_intra_node_peer() -> None:
    with pytest.raises(TracelogError, match="eth-200g"):
        hardware.gpu_intra_node_link("gb10")


@pytest.mark.parametrize(("gpu_id", "mib"), [("a100-sxm4-80gb", 81920), ("a100-sxm4-40gb", 40960)])
def test_memory_is_binary_gib(gpu_id: str, mib: int) -> None:
    # nvidia-smi reports 81920 MiB for A100-SXM4-80GB: its "80GB" is 80 GiB.
    assert hardware.gpu(gpu_id).memory_mib == mib


def test_catalog_frames() -> None:
    frame = hardware.catalog("gpus")
    assert len(frame) == len(hardware.gpus()) == frame["id"].nunique()
    row = frame.set_index("id").loc["h100-sxm5-80gb"]
    assert row["bf16_tflops"] == pytest.approx(989.4)
    assert row["intra_unidirectional_gbps"] == 450
    links = hardware.catalog("links")
    assert {"unidirectional_gbps", "bidirectional_gbps", "source"} <= set(links.columns)
    with pytest.raises(TracelogError):
        hardware.catalog("nics")
