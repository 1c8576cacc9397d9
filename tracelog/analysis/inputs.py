"""What the model needs to know about a run, read from the store, with every gap and assumption named.

A run's row holds what its log or lab note said; the model needs typed configurations. This module is
the one place that turns the first into the second. It never guesses silently: a value it has to
assume (8 GPUs per node, bf16, the reference fabric of the GPU's 8-GPU system) is recorded in
`assumptions`, and what it cannot know (no GPU model, no sequence length) in `missing`, so predictions
and `tracelog predict` can say why a figure is absent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, cast

from tracelog import hardware
from tracelog.analysis.attention_backend import attention_kernel, flash_attention
from tracelog.analysis.moe_inputs import MOE_PARAMS, moe_layout, moe_shape
from tracelog.analysis.optimizer_state import OPTIMIZER_PARAMS, adam_state_bytes, shards_optimizer_state
from tracelog.errors import TracelogError
from tracelog.hardware import Gpu, Link
from tracelog.model.flops import RECOMPUTE_MODES, ModelConfig, Recompute, TrainConfig
from tracelog.store import Store

DEFAULT_GPUS_PER_NODE = 8
"""The node of the reference systems (DGX/HGX, MI300X and Gaudi2 platforms): assumed when unknown."""

DEFAULT_PRECISION = "bf16"
"""Assumed when a run does not say; fp16 and bf16 share the dense peak on every catalogued part."""

# Frameworks that keep fp32 main gradients (18 B/param unsharded): Megatron-LM's mixed precision
# (`megatron/core/optimizer`, main_grad), and Megatron-DeepSpeed's BF16 optimizer.
FP32_GRAD_FRAMEWORKS = {"megatron"}

NO_RECOMPUTE_ASSUMED = "activation recomputation not given: none assumed"
EAGER_FRAMEWORKS = ("torchtitan", "hf-trainer", "composer")
"""Trainers that run a model's own PyTorch operators, each its own kernel, unless the run compiles them
(`torch_compile`: torchtitan's `--training.compile`, the Trainer's `TrainingArguments.torch_compile`, False
by default in both; Composer's `Trainer(compile_config=...)`, None by default, llm-foundry's
`compile_config` key, `compiles`); `model.eager` counts what that moves. The others fuse them (Megatron-core, Transformer
Engine, nanotron's Triton and flash-attn kernels)."""


def compiles(inputs: RunInputs) -> bool:
    """Whether the run's operators are compiled (see EAGER_FRAMEWORKS): a framework that fuses them, a
    `torch_compile` flag, or a Composer configuration that names a `compile_config` (kept by the
    configuration echo under its own name, or its keys under `compile_config.`)."""
    if inputs.framework not in EAGER_FRAMEWORKS or inputs.flag("torch_compile"):
        return True
    return inputs.framework == "composer" and any(
        (name == "compile_config" and (value or "").strip() not in ("", "None", "null", "{}"))
        or name.startswith("compile_config.")
        for name, value in inputs.run_params.items()
    )


FIGURES_SQL = """
-- the log's own FLOPs per iteration, line by line: reported TFLOP/s per GPU × seconds per iteration
-- (BigScience's `Effective Tera Flops per GPU` stands on a line of its own after the iteration's);
-- a fallback median is taken only over runs whose steady-state one has no value (one in memory, not two)
WITH lines AS NOT MATERIALIZED (
    SELECT i.run_id, i.warmup, i.global_batch_size, coalesce(i.tflops_reported, m.value) AS tflops
         , coalesce(i.tflops_reported, m.value) * i.elapsed_s AS tflop
    FROM {marks} i
    LEFT JOIN iteration_metrics m
      ON m.run_id = i.run_id AND m.iteration = i.iteration AND m.key = 'effective tera flops per gpu'
    WHERE {where}
), present AS (
    SELECT run_id, count(tflop) FILTER (NOT warmup) > 0 AS tflop_steady,
           count(tflops) FILTER (NOT warmup) > 0 AS tflops_steady
    FROM lines GROUP BY run_id
)
SELECT l.run_id,
       coalesce(median(l.tflop) FILTER (NOT l.warmup), median(l.tflop) FILTER (NOT p.tflop_steady))
           AS implied_tflop,
       coalesce(median(l.tflops) FILTER (NOT l.warmup),
                median(l.tflops) FILTER (NOT p.tflops_steady)) AS reported_tflops,
       median(l.global_batch_size) AS gbs_logged
FROM lines l JOIN present p ON p.run_id = l.run_id
GROUP BY l.run_id
"""
"""Each run's measured figures the model reads beside its steady-state medians, from its lines and their
warm-up marks (`{marks}`); a refresh takes them from its ranges instead (`run_ranges.FIGURES_SQL`)."""

KEPT_SUMMARY_SQL = """(
SELECT c.run_id, c.sec_per_it, coalesce(c.tflops_reported, m.effective_tflops) AS tflops_reported,
       mem.peak_reserved_mib
FROM run_steady_cache c
LEFT JOIN (
    SELECT run_id, median(value) AS effective_tflops FROM iteration_metrics
    WHERE {where} AND key = 'effective tera flops per gpu' GROUP BY run_id
) m USING (run_id)
LEFT JOIN (
    SELECT run_id, max(coalesce(max_reserved_mib, reserved_mib)) AS peak_reserved_mib FROM memory
    WHERE {where} GROUP BY run_id
) mem USING (run_id)
WHERE {kept}
)"""
"""`run_summary`'s figures the model reads, of runs whose steady state a refresh has just kept in
`run_steady_cache` (as the view reads a kept row that matches its run, without counting the run's lines
again, nor reading those of runs kept neither: 0.13 s of a refresh at 1.76 M lines)."""

RUNS_SQL = """
SELECT r.*, s.sec_per_it, s.tflops_reported AS tflops_median, s.peak_reserved_mib,
       f.implied_tflop, f.reported_tflops, f.gbs_logged
FROM runs r
LEFT JOIN {summary} s USING (run_id)
LEFT JOIN ({figures}) f USING (run_id)
WHERE {where}
ORDER BY r.run_id
"""

PARAMS_SQL = """
SELECT run_id, name, value FROM run_params
WHERE {where} AND name IN ('use_distributed_optimizer', 'position_embedding_type',
    'untie_embeddings_and_output_weights', 'add_bias_linear', 'disable_bias_linear', 'normalization',
    'use_flash_attn', 'masked_softmax_fusion', 'attention_backend', 'transformer_impl',
    'bf16', 'fp16', 'accumulate_allreduce_grads_in_fp32', 'grad_reduce_in_fp32',
    'theoretical_weight_and_optimizer_mib',
    'theoretical_activation_mib', 'theoretical_total_mib', 'overlap_grad_reduce', 'overlap_param_gather',
    'tp_comm_overlap', 'overlap_comm', 'partition_activations', 'checkpoint_in_cpu', 'optimizer_wrapper',
    'async_tensor_model_parallel_allreduce', 'cross_entropy_loss_fusion', 'cross_entropy_fusion_impl',
    'reduce_bucket_size', 'zero_config', 'json.zero_optimization.overlap_comm',
    'json.zero_optimization.reduce_bucket_size', 'device_memory_mib', 'account_for_embedding_in_pipeline_split',
    'account_for_loss_in_pipeline_split', 'torch_compile', 'compiled_loss', 'rms_norm_eps', 'rope_theta',
    'tie_word_embeddings', 'attention_kernel', 'model.attn_config.attn_impl', 'fsdp_config.mixed_precision',
    'fsdp_config.mixed_precision.reduce_dtype', {optimizer_params})
    -- Composer's `compile_config` (`compiles`): the echo keeps it under its own name or its keys under it
    OR {where} AND (name = 'compile_config' OR starts_with(name, 'compile_config.'))
UNION ALL
SELECT run_id, 'nccl_version', value FROM run_hardware WHERE {where} AND fact = 'nccl_version'
""".replace("{optimizer_params}", ", ".join(f"'{name}'" for name in OPTIMIZER_PARAMS + MOE_PARAMS))


@dataclass
class RunInputs:
    """One run as the model sees it. `cfg` and `train` are None when the run lacks the shapes or the
    layout; `gpu` when it has no (known) GPU model. Measured figures are steady-state medians."""

    run_id: int
    name: str | None
    framework: str | None
    status: str | None
    gpus: int | None
    gbs: int | None
    seq_len: int | None
    params: int | None
    recompute: str
    precision: str
    recompute_given: bool = True
    zero_given: bool = True
    cfg: ModelConfig | None = None
    train: TrainConfig | None = None
    gpu: Gpu | None = None
    fabric: Link | None = None
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    sec_per_it: float | None = None
    tflops_reported: float | None = None
    implied_tflop: float | None = None  # the log's FLOPs per iteration in units of 1e12 FLOP per GPU
    peak_reserved_mib: float | None = None
    run_params: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)

    @property
    def memory_assumed(self) -> list[str]:
        """What the memory prediction had to assume: a footprint resting on these is a rough one."""
        missing = [] if self.zero_given else ["ZeRO stage 0"]
        return missing + ([] if self.recompute_given else ["no activation recomputation"])

    @property
    def nodes(self) -> int:
        return -(-(self.gpus or 1) // self.gpus_per_node)

    def flag(self, name: str) -> bool | None:
        """A boolean run parameter (`True`/`False` as Megatron prints them), None when absent."""
        value = self.run_params.get(name)
        if value is None or value in ("None", ""):
            return None
        return value.strip().lower() in ("true", "1", "yes")

    def zero_option(self, name: str) -> str | None:
        """DeepSpeed's ZeRO setting `name` as the run says it: the engine's configuration echo (`zero_config
        .... stage=2 ... overlap_comm=True`, every setting with its default; older releases print a JSON
        dict), else the user's JSON (`json.zero_optimization.NAME`). None when neither gives it."""
        echo = self.run_params.get("zero_config") or ""
        # A number grouped by commas (DeepSpeed's config types print `500,000,000` since 0.9) is one value;
        # in the JSON dict of older releases a comma ends it.
        value = r"(\d{1,3}(?:,\d{3})+(?![\d.])|[\w.+-]+)"
        match = re.search(rf"""(?:^|[\s{{,])["']?{re.escape(name)}["']?\s*[=:]\s*["']?{value}""", echo)
        if match:
            return match.group(1)
        return self.run_params.get(f"json.zero_optimization.{name}")


def fsdp2(inputs: RunInputs, zero_stage: int | None) -> bool:
    """torchtitan's FSDP2 sharding (ZeRO-3 here) overlaps by design: each block's all-gather is issued ahead
    of its compute and the gradients' reduce-scatter runs on its own stream during the backward pass
    (PyTorch `fully_shard`: implicit forward and backward prefetching)."""
    return inputs.framework == "torchtitan" and zero_stage == 3


def fp16_grad_buffer(inputs: RunInputs) -> bool:
    """Megatron keeps its data-parallel gradient buffer in the training dtype, 2 bytes a parameter (the
    optimizer makes fp32 main grads at its step), where its arguments say so: in fp16 unless
    `--accumulate-allreduce-grads-in-fp32` (off by default; bf16 turns it on, megatron/training/
    arguments.py, so the arguments dump prints True), and in bf16 where the run printed that flag False
    (`--grad-reduce-in-bf16`) or Megatron-core's `grad_reduce_in_fp32` False (NeMo 2 and Megatron-Bridge
    `DistributedDataParallelConfig`, the performance recipes' choice)."""
    accumulate = inputs.flag("accumulate_allreduce_grads_in_fp32")
    in_fp32 = inputs.flag("grad_reduce_in_fp32")
    if inputs.precision == "fp16":
        return not (accumulate or in_fp32)
    return accumulate is False or in_fp32 is False


def fsdp_reduces_in_fp32(inputs: RunInputs, zero_stage: int | None) -> bool:
    """Whether Composer's FSDP reduce-scatters the 16-bit gradients in fp32: its mixed-precision mode
    `DEFAULT` (the mode an `fsdp_config` without `mixed_precision` gets) keeps `param_dtype` at the training
    precision and sets `reduce_dtype = torch.float32`; `PURE` reduces in the training precision, `FULL`
    runs everything in fp32 (composer/trainer/mosaic_fsdp_utils.py `get_mixed_precision`, v0.16.4 and
    v0.17.2, the releases llm-foundry 0.3 and 0.4 pinned); a dictionary names `reduce_dtype` itself."""
    if inputs.framework != "composer" or not zero_stage:
        return False
    params = inputs.run_params
    given = params.get("fsdp_config.mixed_precision.reduce_dtype")
    if given is not None:
        return given.strip().lower() in ("fp32", "float32", "torch.float32", "float")
    return (params.get("fsdp_config.mixed_precision") or "DEFAULT").strip().upper() in ("DEFAULT", "FULL")


def _int(value: Any) -> int | None:
    if value is None:
        return None
    try:
        if value != value:  # NaN from a frame
            return None
        return int(value)
    except (TypeError, ValueError):
        return None


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and value != value):
        return None
    text = str(value).strip()
    return text or None


