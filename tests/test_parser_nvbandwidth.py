"""The nvbandwidth parser: every matrix cell under a name the bandwidth rules read right, the header facts
and statistics as bench params, devices and multinode processes, waived, cut and failed runs, the old
layout, ugly input, detection, and the invented sample through the library.

Every output below is invented (its figures are not measurements), written line by line in the layout
nvbandwidth prints at the version named: `output.cpp` and `inline_common.h` (`operator<<` of
`PeerValueMatrix`: a two-space corner, columns `setw(10)`, rows `setw(2)`, two decimals, `N/A`), and the
`testcases_*.cpp` titles of github.com/NVIDIA/nvbandwidth at tag v0.8; v0.10's header and
`COEFFICIENT_OF_VARIATION` lines as a v0.10.0 run prints them; v0.4's `common.h` layout (a one-space
corner, unpadded row labels, `Waiving <test>.`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

import tracelog.api as api
from tests.conftest import SAMPLES, rows_by_table
from tracelog import parsers
from tracelog.parsers import nccl_tests, nvbandwidth, p2p
from tracelog.parsers.base import head_text
from tracelog.store import Store

SAMPLE = SAMPLES / "nvbandwidth_8xh100.txt"

# v0.8 on 4x A100 (invented): the host name alone before the device list, a host copy (one CPU row), a
# unidirectional GPU copy and a bidirectional one (Read1, Read2, Total), a latency test in ns, the closing
# note.
V08 = """\
nvbandwidth Version: v0.8
Built from Git version: v0.8

CUDA Runtime Version: 12040
CUDA Driver Version: 12040
Driver Version: 550.127.08

dgx-a100-03
Device 0: NVIDIA A100-SXM4-80GB (00000000:07:00)
Device 1: NVIDIA A100-SXM4-80GB (00000000:0f:00)
Device 2: NVIDIA A100-SXM4-80GB (00000000:47:00)
Device 3: NVIDIA A100-SXM4-80GB (00000000:4e:00)

Running host_to_device_memcpy_ce.
memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)
           0         1         2         3
 0     24.61     24.58     24.66     24.60

SUM host_to_device_memcpy_ce 98.45

Running device_to_device_memcpy_read_ce.
memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)
           0         1         2         3
 0       N/A    264.37    265.02    263.88
 1    264.91       N/A    264.12    265.40
 2    263.75    264.66       N/A    264.08
 3    265.13    263.92    264.55       N/A

SUM device_to_device_memcpy_read_ce 3173.79

Running device_to_device_bidirectional_memcpy_read_ce.
memcpy CE GPU(row) <-> GPU(column) Read1 bandwidth (GB/s)
           0         1         2         3
 0       N/A    251.30    250.84    251.02
 1    251.30       N/A    250.77    251.18
 2    250.84    250.77       N/A    250.96
 3    251.02    251.18    250.96       N/A

SUM device_to_device_bidirectional_memcpy_read_ce_read1 3012.14

memcpy CE GPU(row) <-> GPU(column) Read2 bandwidth (GB/s)
           0         1         2         3
 0       N/A    250.12    250.61    250.47
 1    250.12       N/A    250.93    250.38
 2    250.61    250.93       N/A    250.70
 3    250.47    250.38    250.70       N/A

SUM device_to_device_bidirectional_memcpy_read_ce_read2 3006.42

memcpy CE GPU(row) <-> GPU(column) Total bandwidth (GB/s)
           0         1         2         3
 0       N/A    501.42    501.45    501.49
 1    501.42       N/A    501.70    501.56
 2    501.45    501.70       N/A    501.66
 3    501.49    501.56    501.66       N/A

SUM device_to_device_bidirectional_memcpy_read_ce_total 6018.56

Running device_to_device_latency_sm.
Device to Device Latency SM GPU(row) <-> GPU(column) (ns)
           0         1         2
 0       N/A   1183.50   1190.25
 1   1185.75       N/A   1179.00
 2   1188.00   1181.25       N/A

SUM device_to_device_latency_sm 7107.75

NOTE: The reported results may not reflect the full capabilities of the platform.
Performance can vary with software drivers, hardware clocks, and system topology.

