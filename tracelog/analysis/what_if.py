"""What the model predicts for one configuration, with nothing written: a stored run with values
overridden (`tracelog predict RUN --gpu ...`), or a configuration given alone (`tracelog predict
--layers ...`, the fidelity benchmark). The store only lends its calibrated constants."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracelog.analysis import calibration
from tracelog.analysis import inputs as run_inputs
from tracelog.analysis.attention_backend import backend_is_flash, default_attention_backend
from tracelog.analysis.calibration import TEXTBOOK
from tracelog.analysis.predictions import prediction_table, run_prediction
from tracelog.errors import TracelogError
from tracelog.store import Store

if TYPE_CHECKING:
    import pandas as pd

PREDICT_CONFIG_KEYS = (
    "layers", "hidden", "heads", "seq_len", "vocab", "ffn_hidden", "query_groups", "swiglu", "params",
    "gbs", "mbs", "tp", "pp", "dp", "cp", "vp", "sequence_parallel", "recompute", "zero_stage", "precision",
    "gpus", "nodes", "gpus_per_node", "framework", "pp_partition_method", "dropout", "kv_channels",
    "num_experts", "moe_topk", "moe_ffn_hidden", "moe_shared_ffn_hidden", "ep", "etp",
)  # fmt: skip


def configuration_defaults(framework: str, params: dict[str, str]) -> dict[str, str]:
    """`params` with what a configuration given without a log leaves to its framework's defaults today:
    Megatron-LM overlaps the backward pass's tensor-parallel all-reduce with the weight gradient unless
    told `--no-async-tensor-model-parallel-allreduce` (`run_inputs.async_tp_allreduce`); torchtitan
    compiles its loss whenever it compiles (`[compile] components = ["model", "loss"]` by default since
    2025-08, and the loss with `--training.compile` since 2025-04: `model.torch_native`), unless told
    `compiled_loss` False, as a run from before 2025-04 must be."""
    if framework == "megatron":
        return {"async_tensor_model_parallel_allreduce": "True", **params}
    if framework == "torchtitan" and "torch_compile" in params:
        return {"compiled_loss": params["torch_compile"], **params}
    return dict(params)


def what_if(
    store: Store | None,
    run_id: int | None,
    config: dict[str, object],
    *,
    efficiency: float | None = None,
    distributed_optimizer: bool | None = None,
    attention_backend: str | None = None,
    run_params: dict[str, str] | None = None,
    calibrated: bool = True,
) -> pd.DataFrame:
    """The prediction's parts for a stored run with `config` overriding its values (runs-table names,
    plus `gpu_model`, `fabric` and `nics_per_node`), or for `config` alone when `run_id` is None. Nothing
    is written. With `calibrated`, the constants `tracelog calibrate` stored in `store` are used (a `compute scale`
    row says which); without, the textbook model. `attention_backend` (Megatron-LM's names, see
    `attention_backend.ATTENTION_BACKENDS`) overrides how the run's attention ran; a configuration alone takes its
    framework's default (`attention_backend.default_attention_backend`). `run_params` are run parameters as a log
    prints them (`overlap_grad_reduce`, `overlap_param_gather`, `tp_comm_overlap`, ...: "True"/"False"),
    over the run's own."""
    if attention_backend is not None:
        backend_is_flash(attention_backend)  # a name Megatron-LM knows, or an error
    unknown = sorted(set(config) - set(PREDICT_CONFIG_KEYS) - {"gpu_model", "fabric", "nics_per_node"})
    if unknown:
        raise TracelogError(
            f"unknown configuration {', '.join(unknown)}; known: {', '.join(PREDICT_CONFIG_KEYS)}"
        )
    if run_id is not None and store is not None:
        ((row, params),) = run_inputs.load_rows(store, f"run_id = {int(run_id)}")
    elif not config.get("layers"):
        raise TracelogError("name a run, or give the model (layers, hidden, heads, seq, vocab) and layout")
    else:
        row, params = {"run_id": 0, "framework": "megatron"}, {}  # the store only lends its constants
    row.update({k: v for k, v in config.items() if v is not None})
    params = {**params, **(run_params or {})}
    if distributed_optimizer is not None:
        params["use_distributed_optimizer"] = str(distributed_optimizer)
    assumed = None
    if attention_backend is None and run_id is None:
        framework = str(row.get("framework") or "megatron")
        attention_backend = default_attention_backend(framework)
        assumed = f"attention not given: {attention_backend}, {framework}'s default (--attention-backend)"
    if attention_backend is not None:
        params = {k: v for k, v in params.items() if k != "use_flash_attn"}
        params["attention_backend"] = attention_backend
    if run_id is None:
        params = configuration_defaults(str(row.get("framework") or "megatron"), params)
    inputs = run_inputs.build(row, params)
    if assumed:
        inputs.assumptions.append(assumed)
    constants = calibration.load(store) if calibrated else TEXTBOOK
    rows = run_prediction(inputs, efficiency, constants)
    return prediction_table(rows)
