"""The nccl-tests parser on every layout the tool has printed, launcher prefixes, failures, back-to-back
tests, the sample logs and the public outputs in the corpus."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import SAMPLES, corpus_files, source_of
from tracelog import parsers
from tracelog.parsers import nccl_tests, p2p, topo
from tracelog.parsers.base import head_text

# A data line with optional launcher prefix: size, count, then a type name.
DATA_LINE_RX = re.compile(r"^(?:\[\d+,\d+\]<stdout>:|\d+: )?\s*\d+\s+\d+\s+[A-Za-z]\w*\s")


def collect(text: str | bytes) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for batch in nccl_tests.parse(source_of(text)):
        rows = batch.rows.to_dicts() if isinstance(batch.rows, pl.DataFrame) else list(batch.rows)
        out.setdefault(batch.table, []).extend(rows)
    return out


def the_bench(out: dict[str, list[dict]]) -> dict:
    (bench,) = out["benches"]
    return bench


def rows_of(out: dict[str, list[dict]], placement: str) -> list[dict]:
    return [r for r in out["collectives"] if r["placement"] == placement]


def devices(n: int, host: str = "node01", gpu: str = "NVIDIA H100 80GB HBM3", per_host: int = 8) -> list[str]:
    return [
        f"#  Rank {r:2d} Group  0 Pid  {4100 + r // per_host:5d} on {host if per_host >= n else f'{host}-{r // per_host}'}"
        f" device {r % per_host:2d} [0x{16 + r:02x}] {gpu}"
        for r in range(n)
    ]


MODERN_HEADER = [
    "#                                                              out-of-place                       in-place          ",
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
]
NTHREAD = "# nThread 1 nGpus 8 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0"
ROWS_8 = [
    "     1048576        262144     float     sum      -1    31.07   33.75   59.06      0    31.35   33.45   58.54      0",
    "     2097152        524288     float     sum      -1    40.25   52.10   91.18      0    39.65   52.89   92.56      0",
    "     4194304       1048576     float     sum      -1    55.02   76.23  133.40      0    55.92   75.01  131.27      0",
]
FOOTER = ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 94.3351 ", "#"]


def modern(
    rows: list[str] = ROWS_8, n: int = 8, footer: list[str] = FOOTER, first: list[str] | None = None
) -> str:
    head = (
        first if first is not None else ["# nccl-tests version 2.18.3 nccl-headers=22304 nccl-library=22304"]
    )
    return "\n".join(
        [
            *head,
            "# Collective test starting: all_reduce_perf",
            NTHREAD,
            "#",
            "# Using devices",
            *devices(n),
            "#",
        ]
        + MODERN_HEADER
        + rows
        + footer
        + ["# Collective test concluded: all_reduce_perf", "#", ""]
    )


# ---- the busbw definition, on the sample logs -------------------------------------------------------


def test_all_reduce_busbw_is_algbw_times_2_n_minus_1_over_n_row_by_row() -> None:
    out = collect((SAMPLES / "nccl_all_reduce_8xa100.txt").read_bytes())
    bench = the_bench(out)
    assert (bench["collective"], bench["ranks"]) == ("all_reduce", 8)
    factor = 2 * (8 - 1) / 8  # nccl-tests doc/PERFORMANCE.md, all_reduce
    rows = out["collectives"]
    assert len(rows) == 2 * 31
    for row in rows:
        # both figures are printed with two decimals: algbw's rounding is multiplied by the factor
        assert row["busbw_gbps"] == pytest.approx(
            row["algbw_gbps"] * factor, abs=0.005 * factor + 0.005 + 1e-9
        )
        # algbw = size / time (GB = 1e9 bytes); time is printed with 4 significant digits or more
        if row["algbw_gbps"] >= 1:
            assert row["algbw_gbps"] == pytest.approx(row["size_bytes"] / row["time_us"] / 1e3, rel=0.01)


@pytest.mark.parametrize(
    ("sample", "collective", "factor"),
    [
        ("nccl_mpi_all_reduce_2x8xh100.txt", "all_reduce", 2 * 15 / 16),
        ("nccl_old_layout_4xv100.txt", "all_reduce", 2 * 3 / 4),
        ("nccl_broadcast_graph_srun_4xl40s.txt", "broadcast", 1.0),
    ],
)
def test_busbw_factor_per_collective(sample: str, collective: str, factor: float) -> None:
    out = collect((SAMPLES / sample).read_bytes())
    assert the_bench(out)["collective"] == collective
    for row in out["collectives"]:
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * factor, abs=0.005 * factor + 0.0051)


# ---- bench facts from the device lines --------------------------------------------------------------


def test_ranks_nodes_and_gpus_per_node_come_from_the_device_lines() -> None:
    out = collect((SAMPLES / "nccl_mpi_all_reduce_2x8xh100.txt").read_bytes())
    bench = the_bench(out)
    assert bench["ranks"] == 16
    assert bench["hosts"] == ["gpu-node-a01", "gpu-node-a02"]
    assert bench["nodes"] == 2
    assert bench["gpus_per_node"] == 8
    assert bench["gpu_name"] == "NVIDIA H100 80GB HBM3"
    assert (bench["dtype"], bench["redop"]) == ("bfloat16", "sum")
    first, last = out["bench_devices"][0], out["bench_devices"][-1]
    assert first == {
        "bench_key": 0,
        "rank": 0,
        "device": 0,
        "host": "gpu-node-a01",
        "pid": 20311,
        "bus_id": "0000:18:00",
        "gpu_name": "NVIDIA H100 80GB HBM3",
        "comm_group": 0,
        "line_no": 7,
    }
    assert (last["rank"], last["device"], last["host"]) == (15, 7, "gpu-node-a02")


ROWS_3 = [  # ROWS_8's algbw as a 3-rank all_reduce's: busbw = algbw x 4/3
    "     1048576        262144     float     sum      -1    31.07   33.75   45.00      0    31.35   33.45   44.60      0",
    "     2097152        524288     float     sum      -1    40.25   52.10   69.47      0    39.65   52.89   70.52      0",
    "     4194304       1048576     float     sum      -1    55.02   76.23  101.64      0    55.92   75.01  100.01      0",
]


def test_uneven_hosts_leave_gpus_per_node_unknown() -> None:
    lines = devices(3, per_host=2)
    out = collect(modern(ROWS_3, first=[]).replace("\n".join(devices(8)), "\n".join(lines)))
    bench = the_bench(out)
    assert (bench["ranks"], bench["nodes"], bench["gpus_per_node"]) == (3, 2, None)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "#  Rank  0 Group  0 Pid 548419 on spark-fb97 device  0 [000f:01:00] NVIDIA GB10",
            (0, 0, "spark-fb97", 548419, "000f:01:00", "NVIDIA GB10"),
        ),
        (
            "#   Rank  3 Pid 201685 on bessemer-node026 device  3 [0x40] Tesla V100-PCIE-32GB",
            (3, 3, "bessemer-node026", 201685, "0x40", "Tesla V100-PCIE-32GB"),
        ),
        (
            "#Rank  1 Pid   4012 on     gpu7 device  1 [0x3e] Tesla P100-SXM2-16GB",
            (1, 1, "gpu7", 4012, "0x3e", "Tesla P100-SXM2-16GB"),
        ),
        (
            "#  Rank 12 Group  0 Pid    375 on inst-yyyyy-gpu4-ol89 device  4 [0x8d] NVIDIA A100-SXM4-40GB",
            (12, 4, "inst-yyyyy-gpu4-ol89", 375, "0x8d", "NVIDIA A100-SXM4-40GB"),
        ),
        (
            "#   Rank  1 Pid  97185 on  nid000014 device  0 [0000:c9:00.0] AMD Instinct MI250X",
            (1, 0, "nid000014", 97185, "0000:c9:00.0", "AMD Instinct MI250X"),
        ),
    ],
    ids=["2.18-group-pcidomain", "2.x-no-group", "oldest", "two-digit-rank", "rccl-busid"],
)
def test_device_line_variants(line: str, expected: tuple) -> None:
    out = collect(
        f"# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20\n# Using devices\n{line}\n"
    )
    (device,) = out["bench_devices"]
    assert (
        device["rank"],
        device["device"],
        device["host"],
        device["pid"],
        device["bus_id"],
        device["gpu_name"],
    ) == expected


# Invented, in the shapes of ROCm/rccl-tests#50 (its 2022-2023 header, MI210s, a failure before any row) and of
# ROCm/rccl#2075 (a broadcast table with rccl-tests' asterisk legend, no version line), neither naming the fork.
RCCL_HEADER_MI210_FAILURE = """\
# nThreads: 1 nGpus: 2 nRanks: 1 minBytes: 8 maxBytes: 134217728 step: 2(factor) warmupIters: 5 iters: 20 validation: 1
#
# Using devices
#   Rank  0 Pid  20417 on  mi-box-03 device  0 [0000:c3:00.0] AMD Instinct MI210
#   Rank  1 Pid  20417 on  mi-box-03 device  1 [0000:83:00.0] AMD Instinct MI210
mi-box-03: Test NCCL failure common.cu:1285 'internal error - please report this issue to the NCCL developers'
"""
RCCL_LEGEND_TAIL = """\
    67108864      16777216     float    none       0   9377.2    7.16    7.16      0   9361.0    7.17    7.17      0
   134217728      33554432     float    none       0    18742    7.16    7.16      0    18736    7.16    7.16      0