"""

READ = "bandwidth_uni_p2p_on_device_to_device_memcpy_read_ce"
READ1 = "bandwidth_uni_p2p_on_device_to_device_duplex_memcpy_read_ce_read1"
READ2 = "bandwidth_uni_p2p_on_device_to_device_duplex_memcpy_read_ce_read2"
TOTAL = "bandwidth_bi_p2p_on_device_to_device_duplex_memcpy_read_ce_total"
LATENCY = "latency_device_to_device_latency_sm"


def collect(text: str | bytes) -> dict[str, list[dict]]:
    return rows_by_table(nvbandwidth.parse, text)


def matrices(out: dict[str, list[dict]]) -> dict[str, dict[tuple[int, int], float]]:
    found: dict[str, dict[tuple[int, int], float]] = defaultdict(dict)
    for row in out.get("p2p", []):
        cells = found[row["matrix"]]
        assert (row["src"], row["dst"]) not in cells, f"duplicate cell in {row['matrix']}"
        cells[(row["src"], row["dst"])] = row["value"]
    return found


def params(out: dict[str, list[dict]]) -> dict[str, str]:
    return {p["name"]: p["value"] for p in out.get("bench_params", [])}


OFF_DIAGONAL = {(s, d) for s in range(4) for d in range(4) if s != d}


def test_every_matrix_of_a_run_under_its_name() -> None:
    found = matrices(collect(V08))
    assert list(found) == ["host_to_device_memcpy_ce", READ, READ1, READ2, TOTAL, LATENCY]
    for name in (READ, READ1, READ2, TOTAL):
        assert set(found[name]) == OFF_DIAGONAL, name  # the N/A diagonal is skipped
    assert found[READ][(1, 3)] == 265.40 and found[READ][(3, 0)] == 265.13
    assert found[READ1][(0, 1)] + found[READ2][(0, 1)] == pytest.approx(found[TOTAL][(0, 1)])


def test_the_cpu_row_is_numbered_after_the_gpus() -> None:
    """p2p.src takes no negative index, so the CPU of a host copy is GPU count n (here 4)."""
    cells = matrices(collect(V08))["host_to_device_memcpy_ce"]
    assert cells == {(4, 0): 24.61, (4, 1): 24.58, (4, 2): 24.66, (4, 3): 24.60}


def test_units_and_latency_in_microseconds() -> None:
    out = collect(V08)
    units = {(r["matrix"], r["unit"]) for r in out["p2p"]}
    assert units == {(m, "GB/s") for m in ("host_to_device_memcpy_ce", READ, READ1, READ2, TOTAL)} | {
        (LATENCY, "us")
    }
    latency = matrices(out)[LATENCY]
    assert latency[(0, 2)] == pytest.approx(1.19025)  # printed 1190.25 ns
    assert len(latency) == 6


def test_cells_carry_their_printed_line() -> None:
    out = collect(V08)
    lines = V08.splitlines()
    for row in out["p2p"]:
        printed = lines[row["line_no"] - 1].split()
        assert printed[0] == str(row["src"]) or row["matrix"] == "host_to_device_memcpy_ce"
        printed_value = float(printed[1 + row["dst"]])
        scale = 1e-3 if row["unit"] == "us" else 1.0
        assert row["value"] == pytest.approx(printed_value * scale)


def test_the_bench_devices_and_host() -> None:
    out = collect(V08)
    (bench,) = out["benches"]
    assert (bench["tool"], bench["status"], bench["ranks"], bench["nodes"], bench["gpus_per_node"]) == (
        "nvbandwidth",
        "complete",
        4,
        1,
        4,
    )
    assert (bench["gpu_name"], bench["hosts"], bench["line_start"]) == (
        "NVIDIA A100-SXM4-80GB",
        ["dgx-a100-03"],
        1,
    )
    assert [(d["device"], d["bus_id"]) for d in out["bench_devices"]] == [
        (0, "0000:07:00"),
        (1, "0000:0f:00"),
        (2, "0000:47:00"),
        (3, "0000:4e:00"),
    ]
    assert "unparsed" not in out and "events" not in out


def test_header_and_statistics_are_params() -> None:
    assert params(collect(V08)) == {
        "nvbandwidth Version": "v0.8",
        "Built from Git version": "v0.8",
        "CUDA Runtime Version": "12040",
        "CUDA Driver Version": "12040",
        "Driver Version": "550.127.08",
        "SUM host_to_device_memcpy_ce": "98.45",
        "SUM device_to_device_memcpy_read_ce": "3173.79",
        "SUM device_to_device_bidirectional_memcpy_read_ce_read1": "3012.14",
        "SUM device_to_device_bidirectional_memcpy_read_ce_read2": "3006.42",
        "SUM device_to_device_bidirectional_memcpy_read_ce_total": "6018.56",
        "SUM device_to_device_latency_sm": "7107.75",
    }


# v0.10 (invented): versions as `13.0 (13000)`, `CUDA Driver Version (API)`, no device list, the
# coefficient of variation after each SUM, a shell prompt with the command.
V010 = """\
user@gb-box:~/nvbandwidth/build$ ./nvbandwidth -t device_to_host_memcpy_ce
nvbandwidth Version: v0.10.0
Built from Git version: v0.10

