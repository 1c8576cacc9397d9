"""The run configuration a Composer log states: llm-foundry's config echo and Composer's `Config:` block,
read as YAML a line at a time, and the run columns they give.

Two echoes, both YAML, both printed before the first batch:

- llm-foundry's `log_config` prints the whole training configuration with `print(om.to_yaml(cfg))`
  (llmfoundry/utils/config_utils.py), after the line `Logging config` (`Logging config...` in the
  2023 `scripts/train/train.py`): keys in the YAML file's order, interpolations resolved since 2024
  (`make_dataclass_and_log_config`: `om.to_container(cfg, resolve=True)`; `${variables.max_seq_len}` as
  written before), with what `update_batch_size_info` added (`n_gpus`, `device_train_batch_size`,
  `device_train_grad_accum`) and the parameter count (`n_params`, `_log_num_params`).
- Composer's ConsoleLogger prints the hyperparameters logged to it at `fit_start`, between two rules of
  30 asterisks under `Config:` (composer/loggers/console_logger.py `_log_hparams_to_console`,
  `yaml.dump`: keys sorted): Composer's own (`composer_version`, `num_nodes`, `num_gpus_per_node`,
  `rank_zero_seed`, `time/remaining_estimate_unit`) and, since llm-foundry hands its configuration to
  `log_hyperparameters`, the same configuration again.

Every leaf is kept as a run parameter under its dotted path (`fsdp_config.sharding_strategy`), the first
value a run prints for a name winning. `run_columns` turns them into the columns the model reads:
the batch sizes (`global_train_batch_size`, `device_train_microbatch_size`), `max_seq_len`, the MPT shape
(`model.d_model`, `n_heads`, `n_layers`, `expansion_ratio`, `vocab_size`, the attention and FFN types:
llmfoundry/models/mpt/configuration_mpt.py and models/layers/ffn.py `resolve_ffn_hidden_size`), the GPU
count, FSDP's sharding strategy as a ZeRO stage, activation checkpointing and the precision.
"""

from __future__ import annotations

import re
from typing import Any

RULE = "*" * 30
KEY_RX = re.compile(r"^(?P<indent> *)(?P<dash>- +)?(?P<key>[A-Za-z_][\w./-]*):(?: (?P<value>.*))?$")
ITEM_RX = re.compile(r"^ *- ")
# The keys a training YAML of llm-foundry starts with (scripts/train/yamls): an echo whose `Logging config`
# line was not printed (no `python_log_level`) is known by its first key.
TOP_KEYS = frozenset(
    {
        "variables", "max_seq_len", "global_seed", "run_name", "data_local", "data_remote", "model",
        "tokenizer", "train_loader", "global_train_batch_size", "max_duration", "precision", "fsdp_config",
        "seed",
    }
)  # fmt: skip
PRECISIONS = {"amp_bf16": "bf16", "amp_fp16": "fp16", "amp_fp8": "fp8", "fp32": "fp32", "bf16": "bf16"}
# torch.distributed.fsdp.ShardingStrategy as Composer names it (composer/distributed/dist_strategy.py):
# FULL_SHARD shards parameters, gradients and optimizer state (ZeRO-3); SHARD_GRAD_OP keeps parameters
# whole between forward and backward (ZeRO-2); the hybrid strategies shard so within a node and replicate
# across nodes; NO_SHARD is DDP.
SHARDING = {"FULL_SHARD": 3, "HYBRID_SHARD": 3, "SHARD_GRAD_OP": 2, "_HYBRID_SHARD_ZERO2": 2, "NO_SHARD": 0}
# Composer's FSDPConfig.sharding_strategy when the fsdp_config names none
DEFAULT_SHARDING = "FULL_SHARD"
DURATION_RX = re.compile(r"^(\d+)(ba|ep|tok|sp|dur)$")


class ConfigEcho:
    """The YAML echo being read: the path of keys above the current line, by indentation."""

    def __init__(self) -> None:
        self.active = False
        self.stack: list[tuple[int, str]] = []

    def start(self) -> None:
        self.active, self.stack = True, []

    def stop(self) -> None:
        self.active, self.stack = False, []

    def feed(self, text: str) -> tuple[str, str] | None | bool:
        """A line of the echo: (dotted path, value) for a leaf, True for a line of the echo that is no
        leaf (a mapping's key, a list item, a folded value's continuation), False for a line that is no
        YAML, which ends the echo (the caller reads it as it would any line)."""
        match = KEY_RX.match(text)
        if match is None:
            if text.startswith(" ") and text.strip() or ITEM_RX.match(text):
                return True  # a list item or a long value folded onto the next line
            self.stop()
            return False
        indent = len(match.group("indent")) + len(match.group("dash") or "")
        while self.stack and self.stack[-1][0] >= indent:
            self.stack.pop()
        key, value = match.group("key"), (match.group("value") or "").strip()
        path = ".".join([*(k for _, k in self.stack), key])
        if value in ("", "|", ">", "|-", ">-"):
            self.stack.append((indent, key))
            return True
        if value in ("{}", "[]"):
            return True
        return path, _unquoted(value)


