"""The configuration NeMo logs before training (`Experiment configuration` followed by the YAML of the
recipe or Hydra config; NeMo 1's `Hydra config:`): every leaf a `run_params` row named by its dotted path,
and the leaves the model needs (parallel sizes, batch sizes, sequence length, layers, hidden, heads,
precision, nodes, devices, max_steps) mapped onto run columns by their last name, the first one printed
winning. Read a line at a time while the dump is open; a line of no YAML shape ends it."""

from __future__ import annotations

import re
from typing import Any, Protocol

from tracelog.parsers.base import as_int
from tracelog.parsers.lightning_bar import logged_number

CONFIG_START_RX = re.compile(r"Experiment configuration|^\s*(?:Hydra|Recipe) config(?:uration)?:?\s*$")
YAML_RX = re.compile(r"^( *)(?:- )?([\w.\-/]+):(?: (.*))?$")
YAML_ITEM_RX = re.compile(r"^( *)- (.*)$")
# last YAML name -> run column; NeMo 2 recipes (trainer.strategy.*, model.config.*, data.*) and NeMo 1
# Hydra configs (model.*, trainer.*) share these leaf names.
CONFIG_COLUMNS: dict[str, str] = {
    "tensor_model_parallel_size": "tp",
    "pipeline_model_parallel_size": "pp",
    "context_parallel_size": "cp",
    "virtual_pipeline_model_parallel_size": "vp",
    "micro_batch_size": "mbs",
    "global_batch_size": "gbs",
    "seq_length": "seq_len",
    "encoder_seq_length": "seq_len",
    "num_layers": "layers",
    "hidden_size": "hidden",
    "num_attention_heads": "heads",
    "num_query_groups": "query_groups",
    "ffn_hidden_size": "ffn_hidden",
    "vocab_size": "vocab",
    "max_steps": "train_iters",
    "num_nodes": "nodes",
    "devices": "gpus_per_node",
}
RECOMPUTE_KEYS = ("recompute_granularity", "activations_checkpoint_granularity")


class ConfiguredParser(Protocol):
    """What of the NeMo parser the configuration dump reads and writes."""

    params: list[dict[str, Any]]  # the run's parameters so far
    columns: dict[str, Any]  # the run's columns so far
    config_seen: bool  # a key was read since the configuration's title
    path: list[tuple[int, str]]  # (indent, name) of the open YAML mappings


def precision_of(value: str) -> str | None:
    """Lightning's precision names (`bf16-mixed`, `16-mixed`, `32`, `bf16`) as the run's precision."""
    text = value.strip().strip("'\"").lower()
    if "bf16" in text:
        return "bf16"
    if text.startswith("16"):
        return "fp16"
    if text.startswith("32"):
        return "fp32"
    if "fp8" in text:
        return "fp8"
    return None


def config_line(parser: ConfiguredParser, n: int, body: str) -> bool:
    """A line of the open dump: a `key: value` leaf, a mapping's `key:` or a list's `- item`; False for a
    line of no such shape (the dump has ended)."""
    parser.config_seen = True
    match = YAML_RX.match(body)
    if not match:
        item = YAML_ITEM_RX.match(body)
        if item and parser.path:
            config_param(parser, n, ".".join(name for _, name in parser.path), item.group(2))
            return True
        return False
    indent, name, value = len(match.group(1)), match.group(2), match.group(3)
    while parser.path and parser.path[-1][0] >= indent:
        parser.path.pop()
    if value is None or value.strip() == "":
        parser.path.append((indent, name))
        return True
    config_param(parser, n, ".".join([*(p for _, p in parser.path), name]), value.strip(), name)
    return True


def config_param(parser: ConfiguredParser, n: int, path: str, value: str, leaf: str | None = None) -> None:
    """A leaf as a run parameter, and as the run column its last name maps to where none is set yet."""
    parser.params.append({"name": path, "value": value, "line_no": n})
    if leaf is None:
        return
    column = CONFIG_COLUMNS.get(leaf)
    if column and column not in parser.columns and (number := logged_number(value)) is not None:
        parser.columns[column] = as_int(number)
    elif leaf == "precision" and "precision" not in parser.columns:
        parser.columns["precision"] = precision_of(value)
    elif leaf == "sequence_parallel" and "sequence_parallel" not in parser.columns:
        parser.columns["sequence_parallel"] = value.strip().lower() == "true"
    elif leaf in RECOMPUTE_KEYS and "recompute" not in parser.columns:
        word = value.strip().strip("'\"").lower()
        parser.columns["recompute"] = word if word in ("selective", "full") else "none"
