"""Calibration: constants fitted to measured runs and benches, stored with their subjects and errors, and
used by predict, plan and the comparisons until `--uncalibrated` asks for the textbook model."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import SAMPLES
from tracelog import api
from tracelog.analysis import calibration, link_fit, predictions
from tracelog.analysis import inputs as run_inputs
from tracelog.cli import cli
from tracelog.errors import TracelogError
from tracelog.hardware import link
from tracelog.model.collectives import BUSBW_FACTOR, RING_STEPS, Placement, predict_nccl
from tracelog.model.timing import predict_iteration

BLOOM_LOG = str(SAMPLES / "megatron_deepspeed_bloom_ugly.log")


def run_cli(db: Path, *args: str):
    return CliRunner().invoke(cli, ["--db", str(db), *args], catch_exceptions=False)


# --- compute scale ------------------------------------------------------------------------------------


def single_gpu_run(run_id: int, layers: int, hidden: int, mbs: int, gbs: int) -> run_inputs.RunInputs:
    """A one-GPU run (no communication, no bubble: its time is all compute) as the model reads it."""
    row = {
        "run_id": run_id,
        "framework": "megatron",
        "gpus": 1,
        "gpus_per_node": 8,
        "tp": 1,
        "pp": 1,
        "dp": 1,
        "mbs": mbs,
        "gbs": gbs,
        "seq_len": 2048,
        "layers": layers,
        "hidden": hidden,
        "heads": hidden // 128,
        "vocab": 50304,
        "precision": "bf16",
        "recompute": "none",
        "zero_stage": 0,
        "gpu_model": "h100-sxm5-80gb",
    }
    return run_inputs.build(row, {})


SHAPES = [(1, 12, 768, 4, 64), (2, 24, 2048, 2, 32), (3, 32, 4096, 1, 16), (4, 16, 1024, 8, 256)]


def test_compute_scale_recovers_a_known_slowdown() -> None:
    # At a flat efficiency one GPU's time is all GEMMs: every run took 1.25x the textbook prediction, so
    # the GEMMs sustained 1/1.25 of the assumed efficiency.
    runs = []
    for shape in SHAPES:
        run = single_gpu_run(*shape)
        run.sec_per_it = calibration.predicted_sec_per_it(run, efficiency=0.52) * 1.25
        runs.append(run)
    (fit,) = calibration.fit_compute(runs, efficiency=0.52)
    assert fit.constant == "compute_scale"
    assert fit.scope == "h100-sxm5-80gb/bf16"
    assert fit.value == pytest.approx(1 / 1.25, rel=0.01)
    assert fit.subject_ids == (1, 2, 3, 4)
    assert fit.uncalibrated_error == pytest.approx(math.log(1.25), rel=1e-6)
    assert fit.fit_error < 1e-6
    assert fit.heldout_error is not None and fit.heldout_error < 1e-6


def test_per_operation_model_scales_only_the_gemms() -> None:
    # The per-operation model scales each GEMM's efficiency; memory-bound operations (softmax, norms)
    # keep their time. Runs measured at the model's own time for 0.8 give back 0.8, and the same runs
    # at 1.25x the textbook time need a deeper cut than 0.8, as only part of their time scales.
    at_scale, slower = [], []
    for shape in SHAPES:
        run = single_gpu_run(*shape)
        run.sec_per_it = calibration.predicted_sec_per_it(run, 0.8)
        at_scale.append(run)
        other = single_gpu_run(*shape)
        other.sec_per_it = calibration.predicted_sec_per_it(other) * 1.25
        slower.append(other)
    (fit,) = calibration.fit_compute(at_scale)
    assert fit.value == pytest.approx(0.8, rel=1e-3)
    (deeper,) = calibration.fit_compute(slower)
    assert deeper.value < 0.8


def test_held_out_error_sees_what_the_fit_did_not() -> None:
    # Two runs at 1.25x, two at 1.6x: each left-out run is predicted from the other three's median, so
    # its error is the distance to the scale of the others, not zero.
    runs = []
    for shape, slowdown in zip(SHAPES, (1.25, 1.25, 1.6, 1.6), strict=True):
        run = single_gpu_run(*shape)
        run.sec_per_it = calibration.predicted_sec_per_it(run, efficiency=0.52) * slowdown
        runs.append(run)
    (fit,) = calibration.fit_compute(runs, efficiency=0.52)
    assert fit.heldout_error is not None
    assert fit.heldout_error > fit.fit_error
    assert fit.heldout_error > 0.05


def test_runs_without_a_time_or_a_gpu_are_left_out() -> None:
    timed = single_gpu_run(*SHAPES[0])
    timed.sec_per_it = calibration.predicted_sec_per_it(timed, efficiency=0.52) * 2
    untimed = single_gpu_run(*SHAPES[1])
    no_gpu = run_inputs.build({"run_id": 9, "gpus": 1, "tp": 1, "pp": 1, "dp": 1, "mbs": 1, "gbs": 1}, {})
    no_gpu.sec_per_it = 3.0
    (fit,) = calibration.fit_compute([timed, untimed, no_gpu], efficiency=0.52)
    assert fit.subject_ids == (timed.run_id,)
    assert fit.value == pytest.approx(0.5, rel=0.01)
    assert fit.heldout_error is None  # one run: nothing to leave out


# --- collectives --------------------------------------------------------------------------------------


def nccl_tests_text(alpha_us: float, efficiency: float, ranks: int = 8) -> str:
    """An all_reduce_perf output on one 8xA100 node whose times follow t = 2(n-1)α + S·f/(e·B)."""
    bandwidth = link("nvlink3").unidirectional_gbps
    steps, factor = RING_STEPS["all_reduce"](ranks), BUSBW_FACTOR["all_reduce"](ranks)
    lines = [
        "# nThread 1 nGpus 8 minBytes 1024 maxBytes 4294967296 step: 4(factor) warmup iters: 5 iters: 20 "
        "agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
        *(
            f"#  Rank  {r} Group  0 Pid  4172 on node-01 device  {r} [0x07] NVIDIA A100-SXM4-80GB"
            for r in range(ranks)
        ),
        "#",
        "#                                                              out-of-place                       "
        "in-place          ",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
        "   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)"
        "  (GB/s)       ",
    ]
    size = 1024
    while size <= 4 << 30:
        time = steps * alpha_us + size * factor / (efficiency * bandwidth * 1e9) * 1e6
        alg = size / time / 1e3
        cells = f"{time:8.2f} {alg:7.2f} {alg * factor:7.2f}       0"
        lines.append(f"{size:12d} {size // 4:13d}     float     sum      -1 {cells} {cells}")
        size *= 4
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 100.0", "#"]
    return "\n".join(lines) + "\n"


def test_alpha_and_efficiency_recovered_from_an_nccl_tests_table(tmp_path: Path) -> None:
    path = tmp_path / "all_reduce.txt"
    path.write_text(nccl_tests_text(alpha_us=1.5, efficiency=0.83))
    db = tmp_path / "c.duckdb"
    api.ingest(db, [str(path)])
    with api.connect(db) as store:
        curves = link_fit.bench_curves(store)
        fits = {f.constant: f for f in link_fit.fit_collectives(curves)}
    assert fits["alpha_us"].scope == "nvlink3"
    assert fits["alpha_us"].value == pytest.approx(1.5, rel=0.02)
    assert fits["link_efficiency"].value == pytest.approx(0.83, rel=0.01)
    assert fits["link_efficiency"].fit_error < 0.005
    # the textbook α = 5 µs and e = 0.78 miss these rows by more than the fit does
    assert fits["link_efficiency"].uncalibrated_error > 10 * fits["link_efficiency"].fit_error
    assert fits["link_efficiency"].heldout == "5-fold over message sizes"
    assert fits["link_efficiency"].heldout_error < 0.01


def test_a_bench_that_returned_wrong_data_is_no_figure_of_its_link(tmp_path: Path) -> None:
    # the same GPUs, once healthy and once with corrupted results (a broken link or driver) and slow: only
    # the healthy bench is fitted
    healthy, broken = tmp_path / "ok.txt", tmp_path / "bad.txt"
    healthy.write_text(nccl_tests_text(alpha_us=1.5, efficiency=0.83))
    broken.write_text(
        nccl_tests_text(alpha_us=9.0, efficiency=0.30).replace(
            "# Out of bounds values : 0 OK", "# Out of bounds values : 5 FAILED"
        )
    )
    db = tmp_path / "c.duckdb"
    api.ingest(db, [str(healthy), str(broken)])
    assert sorted(api.sql(db, "SELECT status FROM benches").status) == ["complete", "data_error"]
    with api.connect(db) as store:
        curves = link_fit.bench_curves(store)
        fits = {f.constant: f for f in link_fit.fit_collectives(curves)}
    assert [c.bench_id for c in curves] == [1]
    assert fits["link_efficiency"].value == pytest.approx(0.83, rel=0.01)


def test_bench_predictions_use_the_fitted_link(tmp_path: Path) -> None:
    path = tmp_path / "all_reduce.txt"
    path.write_text(nccl_tests_text(alpha_us=1.5, efficiency=0.83))
    db = tmp_path / "c.duckdb"
    api.ingest(db, [str(path)])
    textbook = api.sql(db, "SELECT value FROM predictions WHERE metric = 'model_plateau_busbw_gbps'")
    api.calibrate(db)
    plateau = api.sql(db, "SELECT value, formula FROM predictions WHERE metric = 'model_plateau_busbw_gbps'")
    assert plateau["value"].iloc[0] == pytest.approx(0.83 * 300, rel=0.01)
    assert plateau["value"].iloc[0] != pytest.approx(textbook["value"].iloc[0], rel=0.01)
    assert "calibrated" in plateau["formula"].iloc[0]


# --- fabrics: multi-node benches ----------------------------------------------------------------------

A100_NODES = Placement(32, 4, link("nvlink3"), link("ib-hdr-x8"), "ampere")
"""Four DGX A100 nodes of 8 GPUs, 8 HDR NICs each: the ring's network bound is e_net × 200 GB/s."""