CUDA Runtime Version: 13.0 (13000)
CUDA Driver Version (API): 13.0 (13000)
Driver Version: 580.82.07

Running device_to_host_memcpy_ce.
memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)
           0         1
 0     53.02     53.10

SUM device_to_host_memcpy_ce 106.12
COEFFICIENT_OF_VARIATION device_to_host_memcpy_ce 0.01

"""


def test_v010_header_coefficient_of_variation_and_command() -> None:
    out = collect(V010)
    assert params(out) == {
        "command": "./nvbandwidth -t device_to_host_memcpy_ce",
        "nvbandwidth Version": "v0.10.0",
        "Built from Git version": "v0.10",
        "CUDA Runtime Version": "13.0 (13000)",
        "CUDA Driver Version (API)": "13.0 (13000)",
        "Driver Version": "580.82.07",
        "SUM device_to_host_memcpy_ce": "106.12",
        "COEFFICIENT_OF_VARIATION device_to_host_memcpy_ce": "0.01",
    }
    (bench,) = out["benches"]
    # no device line: the GPUs are counted from the matrix's columns
    assert (bench["ranks"], bench["gpu_name"], bench["hosts"], bench["status"]) == (
        2,
        None,
        ["gb-box"],
        "complete",
    )
    assert matrices(out)["device_to_host_memcpy_ce"] == {(2, 0): 53.02, (2, 1): 53.10}


@pytest.mark.parametrize(
    ("testcase", "variant", "latency", "pairwise", "name"),
    [
        (
            "device_to_device_memcpy_write_ce",
            None,
            False,
            True,
            "bandwidth_uni_p2p_on_device_to_device_memcpy_write_ce",
        ),
        (
            "device_to_device_bidirectional_memcpy_write_sm",
            "Write2",
            False,
            True,
            "bandwidth_uni_p2p_on_device_to_device_duplex_memcpy_write_sm_write2",
        ),
        (
            "device_to_device_bidirectional_memcpy_write_sm",
            "Total",
            False,
            True,
            "bandwidth_bi_p2p_on_device_to_device_duplex_memcpy_write_sm_total",
        ),
        (
            "host_to_device_bidirectional_memcpy_ce",
            None,
            False,
            False,
            "host_to_device_bidirectional_memcpy_ce",
        ),
        ("all_to_one_read_ce", None, False, False, "all_to_one_read_ce"),
        ("host_device_latency_sm", None, True, False, "latency_host_device_latency_sm"),
        ("multinode_bisect_write_ce", None, False, True, "multinode_bisect_write_ce"),
    ],
)
def test_matrix_names(testcase: str, variant: str | None, latency: bool, pairwise: bool, name: str) -> None:
    assert nvbandwidth.matrix_name(testcase, variant, latency, pairwise) == name


def test_one_direction_never_reads_as_bidirectional() -> None:
    """The rules hold a name containing `_bi` against the bidirectional spec: a one-direction matrix of a
    bidirectional test must not contain it."""
    names = {r["matrix"] for r in collect(V08)["p2p"]}
    assert {n for n in names if "_bi" in n} == {TOTAL}
    assert all(n.startswith("bandwidth_uni_p2p_on_") for n in (READ, READ1, READ2))


def test_a_cut_matrix_makes_the_bench_partial() -> None:
    lines = V08.splitlines()
    cut = lines.index(" 1    264.91       N/A    264.12    265.40") + 1
    out = collect("\n".join(lines[:cut]) + "\n")
    (bench,) = out["benches"]
    assert bench["status"] == "partial"
    found = matrices(out)
    assert set(found[READ]) == {(0, 1), (0, 2), (0, 3), (1, 0), (1, 2), (1, 3)}
    assert len(found["host_to_device_memcpy_ce"]) == 4
    (event,) = out["events"]
    assert event["kind"] == "incomplete"
    assert f"{READ} (2 of 4 rows)" in event["text"]


def test_a_test_without_result_makes_the_bench_partial() -> None:
    lines = V08.splitlines()
    cut = lines.index("Running device_to_device_memcpy_read_ce.") + 1
    out = collect("\n".join(lines[:cut]) + "\n")
    (bench,) = out["benches"]
    assert bench["status"] == "partial"
    assert "tests without a result: device_to_device_memcpy_read_ce" in out["events"][0]["text"]


# v0.7 (invented): a host copy, then a data-verification failure and the ASSERT that ends the process.
ASSERT_FAILURE = """\
nvbandwidth Version: v0.7
Built from Git version: v0.7

