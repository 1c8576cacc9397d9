"""Memory that PyTorch-native training (torchtitan) holds where Megatron-LM holds something else: FSDP2's
unsharded parameters and gradients, and a loss computed by PyTorch's own cross entropy, eagerly or
compiled (whose passes over the logits `model.gemm.cross_entropy_seconds` times too).

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

**The compiled loss.** From bbb1b616e (2025-04-02, pull request 1033) torchtitan wraps the same function in
`torch.compile` when the run compiles (components/loss.py `build_cross_entropy_loss`: `if
job_config.training.compile: loss_fn = torch.compile(loss_fn)`, logged as "Compiling the loss function with
torch.compile"; since 08b8b244f, 2025-08-20, `--compile.enable` with `loss` among `--compile.components`,
as it is by default, so a loss can be compiled without the blocks). AOTAutograd's partitioner then keeps
for the backward pass the loss's 16-bit input (the logits themselves) and two fp32 figures a row (the
maximum and the log-sum-exp), no fp32 copy; inductor fuses the forward into one reduction kernel that
reads the logits once (its online softmax, `prepare_softmax_online`, on CUDA with Triton since PyTorch
2.7) and the backward into one kernel that reads them again and writes their 16-bit gradient: 2 + 2
bytes a logit at the backward, and 2 bytes moved forward and 2 + 2 backward (`COMPILED_LOSS_PASSES`).
Under TP torchtitan computes the loss over the vocabulary shards (`loss_parallel`, on unless disabled):
DTensor's handlers all-reduce each row's maximum between the two reductions, which leaves two passes,
and the partitioner keeps instead the fp32 softmax minus the one-hot label that a fourth kernel writes
from a zeroed fp32 buffer holding the label's −1: 2 + 2 + 4 + (4 + 2 + 4) = 18 bytes moved forward in
four kernels, 4 + 2 backward, and the logits with both fp32 buffers live at the forward's end, 2 + 4 + 4.
Checked with torch 2.13 on the CPU, where the partitioner picks the same saved tensors (it runs before
the backend; the online softmax is CUDA's alone): `cross_entropy(pred.flatten(0, 1).float(),
labels.flatten(0, 1))` on bf16 logits, and under `loss_parallel()` on a fake process group of two ranks,
reading the partitioned graphs and the kernels inductor generated for them.
"""

from __future__ import annotations

from tracelog.model.flops import ModelConfig, TrainConfig, params_from_config

TORCH_LOSS_BYTES_PER_LOGIT = 2 + 4 + 4
MEGATRON_LOSS_BYTES_PER_LOGIT = 4
COMPILED_LOSS_BYTES_PER_LOGIT = 2 + 2
COMPILED_PARALLEL_LOSS_BYTES_PER_LOGIT = 2 + 4 + 4
COMPILED_LOSS_PASSES = (2, 2 + 2, 1, 1)
COMPILED_PARALLEL_LOSS_PASSES = (2 + 2 + 4 + (4 + 2 + 4), 4 + 2, 4, 1)
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
    """Bytes a logit holds at the loss: PyTorch's cross entropy in torchtitan, compiled (over vocabulary
    shards under TP) or not, Megatron's elsewhere."""
    if train.cross_entropy == "compiled":
        return COMPILED_PARALLEL_LOSS_BYTES_PER_LOGIT if train.tp > 1 else COMPILED_LOSS_BYTES_PER_LOGIT
    return TORCH_LOSS_BYTES_PER_LOGIT if train.framework == "torchtitan" else MEGATRON_LOSS_BYTES_PER_LOGIT


def compiled_loss_passes(train: TrainConfig) -> tuple[int, int, int, int]:
    """Bytes moved a logit forward and backward by the compiled loss, and its kernels in each pass
    (`model.gemm.CROSS_ENTROPY_BYTES`'s shape), over vocabulary shards under TP (module docstring)."""
    return COMPILED_PARALLEL_LOSS_PASSES if train.tp > 1 else COMPILED_LOSS_PASSES