def nccl_model_times(op: str, place: Placement, alpha: dict, efficiency: dict) -> list[tuple[int, float]]:
    """(size, time µs) of a curve NCCL's cost model gives at these constants, 1 KiB to 4 GiB."""
    sizes = [1024 * 4**k for k in range(12)]
    return [(s, predict_nccl(op, s, place, alpha, efficiency).time_us) for s in sizes]


def nccl_tests_multi_node(op: str, times: list[tuple[int, float]], nodes: int = 4, per_node: int = 8) -> str:
    """An `{op}_perf` output over `nodes` hosts of `per_node` A100s with the given times."""
    ranks = nodes * per_node
    factor = BUSBW_FACTOR[op](ranks)
    lines = [
        "# nThread 1 nGpus 1 minBytes 1024 maxBytes 4294967296 step: 4(factor) warmup iters: 5 iters: 20 "
        "agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
        *(
            f"#  Rank {r:3d} Group  0 Pid {4000 + r:5d} on dgx-a{r // per_node:02d} device  {r % per_node} "
            "[0x07] NVIDIA A100-SXM4-80GB"
            for r in range(ranks)
        ),
        "#",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
        "   busbw #wrong",
    ]
    for size, time in times:
        alg = size / time / 1e3
        cells = f"{time:10.2f} {alg:7.2f} {alg * factor:7.2f}       0"
        redop = "sum" if op in ("all_reduce", "reduce_scatter") else "none"
        lines.append(f"{size:12d} {size // 4:13d}     float {redop:>7}      -1 {cells} {cells}")
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 50.0", "#"]
    return "\n".join(lines) + "\n"


