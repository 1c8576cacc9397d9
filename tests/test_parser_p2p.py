"""The p2pBandwidthLatencyTest parser: every matrix n x n with the printed values, peer access, devices,
old and new titles, any number of GPUs, cut-off runs, the samples and the published excerpts."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import SAMPLES, corpus_files, source_of
from tracelog import parsers
from tracelog.parsers import p2p
from tracelog.parsers.base import head_text
from tracelog.store.benches import P2P_MATRICES

H100 = SAMPLES / "p2p_8xh100_p2p_read.txt"
A100 = SAMPLES / "p2p_4xa100_pcie_two_sockets.txt"
MATRIX_ROW_RX = re.compile(r"^\s*(\d+)\s+((?:-?[\d.]+\s*)+)$")


def collect(text: str | bytes) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for batch in p2p.parse(source_of(text)):
        rows = batch.rows.to_dicts() if isinstance(batch.rows, pl.DataFrame) else list(batch.rows)
        out.setdefault(batch.table, []).extend(rows)
    return out


def matrices(out: dict[str, list[dict]]) -> dict[str, dict[tuple[int, int], float]]:
    found: dict[str, dict[tuple[int, int], float]] = defaultdict(dict)
    for row in out["p2p"]:
        cells = found[row["matrix"]]
        assert (row["src"], row["dst"]) not in cells, f"duplicate cell in {row['matrix']}"
        cells[(row["src"], row["dst"])] = row["value"]
    return found


def printed_cells(path: Path) -> dict[int, list[float]]:
    """Each printed matrix row (line number -> values), read without the parser."""
    cells = {}
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        match = MATRIX_ROW_RX.match(line)
        if match:
            cells[n] = [float(v) for v in match.group(2).split()]
    return cells


ALL_KINDS = {
    "connectivity": "bool",
    "access_peer": "bool",
    "bandwidth_uni_p2p_off": "GB/s",
    "bandwidth_uni_p2p_on": "GB/s",
    "bandwidth_uni_p2p_on_reads": "GB/s",
    "bandwidth_bi_p2p_off": "GB/s",
    "bandwidth_bi_p2p_on": "GB/s",
    "latency_gpu_p2p_off": "us",
    "latency_cpu_p2p_off": "us",
    "latency_gpu_p2p_on": "us",
    "latency_cpu_p2p_on": "us",
    "latency_gpu_p2p_on_reads": "us",
    "latency_cpu_p2p_on_reads": "us",
}


def test_the_rules_know_the_matrices_the_parser_calls_a_full_output() -> None:
    """The bandwidth rules read the names from the store, not the parser (which would load every
    parser): the two lists must stay one, and name matrices a real output prints."""
    assert P2P_MATRICES == p2p.STANDARD
    assert set(P2P_MATRICES) <= set(ALL_KINDS)


def test_every_matrix_of_a_full_run_is_n_by_n() -> None:
    out = collect(H100.read_bytes())
    found = matrices(out)
    assert set(found) == set(ALL_KINDS)
    grid = {(s, d) for s in range(8) for d in range(8)}
    for kind, cells in found.items():
        expected = grid - {(i, i) for i in range(8)} if kind == "access_peer" else grid
        assert set(cells) == expected, kind
    units = {(r["matrix"], r["unit"]) for r in out["p2p"]}
    assert units == set(ALL_KINDS.items())
    (bench,) = out["benches"]
    assert (bench["status"], bench["ranks"], bench["nodes"], bench["gpus_per_node"]) == ("complete", 8, 1, 8)
    assert (bench["tool"], bench["gpu_name"], bench["hosts"]) == (
        "p2pBandwidthLatencyTest",
        "NVIDIA H100 80GB HBM3",
        ["h100-node-07"],
    )


def test_cells_carry_the_printed_values_on_their_lines() -> None:
    printed = printed_cells(H100)
    out = collect(H100.read_bytes())
    by_line: dict[int, list[dict]] = defaultdict(list)
    for row in out["p2p"]:
        if row["matrix"] != "access_peer":
            by_line[row["line_no"]].append(row)
    assert set(by_line) == set(printed)
    for line_no, rows in by_line.items():
        assert [r["dst"] for r in rows] == list(range(len(rows)))
        assert [r["value"] for r in rows] == printed[line_no]


def test_known_cells_of_the_h100_sample() -> None:
    found = matrices(collect(H100.read_bytes()))
    uni_on = found["bandwidth_uni_p2p_on"]
    assert 186 <= uni_on[(3, 5)] <= 190  # the pair on half its links
    assert 372 <= uni_on[(0, 1)] <= 378
    assert found["bandwidth_bi_p2p_on"][(0, 1)] > 1.9 * uni_on[(0, 1)]  # both directions summed
    assert found["latency_gpu_p2p_on"][(0, 1)] < found["latency_gpu_p2p_off"][(0, 1)]
    assert found["connectivity"][(2, 6)] == 1.0


def test_peer_access_lines_and_connectivity_agree() -> None:
    out = collect(A100.read_bytes())
    found = matrices(out)
    text = A100.read_text()
    for src, can, dst in re.findall(r"Device=(\d) (CAN|CANNOT) Access Peer Device=(\d)", text):
        assert found["access_peer"][(int(src), int(dst))] == (1.0 if can == "CAN" else 0.0)
        assert found["connectivity"][(int(src), int(dst))] == found["access_peer"][(int(src), int(dst))]
    assert found["connectivity"][(0, 2)] == 0.0
    assert all(found["connectivity"][(i, i)] == 1.0 for i in range(4))


def test_older_titles_without_writes_keep_the_plain_names() -> None:
    out = collect(A100.read_bytes())
    assert set(matrices(out)) == set(p2p.STANDARD) | {"access_peer"}
    (bench,) = out["benches"]
    assert (bench["status"], bench["ranks"], bench["gpu_name"]) == ("complete", 4, "A100-PCIE-40GB")
    assert "unparsed" not in out


def test_device_lines() -> None:
    out = collect(A100.read_bytes())
    assert [(d["device"], d["bus_id"], d["gpu_name"]) for d in out["bench_devices"]] == [
        (0, "0000:3b:00", "A100-PCIE-40GB"),
        (1, "0000:5e:00", "A100-PCIE-40GB"),
        (2, "0000:86:00", "A100-PCIE-40GB"),
        (3, "0000:af:00", "A100-PCIE-40GB"),
    ]


def matrix_text(n: int, title: str, header: str = "   D\\D", value: float = 1.5) -> list[str]:
    lines = [title, header + "".join(f"{j:6d} " for j in range(n))]
    lines += [f"{i:6d} " + "".join(f"{value + i + j / 100:6.02f} " for j in range(n)) for i in range(n)]
    return lines


@pytest.mark.parametrize("n", [1, 2, 3, 5, 16])
def test_any_number_of_gpus(n: int) -> None:
    lines = ["[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]"]
    lines += [
        f"Device: {i}, NVIDIA B200, pciBusID: {16 + i:x}, pciDeviceID: 0, pciDomainID:0" for i in range(n)
    ]
    lines += ["P2P Connectivity Matrix", "     D\\D" + "".join(f"{j:6d}" for j in range(n))]
    lines += [f"{i:6d}\t" + "".join(f"{1:6d}" for _ in range(n)) for i in range(n)]
    lines += matrix_text(n, "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)")
    lines += matrix_text(n, "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)")
    lines += matrix_text(n, "Bidirectional P2P=Disabled Bandwidth Matrix (GB/s)")
    lines += matrix_text(n, "Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)")
    for title in ("P2P=Disabled Latency Matrix (us)", "P2P=Enabled Latency (P2P Writes) Matrix (us)"):
        lines += matrix_text(n, title, "   GPU") + [""] + matrix_text(n, "", "   CPU")[1:]
    out = collect("\n".join(lines) + "\n")
    found = matrices(out)
    assert set(found) == set(p2p.STANDARD)
    for kind, cells in found.items():
        assert set(cells) == {(s, d) for s in range(n) for d in range(n)}, kind
    assert found["latency_cpu_p2p_on"][(n - 1, n - 1)] == pytest.approx(1.5 + n - 1 + (n - 1) / 100)
    (bench,) = out["benches"]
    assert (bench["status"], bench["ranks"]) == ("complete", n)


def test_a_run_cut_short_is_partial_with_what_it_has() -> None:
    lines = H100.read_text().splitlines()
    cut = next(i for i, line in enumerate(lines) if line.startswith("Bidirectional P2P=Enabled")) + 5
    out = collect("\n".join(lines[:cut]))
    (bench,) = out["benches"]
    assert bench["status"] == "partial"
    found = matrices(out)
    assert len(found["bandwidth_bi_p2p_on"]) == 3 * 8
    assert "latency_gpu_p2p_on" not in found
    (event,) = out["events"]
    assert event["kind"] == "incomplete"
    assert "bandwidth_bi_p2p_on" in event["text"] and "latency_gpu_p2p_off" in event["text"]


def test_cuda_failure_marks_the_run_failed() -> None:
    text = "\n".join(
        [
            "[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]",
            "Device: 0, NVIDIA A100-SXM4-80GB, pciBusID: 7, pciDeviceID: 0, pciDomainID:0",
            "Device: 1, NVIDIA A100-SXM4-80GB, pciBusID: f, pciDeviceID: 0, pciDomainID:0",
            "Cuda failure p2pBandwidthLatencyTest.cu:165: 'peer access is not supported between these two devices'",
            "",
        ]
    )
    out = collect(text)
    (bench,) = out["benches"]
    assert bench["status"] == "failed"
    assert [e["kind"] for e in out["events"]] == ["error"]


def test_rows_of_the_wrong_width_are_unparsed() -> None:
    lines = matrix_text(3, "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)")
    lines.insert(3, "     1 274.70 1581.48")
    out = collect("\n".join(lines) + "\n")
    assert [u["text"] for u in out["unparsed"]] == ["     1 274.70 1581.48"]
    assert len(out["p2p"]) == 9


def test_two_runs_in_one_file() -> None:
    text = A100.read_text()
    out = collect(text + "\n" + text)
    assert [b["bench_key"] for b in out["benches"]] == [0, 1]
    assert {r["bench_key"] for r in out["p2p"]} == {0, 1}
    assert len(out["p2p"]) == 2 * len(collect(text)["p2p"])


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("p2p_*.txt")), ids=lambda p: p.name)
def test_samples_are_detected_as_p2p(path: Path) -> None:
    head = head_text(path.read_bytes()[: parsers.HEAD_BYTES])
    assert parsers.detect(head, str(path)) is p2p


CORPUS_P2P = corpus_files("p2p")


@pytest.mark.skipif(not CORPUS_P2P, reason="the shared corpus (../shared/corpus/p2p) is not here")
@pytest.mark.parametrize("path", CORPUS_P2P, ids=lambda p: p.name)
def test_published_excerpts_parse_what_they_have(path: Path) -> None:
    head = head_text(path.read_bytes()[: parsers.HEAD_BYTES])
    assert parsers.detect(head, str(path)) is p2p
    printed = printed_cells(path)
    n = len(next(iter(printed.values())))
    out = collect(path.read_bytes())
    assert len(out["p2p"]) == sum(len(v) for v in printed.values()) == n * n
    found = matrices(out)
    assert set(found) == {"bandwidth_uni_p2p_on"}
    assert set(found["bandwidth_uni_p2p_on"]) == {(s, d) for s in range(n) for d in range(n)}
    for line_no, values in printed.items():
        src = line_no - min(printed)
        assert [found["bandwidth_uni_p2p_on"][(src, d)] for d in range(n)] == values
    (bench,) = out["benches"]
    assert (bench["status"], bench["ranks"]) == ("partial", n)
    assert all(u["text"] == "[...]" for u in out.get("unparsed", []))


@pytest.mark.skipif(not CORPUS_P2P, reason="the shared corpus (../shared/corpus/p2p) is not here")
@pytest.mark.parametrize(
    ("name", "low", "high"),
    [("a100x8", 270, 277), ("h100x8", 363, 394), ("gb200x4", 743, 751)],
)
def test_published_off_diagonal_bandwidth(name: str, low: float, high: float) -> None:
    (path,) = [p for p in CORPUS_P2P if name in p.name]
    cells = matrices(collect(path.read_bytes()))["bandwidth_uni_p2p_on"]
    off = [v for (s, d), v in cells.items() if s != d]
    assert low <= min(off) and max(off) <= high


# The latency half of a 4-GPU run as an editor shows it, its line numbers pasted along (`:set number`; the
# layout of a published cuda-samples issue, #230; invented figures).
LATENCY_4 = """P2P=Disabled Latency Matrix (us)
   GPU     0      1      2      3
     0   2.55  14.90  19.40  14.50
     1  11.10   2.12  19.20  18.70
     2  13.30  16.40   2.08  16.80
     3  11.90  16.60  16.70   2.11

   CPU     0      1      2      3
     0   2.66   6.70   6.20   6.10
     1   6.70   2.60   6.30   6.30
     2   6.40   6.30   2.50   5.80
     3   6.20   6.20   5.80   2.50