# Errors with asterisks indicate errors that have exceeded the maximum threshold.
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 7.16
"""


@pytest.mark.parametrize(
    "text",
    [
        RCCL_HEADER_MI210_FAILURE,
        RCCL_LEGEND_TAIL,
        RCCL_HEADER_MI210_FAILURE.replace("nThreads:", "nThread").replace("nRanks: 1 ", ""),  # AMD GPUs alone
    ],
    ids=["rccl header", "asterisk legend", "amd devices"],
)
def test_rccl_tests_is_named_by_what_only_it_prints(text: str) -> None:
    assert [b["tool"] for b in collect(text)["benches"]] == ["rccl-tests"]


# Invented, in the shape of NVIDIA/nccl-tests#5 (nccl-tests of early 2018 on NCCL 1.x: its build line, device
# lines without Pid, the `bytes N type op` header, then NCCLCHECK's failure before the first row).
NCCL1_FAILURE = """\
nThread 1 nGpus 4 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
# NCCL Tests compiled with NCCL 1.3
# Using devices
#   Rank  0 on     gpu-07 device  0 [0x04] Tesla P100-PCIE-16GB
#   Rank  1 on     gpu-07 device  1 [0x05] Tesla P100-PCIE-16GB
#   Rank  2 on     gpu-07 device  2 [0x08] Tesla P100-PCIE-16GB
#   Rank  3 on     gpu-07 device  3 [0x09] Tesla P100-PCIE-16GB