def fabric_curve(bench_id: int, op: str, alpha_net: float, e_net: float) -> link_fit.FabricCurve:
    times = nccl_model_times(op, A100_NODES, {"net": alpha_net}, {"net": e_net})
    sizes, us = zip(*times, strict=True)
    return link_fit.FabricCurve(bench_id, op, A100_NODES, tuple(map(float, sizes)), us)


def test_fabric_alpha_and_efficiency_recovered_under_nccls_cost_model() -> None:
    curves = [fabric_curve(1, "all_reduce", 6.0, 0.6), fabric_curve(2, "all_gather", 6.0, 0.6)]
    fits = {f.constant: f for f in link_fit.fit_fabrics(curves)}
    assert fits["alpha_us"].scope == fits["link_efficiency"].scope == "ib-hdr-x8"
    assert fits["alpha_us"].value == pytest.approx(6.0, rel=0.03)
    assert fits["link_efficiency"].value == pytest.approx(0.6, rel=0.01)
    assert fits["alpha_us"].default_value == 14.0  # NCCL's network step, Simple protocol
    assert fits["link_efficiency"].subject_ids == (1, 2)
    assert fits["link_efficiency"].heldout == "leave-one-bench-out"
    assert fits["link_efficiency"].fit_error < 0.01
    assert fits["link_efficiency"].heldout_error < 0.01  # each bench predicted from the other
    # the textbook network (14 µs, 96% of the NICs) misses these rows by far more than the fit
    assert fits["link_efficiency"].uncalibrated_error > 10 * fits["link_efficiency"].fit_error


