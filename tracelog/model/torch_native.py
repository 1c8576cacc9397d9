"""Memory that PyTorch-native training (torchtitan) holds where Megatron-LM holds something else: FSDP2's
unsharded parameters and gradients, and a loss computed by PyTorch's own cross entropy.

**FSDP2** (`torch.distributed.fsdp.fully_shard`, torchtitan's `apply_fsdp` in parallelize_llama.py at
9dec370): the sharded state is ZeRO-3's (`model.memory.state_bytes`), and on top of it the unsharded
16-bit copies the computation needs. Without pipeline parallelism each block is gathered for its forward
and again for its backward, the next block prefetched (two blocks of parameters live), and its gradient
is reduce-scattered as soon as it is ready, upcast to the fp32 reduce dtype on the way
(`mixed_precision_reduce = "float32"`, torchtitan's default): two blocks of 16-bit parameters and one of
16-bit and fp32 gradients. With pipeline parallelism torchtitan sets `reshard_after_forward = False`, so
a stage's parameters stay gathered from its forward passes to its backward ones, and the pipeline
schedule skips the gradient sync until the last micro-batch, so each parameter's unsharded gradient is
accumulated in the reduce dtype across micro-batches (`FSDPParam.to_accumulated_grad_if_needed`,
torch/distributed/fsdp/_fully_shard/_fsdp_param.py): the stage's parameters in 16 bits and their
gradients in fp32.

**The loss**: torchtitan computes `F.cross_entropy(pred.flatten(0, 1).float(), labels)` (train.py
`loss_fn`): at the end of the forward pass the output layer's 16-bit logits, their fp32 copy and
`log_softmax`'s fp32 output are all live, 2 + 4 + 4 bytes a logit, where Megatron's vocabulary-parallel
cross entropy keeps one fp32 copy (4).
"""

from __future__ import annotations

from tracelog.model.flops import ModelConfig, TrainConfig, params_from_config

TORCH_LOSS_BYTES_PER_LOGIT = 2 + 4 + 4
MEGATRON_LOSS_BYTES_PER_LOGIT = 4
REDUCE_BYTES = 4  # torchtitan's `mixed_precision_reduce`, float32


def is_fsdp2(train: TrainConfig) -> bool:
    return train.framework == "torchtitan" and train.zero_stage == 3


def fsdp2_unsharded_bytes(cfg: ModelConfig, train: TrainConfig, stage_params: float, dtype: int) -> float:
    """The unsharded copies FSDP2 holds beside the sharded state (module docstring): with PP the stage's
    parameters (`dtype` bytes) and their fp32 accumulated gradients; without, two blocks of parameters and
    one block's gradients in `dtype` and fp32."""
    if train.pp > 1:
        return stage_params * (dtype + REDUCE_BYTES)
    block = params_from_config(cfg, include_embeddings=False) / (cfg.layers * train.tp)
    return block * (2 * dtype + dtype + REDUCE_BYTES)


def loss_bytes_per_logit(train: TrainConfig) -> int:
    """Bytes a logit holds at the loss: PyTorch's cross entropy in torchtitan, Megatron's elsewhere."""
    return TORCH_LOSS_BYTES_PER_LOGIT if train.framework == "torchtitan" else MEGATRON_LOSS_BYTES_PER_LOGIT