def _float(value: Any) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if number != number else number


def resolve_gpu(gpu_model: str | None) -> tuple[Gpu | None, str | None]:
    """The catalog GPU of a run, or None with the reason."""
    if not gpu_model:
        return None, "no GPU model: ingest with --gpu (a catalog id, see `tracelog hardware`)"
    try:
        return hardware.gpu(gpu_model), None
    except TracelogError as exc:
        return None, str(exc)


def reference_fabric(gpu: Gpu | None) -> Link | None:
    """The inter-node fabric of the GPU's reference system (`network_link` in the catalog), if any."""
    if gpu is None or not gpu.network_link:
        return None
    return hardware.link(gpu.network_link)


def build(row: dict[str, Any], run_params: dict[str, str]) -> RunInputs:
    """Typed model inputs from one `runs` row (joined with its steady-state medians)."""
    recompute = _text(row.get("recompute")) or "none"
    if recompute not in RECOMPUTE_MODES:
        recompute = "none"
    precision = _text(row.get("precision"))
    inputs = RunInputs(
        run_id=int(row["run_id"]),
        name=_text(row.get("name")),
        framework=_text(row.get("framework")),
        status=_text(row.get("status")),
        gpus=_int(row.get("gpus")),
        gbs=_int(row.get("gbs")) or _int(row.get("gbs_logged")),
        seq_len=_int(row.get("seq_len")),
        params=_int(row.get("params")),
        recompute=recompute,
        precision=precision or DEFAULT_PRECISION,
        sec_per_it=_float(row.get("sec_per_it")),
        tflops_reported=_float(row.get("reported_tflops")) or _float(row.get("tflops_median")),
        implied_tflop=_float(row.get("implied_tflop")),
        peak_reserved_mib=_float(row.get("peak_reserved_mib")),
        run_params=run_params,
    )
    if precision is None:
        inputs.assumptions.append(f"precision not given: {DEFAULT_PRECISION} assumed")
    if _text(row.get("recompute")) is None:
        inputs.recompute_given = False
        inputs.assumptions.append(NO_RECOMPUTE_ASSUMED)
    try:
        hardware.normalize_precision(inputs.precision)
    except TracelogError as exc:
        inputs.missing.append(str(exc))
        inputs.precision = DEFAULT_PRECISION

    gpn = _int(row.get("gpus_per_node"))
    if gpn is None and inputs.gpus and _int(row.get("nodes")):
        gpn = inputs.gpus // _int(row.get("nodes"))  # type: ignore[operator]
    if gpn is None or gpn < 1:
        gpn = DEFAULT_GPUS_PER_NODE
        inputs.assumptions.append(f"GPUs per node not given: {DEFAULT_GPUS_PER_NODE} assumed")
    inputs.gpus_per_node = gpn

    inputs.cfg = _model_config(row, inputs)
    inputs.train = _train_config(row, inputs)
    if inputs.cfg is not None and inputs.train is not None and inputs.cfg.heads % inputs.train.tp:
        # Megatron splits attention by whole heads (it asserts heads % tp == 0): no run has this layout
        inputs.missing.append(
            f"layout inconsistent: {inputs.cfg.heads} attention heads do not split over TP {inputs.train.tp}"
        )
        inputs.train = None
    inputs.gpu, reason = resolve_gpu(_text(row.get("gpu_model")))
    if reason:
        inputs.missing.append(reason)
    hosts = hardware.domain_hosts(inputs.gpu, gpn) if inputs.gpus and inputs.gpus > gpn else 1
    if hosts > 1 and inputs.gpu is not None:
        # the model's node is the NVLink domain (an NVL72 rack), whose hosts' NICs serve it together
        inputs.assumptions.append(hardware.domain_note(inputs.gpu, gpn))
        gpn = inputs.gpus_per_node = gpn * hosts
    fabric_id = _text(row.get("fabric"))
    if fabric_id:
        try:
            inputs.fabric = hardware.fabric_of(fabric_id, _int(row.get("nics_per_node")))
            if inputs.fabric is not None:
                inputs.fabric = hardware.domain_fabric(inputs.fabric, hosts)
        except TracelogError as exc:
            inputs.missing.append(str(exc))
    elif inputs.gpu is not None and inputs.gpus and inputs.gpus > gpn:
        inputs.fabric = reference_fabric(inputs.gpu)
        if inputs.fabric is not None:
            inputs.assumptions.append(
                f"fabric not given: {inputs.fabric.id} assumed ({inputs.fabric.name}, the reference system "
                f"of {inputs.gpu.id})"
            )
        else:
            inputs.missing.append(f"fabric not given and {inputs.gpu.id} has no reference fabric: name one")

    return inputs


