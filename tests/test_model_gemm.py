"""Compute time per operation (model.gemm), overlap of DP traffic, pipeline sends and interleaving."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tracelog import api, hardware
from tracelog.model.collectives import predict_collective
from tracelog.model.flops import ModelConfig, TrainConfig, flops_megatron_lm
from tracelog.model.gemm import (
    HBM_SHARE,
    KERNEL_OVERHEAD_S,
    LOW_PRECISION_SHARE,
    cross_entropy_seconds,
    gemm_efficiency,
    layer_forward_ops,
    logits_forward_op,
    no_tensor_core_factor,
)
from tracelog.model.memory import memory_per_gpu
from tracelog.model.timing import dp_traffic, predict_iteration, stage_compute

A100 = hardware.gpu("a100-sxm4-80gb")
H100 = hardware.gpu("h100-sxm5-80gb")
# GPT-3 175B shapes (Brown et al. 2020, Table 2.1), vocabulary padded to a multiple of 128·t.
GPT3 = ModelConfig(layers=96, hidden=12288, heads=96, seq_len=2048, vocab=51200)
# BLOOM-176B as BigScience trained it (tr11 chronicles, final layout of 02-28, line 948): 70 layers,
# h 14336, 112 heads, padded vocabulary 250880, DP8 TP4 PP12 MBS2, GBS 2048, ZeRO-1, Megatron-DeepSpeed.
BLOOM = ModelConfig(layers=70, hidden=14336, heads=112, seq_len=2048, vocab=250880)
BLOOM_FINAL = TrainConfig(
    gbs=2048, mbs=2, tp=4, pp=12, dp=8, recompute="full", zero_stage=1, fp32_grads=True,
    framework="megatron-deepspeed",
)  # fmt: skip


@pytest.mark.parametrize("tp", [1, 8])
@pytest.mark.parametrize("flash", [False, True])
def test_layer_gemms_sum_to_megatron_lm_flops(tp: int, flash: bool) -> None:
    # 3 × forward (forward, and the backward's two GEMMs per forward GEMM) over all layers and ranks,
    # plus the logits: Megatron-LM's count. Unfused attention computes the whole s×s score matrix (the
    # form printed before 2025-03); flash skips the masked half (the causal-halved form).
    train = TrainConfig(gbs=1, mbs=1, tp=tp, flash_attention=flash)
    ops = layer_forward_ops(GPT3, train, A100)
    layer = sum(op.flops for op in ops) * tp
    logits = logits_forward_op(GPT3, train, A100).flops * tp
    total = 3 * (GPT3.layers * layer + logits)
    assert total == pytest.approx(flops_megatron_lm(GPT3, 1, causal_halved=flash))


def test_swiglu_and_gqa_shapes() -> None:
    llama = ModelConfig(
        layers=32, hidden=4096, heads=32, query_groups=8, seq_len=4096, vocab=128256, ffn_hidden=14336,
        swiglu=True, bias=False,
    )  # fmt: skip
    train = TrainConfig(gbs=1, mbs=1, tp=2, flash_attention=True)
    shapes = {op.name: op.shape for op in layer_forward_ops(llama, train, H100)}
    assert shapes["qkv"] == (4096, (4096 + 2 * 1024) // 2, 4096)
    assert shapes["mlp_up"] == (4096, 2 * 14336 // 2, 4096)  # gate and up projections in one GEMM
    assert shapes["mlp_down"] == (4096, 4096, 14336 // 2)


def test_efficiency_falls_off_the_tensor_cores_below_multiples_of_8() -> None:
    # Head dimension 150 (h 14400, 96 heads): the attention GEMMs' K (QKᵀ) is not a multiple of 8.
    aligned = gemm_efficiency(2048, 2048, 128, A100, batch=96)
    misaligned = gemm_efficiency(2048, 2048, 150, A100, batch=96)
    assert misaligned == pytest.approx(aligned * no_tensor_core_factor(A100), rel=0.05)
    assert no_tensor_core_factor(A100) == pytest.approx(19.5 / 312)  # A100 datasheet: FP32 over BF16 TC
    assert gemm_efficiency(8192, 1800, 14400, A100) < gemm_efficiency(8192, 1792, 14336, A100)


def test_efficiency_falls_with_fewer_rows() -> None:
    # The same QKV GEMM of BLOOM at TP 4 for micro-batches of 1, 2 and 4 (M = b·2048 rows).
    rates = [gemm_efficiency(b * 2048, 3 * 14336 // 4, 14336, A100) for b in (1, 2, 4)]
    assert rates[0] < rates[1] < rates[2] <= 1


def test_flash_attention_never_materialises_the_scores() -> None:
    unfused = {op.name: op for op in layer_forward_ops(GPT3, TrainConfig(gbs=1, mbs=1, tp=8), A100)}
    flash = {
        op.name: op
        for op in layer_forward_ops(GPT3, TrainConfig(gbs=1, mbs=1, tp=8, flash_attention=True), A100)
    }
    assert {"scores", "softmax_dropout", "context"} <= set(unfused) and "attention" in flash
    assert "softmax_dropout" not in flash
    scores = 12 * 2048 * 2048  # heads per rank × s²
    assert unfused["softmax_dropout"].bytes == scores * (2 + 2 + 2 + 2 + 1)
    core_unfused = sum(unfused[k].time_s for k in ("scores", "softmax_dropout", "context"))
    assert flash["attention"].time_s < core_unfused


def test_compute_scale_multiplies_the_sustained_rate() -> None:
    base = stage_compute(GPT3, TrainConfig(gbs=64, mbs=1, tp=8, pp=8, dp=1), A100)
    faster = stage_compute(GPT3, TrainConfig(gbs=64, mbs=1, tp=8, pp=8, dp=1), A100, compute_scale=1.1)
    gemms = [(a, b) for a, b in zip(base.layer_ops, faster.layer_ops, strict=True) if a.kind == "gemm"]
    assert all(b.efficiency == pytest.approx(min(1.0, a.efficiency * 1.1)) for a, b in gemms)
    assert faster.microbatch_s < base.microbatch_s


def test_overlap_hides_all_but_the_last_bucket() -> None:
    # Megatron's distributed optimizer over DP 8 across nodes (TP 8 PP 12, 1.8B params per GPU), buckets
    # of max(40M, 1M·DP) parameters: 46 buckets, each far shorter than one micro-batch's backward pass.
    layout = dict(gbs=512, mbs=8, tp=8, pp=12, dp=8, distributed_optimizer=True, fp32_grads=True)
    plain = TrainConfig(**layout)  # type: ignore[arg-type]
    overlapped = TrainConfig(**layout, overlap_grad_reduce=True, overlap_param_gather=True)  # type: ignore[arg-type]
    traffic = dp_traffic(GPT3, overlapped, A100, "ib-hdr-x8")
    assert traffic.last_reduce_s < traffic.reduce_s / 40
    stage = stage_compute(GPT3, overlapped, A100)
    assert traffic.reduce_s < stage.backward_s and traffic.gather_s < stage.forward_s
    exposed = predict_iteration(GPT3, plain, A100, "ib-hdr-x8")
    hidden = predict_iteration(GPT3, overlapped, A100, "ib-hdr-x8")
    assert exposed.dp_comm_s == pytest.approx(traffic.total_s)
    assert hidden.dp_comm_s == pytest.approx(traffic.last_reduce_s + traffic.last_gather_s)
    assert hidden.dp_comm_total_s == exposed.dp_comm_total_s


def test_tp_comm_overlap_costs_its_last_chunks_and_the_sms_it_takes() -> None:
    """Overlapped TP collectives cost what Transformer Engine's default userbuffers leave: the last of
    four chunks of each forward reduce-scatter, and 16 of the GPU's SMs taken from the GEMMs beside a
    pipeline or bulk collective (forward proj and fc2, backward dgrad and wgrad of qkv and fc1)."""
    train = TrainConfig(gbs=64, mbs=1, tp=8, pp=1, dp=1)
    overlapped = TrainConfig(gbs=64, mbs=1, tp=8, tp_comm_overlap=True)
    shown = predict_iteration(GPT3, train, H100)
    hidden = predict_iteration(GPT3, overlapped, H100)
    ops = {op.name: op.time_s for op in stage_compute(GPT3, overlapped, H100).layer_ops}
    beside = ops["proj"] + ops["mlp_down"] + 2 * (ops["qkv"] + ops["mlp_up"])
    margin = beside * GPT3.layers * 64 * 16 / (132 - 16)  # H100 SXM5: 132 SMs
    last_chunks = shown.tp_comm_s * (2 / 4) / 2 / 4  # forward: 2 of 4 all-reduces, RS half, 1 of 4 chunks
    assert hidden.tp_comm_s == pytest.approx(last_chunks + margin)
    assert 0 < hidden.tp_comm_s < shown.tp_comm_s / 2
    assert hidden.compute_s == shown.compute_s


def test_pipeline_sends_cross_the_stage_link_per_micro_batch() -> None:
    # Both send s·b·h/t per rank (Megatron's scatter/gather, DeepSpeed's PartitionedTensor); DeepSpeed
    # rebuilds the tensor with three NVLink all-gathers per micro-batch; interleaving crosses v× more.
    megatron = TrainConfig(gbs=512, mbs=1, tp=8, pp=8, dp=1)
    deepspeed = TrainConfig(gbs=512, mbs=1, tp=8, pp=8, dp=1, framework="megatron-deepspeed")
    interleaved = TrainConfig(gbs=512, mbs=1, tp=8, pp=8, dp=1, vp=3, overlap_p2p_comm=False)
    p2p = {
        name: predict_iteration(GPT3, t, A100, "ib-hdr-x8").p2p_s
        for name, t in (("megatron", megatron), ("deepspeed", deepspeed), ("interleaved", interleaved))
    }
    gather = predict_collective("all_gather", 2048 * 12288 * 2, 8, 300).time_us * 1e-6
    assert p2p["deepspeed"] == pytest.approx(p2p["megatron"] + 512 * 3 * gather)
    assert p2p["interleaved"] == pytest.approx(3 * p2p["megatron"])


def test_interleaved_sends_hide_behind_the_next_chunk_but_not_in_the_bubble() -> None:
    # Megatron-LM --overlap-p2p-communication (default): steady-state sends overlap compute; warm-up and
    # flush sends stay in the bubble, so the iteration is shorter by the steady sends alone.
    shown = TrainConfig(gbs=512, mbs=1, tp=8, pp=8, dp=1, vp=3, overlap_p2p_comm=False)
    hidden = TrainConfig(gbs=512, mbs=1, tp=8, pp=8, dp=1, vp=3)
    a = predict_iteration(GPT3, shown, A100, "ib-hdr-x8")
    b = predict_iteration(GPT3, hidden, A100, "ib-hdr-x8")
    assert a.p2p_s > 0 and b.p2p_s == 0
    assert b.bubble_s == pytest.approx(a.bubble_s)
    assert a.total_s - b.total_s == pytest.approx(a.p2p_s)
    deepspeed = TrainConfig(gbs=512, mbs=1, tp=8, pp=8, dp=1, vp=3, framework="megatron-deepspeed")
    assert predict_iteration(GPT3, deepspeed, A100, "ib-hdr-x8").p2p_s > 0  # no such overlap there


def test_bloom_final_layout_within_10_percent_of_the_published_time() -> None:
    # tr11 chronicles prequel, 02-28, line 948: 104.50 s/it, 150.05 TFLOPs on 48 nodes of 8 A100 80GB.
    t = predict_iteration(BLOOM, BLOOM_FINAL, A100, "ib-hdr-x8")
    assert t.total_s == pytest.approx(104.50, rel=0.10)


def test_flat_efficiency_given_explicitly_keeps_the_old_model() -> None:
    t = predict_iteration(BLOOM, BLOOM_FINAL, A100, "ib-hdr-x8", compute_efficiency=0.5)
    assert t.compute_s == pytest.approx(t.hardware_flops / 384 / (312e12 * 0.5))


BLOOM_PLAN = dict(
    gpus=384, gpu="a100-sxm4-80gb", layers=72, hidden=14336, heads=112, seq_len=2048, vocab=250880, gbs=2048
)


def test_plan_does_not_rank_micro_batch_1_first_for_bloom() -> None:
    # tr11 chronicles: MBS 1 ran 7-43% slower than MBS 2 at the same layout (lines 607-617, 830-831).
    frame = api.plan(None, api.PlanRequest(**BLOOM_PLAN, zero_stage=1, top=5, compute_scale=1.0))
    assert frame.iloc[0].mbs > 1


def test_plan_interleaving_divides_the_bubble() -> None:
    plain = api.plan(None, api.PlanRequest(**BLOOM_PLAN, zero_stage=1, top=None, compute_scale=1.0))
    inter = api.plan(None, api.PlanRequest(**BLOOM_PLAN, zero_stage=1, top=None, vp=2, compute_scale=1.0))
    joined = plain.merge(inter, on=["dp", "tp", "pp", "mbs"], suffixes=("", "_vp"))
    chunked = joined[joined.vp_vp == 2]
    assert not chunked.empty and (chunked.pp > 2).all()
    assert chunked.bubble_vp.to_numpy() == pytest.approx(chunked.bubble.to_numpy() / 2)
    assert (chunked.pred_sec_per_it_vp < chunked.pred_sec_per_it).all()
    kept = joined[joined.vp_vp == 1]  # layouts the interleaved schedule does not allow keep 1F1B
    assert (kept.bubble_vp == kept.bubble).all()


# Llama 3 70B (Grattafiori et al. 2024, Table 3: 80 layers, h 8192, 64 heads, 8 KV heads, FFN 28672,
# vocabulary 128256), the layer of the Megatron-Bridge DGX-H100 recipe: TP 4, sequence parallel, flash.
LLAMA3_70B = ModelConfig(
    layers=80, hidden=8192, heads=64, seq_len=8192, vocab=128256, ffn_hidden=28672, query_groups=8,
    swiglu=True, tied_embeddings=False,
)  # fmt: skip


def _llama_layer(precision: str) -> dict[str, object]:
    train = TrainConfig(
        gbs=128, mbs=1, tp=4, sequence_parallel=True, flash_attention=True, precision=precision
    )
    return {op.name: op for op in layer_forward_ops(LLAMA3_70B, train, H100)}


def test_fp8_runs_only_the_linear_gemms_in_fp8() -> None:
    bf16, fp8 = _llama_layer("bf16"), _llama_layer("fp8")
    for name in ("qkv", "proj", "mlp_up", "mlp_down"):  # twice the peak, at most twice as fast
        assert bf16[name].time_s / 2.05 < fp8[name].time_s < bf16[name].time_s
    # attention and the element-wise work are the BF16 kernels of the BF16 layer, to the nanosecond
    for name in ("attention", "layernorms", "bias_dropout_residual", "activation"):
        assert fp8[name].time_s == pytest.approx(bf16[name].time_s)
    assert "fp8_casts" in fp8 and "fp8_casts" not in bf16
    # the casts read each linear input once in BF16 and write it twice in FP8 (itself and its transpose)
    m = 8192
    inputs = m * (8192 + 8192 // 4 + 8192 + 28672 // 4)
    assert fp8["fp8_casts"].bytes == inputs * 4
    assert sum(o.time_s for o in fp8.values()) > 0.5 * sum(o.time_s for o in bf16.values())


def test_fp8_keeps_bf16_activations_weights_and_communication() -> None:
    def parts(precision: str):
        train = TrainConfig(
            gbs=128, mbs=1, tp=4, pp=8, dp=2, vp=5, sequence_parallel=True, flash_attention=True,
            distributed_optimizer=True, precision=precision,
        )  # fmt: skip
        return predict_iteration(LLAMA3_70B, train, H100, "ib-ndr-x8"), memory_per_gpu(LLAMA3_70B, train)

    (t16, m16), (t8, m8) = parts("bf16"), parts("fp8")
    assert t8.tp_comm_s == pytest.approx(t16.tp_comm_s)  # the same BF16 all-gathers and reduce-scatters
    for part in ("weights", "grads", "optimizer", "embedding"):  # BF16 weights, fp32 main grads, Adam
        assert getattr(m8, part) == pytest.approx(getattr(m16, part))
    assert m8.activations < m16.activations  # only the linear layers' saved inputs shrink
    assert 0.5 * t16.compute_s < t8.compute_s < 0.8 * t16.compute_s


def test_an_fp8_gemm_keeps_nine_tenths_of_a_bf16_gemms_share() -> None:
    """float8_experimental's H100 profile: the same GEMMs 14.426 ms in BF16, 7.993 ms in FP8 (1.805x, not
    the 2x of the peaks)."""
    assert LOW_PRECISION_SHARE["fp8"] == pytest.approx(0.9024, abs=1e-4)
    bf16 = gemm_efficiency(8192, 8192, 8192, H100, precision="bf16")
    fp8 = gemm_efficiency(8192, 8192, 8192, H100, precision="fp8")
    assert fp8 == pytest.approx(bf16 * LOW_PRECISION_SHARE["fp8"])


# Nemotron 8B as NeMo 24.07 trained it (NeMo-Framework-Launcher 24.07 nemotron_8b.yaml: 32 layers, h 4096,
# 32 heads, FFN 16384, squared ReLU; 256k SentencePiece vocabulary; TP 2, DP 32, MBS 4, GBS 256, seq 4096).
NEMOTRON_8B = ModelConfig(
    layers=32, hidden=4096, heads=32, seq_len=4096, vocab=256000, ffn_hidden=16384, bias=False, dropout=False
)
NEMOTRON_8B_LAYOUT = TrainConfig(
    gbs=256, mbs=4, tp=2, dp=32, sequence_parallel=True, flash_attention=True, precision="fp8",
    distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True, tp_comm_overlap=True,
)  # fmt: skip


def test_the_unfused_loss_makes_passes_over_the_fp32_logits() -> None:
    """Megatron's vocab_parallel_cross_entropy: cast, max, subtract, exp, sum and divide over the
    M x V/t logits in fp32 (38 bytes per element), then multiply and cast back in the backward pass (14);
    the jit-fused loss 22 + 6, Transformer Engine's Triton loss reads the bf16 logits once forward and once
    more to write the gradient in their place (2 + 4)."""
    elements = 4 * 4096 * 128000  # MBS x seq tokens, 256000 / TP 2 logits each
    hbm = H100.memory_bandwidth_gbps * 1e9 * HBM_SHARE
    forward, backward = cross_entropy_seconds(NEMOTRON_8B, NEMOTRON_8B_LAYOUT, H100)
    assert forward == pytest.approx(elements * 38 / hbm + 7 * KERNEL_OVERHEAD_S)
    assert backward == pytest.approx(elements * 14 / hbm + 2 * KERNEL_OVERHEAD_S)
    fused = cross_entropy_seconds(NEMOTRON_8B, replace(NEMOTRON_8B_LAYOUT, cross_entropy="fused"), H100)
    te = cross_entropy_seconds(NEMOTRON_8B, replace(NEMOTRON_8B_LAYOUT, cross_entropy="te"), H100)
    assert sum(fused) == pytest.approx(28 / 52 * (forward + backward), rel=0.01)
    assert sum(te) == pytest.approx(6 / 52 * (forward + backward), rel=0.01)


def test_a_256k_vocabulary_loss_is_six_percent_of_a_small_models_step() -> None:
    """NeMo 24.07 measured Nemotron 8B at 12,507 tokens/s/GPU, 1.31 s per iteration of two micro-batches
    per GPU (NVIDIA/NeMo performance_summary.md): the unfused loss over its 256k vocabulary takes 6 % of
    that, where the model had nothing; GPT-3 175B's 51k vocabulary over TP 8 costs under 1 % of a
    micro-batch."""
    unfused = predict_iteration(NEMOTRON_8B, NEMOTRON_8B_LAYOUT, H100, "ib-ndr-x8")
    te_layout = replace(NEMOTRON_8B_LAYOUT, cross_entropy="te")
    te = predict_iteration(NEMOTRON_8B, te_layout, H100, "ib-ndr-x8")
    per_microbatch = sum(cross_entropy_seconds(NEMOTRON_8B, NEMOTRON_8B_LAYOUT, H100)) - sum(
        cross_entropy_seconds(NEMOTRON_8B, te_layout, H100)
    )
    assert unfused.compute_s - te.compute_s == pytest.approx(2 * per_microbatch)
    assert 0.05 < 2 * sum(cross_entropy_seconds(NEMOTRON_8B, NEMOTRON_8B_LAYOUT, H100)) / 1.31 < 0.07
    gpt3 = TrainConfig(gbs=64, mbs=1, tp=8, pp=8)
    assert sum(cross_entropy_seconds(GPT3, gpt3, A100)) < stage_compute(GPT3, gpt3, A100).microbatch_s / 100


# OpenXLA's measured H100 SXM matmul table (xla/service/gpu/model/matmul_interpolator_data.h, key "sm_90",
# the "BF16xBF16->BF16" rate in FLOP/s of the entries b: 4, m: 4096, n: 4096, k: K), verbatim:
XLA_H100_K_SWEEP = {
    256: 505052598306679,
    512: 621648182949775,
    1024: 722875922915088,
    2048: 763755531195905,
    4096: 794300190843863,
}


def test_a_short_inner_dimension_costs_what_xla_measured_on_an_h100() -> None:
    from tracelog.model.gemm import INNER_REFERENCE, inner_factor

    for k, rate in XLA_H100_K_SWEEP.items():
        measured = rate / XLA_H100_K_SWEEP[INNER_REFERENCE]
        assert inner_factor(k, H100) == pytest.approx(measured, abs=0.05), k
    assert inner_factor(8192, H100) == 1.0  # at most the ceiling
    # the fixed part of a tile is a time: a GPU whose SMs consume K more slowly hides it in a shorter K
    b200 = hardware.gpu("b200-sxm-180gb")
    assert inner_factor(1024, A100) > inner_factor(1024, H100) > inner_factor(1024, b200)


def test_the_inner_factor_slows_linear_layers_not_the_attention_products() -> None:
    from tracelog.model.gemm import gemm_efficiency, inner_factor, layer_forward_ops

    cfg = ModelConfig(layers=24, hidden=2048, heads=16, seq_len=2048, vocab=50304)
    train = TrainConfig(gbs=64, mbs=8, tp=2, dp=4, flash_attention=False)
    ops = {op.name: op for op in layer_forward_ops(cfg, train, H100)}
    # proj runs K = h/t = 1024, the MLP's down projection K = 4h/t = 4096
    assert ops["proj"].efficiency / ops["mlp_down"].efficiency == pytest.approx(
        inner_factor(1024, H100) / inner_factor(4096, H100), rel=0.05
    )
    assert ops["proj"].efficiency < ops["mlp_down"].efficiency
    # the scores' batched products (K = head dimension 128) keep the rate they had
    m, n, k = ops["scores"].shape or (0, 0, 0)
    batch = ops["scores"].batch
    assert ops["scores"].efficiency == pytest.approx(gemm_efficiency(m, n, k, H100, batch, inner=False))
    assert ops["scores"].efficiency > gemm_efficiency(m, n, k, H100, batch)


# The same table's B200 entries (key "sm_100", rate key "bf16xbf16->bf16", b: 4, m: 4096, n: 4096), verbatim:
XLA_B200_K_SWEEP = {
    256: 789352807737370,
    512: 1092363202975726,
    1024: 1350353246924739,
    2048: 1543980334681405,
    4096: 1690656401017304,
}


def test_the_inner_half_scales_to_a_b200_by_its_rate_per_sm() -> None:
    """K½ fitted on the H100 and scaled by BF16 rate per SM (148 SMs, 2.25 PFLOP/s) reproduces the B200's
    own K sweep, which loses far more at a short K than the H100's."""
    from tracelog.model.gemm import inner_factor

    b200 = hardware.gpu("b200-sxm-180gb")
    for k, rate in XLA_B200_K_SWEEP.items():
        measured = rate / XLA_B200_K_SWEEP[4096]
        assert inner_factor(k, b200) == pytest.approx(measured, abs=0.06), k
        assert measured < XLA_H100_K_SWEEP[k] / XLA_H100_K_SWEEP[4096] or k == 4096
