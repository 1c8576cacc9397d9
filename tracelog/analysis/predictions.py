"""Predictions and comparisons: what the model says a run or a benchmark should have delivered, beside
what it measured. Pure arithmetic over `run_inputs` and the catalog; the comparator writes the rows.

Every prediction row names its `formula`; `comparisons.ratio` is always measured / predicted, so a
ratio below 1 means less than the model expects for throughput figures (TFLOP/s, MFU, bandwidth) and
faster than expected for times (sec/it).

Run metrics (subject_kind 'run'):
  flops_per_iteration  one row per formula: narayanan (eq. 3), megatron-lm, hardware, bloom, 6nd
  sec_per_it, compute_s, tp_comm_s, bubble_s, dp_comm_s, dp_comm_total_s, p2p_s   model.timing.predict_iteration
  ep_comm_s            MoE runs: the exposed expert-parallel dispatch and combine (model.moe)
  cp_comm_s            PyTorch's context-parallel ring: its exposed K/V exchange and merges (model.context_parallel)
  bubble_fraction      (p−1)/(v·m)
  tflops_per_gpu       model FLOPs (in the formula the log's figure matches) over predicted time
  mfu                  Megatron-LM model FLOPs (no recomputation) over predicted time and dense peak
  gpu_memory_mib and weights/grads/optimizer/activations/embedding/buffers/allocator/cuda_context/nccl _mib
                       model.memory.memory_per_gpu (the busiest stage; total includes the CUDA context and NCCL)
  gpu_reserved_mib     what the caching allocator holds (Megatron's `max reserved`): total less the context and NCCL
  gpu_capacity_mib     the device memory: the catalog's, or the log's own where the part differs
Bench metrics (subject_kind 'collective'): busbw_gbps per message size (detail: size_bytes, the
algorithm and protocol NCCL's cost model picks, the bounding link) and plateau_busbw_gbps (formula
'nccl-model'), on one node or across nodes (model.collectives.predict_nccl); alpha_us and
plateau_busbw_gbps fitted to the measured rows (formula 'fit'); p2p bandwidth against the link
(subject_kind 'p2p').
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tracelog import hardware
from tracelog.analysis import calibration, link_fit
from tracelog.analysis import inputs as run_inputs
from tracelog.analysis.calibration import TEXTBOOK, Constants
from tracelog.analysis.device_memory import device_memory_bytes
from tracelog.analysis.inputs import RunInputs
from tracelog.analysis.scope import Scope
from tracelog.errors import TracelogError
from tracelog.hardware import bench_link
from tracelog.model.collectives import (
    DEFAULT_ALPHA_US,
    bench_placement,
    costed_as,
    fit_alpha_beta,
    normalize_op,
    plateau_busbw,
    predict_nccl,
)
from tracelog.model.flops import (
    flops_6nd,
    flops_bloom,
    flops_megatron_lm,
    flops_narayanan,
    hardware_flops,
    params_from_config,
)
from tracelog.model.memory import (
    DEEPSPEED_BUCKET_ELEMENTS,
    MemoryOptions,
    cuda_context_bytes,
    memory_per_gpu,
    nccl_connects_eagerly,
)
from tracelog.model.nvls import NcclOffer
from tracelog.model.timing import bubble_fraction, predict_iteration
from tracelog.store import Store

if TYPE_CHECKING:
    import pandas as pd

Row = dict[str, Any]

FORMULA_SOURCES = {
    "narayanan-96": "Narayanan et al. 2021 eq. 3 with full recomputation (96; Megatron-DeepSpeed `TFLOPs:`)",
    "narayanan-72": "Narayanan et al. 2021 eq. 3 without recomputation (72)",
    "megatron-lm": "Megatron-LM num_floating_point_operations (x3, GQA, SwiGLU, causal halved)",
    "megatron-lm-2024": "Megatron-LM num_floating_point_operations before 2025-03 (attention not halved)",
    "hardware": "Megatron-LM model FLOPs plus the recomputed forward (Korthikanti et al. 2022)",
    "bloom-x4": "BigScience notes: params x 2 x 4 (recomputation) x seq x gbs",
    "6nd": "6 x params x tokens (Kaplan et al. 2020); also the BigScience rule without recomputation",
}
# Formulas that count the recomputed forward pass: a log whose TFLOP/s matches one of them counted it.
COUNTS_RECOMPUTE = {"narayanan-96", "bloom-x4"}


def formula_flops(inputs: RunInputs) -> dict[str, float]:
    """FLOPs per iteration by every formula the run's configuration allows. Both recomputation
    variants of the published formulas are kept: which one a log used is for `match_formula` to find."""
    out: dict[str, float] = {}
    cfg, gbs = inputs.cfg, inputs.gbs
    if cfg is not None and gbs:
        out["narayanan-96"] = flops_narayanan(cfg, gbs, "full")
        out["narayanan-72"] = flops_narayanan(cfg, gbs, "none")
        out["megatron-lm"] = flops_megatron_lm(cfg, gbs)
        out["megatron-lm-2024"] = flops_megatron_lm(cfg, gbs, causal_halved=False)
        out["hardware"] = hardware_flops(cfg, gbs, inputs.recompute)  # type: ignore[arg-type]
    params = inputs.params or (params_from_config(cfg) if cfg is not None else None)
    if params and inputs.seq_len and gbs:
        out["bloom-x4"] = flops_bloom(params, inputs.seq_len, gbs, recompute=True)
        out["6nd"] = flops_6nd(params, inputs.seq_len * gbs)
    return out


@dataclass(frozen=True)
class FormulaMatch:
    """Which formula the log's own TFLOP/s figure was computed with: the closest to its implied FLOPs."""

    formula: str
    ratio: float  # the log's implied FLOPs over the formula's
    ratios: dict[str, float]


