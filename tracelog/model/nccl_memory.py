"""NCCL's own buffers on a GPU: one set per communicator a process runs collectives on, outside PyTorch's
caching allocator (`model.memory` adds them to what `nvidia-smi` shows)."""

from __future__ import annotations

import re

from tracelog.model.flops import TrainConfig

MIB = 2**20

MEGATRON_FRAMEWORKS = ("megatron", "megatron-deepspeed", "nemo")

LAZY_CONNECT_NCCL = (2, 22)
"""The first NCCL release that allocates a communicator's buffers at the first collective of each
algorithm instead of when the communicator starts: 2.22.3 (June 2024; its release notes: "Add lazy
connection establishment for collective operations ... Move buffer allocation and connection
establishment to the first collective operation using that algorithm ... reduce memory usage";
`NCCL_RUNTIME_CONNECT`, default 1). TensorRT-LLM's NCCL plugins set it back to 0 for "static connection
initialization for accurate KV cache size estimation"."""

NCCL_COMMUNICATOR_BYTES = {"pair": 544 * MIB, "group": 688 * MIB}
"""Device memory one NCCL communicator holds once it has run a collective: 544 MiB for a group of two
ranks, 688 for more, measured on four NVLink A100s through PyTorch, one 4 MB all-reduce per process group
(NVIDIA/nccl#964, 2023, an NCCL that connected every ring and tree at the communicator's start). It is
each channel's FIFO per protocol (`NCCL_BUFFSIZE`, 4 MiB for Simple) for each peer of its rings and trees,
so it grows with the channel count and not with the ranks beyond two nodes (NVIDIA/nccl#986). NCCL
allocates it outside PyTorch's caching allocator: `nvidia-smi` shows it, Megatron's `max reserved` does not
(facebookresearch/fairscale#678), and a run can go out of memory with its reserve well under the device's
memory."""


def communicator_sizes(train: TrainConfig, stage: str = "first") -> list[int]:
    """The ranks of each NCCL communicator a process of `stage` runs collectives on. Megatron's
    `initialize_model_parallel` (Megatron-LM `parallel_state`, used by Megatron-DeepSpeed and NeMo)
    makes a group per parallel dimension even where it spans the world: tensor, data (with context),
    context, pipeline (sends between stages), the model-parallel group its gradient norm is reduced over
    (t·p ranks) and, on the first and last stages, the embedding group that ties their word embeddings;
    the world's own group runs the start-up barriers. Other frameworks (DeepSpeed alone, FSDP, the
    Trainer) use the world's group, and a group of their own only for a dimension narrower than the
    world. Groups of one rank do no communication."""
    world = train.gpus
    dims = [train.tp, train.dp * train.cp, train.cp, train.pp]
    if train.framework in MEGATRON_FRAMEWORKS:
        groups = [world, *dims, train.tp * train.pp]
        if train.pp > 1 and stage in ("first", "last"):
            groups.append(2)
    else:
        groups = [world, *(n for n in dims if n < world)]
    return [n for n in groups if n > 1]


def nccl_connects_eagerly(version: str | None) -> bool:
    """Whether an NCCL release (`2.10.3+cuda11.3`, `2.18.1`) allocates every communicator's buffers when it
    starts (`LAZY_CONNECT_NCCL`). Unknown or unreadable: False, the behaviour of every release since 2024."""
    match = re.match(r"\s*(\d+)\.(\d+)", version or "")
    if match is None:
        return False
    return (int(match[1]), int(match[2])) < LAZY_CONNECT_NCCL


def nccl_bytes(train: TrainConfig, stage: str = "first") -> float:
    """NCCL's buffers on one GPU: `NCCL_COMMUNICATOR_BYTES` for each communicator of
    `communicator_sizes`."""
    table = NCCL_COMMUNICATOR_BYTES
    return float(sum(table["pair"] if n == 2 else table["group"] for n in communicator_sizes(train, stage)))
