"""Mixture-of-experts under expert parallelism (`tracelog.model.moe`, the expert parts of `model.memory`
and `model.timing`), each formula against a hand computation written out here."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from tracelog import api, hardware
from tracelog.analysis import inputs as run_inputs
from tracelog.errors import TracelogError
from tracelog.model.collectives import DEFAULT_ALPHA_US, DEFAULT_LINK_EFFICIENCY
from tracelog.model.flops import ModelConfig, TrainConfig, expert_params_per_layer
from tracelog.model.memory import expert_params_per_gpu, stage_memory, state_bytes, transformer_params_per_gpu
from tracelog.model.moe import (
    alltoall_seconds,
    dispatch_bytes,
    expert_parallel_seconds,
    moe_layer_ops,
    ranks_per_token,
)
from tracelog.model.timing import tp_comm_seconds

H100 = hardware.gpu("h100-sxm5-80gb")
NDR_X8 = hardware.fabric_of("ib-ndr-x8", None)  # 8 NICs x 50 GB/s a node

# Qwen3-30B-A3B's shapes (Megatron-Bridge Qwen3MoEModelProvider30B_A3B): 48 layers, h 2048, 128 experts,
# top 8, expert width 768, head dimension 128
QWEN3_30B = ModelConfig(
    layers=48, hidden=2048, heads=32, query_groups=4, kv_channels=128, seq_len=4096, vocab=151936,
    ffn_hidden=6144, swiglu=True, bias=False, tied_embeddings=False, learned_positions=False, dropout=False,
    num_experts=128, moe_topk=8, moe_ffn_hidden=768,
)  # fmt: skip


def layout(**kw) -> TrainConfig:
    base = dict(gbs=1024, mbs=1, tp=1, pp=2, dp=8, ep=8, etp=1, precision="bf16", distributed_optimizer=True)
    return TrainConfig(**(base | kw))


def test_expert_data_parallel_size_is_world_over_etp_ep_pp():
    # megatron/core/parallel_state.py: expert_data_parallel_size = world // (ETP * EP * PP)
    assert layout().expert_dp == 16 // (1 * 8 * 2)  # 1
    assert layout(dp=32, gbs=1024).expert_dp == 64 // (1 * 8 * 2)  # 4
    assert layout(tp=2, dp=4, ep=4, etp=None).expert_tp == 2  # unset: TP, Megatron's default
    with pytest.raises(TracelogError, match="does not divide"):
        layout(ep=3)


def test_ranks_a_token_goes_to_under_a_flex_dispatcher():
    # 128 experts over 8 ranks, 16 each: a rank holds none of a token's 8 experts with probability
    # C(112, 8) / C(128, 8) = (112 * 111 * ... * 105) / (128 * 127 * ... * 121)
    missed = math.prod(range(105, 113)) / math.prod(range(121, 129))
    assert ranks_per_token(QWEN3_30B, layout(moe_dispatcher="flex")) == pytest.approx(8 * (1 - missed))
    assert 5.2 < 8 * (1 - missed) < 5.4
    assert ranks_per_token(QWEN3_30B, layout()) == 8  # the all-to-all dispatcher sends a copy per expert


def test_dispatch_bytes_are_tokens_times_topk_times_hidden():
    # T = b * s / (cp * t) = 1 * 4096 tokens, 8 copies of 2048 values of 2 bytes
    assert dispatch_bytes(QWEN3_30B, layout()) == 4096 * 8 * 2048 * 2
    # TP 2 with sequence parallelism: each rank dispatches its half of the sequence
    assert dispatch_bytes(QWEN3_30B, layout(tp=2, dp=4)) == 2048 * 8 * 2048 * 2


def test_alltoall_inside_a_node_runs_over_nvlink():
    size = 4096 * 8 * 2048 * 2
    # 7 of the 8 shares leave the GPU over NVLink 4 (450 GB/s one way) at 0.78 of it, 7 steps of 5 us
    expected = 7 * 5e-6 + size * 7 / 8 / (0.78 * 450e9)
    got = alltoall_seconds(size, 8, 8, H100, NDR_X8, DEFAULT_ALPHA_US, DEFAULT_LINK_EFFICIENCY)
    assert got == pytest.approx(expected)


def test_alltoall_across_nodes_shares_the_nodes_nics():
    size = 2048 * 8 * 4096 * 2
    # EP 32 over 4 nodes: each GPU sends 7/32 of its data over NVLink and 24/32 off the node, where the
    # node's 8 GPUs share 8 x 50 GB/s: 8 * size * 24/32 bytes through the NICs
    nvlink = size * 7 / 32 / (0.78 * 450e9)
    nics = 8 * size * 24 / 32 / (0.78 * 400e9)
    expected = 31 * 5e-6 + max(nvlink, nics)
    got = alltoall_seconds(size, 32, 8, H100, NDR_X8, DEFAULT_ALPHA_US, DEFAULT_LINK_EFFICIENCY)
    assert got == pytest.approx(expected)
    assert nics > 10 * nvlink


def test_dispatch_and_combine_forward_and_backward_per_layer_and_microbatch():
    train = layout()  # PP 2: 24 layers a stage; m = 1024 / (8 * 1) = 128 micro-batches
    one = alltoall_seconds(4096 * 8 * 2048 * 2, 8, 8, H100, NDR_X8, DEFAULT_ALPHA_US, DEFAULT_LINK_EFFICIENCY)
    got = expert_parallel_seconds(
        QWEN3_30B, train, H100, NDR_X8, 8, DEFAULT_ALPHA_US, DEFAULT_LINK_EFFICIENCY
    )
    assert got == pytest.approx(4 * one * 24 * 128)
    full = expert_parallel_seconds(
        QWEN3_30B, layout(recompute="full"), H100, NDR_X8, 8, DEFAULT_ALPHA_US, DEFAULT_LINK_EFFICIENCY
    )
    assert full == pytest.approx(6 * one * 24 * 128)
    dense = ModelConfig(layers=48, hidden=2048, heads=32, seq_len=4096, vocab=151936)
    assert expert_parallel_seconds(dense, train, H100, NDR_X8, 8, 5.0, 0.78) == 0.0


def test_experts_run_as_grouped_gemms_of_their_share_of_the_tokens():
    ops = {op.name: op for op in moe_layer_ops(QWEN3_30B, layout(), H100)}
    assert "mlp_up" not in ops and "mlp_down" not in ops
    # rows per expert R = T * k * EP * ETP / E = 4096 * 8 * 8 * 1 / 128 = 2048; E / EP = 16 local experts
    assert ops["expert_up"].shape == (2048, 2 * 768, 2048) and ops["expert_up"].batch == 16
    assert ops["expert_down"].shape == (2048, 2048, 768) and ops["expert_down"].batch == 16
    # the FLOPs of the routed width as one GEMM: 2 * T * k * h * (2f + f)
    grouped = ops["expert_up"].flops + ops["expert_down"].flops
    assert grouped == 2 * 4096 * 8 * 2048 * (2 * 768 + 768)
    assert ops["router"].shape == (4096, 128, 2048)
    # permute (k*T*h read and written), sort by expert and back (4 k*T*h), unpermute (k*T*h + T*h)
    assert ops["permutation"].bytes == (7 * 8 + 1) * 4096 * 2048 * 2


def test_each_local_expert_is_a_kernel_of_its_own():
    # Transformer Engine's grouped GEMM launches one cuBLAS GEMM per expert (multi_stream_cublas_gemm),
    # so 16 local experts pay 16 kernels' fixed cost, not one; the FLOPs stay those of the batched shape
    from tracelog.model.gemm import HBM_SHARE, KERNEL_OVERHEAD_S

    for ep, local in ((8, 16), (32, 4)):
        train = layout(ep=ep, dp=32, gbs=1024)
        up = {op.name: op for op in moe_layer_ops(QWEN3_30B, train, H100)}["expert_up"]
        assert up.batch == local
        peak = hardware.peak_tflops(H100, "bf16") * 1e12
        roofline = max(
            up.flops / (peak * up.efficiency), up.bytes / (H100.memory_bandwidth_gbps * 1e9 * HBM_SHARE)
        )
        assert up.time_s - roofline == pytest.approx(local * KERNEL_OVERHEAD_S)


def test_few_tokens_per_expert_lose_gemm_efficiency():
    # EP 8 x 128 experts at MBS 1 gives 2048 rows an expert; 128 experts of 1 rank each cannot fill a GEMM
    many = {op.name: op for op in moe_layer_ops(QWEN3_30B, layout(), H100)}
    few_cfg = ModelConfig(**{**QWEN3_30B.__dict__, "seq_len": 256})
    few = {op.name: op for op in moe_layer_ops(few_cfg, layout(), H100)}
    assert few["expert_up"].shape[0] == 256 * 8 * 8 // 128  # 128 rows
    assert few["expert_up"].efficiency < many["expert_up"].efficiency


def test_tp_collectives_of_the_mlp_go_with_experts_outside_tp():
    # with expert TP 1 the MLP's TP all-gather and reduce-scatter become the dispatcher's all-to-all
    dense_mlp = tp_comm_seconds(QWEN3_30B, layout(tp=2, dp=4, ep=4, etp=2, sequence_parallel=True), H100)
    experts_out = tp_comm_seconds(QWEN3_30B, layout(tp=2, dp=4, ep=4, etp=1, sequence_parallel=True), H100)
    assert experts_out == pytest.approx(dense_mlp / 2)


def test_expert_weights_split_over_ep_and_their_optimizer_over_expert_dp():
    # one layer's experts: 128 x (2048 x 1536 + 768 x 2048) = 128 x 4,718,592 = 603,979,776
    assert expert_params_per_layer(QWEN3_30B) == 128 * (2048 * 1536 + 768 * 2048)
    train = layout(dp=32, gbs=1024)  # 64 GPUs, PP 2: 24 layers a stage, EP 8, expert DP 4, DP 32
    experts = 24 * 128 * (2048 * 1536 + 768 * 2048) / 8
    assert expert_params_per_gpu(QWEN3_30B, train) == pytest.approx(experts)
    # attention: h(q + 2kv) + qh = 2048 * (4096 + 1024) + 4096 * 2048; router 2048 x 128; two RMSNorms;
    # the final norm's 2048 spread over the 48 layers
    dense_per_layer = 2048 * (4096 + 1024) + 4096 * 2048 + 2048 * 128 + 2 * 2048 + 2048 / 48
    assert transformer_params_per_gpu(QWEN3_30B, train) == pytest.approx(24 * dense_per_layer + experts)
    memory = stage_memory(QWEN3_30B, train, stage="middle")
    # Adam's 12 bytes: the dense part over DP 32, the experts over expert DP 4
    assert memory.optimizer == pytest.approx(24 * dense_per_layer * 12 / 32 + experts * 12 / 4)
    assert memory.weights == pytest.approx((24 * dense_per_layer + experts) * state_bytes(train).weights)


# Invented figures in the shape of Megatron-LM's arguments block for an MoE run (Qwen3-30B-A3B's shapes,
# EP 8 over 16 GPUs, the flex dispatcher and the EP overlap switch).
MEGATRON_MOE_LOG = """\
------------------------ arguments ------------------------
  bf16 ............................................ True
  expert_model_parallel_size ...................... 8
  expert_tensor_parallel_size ..................... 1
  ffn_hidden_size ................................. 6144
  global_batch_size ............................... 1024
  hidden_size ..................................... 2048
  kv_channels ..................................... 128
  micro_batch_size ................................ 1
  moe_ffn_hidden_size ............................. 768
  moe_router_topk ................................. 8
  moe_shared_expert_intermediate_size ............. None
  moe_token_dispatcher_type ....................... flex
  num_attention_heads ............................. 32
  num_experts ..................................... 128
  num_layers ...................................... 48
  num_query_groups ................................ 4
  overlap_moe_expert_parallel_comm ................ True
  padded_vocab_size ............................... 151936
  pipeline_model_parallel_size .................... 2
  seq_length ...................................... 4096
  swiglu .......................................... True
  tensor_model_parallel_size ...................... 1
  transformer_impl ................................ transformer_engine
  use_distributed_optimizer ....................... True
  world_size ...................................... 16