def test_a_fit_left_on_its_bound_is_said_so() -> None:
    healthy = [fabric_curve(1, "all_reduce", 6.0, 0.6)]
    assert link_fit.bound_notes(link_fit.fit_fabrics(healthy)) == []
    # a 5 ms fixed cost on every call (what a bench with a slow start shows): no α up to 1 ms explains it
    slow = fabric_curve(2, "all_reduce", 6.0, 0.6)
    slow = replace(slow, times_us=tuple(t + 5000.0 for t in slow.times_us))
    fits = link_fit.fit_fabrics([slow])
    alpha = next(f for f in fits if f.constant == "alpha_us")
    assert alpha.value == pytest.approx(link_fit.ALPHA_RANGE_US[1])
    (note,) = link_fit.bound_notes(fits)
    assert note.startswith("alpha_us of ib-hdr-x8 stops at the bound") and "benches 2" in note


def test_many_benches_of_one_fabric_are_held_out_in_five_folds() -> None:
    curves = [fabric_curve(i, "all_reduce", 20.0, 0.45) for i in range(1, 8)]
    fits = {f.constant: f for f in link_fit.fit_fabrics(curves)}
    assert fits["alpha_us"].heldout == "5-fold over benches"
    assert fits["alpha_us"].value == pytest.approx(20.0, rel=0.03)
    assert fits["link_efficiency"].value == pytest.approx(0.45, rel=0.01)


def test_a_fabric_fit_starts_from_the_fitted_intra_node_link() -> None:
    # times made with NVLink at α 1.5 µs and e 0.83: the network fit only recovers its own pair when the
    # intra-node link's fitted constants are in place
    intra = calibration.Constants(collectives={"nvlink3": (1.5, 0.83)})
    times = nccl_model_times(
        "all_reduce", A100_NODES, {"nvlink": 1.5, "net": 9.0}, {"nvlink": 0.83, "net": 0.7}
    )
    sizes, us = zip(*times, strict=True)
    curve = link_fit.FabricCurve(1, "all_reduce", A100_NODES, tuple(map(float, sizes)), us)
    alpha, efficiency = link_fit.fit_fabric([curve], intra)
    assert alpha == pytest.approx(9.0, rel=0.03)
    assert efficiency == pytest.approx(0.7, rel=0.01)
    assert max(abs(x) for x in link_fit.fabric_errors([curve], intra, alpha, efficiency)) < 0.01


def test_calibrate_fits_a_multi_node_bench_and_its_prediction_uses_the_fabric(tmp_path: Path) -> None:
    single = tmp_path / "all_reduce_1x8.txt"
    single.write_text(nccl_tests_text(alpha_us=1.5, efficiency=0.83))
    multi = tmp_path / "all_reduce_4x8.txt"
    times = nccl_model_times("all_reduce", A100_NODES, {"net": 9.0}, {"net": 0.55})
    multi.write_text(nccl_tests_multi_node("all_reduce", times))
    db = tmp_path / "c.duckdb"
    api.ingest(db, [str(single)])
    api.ingest(db, [str(multi)], fabric="ib-hdr-x8")
    bench = int(api.sql(db, "SELECT max(bench_id) AS b FROM benches")["b"].iloc[0])
    where = f"subject_kind = 'collective' AND subject_id = {bench}"

    def plateau() -> tuple[float, str]:
        row = api.sql(
            db,
            f"SELECT value, formula FROM predictions WHERE {where} AND metric = 'model_plateau_busbw_gbps'",
        )
        return float(row["value"].iloc[0]), str(row["formula"].iloc[0])

    textbook, formula = plateau()
    assert textbook == pytest.approx(0.96 * 200)  # the ring over 8 HDR NICs at NCCL's 96%
    assert "calibrated" not in formula
    fitted = api.calibrate(db)
    scopes = dict(zip(fitted["constant"] + "/" + fitted["scope"], fitted["value"], strict=True))
    assert scopes["link_efficiency/ib-hdr-x8"] == pytest.approx(0.55, rel=0.02)
    # the single-node link is fitted on the single-node bench alone (its rows follow α 1.5, e 0.83)
    assert scopes["link_efficiency/nvlink3"] == pytest.approx(0.83, rel=0.01)
    value, formula = plateau()
    assert "calibrated" in formula
    assert value == pytest.approx(0.55 * 200, rel=0.02)
    ratio = api.sql(db, f"SELECT ratio FROM comparisons WHERE {where} AND metric = 'peak_busbw_gbps'")
    assert float(ratio["ratio"].iloc[0]) == pytest.approx(1.0, abs=0.03)  # 4 GB sits at the fitted plateau
    kept = api.calibrations(db)
    fabric = kept[(kept["scope"] == "ib-hdr-x8") & (kept["constant"] == "alpha_us")]
    assert [int(b) for b in fabric["subject_ids"].iloc[0]] == [bench]