CUDA Runtime Version: 12040
CUDA Driver Version: 12040
Driver Version: 550.127.08

Device 0: NVIDIA A100-SXM4-80GB (00000000:07:00)
Device 1: NVIDIA A100-SXM4-80GB (00000000:0f:00)

Running host_to_device_memcpy_ce.
memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)
           0         1
 0     24.61     24.58

SUM host_to_device_memcpy_ce 49.19

Running device_to_device_memcpy_write_ce.
 Invalid value when checking the pattern at 0x7f3a20000000
 Current offset : 4096
ASSERT in expression h_errorFlag == 0 in void memcmpPatternHelper(...)() : /src/nvbandwidth/memcpy.cpp:165
""".replace("4096\n", "4096 \n")  # the kernel's printf ends that line with a space


def test_a_failed_data_check_is_a_data_error_and_keeps_what_was_printed() -> None:
    out = collect(ASSERT_FAILURE)
    (bench,) = out["benches"]
    assert (bench["status"], bench["ranks"], bench["line_end"]) == ("data_error", 2, 21)
    assert matrices(out)["host_to_device_memcpy_ce"] == {(2, 0): 24.61, (2, 1): 24.58}
    kinds = [(e["kind"], e["line_no"]) for e in out["events"]]
    assert kinds == [("data_error", 19), ("data_error", 20), ("data_error", 21), ("incomplete", 21)]
    assert out["events"][2]["text"].startswith("ASSERT in expression h_errorFlag == 0")
    assert "device_to_device_memcpy_write_ce" in out["events"][3]["text"]
    params = {p["name"]: (p["value"], p["line_no"]) for p in out["bench_params"]}
    assert params["verification failed"] == ("device_to_device_memcpy_write_ce", 19)
    assert "unparsed" not in out


def test_a_failed_data_check_of_v04_is_a_data_error() -> None:
    """v0.4 to v0.6 compared on the host, printed the byte offset and aborted (memcpy.cpp of v0.4)."""
    text = ASSERT_FAILURE.replace("v0.7", "v0.5").split(" Invalid value")[0] + (
        " Invalid value when checking the pattern at <0x7f3a20001000>\n"
        " Current offset [ 4096/536870912]\n"
        "Aborted (core dumped)\n"
    )
    out = collect(text)
    assert out["benches"][0]["status"] == "data_error"
    kinds = [e["kind"] for e in out["events"]]
    assert kinds == ["data_error", "data_error", "error", "incomplete"]


def test_a_failed_data_check_is_a_critical_data_error_flag(tmp_path: Path) -> None:
    """Not `bench_incomplete`'s "its output stops early": the copy was checked and found corrupted."""
    log = tmp_path / "nvbandwidth.txt"
    log.write_text(ASSERT_FAILURE, encoding="utf-8")
    db = tmp_path / "n.duckdb"
    api.ingest(db, [str(log)])
    (flag,) = api.flags(db).to_dict("records")
    assert (flag["rule"], flag["severity"], flag["row_ref"]) == (
        "nvbandwidth_data_error",
        "critical",
        "line 19",
    )
    assert flag["message"] == (
        "nvbandwidth's check of the data copied by device_to_device_memcpy_write_ce failed (Invalid value when "
        "checking the pattern at 0x7f3a20000000; Current offset : 4096): the copy returned corrupted data. The "
        "tool stops at a failed check, so the tests after it did not run."
    )


