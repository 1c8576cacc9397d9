"""The rank count a nccl-tests table's busbw/algbw proves where its device lines do not show every rank
(nccl-tests doc/PERFORMANCE.md: busbw = algbw x 2(n-1)/n for all_reduce, (n-1)/n for all_gather,
reduce_scatter, alltoall). The samples are invented, in the shapes of published excerpts."""

from __future__ import annotations

from pathlib import Path

from tests.test_benches_ingest import ingest, sql
from tests.test_parser_nccl_tests import collect, the_bench

# Invented: a 512-rank H100 all_reduce (figures made with 2*511/512) whose paste kept the header, one device
# line and the rows, as NVIDIA/nccl-tests#322's 1024-rank excerpt did; a rank failing at the next size.
ONE_DEVICE_LINE_OF_MANY = """\
# nThread 1 nGpus 1 minBytes 1073741824 maxBytes 34359738368 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid 2210411 on  gpu-a017 device  0 [0000:18:00] NVIDIA H100 80GB HBM3
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
  1073741824     268435456     float     sum      -1    21010   51.11  102.01      0    20890   51.40  102.60      0
  2147483648     536870912     float     sum      -1    23500   91.38  182.41      0    23390   91.81  183.27      0
  4294967296    1073741824     float     sum      -1    30120  142.60  284.63      0    30310  141.70  282.85      0
  8589934592    2147483648     float     sum      -1    52240  164.43  328.22      0    52105  164.86  329.07      0
 17179869184    4294967296     float     sum      -1   101770  168.81  336.96      0   101690  168.94  337.23      0
gpu-b112: Test NCCL failure common.cu:1204 'unhandled cuda error (run with NCCL_DEBUG=INFO for details) / '
 .. gpu-b112 pid 881930: Test failure common.cu:915
"""


def test_a_device_list_cut_to_one_line_takes_its_ranks_from_the_busbw_factor() -> None:
    out = collect(ONE_DEVICE_LINE_OF_MANY)
    bench = the_bench(out)
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    # 2(n-1)/n printed to 2 decimals: the five pairs with the largest algbw allow 509 to 513 ranks, not one
    assert (bench["ranks"], bench["nodes"], bench["gpus_per_node"]) == (509, None, None)
    assert bench["collective"] == "all_reduce" and params["collective_source"] == "busbw factor"
    assert params["ranks_source"].startswith(
        "at least 509 from the busbw factor (busbw/algbw 1.99606 to 1.99611 "
    )
    assert params["ranks_source"].endswith("2(n-1)/n: 509 to 513 ranks)")
    assert bench["hosts"] == ["gpu-a017"]


def test_a_bench_wider_than_one_host_is_held_to_the_network_not_to_nvlink(
    db_path: Path, tmp_path: Path
) -> None:
    log = tmp_path / "all_reduce_cut.log"
    log.write_text(ONE_DEVICE_LINE_OF_MANY)
    ingest(db_path, log)
    (detail,) = sql(
        db_path,
        "SELECT detail FROM predictions WHERE subject_kind = 'collective' AND metric = 'model_plateau_busbw_gbps'",
    )[0]
    assert '"nodes": 64' in detail and '"ranks_per_node": 8' in detail and '"fabric_assumed": true' in detail
    (assumed,) = sql(db_path, "SELECT detail FROM predictions WHERE metric = 'inputs'")[0]
    assert "509 ranks are more than one host holds, its GPUs per node unknown: 8 per node assumed" in assumed
    rules = [r for (r,) in sql(db_path, "SELECT rule FROM flags ORDER BY rule")]
    assert "duplex_confusion" not in rules  # 337 GB/s is no longer 75 % of NVLink 4's 450 GB/s, "healthy"