def match_formula(inputs: RunInputs, flops: dict[str, float]) -> FormulaMatch | None:
    """The log's FLOPs per iteration are its TFLOP/s per GPU × sec/it × GPUs (median over steady lines);
    each formula's count over that says how the log counted."""
    if not inputs.implied_tflop or not inputs.gpus or not flops:
        return None
    implied = inputs.implied_tflop * 1e12 * inputs.gpus
    ratios = {name: implied / value for name, value in flops.items() if value}
    if not ratios:
        return None
    best = min(ratios, key=lambda name: abs(ratios[name] - 1))
    return FormulaMatch(best, ratios[best], ratios)


def _close(ratio: float, tolerance: float = 0.05) -> bool:
    """Whether a log's FLOPs agree with a formula's: within the `tflops_formula_mismatch` threshold."""
    return abs(ratio - 1) <= tolerance


def _row(metric: str, value: float | None, unit: str, formula: str | None = None, detail: Any = None) -> Row:
    if detail is not None and not isinstance(detail, str):
        detail = json.dumps(detail)
    return {"metric": metric, "value": value, "unit": unit, "formula": formula, "detail": detail}


def infer(inputs: RunInputs) -> RunInputs:
    """The run with what its own figures reveal: a log whose TFLOP/s count the recomputed forward pass
    (Megatron-DeepSpeed's ×4, the BigScience notes' rule) ran with full recomputation."""
    if inputs.recompute_given:
        return inputs
    match = match_formula(inputs, formula_flops(inputs))
    if match and match.formula in COUNTS_RECOMPUTE and _close(match.ratio):
        return run_inputs.with_recompute(
            inputs, "full", f"activation recomputation inferred: the log's TFLOP/s count it ({match.formula})"
        )
    return inputs


def run_prediction(
    inputs: RunInputs,
    compute_efficiency: float | None = None,
    constants: Constants = TEXTBOOK,
) -> list[Row]:
    """Every predicted figure of one run (metric, value, unit, formula, detail); rows with a NULL value
    say what could not be predicted and why. `constants` are the fitted ones (`tracelog calibrate`);
    the `sec_per_it` row's detail records which were used."""
    rows: list[Row] = []
    inputs = infer(inputs)
    flops = formula_flops(inputs)
    match = match_formula(inputs, flops)
    for name, value in flops.items():
        rows.append(_row("flops_per_iteration", value, "FLOP", name, FORMULA_SOURCES[name]))
    if match:
        rows.append(_row("log_flops_formula", match.ratio, "ratio", match.formula, match.ratios))
    train, cfg, gpu = inputs.train, inputs.cfg, inputs.gpu
    if train is not None:
        rows.append(
            _row(
                "bubble_fraction",
                bubble_fraction(train.pp, train.microbatches, train.chunks),
                "ratio",
                "narayanan §2.2",
                {"pp": train.pp, "microbatches": train.microbatches, "chunks": train.chunks},
            )
        )
    if cfg is not None and train is not None:
        memory = memory_per_gpu(cfg, train, memory_options(inputs))
        for part, mib in memory.mib.items():
            metric = "gpu_memory_mib" if part == "total" else f"{part}_mib"
            rows.append(_row(metric, mib, "MiB", "tracelog.model.memory", None))
        rows.append(_row("gpu_reserved_mib", memory.reserved / 2**20, "MiB", "tracelog.model.memory", None))
    capacity = device_memory_bytes(inputs)
    if gpu is not None and capacity == gpu.memory_bytes:
        rows.append(_row("gpu_capacity_mib", gpu.memory_mib, "MiB", "catalog", gpu.source))
    elif capacity is not None:
        rows.append(_row("gpu_capacity_mib", capacity / 2**20, "MiB", "log", "device_memory_mib"))
    if cfg is not None and train is not None and gpu is not None:
        rows += _time_rows(inputs, flops, match, compute_efficiency, constants)
    if inputs.missing or inputs.assumptions:
        rows.append(
            _row("inputs", None, "", None, {"missing": inputs.missing, "assumptions": inputs.assumptions})
        )
    return rows