def test_a_cuda_error_fails_the_bench() -> None:
    text = V010.replace(
        " 0     53.02     53.10\n",
        "[CUDA_ERROR_OUT_OF_MEMORY] out of memory in expression cuMemAlloc(&buffer, size) in "
        "DeviceBuffer::DeviceBuffer() : /src/memcpy.cpp:108\n",
    )
    out = collect(text)
    assert out["benches"][0]["status"] == "failed"
    assert "p2p" not in out


def ugly(text: str) -> bytes:
    """`text` through pdsh (`host: ` on every line), with colour codes around each title and CRLF ends."""
    lines = []
    for line in text.splitlines():
        if line.startswith(("memcpy", "Device to Device")):
            line = f"\x1b[1;32m{line}\x1b[0m"
        lines.append(f"dgx-a100-03: {line}")
    return ("\r\n".join(lines) + "\r\n").encode()


def test_crlf_colour_codes_and_host_prefixes_change_nothing() -> None:
    plain, messy = collect(V08), collect(ugly(V08))
    assert matrices(messy) == matrices(plain)
    assert params(messy) == params(plain)
    assert messy["benches"] == plain["benches"]
    assert "unparsed" not in messy


def test_a_warning_between_rows_is_kept_and_the_matrix_goes_on() -> None:
    lines = V08.splitlines()
    at = lines.index(" 2    263.75    264.66       N/A    264.08")
    lines.insert(at, "WARNING: infoROM is corrupted at gpu 0000:47:00.0")
    out = collect("\n".join(lines) + "\n")
    assert out["unparsed"] == [
        {"line_no": at + 1, "text": "WARNING: infoROM is corrupted at gpu 0000:47:00.0"}
    ]
    assert set(matrices(out)[READ]) == OFF_DIAGONAL
    assert out["benches"][0]["status"] == "complete"


def test_rows_of_the_wrong_width_are_unparsed() -> None:
    text = V08.replace(" 1    264.91       N/A    264.12    265.40", " 1    264.91       N/A    264.12")
    out = collect(text)
    assert [u["text"] for u in out["unparsed"]] == [" 1    264.91       N/A    264.12"]
    assert out["benches"][0]["status"] == "partial"


# v0.8 with `-v --perfFormatter` (invented): each sample's figure, `&&&& PERF` instead of `SUM`, and the
# verbose minimum, maximum and mean of the matrix.
VERBOSE_PERF = """\
nvbandwidth Version: v0.8
Built from Git version: v0.8

Running host_to_device_memcpy_ce.
\tSample 0: Host -> Device 0: 24.63 GB/s
\tSample 1: Host -> Device 0: 24.61 GB/s
\tSample 0: Host -> Device 1: 24.58 GB/s
\tSample 1: Host -> Device 1: 24.57 GB/s
memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)
           0         1
 0     24.61     24.58

&&&& PERF host_to_device_memcpy_ce 49.19 +GB/s
MIN host_to_device_memcpy_ce 24.58
MAX host_to_device_memcpy_ce 24.61
AVG host_to_device_memcpy_ce 24.59

"""


def test_verbose_samples_and_the_perf_formatter() -> None:
    out = collect(VERBOSE_PERF)
    assert matrices(out) == {"host_to_device_memcpy_ce": {(2, 0): 24.61, (2, 1): 24.58}}
    assert {k: v for k, v in params(out).items() if k.endswith("_ce")} == {
        "PERF host_to_device_memcpy_ce": "49.19",
        "MIN host_to_device_memcpy_ce": "24.58",
        "MAX host_to_device_memcpy_ce": "24.61",
        "AVG host_to_device_memcpy_ce": "24.59",
    }
    assert out["benches"][0]["status"] == "complete"
    assert "unparsed" not in out


