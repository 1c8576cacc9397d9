"""nccl-tests output pasted with an `nvidia-smi topo -m` matrix, a test typed with no launcher, the busbw
of nccl-tests before mid-2020, which for all_gather and reduce_scatter equalled algbw, and the 1.x layout
(2017 to March 2019) whose device lines have no `Pid` and whose `time` column is in milliseconds.

ISSUE_37 is verbatim from NVIDIA/nccl-tests#37 (https://github.com/NVIDIA/nccl-tests/issues/37, its
description: an all_gather_perf run of nccl-tests 2.4/2.5 on 8 x V100-SXM2 with two out-of-bounds values,
then the node's topology, tabs as published). JOB_LOG is invented, in the shape of a job script's output
that prints the topology before the test (its figures are not measurements). V1_TABLE is invented, written
with the format strings of nccl-tests' first release (NVIDIA/nccl-tests@b188a15, src/common.cu and
src/all_reduce.cu: `#   Rank %2d on %10s device %2d [0x%02x] %s`, the `bytes N type op ... res` header,
`%7.3f` of deltaSec * 1.0E3), the layout of NVIDIA/nccl-tests#7's 2018 output.
"""

from __future__ import annotations

from tests.conftest import rows_by_table
from tracelog import parsers
from tracelog.parsers import nccl_tests, topo
from tracelog.parsers.nccl_tests_bench import launched
from tracelog.parsers.nccl_tests_factor import factor_ranks, row_range

ISSUE_37 = (
    "all_gather_perf -g 8 -b 4294967296 -e 4294967296 -n 100\n"
    "                                             out-of-place                       in-place\n"
    "       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error\n"
    "        (B)    (elements)             (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n"
    "  4294967296     134217728   float    29122  129.05  129.05  1e+00    29169  128.84  128.84  1e+00\n"
    " Out of bounds values : 2 FAILED\n"
    " Avg bus bandwidth    : 128.942\n"
    "\n"
    "#nvidia-smi topo -m\n"
    "\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tCPU Affinity\n"
    "GPU0\t X \tNV1\tNV1\tNV2\tSYS\tSYS\tNV2\tSYS\t0-95\n"
    "GPU1\tNV1\t X \tNV2\tNV1\tSYS\tSYS\tSYS\tNV2\t0-95\n"
    "GPU2\tNV1\tNV2\t X \tNV2\tNV1\tSYS\tSYS\tSYS\t0-95\n"
    "GPU3\tNV2\tNV1\tNV2\t X \tSYS\tNV1\tSYS\tSYS\t0-95\n"
    "GPU4\tSYS\tSYS\tNV1\tSYS\t X \tNV2\tNV1\tNV2\t0-95\n"
    "GPU5\tSYS\tSYS\tSYS\tNV1\tNV2\t X \tNV2\tNV1\t0-95\n"
    "GPU6\tNV2\tSYS\tSYS\tSYS\tNV1\tNV2\t X \tNV1\t0-95\n"
    "GPU7\tSYS\tNV2\tSYS\tSYS\tNV2\tNV1\tNV1\t X \t0-95\n"
)

JOB_LOG = """\
+ nvidia-smi topo -m
\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV6\tNV6\tNV6\t0-31\t0\t\tN/A
GPU1\tNV6\t X \tNV6\tNV6\t0-31\t0\t\tN/A
GPU2\tNV6\tNV6\t X \tNV6\t32-63\t1\t\tN/A
GPU3\tNV6\tNV6\tNV6\t X \t32-63\t1\t\tN/A
# nThread 1 nGpus 4 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  40211 on     node07 device  0 [0x07] NVIDIA A100-SXM4-80GB
#  Rank  1 Group  0 Pid  40211 on     node07 device  1 [0x0f] NVIDIA A100-SXM4-80GB
#  Rank  2 Group  0 Pid  40211 on     node07 device  2 [0x47] NVIDIA A100-SXM4-80GB
#  Rank  3 Group  0 Pid  40211 on     node07 device  3 [0x4e] NVIDIA A100-SXM4-80GB
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    22.41   46.79   70.19      0    22.10   47.45   71.17      0
     2097152        524288     float     sum      -1    31.87   65.80   98.70      0    31.52   66.53   99.80      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 84.9656
#
"""


def parsed(text: str) -> dict[str, list[dict]]:
    return rows_by_table(nccl_tests.parse, text)


