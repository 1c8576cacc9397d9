"""The rank count a nccl-tests table's busbw/algbw proves where its device lines do not show every rank
(nccl-tests doc/PERFORMANCE.md: busbw = algbw x 2(n-1)/n for all_reduce, (n-1)/n for all_gather,
reduce_scatter, alltoall). The samples are invented, in the shapes of published excerpts."""

from __future__ import annotations

from pathlib import Path

import tracelog.api as api
from tests.test_benches_ingest import ingest, sql
from tests.test_parser_nccl_tests import collect, the_bench
from tracelog.parsers import nccl_tests

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
    # 2(n-1)/n printed to 2 decimals: the five pairs with the largest algbw allow 510 to 513 ranks, not one
    # (509 to 513 from their algbw alone; size / time narrows it a little)
    assert (bench["ranks"], bench["nodes"], bench["gpus_per_node"]) == (510, None, None)
    assert bench["collective"] == "all_reduce" and params["collective_source"] == "busbw factor"
    assert params["ranks_source"].startswith(
        "at least 510 from the busbw factor (busbw/algbw 1.99607 to 1.99611 "
    )
    assert params["ranks_source"].endswith("2(n-1)/n: 510 to 513 ranks)")
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
    assert "510 ranks are more than one host holds, its GPUs per node unknown: 8 per node assumed" in assumed
    rules = [r for (r,) in sql(db_path, "SELECT rule FROM flags ORDER BY rule")]
    assert "duplex_confusion" not in rules  # 337 GB/s is no longer 75 % of NVLink 4's 450 GB/s, "healthy"


# Invented: the tail of an 8-rank table in nccl-tests' old per-test layout (no redop or root column, the
# `error` column), busbw = algbw x 7/8 and count = size / (4 B x 8), as NVIDIA/nccl#644's paste printed it.
OLD_LAYOUT_TAIL = """\
     4194304        131072     float    601.3    6.98    6.10  0e+00    598.8    7.00    6.13  0e+00
     8388608        262144     float   1188.4    7.06    6.18  0e+00   1191.0    7.04    6.16  0e+00
    16777216        524288     float   2402.7    6.98    6.11  0e+00   2391.2    7.02    6.14  0e+00
    33554432       1048576     float   4770.1    7.03    6.16  0e+00   4788.9    7.01    6.13  0e+00
    67108864       2097152     float   9551.6    7.03    6.15  0e+00   9540.2    7.03    6.16  0e+00
   134217728       4194304     float  19090.0    7.03    6.15  0e+00  19102.0    7.03    6.15  0e+00
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 6.14203
#
"""


def test_a_table_alone_takes_its_ranks_from_the_factor_and_names_the_collectives_its_columns_allow() -> None:
    out = collect(OLD_LAYOUT_TAIL)
    bench = the_bench(out)
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert (bench["ranks"], bench["nodes"], bench["collective"]) == (8, None, None)
    assert params["ranks_source"].startswith("the busbw factor (busbw/algbw ")
    assert params["ranks_source"].endswith("(n-1)/n: 8 ranks)")
    # no redop column: not reduce_scatter or alltoall, which print one in every layout
    assert params["collective_candidates"] == "all_gather, gather, scatter"


def test_collectives_the_model_costs_alike_are_held_to_its_plateau(db_path: Path, tmp_path: Path) -> None:
    log = tmp_path / "old_layout_tail.log"
    log.write_text(OLD_LAYOUT_TAIL)
    result = api.ingest(str(db_path), [str(log)], gpu="a100-sxm4-80gb")
    assert not [r for r in result if isinstance(r, api.IngestFailure)]
    (assumed,) = sql(db_path, "SELECT detail FROM predictions WHERE metric = 'inputs'")[0]
    assert (
        "one of all_gather, gather, scatter, which the model costs alike: predicted as all_gather" in assumed
    )
    (flag,) = sql(db_path, "SELECT severity, message FROM flags WHERE rule = 'low_bandwidth'")
    assert flag[0] == "warning"
    assert flag[1].startswith("all_gather or gather or scatter busbw peaks at 6.2 GB/s")


