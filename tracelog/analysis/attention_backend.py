"""How attention ran, named as Megatron-LM's `--attention-backend` names it, and how it runs by default
for a configuration given without a log (`tracelog predict --layers ...`, `tracelog plan`)."""

from __future__ import annotations

from tracelog.errors import TracelogError

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