P2P=Enabled Latency (P2P Writes) Matrix (us)
   GPU     0      1      2      3
     0   2.57   2.30   1.86   1.85
     1   2.25   2.11   1.87   1.84
     2   1.82   1.83   2.06   2.30
     3   1.85   1.80   2.22   2.10

   CPU     0      1      2      3
     0   2.70   1.90   1.98   1.92
     1   2.10   2.76   2.15   2.01
     2   1.93   1.77   2.57   1.95
     3   1.85   1.90   1.89   2.54
"""


def numbered(text: str, first: int = 1, gutter: str = "{n:3d} ") -> str:
    """`text` with an editor's line numbers in front of every line (an empty line gets the number alone)."""
    lines = text.splitlines()
    return "\n".join((gutter.format(n=first + k) + line).rstrip() for k, line in enumerate(lines)) + "\n"


@pytest.mark.parametrize(
    "gutter, first",
    [("{n:3d} ", 1), ("{n:6d}\t", 1), ("{n:3d} ", 118)],
    ids=["vim", "cat -n", "vim from line 118"],
)
def test_a_paste_with_line_numbers_is_read_through_them(gutter: str, first: int) -> None:
    plain = matrices(collect(LATENCY_4))
    out = collect(numbered(LATENCY_4, first, gutter))
    assert "unparsed" not in out
    found = matrices(out)
    assert found == plain and sum(len(cells) for cells in found.values()) == 64
    assert found["latency_gpu_p2p_off"][(0, 2)] == 19.40
    assert found["latency_cpu_p2p_on"][(3, 3)] == 2.54
    assert out["benches"][0]["ranks"] == 4


