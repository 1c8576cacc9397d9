"""Flags that need the analytic model: memory against capacity, measured against predicted throughput,
the log's TFLOP/s against its own sec/it, GEMM tile and wave quantization, the fused-softmax rule and
the pipeline bubble. They read the `predictions` and `comparisons` the predictors wrote in the same
refresh, and the run configurations through `run_inputs`.
"""

from __future__ import annotations

import json
from typing import Any

from tracelog.analysis import inputs as run_inputs
from tracelog.analysis import predictions
from tracelog.analysis.device_memory import device_memory_bytes
from tracelog.analysis.inputs import RunInputs
from tracelog.analysis.plan_space import fused_softmax_ok
from tracelog.analysis.rules import Flag
from tracelog.analysis.rules import run_flag as _flag
from tracelog.analysis.scope import Scope
from tracelog.model.flops import microbatch_tokens
from tracelog.model.quantization import gemm_quantization
from tracelog.store import Store
from tracelog.thresholds import Thresholds

GIB = 1024.0  # MiB per GiB


def _predicted(store: Store, scope: Scope, metrics: tuple[str, ...]) -> dict[int, dict[str, Any]]:
    """{run_id: {metric: (value, formula, detail)}} for the runs in scope."""
    names = ", ".join(f"'{m}'" for m in metrics)
    rows = store.con.execute(
        f"""
        SELECT subject_id, metric, value, formula, detail FROM predictions
        WHERE subject_kind = 'run' AND {scope.runs.replace("run_id", "subject_id")} AND metric IN ({names})
        """
    ).fetchall()
    out: dict[int, dict[str, Any]] = {}
    for run_id, metric, value, formula, detail in rows:
        out.setdefault(int(run_id), {})[metric] = (value, formula, detail)
    return out


def oom_proximity(store: Store, t: Thresholds, scope: Scope, runs: list[RunInputs]) -> list[Flag]:
    """Peak reserved memory (Megatron's `max reserved`, a lab note's Mem) over the device's memory;
    a lab-note row recorded as OOM; a predicted footprint over capacity where nothing was measured."""
    predicted = _predicted(store, scope, ("gpu_memory_mib", "gpu_capacity_mib"))
    lines = dict(
        store.con.execute(
            f"SELECT run_id, arg_max(line_no, coalesce(max_reserved_mib, reserved_mib)) FROM memory "
            f"WHERE {scope.runs} GROUP BY run_id"
        ).fetchall()
    )
    flags = []
    for run in runs:
        # the device's memory as the model takes it: the catalog part's, or the log's own share of its
        # device (torchtitan) where there is no part or the two differ (`device_memory_bytes`)
        device = device_memory_bytes(run)
        capacity = device / 2**20 if device is not None else None
        model = predicted.get(run.run_id, {}).get("gpu_memory_mib", (None,))[0]
        part = run.gpu.id if run.gpu and run.gpu.memory_mib == capacity else None
        where = f"{part} ({capacity / GIB:.0f} GiB)" if part and capacity else "its GPU"
        if capacity is not None and part is None:
            where = f"its GPU ({capacity / GIB:.0f} GiB, as the log's memory share gives it)"
        if run.status and run.status.upper() == "OOM":
            flags.append(
                _flag(
                    "oom_proximity",
                    "warning",
                    run.run_id,
                    f"Recorded as OOM: this layout did not fit on {where}"
                    + (
                        f"; the model puts it at {model / GIB:.0f} GiB per GPU{_assuming(run)}."
                        if model
                        else "."
                    ),
                    "Shard more (higher TP/PP, a higher ZeRO stage or the distributed optimizer), recompute "
                    "activations, or lower the micro-batch size.",
                    measured=model,
                    expected=capacity,
                    ratio=model / capacity if model and capacity else None,
                )
            )
            continue
        if capacity is None:
            continue
        if run.peak_reserved_mib:
            share = run.peak_reserved_mib / capacity
            if share >= t.oom_warning:
                severity = "critical" if share >= t.oom_critical else "warning"
                line = lines.get(run.run_id)
                flags.append(
                    _flag(
                        "oom_proximity",
                        severity,
                        run.run_id,
                        f"Peak reserved memory {run.peak_reserved_mib / GIB:.1f} GiB is {share:.0%} of the "
                        f"{capacity / GIB:.0f} GiB of {part or 'the GPU'}: one longer sequence or a fragmented "
                        "allocator away from out-of-memory.",
                        "Leave headroom: lower the micro-batch size, recompute activations, or shard the "
                        "optimizer; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True reduces fragmentation.",
                        row_ref=f"line {line}" if line else None,
                        measured=run.peak_reserved_mib,
                        expected=capacity,
                        ratio=share,
                    )
                )
        elif model and model > capacity * t.oom_warning and not run.memory_assumed:
            share = model / capacity
            flags.append(
                _flag(
                    "oom_proximity",
                    "critical" if share > 1 else "warning",
                    run.run_id,
                    f"The model puts this layout at {model / GIB:.1f} GiB per GPU, {share:.0%} of the "
                    f"{capacity / GIB:.0f} GiB of {part or 'the GPU'}"
                    + (": it should not fit." if share > 1 else ": little headroom."),
                    "See `tracelog predict` for the breakdown (weights, gradients, optimizer, activations, "
                    "embedding) and shard or recompute the largest part.",
                    measured=model,
                    expected=capacity,
                    ratio=share,
                )
            )
    return flags