#                                                 out-of-place                    in-place
#      bytes             N    type      op     time  algbw  busbw      res     time  algbw  busbw      res
NCCL failure all_reduce.cu:95 'unhandled cuda error'
"""


def test_nccl_1x_failure_fails_the_bench_and_its_build_line_is_kept() -> None:
    out = collect(NCCL1_FAILURE)
    bench = the_bench(out)
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert (bench["ranks"], bench["status"]) == (4, "failed")
    assert params["compiled with NCCL"] == "1.3"
    errors = [e["text"] for e in out["events"] if e["kind"] == "error"]
    assert errors == ["NCCL failure all_reduce.cu:95 'unhandled cuda error'"]
    assert "unparsed" not in out


def test_a_command_typed_in_a_singularity_shell_is_the_command() -> None:
    """Invented, in the shape of NVIDIA/nccl#1812: the test typed at `Singularity> `, cut before its device
    lines by the failure; its one process on -g 4 makes the ranks."""
    text = (
        "Singularity> ./build/all_reduce_perf -b 1024 -e 2G -f 2 -g 4\n"
        "# nThread 1 nGpus 4 minBytes 1024 maxBytes 2147483648 step: 2(factor) warmup iters: 5 iters: 20\n"
        "gpu-a03: Test NCCL failure common.cu:1128 'unhandled system error'\n"
    )
    out = collect(text)
    bench = the_bench(out)
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert params["command"] == "./build/all_reduce_perf -b 1024 -e 2G -f 2 -g 4"
    assert (bench["collective"], bench["ranks"], bench["nodes"], bench["status"]) == (
        "all_reduce",
        4,
        1,
        "failed",
    )


def test_a_paste_set_in_inline_code_backticks_keeps_its_command_and_header() -> None:
    """Invented, in the shape of NVIDIA/nccl#948: the command and the output each wrapped in one backtick
    (markdown's inline code, not a fenced block), the closing one on a line of its own."""
    text = (
        "`mpirun -np 2 ./build/all_reduce_perf -b 8 -e 128M -f 2 -g 4\n"
        "`\n\nThe output:\n\n"
        "`# nThread 1 nGpus 4 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20\n"
        "#\n# Using devices\n"
        + "".join(
            f"#  Rank  {r} Group  0 Pid {7100 + r // 4} on   node{r // 4} device  {r % 4} [0x{r:02x}] NVIDIA A100-SXM4-64GB\n"
            for r in range(8)
        )
        + "#\n#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
        "           8             2     float     sum      -1    32.47    0.00    0.00      0    31.90    0.00    0.00      0`\n"
    )
    out = collect(text)
    bench = the_bench(out)
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert params["command"].startswith("mpirun -np 2 ") and params["nThread"] == "1"
    assert (bench["ranks"], bench["nodes"], bench["gpus_per_node"]) == (8, 2, 4)
    assert len(out["collectives"]) == 2
    assert [u["text"] for u in out["unparsed"]] == ["The output:"]


def test_header_fields_become_bench_params_with_their_printed_names() -> None:
    out = collect(modern())
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert params["nccl-tests version"] == "2.18.3"
    assert params["nccl-library"] == "22304"
    assert params["collective test"] == "all_reduce_perf"
    assert params["nThread"] == "1"
    assert params["nGpus"] == "8"
    assert params["minBytes"] == "1048576"
    assert params["maxBytes"] == "4194304"
    assert params["step"] == "2(factor)"
    assert params["warmup iters"] == "5"
    assert params["iters"] == "20"
    assert params["agg iters"] == "1"
    assert params["validation"] == "1"
    assert params["graph"] == "0"
    assert params["collective_source"] == "printed"


def test_rccl_style_header_and_graph_runs() -> None:
    out = collect(
        "# nThread: 1 nGpus: 2 minBytes: 8 maxBytes: 134217728 step: 2(factor) warmupIters: 5 iters: 20 validation: 1\n"
        "rccl-tests: Version develop:3f7f785\n"
    )
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert params["nGpus"] == "2"
    assert params["warmupIters"] == "5"
    assert params["rccl-tests version"] == "develop:3f7f785"
    assert [b["tool"] for b in out["benches"]] == ["rccl-tests"]  # the fork its lines name
    assert {b["tool"] for b in collect(modern())["benches"]} == {"nccl-tests"}
    graph = collect(modern().replace("graph: 0", "graph: 10"))
    assert {p["name"]: p["value"] for p in graph["bench_params"]}["graph"] == "10"
    assert len(graph["collectives"]) == 6


def test_notes_between_header_and_table_become_params() -> None:
    notes = [
        "# Writing JSON output to results.json",
        "# Blocking Enabled: wait for completion and barrier after each collective ",
        "#",
        "# Reducing maxBytes to 12703978837 due to memory limitation",
    ]
    out = collect(modern().replace("# Using devices", "\n".join([*notes, "# Using devices"])))
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert params["Writing JSON output to"] == "results.json"
    assert params["Blocking Enabled"] == "wait for completion and barrier after each collective"
    assert params["maxBytes reduced to"] == "12703978837"
    assert "unparsed" not in out


@pytest.mark.parametrize(
    "binary",
    [
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "broadcast",
        "reduce",
        "alltoall",
        "sendrecv",
        "gather",
        "scatter",
        "hypercube",
    ],
)
def test_every_perf_binary_names_its_collective(binary: str) -> None:
    out = collect(modern().replace("all_reduce_perf", f"{binary}_perf"))
    assert the_bench(out)["collective"] == binary
    command = collect(
        f"$ mpirun -np 8 /opt/nccl-tests/build/{binary}_perf_mpi -b 8 -e 1M\n"
        + modern(first=[]).replace("# Collective test starting: all_reduce_perf\n", "")
    )
    assert the_bench(command)["collective"] == binary


def test_several_types_and_ops_in_one_table() -> None:
    rows = [
        ROWS_8[0],
        ROWS_8[0].replace("   float     sum", "    half     max"),
        ROWS_8[0].replace("   float     sum", "bfloat16     sum"),
    ]
    bench = the_bench(collect(modern(rows=rows)))
    assert (bench["dtype"], bench["redop"]) == ("float,half,bfloat16", "sum,max")


# ---- every table layout --------------------------------------------------------------------------

Layout = tuple[list[str], str, dict, dict]

LAYOUTS: dict[str, Layout] = {
    # 2.11+: redop and root always, #wrong a count
    "modern": (
        MODERN_HEADER,
        "   134217728      33554432     float     sum      -1   1050.7  127.74  223.55      0   1023.2  131.17  229.55      0",
        {"size_bytes": 134217728, "count": 33554432, "type": "float", "redop": "sum", "root": None},
        {"out-of-place": (1050.7, 127.74, 223.55, 0), "in-place": (1023.2, 131.17, 229.55, 0)},
    ),
    # 2.18: wider #wrong, printed with %6g
    "2.18-wide-wrong": (
        [
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong ",
        ],
        "  4294967296    1073741824  bfloat16     sum      -1    22042  194.85  365.35       0    21680  198.10  371.45   1e+06",
        {"size_bytes": 4294967296, "count": 1073741824, "type": "bfloat16", "redop": "sum", "root": None},
        {"out-of-place": (22042, 194.85, 365.35, 0), "in-place": (21680, 198.10, 371.45, 1000000)},
    ),
    # -c 0: no validation, #wrong N/A
    "no-validation": (
        MODERN_HEADER,
        "        8192          2048     float    none       1    11.07    0.74    0.74     N/A    10.94    0.75    0.75     N/A",
        {"size_bytes": 8192, "count": 2048, "type": "float", "redop": None, "root": 1},
        {"out-of-place": (11.07, 0.74, 0.74, None), "in-place": (10.94, 0.75, 0.75, None)},
    ),
    # -C 1: cputime instead of time
    "cputime": (
        [MODERN_HEADER[0], MODERN_HEADER[1].replace("   time", "cputime"), MODERN_HEADER[2]],
        "     1048576        262144     float     sum      -1    33.12   31.66   55.41      0    33.40   31.39   54.94      0",
        {"size_bytes": 1048576, "count": 262144, "type": "float", "redop": "sum", "root": None},
        {"out-of-place": (33.12, 31.66, 55.41, 0), "in-place": (33.40, 31.39, 54.94, 0)},
    ),
    # 2.x (2019-2021): type and redop, `error` is the largest relative error, not a count
    "2.x-redop-error": (
        [
            "#                                                       out-of-place                       in-place          ",
            "#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error",
            "#        (B)    (elements)                       (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
        ],
        "    33554432       8388608     float     sum   4393.9    7.64   14.32  4e-07   4384.4    7.65   14.35  5e-07",
        {"size_bytes": 33554432, "count": 8388608, "type": "float", "redop": "sum", "root": None},
        {"out-of-place": (4393.9, 7.64, 14.32, None), "in-place": (4384.4, 7.65, 14.35, None)},
    ),
    # 2.x broadcast: type and root
    "2.x-root": (
        [
            "#       size         count    type    root     time   algbw   busbw  error     time   algbw   busbw  error"
        ],
        "    40046416      40046416    int8       0   1268.1   31.58   31.58  0e+00   1279.3   31.30   31.30  0e+00",
        {"size_bytes": 40046416, "count": 40046416, "type": "int8", "redop": None, "root": 0},
        {"out-of-place": (1268.1, 31.58, 31.58, None), "in-place": (1279.3, 31.30, 31.30, None)},
    ),
    # oldest: type only, N/A without validation
    "2.0-type-only": (
        [
            "#       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error"
        ],
        "          64             2   float    34.36    0.00    0.00    N/A    33.83    0.00    0.00    N/A",
        {"size_bytes": 64, "count": 2, "type": "float", "redop": None, "root": None},
        {"out-of-place": (34.36, 0.0, 0.0, None), "in-place": (33.83, 0.0, 0.0, None)},
    ),
    # 2.17+ -I: per-iteration statistics after each placement
    "per-iteration": (
        [
            "#                                            out-of-place (+ per-iteration)                                in-place (+ per-iteration)",
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv% ",
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%)     (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%) ",
        ],
        "    16777216       4194304     float     sum      -1    153.2  109.51  191.64       0    150.1    160.9    160.2     1.43    152.3  110.16  192.78       0    149.8    158.7    158.1     1.21",
        {"size_bytes": 16777216, "count": 4194304, "type": "float", "redop": "sum", "root": None},
        {"out-of-place": (153.2, 109.51, 191.64, 0), "in-place": (152.3, 110.16, 192.78, 0)},
    ),
    # -T: a timestamp after each line
    "timestamp": (
        [
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong           timestamp",
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)          %Y-%m-%d %H:%M:%S",
        ],
        "     2097152        524288     float     sum      -1    40.25   52.10   91.18       0    39.65   52.89   92.56       0  2025-03-04 10:12:31",
        {"size_bytes": 2097152, "count": 524288, "type": "float", "redop": "sum", "root": None},
        {"out-of-place": (40.25, 52.10, 91.18, 0), "in-place": (39.65, 52.89, 92.56, 0)},
    ),
    # a table whose header was cut off: the layout comes from the number of fields
    "no-header": (
        [],
        "   268435456      67108864     float     sum      -1   2107.9  127.35  222.86      0   2001.9  134.09  234.66      0",
        {"size_bytes": 268435456, "count": 67108864, "type": "float", "redop": "sum", "root": None},
        {"out-of-place": (2107.9, 127.35, 222.86, 0), "in-place": (2001.9, 134.09, 234.66, 0)},
    ),
}


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_every_table_layout(name: str) -> None:
    header, row, fields, values = LAYOUTS[name]
    out = collect("\n".join([*header, row, ""]))
    assert "unparsed" not in out
    rows = out["collectives"]
    assert [r["placement"] for r in rows] == ["out-of-place", "in-place"]
    for r in rows:
        assert {k: r[k] for k in fields} == fields
        time_us, algbw, busbw, wrong = values[r["placement"]]
        # -C 1 prints host wall time in the time column: kept apart from the CUDA time.
        time_column = "cpu_time_us" if name == "cputime" else "time_us"
        assert r.get("cpu_time_us" if name != "cputime" else "time_us") is None
        assert (r[time_column], r["algbw_gbps"], r["busbw_gbps"], r["wrong"]) == (
            time_us,
            algbw,
            busbw,
            wrong,
        )
        assert r["line_no"] == len(header) + 1


def test_error_column_keeps_the_largest_error_as_a_param() -> None:
    header, row, _, _ = LAYOUTS["2.x-redop-error"]
    out = collect("\n".join([*header, row, row.replace("5e-07", "8e-07"), ""]))
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert params["max_error"] == "8e-07"
    assert the_bench(out)["wrong_total"] is None


def test_in_place_only_rows() -> None:
    body = " " * 32
    line = f"     1048576        262144     float     sum      -1{body}    31.35   33.45   58.54      0"
    out = collect("\n".join([*MODERN_HEADER, line, ""]))
    (row,) = out["collectives"]
    assert (row["placement"], row["time_us"], row["busbw_gbps"]) == ("in-place", 31.35, 58.54)


# ---- launcher prefixes, CRLF, colour ------------------------------------------------------------------


@pytest.mark.parametrize(
    "prefix",
    [
        "[1,0]<stdout>:",
        "node01: ",
        "0: ",
        "2025-03-04T10:12:31.123456Z ",
        "[default0]:",
        "    ",
        "(head, rank=0, pid=3808) [1,0]<stdout>:",
        "(worker1, rank=1, pid=2769, ip=10.100.10.12) ",
        "[2025-11-20T14:55:23+08:00] ",
    ],
    ids=[
        "openmpi-tag",
        "pdsh-host",
        "srun-label",
        "k8s-timestamp",
        "torchrun-tee",
        "indented",
        "ray-worker-and-openmpi-tag",  # SkyPilot runs its jobs on Ray
        "ray-worker-with-ip",
        "iso-timestamp-with-zone",
    ],
)
def test_launcher_prefixes_change_nothing(prefix: str) -> None:
    plain = collect(modern())
    prefixed = collect("\n".join(prefix + line if line else line for line in modern().split("\n")))
    assert "unparsed" not in prefixed
    strip = lambda rows: [{k: v for k, v in r.items() if k != "text"} for r in rows]  # noqa: E731
    for table in ("benches", "collectives", "bench_devices", "bench_params"):
        assert strip(prefixed[table]) == strip(plain[table]), table