def test_matrix_rows_numbered_from_0_are_no_gutter() -> None:
    """A tail that starts inside a matrix: its rows are numbered 0, 1, 2, ... one per line too, and stay."""
    tail = LATENCY_4.split("P2P=Enabled")[1].split("\n", 2)[2]  # the GPU rows of the second matrix on
    out = collect("P2P=Enabled Latency (P2P Writes) Matrix (us)\n   GPU     0      1      2      3\n" + tail)
    assert matrices(out)["latency_gpu_p2p_on"][(1, 0)] == 2.25
    out = collect(tail)  # without its title: nothing to read, nothing taken off
    assert [u["text"] for u in out["unparsed"]][0] == "     0   2.57   2.30   1.86   1.85"


def test_numbers_that_stop_end_the_gutter() -> None:
    """Numbered lines followed by lines without: the numbers are taken off only where they run on."""
    text = numbered(LATENCY_4.split("\n\n")[0]) + LATENCY_4.split("\n\n", 1)[1]
    found = matrices(collect(text))
    assert found["latency_gpu_p2p_off"][(3, 3)] == 2.11 and found["latency_cpu_p2p_off"][(0, 1)] == 6.70


# Verbatim, NVIDIA/nccl issue 1264 (8 x H100 SXM), the unidirectional P2P=Disabled matrix with its trailing spaces and
# the first row of the next matrix as the excerpt stops, inside its last figure (`375.6` of a `%6.02f` figure).
CUT_IN_A_FIGURE = (  # its lines keep the trailing space the sample prints after every figure
    "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)\n"
    "   D\\D     0      1      2      3      4      5      6      7 \n"
    "     0 2474.76  37.19  37.20  36.91  37.06  37.16  37.28  37.24 \n"
    "     1  36.36 2512.44  37.35  36.32  36.95  37.12  36.74  36.30 \n"
    "     2  36.34  36.27 2498.88  36.46  37.51  37.54  36.37  37.23 \n"
    "     3  36.74  37.12  37.23 2499.38  37.00  37.86  36.69  37.02 \n"
    "     4  36.87  37.10  37.36  37.14 2499.63  37.26  37.25  37.47 \n"
    "     5  37.45  37.52  37.02  37.56  37.07 2514.71  38.05  37.26 \n"
    "     6  36.79  36.40  37.49  37.41  37.31  37.10 2504.76  37.38 \n"
    "     7  37.02  37.38  37.24  37.09  37.92  37.46  37.38 2503.38 \n"
    "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)\n"
    "   D\\D     0      1      2      3      4      5      6      7 \n"
    "     0 2494.76 371.02 376.65 376.60 376.82 375.59 375.94 375.6\n"
)