def _assuming(run: RunInputs) -> str:
    return f" (assuming {' and '.join(run.memory_assumed)})" if run.memory_assumed else ""


def throughput(store: Store, t: Thresholds, scope: Scope, runs: list[RunInputs]) -> list[Flag]:
    """Measured sec/it against the predicted one (`throughput_gap`); for a run that recorded only
    TFLOP/s, those against the predicted TFLOP/s in the same formula (`mfu_gap`)."""
    rows = store.con.execute(
        f"""
        SELECT subject_id, metric, measured, predicted, ratio, formula FROM comparisons
        WHERE subject_kind = 'run' AND {scope.runs.replace("run_id", "subject_id")}
          AND metric IN ('sec_per_it', 'tflops_per_gpu', 'mfu')
        """
    ).fetchall()
    by_run: dict[int, dict[str, tuple[float, float, float, str]]] = {}
    for run_id, metric, measured, predicted, ratio, formula in rows:
        by_run.setdefault(int(run_id), {})[metric] = (measured, predicted, ratio, formula)
    names = {run.run_id: run for run in runs}
    flags = []
    for run_id, metrics in by_run.items():
        run = names.get(run_id)
        gpu = run.gpu.id if run and run.gpu else "the GPU"
        mfu = metrics.get("mfu")
        mfu_text = f" (MFU {mfu[0]:.0%} against {mfu[1]:.0%} predicted)" if mfu else ""
        if "sec_per_it" in metrics:
            measured, predicted, ratio, _ = metrics["sec_per_it"]
            efficiency = predicted / measured
            if efficiency < t.efficiency_gap:
                flags.append(
                    _flag(
                        "throughput_gap",
                        "warning",
                        run_id,
                        f"{measured:.3g} s/it against {predicted:.3g} s/it predicted on {gpu}: the run gets "
                        f"{efficiency:.0%} of what the model expects{mfu_text}.",
                        "Compare the prediction's parts (`tracelog predict RUN`) with the run's timers: "
                        "exposed data-parallel communication, the pipeline bubble and small GEMMs are the "
                        "usual gaps; check the fabric and NCCL settings too.",
                        measured=measured,
                        expected=predicted,
                        ratio=efficiency,
                    )
                )
            elif efficiency > 1 / t.efficiency_gap:
                flags.append(
                    _flag(
                        "throughput_gap",
                        "info",
                        run_id,
                        f"{measured:.3g} s/it is faster than the {predicted:.3g} s/it the model predicts on "
                        f"{gpu} ({efficiency:.0%}): the model's inputs are likely off.",
                        "Check the GPU model (--gpu), the precision (fp8 has twice the bf16 peak), the GPU "
                        "count and the global batch size of this run.",
                        measured=measured,
                        expected=predicted,
                        ratio=efficiency,
                    )
                )
        elif "tflops_per_gpu" in metrics:
            measured, predicted, ratio, formula = metrics["tflops_per_gpu"]
            if ratio < t.efficiency_gap:
                flags.append(
                    _flag(
                        "mfu_gap",
                        "warning",
                        run_id,
                        f"{measured:.1f} TFLOP/s per GPU against {predicted:.1f} predicted ({formula} "
                        f"formula) on {gpu}: {ratio:.0%} of the model.",
                        "See `tracelog predict RUN` for where the model expects the time to go.",
                        measured=measured,
                        expected=predicted,
                        ratio=ratio,
                    )
                )
    return flags