def _model_config(row: dict[str, Any], inputs: RunInputs) -> ModelConfig | None:
    shape = {k: _int(row.get(k)) for k in ("layers", "hidden", "heads", "seq_len", "vocab")}
    absent = [k for k, v in shape.items() if not v]
    if absent:
        inputs.missing.append(f"model shape incomplete: no {', '.join(absent)}")
        return None
    untied = inputs.flag("untie_embeddings_and_output_weights")
    bias = inputs.flag("add_bias_linear")
    if bias is None and inputs.flag("disable_bias_linear") is not None:
        bias = not inputs.flag("disable_bias_linear")
    position = inputs.run_params.get("position_embedding_type")
    rms_norm = (inputs.run_params.get("normalization") or "").strip().lower() == "rmsnorm"
    if inputs.framework == "torchtitan":
        # its models (Llama 3 and 4, DeepSeek-V3) rotate their queries and keys, untie the output layer,
        # use no biases and normalise with RMSNorm (torchtitan/models/llama3/model.py); a Megatron log says
        # so in its arguments
        position = position or "rope"
        untied = True if untied is None else untied
        bias = False if bias is None else bias
        rms_norm = True
    if "rope_theta" in inputs.run_params:
        position = position or "rope"  # a Hugging Face configuration of a rotary model (Llama and its kin)
    if "rms_norm_eps" in inputs.run_params:
        rms_norm = True  # the same configuration's RMSNorm
    if untied is None and "tie_word_embeddings" in inputs.run_params:
        untied = not inputs.flag("tie_word_embeddings")
    return ModelConfig(
        layers=shape["layers"],  # type: ignore[arg-type]
        hidden=shape["hidden"],  # type: ignore[arg-type]
        heads=shape["heads"],  # type: ignore[arg-type]
        seq_len=shape["seq_len"],  # type: ignore[arg-type]
        vocab=shape["vocab"],  # type: ignore[arg-type]
        ffn_hidden=_int(row.get("ffn_hidden")),
        query_groups=_int(row.get("query_groups")),
        swiglu=bool(row.get("swiglu")) if row.get("swiglu") is not None else False,
        params=inputs.params,
        tied_embeddings=not untied if untied is not None else True,
        learned_positions=position in (None, "learned_absolute"),
        bias=bias if bias is not None else True,
        dropout=_dropout(row, inputs),
        rms_norm=rms_norm,
        **moe_shape(row, inputs.run_params),
    )


