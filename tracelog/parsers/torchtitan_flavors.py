"""The shapes behind torchtitan's model flavours: its log names the model it builds (`Building llama3 8B
with TransformerModelArgs(...)` in some releases, `Building llama3 8B` and `Model llama3 8B size: ...` in
others), and where it does not print the arguments the flavour is all there is.

Llama 3 (torchtitan/models/llama/__init__.py `llama3_configs` at 9dec370, 2024-12, the same numbers in
models/llama3/__init__.py since): 8B dim 4096, 32 layers, 32 heads, 8 KV heads, ffn_dim_multiplier 1.3,
multiple_of 1024; 70B 8192, 80, 64, 8, 1.3, 4096; 405B 16384, 126, 128, 8, 1.2, 4096. The FFN width is
FeedForward's: int(2·4·dim/3), times the multiplier, rounded up to `multiple_of` (14336, 28672, 53248).
The vocabulary is the Llama 3 tokenizer's, 128256 (its `n_words`; `vocab_size = 128256` in later
releases). A gated (SwiGLU) MLP, no biases, untied embeddings.
"""

from __future__ import annotations

from typing import Any

LLAMA3_VOCAB = 128256

FLAVORS: dict[str, dict[str, Any]] = {
    "llama3 8b": {"layers": 32, "hidden": 4096, "heads": 32, "query_groups": 8, "ffn_hidden": 14336},
    "llama3 70b": {"layers": 80, "hidden": 8192, "heads": 64, "query_groups": 8, "ffn_hidden": 28672},
    "llama3 405b": {"layers": 126, "hidden": 16384, "heads": 128, "query_groups": 8, "ffn_hidden": 53248},
}


def flavor_shape(model: str) -> dict[str, Any] | None:
    """Run columns of a flavour as the log names it (`llama3 8B`, case aside), None for one not listed."""
    shape = FLAVORS.get(" ".join(model.lower().split()))
    if shape is None:
        return None
    return {**shape, "vocab": LLAMA3_VOCAB, "swiglu": True}