def tflops_formula_mismatch(store: Store, t: Thresholds, scope: Scope, runs: list[RunInputs]) -> list[Flag]:
    """The log's TFLOP/s × sec/it × GPUs is the FLOPs per iteration it assumed; when no published
    formula gives that count within the threshold, the figure cannot be compared with anything."""
    predicted = _predicted(store, scope, ("log_flops_formula",))
    flags = []
    for run in runs:
        entry = predicted.get(run.run_id, {}).get("log_flops_formula")
        if entry is None:
            continue
        ratio, formula, detail = entry
        if abs(ratio - 1) <= t.tflops_formula_mismatch:
            continue
        ratios = json.loads(detail) if detail else {}
        flags.append(
            _flag(
                "tflops_formula_mismatch",
                "warning",
                run.run_id,
                f"The log's {run.tflops_reported:.1f} TFLOP/s per GPU do not follow from its sec/it under any "
                f"known formula: the closest ({formula}) differs by {ratio - 1:+.0%}"
                + (f" ({len(ratios)} formulas tried)." if ratios else "."),
                "Check the GPU count (world size), global batch and sequence length the log states, and which "
                "FLOPs formula its framework version prints; compare runs by sec/it until then.",
                measured=run.tflops_reported,
                expected=run.tflops_reported / ratio if ratio else None,
                ratio=ratio,
            )
        )
    return flags