# v0.4 (invented): the old corner and row labels, device lines without bus id, a `0.00` diagonal, the
# note after the versions, a bidirectional test's single matrix, and a waived test named.
V04 = """\
nvbandwidth Version: v0.4
Built from Git version: v0.4

NOTE: This tool reports current measured bandwidth on your system.
Additional system-specific tuning may be required to achieve maximal peak bandwidth.

CUDA Runtime Version: 12020
CUDA Driver Version: 12020
Driver Version: 535.104.05

Device 0: NVIDIA A100-SXM4-40GB
Device 1: NVIDIA A100-SXM4-40GB

Running device_to_device_bidirectional_memcpy_read_ce.
memcpy CE GPU(row) <-> GPU(column) bandwidth (GB/s)
          0         1
0      0.00    263.10
1    262.85      0.00

SUM device_to_device_bidirectional_memcpy_read_ce 525.95

Waiving device_to_device_memcpy_write_ce.

"""


def test_old_layout_and_a_named_waived_test() -> None:
    out = collect(V04)
    found = matrices(out)
    # to v0.5 a CE bidirectional test printed one direction under duplex load: unidirectional; the
    # diagonal's 0.00 is a pair not measured, as later versions' N/A
    name = "bandwidth_uni_p2p_on_device_to_device_duplex_memcpy_read_ce"
    assert found == {name: {(0, 1): 263.10, (1, 0): 262.85}}
    assert params(out)["waived"] == "device_to_device_memcpy_write_ce"
    (bench,) = out["benches"]
    assert (bench["status"], bench["gpu_name"], bench["ranks"]) == ("complete", "NVIDIA A100-SXM4-40GB", 2)
    assert {d["bus_id"] for d in out["bench_devices"]} == {None}
    assert "unparsed" not in out


def test_a_waived_test_without_its_name() -> None:
    """From v0.5 a waived test prints `Waived: ` and no name; a run whose every test was waived ended
    normally: complete, with nothing measured."""
    text = V010.split("Running")[0] + "Waived: \n"
    out = collect(text)
    assert params(out)["waived"] == "?"
    assert out["benches"][0]["status"] == "complete"
    assert "p2p" not in out


# v0.7 multinode (invented): MPI's version, one process per GPU over two hosts, a bidirectional test whose
# titles say CPU(row) although its rows are GPUs, and the bisection with its `a->b` row labels.
MULTINODE = """\
nvbandwidth Version: v0.7
Built from Git version: v0.7

MPI version: Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022
CUDA Runtime Version: 12080
CUDA Driver Version: 12080
Driver Version: 570.124.06

Process 0 (tray-0): device 0: HGX GB200 (00000008:01:00)
Process 1 (tray-0): device 1: HGX GB200 (00000009:01:00)
Process 2 (tray-1): device 0: HGX GB200 (00000008:01:00)
Process 3 (tray-1): device 1: HGX GB200 (00000009:01:00)

Running multinode_device_to_device_bidirectional_memcpy_read_ce.
memcpy CE CPU(row) <-> GPU(column) Read1 bandwidth (GB/s)
           0         1         2         3
 0       N/A    798.02    797.73    797.95
 1    798.10       N/A    797.88    798.02
 2    797.95    797.65       N/A    797.80
 3    798.10    797.73    798.02       N/A

SUM multinode_device_to_device_bidirectional_memcpy_read_ce_read1 9574.95

Running multinode_bisect_write_ce.
Bisect benchmarking, simultaneous write CE BW
             0
0->2    797.11
1->3    796.85
2->0    797.40
3->1    796.98

SUM multinode_bisect_write_ce 3188.34

"""