def test_crlf_and_colour_codes() -> None:
    text = modern().replace("\n", "\r\n").replace("# Avg bus bandwidth", "\x1b[1;32m# Avg bus bandwidth")
    out = collect(text)
    assert the_bench(out)["avg_busbw_gbps"] == 94.3351
    assert len(out["collectives"]) == 6


# ---- naming the collective -----------------------------------------------------------------------


def test_collective_named_by_the_command_line() -> None:
    header, row, _, _ = LAYOUTS["2.x-root"]
    out = collect("\n".join(["$ mpirun -np 8 ./build/broadcast_perf -b 8 -e 1G -f 2 -g 1", *header, row, ""]))
    bench = the_bench(out)
    assert bench["collective"] == "broadcast"
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert params["collective_source"] == "command"
    assert params["command"].endswith("broadcast_perf -b 8 -e 1G -f 2 -g 1")


def test_unnamed_all_reduce_recognised_by_its_busbw_factor() -> None:
    text = modern(first=[]).replace("# Collective test starting: all_reduce_perf\n", "")
    out = collect(text.replace("# Collective test concluded: all_reduce_perf\n", ""))
    bench = the_bench(out)
    assert bench["collective"] == "all_reduce"
    assert {p["name"]: p["value"] for p in out["bench_params"]}["collective_source"] == "busbw factor"


def test_unnamed_collective_with_an_ambiguous_factor_stays_unknown() -> None:
    header, row, _, _ = LAYOUTS["no-validation"]
    out = collect("\n".join(["# nThread 1 nGpus 4", *devices(4), *header, row, *FOOTER, ""]))
    assert the_bench(out)["collective"] is None


# ---- failures, partial runs, data errors, noise ------------------------------------------------------


def test_wrong_values_mark_the_bench_data_error() -> None:
    rows = [ROWS_8[0], ROWS_8[1].replace("0    39.65", "3    39.65"), ROWS_8[2].replace("0\n", "0")]
    footer = ["# Out of bounds values : 1 FAILED", "# Avg bus bandwidth    : 94.3351 ", "#"]
    out = collect(modern(rows=rows, footer=footer))
    bench = the_bench(out)
    assert bench["status"] == "data_error"
    assert (bench["wrong_total"], bench["out_of_bounds"]) == (3, 1)
    bad = [r for r in out["collectives"] if r["wrong"]]
    assert [(r["size_bytes"], r["placement"], r["wrong"]) for r in bad] == [(2097152, "out-of-place", 3)]
    kinds = {e["kind"]: e["text"] for e in out["events"]}
    assert kinds["out_of_bounds"] == "# Out of bounds values : 1 FAILED"


def test_a_test_that_stops_part_way_is_partial_never_complete() -> None:
    text = modern().split("# Out of bounds")[0]
    out = collect(text + "     8388608       2097152     float     sum      -1    87.03   96.39")
    bench = the_bench(out)
    assert bench["status"] == "partial"
    assert bench["avg_busbw_gbps"] is None
    assert len(out["collectives"]) == 6
    (event,) = [e for e in out["events"] if e["kind"] == "incomplete"]
    assert "after 3 row(s), last size 4194304 bytes" in event["text"]
    assert out["unparsed"][0]["text"].startswith("     8388608")


def test_nccl_warn_and_test_failure_mark_the_bench_failed() -> None:
    text = modern(rows=ROWS_8[:2], footer=[]).split("# Collective test concluded")[0]
    text += (
        "gpu7:4100:4190 [5] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer 10.0.0.3<45021> with error 12\n"
        "gpu7: Test NCCL failure common.cu:1005 'remote process exited or there was a network error / '\n"
        " .. gpu7 pid 4100: Test failure common.cu:891\n"
    )
    out = collect(text)
    bench = the_bench(out)
    assert bench["status"] == "failed"
    assert len(out["collectives"]) == 4
    kinds = [(e["kind"], e["bench_key"]) for e in out["events"]]
    assert ("nccl_warn", 0) in kinds
    assert kinds.count(("error", 0)) == 2
    assert ("incomplete", 0) in kinds


def test_a_header_without_rows_is_failed() -> None:
    out = collect("\n".join([NTHREAD, "#", "# Using devices", *devices(8), "#", *MODERN_HEADER, ""]))
    assert the_bench(out)["status"] == "failed"


def test_garbage_lines_among_rows_go_to_unparsed_and_the_rows_stay() -> None:
    noise = [
        "Authorization required, but no authorization protocol specified",
        "gpu7:4100:4100 [0] NCCL INFO Launch mode Parallel",
        "12345 garbage 99",
        "     1048576        262144     float     sum",
    ]
    rows = [ROWS_8[0], noise[0], noise[1], ROWS_8[1], noise[2], noise[3], ROWS_8[2]]
    out = collect(modern(rows=rows))
    assert [u["text"] for u in out["unparsed"]] == noise
    assert [r["size_bytes"] for r in rows_of(out, "out-of-place")] == [1048576, 2097152, 4194304]
    assert the_bench(out)["status"] == "complete"


def test_xid_lines_are_events() -> None:
    text = modern(
        rows=[
            ROWS_8[0],
            "[Tue Mar  4 10:12:31 2025] NVRM: Xid (PCI:0000:9a:00): 79, GPU has fallen off the bus.",
            ROWS_8[1],
        ]
    )
    out = collect(text)
    assert [e["kind"] for e in out["events"] if e["kind"] == "xid"] == ["xid"]


def test_two_tests_back_to_back_are_two_benches() -> None:
    second = modern().replace("all_reduce_perf", "all_gather_perf")
    out = collect(modern() + "ubuntu@node01:~$ \n" + second)
    first, other = out["benches"]
    assert (first["bench_key"], first["collective"], first["status"]) == (0, "all_reduce", "complete")
    assert (other["bench_key"], other["collective"], other["status"]) == (1, "all_gather", "complete")
    assert first["line_end"] < other["line_start"]
    assert {r["bench_key"] for r in out["collectives"]} == {0, 1}
    assert len([d for d in out["bench_devices"] if d["bench_key"] == 1]) == 8


def test_back_to_back_without_version_lines_split_on_the_header() -> None:
    one = "\n".join([NTHREAD, "# Using devices", *devices(8), *MODERN_HEADER, *ROWS_8, *FOOTER, ""])
    out = collect(one + one.replace("float", " half"))
    assert [b["dtype"] for b in out["benches"]] == ["float", "half"]
    assert [b["status"] for b in out["benches"]] == ["complete", "complete"]


def test_sample_with_failures_back_to_back() -> None:
    out = collect((SAMPLES / "nccl_failures_back_to_back_8xh100.txt").read_bytes())
    statuses = [(b["collective"], b["status"]) for b in out["benches"]]
    assert statuses == [("all_reduce", "data_error"), ("reduce_scatter", "failed"), ("alltoall", "partial")]
    assert out["benches"][0]["wrong_total"] == 5
    assert out["benches"][0]["out_of_bounds"] == 2


# ---- detection -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("nccl_*.txt")), ids=lambda p: p.name)
def test_samples_are_detected_as_nccl_tests(path: Path) -> None:
    head = head_text(path.read_bytes()[: parsers.HEAD_BYTES])
    assert parsers.detect(head, str(path)) is nccl_tests


@pytest.mark.parametrize(
    "path",
    [p for p in sorted(SAMPLES.glob("*")) if p.is_file() and not p.name.startswith("nccl_")],
    ids=lambda p: p.name,
)
def test_other_formats_are_not_claimed(path: Path) -> None:
    head = head_text(path.read_bytes()[: parsers.HEAD_BYTES])
    assert nccl_tests.detect(head) == 0
    if not path.name.startswith(("p2p_", "topo_")):
        assert p2p.detect(head) == 0
        assert topo.detect(head) == 0


# ---- whole files: samples and the public corpus -----------------------------------------------------


