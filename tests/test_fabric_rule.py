"""The `nvlink_missing` flag: a GPU that dropped off its node's NVLink (or xGMI) fabric, read from a
topology matrix. The matrices are invented, in the shape of `nvidia-smi topo -m` and `rocm-smi --showtopo`
(the first after vllm-project/vllm#16336, a B200 node whose GPU2 prints NODE/SYS to every GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SAMPLES
from tracelog import api

HEADER = "\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"


def _matrix(kinds: dict[tuple[int, int], str], default: str, gpus: int = 8, header: str = HEADER) -> str:
    """An invented 8-GPU `topo -m` matrix: `default` between every pair but those of `kinds`."""
    rows = []
    for a in range(gpus):
        cells = [" X " if a == b else kinds.get((min(a, b), max(a, b)), default) for b in range(gpus)]
        rows.append("\t".join([f"GPU{a}", *cells, "0-55" if a < gpus // 2 else "56-111", "0", "", "N/A"]))
    return header + "\n".join(rows) + "\n"


def _flags(tmp_path: Path, text: str, name: str = "topo.txt") -> list[dict]:
    path = tmp_path / name
    path.write_text(text)
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(path)])
    return [f for f in api.flags(db).to_dict("records") if f["rule"] == "nvlink_missing"]


def _off(gpu: int, near: str = "NODE", far: str = "SYS") -> dict[tuple[int, int], str]:
    return {(min(gpu, b), max(gpu, b)): near if (b < 4) == (gpu < 4) else far for b in range(8) if b != gpu}


def test_a_gpu_with_no_nvlink_on_an_nvswitch_node_is_critical(tmp_path: Path) -> None:
    (flag,) = _flags(tmp_path, _matrix(_off(2), "NV18"))
    assert (flag["severity"], flag["subject"], flag["row_ref"]) == ("critical", "links 1", "line 4")
    assert flag["message"] == (
        "GPU2 has no NVLink to any GPU (GPU2: NODE to GPU0, GPU1, GPU3; SYS to GPU4, GPU5, GPU6, GPU7) "
        "while the other 7 GPUs are NV18 to each other: its traffic, and every collective that includes "
        "it, runs over PCIe and the CPU interconnect."
    )
    assert (flag["measured"], flag["expected"]) == (0.0, 7.0)
    assert "nvidia-smi nvlink --status" in flag["hint"] and "Fabric Manager" in flag["hint"]


def test_a_gpu_with_fewer_nvlinks_than_its_peers_is_a_warning(tmp_path: Path) -> None:
    kinds = {(min(5, b), max(5, b)): "NV12" for b in range(8) if b != 5}
    (flag,) = _flags(tmp_path, _matrix(kinds, "NV18"))
    assert flag["severity"] == "warning"
    assert flag["message"].startswith(
        "GPU5 has fewer NVLinks than its peers (GPU5: NV12 to GPU0, GPU1, GPU2, GPU3, GPU4, GPU6, GPU7) "
        "while the other 7 GPUs are NV18 to each other"
    )
    assert (flag["measured"], flag["expected"]) == (12.0, round((6 * 18 + 12) / 7, 3))


def test_a_gpu_with_nvlink_to_only_some_peers_is_a_warning(tmp_path: Path) -> None:
    kinds = {(3, 6): "SYS", (3, 7): "SYS"}
    flags = _flags(tmp_path, _matrix(kinds, "NV18"))
    # GPU6 and GPU7 each miss one peer, GPU3 two: GPU3 is the one below the median GPU
    assert [(f["severity"], f["message"].split(" (")[0]) for f in flags] == [
        ("warning", "GPU3 has fewer NVLinks than its peers")
    ]
    assert (flags[0]["measured"], flags[0]["expected"]) == (5.0, 7.0)


# DGX-1 (V100) hybrid cube mesh: each GPU NVLinked to four others, two of them doubled; the rest SYS
DGX1 = {
    (0, 1): "NV1", (0, 2): "NV1", (0, 3): "NV2", (0, 4): "NV2",
    (1, 2): "NV2", (1, 3): "NV1", (1, 5): "NV2",
    (2, 3): "NV2", (2, 6): "NV1",
    (3, 7): "NV1",
    (4, 5): "NV1", (4, 6): "NV1", (4, 7): "NV2",
    (5, 6): "NV2", (5, 7): "NV1",
    (6, 7): "NV2",
}  # fmt: skip


@pytest.mark.parametrize(
    "text",
    [
        _matrix({}, "NV18"),  # healthy NVSwitch node
        _matrix(DGX1, "SYS"),  # the cube mesh's uneven links are its design
        _matrix({}, "NODE"),  # PCIe only
        _matrix({(0, 1): "NV12", (2, 3): "NV12", (4, 5): "NV12", (6, 7): "NV12"}, "SYS"),  # bridged pairs
        _matrix({}, "NV4", gpus=2, header="\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"),
    ],
    ids=["nvswitch", "dgx1", "pcie", "bridged-pairs", "two-gpu-bridge"],
)
def test_nodes_whose_links_are_as_built_raise_nothing(tmp_path: Path, text: str) -> None:
    assert _flags(tmp_path, text) == []


def test_the_samples_raise_nothing(tmp_path: Path) -> None:
    for sample in ("topo_8xh100_nics.txt", "rocm_smi_showtopo_8xmi250x.txt", "topo_pdsh_2x4xl40s.txt"):
        assert _flags(tmp_path, (SAMPLES / sample).read_text(), sample) == [], sample


def test_an_amd_gpu_without_xgmi_is_critical(tmp_path: Path) -> None:
    sample = (SAMPLES / "rocm_smi_showtopo_8xmi250x.txt").read_text()
    start = sample.index("=== Link Type")
    end = sample.index("=== Numa Nodes")
    block = sample[start:end].splitlines()
    for i, line in enumerate(block):
        if line.startswith("GPU"):
            cells = line.split()
            cells = [
                c if c == "0" or (cells[0] != "GPU6" and j != 7) else "PCIE"
                for j, c in enumerate(cells[1:], 1)
            ]
            block[i] = "   ".join([line.split()[0], *cells])
    (flag,) = _flags(tmp_path, sample[:start] + "\n".join(block) + "\n" + sample[end:])
    assert flag["severity"] == "critical"
    assert flag["message"].startswith(
        "GPU6 on mi250x-node-02 has no xGMI link to any GPU (GPU6: PCIE to GPU0, GPU1, GPU2, GPU3, GPU4, GPU5, GPU7) while "
        "the other 7 GPUs are XGMI to each other"
    )
    assert "rocm-smi --showtopo" in flag["hint"]


def test_a_broken_link_of_a_cube_mesh_names_both_its_gpus(tmp_path: Path) -> None:
    (flag,) = _flags(tmp_path, _matrix({**DGX1, (0, 1): "SYS"}, "SYS"))
    assert flag["severity"] == "warning"
    assert flag["message"].split(" (")[0] == "GPU0, GPU1 have fewer NVLinks than their peers"
    assert (flag["measured"], flag["expected"]) == (3.0, 4.0)