def test_a_run_across_nodes_uses_the_fabric_fit_for_what_crosses_nodes(bloom) -> None:
    db, run_id = bloom
    with api.connect(db) as store:
        (run,) = [predictions.infer(r) for r in run_inputs.load(store, where=f"run_id = {run_id}")]
    assert run.fabric is not None and run.fabric.id == "opa-100-x4"  # 48 nodes: DP 8 x TP 4 spans them
    textbook = calibration.for_run(run, calibration.TEXTBOOK)
    fitted = calibration.for_run(
        run, calibration.Constants(collectives={"opa-100-x4": (40.0, 0.25), "nvlink3": (1.5, 0.83)})
    )
    assert (fitted.alpha_us, fitted.link_efficiency) == (1.5, 0.83)  # TP 4 stays inside a node
    assert (fitted.net_alpha_us, fitted.net_link_efficiency) == (40.0, 0.25)
    assert fitted.calibrated and not textbook.calibrated
    assert run.cfg is not None and run.train is not None and run.gpu is not None

    def breakdown(used: calibration.RunConstants):
        return predict_iteration(
            run.cfg, run.train, run.gpu, run.fabric, gpus_per_node=run.gpus_per_node, **used.timing
        )

    before, after = breakdown(textbook), breakdown(fitted)
    assert after.tp_comm_s < before.tp_comm_s  # NVLink at its fitted e 0.83, not the textbook 0.78
    # the data-parallel groups (8 ranks 4 apart) and the pipeline sends cross Omni-Path: a quarter of
    # the NICs' bandwidth instead of 0.78 makes them about three times slower
    assert 2.5 < after.dp_comm_total_s / before.dp_comm_total_s < 3.5
    assert after.p2p_s > 2 * before.p2p_s
    # a fabric fit alone leaves the intra-node pair at the textbook one
    net_only = calibration.for_run(run, calibration.Constants(collectives={"opa-100-x4": (40.0, 0.25)}))
    assert (net_only.alpha_us, net_only.link_efficiency) == calibration.TEXTBOOK.collective(None)


# --- the store, predict and the CLI -------------------------------------------------------------------


@pytest.fixture
def bloom(tmp_path: Path) -> tuple[Path, int]:
    db = tmp_path / "bloom.duckdb"
    api.ingest(db, [BLOOM_LOG], gpu="a100-sxm4-80gb", nodes=48, gpus_per_node=8)
    return db, int(api.sql(db, "SELECT run_id FROM runs")["run_id"].iloc[0])


def sec_per_it(frame) -> float:
    return float(frame.loc[frame["figure"] == "seconds per iteration", "value"].iloc[0])


def test_predictions_follow_calibration_and_revert_uncalibrated(bloom) -> None:
    db, run_id = bloom
    measured = api.sql(db, f"SELECT sec_per_it FROM run_summary WHERE run_id = {run_id}").iloc[0, 0]
    textbook = sec_per_it(api.predict(db, run_id))
    api.calibrate(db)
    calibrated = sec_per_it(api.predict(db, run_id))
    # fitted on this one run, the model now predicts its measured time; the textbook one did not
    assert abs(textbook / measured - 1) > 0.01
    assert calibrated == pytest.approx(measured, rel=1e-3)
    assert sec_per_it(api.predict(db, run_id, calibrated=False)) == pytest.approx(textbook, rel=1e-9)
    stored = api.sql(
        db,
        f"SELECT predicted, detail FROM comparisons c JOIN predictions p USING (subject_kind, subject_id, metric) "
        f"WHERE subject_id = {run_id} AND metric = 'sec_per_it'",
    )
    assert stored["predicted"].iloc[0] == pytest.approx(measured, rel=1e-3)
    constants = json.loads(stored["detail"].iloc[0])["constants"]
    assert constants["calibrated"] is True
    assert constants["compute_scale"] == pytest.approx(textbook / measured, rel=0.05)