def count_table_lines(text: str) -> tuple[int, int]:
    """Data lines (each one row per placement) and `# nThread` headers, counted without the parser."""
    lines = text.splitlines()
    data = sum(1 for line in lines if DATA_LINE_RX.match(line) and len(line.split()) >= 11)
    headers = sum(1 for line in lines if "# nThread" in line)
    return data, headers


@pytest.mark.parametrize("path", sorted(SAMPLES.glob("nccl_*.txt")), ids=lambda p: p.name)
def test_samples_rows_match_their_table_lines(path: Path) -> None:
    text = path.read_text()
    data, headers = count_table_lines(text)
    out = collect(text)
    assert len(out["collectives"]) == 2 * data
    assert len(out["benches"]) == headers
    cut = sum(1 for line in text.splitlines() if DATA_LINE_RX.match(line)) - data  # lines cut short
    assert cut == len([u for u in out.get("unparsed", []) if DATA_LINE_RX.match(u["text"])])


CORPUS_NCCL = corpus_files("nccl_tests")


@pytest.mark.skipif(not CORPUS_NCCL, reason="the shared corpus (../shared/corpus/nccl_tests) is not here")
@pytest.mark.parametrize("path", CORPUS_NCCL, ids=lambda p: p.name)
def test_corpus_files_parse_completely(path: Path) -> None:
    text = path.read_text()
    data, headers = count_table_lines(text)
    out = collect(path.read_bytes())
    assert len(out["collectives"]) == 2 * data
    assert len(out["benches"]) == headers
    printed_avg = [float(x) for x in re.findall(r"# Avg bus bandwidth\s*:\s*([\d.]+)", text)]
    assert [b["avg_busbw_gbps"] for b in out["benches"]] == printed_avg
    assert all(b["status"] == "complete" for b in out["benches"])


@pytest.mark.skipif(not CORPUS_NCCL, reason="the shared corpus (../shared/corpus/nccl_tests) is not here")
def test_corpus_gb10_two_runs_values() -> None:
    (path,) = [p for p in CORPUS_NCCL if "gb10" in p.name]
    out = collect(path.read_bytes())
    fast, slow = out["benches"]
    for bench in (fast, slow):
        assert (bench["collective"], bench["ranks"], bench["nodes"], bench["gpus_per_node"]) == (
            "all_gather",
            2,
            2,
            1,
        )
        assert bench["hosts"] == ["spark-fb97", "spark-4440"]
        assert bench["gpu_name"] == "NVIDIA GB10"
        assert bench["redop"] is None
    assert fast["avg_busbw_gbps"] / slow["avg_busbw_gbps"] == pytest.approx(7.6, abs=0.05)
    first = out["collectives"][0]
    assert (
        first["size_bytes"],
        first["count"],
        first["time_us"],
        first["algbw_gbps"],
        first["busbw_gbps"],
    ) == (
        1073741824,
        134217728,
        27211.0,
        39.46,
        19.73,
    )
    # all_gather on 2 ranks: busbw = algbw x (n-1)/n
    for row in out["collectives"]:
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] / 2, abs=0.011)


# ---- hostile input -----------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.sampled_from([*ROWS_8, *MODERN_HEADER, NTHREAD, *FOOTER, *devices(2), "# Using devices", "#"]),
            st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=80),
        ),
        max_size=40,
    )
)
def test_hostile_input_never_raises_and_every_line_is_accounted(lines: list[str]) -> None:
    text = "\n".join(line.replace("\n", " ").replace("\r", " ") for line in lines)
    out = collect(text.encode("utf-8", errors="replace"))
    for bench in out.get("benches", []):
        assert bench["status"] in ("complete", "partial", "failed", "data_error")
    for row in out.get("unparsed", []) + out.get("collectives", []):
        assert 1 <= row["line_no"] <= max(1, text.count("\n") + 1)


@pytest.mark.parametrize(
    "line",
    [
        "# nThread 1 nGpus 1 " + "x" * 65536,
        "# GPU memory usage : " + "y" * 65536,
        "#  Using devices " + "z" * 65536,
    ],
    ids=["header fields", "memory report", "key=value fields"],
)
def test_a_64_kib_word_in_a_header_line_is_read_in_linear_time(line: str) -> None:
    """Found by the fuzzer: unbounded names in `findall` patterns were quadratic in a long word (10 s and
    more for 64 KiB); a name is now at most a few dozen characters."""
    import time

    text = f"# nccl-tests version 2.13.10\n{line}\n#  Rank  0 Group  0 Pid 1 on host device  0 [0x07] NVIDIA H100\n"
    start = time.perf_counter()
    batches = list(nccl_tests.parse(source_of(text)))
    assert time.perf_counter() - start < 2.0
    assert batches


def test_a_row_cut_short_by_the_failure_that_stopped_the_test() -> None:
    # Invented, in the shape nccl-tests leaves when a kernel faults mid-table (common.cu's CUDACHECK
    # printing onto the row it had begun): the failure is an error event and the bench failed.
    cut = (
        "     2097152         32768     float    none      -1 node0: Test CUDA failure common.cu:389 "
        "'an illegal memory access was encountered'"
    )
    out = collect(
        modern(rows=[*ROWS_8[:2], cut, " .. node0 pid 62767: Test failure common.cu:519"], footer=[])
    )
    assert the_bench(out)["status"] == "failed"
    assert len(out["collectives"]) == 4  # the two rows before it, out-of-place and in-place
    errors = [e for e in out["events"] if e["kind"] == "error"]
    assert [e["text"].strip()[:7] for e in errors] == ["2097152", ".. node"]
    assert "unparsed" not in out


def test_a_tail_cut_before_the_device_list_takes_its_ranks_from_ncclss_init_lines() -> None:
    """A pasted tail of a 16-rank run (the shape of an EKS/EFA guide's log: OpenMPI's `[1,N]<stdout>:`
    tags, NCCL INFO lines inside the header, the old layout; sizes and times invented): no `Rank ...
    device` lines, but every rank's `comm ... rank R nranks 16 ... Init COMPLETE`. The count names the
    collective from the busbw factor, 2(16-1)/16."""
    init = "".join(
        f"[1,{r}]<stdout>:worker-0:{26 + r}:{67 + r} [{r}] NCCL INFO comm 0x7fc1dc000dc0 rank {r} nranks 16 "
        f"cudaDev {r % 8} busId {r}01c0 - Init COMPLETE\n"
        for r in range(3)
    )
    table = (
        "[1,0]<stdout>:#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n"
        "[1,0]<stdout>:#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n"
        "[1,0]<stdout>:    1048576        262144   float     sum    483.5    2.17    4.07  5e-07    483.6    2.17    4.07  5e-07\n"
        "[1,0]<stdout>:   16777216       4194304   float     sum   1895.5    8.85   16.60  5e-07   1900.9    8.83   16.55  5e-07\n"
        "[1,0]<stdout>:# Out of bounds values : 0 OK\n"
        "[1,0]<stdout>:# Avg bus bandwidth    : 10.3\n"
    )
    bench = the_bench(collect(init + table))
    assert (bench["ranks"], bench["collective"], bench["nodes"]) == (16, "all_reduce", None)
    params = {p["name"]: p["value"] for p in collect(init + table)["bench_params"]}
    assert (
        params["ranks_source"] == "NCCL INFO comm ... nranks"
        and params["collective_source"] == "busbw factor"
    )
    # with the device list printed, its lines count the ranks, as before
    assert "ranks_source" not in {
        p["name"] for p in collect((SAMPLES / "nccl_all_reduce_8xa100.txt").read_text())["bench_params"]
    }


def test_a_shortened_device_list_takes_its_size_from_the_highest_rank() -> None:
    """A published multi-node result keeps the first and last device lines with `...` between them (as
    GB300 NVL72 write-ups print them; invented hosts): 64 ranks on 16 nodes of 4, not 4 ranks on 2."""
    listed = [
        "#  Rank  0 Group  0 Pid 568399 on   tray-01 device  0 [0008:06:00] NVIDIA GB300",
        "#  Rank  1 Group  0 Pid 568400 on   tray-01 device  1 [0009:06:00] NVIDIA GB300",
        "...",
        "#  Rank 62 Group  0 Pid 480831 on   tray-16 device  2 [0018:06:00] NVIDIA GB300",
        "#  Rank 63 Group  0 Pid 480833 on   tray-16 device  3 [0019:06:00] NVIDIA GB300",
    ]
    text = modern(
        rows=[" 8589934592  2147483648  float  sum  -1  18842  455.88  897.52  0  18790  457.15  900.01  0"]
    )
    text = text.replace("\n".join(devices(8)), "\n".join(listed))
    bench = the_bench(collect(text))
    assert (bench["ranks"], bench["nodes"], bench["gpus_per_node"]) == (64, 16, 4)
    params = {p["name"]: p["value"] for p in collect(text)["bench_params"]}
    assert params["ranks_source"] == "the highest rank of a shortened device list"


