"""The shapes of published Hugging Face checkpoints, for logs that name the checkpoint they train and print
no shape: NeMo Automodel (`Model name: meta-llama/Llama-3.2-1B`, its YAML's
`pretrained_model_name_or_path`) and llm-foundry's `hf_causal_lm` under Composer. Without a shape the
model prices nothing; with the checkpoint's own it prices the run as the trainer built it.

A checkpoint is named by its Hugging Face id or a local copy's folder (`/models/Llama-2-7b-hf`); the
family and size are read from the last path component, whatever variant follows the size (`-hf`,
`-chat-hf`, `-Instruct`): the instruction-tuned checkpoints share their base's shape. A name the table
does not hold gives nothing: the run then says its shape is incomplete, as before.

Every row is a Llama-style block (RMSNorm, rotary positions, a gated SiLU MLP, no biases in the linear
layers; Qwen 2 adds biases to Q, K and V only, which the model does not count: 0.01 % of Qwen2.5-7B's
parameters). Sources, by family:

- Llama 2 7B, 13B, 70B: NeMo's `Llama2Config7B`, `13B`, `70B` (NVIDIA/NeMo
  nemo/collections/llm/gpt/model/llama.py at 8cfedd7, September 2025; untied, `share_embeddings_and_
  output_weights = False`); the vocabulary of 32,000 tokens, Touvron et al. 2023, "Llama 2", §2.2 ("the
  total vocabulary size is 32k tokens").
- Llama 3 and 3.1 8B, 70B, 405B (3.3 70B is 3.1 70B's shape): the same file's `Llama3Config8B`,
  `Llama3Config70B`, `Llama31Config405B` (8 KV heads, untied); Llama 3.2 1B and 3B: `Llama32Config1B`,
  `Llama32Config3B` (tied). The vocabulary is the Llama 3 tokenizer's 128,256 (`torchtitan_flavors`).
- Mistral 7B (v0.1, v0.2): Jiang et al. 2023, "Mistral 7B", Table 1 (dim 4096, 32 layers, 32 heads, 8 KV
  heads, hidden_dim 14336, vocab_size 32000); untied (NeMo's `MistralConfig7B`, mistral.py). v0.3 grew
  its vocabulary and is left out.
- Qwen2 and Qwen2.5 0.5B to 72B: NeMo's `Qwen2Config500M` ... `Qwen25Config72B` (qwen2.py at the same
  commit; tied for Qwen2.5-3B, untied from 7B up; 0.5B and 1.5B left unsaid, the class default and the
  published checkpoints disagree).
- Qwen3 0.6B to 32B: NeMo's `Qwen3Config600M` ... `Qwen3Config32B` (qwen3.py): 8 KV heads, a head
  dimension of 128 whatever the width (`kv_channels`), tied up to 4B.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Checkpoint:
    layers: int
    hidden: int
    heads: int
    query_groups: int
    ffn_hidden: int
    vocab: int
    tied: bool | None  # one embedding matrix for input and output; None where the sources disagree
    kv_channels: int | None = None  # the head dimension where it is not hidden / heads


LLAMA2_VOCAB, LLAMA3_VOCAB, MISTRAL_VOCAB = 32000, 128256, 32000
QWEN_SMALL_VOCAB, QWEN_LARGE_VOCAB = 151936, 152064

FAMILIES: tuple[tuple[re.Pattern[str], dict[str, Checkpoint]], ...] = (
    (
        re.compile(r"^(?:meta-)?llama-?2-(\d+)b(?![\d.])"),
        {
            "7": Checkpoint(32, 4096, 32, 32, 11008, LLAMA2_VOCAB, False),
            "13": Checkpoint(40, 5120, 40, 40, 13824, LLAMA2_VOCAB, False),
            "70": Checkpoint(80, 8192, 64, 8, 28672, LLAMA2_VOCAB, False),
        },
    ),
    (
        re.compile(r"^(?:meta-)?llama-?3\.2-(\d+)b(?![\d.])"),
        {
            "1": Checkpoint(16, 2048, 32, 8, 8192, LLAMA3_VOCAB, True),
            "3": Checkpoint(28, 3072, 24, 8, 8192, LLAMA3_VOCAB, True),
        },
    ),
    (
        re.compile(r"^(?:meta-)?llama-?3(?:\.[13])?-(\d+)b(?![\d.])"),
        {
            "8": Checkpoint(32, 4096, 32, 8, 14336, LLAMA3_VOCAB, False),
            "70": Checkpoint(80, 8192, 64, 8, 28672, LLAMA3_VOCAB, False),
            "405": Checkpoint(126, 16384, 128, 8, 53248, LLAMA3_VOCAB, False),
        },
    ),
    (
        re.compile(r"^mistral-(7)b(?:-instruct)?(?:-v0\.[12])?(?![\w.]|-v\d)"),
        {"7": Checkpoint(32, 4096, 32, 8, 14336, MISTRAL_VOCAB, False)},
    ),
    (
        re.compile(r"^qwen2(?:\.5)?-(\d+(?:\.\d)?)b(?![\d.])"),
        {
            "0.5": Checkpoint(24, 896, 14, 2, 4864, QWEN_SMALL_VOCAB, None),
            "1.5": Checkpoint(28, 1536, 12, 2, 8960, QWEN_SMALL_VOCAB, None),
            "3": Checkpoint(36, 2048, 16, 2, 11008, QWEN_SMALL_VOCAB, True),
            "7": Checkpoint(28, 3584, 28, 4, 18944, QWEN_LARGE_VOCAB, False),
            "14": Checkpoint(48, 5120, 40, 8, 13824, QWEN_LARGE_VOCAB, False),
            "32": Checkpoint(64, 5120, 40, 8, 27648, QWEN_LARGE_VOCAB, False),
            "72": Checkpoint(80, 8192, 64, 8, 29568, QWEN_LARGE_VOCAB, False),
        },
    ),
    (
        re.compile(r"^qwen3-(\d+(?:\.\d)?)b(?![\d.])"),
        {
            "0.6": Checkpoint(28, 1024, 16, 8, 3072, QWEN_SMALL_VOCAB, True, 128),
            "1.7": Checkpoint(28, 2048, 16, 8, 6144, QWEN_SMALL_VOCAB, True, 128),
            "4": Checkpoint(36, 2560, 32, 8, 9728, QWEN_SMALL_VOCAB, True, 128),
            "8": Checkpoint(36, 4096, 32, 8, 12288, QWEN_SMALL_VOCAB, False, 128),
            "14": Checkpoint(40, 5120, 40, 8, 17408, QWEN_SMALL_VOCAB, False, 128),
            "32": Checkpoint(64, 5120, 64, 8, 25600, QWEN_SMALL_VOCAB, False, 128),
        },
    ),
)

KNOWN = (
    "Llama 2 (7B, 13B, 70B), Llama 3, 3.1 and 3.3 (8B, 70B, 405B), Llama 3.2 (1B, 3B), Mistral 7B (v0.1, "
    "v0.2), Qwen2 and Qwen2.5 (0.5B to 72B), Qwen3 (0.6B to 32B)"
)
"""The families and sizes of the table, as an error names them."""


def checkpoint(name: str) -> Checkpoint | None:
    """The shape of the checkpoint `name` names (a Hugging Face id or a local folder), None for one the
    table does not hold."""
    base = name.strip().strip("'\"").rstrip("/").rsplit("/", 1)[-1].lower()
    for pattern, sizes in FAMILIES:
        if (match := pattern.match(base)) is not None:
            return sizes.get(match.group(1))
    return None


def shape_columns(found: Checkpoint) -> dict[str, Any]:
    """The run columns of a checkpoint's shape."""
    return {
        "layers": found.layers,
        "hidden": found.hidden,
        "heads": found.heads,
        "query_groups": found.query_groups,
        "ffn_hidden": found.ffn_hidden,
        "vocab": found.vocab,
        "swiglu": True,
    }


