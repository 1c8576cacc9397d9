"""The per-iteration flags (nccl_straggler, nccl_jitter) on the samples and on JSON reports written here
with a known straggler, a slow node, noise only, or too few processes; plus the text layouts of the
current nccl-tests release (split groups, -I, -S, -C, -M) that feed them."""

from __future__ import annotations

import json
import random
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SAMPLES
from tracelog import api
from tracelog.store import Store

JSON_SAMPLE = SAMPLES / "nccl_tests_all_reduce_per_iter_2x4xh100.json"
TEXT_SAMPLE = SAMPLES / "nccl_split_per_iter_cputime_2x4xh100.txt"
SIZES = [1 << k for k in range(10, 28, 2)]  # 1 KiB .. 128 MiB: 9 sizes


def per_process_report(
    hosts: list[str], slow: dict[int, float], slow_sizes: int = len(SIZES), seed: int = 5, iters: int = 20
) -> dict[str, Any]:
    """A -J -I 1 report of len(hosts) processes (one GPU each): process p's times x slow[p] at the
    first `slow_sizes` sizes, +-1.5% noise everywhere."""
    rng = random.Random(seed)
    devices = [
        {"rank": p, "group": 0, "pid": 100 + p, "hostname": h, "device": 0} for p, h in enumerate(hosts)
    ]
    results = []
    for k, size in enumerate(SIZES):
        base = 20 + size / 50e3
        row: dict[str, Any] = {
            "size": size,
            "count": size // 4,
            "type": "float",
            "redop": "sum",
            "root": "-1",
        }
        for placement in ("out_of_place", "in_place"):
            procs = [
                [
                    base * rng.uniform(0.985, 1.015) * (slow.get(p, 1.0) if k < slow_sizes else 1.0)
                    for _ in range(iters)
                ]
                for p in range(len(hosts))
            ]
            times = [max(col) for col in zip(*procs, strict=True)]
            ordered = sorted(times)
            row[placement] = {"time": sum(times) / iters, "alg_bw": 1.0, "bus_bw": 1.0, "nwrong": 0}
            row[placement + "_per_iter"] = {
                "p50_us": ordered[iters // 2],
                "p99_us": ordered[-1],
                "times_us": times,
                "per_process_max_times_us": procs,
            }
        results.append(row)
    doc: dict[str, Any] = {"version": 3, "args": ["./all_reduce_perf", "-I", "1"], "nccl_version": 22703}
    doc["config"] = {"nthreads": 1, "ngpus": 1, "iterations": iters, "devices": devices}
    doc["results"] = results
    doc["average_bus_bandwidth"] = {"bandwidth": 1.0, "okay": "unchecked"}
    return doc


def flags_of(tmp_path: Path, source: Path | dict[str, Any], **thresholds: str) -> dict[str, list[dict]]:
    if isinstance(source, dict):
        path = tmp_path / "report.json"
        path.write_text(json.dumps(source, separators=(",", ":")))
        source = path
    with Store(tmp_path / "t.duckdb") as store:
        api.ingest(store, [str(source)])
        if thresholds:
            api.refresh(store, thresholds=thresholds)
        out: dict[str, list[dict]] = {}
        for flag in api.flags(store).to_dict("records"):
            out.setdefault(flag["rule"], []).append(flag)
    return out


# ---- stragglers -------------------------------------------------------------------------------------


def test_the_samples_slow_process_is_named_with_its_host(tmp_path: Path) -> None:
    (flag,) = flags_of(tmp_path, JSON_SAMPLE)["nccl_straggler"]
    assert flag["row_ref"] == "process 5"
    assert "dgx-b08" in flag["message"]
    assert flag["ratio"] == pytest.approx(1.17, abs=0.03)  # the sample's process 5 runs 17% slow
    assert "analyze_perf_json.py" in flag["hint"]


def test_a_node_whose_processes_are_all_slow_is_one_flag_for_the_node(tmp_path: Path) -> None:
    hosts = ["a", "a", "b", "b", "c", "c"]
    doc = per_process_report(hosts, slow={4: 1.3, 5: 1.3})
    (flag,) = flags_of(tmp_path, doc)["nccl_straggler"]
    assert flag["row_ref"] == "host c"
    assert flag["message"].startswith("node c (all 2 of its processes)")


@pytest.mark.parametrize(
    ("hosts", "slow", "slow_sizes"),
    [
        (["a"] * 4 + ["b"] * 4, {}, len(SIZES)),  # noise only
        (["a"] * 4 + ["b"] * 4, {3: 1.4}, 2),  # slow at 2 of 9 sizes: not consistent
        (["a"] * 4 + ["b"] * 4, {3: 1.05}, len(SIZES)),  # 5% slow: under the 10% margin
        (["a", "b"], {1: 1.4}, len(SIZES)),  # 2 processes: no majority to call one typical
    ],
    ids=["noise", "two-sizes", "five-percent", "two-processes"],
)
def test_no_process_straggler_without_a_consistent_margin(
    tmp_path: Path, hosts: list[str], slow: dict[int, float], slow_sizes: int
) -> None:
    flags = flags_of(tmp_path, per_process_report(hosts, slow, slow_sizes)).get("nccl_straggler", [])
    assert [f for f in flags if f["row_ref"].startswith("process")] == []


def test_thresholds_move_the_straggler_margin(tmp_path: Path) -> None:
    doc = per_process_report(["a"] * 4 + ["b"] * 4, {3: 1.05})
    (flag,) = flags_of(tmp_path, doc, straggler_process="1.03")["nccl_straggler"]
    assert flag["row_ref"] == "process 3"


# ---- jitter -----------------------------------------------------------------------------------------


def test_jitter_names_the_sizes_whose_p99_is_far_above_the_median(tmp_path: Path) -> None:
    (flag,) = flags_of(tmp_path, JSON_SAMPLE)["nccl_jitter"]
    doc = json.loads(JSON_SAMPLE.read_text())
    ratios = {
        r["size"]: max(
            r[k]["p99_us"] / r[k]["p50_us"] for k in ("out_of_place_per_iter", "in_place_per_iter")
        )
        for r in doc["results"]
    }
    jittery = sorted(size for size, ratio in ratios.items() if ratio > 1.5)
    assert jittery == [524288, 8388608]  # the two sizes the sample spikes at
    assert "512 KiB, 8 MiB" in flag["message"]
    assert flag["measured"] == pytest.approx(max(ratios.values()))
    assert "-n 200" in flag["hint"] and "-K 1" in flag["hint"]


def test_text_output_jitter_is_against_the_mean_and_says_so(tmp_path: Path) -> None:
    (flag,) = flags_of(tmp_path, TEXT_SAMPLE)["nccl_jitter"]
    assert "mean time (the text output prints no median)" in flag["message"]
    assert flag["measured"] == pytest.approx(572.37 / 278.24, rel=1e-3)  # the 16 MiB line, out-of-place


def test_a_higher_jitter_threshold_silences_it(tmp_path: Path) -> None:
    assert "nccl_jitter" not in flags_of(tmp_path, JSON_SAMPLE, jitter="3")


# ---- the text layouts that feed them -----------------------------------------------------------------


def query(tmp_path: Path, sql: str) -> list[tuple]:
    with Store(tmp_path / "t.duckdb") as store:
        api.ingest(store, [str(TEXT_SAMPLE)])
        return store.con.execute(sql).fetchall()


def test_split_groups_make_the_bench_the_communicator_of_rank_0(tmp_path: Path) -> None:
    benches = query(tmp_path, "SELECT ranks, nodes, gpus_per_node FROM benches ORDER BY bench_id")
    assert benches[0] == (4, 2, 2)  # NCCL_TESTS_SPLIT="MOD 2": ranks 0 2 4 6, two per host
    lines = TEXT_SAMPLE.read_text().splitlines()
    row = next(line for line in lines if line.strip().startswith("268435456"))
    algbw, busbw = float(row.split()[6]), float(row.split()[7])
    assert busbw / algbw == pytest.approx(2 * 3 / 4, rel=0.01)  # the all-reduce factor of 4 ranks, not 8


def test_split_groups_are_kept_per_device(tmp_path: Path) -> None:
    rows = query(tmp_path, "SELECT rank, comm_group FROM bench_devices WHERE bench_id = 1 ORDER BY rank")
    assert rows == [(r, r % 2) for r in range(8)]
    params = dict(query(tmp_path, "SELECT name, value FROM bench_params WHERE bench_id = 1"))
    assert (params["comm_groups"], params["world_ranks"]) == ("2", "8")


def test_per_iteration_columns_and_timestamps_are_stored(tmp_path: Path) -> None:
    (row,) = query(
        tmp_path,
        "SELECT i_min_us, i_max_us, i_p99_us, i_cv_pct, printed_at FROM collectives "
        "WHERE bench_id = 1 AND size_bytes = 16777216 AND placement = 'out-of-place'",
    )
    line = next(x for x in TEXT_SAMPLE.read_text().splitlines() if x.strip().startswith("16777216"))
    fields = line.split()
    assert row[:4] == tuple(float(f) for f in fields[9:13])
    assert row[4] == datetime.strptime(" ".join(fields[-2:]), "%Y-%m-%d %H:%M:%S")


def test_cputime_lands_apart_from_the_cuda_time(tmp_path: Path) -> None:
    rows = query(tmp_path, "SELECT time_us, cpu_time_us FROM collectives WHERE bench_id = 2")
    assert rows and all(t is None and c > 0 for t, c in rows)


def test_the_memory_report_after_the_conclusion_belongs_to_its_bench(tmp_path: Path) -> None:
    params = dict(query(tmp_path, "SELECT name, value FROM bench_params WHERE bench_id = 1"))
    assert int(params["memory_total_bytes"]) == round(2.51 * 2**30)
    assert int(params["memory_collective_bytes"]) == round(258.0 * 2**20)
    assert query(tmp_path, "SELECT count(*) FROM unparsed") == [(0,)]