-------------------- end of arguments ---------------------
 [2025-11-03 09:12:40] iteration       10/     100 | consumed samples:        10240 | elapsed time per iteration (ms): 24850.0 | learning rate: 1.000000E-04 | global batch size:  1024 | lm loss: 9.120000E+00 | loss scale: 1.0 | grad norm: 3.210 | number of skipped iterations:   0 | number of nan iterations:   0 |
"""


def test_a_megatron_logs_moe_arguments_reach_the_model(tmp_path: Path):
    log = tmp_path / "train.log"
    log.write_text(MEGATRON_MOE_LOG)
    db = tmp_path / "t.duckdb"
    api.ingest(db, [str(log)], gpu="h100-sxm5-80gb")
    with api.connect(db) as store:
        (run,) = run_inputs.load(store)
    assert run.cfg is not None and run.train is not None
    cfg, train = run.cfg, run.train
    assert (cfg.num_experts, cfg.moe_topk, cfg.moe_ffn_hidden, cfg.kv_channels) == (128, 8, 768, 128)
    assert cfg.moe_shared_ffn_hidden is None and cfg.all_moe
    assert (train.ep, train.expert_tp, train.expert_dp) == (8, 1, 1)
    assert train.moe_dispatcher == "flex" and train.moe_a2a_overlap


def test_moe_rows_are_scored_within_the_median_reached():
    """The published MoE rows (benchmarks/moe_runs.toml) at the median |error| the model reaches with
    expert parallelism and a kernel per expert, 19.6 % (64.5 % before): the bound is that figure. The Qwen3-235B
    rows, whose time the dispatch across nodes sets, within 17 %."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import fidelity

    rows, _ = fidelity.load_rows(None, heldout_path=None)
    moe = rows[rows["kind"] == "moe"]
    result = fidelity.score(moe)
    assert result["time"]["moe"]["n"] == 9
    assert result["time"]["moe"]["median_abs_error"] <= 0.20
    errors = {r["id"]: r["error"] for r in result["moe"]["rows"]}
    for run_id, error in errors.items():
        if "235b" in run_id:
            assert abs(error) <= 0.17, run_id