def test_small_rows_take_their_algbw_from_size_over_time() -> None:
    """Invented, in the shape of NVIDIA/nccl#527's old-layout rows (32 ranks, small sizes): algbw printed to
    two decimals (0.32) says little, its time (406.8 us) pins size / time to four digits, and the rank count
    is 28 to 33 where the printed algbw alone allowed 20 to 36."""
    from tracelog.parsers.nccl_tests_factor import factor_ranks

    factor = 2 * 31 / 32
    sizes_times = [(32768, 398.1), (65536, 401.5), (131072, 406.8), (262144, 412.3)]
    lines = [
        "#       size    count   type   redop     time   algbw   busbw  error     time   algbw   busbw  error"
    ]
    for size, time_us in sizes_times:
        algbw = size / (time_us * 1e3)
        cells = f"{time_us:8.1f} {algbw:7.2f} {algbw * factor:7.2f}  0e+00"
        lines.append(f"{size:12d} {size // 4:8d}  float    sum {cells} {cells}")
    out = collect("\n".join(lines) + "\n")
    bench = the_bench(out)
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert bench["collective"] == "all_reduce" and 28 <= bench["ranks"] <= 32
    assert params["ranks_source"].endswith(f"2(n-1)/n: {bench['ranks']} to 33 ranks)")
    # from the printed algbw alone the same rows allowed 20 to 36
    plain = factor_ranks("all_reduce", [(a, lo, hi) for a, lo, hi, _, _ in _ranges(lines)])
    assert plain is not None and (plain.low, plain.high) == (20, 36)


def _ranges(lines: list[str]) -> list[tuple[float, ...]]:
    from tracelog.parsers.nccl_tests_factor import row_range

    out = []
    for line in lines[1:]:
        cells = line.split()
        size, time_text, algbw_text, busbw_text = int(cells[0]), cells[4], cells[5], cells[6]
        if (r := row_range(algbw_text, busbw_text, size, time_text)) is not None:
            out.append((float(algbw_text), *r))
    return out


# Invented, in the shape of NVIDIA/nccl-tests#128's paste (reduce_scatter_perf on 2 nodes of 4 GPUs, the
# table without its header, messages so small that algbw and busbw print 0.00 or 0.01): the count column is
# one rank's share, so size = count x 4 B x 8 on every row.
SMALL_REDUCE_SCATTER_ROWS = """\
CUDA_VISIBLE_DEVICES=0,2,4,6
           0             0     float     sum      -1     5.81    0.00    0.00      0     5.62    0.00    0.00      0
         128             4     float     sum      -1    30.12    0.00    0.00      0    24.90    0.01    0.00      0
         256             8     float     sum      -1    23.87    0.01    0.01      0    23.40    0.01    0.01      0
         512            16     float     sum      -1    24.05    0.02    0.02      0    23.96    0.02    0.02      0
        1024            32     float     sum      -1    24.33    0.04    0.04      0    24.18    0.04    0.04      0
"""


def test_the_count_column_gives_the_ranks_where_busbw_prints_no_digits() -> None:
    out = collect(SMALL_REDUCE_SCATTER_ROWS)
    bench = the_bench(out)
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    # the (n-1)/n family with a real redop is reduce_scatter; the size-0 row says nothing
    assert (bench["ranks"], bench["collective"]) == (8, "reduce_scatter")
    assert params["collective_source"] == "count column"
    assert params["ranks_source"].startswith("the count column (size = count x 4 B of float x 8 on every row")
    assert "collective_candidates" not in params


# Invented, in the shape of NVIDIA/nccl#340's all_gather rows (nccl-tests of early 2020 on 2 GPUs: no redop
# or root column, busbw printed equal to algbw, which proves no rank count), with its footer.
OLD_ALL_GATHER_TWO_GPUS = """\
     1048576        131072   float    46.12   11.37   11.37  0e+00    45.80   11.45   11.45  0e+00
     2097152        262144   float    69.93   14.99   14.99  0e+00    70.10   14.96   14.96  0e+00
     4194304        524288   float    118.4   17.71   17.71  0e+00    116.9   17.94   17.94  0e+00
     8388608       1048576   float    211.0   19.88   19.88  0e+00    209.7   20.00   20.00  0e+00
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 17.4123
"""


