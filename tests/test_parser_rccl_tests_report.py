"""rccl-tests' own results file (`--output_file`, JSON fragments, a JSON list or CSV): rows, benches,
placement, wrong values, the CSV header of MPI builds that named no `nodes` column, and detection.

FRAGMENTS is verbatim from ROCm/rccl-tests pull request #93 (https://github.com/ROCm/rccl-tests/pull/93,
its description's example of the JSON written without MPI_SUPPORT: the first five records). The other
samples are invented, written in the shapes the same project published: the JSON list of ROCm/rccl-tests
#140 (the same records joined by commas in brackets) and the MPI build's CSV header and row of
ROCm/rocm-systems#6004; their figures are not measurements.
"""

from __future__ import annotations

import pytest

from tests.conftest import rows_by_table
from tracelog import parsers
from tracelog.parsers import rccl_tests_report

FRAGMENTS = """\
{"#wrong":"0","algBw":0.05337739748698796,"busBw":0.08006609623048194,"gpus":4,"inPlace":0,"name":"AllReduce","redop":"sum","size":1024,"time":19.184150000000002,"type":"float"}
{"#wrong":"0","algBw":0.05146336376406259,"busBw":0.07719504564609389,"gpus":4,"inPlace":1,"name":"AllReduce","redop":"sum","size":1024,"time":19.897650000000002,"type":"float"}
{"#wrong":"0","algBw":0.10542219065047241,"busBw":0.1581332859757086,"gpus":4,"inPlace":0,"name":"AllReduce","redop":"sum","size":2048,"time":19.426650000000002,"type":"float"}
{"#wrong":"0","algBw":0.10108488563785155,"busBw":0.15162732845677732,"gpus":4,"inPlace":1,"name":"AllReduce","redop":"sum","size":2048,"time":20.260200000000005,"type":"float"}
{"#wrong":"0","algBw":0.2051934584565905,"busBw":0.30779018768488575,"gpus":4,"inPlace":0,"name":"AllReduce","redop":"sum","size":4096,"time":19.961650000000002,"type":"float"}
"""

# invented: an MPI build's records (16 ranks on 2 nodes) as one JSON list, two collectives one after the other
LIST = """\
[{"#wrong":"0","algBw":61.2,"busBw":57.4,"gpusPerRank":1,"inPlace":0,"name":"AllGather","nodes":2,"numCycle":0,"ranks":16,"ranksPerNode":8,"redop":"none","size":33554432,"time":548.3,"type":"float"},
{"#wrong":"0","algBw":62.0,"busBw":58.1,"gpusPerRank":1,"inPlace":1,"name":"AllGather","nodes":2,"numCycle":0,"ranks":16,"ranksPerNode":8,"redop":"none","size":33554432,"time":541.2,"type":"float"},
{"#wrong":"12","algBw":40.1,"busBw":37.6,"gpusPerRank":1,"inPlace":0,"name":"AlltoAll","nodes":2,"numCycle":0,"ranks":16,"ranksPerNode":8,"redop":"none","size":33554432,"time":836.8,"type":"float"},
{"#wrong":"0","algBw":40.3,"busBw":37.8,"gpusPerRank":1,"inPlace":1,"name":"AlltoAll","nodes":2,"numCycle":0,"ranks":16,"ranksPerNode":8,"redop":"none","size":33554432,"time":832.6,"type":"float"}]
"""

# invented, in the shape ROCm/rocm-systems#6004 shows: the MPI header without `nodes`, rows printing it
CSV_BEFORE_6004 = """\
numCycle,collective,ranks,rankspernode,gpusperrank,size,type,redop,inplace,time,algbw,busbw,#wrong
0,"AllReduce",1,8,8,1,1048576,"float","sum",0,55.66,18.84,32.97,"0"
0,"AllReduce",1,8,8,1,1048576,"float","sum",1,54.90,19.10,33.42,"0"
0,"AllReduce",1,8,8,1,2097152,"float","sum",0,71.20,29.45,51.54,"0"
"""


def parsed(text: str) -> dict[str, list[dict]]:
    return rows_by_table(rccl_tests_report.parse, text)


def test_published_fragments_are_one_all_reduce_bench_of_four_gpus() -> None:
    out = parsed(FRAGMENTS)
    (bench,) = out["benches"]
    assert (bench["tool"], bench["collective"], bench["ranks"]) == ("rccl-tests", "all_reduce", 4)
    assert (bench["nodes"], bench["gpus_per_node"], bench["status"]) == (1, 4, "complete")
    rows = out["collectives"]
    assert [(r["size_bytes"], r["placement"]) for r in rows] == [
        (1024, "out-of-place"),
        (1024, "in-place"),
        (2048, "out-of-place"),
        (2048, "in-place"),
        (4096, "out-of-place"),
    ]
    assert rows[4]["busbw_gbps"] == pytest.approx(0.30779018768488575)
    assert rows[1]["time_us"] == pytest.approx(19.89765)
    assert {r["wrong"] for r in rows} == {0} and "unparsed" not in out


def test_a_json_list_splits_benches_by_collective_and_keeps_wrong_values() -> None:
    out = parsed(LIST)
    gather, alltoall = out["benches"]
    assert (gather["collective"], gather["ranks"], gather["nodes"], gather["gpus_per_node"]) == (
        "all_gather",
        16,
        2,
        8,
    )
    assert (alltoall["collective"], alltoall["status"], alltoall["wrong_total"]) == (
        "alltoall",
        "data_error",
        12,
    )
    assert [r["bench_key"] for r in out["collectives"]] == [0, 0, 1, 1]
    assert out["collectives"][0]["redop"] is None  # "none" is no reduction


def test_sizes_starting_again_open_a_second_bench() -> None:
    again = FRAGMENTS + FRAGMENTS.splitlines(keepends=True)[0]
    assert len(parsed(again)["benches"]) == 2


def test_csv_rows_of_a_header_without_nodes_take_it_after_collective() -> None:
    out = parsed(CSV_BEFORE_6004)
    (bench,) = out["benches"]
    assert (bench["collective"], bench["ranks"], bench["nodes"], bench["gpus_per_node"]) == (
        "all_reduce",
        8,
        1,
        8,
    )
    first = out["collectives"][0]
    assert (first["size_bytes"], first["type"], first["redop"], first["placement"]) == (
        1048576,
        "float",
        "sum",
        "out-of-place",
    )
    assert (first["algbw_gbps"], first["busbw_gbps"]) == (18.84, 32.97)


def test_a_line_that_is_no_record_stays_unparsed() -> None:
    out = parsed(FRAGMENTS + "# Writing results to out.json\n")
    assert [u["text"] for u in out["unparsed"]] == ["# Writing results to out.json"]


@pytest.mark.parametrize("text", [FRAGMENTS, LIST, CSV_BEFORE_6004])
def test_detected_as_the_rccl_tests_report(text: str) -> None:
    assert parsers.detect(text, "results.json") is rccl_tests_report


def test_the_nccl_tests_json_report_is_not_claimed() -> None:
    head = '{"version":3,"start_time":"2025-01-01 00:00:00","args":["./all_reduce_perf"],"nccl_version":22703'
    assert rccl_tests_report.detect(head) == 0
