"""`tracelog benches` and `tracelog show bench:ID` on the sample logs, through click's CliRunner."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import tracelog.api as api
from tests.conftest import SAMPLES
from tracelog.cli import cli

BENCH_SAMPLES = sorted([*SAMPLES.glob("nccl_*.txt"), *SAMPLES.glob("p2p_*.txt"), *SAMPLES.glob("topo_*.txt")])
FAILURES = SAMPLES / "nccl_failures_back_to_back_8xh100.txt"
# A data row of an nccl-tests table: size, count, type, redop, root, then the timings.
NCCL_ROW_RX = re.compile(r"^\s+\d+\s+\d+\s+\w+\s+\w+\s+-?\d+\s+[\d.]+")


@pytest.fixture
def db_path(any_db: Path | str) -> Path | str:
    """Every test here on both backends: the embedded file and a DuckLake store."""
    return any_db


def run(db: Path, *args: str):
    return CliRunner().invoke(cli, ["--db", str(db), *args], catch_exceptions=False)


def ingest(db: Path, *paths: Path) -> None:
    result = run(db, "ingest", *map(str, paths))
    assert result.exit_code == 0, result.output


def sections(markdown: str) -> dict[str, tuple[list[str], list[list[str]]]]:
    """The `### title` tables of `--format markdown` output: header cells and row cells of each."""
    out = {}
    for block in markdown.split("### ")[1:]:
        title, _, body = block.partition("\n")
        lines = [ln for ln in body.splitlines() if ln.startswith("|")]
        cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
        out[title.strip()] = (cells[0], cells[2:])
    return out


def test_benches_lists_op_ranks_and_peak_busbw(db_path: Path) -> None:
    ingest(db_path, *BENCH_SAMPLES)
    result = run(db_path, "benches", "--format", "json")
    assert result.exit_code == 0, result.output
    listed = json.loads(result.output)
    nccl = {
        (Path(b["source"]).name, b["op"]): (
            b["ranks"],
            b["peak_busbw_gbps"],
            b["peak_size_bytes"],
            b["status"],
        )
        for b in listed
        if b["tool"] == "nccl-tests"
    }
    assert nccl == {
        ("nccl_all_reduce_8xa100.txt", "all_reduce"): (8, 238.24, 2147483648, "complete"),
        ("nccl_broadcast_graph_srun_4xl40s.txt", "broadcast"): (4, 22.96, 33554432, "complete"),
        ("nccl_failures_back_to_back_8xh100.txt", "all_reduce"): (8, 488.22, 1073741824, "data_error"),
        ("nccl_failures_back_to_back_8xh100.txt", "reduce_scatter"): (8, 393.24, 67108864, "failed"),
        ("nccl_failures_back_to_back_8xh100.txt", "alltoall"): (8, 327.78, 134217728, "partial"),
        ("nccl_mpi_all_reduce_2x8xh100.txt", "all_reduce"): (16, 371.45, 4294967296, "complete"),
        ("nccl_old_layout_4xv100.txt", "all_reduce"): (4, 129.81, 134217728, "complete"),
        ("nccl_split_per_iter_cputime_2x4xh100.txt", "all_reduce"): (4, 115.66, 268435456, "complete"),
        ("nccl_split_per_iter_cputime_2x4xh100.txt", "all_gather"): (4, 349.58, 536870912, "complete"),
    }
    others = [(b["tool"], b["ranks"], b["peak_busbw_gbps"]) for b in listed if b["tool"] != "nccl-tests"]
    assert others == [
        ("p2pBandwidthLatencyTest", 4, None),
        ("p2pBandwidthLatencyTest", 8, None),
        ("nvidia-smi-topo", 8, None),
        ("nvidia-smi-topo", 4, None),
        ("nvidia-smi-topo", 4, None),
    ]


def test_benches_peak_is_the_largest_busbw_printed(db_path: Path) -> None:
    sample = SAMPLES / "nccl_all_reduce_8xa100.txt"
    ingest(db_path, sample)
    rows = [line.split() for line in sample.read_text().splitlines() if NCCL_ROW_RX.match(line)]
    printed = [float(r[7]) for r in rows] + [float(r[11]) for r in rows]  # out-of-place, in-place busbw
    (bench,) = json.loads(run(db_path, "benches", "--format", "json").output)
    assert bench["peak_busbw_gbps"] == max(printed)


def test_benches_tool_filter(db_path: Path) -> None:
    ingest(db_path, *BENCH_SAMPLES)
    result = run(db_path, "benches", "--tool", "p2pBandwidthLatencyTest", "--format", "csv")
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("bench_id,source,tool,op,ranks")
    assert [line.split(",")[1] for line in lines[1:]] == [
        str(SAMPLES / "p2p_4xa100_pcie_two_sockets.txt"),
        str(SAMPLES / "p2p_8xh100_p2p_read.txt"),
    ]
    none = run(db_path, "benches", "--tool", "no-such-tool")
    assert none.exit_code == 0 and "(no rows)" in none.output


def test_show_nccl_bench_has_every_table_row_in_order(db_path: Path) -> None:
    sample = SAMPLES / "nccl_all_reduce_8xa100.txt"
    ingest(db_path, sample)
    table_lines = [line for line in sample.read_text().splitlines() if NCCL_ROW_RX.match(line)]
    result = run(db_path, "show", "bench:1", "--format", "markdown")
    assert result.exit_code == 0, result.output
    shown = sections(result.output)
    assert list(shown) == [
        "summary",
        "hardware",
        "model",
        "params",
        "devices",
        "collectives",
        "events",
        "flags",
    ]
    # the model beside the measurement: 8 x A100's peak against the ring over NVLink 3 (0.78 x 300 GB/s)
    header, model = shown["model"]
    peak = dict(zip(header, next(r for r in model if r[0] == "peak_busbw_gbps"), strict=True))
    assert float(peak["model"]) == pytest.approx(234.0) and float(peak["measured"]) == pytest.approx(238.24)
    assert "ring over nvlink3" in peak["how"] and '"algorithm": "ring"' in peak["detail"]
    header, rows = shown["collectives"]
    assert len(rows) == 2 * len(table_lines)  # out-of-place and in-place halves of each printed line
    placement, size = header.index("placement"), header.index("size_bytes")
    half = len(table_lines)
    assert {r[placement] for r in rows[:half]} == {"out-of-place"}
    assert {r[placement] for r in rows[half:]} == {"in-place"}
    assert [int(r[size]) for r in rows[:half]] == [int(line.split()[0]) for line in table_lines]
    summary = dict(shown["summary"][1])
    assert (summary["tool"], summary["op"], summary["status"]) == ("nccl-tests", "all_reduce", "complete")
    assert len(shown["devices"][1]) == 8


def test_show_nccl_bench_events_and_flags(db_path: Path) -> None:
    ingest(db_path, FAILURES)
    data_error = sections(run(db_path, "show", "bench:1", "--format", "markdown").output)
    header, flags = data_error["flags"]
    assert flags[0][header.index("rule")] == "nccl_data_error"
    assert flags[0][header.index("severity")] == "critical"
    partial = sections(run(db_path, "show", "bench:3", "--format", "markdown").output)
    header, flags = partial["flags"]
    (incomplete,) = [f for f in flags if f[header.index("rule")] == "bench_incomplete"]
    assert (
        "stopped at 134217728 bytes (8 size(s)), before maxBytes 4294967296"
        in incomplete[header.index("message")]
    )
    events = [row[1] for row in partial["events"][1]]
    assert events == ["xid", "incomplete"]


def test_show_p2p_bench_prints_each_matrix_n_by_n(db_path: Path) -> None:
    sample = SAMPLES / "p2p_8xh100_p2p_read.txt"
    ingest(db_path, sample)
    shown = sections(run(db_path, "show", "bench:1", "--format", "markdown").output)
    matrices = [t for t in shown if t.startswith(("connectivity", "bandwidth_", "latency_"))]
    assert len(matrices) == 12  # the nine of every run and the three --p2p_read adds
    for title in matrices:
        header, rows = shown[title]
        assert header == ["src", *map(str, range(8))], title
        assert [r[0] for r in rows] == list(map(str, range(8))), title
        assert all(cell != "" for r in rows for cell in r), title
    # the values are the ones printed, row by row (src down, dst across)
    lines = sample.read_text().splitlines()
    start = lines.index("Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)") + 2
    printed = [[float(v) for v in line.split()[1:]] for line in lines[start : start + 8]]
    frame = api.show_bench(str(db_path), "bench:1")["bandwidth_uni_p2p_on"]
    assert frame.drop(columns="src").to_numpy().tolist() == printed


def test_show_topo_bench_is_the_printed_matrix(db_path: Path) -> None:
    sample = SAMPLES / "topo_8xh100_nics.txt"
    ingest(db_path, sample)
    shown = sections(run(db_path, "show", "bench:1", "--format", "markdown").output)
    header, rows = shown["links"]
    devices = [*(f"GPU{i}" for i in range(8)), *(f"NIC{i}" for i in range(8))]
    assert header == ["a", *devices]
    printed = [
        line.split()[:17] for line in sample.read_text().splitlines() if re.match(r"(GPU|NIC)\d+\s", line)
    ]
    assert rows == printed
    params = dict((name, value) for name, value, _ in shown["params"][1])
    assert params["GPU4 CPU Affinity"] == "56-111,168-223"


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("bench:99", "no bench with id 99; see `tracelog benches`"),
        ("bench:", "'bench:' is not a bench id; write bench:ID"),
        ("bench:two", "'bench:two' is not a bench id; write bench:ID"),
    ],
)
def test_show_unknown_bench_exits_1(db_path: Path, ref: str, message: str) -> None:
    ingest(db_path, FAILURES)
    result = run(db_path, "show", ref)
    assert result.exit_code == 1
    assert f"Error: {message}" in result.output


def test_a_bare_id_is_still_a_run(db_path: Path) -> None:
    ingest(db_path, FAILURES)  # benches 1-3, no run
    result = run(db_path, "show", "1")
    assert result.exit_code == 1 and "no run matches '1'" in result.output
    assert run(db_path, "show", "BENCH:1").exit_code == 0
