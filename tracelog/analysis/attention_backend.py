"""How attention ran, named as Megatron-LM's `--attention-backend` names it, and how it runs by default
for a configuration given without a log (`tracelog predict --layers ...`, `tracelog plan`); from a run's
parameters, whether it materialised the scores and which fused kernel ran it."""

from __future__ import annotations

from tracelog.errors import TracelogError
from tracelog.model.attention_kernels import ATTENTION_KERNELS
from tracelog.model.gemm import SDPA_FRAMEWORKS

ATTENTION_BACKENDS = ("flash", "fused", "unfused", "local")
"""Megatron-LM's `--attention-backend` choices that say how attention ran (`auto` lets Transformer Engine
pick a flash or cuDNN fused kernel, as `flash` and `fused` do)."""


def backend_is_flash(backend: str) -> bool:
    """Whether an `--attention-backend` given by name (one of ATTENTION_BACKENDS) runs without
    materialising the scores: flash and fused do, unfused and local do not."""
    if backend not in ATTENTION_BACKENDS:
        raise TracelogError(f"unknown attention backend {backend!r}; known: {', '.join(ATTENTION_BACKENDS)}")
    return backend in ("flash", "fused")


def default_attention_backend(framework: str | None) -> str:
    """How attention runs for a configuration given without a log (`tracelog predict --layers ...`,
    `tracelog plan`): each framework's default today. Megatron-LM builds its layers with Transformer
    Engine since 2024 (`--transformer-impl transformer_engine`, attention backend `auto`: a flash or
    cuDNN fused kernel), and so does NeMo 2; Megatron-DeepSpeed and DeepSpeed materialise the scores
    unless told otherwise (`--use-flash-attn-v2`)."""
    return "unfused" if framework in ("megatron-deepspeed", "deepspeed") else "flash"


def flash_attention(framework: str | None, params: dict[str, str]) -> bool:
    """Whether attention ran without materialising the s x s scores, from the run's parameters: `--use-flash-attn`,
    or Transformer Engine (`--transformer-impl transformer_engine`, Megatron-LM's default since 2024, and NeMo
    2's), whose fused attention picks a flash or cuDNN kernel, unless `--attention-backend` forces the unfused
    path. A Megatron log that prints its arguments without `transformer_impl` predates it: unfused."""
    if (params.get("use_flash_attn") or "").strip().lower() in ("true", "1", "yes"):
        return True
    backend = (params.get("attention_backend") or "").lower()
    if "unfused" in backend or "local" in backend:
        return False
    if "flash" in backend or "fused" in backend:
        return True
    if framework in SDPA_FRAMEWORKS:
        return True
    if framework == "nemo" and "transformer_impl" not in params:
        # NeMo 2 builds its GPT models from Transformer Engine layer specs (`gpt_layer_spec` defaults to
        # `transformer_engine_layer_spec` in nemo/collections/llm/gpt/model/base.py) with
        # `attention_backend` auto: a fused or flash kernel.
        return True
    return (params.get("transformer_impl") or "").lower() == "transformer_engine"


MPT_ATTENTION_KERNELS = {"triton": "triton"}
"""MPT's `attn_config.attn_impl` that names a kernel of its own: `triton`, llm-foundry's copy of the
FlashAttention repository's Triton kernel (llmfoundry/models/layers/flash_attn_triton.py). `flash` calls the
flash-attn package installed beside it, 1.x or 2.x by llm-foundry's extras (`gpu` or `gpu-flash2`), which a
configuration does not name: the framework's rate (FlashAttention-2)."""


def attention_kernel(params: dict[str, str], assumptions: list[str]) -> str | None:
    """Which fused attention kernel of an earlier generation ran (`model.attention_kernels`): the run's
    `attention_kernel` as given (flash-attn-1, flash-attn-2, triton), else MPT's `attn_impl` where it names
    one (`MPT_ATTENTION_KERNELS`); None: the framework's own kernel. An unknown name is recorded in
    `assumptions` and left to the framework's kernel."""
    given = (params.get("attention_kernel") or "").strip().lower()
    if given:
        if given not in ATTENTION_KERNELS:
            assumptions.append(f"attention kernel {given!r} not known: the framework's own assumed")
            return None
        return given
    return MPT_ATTENTION_KERNELS.get((params.get("model.attn_config.attn_impl") or "").strip())