def _dropout(row: dict[str, Any], inputs: RunInputs) -> bool:
    """Whether the run keeps dropout masks: a `dropout` value given, else the run's `hidden_dropout` and
    `attention_dropout` (Megatron's arguments, or a NeMo configuration's keys ending so), else Megatron-LM's
    default of 0.1: masks kept."""
    given = row.get("dropout")
    if given is not None and given == given:
        return bool(given)
    rates = []
    for name, value in inputs.run_params.items():
        if name.rsplit(".", 1)[-1] in ("hidden_dropout", "attention_dropout"):
            try:
                rates.append(float(value))
            except (TypeError, ValueError):
                continue
    return not rates or any(rate > 0 for rate in rates)


def _train_config(row: dict[str, Any], inputs: RunInputs) -> TrainConfig | None:
    tp, pp, cp = (_int(row.get(k)) or 1 for k in ("tp", "pp", "cp"))
    dp = _int(row.get("dp"))
    if dp is None and inputs.gpus:
        dp = inputs.gpus // (tp * pp * cp) or None
    mbs, gbs = _int(row.get("mbs")), inputs.gbs
    if gbs is None and mbs and dp and inputs.framework in ("megatron", "megatron-deepspeed"):
        # megatron/arguments.py: `if args.global_batch_size is None: = micro_batch_size * data_parallel_size`
        gbs = inputs.gbs = mbs * dp
        inputs.assumptions.append(f"global batch not given: MBS x DP = {gbs} assumed (Megatron's default)")
    absent = [name for name, v in (("dp", dp), ("mbs", mbs), ("gbs", gbs)) if not v]
    if absent:
        inputs.missing.append(f"layout incomplete: no {', '.join(absent)}")
        return None
    if inputs.gpus is None:
        inputs.gpus = tp * pp * dp * cp  # type: ignore[operator]
    zero_stage = _int(row.get("zero_stage"))
    if zero_stage and inputs.framework == "megatron":
        # Megatron-DeepSpeed prints `zero_stage` (default 1.0) with --deepspeed off too, where Megatron's
        # own optimizer runs and shards nothing
        inputs.assumptions.append(
            f"ZeRO stage {zero_stage} ignored: DeepSpeed is off, Megatron's optimizer runs"
        )
        zero_stage = 0
    sharded = shards_optimizer_state(inputs.run_params)
    if zero_stage is None and not sharded:
        inputs.zero_given = False
        inputs.assumptions.append("ZeRO stage not given: 0 assumed")
    fp32_buffer = not fp16_grad_buffer(inputs)
    fp32_grads = (inputs.framework in FP32_GRAD_FRAMEWORKS and fp32_buffer) or (
        inputs.framework == "megatron-deepspeed" and inputs.precision == "bf16"
    )
    try:
        train = TrainConfig(
            gbs=gbs,  # type: ignore[arg-type]
            mbs=mbs,  # type: ignore[arg-type]
            tp=tp,
            pp=pp,
            dp=dp,  # type: ignore[arg-type]
            cp=cp,
            vp=_int(row.get("vp")),
            sequence_parallel=bool(row.get("sequence_parallel"))
            if row.get("sequence_parallel") is not None
            else False,
            recompute=inputs.recompute,  # type: ignore[arg-type]
            zero_stage=zero_stage or 0,
            precision=inputs.precision,
            distributed_optimizer=sharded,
            fp32_grads=fp32_grads,
            fp32_grad_buffer=fp32_buffer,
            fp32_reduce=fsdp_reduces_in_fp32(inputs, zero_stage),
            adam_state_bytes=adam_state_bytes(inputs.run_params, inputs.precision),
            flash_attention=flash_attention(inputs.framework, inputs.run_params),
            attention_kernel=attention_kernel(inputs.run_params, inputs.assumptions),
            overlap_grad_reduce=bool(
                inputs.flag("overlap_grad_reduce")
                or inputs.flag("overlap_comm")
                or (inputs.zero_option("overlap_comm") or "").lower() == "true"
                or fsdp2(inputs, zero_stage)
            ),
            overlap_param_gather=bool(inputs.flag("overlap_param_gather") or fsdp2(inputs, zero_stage)),
            tp_comm_overlap=bool(inputs.flag("tp_comm_overlap")),
            overlap_p2p_comm=inputs.flag("overlap_p2p_comm") is not False,
            framework=inputs.framework or "megatron",
            embedding_slots=embedding_slots(row, inputs),
            async_tp_allreduce=async_tp_allreduce(inputs),
            cross_entropy=cross_entropy(inputs),
            compiled=compiles(inputs),
            **moe_layout(row, inputs.run_params),
        )
        train.microbatches  # noqa: B018 (raises when GBS is not a multiple of DP·MBS)
    except TracelogError as exc:
        inputs.missing.append(f"layout inconsistent: {exc}")
        return None
    return train


