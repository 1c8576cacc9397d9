"""nccl-tests `-J` JSON reports (src/util.cu's writer): the sample, pretty-printed copies, files cut short,
NaN and infinities, missing fields, garbage, and the streaming promise (frames, not the whole file)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import SAMPLES, source_of
from tests.test_hostile_input import peak_rss_mib
from tracelog import api, parsers
from tracelog.errors import TracelogError
from tracelog.parsers import nccl_tests_json
from tracelog.parsers.base import head_text
from tracelog.parsers.json_events import MAX_TOKEN_BYTES, JsonEvents, Truncated
from tracelog.store import Store

SAMPLE = SAMPLES / "nccl_tests_all_reduce_per_iter_2x4xh100.json"
TEXT = SAMPLE.read_bytes()
DOC = json.loads(TEXT)


def collect(data: str | bytes) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for batch in nccl_tests_json.parse(source_of(data)):
        rows = batch.rows.to_dicts() if isinstance(batch.rows, pl.DataFrame) else list(batch.rows)
        out.setdefault(batch.table, []).extend(rows)
    return out


def compact(doc: dict[str, Any]) -> str:
    """`doc` as the tool writes it: no spaces, keys in the order given."""
    return json.dumps(doc, separators=(",", ":"))


def report(results: list[dict[str, Any]], devices: int = 2, **top: Any) -> dict[str, Any]:
    hosts = [{"rank": r, "group": 0, "pid": 10 + r, "hostname": f"n{r}", "device": 0} for r in range(devices)]
    doc: dict[str, Any] = {"version": 3, "start_time": "2026-01-01 00:00:00", "args": ["./all_gather_perf"]}
    doc |= {"env": [], "nccl_version": 22703, "config": {"nthreads": 1, "ngpus": 1, "devices": hosts}}
    doc |= {"results": results, "average_bus_bandwidth": {"bandwidth": 1.0, "okay": "unchecked"}, **top}
    return doc


def result(size: int = 1024, **fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "size": size,
        "count": size // 4,
        "type": "float",
        "redop": "none",
        "root": "    -1",
    }
    row["out_of_place"] = {"time": 10.0, "alg_bw": 0.1, "bus_bw": 0.05, "nwrong": 0.0}
    row["in_place"] = {"time": 11.0, "alg_bw": 0.09, "bus_bw": 0.045, "nwrong": 0.0}
    return row | fields


# ---- the sample -------------------------------------------------------------------------------------


def test_the_sample_is_detected_as_json_and_not_as_the_text_format() -> None:
    head = head_text(TEXT[: parsers.HEAD_BYTES])
    assert parsers.detect(head, "x.json") is nccl_tests_json
    text = (SAMPLES / "nccl_all_reduce_8xa100.txt").read_bytes()
    assert nccl_tests_json.detect(head_text(text)) == 0


def test_the_bench_comes_from_config_args_and_the_footer() -> None:
    out = collect(TEXT)
    (bench,) = out["benches"]
    assert bench["collective"] == "all_reduce"  # ./build/all_reduce_perf in args
    assert (bench["ranks"], bench["nodes"], bench["gpus_per_node"]) == (8, 2, 4)
    assert bench["hosts"] == ["dgx-b07", "dgx-b08"]
    assert bench["avg_busbw_gbps"] == DOC["average_bus_bandwidth"]["bandwidth"]
    assert (bench["status"], bench["wrong_total"], bench["out_of_bounds"]) == ("complete", 0, 0)
    params = {p["name"]: p["value"] for p in out["bench_params"]}
    assert params["iterations"] == "20"
    assert params["per_iter_timing"] == "true"
    assert params["NCCL_IB_HCA"] == "mlx5_0,mlx5_3,mlx5_4,mlx5_5"
    assert "HOME" not in params and "PATH" not in params  # only NCCL_* of env is kept
    assert params["command"].startswith("./build/all_reduce_perf -b 8")


def test_results_become_collectives_with_the_per_iteration_summary() -> None:
    out = collect(TEXT)
    assert len(out["collectives"]) == 2 * len(DOC["results"])
    last = DOC["results"][-1]
    row = next(
        r for r in out["collectives"] if r["size_bytes"] == last["size"] and r["placement"] == "in-place"
    )
    summary = last["in_place_per_iter"]
    assert row["time_us"] == last["in_place"]["time"]
    assert row["busbw_gbps"] == last["in_place"]["bus_bw"]
    assert (row["i_p50_us"], row["i_p99_us"], row["i_cv_pct"]) == (
        summary["p50_us"],
        summary["p99_us"],
        summary["cv_pct"],
    )
    assert (row["root"], row["redop"], row["wrong"], row["cpu_time_us"]) == (None, "sum", 0, None)


def test_every_per_iteration_time_lands_with_its_process_and_host() -> None:
    out = collect(TEXT)
    rows = out["collective_iterations"]
    per_iter = [r[k] for r in DOC["results"] for k in ("out_of_place_per_iter", "in_place_per_iter")]
    assert len(rows) == sum(len(p["times_us"]) * (1 + len(p["per_process_max_times_us"])) for p in per_iter)
    first = DOC["results"][3]
    wanted = first["out_of_place_per_iter"]["per_process_max_times_us"][5]
    got = sorted(
        (r["iteration"], r["time_us"], r["host"])
        for r in rows
        if r["size_bytes"] == first["size"] and r["placement"] == "out-of-place" and r["process"] == 5
    )
    assert got == [(i, t, "dgx-b08") for i, t in enumerate(wanted)]
    overall = [r for r in rows if r["process"] is None and r["size_bytes"] == first["size"]]
    assert {r["host"] for r in overall} == {None}


def test_a_pretty_printed_copy_reads_the_same() -> None:
    pretty = json.dumps(DOC, indent=2)
    assert parsers.detect(head_text(pretty.encode()[: parsers.HEAD_BYTES]), "x.json") is nccl_tests_json
    plain, indented = collect(TEXT), collect(pretty)
    strip = [{k: v for k, v in r.items() if k != "line_no"} for r in plain["collectives"]]
    assert [{k: v for k, v in r.items() if k != "line_no"} for r in indented["collectives"]] == strip
    assert len(indented["collective_iterations"]) == len(plain["collective_iterations"])
    assert indented["collectives"][-1]["line_no"] > 1000  # lines of the indented file, not 1


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_events_do_not_depend_on_where_chunks_end(chunk: int) -> None:
    data = compact({"a": [1, 2.5, "nan", None], "b": {"c": "x\\/y", "d": [[3, 4], []]}}).encode()
    stream = io.BytesIO(data)
    events = list(JsonEvents(lambda n: stream.read(min(n, chunk))))
    assert events == list(JsonEvents(io.BytesIO(data).read))
    assert ("value", "x\\/y") in events


# ---- ugly files -------------------------------------------------------------------------------------


@pytest.mark.parametrize("share", [0.05, 0.3, 0.5, 0.77, 0.999])
def test_a_file_cut_short_keeps_the_results_before_the_cut(share: float) -> None:
    cut = TEXT[: int(len(TEXT) * share)]
    out = collect(cut)
    (bench,) = out["benches"]
    whole_results = sum(1 for k in range(len(DOC["results"])) if _result_end(k) <= len(cut))
    assert len(out.get("collectives", [])) == 2 * whole_results
    assert any(e["kind"] == "truncated" for e in out["events"])
    assert bench["status"] == ("partial" if whole_results else "failed")


def _result_end(k: int) -> int:
    """Byte offset just past result `k` in the sample, found by the standard library's reader."""
    start = TEXT.index(b'"results":[') + len(b'"results":[')
    decoder = json.JSONDecoder()
    for _ in range(k + 1):
        _, start = decoder.raw_decode(TEXT.decode(), start)
        start += 1  # the comma
    return start - 1