def _elements(value: str | None) -> float | None:
    """A positive element count as a log prints it (`500000000`, `6.710886e+07`, DeepSpeed's
    `500,000,000`), else None."""
    try:
        count = float(value.replace(",", "")) if value else 0.0
    except ValueError:
        return None
    return count if 0 < count < 1e15 else None


def memory_options(inputs: RunInputs) -> MemoryOptions:
    """The run's CUDA context by GPU generation, the device's memory (which the allocator's reserve
    yields to), DeepSpeed's activation-checkpointing switches and ZeRO gradient bucket as its log
    prints them, which 16-bit optimizer DeepSpeed said it created (`optimizer_wrapper`: the "fp16
    unfused optimizer" holds half the fused one's copies at its step), and whether the NCCL the log names
    allocates its communicators' buffers at start (`nccl_version`)."""
    wrapper = inputs.run_params.get("optimizer_wrapper") or ""
    bucket = inputs.run_params.get("reduce_bucket_size") or inputs.zero_option("reduce_bucket_size")
    return MemoryOptions(
        reduce_bucket_size=_elements(bucket) or DEEPSPEED_BUCKET_ELEMENTS,
        cuda_context_bytes=cuda_context_bytes(inputs.gpu),
        capacity_bytes=device_memory_bytes(inputs),
        partition_activations=bool(inputs.flag("partition_activations")),
        checkpoint_in_cpu=bool(inputs.flag("checkpoint_in_cpu")),
        fused_fp16_optimizer="unfused" not in wrapper.lower(),
        nccl_eager=nccl_connects_eagerly(inputs.run_params.get("nccl_version")),
    )


def _time_rows(
    inputs: RunInputs,
    flops: dict[str, float],
    match: FormulaMatch | None,
    efficiency: float | None,
    constants: Constants,
) -> list[Row]:
    cfg, train, gpu = inputs.cfg, inputs.train, inputs.gpu
    assert cfg is not None and train is not None and gpu is not None
    used = calibration.for_run(inputs, constants)
    try:
        peak = hardware.peak_tflops(gpu, inputs.precision)
        time = predict_iteration(
            cfg, train, gpu, inputs.fabric, efficiency, gpus_per_node=inputs.gpus_per_node, **used.timing
        )
    except TracelogError as exc:
        return [_row("inputs", None, "", None, {"missing": [f"no time prediction: {exc}"]})]
    detail = {
        "compute_efficiency": "per operation (model.gemm)" if efficiency is None else efficiency,
        "fabric": inputs.fabric.id if inputs.fabric else None,
        "gpus_per_node": inputs.gpus_per_node,
        "constants": used.detail,
    }
    rows = [
        _row("sec_per_it", time.total_s, "s", "tracelog.model.timing", detail),
        _row("compute_s", time.compute_s, "s", "tracelog.model.timing", None),
        _row("compute_scale", used.compute_scale, "x", used.source, None),
        _row("tp_comm_s", time.tp_comm_s, "s", "tracelog.model.timing", None),
        _row("bubble_s", time.bubble_s, "s", "tracelog.model.timing", None),
        _row("dp_comm_s", time.dp_comm_s, "s", "tracelog.model.timing", {"total_s": time.dp_comm_total_s}),
        _row("p2p_s", time.p2p_s, "s", "tracelog.model.timing", None),
    ]
    if time.ep_comm_s:
        rows.append(_row("ep_comm_s", time.ep_comm_s, "s", "tracelog.model.moe", None))
    if time.cp_comm_s:
        rows.append(_row("cp_comm_s", time.cp_comm_s, "s", "tracelog.model.context_parallel", None))
    gpus = train.gpus
    formula = match.formula if match and _close(match.ratio) else "megatron-lm"
    tflops = flops[formula] / (time.total_s * gpus * 1e12)
    rows.append(_row("tflops_per_gpu", tflops, "TFLOP/s", formula, None))
    model_tflops = flops["megatron-lm"] / (time.total_s * gpus * 1e12)
    rows.append(_row("mfu", model_tflops / peak, "ratio", "megatron-lm", {"peak_tflops": peak}))
    return rows