def test_every_process_printing_rank_0_is_one_gpu_tests_and_a_warning() -> None:
    """nccl-tests built without MPI=1 and started by srun once per GPU: every process prints `Rank 0`."""
    listed = [
        f"#  Rank  0 Group  0 Pid {223120 + k} on cnode2-00{1 + k // 4} device  0 [0000:1b:00] NVIDIA H100 80GB HBM3"
        for k in range(8)
    ]
    out = collect(modern().replace("\n".join(devices(8)), "\n".join(listed)))
    bench = the_bench(out)
    assert (bench["ranks"], bench["nodes"], bench["gpus_per_node"]) == (1, 1, 1)
    (warning,) = [e for e in out["events"] if e["kind"] == "warning"]
    assert "8 device lines says Rank 0" in warning["text"] and "MPI=1" in warning["text"]


# Two all_reduce_perf processes built without MPI=1, each on 2 GPUs of its node (`mpirun -np 2 -H a,b ...
# -g 2`), printing at once: the header twice, each process's device lines, their rows interleaved, a footer
# each; the shape of NVIDIA/nccl-tests#182, invented figures.
TWO_PROCESSES = """\
# nThread 1 nGpus 2 minBytes 8 maxBytes 268435456 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
# nThread 1 nGpus 2 minBytes 8 maxBytes 268435456 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   3255 on   gpunode2 device  0 [0x03] NVIDIA A100-PCIE-40GB
#  Rank  1 Group  0 Pid   3255 on   gpunode2 device  1 [0x04] NVIDIA A100-PCIE-40GB
#  Rank  0 Group  0 Pid   2832 on   gpunode1 device  0 [0x03] NVIDIA A100-PCIE-40GB
#  Rank  1 Group  0 Pid   2832 on   gpunode1 device  1 [0x04] NVIDIA A100-PCIE-40GB
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    41.12    0.00    0.00      0    44.90    0.00    0.00      0
           8             2     float     sum      -1    47.31    0.00    0.00      0    55.02    0.00    0.00      0
   134217728      33554432     float     sum      -1    29501    4.55    4.55      0    29612    4.53    4.53      0
   134217728      33554432     float     sum      -1    27702    4.84    4.84      0    27690    4.85    4.85      0
   268435456      67108864     float     sum      -1    55102    4.87    4.87      0    55221    4.86    4.86      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 1.8102
#
   268435456      67108864     float     sum      -1    59301    4.53    4.53      0    59411    4.52    4.52      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 1.7310
#
"""


def test_processes_without_mpi_printing_at_once_are_one_bench_of_their_own_size() -> None:
    """Each process ran its own 2-GPU test: one bench of 2 ranks on one node (not 4 ranks, and no failed
    bench for the header the second process printed), its rows and both footers, and a warning."""
    out = collect(TWO_PROCESSES)
    bench = the_bench(out)
    assert (bench["ranks"], bench["nodes"], bench["gpus_per_node"]) == (2, 1, 2)
    assert (bench["status"], bench["avg_busbw_gbps"], bench["line_end"]) == ("complete", 1.8102, 25)
    assert len(rows_of(out, "out-of-place")) == 6
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert (params["processes"], params["Avg bus bandwidth (each process)"]) == ("2", "1.8102, 1.731")
    (warning,) = [e for e in out["events"] if e["kind"] == "warning"]
    assert (
        "2 processes" in warning["text"] and "2-GPU tests" in warning["text"] and "MPI=1" in warning["text"]
    )


def headerless_rows(sizes: list[int], busbw_at_plateau: float = 847.0) -> list[str]:
    """Data rows as nccl-tests 2.x prints them (`%12li  %12li  %8s  %6s  %6s`, then `  %7s  %6s  %6s  %6g`
    per placement), invented figures of an 8-rank all-reduce rising to a plateau."""
    rows = []
    for size in sizes:
        time_us = 21.0 + size / 485e3
        algbw = size / time_us / 1e3
        busbw = min(algbw * 1.75, busbw_at_plateau)
        rows.append(
            f"{size:12d}  {size // 4:12d}     float     sum      -1  {time_us:7.2f}  {algbw:6.2f}  {busbw:6.2f}"
            f"       0  {time_us - 0.3:7.2f}  {algbw:6.2f}  {busbw:6.2f}       0"
        )
    return rows


def test_a_tail_of_data_rows_without_any_header_is_detected() -> None:
    """`kubectl logs --tail=20` of an all_reduce_perf (as in a published OCI GB200 README): NCCL INFO lines
    around the rows, no version, header, device list or column names, the footer past the first 4 KiB."""
    info = [
        f"nccl-test-worker-{r // 4}:{60 + r % 4}:{113 + r} [{r % 4}] NCCL INFO comm 0xbae114ae{r:04x} rank {r} "
        f"nranks 8 cudaDev {r % 4} busId {r % 4 + 8}01000 - Destroy COMPLETE"
        for r in range(8)
    ]
    rows = headerless_rows([8 << k for k in range(32)])
    text = "\n".join(
        [
            "nccl-test-worker-0:60:109 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
            *rows,
            *info,
            "# Out of bounds values : 0 OK",
            "# Avg bus bandwidth    : 260.778",
            "#",
        ]
    )
    head = head_text(text.encode()[:4096])
    assert "Avg bus" not in head  # the rows alone decide
    assert parsers.detect(head, "tail.txt") is nccl_tests
    out = collect(text + "\n")
    bench = the_bench(out)
    assert (bench["collective"], bench["ranks"], bench["status"]) == ("all_reduce", 8, "complete")
    assert len(rows_of(out, "in-place")) == len(rows_of(out, "out-of-place")) == 32


def test_interleaved_processes_rows_pasted_without_a_header_are_a_table() -> None:
    """Invented rows, each size printed by two processes (nccl-tests built without MPI=1 under mpirun, every
    process printing its own table, as NVIDIA/nccl-tests#294's paste shows): sizes repeat, then grow."""
    rows = [row for size in (1 << 27, 1 << 28, 1 << 29) for row in headerless_rows([size]) * 2]
    assert nccl_tests.detect("\n".join(rows)) == 30
    assert the_bench(collect("\n".join(rows) + "\n"))["collective"] == "all_reduce"


@pytest.mark.parametrize(
    "lines",
    [
        pytest.param(headerless_rows([8 << k for k in range(3)]), id="three rows are too few"),
        pytest.param(
            [r for k in range(4) for r in headerless_rows([1 << 20])], id="one size repeated: no table"
        ),
        pytest.param(
            [f"{k:6d}  {k * 4:6d}  " + "  ".join(f"{v:6.2f}" for v in range(11)) for k in range(1, 9)],
            id="numbers without a type name",
        ),
        pytest.param(
            [f"  {k}   2023  float  sum  -1  1.0  2.0  3.0  0  1.0  2.0  3.0  0" for k in range(1, 9)],
            id="count larger than the size",
        ),
    ],
)
def test_rows_that_are_not_a_nccl_tests_table_are_not_claimed(lines: list[str]) -> None:
    assert nccl_tests.detect("\n".join(lines)) == 0


def test_an_rccl_tests_tail_is_detected_and_named_by_its_end() -> None:
    """rccl-tests' output cut after its header (a pasted tail; invented figures in its shape): detected by its
    footer, named by `Collective test concluded`, its version block and asterisk legend read."""
    rows = [
        f"  {size:>10}  {size // 4:>12}     float    none       0   {size / 7.1e3:7.1f}    7.10    7.10      0"
        f"   {size / 7.1e3:7.1f}    7.10    7.10      0"
        for size in (16777216, 33554432, 67108864)
    ]
    text = "\n".join(
        [
            "RCCL version : 2.28.3-gfx1151-rccl:a188cf2",
            "HIP version  : 7.12.60430-713bdeef5b",
            *rows,
            "# Errors with asterisks indicate errors that have exceeded the maximum threshold.",
            "# Out of bounds values : 0 OK",
            "# Avg bus bandwidth    : 7.1",
            "#",
            "# Collective test concluded: broadcast_perf",
        ]
    )
    assert parsers.detect(head_text(text.encode()), "tail.txt") is nccl_tests
    out = collect(text + "\n")
    assert the_bench(out)["collective"] == "broadcast"
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert params["RCCL version"] == "2.28.3-gfx1151-rccl:a188cf2" and params["HIP version"].startswith(
        "7.12"
    )
    assert "unparsed" not in out
    version = collect("# rccl-tests version 2.17.9 rccl-headers=22803 rccl-library=22803\n")
    assert {p["name"]: p["value"] for p in version["bench_params"]}["rccl-tests version"] == "2.17.9"


