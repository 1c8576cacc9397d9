"""What a run's own arguments say of Adam's state: the bytes per parameter of its master weights and two
moments (`TrainConfig.adam_state_bytes`), 12 in fp32 (Rajbhandari et al. 2020, K = 12) unless the
optimizer keeps them narrower, and whether the optimizer shards them over the data-parallel group.

Two optimizers do, each read from what its framework prints:
- Megatron-core's precision-aware optimizer (`--use-precision-aware-optimizer`, `--exp-avg-dtype`,
  `--exp-avg-sq-dtype`, `--main-params-dtype`; Megatron-LM's arguments block, NeMo 2's `OptimizerConfig`
  repr), which hands the state to Transformer Engine's `FusedAdam`;
- NeMo 1's `distributed_fused_adam` (Apex `DistributedFusedAdam`, the `model.optim` block of the
  experiment configuration NeMo prints), whose state takes `optim.dtype`."""

from __future__ import annotations

from collections.abc import Mapping

from tracelog.hardware import normalize_precision
from tracelog.model.memory import ADAM_STATE_BYTES, storage_precision

PRECISION_AWARE_PARAMS = (
    "use_precision_aware_optimizer", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype",
    "store_param_remainders", "fp8_recipe",
)  # fmt: skip
NEMO1_OPTIM_PARAMS = (
    "model.optim.name", "model.optim.dtype", "model.optim.store_params", "model.optim.store_param_remainders",
    "model.megatron_amp_O2", "model.fp8_params",
)  # fmt: skip
OPTIMIZER_PARAMS = PRECISION_AWARE_PARAMS + NEMO1_OPTIM_PARAMS
"""The run parameters this module reads (as the parsers keep them)."""

DTYPE_NAMES = {
    "float32": "fp32", "fp32": "fp32", "32": "fp32", "float": "fp32",
    "bfloat16": "bf16", "bf16": "bf16", "bf16-mixed": "bf16",
    "float16": "fp16", "fp16": "fp16", "16": "fp16", "half": "fp16", "16-mixed": "fp16",
    "uint8": "fp8", "fp8": "fp8",
}  # fmt: skip
"""A dtype as the frameworks print it (`torch.bfloat16`, `bf16`, `16`) by its short name. Megatron-LM maps
`--exp-avg-dtype fp8` to `torch.uint8` (megatron/training/arguments.py, `dtype_map`), which Transformer
Engine's `FusedAdam` stores as FP8 (one byte and a scale per tensor)."""

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}

NEMO1_DISTRIBUTED_OPTIMIZERS = ("distributed_fused_adam", "mcore_distributed_optim")
"""NeMo 1's `optim.name`s that shard the optimizer state over the data-parallel group: Apex's
`DistributedFusedAdam` (ZeRO-1 style, `MegatronDistributedFusedAdam`, nemo/core/optim/distributed_adam.py)
and Megatron-core's `DistributedOptimizer`."""


def dtype_name(value: str | None) -> str | None:
    """`fp32`, `bf16`, `fp16` or `fp8` for a dtype as printed, None when absent or unknown."""
    if value is None:
        return None
    word = value.strip().strip("'\"").lower().removeprefix("torch.")
    return DTYPE_NAMES.get(word)


def _flag(params: Mapping[str, str], name: str) -> bool | None:
    value = params.get(name)
    if value is None or value.strip() in ("", "None", "null"):
        return None
    return value.strip().strip("'\"").lower() in ("true", "1", "yes")


def _bytes(params: Mapping[str, str], name: str, default: str = "fp32") -> int:
    return DTYPE_BYTES[dtype_name(params.get(name)) or default]