def embedding_slots(row: dict[str, Any], inputs: RunInputs) -> bool:
    """Whether the pipeline split gives the input embedding and the output layer a layer's slot each:
    Megatron-DeepSpeed's `--pp-partition-method` with a regex matching `EmbeddingPipe`
    ('type:transformer|embedding', as BigScience tr11 ran from 2022-02-27; its default 'type:transformer'
    weighs the layers alone), or Megatron-core's `--account-for-embedding-in-pipeline-split` with
    `--account-for-loss-in-pipeline-split` (L + 2 slots over the stages, one fewer layer on the first and
    the last: `get_num_layers_to_build`, megatron/core/transformer/transformer_block.py). One of the two
    alone is not modelled."""
    method = _text(row.get("pp_partition_method")) or inputs.run_params.get("pp_partition_method") or ""
    if "embed" in method.lower():
        return True
    return bool(
        inputs.flag("account_for_embedding_in_pipeline_split")
        and inputs.flag("account_for_loss_in_pipeline_split")
    )


def async_tp_allreduce(inputs: RunInputs) -> bool:
    """Whether the backward pass overlaps the column-parallel layers' input-gradient collective with their
    weight-gradient GEMM: as Megatron-LM's arguments print it (`async_tensor_model_parallel_allreduce`,
    merged 2021-09-07 and on by default: `--no-async-tensor-model-parallel-allreduce`), else wherever the
    linear layers are Transformer Engine's or Megatron-core's (a log printing `transformer_impl`, NeMo 2),
    which always do it (`_Linear.backward`: "Overlap dgrad-RS/AR with wgrad"). A Megatron log printing
    neither predates it, and BigScience's Megatron-DeepSpeed reduces synchronously
    (`copy_to_tensor_model_parallel_region` before `F.linear`, megatron/mpu/layers.py)."""
    given = inputs.flag("async_tensor_model_parallel_allreduce")
    if given is not None:
        return given
    if inputs.framework == "nemo":
        return True
    return inputs.framework in (None, "megatron") and "transformer_impl" in inputs.run_params