def test_a_paste_of_a_failed_test_and_its_topology_keeps_both() -> None:
    assert parsers.detect(ISSUE_37, "issue.txt") is nccl_tests  # was topo, which dropped the test
    out = parsed(ISSUE_37)
    test, matrix = sorted(out["benches"], key=lambda b: b["bench_key"])
    assert (test["tool"], test["collective"], test["status"], test["out_of_bounds"]) == (
        "nccl-tests",
        "all_gather",
        "data_error",
        2,
    )
    assert (matrix["tool"], matrix["ranks"], matrix["status"]) == ("nvidia-smi-topo", 8, "complete")
    links = [r for r in out["links"] if r["bench_key"] == matrix["bench_key"]]
    assert len(links) == 64
    assert {
        (r["a"], r["b"], r["link_count"]) for r in links if r["a"] == "GPU0" and r["b"] in ("GPU1", "GPU3")
    } == {
        ("GPU0", "GPU1", 1),
        ("GPU0", "GPU3", 2),
    }
    assert "unparsed" not in out


def test_a_test_typed_with_no_launcher_is_one_process_of_its_gpus() -> None:
    (test, _) = sorted(parsed(ISSUE_37)["benches"], key=lambda b: b["bench_key"])
    assert (test["ranks"], test["nodes"], test["gpus_per_node"]) == (8, 1, 8)
    assert launched("NCCL_ALGO=TREE ./all_reduce_perf -g 8 -b 8 -e 128M -f 2") == (8, 8)
    assert launched("user@host:~/nccl-tests$ sudo ./build/all_reduce_perf -g 2 -t 2") == (4, 4)
    assert launched("pdsh -w node[1-2] ./build/all_reduce_perf -g 8") is None  # a launcher not read


def test_busbw_equal_to_algbw_proves_no_rank_count_for_all_gather() -> None:
    """nccl-tests before ec1b5e2 (2020-06) printed all_gather's busbw as its algbw on any rank count."""
    assert factor_ranks("all_gather", [(129.05, *row_range("129.05", "129.05"))]) is None
    found = factor_ranks("all_gather", [(129.05, *row_range("129.05", "112.92"))])
    assert found is not None and found.low == 8


def test_a_topology_printed_before_the_test_in_a_job_log() -> None:
    assert parsers.detect(JOB_LOG, "slurm-1234.out") is nccl_tests
    out = parsed(JOB_LOG)
    test, matrix = sorted(out["benches"], key=lambda b: b["bench_key"])
    assert (test["collective"], test["ranks"], test["status"]) == ("all_reduce", 4, "complete")
    assert matrix["bench_key"] >= nccl_tests.TOPO_KEYS and matrix["ranks"] == 4
    params = {(p["name"], p["value"]) for p in out["bench_params"] if p["bench_key"] == matrix["bench_key"]}
    assert ("GPU2 NUMA Affinity", "1") in params
    assert len(out["collectives"]) == 4


def test_a_topology_alone_is_still_the_topo_parsers() -> None:
    only = JOB_LOG.split("# nThread")[0]
    assert parsers.detect(only, "topo.txt") is topo


V1_TABLE = """\
nThread 1 nGpus 8 minBytes 8388608 maxBytes 33554432 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
# Using devices
#   Rank  0 on    dgx1-07 device  0 [0x06] Tesla V100-SXM2-16GB
#   Rank  1 on    dgx1-07 device  1 [0x07] Tesla V100-SXM2-16GB
#   Rank  2 on    dgx1-07 device  2 [0x0a] Tesla V100-SXM2-16GB
#   Rank  3 on    dgx1-07 device  3 [0x0b] Tesla V100-SXM2-16GB

#                                                 out-of-place                    in-place
#      bytes             N    type      op     time  algbw  busbw      res     time  algbw  busbw      res
     8388608       2097152   float     sum    0.100  83.97  125.96    1e-07    0.098  85.68  128.52    1e-07
    16777216       4194304   float     sum    0.170  98.71  148.06    1e-07    0.168  99.87  149.80    1e-07
    33554432       8388608   float     sum    0.310  108.37  162.56    1e-07    0.303  110.58  165.87    1e-07
 Out of bounds values : 0 OK
 Avg bus bandwidth    : 146.795
"""


def test_nccl_tests_1x_time_is_milliseconds_and_its_device_lines_count() -> None:
    out = parsed(V1_TABLE)
    (bench,) = out["benches"]
    assert (bench["collective"], bench["ranks"], bench["nodes"], bench["gpus_per_node"]) == (
        "all_reduce",
        4,
        1,
        4,
    )
    assert {d["pid"] for d in out["bench_devices"]} == {None} and len(out["bench_devices"]) == 4
    largest = next(
        r for r in out["collectives"] if r["size_bytes"] == 33554432 and r["placement"] == "out-of-place"
    )
    assert largest["time_us"] == 310.0  # 0.310 ms; 33554432 B / 310 us = 108.2 GB/s, the algbw printed
    assert "unparsed" not in out