def _pred(rows: list[Row], metric: str) -> Row | None:
    return next((r for r in rows if r["metric"] == metric and r["value"] is not None), None)


def measured_against_predicted(inputs: RunInputs, rows: list[Row]) -> list[Row]:
    """Measured beside predicted for one run: sec/it, TFLOP/s, MFU, peak memory, and the log's TFLOP/s
    against every formula."""
    out: list[Row] = []

    def add(
        metric: str, measured: float | None, predicted: float | None, unit: str, formula: Any = None
    ) -> None:
        if measured is None or predicted is None or not predicted:
            return
        out.append(
            {
                "metric": metric,
                "measured": measured,
                "predicted": predicted,
                "ratio": measured / predicted,
                "unit": unit,
                "formula": formula,
            }
        )

    sec = _pred(rows, "sec_per_it")
    if sec:
        add("sec_per_it", inputs.sec_per_it, sec["value"], "s", "tracelog.model.timing")
    tflops = _pred(rows, "tflops_per_gpu")
    flops = {r["formula"]: r["value"] for r in rows if r["metric"] == "flops_per_iteration"}
    if tflops:
        formula = tflops["formula"]
        measured = inputs.tflops_reported if _matches(rows, formula) else None
        if measured is None and inputs.sec_per_it and inputs.gpus:
            measured = flops[formula] / (inputs.sec_per_it * inputs.gpus * 1e12)
        if measured is None and inputs.tflops_reported and not inputs.sec_per_it and flops and sec:
            # TFLOP/s without a sec/it (a lab note): the formula is unknown, so hold them against the
            # lowest any formula predicts; a gap there is a gap whichever formula the note used.
            lowest = min(flops, key=flops.__getitem__)
            add(
                "tflops_per_gpu",
                inputs.tflops_reported,
                flops[lowest] / (sec["value"] * inputs.gpus * 1e12),
                "TFLOP/s",
                f"{lowest} (the lowest of {len(flops)} formulas)",
            )
        else:
            add("tflops_per_gpu", measured, tflops["value"], "TFLOP/s", formula)
    mfu = _pred(rows, "mfu")
    if mfu and inputs.sec_per_it and inputs.gpus and "megatron-lm" in flops:
        peak = json.loads(mfu["detail"])["peak_tflops"]
        measured_mfu = flops["megatron-lm"] / (inputs.sec_per_it * inputs.gpus * 1e12) / peak
        add("mfu", measured_mfu, mfu["value"], "ratio", "megatron-lm")
    # A lab note's Mem is what nvidia-smi showed (context included); a log's peak is `max reserved`.
    memory = _pred(rows, "gpu_memory_mib" if inputs.framework == "table" else "gpu_reserved_mib")
    if memory:
        add("gpu_memory_mib", inputs.peak_reserved_mib, memory["value"], "MiB", "tracelog.model.memory")
    if inputs.tflops_reported and inputs.implied_tflop:
        match = _pred(rows, "log_flops_formula")
        ratios = json.loads(match["detail"]) if match else {}
        for name, ratio in ratios.items():
            add("tflops_reported", inputs.tflops_reported, inputs.tflops_reported / ratio, "TFLOP/s", name)
    return out


def _matches(rows: list[Row], formula: str) -> bool:
    match = _pred(rows, "log_flops_formula")
    return bool(match and match["formula"] == formula and _close(match["value"]))


