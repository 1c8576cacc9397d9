"""PyTorch's context-parallel ring under torchtitan (model.context_parallel): the K/V all-gather, the fp32
dK/dV ring and the merges of partial outputs, priced from `_templated_ring_attention` and its backward;
Megatron-LM's CP (Transformer Engine's p2p ring) is left as it was."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tracelog import hardware
from tracelog.model.collectives import DEFAULT_ALPHA_US, DEFAULT_LINK_EFFICIENCY
from tracelog.model.context_parallel import (
    BACKWARD_EDGE_BYTES,
    BACKWARD_STEP_BYTES,
    FORWARD_EDGE_BYTES,
    FORWARD_STEP_BYTES,
    GRAD_BYTES,
    KV_BYTES,
    exchange_seconds,
    merge_seconds,
    ring_elements,
    ring_seconds,
    uses_ring,
)
from tracelog.model.flops import ModelConfig, TrainConfig
from tracelog.model.gemm import HBM_SHARE, KERNEL_OVERHEAD_S
from tracelog.model.timing import predict_iteration

GPU = hardware.gpu("h100-sxm-96gb-hbm2e")
FABRIC = hardware.node_fabric(hardware.link("roce-400g"), 8)

# torchtitan's Llama 3.1 8B, as its published Table 2 ran it (FSDP 1, CP 8, 262144 tokens)
LLAMA_8B = ModelConfig(32, 4096, 32, 262144, 128256, 14336, 8, swiglu=True)
CP8 = TrainConfig(
    gbs=1, mbs=1, tp=1, pp=1, dp=1, cp=8, framework="torchtitan", flash_attention=True, recompute="full"
)
# Llama 3.1 405B, Table 6 (TP 8, PP 8, CP 8): the CP ranks are TP = 8 apart, one per node
LLAMA_405B = ModelConfig(126, 16384, 128, 262144, 128256, 53248, 8, swiglu=True)
CP8_4D = replace(CP8, gbs=8, tp=8, pp=8, sequence_parallel=True)


def test_the_merge_counts_are_the_tensors_the_ring_reads_and_writes() -> None:
    """`_SDPAMerger` reads a step's BF16 output and the fp32 accumulator and writes the accumulator; the
    backward adds three BF16 gradients into fp32 (dQ, dK, dV); the edges cast to fp32 and back, and zero
    the three fp32 accumulators; K and V travel in BF16, their gradients in fp32 (`convert_to_f32`)."""
    assert (KV_BYTES, GRAD_BYTES) == (2, 4)
    assert FORWARD_STEP_BYTES == 2 + 4 + 4
    assert FORWARD_EDGE_BYTES == (2 + 4) + (4 + 2)
    assert BACKWARD_STEP_BYTES == 3 * (2 + 4 + 4)
    assert BACKWARD_EDGE_BYTES == 3 * 4 + 3 * (4 + 2)


def test_the_exchanged_width_is_the_repeated_heads() -> None:
    """torchtitan repeats the 8 KV groups to the 32 query heads before SDPA (`repeat_kv`): the ring moves
    b·s/cp·q/t elements of K and of V, 32768 × 4096 on the 8B at CP 8, 32768 × 2048 on the 405B at TP 8."""
    assert ring_elements(LLAMA_8B, CP8) == 32768 * 4096
    assert ring_elements(LLAMA_405B, CP8_4D) == 32768 * 16384 // 8


@pytest.mark.parametrize("framework", ["megatron", "nemo", "deepspeed"])
def test_other_frameworks_context_parallelism_is_not_priced_here(framework: str) -> None:
    train = replace(CP8, framework=framework)
    assert not uses_ring(train)
    assert merge_seconds(LLAMA_8B, train, GPU) == (0.0, 0.0)
    assert ring_seconds(LLAMA_8B, train, GPU, 0.25, FABRIC, 8, DEFAULT_ALPHA_US, DEFAULT_LINK_EFFICIENCY) == 0
    time = predict_iteration(LLAMA_8B, train, GPU, FABRIC)
    assert time.cp_comm_s == 0.0


def test_one_rank_has_no_ring() -> None:
    train = replace(CP8, cp=1, dp=8, gbs=8)
    assert not uses_ring(train)
    assert predict_iteration(replace(LLAMA_8B, seq_len=32768), train, GPU, FABRIC).cp_comm_s == 0.0


def test_the_merges_grow_with_the_ring_steps() -> None:
    """At fixed local tokens the merges grow with the steps, cp − 1 forward and cp backward, each at
    `HBM_SHARE` of the 2.4 TB/s of the Grand Teton H100."""
    elements = 32768 * 4096
    bandwidth = GPU.memory_bandwidth_gbps * 1e9 * HBM_SHARE
    forward, backward = merge_seconds(LLAMA_8B, CP8, GPU)
    launches = 7 * KERNEL_OVERHEAD_S  # one SDPA kernel a step, where the model counts one
    assert forward == pytest.approx(elements * (7 * 10 + 12) / bandwidth + launches)
    assert backward == pytest.approx(elements * (8 * 30 + 30) / bandwidth + launches)
    cp4_forward, _ = merge_seconds(replace(LLAMA_8B, seq_len=131072), replace(CP8, cp=4), GPU)
    assert cp4_forward < forward


def test_a_ring_that_leaves_the_node_costs_more_than_one_inside_it() -> None:
    """The 8B's CP group is one node's eight GPUs (NVLink); the 405B's is eight nodes, one GPU each, a
    GPU's 400 Gb/s NIC: its all-gather per element is several times slower."""
    args = (DEFAULT_ALPHA_US, DEFAULT_LINK_EFFICIENCY)
    gather_8b, send_8b = exchange_seconds(LLAMA_8B, CP8, GPU, FABRIC, 8, *args)
    gather_405b, send_405b = exchange_seconds(LLAMA_405B, CP8_4D, GPU, FABRIC, 8, *args)
    per_element_8b = gather_8b / ring_elements(LLAMA_8B, CP8)
    per_element_405b = gather_405b / ring_elements(LLAMA_405B, CP8_4D)
    assert per_element_405b > 4 * per_element_8b
    # the fp32 gradients of K and V: 2 × 4 bytes an element, sent once a step
    assert send_405b > 0 and send_8b > 0


