"""Which float8 library a framework trains with, and what that library keeps for the backward pass.

Two libraries run the FP8 linear layers of the runs the model knows, and they keep different tensors:

- **Transformer Engine** (Megatron-LM, NeMo, Megatron-Bridge; and the default FP8 backend of the other
  trainers): `te.Linear` and `LayerNormLinear` quantize a GEMM's input once and save that FP8 tensor for
  the weight gradient instead of the 16-bit one (NVIDIA Transformer Engine docs, "Using FP8 with
  Transformer Engine"): 1 byte an element of a linear layer's saved input
  (`model.memory.activation_bytes_per_layer`, `fp8_inputs`).
- **torchao** (torchtitan: `Float8Handler.convert_to_float8_training` swaps every `nn.Linear` but the
  output layer for torchao's `Float8Linear`, torchtitan/float8.py at 9dec370). What it saves has changed
  and does not bind under `torch.compile`: at eab345c (2024-12) the tensorwise path's autograd function
  `manual_float8_matmul_with_args_in_float8` ran `ctx.save_for_backward(input_fp8, weight_fp8_t)`, an FP8
  copy per linear layer (so three of the QKV input, one per projection); from 2ec9bc15d (2025-01-13) on
  `matmul_with_hp_or_float8_args` runs `ctx.save_for_backward(input_hp, weight_hp_t)`, the 16-bit input
  the BF16 layer keeps, and casts it again in the backward pass (torchao/float8/float8_linear.py). A
  compiled block's saved tensors are chosen by AOTAutograd's partitioner from the joint graph whatever an
  autograd function saves (pytorch/ao pull request 936: "torch.compile will ignore what are manually
  saved for backward in a custom autograd.Function"). Every published torchtitan float8 run compiles and
  checkpoints its blocks, so only the one layer rebuilt in the backward pass is concerned; the model
  takes its linear inputs at 16 bits, what the current torchao keeps. Under torchtitan's per-operation
  checkpointing torchao's products count and are saved as BF16 ones are (`model.checkpointing`).

FP8 and FP4 run only the linear layers' GEMMs at low precision under either library: attention, the
output layer, element-wise work, the weights and the activations between operations stay BF16.
"""

from __future__ import annotations

from typing import Literal

from tracelog.hardware import normalize_precision
from tracelog.model.flops import TrainConfig

LOW_PRECISION_GEMMS = ("fp8", "fp4")
"""Precisions that only the GEMMs of linear layers run in. Transformer Engine's FP8 recipes (NVIDIA
Transformer Engine docs, "Using FP8 with Transformer Engine": FP8 is used for the matrix multiplications
of `Linear`-type modules, while other operations keep higher precision) cast each GEMM's inputs to FP8
and keep the weights, the activations between operations, attention, the output layer and every
communication in BF16; torchao's `Float8Linear` does the same (its output layer is left in BF16 by
torchtitan's `module_filter_fn`)."""

TORCHAO_FRAMEWORKS = ("torchtitan",)
"""Frameworks whose FP8 linear layers are torchao's `Float8Linear` (torchtitan/float8.py)."""

Float8Library = Literal["transformer-engine", "torchao"]


def float8_library(framework: str) -> Float8Library:
    """The library that runs a framework's FP8 linear layers: torchao for torchtitan, Transformer Engine
    for every other (Megatron-LM and its descendants use it; it is the others' default)."""
    return "torchao" if framework in TORCHAO_FRAMEWORKS else "transformer-engine"


def keeps_fp8_linear_inputs(train: TrainConfig) -> bool:
    """Whether a run's linear layers keep an FP8 cast of their input for the weight gradient (1 byte an
    element) rather than the 16-bit input: a low-precision run whose library is Transformer Engine."""
    low = normalize_precision(train.precision) in LOW_PRECISION_GEMMS
    return low and float8_library(train.framework) == "transformer-engine"