def test_nan_and_infinities_become_null_with_an_event() -> None:
    bad = result(out_of_place={"time": "nan", "alg_bw": 0.1, "bus_bw": 0.05, "nwrong": 0.0})
    text = compact(report([bad])).replace('"alg_bw":0.09', '"alg_bw":inf')
    out = collect(text)
    rows = {r["placement"]: r for r in out["collectives"]}
    assert rows["out-of-place"]["time_us"] is None
    assert rows["in-place"]["algbw_gbps"] is None
    kinds = [e["text"] for e in out["events"] if e["kind"] == "bad_value"]
    assert any("time_us" in k for k in kinds) and any("algbw_gbps" in k for k in kinds)


def test_odd_per_iteration_times_are_null_and_counted_once() -> None:
    per_iter = {"p50_us": 10.0, "times_us": [10.0, "nan", -1.0, None, 11.0]}
    out = collect(compact(report([result(out_of_place_per_iter=per_iter)])))
    times = [r["time_us"] for r in out["collective_iterations"]]
    assert times == [10.0, None, None, None, 11.0]
    (event,) = [e for e in out["events"] if e["kind"] == "bad_value"]
    assert event["text"].startswith("3 per-iteration time(s) of all processes")


def test_missing_fields_leave_nulls_not_crashes() -> None:
    no_size = {k: v for k, v in result().items() if k != "size"}
    only_in_place = {k: v for k, v in result(size=4096).items() if k != "out_of_place"}
    doc = report([no_size, only_in_place, result(size=8192, in_place=None)])
    del doc["config"]["devices"]
    out = collect(compact(doc))
    assert [(r["size_bytes"], r["placement"]) for r in out["collectives"]] == [
        (4096, "in-place"),
        (8192, "out-of-place"),
    ]
    assert any("without a size" in e["text"] for e in out["events"])
    (bench,) = out["benches"]
    assert bench["ranks"] is None and bench["status"] == "complete"