def shape_params(found: Checkpoint, name: str) -> dict[str, str]:
    """The run parameters the model reads for what the block is built of, by the names Megatron prints
    them under (`analysis.inputs`), and `shape_from` naming the checkpoint the shape was looked up by."""
    params = {
        "shape_from": f"checkpoint {name.strip()} (tracelog's table of published checkpoints)",
        "position_embedding_type": "rope",
        "normalization": "RMSNorm",
        "add_bias_linear": "False",
    }
    if found.tied is not None:
        params["untie_embeddings_and_output_weights"] = str(not found.tied)
    if found.kv_channels is not None:
        params["kv_channels"] = str(found.kv_channels)
    return params


def fill_run(run: dict[str, Any], names: tuple[str, ...]) -> None:
    """Give a parser's run row (its columns and `run_params`) the shape of the checkpoint its first
    parameter among `names` names, where the log gave no width or depth of its own; columns the log
    stated stay."""
    if run.get("hidden") or run.get("layers"):
        return
    said = next((p for name in names for p in run["run_params"] if p["name"] == name), None)
    if said is None or (found := checkpoint(said["value"])) is None:
        return
    for column, value in shape_columns(found).items():
        if run.get(column) is None:
            run[column] = value
    kept = {p["name"] for p in run["run_params"]}
    for name, value in shape_params(found, said["value"]).items():
        if name not in kept:
            run["run_params"].append({"name": name, "value": value, "line_no": said["line_no"]})