def test_a_failure_after_the_footer_belongs_to_the_bench_it_ends() -> None:
    """`Test failure common.cu:1189` lines follow the footer of the test that found wrong values (as an
    srun of nccl-tests on two nodes prints them; invented hosts)."""
    text = modern() + "\n .. gpu-1-1 pid 662195: Test failure common.cu:1189\n"
    out = collect(text)
    (error,) = [e for e in out["events"] if e["kind"] == "error"]
    assert error["bench_key"] == the_bench(out)["bench_key"]


def test_a_table_trimmed_to_one_group_of_columns_is_the_out_of_place_one() -> None:
    # Invented, in the shape of a table a user trimmed before posting: one header group (no #wrong, no
    # in-place half), as nccl-tests prints the out-of-place columns first.
    text = (
        "# nccl-tests version 2.19.6\n"
        "#       size         count      type   redop     time   algbw   busbw\n"
        "     1048576        262144     float     sum     25.35   41.37   62.06\n"
        "  1073741824     268435456     float     sum   2489.71  431.27  646.91\n"
        "# Avg bus bandwidth: 390.79 GB/s\n"
    )
    out = collect(text)
    assert rows_of(out, "in-place") == []
    assert [(r["size_bytes"], r["busbw_gbps"]) for r in rows_of(out, "out-of-place")] == [
        (1048576, 62.06),
        (1073741824, 646.91),
    ]


def test_rccl_tests_of_2023_colon_header_and_rccls_own_version_line() -> None:
    # ROCm/rccl#876 (2023): rccl-tests wrote `nThreads:` and RCCL printed `RCCL version 2.17.1+hip5.7 ...`;
    # the failure that followed left no table. Lines verbatim from that issue.
    text = (
        "# nThreads: 1 nGpus: 2 nRanks: 1 minBytes: 8 maxBytes: 134217728 step: 2(factor) warmupIters: 5 iters: 20 validation: 1 \n"
        "#\n"
        "# Using devices\n"
        "#   Rank  0 Pid 776691 on catalyst-convoy device  0 [0000:03:00.0] Radeon RX 7900 XTX\n"
        "#   Rank  1 Pid 776691 on catalyst-convoy device  1 [0000:06:00.0] Radeon RX 7900 XTX\n"
        "RCCL version 2.17.1+hip5.7 HEAD:cbbb3d8+\n"
    )
    out = collect(text)
    bench = the_bench(out)
    assert bench["tool"] == "rccl-tests"
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert (params["nThreads"], params["maxBytes"], params["RCCL version"]) == (
        "1",
        "134217728",
        "2.17.1+hip5.7",
    )


def test_a_command_behind_a_prompt_or_over_several_lines_is_the_benchs_command() -> None:
    # Invented, in the shapes users paste: a command continued with `\` over several lines, then a root
    # prompt's command whose run failed before any row, then the same command run again.
    header = "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
    row = "   134217728      33554432     float     sum      -1   1051.2  127.68  223.44      0   1050.9  127.72  223.51      0\n"
    text = (
        "mpirun -np 2 \\\n"
        "  -H 10.0.1.1:1,10.0.1.2:1 \\\n"
        "  -x NCCL_SOCKET_IFNAME=enp1s0f0np0 \\\n"
        "  ./build/all_gather_perf -b 128M -e 128M\n"
        "# nThread 1 nGpus 1 minBytes 134217728 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20\n"
        + header
        + row
        + "# Avg bus bandwidth    : 223.475\n"
        "root@node07:~/nccl-tests#  ./build/all_reduce_perf -b 1G -e 2G -g4\n"
        "# nThread 1 nGpus 4 minBytes 1073741824 maxBytes 2147483648 step: 2(factor) warmup iters: 5 iters: 20\n"
        + header
        + "node07: Test CUDA failure common.cu:502 'an illegal memory access was encountered'\n"
        "root@node07:~/nccl-tests# ./build/all_reduce_perf -b 1G -e 2G -g4\n"
        "# nThread 1 nGpus 4 minBytes 1073741824 maxBytes 2147483648 step: 2(factor) warmup iters: 5 iters: 20\n"
    )
    out = collect(text)
    commands = [
        (p["bench_key"], p["value"], p["line_no"]) for p in out["bench_params"] if p["name"] == "command"
    ]
    assert commands == [
        (
            0,
            "mpirun -np 2 -H 10.0.1.1:1,10.0.1.2:1 -x NCCL_SOCKET_IFNAME=enp1s0f0np0 ./build/all_gather_perf -b 128M -e 128M",
            1,
        ),
        (1, "./build/all_reduce_perf -b 1G -e 2G -g4", 9),
        (2, "./build/all_reduce_perf -b 1G -e 2G -g4", 13),
    ]
    assert [b["collective"] for b in out["benches"]] == ["all_gather", "all_reduce", "all_reduce"]
    assert "unparsed" not in out


def test_blank_redop_of_the_2x_layout_shifts_no_column() -> None:
    """nccl-tests 2.x (to 2022) gave all_gather and alltoall "" as the op name, which `%6s` printed as
    blanks under the `redop` heading (invented sample in the shape of an 8-node alltoall pasted in
    nccl-tests#78): the row is one field short, and its time is no redop."""
    text = "\n".join(
        [
            "#                                                       out-of-place                       in-place          ",
            "#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error",
            "#        (B)    (elements)                       (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)  ",
            "    67108864        262144     float           130112    0.52    0.51  0e+00   129876    0.52    0.51  0e+00",
            "   134217728        524288     float           260310    0.52    0.51  0e+00   259902    0.52    0.51  2e+00",
            "# Out of bounds values : 0 OK",
            "# Avg bus bandwidth    : 0.51 ",
            "",
        ]
    )
    out = collect(text)
    assert "unparsed" not in out
    bench = the_bench(out)
    assert bench["redop"] is None
    rows = [(r["placement"], r["size_bytes"], r["time_us"], r["busbw_gbps"]) for r in out["collectives"]]
    assert rows == [
        ("out-of-place", 67108864, 130112.0, 0.51),
        ("in-place", 67108864, 129876.0, 0.51),
        ("out-of-place", 134217728, 260310.0, 0.51),
        ("in-place", 134217728, 259902.0, 0.51),
    ]
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert float(params["max_error"]) == 2.0


def test_a_row_cut_after_its_out_of_place_busbw_keeps_what_it_printed() -> None:
    """Invented sample in the shape of an alltoall pasted in NVIDIA/nccl#2169 (nccl-tests 2.17, 4 ranks):
    the paste, or a killed process's last flush, ends the row after its out-of-place busbw. The figures
    printed are a row; the bench is partial, not a test that printed no row."""
    text = "\n".join(
        [
            "# nThread 1 nGpus 1 minBytes 524288000 maxBytes 549453824 step: 1048576(bytes) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0",
            "#",
            "# Using devices",
            *(
                f"#  Rank  {r} Group  0 Pid  41{r:02d} on    node7 device  {r} [0000:4e:00] NVIDIA H100 80GB HBM3"
                for r in range(4)
            ),
            "#",
            "#                                                              out-of-place                       in-place          ",
            "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong ",
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         ",
            "   524288000      32768000     float    none      -1  3310.52  158.37  118.78",
            "",
        ]
    )
    out = collect(text)
    assert "unparsed" not in out
    (row,) = out["collectives"]
    assert (row["placement"], row["time_us"], row["algbw_gbps"], row["busbw_gbps"], row["wrong"]) == (
        "out-of-place",
        3310.52,
        158.37,
        118.78,
        None,
    )
    assert the_bench(out)["status"] == "partial"