def _gemms(run: RunInputs) -> list[tuple[str, int, int, int]]:
    """(name, M, N, K) of one layer's forward GEMMs on one tensor-parallel rank (Megatron's column and
    row-parallel split, Shoeybi et al. 2019 §3): M = tokens of a micro-batch."""
    cfg, train = run.cfg, run.train
    assert cfg is not None and train is not None
    tokens = microbatch_tokens(cfg, train)
    q, kv = cfg.q_width, cfg.kv_width
    up = cfg.ffn * (2 if cfg.swiglu else 1)
    return [
        ("QKV projection", tokens, (q + 2 * kv) // train.tp, cfg.hidden),
        ("attention output", tokens, cfg.hidden, q // train.tp),
        ("MLP up", tokens, up // train.tp, cfg.hidden),
        ("MLP down", tokens, cfg.hidden, cfg.ffn // train.tp),
    ]


def quantization(store: Store, t: Thresholds, scope: Scope, runs: list[RunInputs]) -> list[Flag]:
    """Tile quantization: the per-rank hidden and FFN widths not multiples of 64 (warning) or 128 (info)
    leave Tensor Core tiles partly empty. Wave quantization: the layer's GEMMs, weighted by their FLOPs,
    leave SMs idle in a last partial wave (NVIDIA Matrix Multiplication Background guide §3)."""
    flags = []
    for run in runs:
        if run.cfg is None or run.train is None:
            continue
        cfg, tp = run.cfg, run.train.tp
        widths = {"hidden": cfg.hidden, "FFN hidden": cfg.ffn}
        odd = {}
        for name, width in widths.items():
            if width % tp:
                continue
            per_rank = width // tp
            for multiple in (64, 128):
                if per_rank % multiple:
                    odd[name] = (per_rank, multiple)
                    break
        if odd:
            worst = 64 if any(m == 64 for _, m in odd.values()) else 128
            parts = "; ".join(f"{name} / TP = {w} is not a multiple of {m}" for name, (w, m) in odd.items())
            flags.append(
                _flag(
                    "tile_quantization",
                    "warning" if worst == 64 else "info",
                    run.run_id,
                    f"{parts}: GEMM tiles run partly empty on every layer.",
                    "Pick hidden and FFN sizes whose per-rank width is a multiple of 128 (or change TP); "
                    "Megatron pads the vocabulary the same way (make-vocab-size-divisible-by).",
                    measured=float(min(w for w, _ in odd.values())),
                    expected=float(worst),
                )
            )
        sms = run.gpu.sm_count if run.gpu else None
        if not sms:
            continue
        total, useful, worst_gemm = 0.0, 0.0, None
        for name, m, n, k in _gemms(run):
            if min(m, n, k) < 1:
                continue
            q = gemm_quantization(m, n, sms)
            work = 2.0 * m * n * k
            total += work / q.wave_efficiency
            useful += work
            if worst_gemm is None or q.wave_efficiency < worst_gemm[1].wave_efficiency:
                worst_gemm = (name, q, m, n)
        if not total or worst_gemm is None:
            continue
        efficiency = useful / total
        if efficiency < t.wave_efficiency:
            name, q, m, n = worst_gemm
            flags.append(
                _flag(
                    "wave_quantization",
                    "info",
                    run.run_id,
                    f"The layer's GEMMs keep {efficiency:.0%} of {sms} SMs busy across their waves; the worst, "
                    f"{name} ({m}×{n}), makes {q.tiles} tiles = {q.waves} waves at {q.wave_efficiency:.0%}.",
                    "Tokens per micro-batch (MBS × sequence) and the per-rank widths set the tile count: a "
                    "different MBS or TP can fill the last wave.",
                    measured=efficiency,
                    expected=1.0,
                    ratio=efficiency,
                )
            )
    return flags


FUSED_SOFTMAX_FRAMEWORKS = {"megatron", "megatron-deepspeed", "table"}


def fused_softmax(store: Store, t: Thresholds, scope: Scope, runs: list[RunInputs]) -> list[Flag]:
    """Megatron's fused masked softmax (FusedScaleMaskSoftmax.is_kernel_available) needs 16-bit inputs,
    16 < seq ≤ 16384 with seq % 4 == 0, and MBS·heads/TP divisible by 4; otherwise the slower PyTorch
    softmax runs. Flash attention and Transformer Engine's fused attention do not use it."""
    flags = []
    for run in runs:
        if run.cfg is None or run.train is None or run.framework not in FUSED_SOFTMAX_FRAMEWORKS:
            continue
        if run.precision not in ("fp16", "bf16") or run.flag("masked_softmax_fusion") is False:
            continue
        if run.flag("use_flash_attn") or run.run_params.get("transformer_impl") == "transformer_engine":
            continue
        if run.run_params.get("attention_backend", "").lower() in ("flash", "fused"):
            continue
        cfg, train = run.cfg, run.train
        if cfg.heads % train.tp or fused_softmax_ok(train.mbs, cfg.heads, train.tp, cfg.seq_len):
            continue
        batches = train.mbs * cfg.heads // train.tp
        flags.append(
            _flag(
                "fused_softmax_constraint",
                "info",
                run.run_id,
                f"MBS·heads/TP = {train.mbs}·{cfg.heads}/{train.tp} = {batches} (sequence {cfg.seq_len}) breaks "
                "the fused softmax kernel's rule (a multiple of 4, 16 < seq ≤ 16384): the slower unfused "
                "softmax runs.",
                "Choose MBS, heads and TP so that MBS·heads/TP is a multiple of 4, or use flash attention.",
                measured=float(batches),
            )
        )
    return flags


def pipeline_bubble(store: Store, t: Thresholds, scope: Scope, runs: list[RunInputs]) -> list[Flag]:
    """Narayanan et al. 2021 §2.2: the 1F1B bubble is (p−1)/m of the ideal time, (p−1)/(v·m) interleaved."""
    predicted = _predicted(store, scope, ("bubble_fraction",))
    flags = []
    for run_id, metrics in predicted.items():
        value, _, detail = metrics["bubble_fraction"]
        if value is None or value <= t.pipeline_bubble:
            continue
        d = json.loads(detail) if detail else {}
        p, m, v = d.get("pp"), d.get("microbatches"), d.get("chunks", 1)
        flags.append(
            _flag(
                "pipeline_bubble",
                "warning" if value > 2 * t.pipeline_bubble else "info",
                run_id,
                f"Pipeline bubble (p−1)/(v·m) = ({p}−1)/({v}·{m}) = {value:.0%} of the compute time is idle.",
                "More micro-batches per pipeline (a larger global batch or a smaller MBS), fewer stages, or "
                "the interleaved schedule (--num-layers-per-virtual-pipeline-stage) shrink it.",
                measured=float(value),
                expected=float(t.pipeline_bubble),
                ratio=float(value / t.pipeline_bubble),
            )
        )
    return flags


RULES = (oom_proximity, throughput, tflops_formula_mismatch, quantization, fused_softmax, pipeline_bubble)


def evaluate(store: Store, t: Thresholds, scope: Scope, runs: list[RunInputs] | None = None) -> list[Flag]:
    if runs is None:
        runs = [predictions.infer(run) for run in run_inputs.load(store, where=scope.runs)]
    return [flag for rule in RULES for flag in rule(store, t, scope, runs)]