def cross_entropy(inputs: RunInputs) -> str:
    """How the run's loss ran (`TrainConfig.cross_entropy`): `compiled` where the run compiled PyTorch's
    cross entropy (`compiled_loss`: torchtitan's "Compiling the loss function with torch.compile",
    `model.torch_native`); else Megatron-core's `cross_entropy_loss_fusion`
    and `cross_entropy_fusion_impl` (`native` or `te`) as the run prints them (NeMo 1 copies its config's
    keys into Megatron-core's TransformerConfig, `build_transformer_config`); unset, Megatron-LM's default
    (`--cross-entropy-loss-fusion` off) except NeMo 2, whose `GPTConfig` turns the fusion on
    (nemo/collections/llm/gpt/model/base.py, `cross_entropy_loss_fusion: bool = True`)."""
    if inputs.flag("compiled_loss"):
        return "compiled"
    fused = inputs.flag("cross_entropy_loss_fusion")
    if fused is None:
        fused = inputs.framework == "nemo"
    if not fused:
        return "unfused"
    impl = (inputs.run_params.get("cross_entropy_fusion_impl") or "native").strip().lower()
    return "te" if impl == "te" else "fused"


def with_recompute(inputs: RunInputs, recompute: str, reason: str) -> RunInputs:
    """The same run with recomputation set from evidence (e.g. the formula its TFLOP/s figure used)."""
    mode = cast(Recompute, recompute)
    train = replace(inputs.train, recompute=mode) if inputs.train is not None else None
    assumptions = [a for a in inputs.assumptions if a != NO_RECOMPUTE_ASSUMED]
    return replace(
        inputs, recompute=recompute, recompute_given=True, train=train, assumptions=[*assumptions, reason]
    )