@pytest.mark.parametrize(
    ("command", "ranks", "nodes", "per_node"),
    [
        (
            "mpirun -n 256 -npernode 16 -hostfile /job/hostfile --mca btl ^openib -x NCCL_DEBUG=WARN "
            "./build/all_reduce_perf -b 32M -e 64M -f 2 -g 1 -c 0",
            256,
            16,
            16,
        ),
        # the test's own `-n` is its iterations: not processes
        ("srun -N 4 --ntasks-per-node=2 ./build/all_reduce_perf -b 32M -e 64M -f 2 -g 4 -n 50", 32, 4, 8),
        ("mpirun -np 8 ./build/all_reduce_perf -b 32M -e 64M -f 2 -g 1", 8, None, None),
        # MPICH's launcher as Debian installs it (ROCm/rccl#929: `mpirun.mpich -np 16 -env ...`), and Intel MPI's
        (
            "mpirun.mpich -np 16 -env LD_LIBRARY_PATH=/opt/rocm/hip/lib ./build/all_reduce_perf -b 8 -e 160K -f 2 "
            "-g 1 -n 250",
            16,
            None,
            None,
        ),
        ("mpiexec.hydra -n 16 -ppn 8 ./build/all_reduce_perf -b 32M -e 64M -f 2 -g 1", 16, 2, 8),
    ],
)
def test_a_bench_with_no_device_line_takes_its_ranks_from_the_launch(
    command: str, ranks: int, nodes: int | None, per_node: int | None
) -> None:
    """Invented sample in the shape of the 256-GPU all-reduce of nccl-tests#78 (NCCL 2.8, `-c 0`): the
    command and NCCL's version line, then the table, no `Using devices` list; busbw is the launch's
    all-reduce factor 2(n-1)/n of algbw, as nccl-tests prints it."""

    def bus(algbw: float) -> str:
        return f"{algbw * 2 * (ranks - 1) / ranks:.2f}"

    text = "\n".join(
        [
            command,
            "",
            "NCCL version 2.8.4+cuda10.1",
            "#",
            "#                                                     out-of-place                       in-place",
            "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error",
            "#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
            f"    33554432       8388608   float     sum   1501.3   22.35   {bus(22.35)}    N/A   1497.9   22.40   "
            f"{bus(22.40)}    N/A",
            f"    67108864      16777216   float     sum   2711.6   24.75   {bus(24.75)}    N/A   2730.4   24.58   "
            f"{bus(24.58)}    N/A",
            "",
        ]
    )
    out = collect(text)
    bench = the_bench(out)
    assert (bench["ranks"], bench["nodes"], bench["gpus_per_node"]) == (ranks, nodes, per_node)
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert params["ranks_source"] == "the launch command (processes x -g x -t)"


@pytest.mark.parametrize(
    ("pids", "nodes", "per_node"), [((4349,) * 4, 1, 4), ((4349, 4350, 4351, 4352), None, None)]
)
def test_a_device_line_without_a_host_name_still_counts_its_rank(
    pids: tuple[int, ...], nodes: int | None, per_node: int | None
) -> None:
    """nccl-tests prints the host blank where the machine's name was empty (NVIDIA/nccl#841: `Pid   4349 on
    device  0 [0x01] NVIDIA A100 80GB PCIe`; invented sample of its shape): every line is a rank, on one
    node where one process ran every GPU, on nodes nobody can count where several processes did."""
    devices = [
        f"#  Rank  {i} Group  0 Pid   {pid} on        device  {i} [0x{16 * i + 1:02x}] NVIDIA A100 80GB PCIe"
        for i, pid in enumerate(pids)
    ]
    text = "\n".join(
        [
            "# nThread 1 nGpus 4 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
            "validation: 1 graph: 0",
            "#",
            "# Using devices",
            *devices,
            "#",
            "#                                                              out-of-place                       in-place",
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw "
            "#wrong",
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
            "   134217728      33554432     float     sum      -1   9870.1   13.60   20.40      0   9861.2   13.61   20.42      0",
            "# Out of bounds values : 0 OK",
            "# Avg bus bandwidth    : 20.41",
            "",
        ]
    )
    out = collect(text)
    assert "unparsed" not in out
    bench = the_bench(out)
    assert (bench["ranks"], bench["nodes"], bench["gpus_per_node"], bench["hosts"]) == (
        4,
        nodes,
        per_node,
        [],
    )
    assert [(d["rank"], d["host"], d["gpu_name"]) for d in out["bench_devices"]] == [
        (i, None, "NVIDIA A100 80GB PCIe") for i in range(4)
    ]


def test_a_copy_that_lost_its_hash_marks_keeps_its_header_devices_and_footer() -> None:
    """GitHub renders the `#` lines of an output pasted outside a code block as headings, and a copy of the
    page has them without their `#` (NVIDIA/nccl-tests#249, NVIDIA/nccl#583); invented sample of that shape,
    2 ranks on one g5 node. The words are nccl-tests' own: read as the header, devices and footer."""
    text = "\n".join(
        [
            " nThread 1 nGpus 1 minBytes 8 maxBytes 16777216 step: 2(factor) warmup iters: 5 iters: 5 agg iters: 1 "
            "validation: 1 graph: 0",
            " Blocking Enabled: wait for completion and barrier after each collective ",
            "",
            " Using devices",
            "  Rank  0 Group  0 Pid    127 on g5-worker-0 device  0 [0x00] NVIDIA A10G",
            "  Rank  1 Group  0 Pid    128 on g5-worker-0 device  1 [0x00] NVIDIA A10G",
            "",
            "                                                              out-of-place                       in-place ",
            "       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw "
            "#wrong",
            "        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s) ",
            "     8388608       2097152     float     sum      -1    795.1   10.55   10.55      0    794.0   10.56   10.56      0",
            "    16777216       4194304     float     sum      -1   1562.4   10.74   10.74      0   1561.9   10.74   10.74      0",
            " Out of bounds values : 0 OK",
            " Avg bus bandwidth    : 10.6489 ",
            "",
        ]
    )
    out = collect(text)
    assert "unparsed" not in out
    bench = the_bench(out)
    assert (bench["ranks"], bench["nodes"], bench["gpu_name"], bench["status"], bench["avg_busbw_gbps"]) == (
        2,
        1,
        "NVIDIA A10G",
        "complete",
        10.6489,
    )
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert (params["nGpus"], params["maxBytes"], params["Blocking Enabled"]) == (
        "1",
        "16777216",
        "wait for completion and barrier after each collective",
    )
    assert len(out["collectives"]) == 4


def test_mpich_rank_tags_inside_a_row_are_taken_off() -> None:
    """`mpiexec -l` (MPICH, Intel MPI) tags each piece a rank writes with `[0] `, and nccl-tests writes a row
    in pieces, so the tag lands inside it too (NVIDIA/nccl#1453; invented sample of that shape, 16 ranks)."""
    rows = [
        (4194304, 1048576, 622.6, 6.74, 12.64, 625.8, 6.70, 12.56),
        (8388608, 2097152, 992.6, 8.45, 15.84, 986.0, 8.51, 15.96),
        (16777216, 4194304, 1334.9, 12.57, 23.57, 1336.5, 12.55, 23.53),
        (33554432, 8388608, 2180.1, 15.39, 28.86, 2285.2, 14.68, 27.53),
    ]
    text = "\n".join(
        [
            "[0] #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
            "   busbw #wrong",
            *(
                f"[0] {s:12d}  {c:12d}     float     sum      -1[0] {t:9.1f} {a:7.2f} {b:7.2f}      0[0] {t2:9.1f} "
                f"{a2:7.2f} {b2:7.2f}      0"
                for s, c, t, a, b, t2, a2, b2 in rows
            ),
            "[0] # Out of bounds values : 0 OK",
            "[0] # Avg bus bandwidth    : 20.0612 ",
            "",
        ]
    )
    out = collect(text)
    assert "unparsed" not in out
    bench = the_bench(out)
    assert (bench["collective"], bench["ranks"], bench["status"], bench["avg_busbw_gbps"]) == (
        "all_reduce",
        16,
        "complete",
        20.0612,
    )
    assert [(r["size_bytes"], r["time_us"], r["busbw_gbps"]) for r in rows_of(out, "in-place")] == [
        (s, t2, b2) for s, _, _, _, _, t2, _, b2 in rows
    ]
