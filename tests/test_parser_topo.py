"""The `nvidia-smi topo -m` parser: GPU and NIC matrices, link kinds and NVLink counts, affinity, hosts
from prompts and pdsh prefixes, the samples and the published outputs."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

import tracelog.api as api
from tests.conftest import SAMPLES, corpus_files, source_of
from tests.test_benches_ingest import sql
from tracelog import parsers
from tracelog.parsers import topo
from tracelog.parsers.base import head_text

CELL_RX = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")


def collect(text: str | bytes) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for batch in topo.parse(source_of(text)):
        rows = batch.rows.to_dicts() if isinstance(batch.rows, pl.DataFrame) else list(batch.rows)
        out.setdefault(batch.table, []).extend(rows)
    return out


def link_map(out: dict[str, list[dict]], bench_key: int = 0) -> dict[tuple[str, str], str]:
    return {(r["a"], r["b"]): r["link_kind"] for r in out["links"] if r["bench_key"] == bench_key}


def printed_cells(text: str) -> int:
    """Link cells of the matrix rows, counted without the parser: the cells that look like link kinds."""
    count = 0
    for line in text.splitlines():
        tokens = line.split()
        if tokens and tokens[0].endswith(":") and len(tokens) > 1:  # a pdsh host prefix
            tokens = tokens[1:]
        if (
            tokens
            and re.match(r"^(GPU|NIC|mlx)\w*\d$", tokens[0])
            and len(tokens) > 1
            and CELL_RX.match(tokens[1])
        ):
            count += sum(1 for t in tokens[1:] if CELL_RX.match(t))
    return count


def test_eight_gpus_with_nics_links_and_affinity() -> None:
    out = collect((SAMPLES / "topo_8xh100_nics.txt").read_bytes())
    (bench,) = out["benches"]
    assert (bench["tool"], bench["ranks"], bench["nodes"], bench["gpus_per_node"]) == (
        "nvidia-smi-topo",
        8,
        1,
        8,
    )
    assert (bench["hosts"], bench["status"]) == (["h100-node-07"], "complete")
    links = link_map(out)
    assert len(links) == 16 * 16
    assert links[("GPU0", "GPU0")] == "X"
    assert links[("GPU0", "GPU7")] == "NV18"
    assert links[("GPU0", "NIC0")] == "PIX"
    assert links[("GPU0", "NIC1")] == "NODE"
    assert links[("GPU0", "NIC4")] == "SYS"
    assert links[("NIC4", "GPU4")] == "PIX"
    counts = {(r["a"], r["b"]): r["link_count"] for r in out["links"]}
    assert counts[("GPU2", "GPU5")] == 18
    assert counts[("GPU2", "NIC2")] is None and counts[("GPU2", "GPU2")] is None
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert params["GPU0 CPU Affinity"] == "0-55,112-167"
    assert params["GPU5 CPU Affinity"] == "56-111,168-223"
    assert params["GPU5 NUMA Affinity"] == "1"
    assert params["GPU5 GPU NUMA ID"] == "N/A"
    assert params["NIC3"] == "mlx5_3"
    assert not any(name.startswith("NIC0 ") for name in params)  # NIC rows have no affinity
    assert "unparsed" not in out


def test_pdsh_hosts_interleaved_are_one_bench_each() -> None:
    out = collect((SAMPLES / "topo_pdsh_2x4xl40s.txt").read_bytes())
    first, second = out["benches"]
    assert (first["hosts"], second["hosts"]) == (["l40s-03"], ["l40s-04"])
    assert first["status"] == second["status"] == "complete"
    assert {r["host"] for r in out["links"] if r["bench_key"] == 0} == {"l40s-03"}
    a, b = link_map(out, 0), link_map(out, 1)
    assert len(a) == len(b) == 25
    assert (a[("GPU0", "mlx5_0")], b[("GPU0", "mlx5_0")]) == ("PXB", "NODE")
    assert a[("GPU1", "GPU2")] == b[("GPU1", "GPU2")] == "SYS"
    assert "unparsed" not in out


CORPUS_TOPO = corpus_files("topo")


@pytest.mark.skipif(not CORPUS_TOPO, reason="the shared corpus (../shared/corpus/topo) is not here")
@pytest.mark.parametrize("path", CORPUS_TOPO, ids=lambda p: p.name)
def test_published_outputs_parse_completely(path: Path) -> None:
    text = path.read_text()
    head = head_text(path.read_bytes()[: parsers.HEAD_BYTES])
    assert parsers.detect(head, str(path)) is topo
    out = collect(text)
    assert len(out["links"]) == printed_cells(text)
    (bench,) = out["benches"]
    n = bench["ranks"]
    assert len(out["links"]) == n * n
    links = link_map(out)
    assert all(links[(f"GPU{i}", f"GPU{i}")] == "X" for i in range(n))
    assert all(links[(a, b)] == links[(b, a)] for a, b in links)
    assert bench["status"] == "complete"
    assert "unparsed" not in out


@pytest.mark.skipif(not CORPUS_TOPO, reason="the shared corpus (../shared/corpus/topo) is not here")
@pytest.mark.parametrize(
    ("name", "gpus", "kind", "count", "affinity"),
    [
        ("2gpu_nv2", 2, "NV2", 2, ("0-23", "N/A")),
        ("2gpu_phb", 2, "PHB", None, ("0-11", "N/A")),
        ("a100x8", 8, "NV12", 12, ("24-47", "1")),
        ("h100x8", 8, "NV18", 18, ("52-103", "1")),
    ],
)
def test_published_link_kinds(name: str, gpus: int, kind: str, count: int | None, affinity: tuple) -> None:
    (path,) = [p for p in CORPUS_TOPO if name in p.name]
    out = collect(path.read_bytes())
    off_diagonal = [r for r in out["links"] if r["a"] != r["b"]]
    assert {(r["link_kind"], r["link_count"]) for r in off_diagonal} == {(kind, count)}
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    last = f"GPU{gpus - 1}"
    assert (params[f"{last} CPU Affinity"], params[f"{last} NUMA Affinity"]) == affinity


@pytest.mark.parametrize(
    ("cell", "count"),
    [("X", None), ("NV1", 1), ("NV4", 4), ("NV12", 12), ("NV18", 18), ("PIX", None), ("PXB", None)]
    + [("PHB", None), ("NODE", None), ("SYS", None), ("SOC", None)],
)
def test_every_link_kind(cell: str, count: int | None) -> None:
    other = "X" if cell != "X" else "SYS"
    text = f"\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \t{cell}\t0-7\nGPU1\t{cell}\t X \t0-7\n"
    if cell == "X":
        text = f"\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \t{other}\t0-7\nGPU1\t{other}\t X \t0-7\n"
    out = collect(text)
    link = next(
        r for r in out["links"] if (r["a"], r["b"]) == (("GPU0", "GPU0") if cell == "X" else ("GPU0", "GPU1"))
    )
    assert (link["link_kind"], link["link_count"]) == (cell, count)


def test_a_matrix_missing_rows_is_partial() -> None:
    text = (SAMPLES / "topo_8xh100_nics.txt").read_text().split("\nGPU5\t")[0]
    out = collect(text)
    (bench,) = out["benches"]
    assert bench["status"] == "partial"
    (event,) = out["events"]
    assert event["kind"] == "incomplete"
    assert "GPU5" in event["text"] and "NIC7" in event["text"]


def test_rows_that_do_not_fit_the_header_are_unparsed() -> None:
    text = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tNV4\t0-7\t0\nGPU1\t X \tNV4\tNV4\t0-7\t0\t1\t2\n"
    out = collect(text)
    assert [u["line_no"] for u in out["unparsed"]] == [3]
    assert out["benches"][0]["status"] == "partial"


def test_single_gpu() -> None:
    out = collect("\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-15\t0\t\tN/A\n")
    (link,) = out["links"]
    assert (link["a"], link["b"], link["link_kind"]) == ("GPU0", "GPU0", "X")
    assert out["benches"][0]["ranks"] == 1


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("topo_*.txt")), ids=lambda p: p.name)
def test_samples_are_detected_and_fully_counted(path: Path) -> None:
    head = head_text(path.read_bytes()[: parsers.HEAD_BYTES])
    assert parsers.detect(head, str(path)) is topo
    text = path.read_text()
    assert len(collect(text)["links"]) == printed_cells(text)


def test_a_gpu_without_cpu_affinity_keeps_its_numa_affinity_in_its_column() -> None:
    # Invented, with the tabs nvidia-smi prints: a GPU without CPU affinity gets an empty cell, and an
    # empty cell stands before `GPU NUMA ID`; closing the empty cells up had shifted NUMA into CPU.
    text = (
        "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tNV18\tNV18\t44-51,148-155\t0\t\tN/A\n"
        "GPU1\tNV18\t X \tNV18\t\t1\t\tN/A\n"
        "GPU2\tNV18\tNV18\t X \t\t\t\t2\n"
        "\n"
        "Legend:\n"
        "\n"
        "  X    = Self\n"
    )
    out = collect(text)
    (bench,) = out["benches"]
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert params == {
        "GPU0 CPU Affinity": "44-51,148-155",
        "GPU0 NUMA Affinity": "0",
        "GPU0 GPU NUMA ID": "N/A",
        "GPU1 NUMA Affinity": "1",
        "GPU1 GPU NUMA ID": "N/A",
        "GPU2 GPU NUMA ID": "2",
    }
    assert link_map(out)[("GPU1", "GPU2")] == "NV18" and len(out["links"]) == 9


# Invented, in the shape nvidia-smi prints `topo -m` then `topo -p2p rw` on a workstation of four PCIe
# GPUs (a leading space, tab-separated cells, a trailing tab; its own legend), GPU3 not allowed to peers.
P2P_RW = (
    "$ nvidia-smi topo -m\n"
    "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tPHB\tPHB\tSYS\t0-7\t0\t\tN/A\n"
    "GPU1\tPHB\t X \tPHB\tSYS\t0-7\t0\t\tN/A\n"
    "GPU2\tPHB\tPHB\t X \tSYS\t0-7\t0\t\tN/A\n"
    "GPU3\tSYS\tSYS\tSYS\t X \t8-15\t1\t\tN/A\n"
    "\n"
    "$ nvidia-smi topo -p2p rw\n"
    " \tGPU0\tGPU1\tGPU2\tGPU3\t\n"
    " GPU0\tX\tOK\tOK\tCNS\t\n"
    " GPU1\tOK\tX\tOK\tCNS\t\n"
    " GPU2\tOK\tOK\tX\tCNS\t\n"
    " GPU3\tCNS\tCNS\tCNS\tX\t\n"
    "\n"
    "Legend:\n"
    "\n"
    "  X    = Self\n"
    "  OK   = Status Ok\n"
    "  CNS  = Chipset not supported\n"
    "  GNS  = GPU not supported\n"
    "  TNS  = Topology not supported\n"
    "  NS   = Not supported\n"
    "  U    = Unknown\n"
)


def test_a_p2p_support_matrix_is_its_own_complete_bench_without_links() -> None:
    out = collect(P2P_RW)
    assert [b["status"] for b in out["benches"]] == ["complete", "complete"]
    assert {r["bench_key"] for r in out["links"]} == {0}  # the wiring only
    params = {(p["bench_key"], p["name"]): p["value"] for p in out["bench_params"]}
    assert params[(1, "p2p_mode")] == "rw"
    assert params[(1, "GPU0 GPU1 p2p rw")] == "OK"
    assert params[(1, "GPU3 GPU0 p2p rw")] == "CNS"
    assert (1, "GPU2 GPU2 p2p rw") not in params
    assert sum(1 for bench, name in params if bench == 1 and name.endswith("p2p rw")) == 12
    assert "unparsed" not in out and "events" not in out


def test_a_p2p_matrix_pasted_without_its_command_is_read_as_one() -> None:
    text = P2P_RW.split("$ nvidia-smi topo -p2p rw\n")[1]
    out = collect(text)
    (bench,) = out["benches"]
    assert bench["status"] == "complete" and "links" not in out
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert params["p2p_mode"] == "unknown" and params["GPU1 GPU3 p2p unknown"] == "CNS"


def test_p2p_disabled_by_regkey_is_a_cell_and_its_legend_line_is_known(db_path: Path, tmp_path: Path) -> None:
    """Newer drivers print `DR` (disabled by regkey) in the `-p2p` matrix and its legend, as
    noonghunna/club-3090#1229's paste of the legend shows; the pair is flagged like any other without peer
    access. Invented matrix in that shape."""
    text = (
        P2P_RW.split("$ nvidia-smi topo -p2p rw\n")[1]
        .replace("CNS", "DR")
        .replace("  NS   = Not supported\n", "  NS   = Not supported\n  DR   = Disabled by regkey\n")
    )
    out = collect(text)
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert params["GPU3 GPU0 p2p unknown"] == "DR"
    assert "unparsed" not in out
    log = tmp_path / "p2p_dr.txt"
    log.write_text(text)
    api.ingest(str(db_path), [str(log)])
    (message,) = sql(db_path, "SELECT message FROM flags WHERE rule = 'p2p_unsupported'")[0]
    assert "3 of 6 GPU pairs have no peer access (DR: disabled by regkey)" in message


def test_a_bracketed_prompt_after_an_env_name_and_colour_codes_without_their_escape() -> None:
    """RHEL's `[user@host dir]$` after a conda env name names the host; a header whose colour codes lost
    their ESC byte in a copy (`[4mGPU0 ... NUMA Affinity[0m`, as sglang's environment dump shows it) is still
    the header. Invented lines in those shapes."""
    text = "\n".join(
        [
            "((sglang-0.5.9) ) [dev@gpu-node-7 ~]$ nvidia-smi topo -m",
            "\t[4mGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID[0m",
            "GPU0\t X \tNV18\tPXB\t0-63\t0\t\tN/A",
            "GPU1\tNV18\t X \tNODE\t0-63\t0\t\tN/A",
            "NIC0\tPXB\tNODE\t X ",
            "",
        ]
    )
    assert topo.detect(text) > 0
    out = collect(text)
    (bench,) = out["benches"]
    assert (bench["hosts"], bench["status"]) == (["gpu-node-7"], "complete")
    assert {(r["a"], r["b"], r["link_kind"]) for r in out["links"]} >= {
        ("GPU0", "GPU1", "NV18"),
        ("GPU0", "NIC0", "PXB"),
    }
    assert "unparsed" not in out


def test_another_tools_gpu_matrix_is_no_bench_and_its_lines_stay() -> None:
    """rocm-smi --showtopo's matrices have a `GPU0 GPU1 ...` header too, but none of nvidia-smi's cells:
    read as topo (forced), they make no empty bench and every line is kept as unparsed."""
    text = "\n".join(
        [
            "=========================== Weight between two GPUs ============================",
            "       GPU0         GPU1",
            "GPU0   0            15",
            "GPU1   15           0",
            "",
        ]
    )
    assert topo.detect(text) == 0
    out = collect(text)
    assert "benches" not in out
    assert sorted(r["line_no"] for r in out["unparsed"]) == [1, 2, 3, 4]


def test_cells_and_names_glued_by_a_paste_that_lost_a_tab_are_split_back() -> None:
    # Invented, in the shape of B200 outputs pasted into issues (NVIDIA/nccl-tests#333, vllm#31594): a
    # tab lost between two cells (`PXBNODE`, `SYSSYS`) or two header names (`NIC1NIC2`).
    text = (
        "\tGPU0\tGPU1\tNIC0\tNIC1NIC2\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tNV18\tPXBNODE\tSYS\t0-55,112-167\t0\t\tN/A\n"
        "GPU1\tNV18\t X \tNODE\tSYSSYS\t56-111,168-223\t1\t\tN/A\n"
    )
    out = collect(text)
    links = link_map(out)
    assert (links[("GPU0", "GPU1")], links[("GPU0", "NIC0")], links[("GPU0", "NIC1")], links[("GPU0", "NIC2")]) == (
        "NV18", "PXB", "NODE", "SYS"
    )  # fmt: skip
    assert (links[("GPU1", "NIC1")], links[("GPU1", "NIC2")]) == ("SYS", "SYS")
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert (params["GPU1 CPU Affinity"], params["GPU1 NUMA Affinity"]) == ("56-111,168-223", "1")
    assert "unparsed" not in out


def test_a_pci_paths_matrix_says_nvlink_is_not_shown() -> None:
    """`nvidia-smi topo -mp` prints the PCIe path between every pair, NVLinked GPUs included (`NODE` here
    between GPUs that NVLink joins): the bench says so, so that no one reads the PCIe path as the link.
    The shape of deepseek-ai/DeepEP#60 (14 NICs, GPU NUMA ID), cut to two GPUs and two NICs, invented."""
    text = """\
root@f51fec68bf55:~# nvidia-smi topo -mp
        GPU0    GPU1    NIC0    NIC1    CPU Affinity    NUMA Affinity   GPU NUMA ID
GPU0     X      NODE    PIX     NODE    0-47,96-143     0               N/A
GPU1    NODE     X      NODE    PIX     0-47,96-143     0               N/A
NIC0    PIX     NODE     X      NODE
NIC1    NODE    PIX     NODE     X
"""
    out = collect(text)
    assert link_map(out)[("GPU0", "GPU1")] == "NODE"
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert params["matrix"].startswith("PCIe paths only (topo -mp)")
    # the plain matrix says nothing of it
    plain = collect(text.replace("topo -mp", "topo -m"))
    assert "matrix" not in {p["name"] for p in plain["bench_params"]}


def test_blank_affinity_cells_of_a_copy_with_blanks_for_tabs_stay_blank() -> None:
    """A GPU without CPU or NUMA affinity (a VM, vllm-project/vllm#19607) leaves those cells empty, and a copy
    whose tabs became blanks keeps only the tab stops: `N/A` is the GPU NUMA ID, not the CPU affinity
    (invented sample of that shape, the tabs expanded to multiples of 8; GPU2 has its affinity printed)."""
    rows = [
        ["", "GPU0", "GPU1", "GPU2", "NIC0", "NIC1", "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"],
        ["GPU0", " X ", "NV12", "NV12", "SYS", "PXB", "", "", "", "N/A"],
        ["GPU1", "NV12", " X ", "NV12", "SYS", "PXB", "", "", "", "N/A"],
        ["GPU2", "NV12", "NV12", " X ", "SYS", "PXB", "0-7", "0", "", "N/A"],
        ["NIC0", "SYS", "SYS", "SYS", " X ", "SYS"],
        ["NIC1", "PXB", "PXB", "PXB", "SYS", " X "],
    ]
    text = "\n".join("\t".join(r).expandtabs(8) for r in rows) + "\n"
    out = collect(text)
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert params == {
        "GPU0 GPU NUMA ID": "N/A",
        "GPU1 GPU NUMA ID": "N/A",
        "GPU2 CPU Affinity": "0-7",
        "GPU2 NUMA Affinity": "0",
        "GPU2 GPU NUMA ID": "N/A",
    }
    assert len(out["links"]) == 5 * 5


# Invented, in the shape of vllm-project/vllm#16336's paste: an 8x B200 matrix copied from its GPU0 row
# on (no header), tabs expanded to blanks, cut after GPU3; 12 NIC columns follow the GPUs'.
HEADERLESS_CUT = "\n".join(
    [
        "GPU Topology:",
        "GPU0     X      NV18    NODE    NV18    NV18    NV18    NV18    NV18    PXB     NODE    NODE    NODE    "
        "SYS     SYS     SYS     SYS     NODE    NODE    SYS     SYS     0-55,112-167    0               N/A",
        "GPU1    NV18     X      NODE    NV18    NV18    NV18    NV18    NV18    NODE    PXB     NODE    NODE    "
        "SYS     SYS     SYS     SYS     NODE    NODE    SYS     SYS     0-55,112-167    0               N/A",
        "GPU2    NODE    NODE     X      NODE    SYS     SYS     SYS     SYS     NODE    NODE    PXB     NODE    "
        "SYS     SYS     SYS     SYS     NODE    NODE    SYS     SYS     0-55,112-167    0               N/A",
        "GPU3    NV18    NV18    NODE     X      NV18    NV18    NV18    NV18    NODE    NODE    NODE    PXB     "
        "SYS     SYS     SYS     SYS     NODE    NODE    SYS     SYS     0-55,112-167    0               N/A",
        "",
        "ROCM Version: Could not collect",
        "",
    ]
)


def test_a_matrix_pasted_without_its_header_is_read_by_its_rows() -> None:
    assert topo.detect(HEADERLESS_CUT) == 30
    out = collect(HEADERLESS_CUT)
    (bench,) = out["benches"]
    assert (bench["ranks"], bench["status"], bench["line_start"], bench["line_end"]) == (8, "partial", 2, 5)
    links = link_map(out)
    # the GPU columns: those of the four rows, then GPU4-GPU7 by their NV18 cells; the 12 NICs' not read
    assert {b for _, b in links} == {f"GPU{i}" for i in range(8)}
    assert [links[("GPU2", f"GPU{i}")] for i in range(8)] == ["NODE", "NODE", "X", "NODE", *["SYS"] * 4]
    assert links[("GPU3", "GPU7")] == "NV18"
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert params["columns not named"] == "12 after GPU7 (GPUs or NICs: no header)"
    assert (params["GPU3 CPU Affinity"], params["GPU3 NUMA Affinity"], params["GPU3 GPU NUMA ID"]) == (
        "0-55,112-167",
        "0",
        "N/A",
    )
    (event,) = out["events"]
    assert event["text"] == "matrix rows missing for GPU4, GPU5, GPU6, GPU7"
    assert [u["line_no"] for u in out["unparsed"]] == [1, 7]


def test_a_headerless_matrix_with_nic_rows_names_every_column() -> None:
    """Invented 2-GPU, 2-NIC matrix, tab-separated, whole but for its header: the rows name the columns;
    cut after NIC0, NIC0's `X` (third column) still says two GPU columns come first."""
    rows = [
        "GPU0\t X \tNV4\tPIX\tSYS\t0-23\t0\t\tN/A",
        "GPU1\tNV4\t X \tSYS\tPIX\t24-47\t1\t\tN/A",
        "NIC0\tPIX\tSYS\t X \tSYS",
        "NIC1\tSYS\tPIX\tSYS\t X ",
    ]
    out = collect("\n".join(rows) + "\n")
    (bench,) = out["benches"]
    assert (bench["ranks"], bench["status"]) == (2, "complete")
    links = link_map(out)
    assert (links[("GPU1", "NIC1")], links[("NIC1", "GPU1")], links[("GPU0", "GPU1")]) == (
        "PIX",
        "PIX",
        "NV4",
    )
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert (params["GPU1 CPU Affinity"], params["GPU1 NUMA Affinity"], params["GPU1 GPU NUMA ID"]) == (
        "24-47",
        "1",
        "N/A",
    )
    cut = collect("\n".join(rows[:3]) + "\n")
    assert {b for _, b in link_map(cut)} == {"GPU0", "GPU1", "NIC0", "NIC1"}
    assert cut["benches"][0]["status"] == "partial"


def test_headerless_rows_that_disagree_with_the_diagonal_stay_unparsed() -> None:
    text = "GPU0\t X \tNV4\tNV4\t0-7\t0\nGPU2\tNV4\t X \tNV4\t0-7\t0\n"  # GPU2's X in GPU1's column
    out = collect(text)
    assert "benches" not in out and [u["line_no"] for u in out["unparsed"]] == [1, 2]