def predict_runs(
    store: Store, scope: Scope, runs: list[RunInputs] | None = None, constants: Constants = TEXTBOOK
) -> dict[str, list[Row]]:
    """Prediction and comparison rows of the runs in scope (`runs`: their inputs, if already loaded),
    with the fitted `constants`."""
    predictions: list[Row] = []
    comparisons: list[Row] = []
    for inputs in runs if runs is not None else run_inputs.load(store, where=scope.runs):
        rows = run_prediction(inputs, constants=constants)
        subject = {"subject_kind": "run", "subject_id": inputs.run_id}
        predictions += [{**subject, **row} for row in rows]
        comparisons += [{**subject, **row} for row in measured_against_predicted(inputs, rows)]
    return {"predictions": predictions, "comparisons": comparisons}


def predict_benches(store: Store, scope: Scope, constants: Constants = TEXTBOOK) -> dict[str, list[Row]]:
    """Predicted busbw per message size for each nccl-tests bench, on one node or many (NCCL's cost
    model in `model.collectives.predict_nccl`: ring or tree, LL or Simple, α per link class, the node's
    NICs across nodes), its plateau against the measured peak, and the α and plateau fitted to its rows.
    A multi-node bench without a named fabric uses the GPU's reference fabric, stored as an assumption.
    `constants`: α and efficiency fitted per link (`tracelog calibrate`) replace the textbook ones of
    that link's class."""
    predictions: list[Row] = []
    comparisons: list[Row] = []
    benches = store.con.execute(
        f"""
        SELECT bench_id, collective, gpu_model, gpu_name, nodes, ranks, gpus_per_node, fabric, nics_per_node,
               (SELECT any_value(p.value) FROM bench_params p
                WHERE p.bench_id = b.bench_id AND p.name = 'collective_candidates') AS candidates
        FROM benches b WHERE {scope.benches} AND bench_id IN (SELECT bench_id FROM collectives)
        """
    ).fetchall()
    offers = link_fit.nccl_offers(store, scope.benches)
    for bench_id, collective, gpu_model, gpu_name, nodes, ranks, gpn, fabric, nics, candidates in benches:
        alike: list[str] = []
        try:
            op = normalize_op(collective or "")
        except TracelogError:
            # unnamed, but of collectives the model costs alike (the busbw factor and the row's columns)
            standing = costed_as(candidates.split(", ")) if not collective and candidates else None
            if standing is None:
                continue
            op = standing
            alike = [f"the collective is one of {candidates}, which the model costs alike: predicted as {op}"]
        rows = link_fit.measured_times(store, int(bench_id))
        if not rows or not ranks:
            continue
        subject = {"subject_kind": "collective", "subject_id": int(bench_id)}
        if ranks > 1:
            offer = offers.get(int(bench_id), NcclOffer())
            predicted, compared = _bench_curve(
                op, rows, ranks, nodes, gpn, gpu_model, gpu_name, fabric, nics, constants, offer, alike
            )
            predictions += [{**subject, **row} for row in predicted]
            comparisons += [{**subject, **row} for row in compared]
        if len(rows) >= 4 and ranks > 1:
            try:
                alpha, plateau_fit = fit_alpha_beta(op, [r[0] for r in rows], [r[1] for r in rows], ranks)
            except TracelogError:
                continue
            predictions.append(
                {**subject, **_row("alpha_us", alpha, "us", "fit", {"default": DEFAULT_ALPHA_US})}
            )
            predictions.append({**subject, **_row("plateau_busbw_gbps", plateau_fit, "GB/s", "fit", None)})
    p2p_predicted, p2p_compared = _p2p_predictions(store, scope)
    return {"predictions": predictions + p2p_predicted, "comparisons": comparisons + p2p_compared}