def test_predict_takes_a_moe_configuration_on_the_command_line(tmp_path: Path) -> None:
    """`tracelog predict --num-experts ... --ep ...`: the same figures as the library given the same keys,
    the expert-parallel exchange among them, and an EP of 1 exchanging nothing."""
    import json

    from click.testing import CliRunner

    from tracelog.cli import cli

    shape = [
        "--gpu", "h100-sxm5-80gb", "--layers", "48", "--hidden", "2048", "--heads", "32", "--query-groups", "4",
        "--seq", "4096", "--vocab", "151936", "--swiglu", "--num-experts", "128", "--moe-topk", "8",
        "--moe-ffn-hidden", "768", "--gbs", "512", "--mbs", "1", "--tp", "1", "--pp", "1", "--dp", "16",
        "--gpus-per-node", "8", "--precision", "bf16", "--recompute", "none", "--distributed-optimizer",
    ]  # fmt: skip

    def figures(*extra: str) -> dict[str, float]:
        out = CliRunner().invoke(
            cli, ["--db", str(tmp_path / "none.duckdb"), "predict", *shape, *extra, "--format", "json"]
        )
        assert out.exit_code == 0, out.output
        return {row["metric"]: row["value"] for row in json.loads(out.output) if row.get("value") is not None}

    eight, one = figures("--ep", "8"), figures("--ep", "1")
    assert eight["ep_comm_s"] > 0 and "ep_comm_s" not in one
    library = api.predict(
        None, gpu="h100-sxm5-80gb", layers=48, hidden=2048, heads=32, query_groups=4, seq_len=4096,
        vocab=151936, swiglu=True, num_experts=128, moe_topk=8, moe_ffn_hidden=768, gbs=512, mbs=1, tp=1,
        pp=1, dp=16, gpus_per_node=8, precision="bf16", recompute="none", distributed_optimizer=True, ep=8,
    )  # fmt: skip
    by_metric = dict(zip(library["metric"], library["value"], strict=False))
    assert eight["sec_per_it"] == pytest.approx(by_metric["sec_per_it"])
    assert eight["ep_comm_s"] == pytest.approx(by_metric["ep_comm_s"])
