"""The hardware catalog: published figures, name matching, lookups and errors."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from tracelog import hardware
from tracelog.cli import cli
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


def test_the_grand_teton_h100_is_the_benchmarks_own_part() -> None:
    # pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md: "96GB HBM2e with 2.4 TB/sec peak
    # memory bandwidth"; an SXM H100 whose peak the page takes as the SXM's
    teton, sxm = hardware.gpu("h100-sxm-96gb-hbm2e"), hardware.gpu("h100-sxm5-80gb")
    assert teton.memory_mib == 96 * 1024 and teton.memory_type == "HBM2e"
    assert teton.memory_bandwidth_gbps == 2400 < sxm.memory_bandwidth_gbps
    assert teton.peak_tflops == sxm.peak_tflops and teton.sm_count == sxm.sm_count
    assert "500W" in teton.source and "power" not in teton.sources  # the limit is stated, not modelled


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
    [
        "NVIDIA H200 NVL",
        "NVIDIA A100",
        "NVIDIA A800 80GB PCIe",
        "AMD Instinct MI350X",
        "AMD Instinct MI250X/MI250",
        "",
        None,
    ],
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
        assert all(p in hardware.PEAK_PRECISIONS for p in g.peak_tflops), g.id


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


# ------------------------------------------------------------------------------------- added parts

NEW_GPUS = (
    "a100-pcie-40gb", "a800-sxm4-80gb", "h800-sxm5-80gb", "h20", "gh200-144gb", "b300-sxm6-288gb",
    "mi325x", "mi355x", "gaudi3", "l4", "a10", "rtx-4090", "p100-sxm2-16gb", "p100-pcie-16gb",
    "p100-pcie-12gb", "mi210",
)  # fmt: skip


def _numbers(text: str) -> list[float]:
    """Every number a source text quotes (1,979 -> 1979)."""
    return [float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*\.?\d*", text)]


def _quoted(value: float, text: str, *, scales: tuple[float, ...] = (1, 1000)) -> bool:
    """`value` appears in `text` as quoted (datasheets round to the unit), in the next unit up (PF, TB/s),
    or doubled (a sparsity figure the catalog halves)."""
    return any(
        abs(n * scale - value * factor) <= 0.5 * scale
        for n in _numbers(text)
        for scale in scales
        for factor in (1, 2)
    )


@pytest.mark.parametrize("gpu_id", NEW_GPUS)
def test_new_gpu_figures_are_quoted_by_their_sources(gpu_id: str) -> None:
    # Each figure names a source that states it (or its sparse double, or it in PF or TB/s), so a typo in
    # the catalog cannot hide behind a document that says something else.
    g = hardware.gpu(gpu_id)
    for precision, value in g.peak_tflops.items():
        assert _quoted(value, g.source_of(precision)), (gpu_id, precision, value)
    for figure in ("memory_gb", "memory_bandwidth_gbps", "sm_count", "nvlink_domain"):
        value = getattr(g, figure)
        if value is not None:
            assert _quoted(value, g.source_of(figure)), (gpu_id, figure, value)


def test_every_source_key_names_a_figure_of_its_entry() -> None:
    # A misspelt key in [gpu.*.sources] would silently fall back to the entry's source.
    figures = {
        "memory_gb", "memory_bytes", "memory_type", "memory_bandwidth_gbps", "sm_count", "compute_capability", "nvlink_gen",
        "nvlink_links", "pcie_gen", "intra_node_link", "bridge_link", "network_link", "match", "peak_tflops", "nvlink_domain",
    }  # fmt: skip
    for g in hardware.gpus():
        assert g.source.strip(), g.id
        for key, text in g.sources.items():
            assert key in figures | set(g.peak_tflops), (g.id, key)
            assert text.strip(), (g.id, key)


def test_every_link_figure_is_quoted_by_its_source() -> None:
    for lk in hardware.links():
        per_port = (
            [lk.unidirectional_gbps * 8 / lk.links, lk.bidirectional_gbps / lk.links] if lk.links else []
        )
        candidates = [lk.unidirectional_gbps, lk.bidirectional_gbps, lk.unidirectional_gbps * 8, *per_port]
        assert any(_quoted(c, lk.source) for c in candidates), lk.id  # GB/s, Gb/s, or per link/port


@pytest.mark.parametrize(
    ("printed", "gpu_id"),
    [
        ("NVIDIA H800", "h800-sxm5-80gb"),
        ("NVIDIA A800-SXM4-80GB", "a800-sxm4-80gb"),
        ("NVIDIA H20", "h20"),
        ("NVIDIA GH200 480GB", "gh200-96gb"),  # the 96GB HBM3 superchip, named after its LPDDR5X
        ("NVIDIA GH200 120GB", "gh200-96gb"),  # the same module as HPE Cray EX nodes print it (97871 MiB)
        ("NVIDIA GH200 144G HBM3e", "gh200-144gb"),
        ("NVIDIA B200", "b200-sxm-180gb"),
        ("NVIDIA B300 SXM6 AC", "b300-sxm6-288gb"),
        ("AMD Instinct MI300X", "mi300x"),
        ("AMD Instinct MI325X", "mi325x"),
        ("AMD Instinct MI355X", "mi355x"),
        ("HL-325L", "gaudi3"),
        ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA A10", "a10"),
        # as nccl-tests device lines and nvidia-smi print them (GB300 NVL72, DGX-2, PCIe boards, GeForce)
        ("NVIDIA GB300", "gb300"),
        ("Tesla V100-SXM3-32GB", "v100-sxm3-32gb"),
        ("Tesla V100-PCIE-16GB", "v100-pcie-16gb"),
        ("Tesla V100-PCIE-32GB", "v100-pcie-32gb"),
        ("NVIDIA A40", "a40"),
        ("Tesla T4", "t4"),
        ("NVIDIA GeForce RTX 5090", "rtx-5090"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),  # nccl-tests#280's device lines, nvbandwidth#15's header
        ("NVIDIA GeForce RTX 2080 Ti", "rtx-2080-ti"),  # nvbandwidth#13's device lines
        ("Intel(R) Data Center GPU Max 1550", "max-1550"),  # as torch.xpu names it on Aurora
        ("Tesla P100-SXM2-16GB", "p100-sxm2-16gb"),  # nvidia-smi and nccl-tests' device lines
        ("Tesla P100-PCIE-16GB", "p100-pcie-16gb"),
        ("Tesla P100-PCIE-12GB", "p100-pcie-12gb"),
        ("AMD Instinct MI210", "mi210"),  # rocm-smi's product name, rccl-tests' device lines
    ],
)
def test_new_gpus_resolve_from_printed_names(printed: str, gpu_id: str) -> None:
    found = hardware.match_gpu(printed)
    assert found is not None and found.id == gpu_id
    assert hardware.resolve_gpu_id(printed) == gpu_id


@pytest.mark.parametrize(
    ("gpu_id", "bf16"),
    [
        # NVIDIA H20 product brief: BF16/FP16 Tensor Core 148 TFLOPS (dense).
        ("h20", 148),
        # NVIDIA H800 datasheet (SXM): BF16 Tensor Core 1,979 TFLOPS with sparsity -> H100 Table 3 dense 989.4.
        ("h800-sxm5-80gb", 989.4),
        # NVIDIA GH200 datasheet: BF16 Tensor Core 990 dense | 1,979 sparse, both memory options.
        ("gh200-144gb", 990),
        # NVIDIA HGX B300 datasheet: FP16/BF16 Tensor Core 36 PFLOPS with sparsity for 8 GPUs -> 2.25 PF.
        ("b300-sxm6-288gb", 2250),
        # AMD Instinct MI325X datasheet: peak BF16 1,307.4 TFLOPS (dense; 2,614.9 with sparsity).
        ("mi325x", 1307.4),
        # AMD Instinct MI355X datasheet: peak BF16 2.5 PFLOPS dense (2,516.6 TFLOPS; 5,033.2 with sparsity).
        ("mi355x", 2516.6),
        # Intel Gaudi 3 (Hot Chips 2024): BF16 matrix 1,835 TFLOPS.
        ("gaudi3", 1835),
        # NVIDIA L4 datasheet: BF16 Tensor Core 242 TFLOPS with sparsity -> 121 dense.
        ("l4", 121),
        # NVIDIA A10 datasheet: BF16 Tensor Core 125 | 250 TFLOPS (dense | sparse).
        ("a10", 125),
        # GB300 NVL72: FP16/BF16 360 PFLOPS with sparsity for 72 GPUs -> 2.5 PF dense per GPU.
        ("gb300", 2500),
        # NVIDIA A40 datasheet: BF16 Tensor Core (FP32 accumulate) 149.7 | 299.4 TFLOPS (dense | sparse).
        ("a40", 149.7),
        # NVIDIA RTX Blackwell whitepaper, Appendix A (RTX 5090): FP16/BF16 with FP32 accumulate 209.5 dense.
        ("rtx-5090", 209.5),
        # Intel Max 1550: 1024 XMX engines x 512 FLOP/clock x 1.6 GHz (ark: 1024 XMX, 1.6 GHz peak, no sparsity)
        ("max-1550", 838.9),
    ],
)
def test_new_gpus_dense_bf16_is_the_datasheet_figure(gpu_id: str, bf16: float) -> None:
    assert hardware.peak_tflops(gpu_id, "bf16") == pytest.approx(bf16)


@pytest.mark.parametrize(
    ("gpu_id", "bidirectional"),
    [
        ("a800-sxm4-80gb", 400),  # A800 datasheet: NVLink 400 GB/s (A100: 600)
        ("h800-sxm5-80gb", 400),  # H800 datasheet: NVLink 400 GB/s (H100: 900)
        ("h20", 900),  # H20 product brief: NVLink 900 GB/s
        ("mi355x", 1075.2),  # MI355X datasheet: 7 Infinity Fabric links, 1,075.2 GB/s
    ],
)
def test_export_parts_and_new_fabrics_intra_node_bandwidth(gpu_id: str, bidirectional: float) -> None:
    lk = hardware.gpu_intra_node_link(gpu_id)
    assert lk.bidirectional_gbps == pytest.approx(bidirectional)
    assert lk.unidirectional_gbps == pytest.approx(bidirectional / 2)


def test_export_parts_are_slower_than_their_unrestricted_twins() -> None:
    a800, a100 = (
        hardware.gpu_intra_node_link("a800-sxm4-80gb"),
        hardware.gpu_intra_node_link("a100-sxm4-80gb"),
    )
    h800, h100 = (
        hardware.gpu_intra_node_link("h800-sxm5-80gb"),
        hardware.gpu_intra_node_link("h100-sxm5-80gb"),
    )
    assert a800.unidirectional_gbps < a100.unidirectional_gbps
    assert h800.unidirectional_gbps < h100.unidirectional_gbps
    # Same silicon, same dense tensor peak: only NVLink (and FP64) differ.
    assert hardware.peak_tflops("h800-sxm5-80gb", "bf16") == hardware.peak_tflops("h100-sxm5-80gb", "bf16")
    assert (
        hardware.gpu("h800-sxm5-80gb").peak_tflops["fp64"]
        < hardware.gpu("h100-sxm5-80gb").peak_tflops["fp64"]
    )


def test_every_node_fabric_counts_its_nics_and_ports_do_not() -> None:
    for lk in hardware.links():
        if lk.scope == "node":
            assert lk.links is not None and lk.links >= 2, lk.id
            # The node figure is its NICs together: a whole number of equal ports of a standard speed.
            port_gbits = lk.unidirectional_gbps * 8 / lk.links
            assert port_gbits in (100, 200, 400, 800), lk.id
        elif lk.scope == "port":
            assert lk.links is None, lk.id
        else:
            assert lk.scope == "gpu", lk.id


@pytest.mark.parametrize(
    ("link_id", "kind", "uni"),
    [
        ("opa-100", "omnipath", 12.5),  # 100 Gb/s
        ("slingshot11", "slingshot", 25),  # 200 Gb/s
        ("roce-100g", "roce", 12.5),
        ("roce-200g", "roce", 25),
        ("roce-400g", "roce", 50),
        ("slingshot11-x4", "slingshot", 100),  # Frontier: 4 NICs per node
        ("opa-100-x4", "omnipath", 50),  # TSUBAME3.0: 4 HFIs per node
        ("roce-400g-x8", "roce", 400),  # Llama 3 RoCE cluster: 8 x 400 Gb/s per server
        ("roce-200g-x24", "roce", 600),  # HLS-Gaudi3: 24 x 200 GbE scale-out
    ],
)
def test_fabric_links(link_id: str, kind: str, uni: float) -> None:
    lk = hardware.link(link_id)
    assert (lk.kind, lk.unidirectional_gbps, lk.bidirectional_gbps) == (kind, uni, 2 * uni)


@pytest.mark.parametrize(
    ("gpu_id", "fabric"),
    [
        ("h800-sxm5-80gb", "ib-ndr-x8"),
        ("b300-sxm6-288gb", "ib-xdr-x8"),
        ("mi250x", "slingshot11-x4"),
        ("gaudi3", "roce-200g-x24"),
    ],
)
def test_reference_fabrics(gpu_id: str, fabric: str) -> None:
    g = hardware.gpu(gpu_id)
    assert g.network_link == fabric
    assert hardware.link(fabric).scope == "node"


def test_b300_capacity_is_what_nvidia_smi_reports() -> None:
    # nvidia-smi on B300 SXM6 AC: 275040 MiB; the datasheet's 288 GB is decimal (288.4e9 bytes).
    g = hardware.gpu("b300-sxm6-288gb")
    assert g.memory_mib == 275040
    assert g.memory_bytes / 1e9 == pytest.approx(288, rel=0.002)


def test_fp64_is_listed_but_not_a_training_precision() -> None:
    assert hardware.gpu("h100-sxm5-80gb").peak_tflops["fp64"] == pytest.approx(66.9)
    assert "fp64_tflops" in hardware.catalog("gpus").columns
    with pytest.raises(TracelogError):
        hardware.peak_tflops("h100-sxm5-80gb", "fp64")  # the model runs in fp32 and below


def test_cli_lists_new_link_kinds_and_shows_a_new_gpu() -> None:
    links = CliRunner().invoke(cli, ["hardware", "--links", "--format", "json"])
    assert links.exit_code == 0, links.output
    kinds = {row["kind"] for row in json.loads(links.output)}
    assert {"omnipath", "slingshot", "roce", "nvlink", "infiniband"} <= kinds
    shown = CliRunner().invoke(cli, ["hardware", "mi355x", "--format", "json"])
    assert shown.exit_code == 0, shown.output
    rows = {row["field"]: row for row in json.loads(shown.output)}
    assert float(rows["bf16_tflops (dense)"]["value"]) == pytest.approx(2516.6)
    assert "MI355X datasheet" in rows["bf16_tflops (dense)"]["source"]


def test_a_port_fabric_across_a_node_s_nics() -> None:
    port = hardware.link("opa-100")
    node = hardware.node_fabric(port, 4)
    assert (node.id, node.scope, node.links) == ("opa-100-x4", "node", 4)
    assert node.unidirectional_gbps == pytest.approx(50) and node.bidirectional_gbps == pytest.approx(100)
    # the same figure as the catalog's own node of four Omni-Path HFIs
    assert node.unidirectional_gbps == hardware.link("opa-100-x4").unidirectional_gbps
    assert hardware.node_fabric(port, 1) is port and hardware.node_fabric(port, None) is port
    # a node entry already counts its NICs: a log's count does not multiply it again
    hdr = hardware.link("ib-hdr-x8")
    assert hardware.node_fabric(hdr, 4) is hdr
    assert hardware.fabric_of(None, 4) is None
    assert hardware.fabric_of("roce-200g", 8).unidirectional_gbps == pytest.approx(200)


@pytest.mark.parametrize(
    ("printed", "placeholder"), [("NVIDIA Graphics Device", True), ("NVIDIA Z900-SXM9-512GB", False)]
)
def test_a_printed_name_no_catalog_gpu_has_is_explained(printed: str, placeholder: bool) -> None:
    assert hardware.match_gpu(printed) is None
    note = hardware.unknown_gpu_note(printed)
    assert note.startswith(f"the log names the GPU {printed!r}, which is no catalog GPU's name")
    assert ("name table does not know yet" in note) is placeholder


def test_turing_geforce_has_no_bf16_and_its_fp16_is_the_fp32_accumulate_rate() -> None:
    """RTX 2080 Ti: 544 tensor cores x 128 FLOP/clock x 1.545 GHz = 107.6 TFLOPS with FP16 accumulate, half
    with the FP32 accumulate training uses (Turing whitepaper figures as reviews quote them); no BF16 path."""
    assert hardware.peak_tflops("rtx-2080-ti", "fp16") == pytest.approx(53.8)
    assert hardware.gpu_intra_node_link("rtx-2080-ti").id == "pcie3-x16"
    with pytest.raises(TracelogError):
        hardware.peak_tflops("rtx-2080-ti", "bf16")


def test_pascal_trains_in_fp16_on_its_cuda_cores_and_mi210_at_cdna2_rates() -> None:
    """P100 (no tensor cores) halves its FP32 rate for packed FP16 and has no BF16; an MI210 is one CDNA 2
    die, as one GCD of an MI250 at the same clock: 104 CUs, 181 TFLOPS FP16/BF16 matrix."""
    p100 = hardware.gpu("p100-sxm2-16gb")
    assert p100.peak_tflops["fp16"] == pytest.approx(2 * p100.peak_tflops["fp32"])
    assert "bf16" not in p100.peak_tflops
    assert hardware.link(p100.intra_node_link).unidirectional_gbps == 80  # 4 NVLink 1 links x 20 GB/s
    assert (
        hardware.gpu("p100-pcie-12gb").memory_bandwidth_gbps
        < hardware.gpu("p100-pcie-16gb").memory_bandwidth_gbps
    )
    mi210, mi250 = hardware.gpu("mi210"), hardware.gpu("mi250")
    assert mi210.sm_count == mi250.sm_count == 104
    assert mi210.peak_tflops["bf16"] == pytest.approx(mi250.peak_tflops["bf16"], rel=0.01)
    assert mi210.memory_gb == mi250.memory_gb == 64