def load_rows(
    store: Store,
    where: str = "TRUE",
    marks: str = "iteration_marks",
    figures: str | None = None,
    summary: str = "run_summary",
) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """(runs row with its measured medians, run parameters) of the runs matching a predicate over
    `run_id`: what `build` takes, for callers that change a value first (`tracelog predict --gpu`).
    `marks`: the relation of warm-up marks (`Scope.marks`); `figures`: a relation of `FIGURES_SQL`'s
    columns for those runs, where the caller has them (a refresh), instead of reading their lines;
    `summary`: a relation with `run_summary`'s figures of those runs (`KEPT_SUMMARY_SQL` where a refresh
    has just kept their steady state)."""
    params: dict[int, dict[str, str]] = {}
    for run_id, name, value in store.con.execute(PARAMS_SQL.format(where=where)).fetchall():
        params.setdefault(int(run_id), {})[name] = value
    figures = figures or FIGURES_SQL.format(marks=marks, where=where.replace("run_id", "i.run_id"))
    cursor = store.con.execute(
        RUNS_SQL.format(where=where.replace("run_id", "r.run_id"), figures=figures, summary=summary)
    )
    columns = [d[0] for d in cursor.description]
    rows = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    return [(row, params.get(int(row["run_id"]), {})) for row in rows]


def load(
    store: Store,
    where: str = "TRUE",
    marks: str = "iteration_marks",
    figures: str | None = None,
    summary: str = "run_summary",
) -> list[RunInputs]:
    """Model inputs of the runs matching a SQL predicate over `run_id` (all runs by default); `marks`,
    `figures` and `summary` as `load_rows` takes them."""
    return [build(row, params) for row, params in load_rows(store, where, marks, figures, summary)]