def _bench_curve(
    op: str,
    rows: list[tuple[Any, ...]],
    ranks: int,
    nodes: int | None,
    gpus_per_node: int | None,
    gpu_model: str | None,
    gpu_name: str | None,
    fabric_id: str | None,
    nics_per_node: int | None,
    constants: Constants,
    offer: NcclOffer,
    alike: list[str],
) -> tuple[list[Row], list[Row]]:
    """One bench's predicted rows (busbw per size, its plateau, the inputs assumed or missing) and its
    measured peak against the plateau."""
    gpu = hardware.gpu_for(gpu_model, gpu_name)
    try:
        fabric = hardware.fabric_of(fabric_id, nics_per_node)
        place, assumed = bench_placement(gpu, ranks, nodes, gpus_per_node, fabric, offer.allowed(op))
        assumed = [*alike, *assumed]
        alpha, efficiency = link_fit.link_classes(place, constants)
        plateau, best = plateau_busbw(op, place, efficiency)
        curve = [predict_nccl(op, size, place, alpha, efficiency) for size, _time, _busbw in rows]
    except TracelogError as exc:
        missing = [f"no busbw prediction: {exc}"]
        if gpu is None and isinstance(gpu_name, str) and gpu_name:
            missing.append(hardware.unknown_gpu_note(gpu_name))
        return [
            _row("inputs", None, "", None, {"missing": missing, **({"assumptions": alike} if alike else {})})
        ], []
    if best.name in ("nvls", "nvlstree") and offer.version is None:
        assumed = [
            *assumed,
            f"NCCL 2.17 or later ({best.name.upper()}, NVLink SHARP): the log prints no NCCL version; a bench "
            "run on an older NCCL, or with NCCL_ALGO=Ring, is held to the ring once its log says so",
        ]
    formula = "nccl-model" + (" (calibrated)" if alpha else "")
    predicted = [
        _row(
            "busbw_gbps",
            p.busbw_gbps,
            "GB/s",
            formula,
            {
                "size_bytes": int(p.size_bytes),
                "algorithm": p.algorithm,
                "protocol": p.protocol,
                "link": p.bottleneck,
            },
        )
        for p in curve
    ]
    where = {
        "algorithm": best.name,
        "link": best.bottleneck,
        "nodes": place.nodes,
        "ranks_per_node": place.ranks_per_node,
        "fabric": place.fabric.id if place.fabric else None,
        # no fabric named or found: the GPU's reference one, which a flag must not hold the nodes to
        "fabric_assumed": fabric is None and place.fabric is not None,
        **offer.describe(),
    }
    predicted.append(_row("model_plateau_busbw_gbps", plateau, "GB/s", formula, where))
    if assumed:
        predicted.append(_row("inputs", None, "", None, {"missing": [], "assumptions": assumed}))
    measured = [r[2] for r in rows if r[2] is not None]
    compared = []
    if measured and max(measured) > 0:
        peak = max(measured)
        compared.append(
            {
                "metric": "peak_busbw_gbps",
                "measured": peak,
                "predicted": plateau,
                "ratio": peak / plateau,
                "unit": "GB/s",
                "formula": f"{best.name} over {best.bottleneck}",
            }
        )
    return predicted, compared


def _p2p_predictions(store: Store, scope: Scope) -> tuple[list[Row], list[Row]]:
    """The link's figure for each P2P-enabled bandwidth matrix of a p2p bench, and beside it the matrix's
    median GPU pair (its diagonal, a copy within one GPU, left out), as `p2p_against_spec` holds it."""
    rows = store.con.execute(
        f"""
        SELECT p.bench_id, p.matrix, any_value(b.gpu_model), any_value(b.gpu_name),
               median(p.value) FILTER (p.src <> p.dst)
        FROM p2p p JOIN benches b USING (bench_id)
        WHERE {scope.benches.replace("bench_id", "p.bench_id")} AND p.unit = 'GB/s' AND p.matrix LIKE '%p2p_on%'
        GROUP BY p.bench_id, p.matrix
        """
    ).fetchall()
    out, compared = [], []
    for bench_id, matrix, gpu_model, gpu_name, typical in rows:
        link = bench_link(gpu_model, gpu_name, 1, None, None)
        if link is None:
            continue
        bidirectional = "_bi" in matrix
        spec = link.bidirectional_gbps if bidirectional else link.unidirectional_gbps
        formula = f"{link.id} {'bi' if bidirectional else 'uni'}directional"
        subject = {"subject_kind": "p2p", "subject_id": int(bench_id)}
        detail = {"link": link.id, "source": link.source}
        out.append({**subject, **_row(f"{matrix}_gbps", spec, "GB/s", formula, detail)})
        if typical is not None and spec:
            measured = {"metric": f"{matrix}_gbps", "measured": float(typical), "predicted": spec}
            extra = {"ratio": typical / spec, "unit": "GB/s", "formula": f"median pair, {formula}"}
            compared.append({**subject, **measured, **extra})
    return out, compared