def test_the_count_column_counts_the_ranks_of_an_old_all_gather() -> None:
    out = collect(OLD_ALL_GATHER_TWO_GPUS)
    bench = the_bench(out)
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert (bench["ranks"], bench["nodes"], bench["collective"]) == (2, None, None)
    assert params["ranks_source"].endswith(
        "x 2 on every row, as all_gather, reduce_scatter, alltoall, gather and scatter print it: 2 ranks)"
    )
    assert params["collective_candidates"] == "all_gather, gather, scatter"


def test_an_all_reduce_count_column_says_nothing_of_its_ranks() -> None:
    """size = count x 4 B on an all_reduce's rows: the factor, not the count, gives its 8 ranks."""
    out = collect(
        "\n".join(
            f"{size:12d}  {size // 4:12d}     float     sum      -1    {t:6.1f}  {size / t / 1e3:6.2f}  "
            f"{size / t / 1e3 * 1.75:6.2f}      0    {t:6.1f}  {size / t / 1e3:6.2f}  {size / t / 1e3 * 1.75:6.2f}      0"
            for size, t in ((1 << 20, 30.1), (1 << 21, 41.7), (1 << 22, 60.2), (1 << 23, 95.5))
        )
        + "\n"
    )
    bench = the_bench(out)
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert (bench["ranks"], bench["collective"]) == (8, "all_reduce")
    assert params["ranks_source"].startswith("the busbw factor")


# Invented, in the shape of NVIDIA/nccl-tests#294's rows (nccl-tests built without MPI=1, started by mpirun
# on H100 nodes with NCCL_ALGO=NVLSTree): every process runs its own one-rank test, their rows interleave (a
# size printed again), busbw is 0.00 and an in-place time is a launch, a third of a microsecond.
ONE_RANK_PROCESSES_INTERLEAVED = """\
   134217728      33554432     float     sum      -1    598.2  224.37    0.00      0     0.42  319565.90    0.00      0
   134217728      33554432     float     sum      -1    433.9  309.33    0.00      0     0.33  406720.39    0.00      0
   268435456      67108864     float     sum      -1    961.0  279.33    0.00      0     0.35  766958.45    0.00      0
   268435456      67108864     float     sum      -1    815.6  329.13    0.00      0     0.31  865920.83    0.00      0
   536870912     134217728     float     sum      -1   2180.7  246.19    0.00      0     0.32  1677721.60    0.00      0
"""


def test_rows_printing_busbw_0_at_hundreds_of_gb_s_are_one_rank_each() -> None:
    assert nccl_tests.detect(ONE_RANK_PROCESSES_INTERLEAVED) > 0  # sizes repeat: processes interleaved
    out = collect(ONE_RANK_PROCESSES_INTERLEAVED)
    bench = the_bench(out)
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert (bench["ranks"], bench["nodes"], bench["gpus_per_node"], bench["collective"]) == (1, 1, 1, None)
    assert params["ranks_source"].startswith("busbw 0.00 on every row, 10 of them at an algbw of 224.37 GB/s")
    assert "collective_candidates" not in params


def test_a_one_rank_bench_found_by_its_busbw_is_flagged_as_measuring_no_link(
    db_path: Path, tmp_path: Path
) -> None:
    log = tmp_path / "interleaved.log"
    log.write_text(ONE_RANK_PROCESSES_INTERLEAVED)
    ingest(db_path, log)
    rules = [r for (r,) in sql(db_path, "SELECT rule FROM flags ORDER BY rule")]
    assert "one_rank_bench" in rules


def test_small_rows_printing_busbw_0_prove_nothing() -> None:
    """0.00 where algbw is 0.01 is rounding, not one rank."""
    out = collect(
        SMALL_REDUCE_SCATTER_ROWS.replace("float     sum", "float     max").replace(" 0.01", " 0.00")
    )
    assert the_bench(out)["ranks"] == 8  # the count column still counts them
    rows = "\n".join(
        f"{s:12d}  {s // 4:12d}     float     sum      -1    12.1    0.00    0.00      0    12.0    0.00    0.00      0"
        for s in (8, 16, 32, 64)
    )
    assert the_bench(collect(rows + "\n"))["ranks"] is None