def test_multinode_processes_hosts_and_labelled_rows() -> None:
    out = collect(MULTINODE)
    (bench,) = out["benches"]
    assert (bench["ranks"], bench["nodes"], bench["gpus_per_node"], bench["hosts"]) == (
        4,
        2,
        2,
        ["tray-0", "tray-1"],
    )
    assert bench["gpu_name"] == "HGX GB200"
    assert [(d["rank"], d["host"], d["device"], d["bus_id"]) for d in out["bench_devices"]][1:3] == [
        (1, "tray-0", 1, "0009:01:00"),
        (2, "tray-1", 0, "0008:01:00"),
    ]
    found = matrices(out)
    pairs = found["bandwidth_uni_p2p_on_multinode_device_to_device_duplex_memcpy_read_ce_read1"]
    assert set(pairs) == OFF_DIAGONAL and pairs[(2, 1)] == 797.65
    assert found["multinode_bisect_write_ce"] == {
        (0, 2): 797.11,
        (1, 3): 796.85,
        (2, 0): 797.40,
        (3, 1): 796.98,
    }
    assert params(out)["MPI version"].startswith("Open MPI v4.1.4")
    assert bench["status"] == "complete"


def test_an_excerpt_without_running_is_named_by_its_sum() -> None:
    start = V08.index("memcpy CE GPU(row) -> GPU(column)")
    out = collect(V08[start : V08.index("Running device_to_device_bidirectional")])
    assert list(matrices(out)) == [READ]
    assert out["benches"][0]["status"] == "complete"


# Invented, in the shape of NVIDIA/nvbandwidth#24's paste: each `Running` line under a markdown quote, no
# version line, the column header's leading blanks lost.
QUOTED = """> Running host_to_device_memcpy_sm.
memcpy SM CPU(row) -> GPU(column) bandwidth (GB/s)
0         1         2         3
0     35.11     35.20     35.27     35.05

> Running device_to_host_memcpy_sm.
memcpy SM CPU(row) <- GPU(column) bandwidth (GB/s)
0         1         2         3
0     52.70     52.74     52.77     52.71
"""


def test_an_excerpt_whose_running_lines_are_quoted_names_its_matrices_after_them() -> None:
    assert nvbandwidth.detect(head_text(QUOTED.encode())) == 55
    out = collect(QUOTED)
    found = matrices(out)
    assert list(found) == ["host_to_device_memcpy_sm", "device_to_host_memcpy_sm"]
    assert found["host_to_device_memcpy_sm"][(4, 2)] == 35.27  # the CPU row numbered after the 4 GPUs
    assert found["device_to_host_memcpy_sm"][(4, 3)] == 52.71
    assert "unparsed" not in out


def test_two_runs_in_one_file() -> None:
    out = collect(V08 + V010)
    assert [(b["bench_key"], b["ranks"], b["status"]) for b in out["benches"]] == [
        (0, 4, "complete"),
        (1, 2, "complete"),
    ]
    assert {r["bench_key"] for r in out["p2p"] if r["matrix"] == "device_to_host_memcpy_ce"} == {1}
    command = next(p for p in out["bench_params"] if p["name"] == "command")
    assert command["bench_key"] == 1


@pytest.mark.parametrize(
    ("head", "score"),
    [
        (V08, 60),
        (V08[V08.index("Running") :], 55),
        (ugly(V08[V08.index("Running") :]).decode(), 55),
        ("Running host_to_device_memcpy_ce.\nsome other line\n", 0),
        ("memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)\n", 0),
    ],
    ids=["header", "excerpt", "pdsh excerpt", "running alone", "title alone"],
)
def test_detection(head: str, score: int) -> None:
    assert nvbandwidth.detect(head_text(head.encode())) == score


@pytest.mark.parametrize(
    "path",
    sorted([*SAMPLES.glob("p2p_*.txt"), *SAMPLES.glob("nccl_*.txt"), *SAMPLES.glob("topo_*.txt")]),
    ids=lambda p: p.name,
)
def test_other_bench_outputs_are_not_claimed(path: Path) -> None:
    head = head_text(path.read_bytes()[: parsers.HEAD_BYTES])
    assert nvbandwidth.detect(head) == 0
    assert parsers.detect(head, str(path)) in (p2p, nccl_tests) or path.name.startswith("topo_")