# How `tracelog predict` shows the rows: section, label and a unit people read (GiB, PFLOP, %).
_VIEW: dict[str, tuple[str, str, float, str]] = {
    "sec_per_it": ("time", "seconds per iteration", 1.0, "s"),
    "compute_s": ("time", "compute (each operation at its sustained efficiency)", 1.0, "s"),
    "compute_scale": ("time", "compute scale (fitted multiplier on the efficiency)", 1.0, "x"),
    "tp_comm_s": ("time", "tensor-parallel all-reduces", 1.0, "s"),
    "bubble_s": ("time", "pipeline bubble", 1.0, "s"),
    "dp_comm_s": ("time", "data-parallel gradients, exposed", 1.0, "s"),
    "p2p_s": ("time", "pipeline sends between stages", 1.0, "s"),
    "ep_comm_s": ("time", "expert-parallel dispatch and combine, exposed", 1.0, "s"),
    "cp_comm_s": ("time", "context-parallel ring (K/V exchange and merges), exposed", 1.0, "s"),
    "bubble_fraction": ("time", "bubble fraction (p-1)/(v·m)", 100.0, "%"),
    "tflops_per_gpu": ("throughput", "TFLOP/s per GPU", 1.0, "TFLOP/s"),
    "mfu": ("throughput", "MFU (model FLOPs over dense peak)", 100.0, "%"),
    "flops_per_iteration": ("flops", "FLOPs per iteration", 1e-15, "PFLOP"),
    "log_flops_formula": ("flops", "log's TFLOP/s over the closest formula", 1.0, "ratio"),
    "weights_mib": ("memory", "weights", 1 / 1024, "GiB"),
    "grads_mib": ("memory", "gradients", 1 / 1024, "GiB"),
    "optimizer_mib": ("memory", "optimizer state", 1 / 1024, "GiB"),
    "activations_mib": ("memory", "activations (busiest stage, in flight; logits)", 1 / 1024, "GiB"),
    "embedding_mib": ("memory", "embedding (states of its parameters)", 1 / 1024, "GiB"),
    "buffers_mib": ("memory", "framework buffers (buckets, fp32 grads at the step)", 1 / 1024, "GiB"),
    "allocator_mib": ("memory", "caching allocator reserve", 1 / 1024, "GiB"),
    "gpu_reserved_mib": ("memory", "reserved by the allocator (max reserved)", 1 / 1024, "GiB"),
    "cuda_context_mib": ("memory", "CUDA context", 1 / 1024, "GiB"),
    "nccl_mib": ("memory", "NCCL communicators' buffers (outside the allocator)", 1 / 1024, "GiB"),
    "gpu_memory_mib": ("memory", "total per GPU", 1 / 1024, "GiB"),
    "gpu_capacity_mib": ("memory", "GPU capacity", 1 / 1024, "GiB"),
}


def prediction_table(rows: list[Row]) -> pd.DataFrame:
    """The rows of `run_prediction` as people read them: one line per figure, grouped by section, with
    what was missing or assumed at the end. `metric` is a stable id for machines beside the human label:
    the predictions-table name (`sec_per_it`, `mfu`), `flops_<formula>` for the FLOPs of one formula
    (`flops_narayanan-96`), `inputs_missing`/`inputs_assumed` for the notes. It is the last column, so
    readers that take columns by position keep working."""
    import pandas as pd  # loaded by what returns a frame, not at start-up

    out = []
    for row in rows:
        if row["metric"] == "inputs":
            detail = json.loads(row["detail"])
            for figure, key in (("missing", "missing"), ("assumed", "assumptions")):
                out += [
                    {"section": "inputs", "figure": figure, "value": None, "unit": "", "source": note}
                    | {"metric": f"inputs_{figure}"}
                    for note in detail.get(key, [])
                ]
            continue
        view = _VIEW.get(row["metric"])
        if view is None or row["value"] is None:
            continue
        section, label, scale, unit = view
        if row["metric"] == "flops_per_iteration":
            label = f"{label}, {row['formula']}"
        source = row["formula"] if row["metric"] != "flops_per_iteration" else row["detail"]
        metric = f"flops_{row['formula']}" if row["metric"] == "flops_per_iteration" else row["metric"]
        out.append(
            {
                "section": section,
                "figure": label,
                "value": row["value"] * scale,
                "unit": unit,
                "source": source,
                "metric": metric,
            }
        )
    order = {"time": 0, "throughput": 1, "memory": 2, "flops": 3, "inputs": 4}
    frame = pd.DataFrame(out, columns=["section", "figure", "value", "unit", "source", "metric"])
    return frame.sort_values("section", key=lambda s: s.map(order), kind="stable").reset_index(drop=True)