def test_calibrations_keep_subjects_and_errors(bloom) -> None:
    db, run_id = bloom
    api.calibrate(db)
    api.calibrate(db)  # a refit replaces, it does not add
    rows = api.calibrations(db)
    assert list(rows["constant"]) == ["compute_scale"]
    row = rows.iloc[0]
    assert row["scope"] == "a100-sxm4-80gb/fp16"  # the BLOOM sample log trains in fp16
    assert list(row["subject_ids"]) == [run_id]
    assert row["n"] == 1
    assert row["fit_error"] < 1e-3
    assert row["uncalibrated_error"] > row["fit_error"]


def test_plan_uses_the_compute_scale(bloom) -> None:
    db, _ = bloom
    request = dict(gpus=384, gpu="a100-sxm4-80gb", layers=72, hidden=14336, heads=112, seq_len=2048)
    request |= dict(vocab=250880, gbs=2048, zero_stage=1, precision="fp16", top=1)  # as the run
    textbook = api.plan(db, api.PlanRequest(**request))["pred_sec_per_it"].iloc[0]
    api.calibrate(db)
    scale = float(api.calibrations(db)["value"].iloc[0])
    calibrated = api.plan(db, api.PlanRequest(**request))
    uncalibrated = api.plan(db, api.PlanRequest(**request, compute_scale=1.0))
    assert uncalibrated["pred_sec_per_it"].iloc[0] == pytest.approx(textbook)
    assert calibrated["pred_sec_per_it"].iloc[0] != pytest.approx(textbook, rel=0.01)
    assert any(f"compute scale {scale:.3g}" in note for note in calibrated.attrs["notes"])


def test_cli_calibrate_prints_constants_with_fit_and_heldout_error(tmp_path: Path) -> None:
    db = tmp_path / "cli.duckdb"
    nccl = tmp_path / "all_reduce.txt"
    nccl.write_text(nccl_tests_text(alpha_us=2.0, efficiency=0.8))
    api.ingest(db, [str(nccl)])
    result = run_cli(db, "calibrate", "--format", "csv")
    assert result.exit_code == 0, result.output
    header, *lines = result.output.strip().splitlines()
    for column in ("constant", "scope", "value", "fit_error", "heldout_error", "uncalibrated_error"):
        assert column in header.split(",")
    by_constant = {line.split(",")[0]: line.split(",") for line in lines}
    assert set(by_constant) == {"alpha_us", "link_efficiency"}
    assert float(by_constant["alpha_us"][2]) == pytest.approx(2.0, rel=0.02)
    shown = run_cli(db, "calibrate", "--show", "--format", "csv")
    assert "link_efficiency" in shown.output and "nvlink3" in shown.output


def test_cli_predict_uncalibrated_shows_the_textbook_model(bloom) -> None:
    db, run_id = bloom
    before = run_cli(db, "predict", str(run_id), "--format", "json").output
    run_cli(db, "calibrate")
    after = run_cli(db, "predict", str(run_id), "--format", "json").output
    textbook = run_cli(db, "predict", str(run_id), "--uncalibrated", "--format", "json").output
    assert after != before
    assert textbook == before


def test_nothing_to_calibrate_is_a_user_error(tmp_path: Path) -> None:
    api.connect(tmp_path / "empty.duckdb").close()  # a database with nothing in it
    result = run_cli(tmp_path / "empty.duckdb", "calibrate")
    assert result.exit_code == 1
    assert "nothing to calibrate" in result.output


def test_a_selection_fits_what_it_names_and_nothing_else(tmp_path: Path) -> None:
    """`calibrate --run 1` fits that run, not every bench too; a bench named alone fits no run; a tag
    matching nothing is said to, rather than refitting the whole store."""
    bench = tmp_path / "all_reduce.txt"
    bench.write_text(nccl_tests_text(alpha_us=1.5, efficiency=0.83))
    db = tmp_path / "c.duckdb"
    api.ingest(db, [BLOOM_LOG, str(bench)])
    by_run = api.calibrate(db, runs=[1])
    assert set(by_run["constant"]) == {"compute_scale"}
    by_bench = api.calibrate(db, benches=["bench:1"])
    assert set(by_bench["constant"]) == {"alpha_us", "link_efficiency"}
    with pytest.raises(TracelogError, match="nothing to calibrate among the runs and benches selected"):
        api.calibrate(db, tags={"exp": "none"})