def test_errors_in_the_report_fail_the_bench() -> None:
    doc = report([result()], errors=["NCCL failure common.cu:1036 'unhandled system error'"])
    doc.pop("average_bus_bandwidth")
    out = collect(compact(doc))
    assert out["benches"][0]["status"] == "failed"  # stopped on an error, as the text parser says
    assert any(e["kind"] == "error" and "unhandled system error" in e["text"] for e in out["events"])


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"version":3,"args":["./all_reduce_perf"],"config":{"nthreads":1,,}}', "where a key belongs"),
        ('{"version":3,"results":[{"size":8 "count":2}]}', "where ',' or the end"),
        ('{"version":3,"results":[{"size":8,"out_of_place_per_iter":{"times_us":[1,[2]]}}]}', "array of"),
        ('{"version":3} {"version":3}', "after the end"),
        ("[1, 2]", "not an object"),
        ('{"version":3,"config":' + "[" * 100_000, "nested deeper than"),
    ],
)
def test_what_is_not_json_is_the_projects_error_with_the_file(text: str, words: str) -> None:
    with pytest.raises(TracelogError) as caught:
        collect(text)
    assert words in caught.value.message
    assert caught.value.path == "<test>" and caught.value.line == 1


def test_a_token_past_the_cap_is_refused_not_held() -> None:
    data = b'{"version":3,"args":["' + b"a" * (MAX_TOKEN_BYTES + 10) + b'"]}'
    with pytest.raises(TracelogError, match="longer than"):
        collect(data)


def test_an_unterminated_string_at_the_end_is_a_truncation() -> None:
    with pytest.raises(Truncated):
        list(JsonEvents(io.BytesIO(b'{"a": "open').read))


# ---- streaming --------------------------------------------------------------------------------------


def test_long_arrays_leave_in_frames_of_bounded_size(tmp_path: Path) -> None:
    iterations = 3 * nccl_tests_json.FRAME_ROWS + 17
    per_iter = {"times_us": [10.0 + (i % 7) for i in range(iterations)]}
    data = compact(report([result(out_of_place_per_iter=per_iter)]))
    heights = [len(b) for b in nccl_tests_json.parse(source_of(data)) if b.table == "collective_iterations"]
    assert sum(heights) == iterations
    assert max(heights) == nccl_tests_json.FRAME_ROWS
    assert len(heights) == 4


def test_ingest_through_the_cli_stores_every_table(tmp_path: Path) -> None:
    with Store(tmp_path / "t.duckdb") as store:
        (res,) = api.ingest(store, [str(SAMPLE)])
        assert res.format == "nccl_tests_json"
        count = store.scalar("SELECT count(*) FROM collective_iterations WHERE process = 5")
        assert count == 20 * 2 * len(DOC["results"])
        assert store.scalar("SELECT count(DISTINCT comm_group) FROM bench_devices") == 1