def test_the_sample_is_detected_and_parses_whole() -> None:
    data = SAMPLE.read_bytes()
    assert parsers.detect(head_text(data[: parsers.HEAD_BYTES]), str(SAMPLE)) is nvbandwidth
    out = collect(data)
    (unparsed,) = out["unparsed"]
    assert unparsed["text"].startswith("WARNING: infoROM is corrupted")
    printed = [
        n for n, line in enumerate(data.decode().splitlines(), 1) if re.match(r"^ ?\d\s+(?:N/A|\d)", line)
    ]
    assert sorted({r["line_no"] for r in out["p2p"]}) == printed


def test_ingest_through_the_library(db_path: Path) -> None:
    (result,) = api.ingest(str(db_path), [str(SAMPLE)])
    assert not isinstance(result, api.IngestFailure), result
    with Store(db_path) as store:
        con = store.con
        assert con.execute("SELECT format, lines_unparsed FROM sources").fetchall() == [("nvbandwidth", 1)]
        bench = con.execute(
            "SELECT tool, ranks, nodes, gpus_per_node, gpu_name, hosts, status FROM benches"
        ).fetchall()
        assert bench == [("nvbandwidth", 8, 1, 8, "NVIDIA H100 80GB HBM3", ["h100-node-07"], "complete")]
        counts = dict(con.execute("SELECT matrix, count(*) FROM p2p GROUP BY matrix").fetchall())
        assert counts == {
            "host_to_device_memcpy_ce": 8,
            "device_to_host_memcpy_ce": 8,
            READ: 56,
            "bandwidth_uni_p2p_on_device_to_device_memcpy_write_ce": 56,
            "bandwidth_uni_p2p_on_device_to_device_duplex_memcpy_read_ce_read1": 56,
            "bandwidth_uni_p2p_on_device_to_device_duplex_memcpy_read_ce_read2": 56,
            "bandwidth_bi_p2p_on_device_to_device_duplex_memcpy_read_ce_total": 56,
            LATENCY: 56,
        }
        # the d2d matrices against the H100's NVLink 4: one direction against its 450 GB/s, the duplex
        # total against 900; none low, the one-direction ones noted as healthy against the right figure
        flags = con.execute(
            "SELECT rule, severity, expected, round(ratio, 2), message FROM flags ORDER BY flag_id"
        ).fetchall()
        assert {(rule, severity, expected) for rule, severity, expected, _, _ in flags} == {
            ("duplex_confusion", "info", 450.0)
        }
        assert sorted(message.split(":")[0] for *_, message in flags) == sorted(
            [
                READ,
                "bandwidth_uni_p2p_on_device_to_device_memcpy_write_ce",
                "bandwidth_uni_p2p_on_device_to_device_duplex_memcpy_read_ce_read1",
                "bandwidth_uni_p2p_on_device_to_device_duplex_memcpy_read_ce_read2",
            ]
        )
        assert all(0.8 <= ratio <= 0.9 for _, _, _, ratio, _ in flags)


def test_an_old_sm_bidirectional_matrix_is_both_directions_summed_and_a_bare_prompt_names_the_command() -> (
    None
):
    # Invented, in v0.2's layout (`testcases_sm.cpp`: one matrix per test, the SM bidirectional copy timed as
    # size/(time on stream1) + size/(time on stream2)); the tool run from PATH after a `$` prompt.
    text = (
        "$ nvbandwidth -t device_to_device_bidirectional_memcpy_read_sm\n"
        "nvbandwidth Version: v0.2\n"
        "Running device_to_device_bidirectional_memcpy_read_sm.\n"
        "memcpy SM GPU(row) <-> GPU(column) bandwidth (GB/s)\n"
        "          0         1\n"
        "0       N/A    301.70\n"
        "1    301.81       N/A\n"
        "\n"
        "SUM device_to_device_bidirectional_memcpy_read_sm 603.51\n"
    )
    out = collect(text)
    assert matrices(out) == {
        "bandwidth_bi_p2p_on_device_to_device_duplex_memcpy_read_sm_total": {(0, 1): 301.70, (1, 0): 301.81}
    }
    assert params(out)["command"] == "nvbandwidth -t device_to_device_bidirectional_memcpy_read_sm"