def _unquoted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def run_columns(config: dict[str, str]) -> dict[str, Any]:
    """The run columns a configuration gives (only those it states; NULL stays NULL)."""
    columns: dict[str, Any] = {}
    get = config.get
    if (gbs := _int(get("global_train_batch_size"))) is not None:
        columns["gbs"] = gbs
    if (mbs := _int(get("device_train_microbatch_size"))) is not None:
        columns["mbs"] = mbs
    for key in (
        "max_seq_len",
        "model.max_seq_len",
        "variables.max_seq_len",
        "train_loader.dataset.max_seq_len",
    ):
        if (seq := _int(get(key))) is not None:
            columns["seq_len"] = seq
            break
    if (precision := PRECISIONS.get(get("precision", "").lower())) is not None:
        columns["precision"] = precision
    if (params := _int(get("n_params"))) is not None:
        columns["params"] = params
    columns.update(_shape(config))
    columns.update(_layout(config))
    if (duration := DURATION_RX.match(get("max_duration", ""))) and duration.group(2) == "ba":
        columns["train_iters"] = int(duration.group(1))
    return columns


MPT_DEFAULTS = {"model.expansion_ratio": "4", "model.vocab_size": "50368"}
"""What MPTConfig assumes where the configuration names nothing (configuration_mpt.py `__init__`)."""


ATTENTION = {"flash": "flash", "triton": "flash", "torch": "unfused"}
"""MPT's `attn_config.attn_impl` as the `attention_backend` the model reads: flash-attn's kernel or
llm-foundry's Triton port of it, or `scaled_multihead_dot_product_attention`, which materialises the
scores (llmfoundry/models/layers/attention.py)."""


def attention_backend(config: dict[str, str]) -> str | None:
    return ATTENTION.get(config.get("model.attn_config.attn_impl", ""))


def _shape(config: dict[str, str]) -> dict[str, Any]:
    """The MPT shape (llm-foundry's `mpt_causal_lm`, MPTConfig's defaults where the echo names no
    expansion ratio or vocabulary); a Hugging Face model (`hf_causal_lm`) is named by its checkpoint only
    (`pretrained_model_name_or_path`), which says no shape here."""
    hidden, layers = _int(config.get("model.d_model")), _int(config.get("model.n_layers"))
    if hidden is None or layers is None:
        return {}
    if config.get("model.name") == "mpt_causal_lm":
        config = {**MPT_DEFAULTS, **config}
    get = config.get
    shape: dict[str, Any] = {"hidden": hidden, "layers": layers}
    heads = _int(get("model.n_heads"))
    if heads is not None:
        shape["heads"] = heads
    if (vocab := _int(get("model.vocab_size"))) is not None:
        shape["vocab"] = vocab
    ffn = _int(get("model.ffn_config.ffn_hidden_size"))
    ratio = _number(get("model.expansion_ratio"))
    if ffn is None and ratio is not None and (hidden * ratio).is_integer():
        ffn = int(hidden * ratio)
    if ffn is not None:
        shape["ffn_hidden"] = ffn
    shape["swiglu"] = get("model.ffn_config.ffn_type", "mptmlp") == "mptglu"
    attention = get("model.attn_config.attn_type", "multihead_attention")
    if attention == "grouped_query_attention" and (kv := _int(get("model.attn_config.kv_n_heads"))):
        shape["query_groups"] = kv
    elif attention == "multiquery_attention":
        shape["query_groups"] = 1
    elif attention == "multihead_attention" and heads is not None:
        shape["query_groups"] = heads
    return shape


def _layout(config: dict[str, str]) -> dict[str, Any]:
    """GPUs, nodes, tensor parallelism, FSDP's sharding as a ZeRO stage and activation checkpointing.
    Composer has no pipeline parallelism: every rank not in a tensor-parallel group holds a data shard."""
    get = config.get
    layout: dict[str, Any] = {}
    gpus = _int(get("n_gpus"))
    per_node, nodes = _int(get("num_gpus_per_node")), _int(get("num_nodes"))
    if gpus is None and per_node and nodes:
        gpus = per_node * nodes
    if per_node:
        layout["gpus_per_node"] = per_node
    if nodes:
        layout["nodes"] = nodes
    if gpus:
        tp = _int(get("tp_config.tensor_parallel_degree")) or 1
        layout.update(gpus=gpus, tp=tp, pp=1)
        if gpus % tp == 0:
            layout["dp"] = gpus // tp
    fsdp_keys = [key for key in config if key.startswith("fsdp_config.")]
    if get("fsdp_config") in ("null", "None"):
        layout["zero_stage"] = 0  # no FSDP: DDP, every rank holds the whole model
    elif fsdp_keys:
        strategy = get("fsdp_config.sharding_strategy", DEFAULT_SHARDING).upper()
        if strategy in SHARDING:
            layout["zero_stage"] = SHARDING[strategy]
        checkpointing = get("fsdp_config.activation_checkpointing", "").lower()
        if checkpointing in ("true", "false"):
            layout["recompute"] = "full" if checkpointing == "true" else "none"
    return layout