def test_a_report_ingested_while_written_is_read_again_once_it_grew(tmp_path: Path) -> None:
    path = tmp_path / "ar.json"
    path.write_bytes(TEXT[: len(TEXT) // 2])  # nccl-tests writes the file as the sweep goes
    with Store(tmp_path / "t.duckdb") as store:
        (first,) = api.ingest(store, [str(path)])
        assert store.scalar("SELECT status FROM benches") == "partial"
        path.write_bytes(TEXT)
        (second,) = api.ingest(store, [str(path)])
        assert second.status == "appended"
        assert store.scalar("SELECT status FROM benches") == "complete"
        assert store.scalar("SELECT count(*) FROM collectives") == 2 * len(DOC["results"])


def write_big_report(path: Path, processes: int, sizes: int, iterations: int = 1000) -> int:
    """A -I 1 report of `processes` x `iterations` numbers per size and placement; the numbers it holds."""
    row = "[" + ",".join(["30.125000"] * iterations) + "]"
    per_iter = {"times_us": "@TIMES@", "per_process_max_times_us": "@PROCS@"}
    body = compact(report([result(8 << k, out_of_place_per_iter=per_iter) for k in range(sizes)]))
    body = body.replace('"@TIMES@"', row).replace('"@PROCS@"', "[" + ",".join([row] * processes) + "]")
    path.write_text(body)
    return sizes * iterations * (processes + 1)


def test_memory_stays_flat_as_the_report_grows(tmp_path: Path) -> None:
    peaks = []
    for name, processes in (("small", 16), ("large", 128)):
        path = tmp_path / f"{name}.json"
        numbers = write_big_report(path, processes, sizes=20)
        peak, stdout, stderr, status = peak_rss_mib(
            f"""
            from tracelog.parsers import nccl_tests_json
            from tracelog.parsers.base import LineSource
            rows = 0
            with open({str(path)!r}, "rb") as f:
                for batch in nccl_tests_json.parse(LineSource(f, "x")):
                    if batch.table == "collective_iterations":
                        rows += len(batch)
            print(rows)
            """
        )
        assert status == 0, stderr
        assert int(stdout) == numbers
        peaks.append((path.stat().st_size >> 20, peak))
    (small_mib, small_peak), (large_mib, large_peak) = peaks
    assert large_mib >= 7 * small_mib  # about 26 MB against 3.4 MB
    print(f"peak RSS {small_peak:.0f} MiB at {small_mib} MiB, {large_peak:.0f} MiB at {large_mib} MiB")
    assert large_peak - small_peak < 48  # a chunk and a frame, not the file


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(
    cut=st.integers(0, len(TEXT)),
    at=st.integers(0, len(TEXT) - 1),
    junk=st.binary(max_size=12)
    | st.sampled_from([b"nan", b"-inf", b"]", b"}", b'"', b",,", b"\\u12", b"1e999"]),
)
def test_hostile_edits_give_rows_or_the_projects_error(cut: int, at: int, junk: bytes) -> None:
    """Any cut and splice of the sample parses to rows and events, or raises TracelogError naming the
    file; never another exception."""
    data = (TEXT[:at] + junk + TEXT[at:])[: max(cut, 1)]
    try:
        out = collect(data)
    except TracelogError as exc:
        assert exc.path == "<test>" and exc.line is not None
        return
    assert len(out["benches"]) == 1
    for row in out.get("collective_iterations", []):
        assert row["time_us"] is None or row["time_us"] >= 0


def test_an_integer_past_any_float_is_no_figure_not_a_crash() -> None:
    """Found by the fuzzer: `float()` of an integer of hundreds of digits raised OverflowError."""
    from tracelog.parsers.nccl_tests_json import number

    assert number(10**400) is None
    assert number(12) == 12.0 and number("nan") != number("nan")


def test_a_count_past_int64_is_no_figure_not_a_crash() -> None:
    """Found by the fuzzer: a float such as 1e40 where a size or count belongs became a Python int that no
    integer column holds, and building the per-iteration frame raised OverflowError."""
    from tracelog.parsers.nccl_tests_json import _Iterations, integer

    assert integer(1e40) is None and integer(-1e19) is None
    assert integer(2.0**62) == 2**62 and integer("12") == 12
    rows = _Iterations()
    rows.add({"size_bytes": 8, "root": 2**40, "process": 1}, [1.5, None], 0)
    frame = rows.flush().rows
    assert frame["root"].to_list() == [None, None] and frame["time_us"].to_list() == [1.5, None]