def test_the_forward_gather_hides_behind_the_local_block_when_it_can() -> None:
    """On one node the all-gather is shorter than step 0's causal block, 1/cp of the attention forward:
    only the merges and the last dK/dV send stay; with no attention to hide behind, all of it shows."""
    args = (FABRIC, 8, DEFAULT_ALPHA_US, DEFAULT_LINK_EFFICIENCY)
    gather, send = exchange_seconds(LLAMA_8B, CP8, GPU, *args)
    forward, backward = merge_seconds(LLAMA_8B, CP8, GPU)
    hidden = ring_seconds(LLAMA_8B, CP8, GPU, 100.0, *args)
    assert hidden == pytest.approx(32 * (2 * forward + backward + send))
    exposed = ring_seconds(LLAMA_8B, CP8, GPU, 0.0, *args)
    assert exposed == pytest.approx(32 * (2 * (forward + gather) + backward + gather + 8 * send))


def test_a_torchtitan_cp_run_is_slower_by_its_ring() -> None:
    """predict_iteration adds the ring to a torchtitan CP run's time (and to the bubble's base); the 405B
    at CP 8 pays for it across nodes."""
    time = predict_iteration(LLAMA_405B, CP8_4D, GPU, FABRIC)
    megatron = predict_iteration(LLAMA_405B, replace(CP8_4D, framework="megatron"), GPU, FABRIC)
    assert time.cp_comm_s > 0
    assert time.total_s > time.compute_s + time.cp_comm_s
    assert time.cp_comm_s > 0.05 * time.compute_s
    assert megatron.cp_comm_s == 0.0
