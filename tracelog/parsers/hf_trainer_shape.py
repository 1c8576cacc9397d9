"""The run's shape as a Hugging Face Trainer log prints it beside the Trainer's start block: the model's
configuration as `from_pretrained` logs it (`Model config LlamaConfig { "hidden_size": 4096, ... }`) and a
printed `TrainingArguments(...)` (or one of TRL's configs), read a line at a time while such a block is
open, and what the arguments give the run's columns once the log is read."""

from __future__ import annotations

import re
from typing import Any, Protocol

from tracelog.parsers.hf_trainer_dict import to_number


class ShapedParser(Protocol):
    """What of the Trainer's parser these blocks read and write."""

    run_key: int
    block: str | None  # "model" or "args" while such a block is open
    depth: int  # brackets open inside the model's configuration (a list of architectures)
    args: dict[int, dict[str, str]]  # the kept arguments, by run
    logging_steps: int | None

    def run(self, line_no: int) -> dict[str, Any]: ...
    def param(self, line_no: int, name: str, value: Any) -> None: ...


MODEL_CONFIG_RX = re.compile(r"\bModel config (\w+) \{\s*$")
CONFIG_PAIR_RX = re.compile(r'^\s*"(\w+)":\s*(.*?),?\s*$')
# the Trainer's arguments as a script prints them: transformers' TrainingArguments, TRL's SFTConfig,
# DPOConfig, GRPOConfig, ... (subclasses of it)
ARGS_START_RX = re.compile(r"\b(\w*TrainingArguments|(?:SFT|DPO|ORPO|KTO|CPO|GRPO|PPO|Reward)Config)\($")
ARG_RX = re.compile(r"^\s*(\w+)=(.*?),?\s*$")
# the model configuration's keys (transformers' names; GPT-2's and Falcon's older spellings) -> run columns
MODEL_KEYS = {
    "hidden_size": "hidden",
    "n_embd": "hidden",
    "num_hidden_layers": "layers",
    "n_layer": "layers",
    "num_attention_heads": "heads",
    "n_head": "heads",
    "num_key_value_heads": "query_groups",
    "intermediate_size": "ffn_hidden",
    "n_inner": "ffn_hidden",
    "vocab_size": "vocab",
}
# the model configuration's keys kept as run parameters: its type, and what says how its blocks are built
# (`rms_norm_eps`: RMSNorm; `rope_theta`: rotary positions; `tie_word_embeddings`: one embedding matrix)
MODEL_PARAMS = (
    "model_type",
    "hidden_act",
    "torch_dtype",
    "max_position_embeddings",
    "rms_norm_eps",
    "rope_theta",
    "tie_word_embeddings",
)
# TrainingArguments fields kept as run parameters (the rest of the block is read, not kept)
ARG_KEYS = (
    "logging_steps",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "max_steps",
    "bf16",
    "fp16",
    "gradient_checkpointing",
    "deepspeed",
    "fsdp",
    "optim",
    "learning_rate",
    "seed",
    "max_seq_length",
    "max_length",
    "packing",
    "torch_compile",
)
# TRL's sequence length (SFTConfig `max_seq_length`, `max_length` since 0.20): every sequence's length when
# examples are packed, an upper bound otherwise
SEQ_KEYS = ("max_seq_length", "max_length")
# model types whose MLP is gated (gate, up and down projections: SwiGLU or GeGLU), as their modeling
# files build it; the FLOP count and the model's memory take the third matrix from `swiglu`
GATED_MODELS = (
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "gemma",
    "gemma2",
    "phi3",
    "olmo2",
)


def block_start(parser: ShapedParser, n: int, part: str) -> bool:
    """The first line of the model's configuration or of printed arguments: the block opens."""
    if match := MODEL_CONFIG_RX.search(part):
        parser.block = "model"
        parser.param(n, "model_config", match.group(1))
        return True
    if ARGS_START_RX.search(part.rstrip()):
        parser.block = "args"
        return True
    return False


def block_line(parser: ShapedParser, n: int, part: str) -> bool:
    """A line of the open block (the model's configuration is JSON, the arguments one `name=value` a
    line); False, with the block closed, for a line of neither shape: the block was cut off."""
    stripped = part.strip()
    if parser.depth > 0:
        parser.depth += stripped.count("[") + stripped.count("{") - stripped.count("]") - stripped.count("}")
        return True
    if (parser.block == "model" and stripped == "}") or (parser.block == "args" and stripped == ")"):
        parser.block = None
        return True
    if parser.block == "model" and (match := CONFIG_PAIR_RX.match(part)):
        key, raw = match.groups()
        parser.depth = max(0, raw.count("[") + raw.count("{") - raw.count("]") - raw.count("}"))
        column = MODEL_KEYS.get(key)
        value = to_number(raw) if column else None
        if column and value is not None:
            parser.run(n).setdefault(column, int(value))
        elif key in MODEL_PARAMS:
            parser.param(n, key, raw.strip('"'))
            if key == "model_type":
                parser.run(n)["swiglu"] = raw.strip('"') in GATED_MODELS
        return True
    if parser.block == "args" and (match := ARG_RX.match(part)):
        key, raw = match.groups()
        if key in ARG_KEYS:
            parser.param(n, key, raw)
            parser.args.setdefault(parser.run_key, {})[key] = raw
            if key == "logging_steps" and raw.isdigit():
                parser.logging_steps = int(raw)
        return True
    parser.block = None
    return False


def shape_from_arguments(run: dict[str, Any], args: dict[str, str], columns: dict[str, Any]) -> None:
    """What a run's printed arguments say of it: its sequence length (noted as assumed where examples are
    not packed) on `run`, recompute and a precision DeepSpeed's echo did not give into `columns`."""
    seq = next((args[k] for k in SEQ_KEYS if args.get(k, "").isdigit()), None)
    if seq is not None:
        run.setdefault("seq_len", int(seq))
        if args.get("packing") != "True":
            run["run_params"].append(
                {
                    "name": "seq_len_assumed",
                    "value": "the truncation length: examples are not packed, most are shorter",
                    "line_no": run["line_start"],
                }
            )
    if args.get("gradient_checkpointing") in ("True", "False"):
        columns["recompute"] = "full" if args["gradient_checkpointing"] == "True" else "none"
    if "precision" not in columns and (args.get("bf16") == "True" or args.get("fp16") == "True"):
        columns["precision"] = "bf16" if args.get("bf16") == "True" else "fp16"