def precision_aware_bytes(params: Mapping[str, str], precision: str) -> float:
    """Megatron-core's precision-aware optimizer: each moment in its `exp_avg_dtype` / `exp_avg_sq_dtype`
    (fp32 4, bf16 or fp16 2, fp8 1: Transformer Engine `FusedAdam`, transformer_engine/pytorch/optimizers/
    fused_adam.py), the master weights in `main_params_dtype`. Transformer Engine holds the master weights
    unless the FP8 recipe is a current-scaling one with fp32 master weights (Megatron-core
    `OptimizerConfig.use_precision_aware_optimizer_no_fp8_or_ds_fp8`: `main_params_dtype != fp32` or
    `fp8_recipe` None or `delayed`; megatron/core/optimizer/__init__.py passes `master_weights` to
    `FusedAdam` then), and of a bf16 model it keeps fp32 master weights as the 16 bits bf16 lacks
    (`store_param_remainders`, an int16 per parameter: "Whole FP32 master can be reconstructed from BF16
    params plus the trailing remainder bits"; on in Megatron-core since 2025-02 with Transformer Engine
    2.1, `OptimizerConfig.store_param_remainders` True by default): 2 bytes. Megatron-core keeps its own
    fp32 copy otherwise (`shard_fp32_from_float16_groups`, distrib_optimizer.py): 4 bytes. With the
    defaults (fp32 moments) a bf16 run holds 10 bytes a parameter, not 12."""
    moments = _bytes(params, "exp_avg_dtype") + _bytes(params, "exp_avg_sq_dtype")
    main = dtype_name(params.get("main_params_dtype")) or "fp32"
    recipe = (params.get("fp8_recipe") or "").strip().strip("'\"").lower()
    transformer_engine_holds = main != "fp32" or recipe in ("", "none", "delayed")
    if main != "fp32":
        return moments + DTYPE_BYTES[main]
    remainders = (
        transformer_engine_holds
        and storage_precision(precision) == "bf16"
        and _flag(params, "store_param_remainders") is not False
    )
    return moments + (2 if remainders else 4)


def nemo1_distributed_adam_bytes(params: Mapping[str, str], precision: str) -> float | None:
    """NeMo 1's `distributed_fused_adam` (Apex `DistributedFusedAdam`) with O2 mixed precision: both
    moments in `optim.dtype` (fp32 unless set; Apex: "dtype: datatype for optimizer state"), and the
    master weights as `MegatronBaseModel.setup_optimization` decides (nemo/collections/nlp/models/
    language_modeling/megatron_base_model.py, NeMo 1.13 to 2.0): none when `optim.dtype` is the model's
    own dtype (`store_params` False: bf16 state updates the bf16 weights in place), the 16-bit remainders
    of fp32 master weights for a bf16 model (`store_param_remainders`, an int16 each), a full copy in
    `optim.dtype` with `fp8_params` or any other pairing (`store_params` True, Apex's default), and what
    `optim.store_params` says where the configuration sets it. So a bf16 run with the defaults holds 10
    bytes a parameter, and with `optim.dtype: bf16` 4. None for other optimizers, or without O2 (fp32
    weights, which the model does not take)."""
    if (params.get("model.optim.name") or "").strip() != "distributed_fused_adam":
        return None
    if _flag(params, "model.megatron_amp_O2") is False:
        return None
    optim = dtype_name(params.get("model.optim.dtype")) or "fp32"
    model = storage_precision(normalize_precision(precision))
    store = _flag(params, "model.optim.store_params")
    remainders = bool(_flag(params, "model.optim.store_param_remainders"))
    if store is None:
        if _flag(params, "model.fp8_params"):
            store = True
        elif optim == model:
            store = False
        elif optim == "fp32" and model == "bf16":
            store, remainders = False, True
        else:
            store = True
    master = DTYPE_BYTES[optim] if store else (2 if remainders else 0)
    return 2 * DTYPE_BYTES[optim] + master


def adam_state_bytes(params: Mapping[str, str], precision: str) -> float:
    """Bytes per parameter of Adam's master weights and moments for a run with these parameters: the
    precision-aware optimizer's or NeMo 1's distributed Adam's where the run says so, else 12. A run in
    fp32 keeps no master copy (`memory.state_bytes` counts it apart)."""
    if normalize_precision(precision) == "fp32":
        return ADAM_STATE_BYTES
    if _flag(params, "use_precision_aware_optimizer"):
        return precision_aware_bytes(params, precision)
    nemo1 = nemo1_distributed_adam_bytes(params, precision)
    return nemo1 if nemo1 is not None else ADAM_STATE_BYTES


def shards_optimizer_state(params: Mapping[str, str]) -> bool:
    """Whether the run's optimizer shards its state over the data-parallel group: Megatron's
    `use_distributed_optimizer`, or NeMo 1's distributed optimizers by `optim.name`."""
    if _flag(params, "use_distributed_optimizer"):
        return True
    return (params.get("model.optim.name") or "").strip() in NEMO1_DISTRIBUTED_OPTIMIZERS
