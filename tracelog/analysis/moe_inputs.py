"""What a run says of its experts: the MoE shape (`ModelConfig.num_experts`, ...) and the expert layout
(`TrainConfig.ep`, ...), from a row's own columns (a configuration, `tracelog predict`, the fidelity
benchmark) or else from the run's parameters as its log printed them.

Megatron-LM's arguments block prints every argument by its `args` name (`--num-experts` is
`num_experts`, `--expert-model-parallel-size` is `expert_model_parallel_size`); Megatron-core's
`TransformerConfig`, which NeMo 1 fills from `model.*` keys of its experiment configuration and NeMo 2 and
Megatron-Bridge print as their model provider, names the expert count `num_moe_experts`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# row column -> run parameters that hold it (Megatron-LM's argument, then Megatron-core's config name)
SHAPE_PARAMS: dict[str, tuple[str, ...]] = {
    "num_experts": ("num_experts", "num_moe_experts"),
    "moe_topk": ("moe_router_topk",),
    "moe_ffn_hidden": ("moe_ffn_hidden_size",),
    "moe_shared_ffn_hidden": ("moe_shared_expert_intermediate_size",),
    "moe_layer_freq": ("moe_layer_freq",),
    "kv_channels": ("kv_channels",),
}
LAYOUT_PARAMS: dict[str, tuple[str, ...]] = {
    "ep": ("expert_model_parallel_size",),
    "etp": ("expert_tensor_parallel_size",),
}
DISPATCHER_PARAMS = ("moe_token_dispatcher_type",)
OVERLAP_PARAMS = ("overlap_moe_expert_parallel_comm",)

MOE_PARAMS: tuple[str, ...] = tuple(
    prefix + name
    for names in (*SHAPE_PARAMS.values(), *LAYOUT_PARAMS.values(), DISPATCHER_PARAMS, OVERLAP_PARAMS)
    for name in names
    for prefix in ("", "model.")
)
"""The run parameters this module reads (`inputs.PARAMS_SQL`), bare and as NeMo 1's `model.` keys."""

DISPATCHERS = ("alltoall", "allgather", "flex")


def _param(params: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        for key in (name, f"model.{name}"):
            value = params.get(key)
            if value is not None and value.strip().lower() not in ("", "none", "null"):
                return value.strip()
    return None


def _positive_int(value: Any) -> int | None:
    try:
        number = int(float(value))
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def _counts(
    row: Mapping[str, Any], params: Mapping[str, str], table: dict[str, tuple[str, ...]]
) -> dict[str, int]:
    """Each column of `table` with a positive count: the row's own value, else the run's parameter."""
    out: dict[str, int] = {}
    for column, names in table.items():
        value = _positive_int(row.get(column))
        if value is None:
            value = _positive_int(_param(params, names))
        if value is not None:
            out[column] = value
    return out


def moe_shape(row: Mapping[str, Any], params: Mapping[str, str]) -> dict[str, int]:
    """`ModelConfig` fields of the MoE shape and the head dimension: the row's value, else the run's
    parameter. A `moe_layer_freq` given as a pattern (`[0]*3+[1]*58`) is not read: every layer is then
    taken as MoE. Nothing for a dense run."""
    out = _counts(row, params, SHAPE_PARAMS)
    if "num_experts" not in out or out["num_experts"] < 2:
        return {k: v for k, v in out.items() if k == "kv_channels"}
    return out


def moe_layout(row: Mapping[str, Any], params: Mapping[str, str]) -> dict[str, Any]:
    """`TrainConfig` fields of the expert layout: EP and expert TP (the row's `ep`/`etp`, else
    `--expert-model-parallel-size` / `--expert-tensor-parallel-size`; expert TP unset is TP, Megatron's
    default), the token dispatcher (`--moe-token-dispatcher-type`, alltoall by default) and whether the
    dispatch all-to-all overlaps another micro-batch's compute (`--overlap-moe-expert-parallel-comm`)."""
    out: dict[str, Any] = dict(_counts(row, params, LAYOUT_PARAMS))
    dispatcher = (_param(params, DISPATCHER_PARAMS) or "alltoall").lower()
    out["moe_dispatcher"] = dispatcher if dispatcher in DISPATCHERS else "alltoall"
    overlap = _param(params, OVERLAP_PARAMS)
    out["moe_a2a_overlap"] = overlap is not None and overlap.lower() in ("true", "1", "yes")
    return out
