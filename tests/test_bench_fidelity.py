"""benchmarks/bench_fidelity.py, the model's busbw across nodes against measured benches, run on the
bundled samples (and the corpus where present), so that the benchmark cannot rot unnoticed."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.conftest import CORPUS, ROOT

BENCH = ROOT / "benchmarks" / "bench_fidelity.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_fidelity", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_fidelity"] = module
    spec.loader.exec_module(module)
    return module


bench_fidelity = _load()


def test_the_samples_multi_node_benches_are_scored() -> None:
    result = bench_fidelity.score(None)
    rows = {r["file"]: r for r in result["benches"]}
    assert set(rows) == set(bench_fidelity.SAMPLE_FILES)
    assert all(r["nodes"] == 2 and r["op"] == "all_reduce" and r["kind"] == "sample" for r in rows.values())
    # each ratio is the measured peak over the model's plateau, as `compare` stores them
    for r in rows.values():
        assert r["ratio"] == pytest.approx(r["measured_peak"] / r["model_plateau"])
    # 16 H100 on two NDR nodes: within 20 % of the model; the JSON sample's invented curve far under it
    assert abs(rows["nccl_mpi_all_reduce_2x8xh100.txt"]["ratio"] - 1) <= bench_fidelity.TARGET
    assert rows["nccl_tests_all_reduce_per_iter_2x4xh100.json"]["ratio"] < 0.6
    sample = result["sample"]
    assert sample["n"] == 3 and sample["within"] == sum(abs(r["ratio"] - 1) <= 0.2 for r in rows.values())
    assert "invented" in bench_fidelity.render(result)


@pytest.mark.skipif(not (CORPUS / "allreduce_bench").is_dir(), reason="corpus absent")
def test_the_corpus_faults_are_counted_apart() -> None:
    result = bench_fidelity.score(CORPUS)
    corpus = [r for r in result["benches"] if r["kind"] == "corpus"]
    faults = {(r["file"], r["bench"]) for r in corpus if r["known_fault"]}
    assert faults == set(bench_fidelity.KNOWN)
    jean_zay = next(r for r in corpus if r["file"].startswith("bigscience_all_reduce_bench"))
    assert jean_zay["fabric"] == "opa-100-x4" and jean_zay["ratio"] < 0.2
    assert result["corpus"]["n"] == len(corpus) - len(faults)


def test_published_figures_without_a_file_are_scored_and_within_target() -> None:
    figures = bench_fidelity.published_figures()
    assert len(figures) == len(bench_fidelity.PUBLISHED_FIGURES)
    tested = [f for f in figures if not f["sets"]]
    # every figure the model did not take a constant from: within 20 % (the target)
    assert all(abs(f["ratio"] - 1) <= bench_fidelity.TARGET for f in tested), [
        (f["source"], round(f["ratio"], 2)) for f in tested
    ]
    across = [f for f in tested if f["nodes"] > 1]
    assert len(across) >= 3
    # NVLS turned off, the same two nodes are held to the ring (NVIDIA/nccl#1221: 330 GB/s)
    off = next(f for f in figures if "NCCL_NVLS_ENABLE=0" in f["source"])
    assert off["algorithm"] == "ring" and off["ratio"] == pytest.approx(330 / (0.78 * 450))
    # a GB200 NVL72 rack's 18 hosts are one NVLink domain: NVLS over 72 GPUs (coreweave/nccl-tests#43)
    rack = next(f for f in figures if "NVL72" in f["source"])
    assert rack["algorithm"] == "nvls" and rack["ranks"] == 72
    text = bench_fidelity.render(bench_fidelity.score(None))
    assert "not a test of the model" in text and "published figures, across nodes: 4 of 4 within 20%" in text