def test_a_row_cut_inside_its_last_figure_keeps_the_figures_before_it() -> None:
    out = collect(CUT_IN_A_FIGURE)
    found = matrices(out)
    assert len(found["bandwidth_uni_p2p_off"]) == 64 and found["bandwidth_uni_p2p_off"][(1, 1)] == 2512.44
    assert found["bandwidth_uni_p2p_on"] == {
        (0, 0): 2494.76, (0, 1): 371.02, (0, 2): 376.65, (0, 3): 376.6, (0, 4): 376.82, (0, 5): 375.59, (0, 6): 375.94
    }  # fmt: skip
    assert [u["line_no"] for u in out["unparsed"]] == [13]
    kinds = [(e["kind"], e["line_no"]) for e in out["events"]]
    assert ("unread_figures", 13) in kinds and ("incomplete", 13) in kinds


def test_a_cut_figure_that_reads_as_a_slow_pair_is_not_kept() -> None:
    # invented: the same row cut after the first digit of its last figure leaves `3`, which would read as a 3 GB/s pair
    text = CUT_IN_A_FIGURE.replace("375.94 375.6", "375.94 3")
    found = matrices(collect(text))
    assert min(found["bandwidth_uni_p2p_on"].values()) == 371.02
    assert (0, 7) not in found["bandwidth_uni_p2p_on"]
