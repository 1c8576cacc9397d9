"""A Megatron run's configuration, from its arguments block and the lines that echo it.

Every argument is kept verbatim (as `run_params`); the ones the model needs map onto run columns.
Names changed across eras and forks, so several argument names can feed one column.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tracelog.parsers.base import as_int

# run column -> argument names that hold it, newest spelling first
ARG_COLUMNS: dict[str, tuple[str, ...]] = {
    "tp": ("tensor_model_parallel_size", "model_parallel_size"),
    # DeepSpeedExamples' Megatron-LM-v1.1.5-3D_parallelism: `--pipe-parallel-size`
    "pp": ("pipeline_model_parallel_size", "pipe_parallel_size"),
    "dp": ("data_parallel_size",),
    "cp": ("context_parallel_size",),
    "vp": ("virtual_pipeline_model_parallel_size", "num_layers_per_virtual_pipeline_stage"),
    "mbs": ("micro_batch_size", "batch_size"),
    "gbs": ("global_batch_size",),
    "seq_len": ("seq_length", "max_position_embeddings"),
    "layers": ("num_layers",),
    "hidden": ("hidden_size",),
    "heads": ("num_attention_heads",),
    "query_groups": ("num_query_groups",),
    "ffn_hidden": ("ffn_hidden_size",),
    "vocab": ("padded_vocab_size",),
    "gpus": ("world_size",),
    "zero_stage": ("zero_stage",),
    "train_iters": ("train_iters",),
}
INT_COLUMNS = set(ARG_COLUMNS)
NONE_WORDS = {"none", "null", ""}


def _int(value: str) -> int | float | None:
    """An integer argument; NaN and inf stay floats, reported as bad values when the run row goes out."""
    try:
        return as_int(float(value))
    except ValueError:
        return None


def _true(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("true", "1", "yes")


@dataclass
class RunInfo:
    run_key: int
    line_start: int | None = None
    line_end: int | None = None
    args: dict[str, str] = field(default_factory=dict)
    params: list[dict[str, Any]] = field(default_factory=list)
    columns: dict[str, Any] = field(default_factory=dict)
    rank_params: dict[tuple[int, int], int] = field(default_factory=dict)
    params_printed: int | None = None
    tflops_seen: bool = False
    effective_tflops: bool = False
    v1_world: bool = False  # the world line of Megatron-LM v1 (`set_world`)
    # what its iteration lines said last (`global batch size: 128`, `iteration 10/ 2000`, Megatron-
    # DeepSpeed's `actual seqlen:  4096`): the run's global batch, length and sequence length where no
    # argument gave them (a log without its arguments block)
    logged_gbs: int | None = None
    logged_train_iters: int | None = None
    logged_seq_len: int | None = None
    # the highest torchrun `[rankN]:` prefix in its lines, plus one: how many ranks the log shows at least,
    # kept as the run parameter `ranks_seen` where no GPU count is known (it is none: a log may show only
    # some ranks)
    ranks_seen: int | None = None

    def state(self) -> dict[str, Any]:
        """Everything this run knows, as JSON, for an ingest that resumes after the last complete line."""
        return {
            **{k: getattr(self, k) for k in _STATE_FIELDS},
            "rank_params": [[tp, pp, n] for (tp, pp), n in self.rank_params.items()],
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> RunInfo:
        # a state saved before a field existed takes the field's default
        run = cls(**{k: state[k] for k in _STATE_FIELDS if k in state or k not in _DEFAULTED})
        run.rank_params = {(int(tp), int(pp)): int(n) for tp, pp, n in state["rank_params"]}
        return run

    def inherit(self, previous: RunInfo) -> None:
        """The configuration of the run this one restarts (no arguments block of its own was printed)."""
        self.args = {**previous.args, **self.args}
        self.columns = {**previous.columns, **self.columns}
        self.params = [*previous.params, *self.params]
        self.rank_params = {**previous.rank_params, **self.rank_params}
        self.params_printed = self.params_printed or previous.params_printed

    def set_arg(self, name: str, value: str, line_no: int) -> None:
        self.args[name] = value
        self.params.append({"name": name, "value": value, "line_no": line_no})

    def set_world(self, world: int, parts: dict[str, str], line_no: int) -> None:
        """`using world size: 64, data-parallel-size: 1, tensor-model-parallel size: 4, ...`"""
        self.columns["gpus"] = world
        names = {
            "data-parallel": "dp",
            "tensor-model-parallel": "tp",
            "pipeline-model-parallel": "pp",
            "context-parallel": "cp",
            "model-parallel": "tp",
        }
        for part, value in parts.items():
            column = names.get(part.rstrip("-"))
            if column:
                self.columns[column] = int(value)
        # Megatron-LM v1 (2020) printed `using world size: 64 and model-parallel size: 4`: tensor
        # parallelism only; a pipeline there is DeepSpeed's, which its arguments or partition name.
        self.v1_world = set(parts) == {"model-parallel"}
        self.params.append({"name": "world_size_line", "value": f"{world} {parts}", "line_no": line_no})

    def add_rank_params(self, tp_rank: int, pp_rank: int, count: int) -> None:
        self.rank_params[(tp_rank, pp_rank)] = count

    def theoretical_memory(self, match: Any, line_no: int) -> None:
        labels = (
            "theoretical_weight_and_optimizer_mib",
            "theoretical_activation_mib",
            "theoretical_total_mib",
        )
        for label, value in zip(labels, match.groups(), strict=True):
            if value is not None:
                self.params.append({"name": label, "value": value, "line_no": line_no})

    def _from_args(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for column, names in ARG_COLUMNS.items():
            for name in names:
                raw = self.args.get(name)
                if raw is not None and raw.strip().lower() not in NONE_WORDS:
                    value = _int(raw)
                    if value is not None:
                        out[column] = value
                        break
        args = self.args
        if (
            args.get("num_layers_per_virtual_pipeline_stage")
            and "virtual_pipeline_model_parallel_size" not in args
        ):
            out.pop(
                "vp", None
            )  # a layer count, not a chunk count: derived below when layers and pp are known
            per_stage = _int(args["num_layers_per_virtual_pipeline_stage"] or "")
            layers, pp = out.get("layers"), out.get("pp")
            if per_stage and layers and pp:
                out["vp"] = layers // pp // per_stage
        if out.get("query_groups") and not _true(args.get("group_query_attention")):
            out.pop("query_groups")
        if _true(args.get("bf16")):
            out["precision"] = "bf16"
        elif _true(args.get("fp16")):
            out["precision"] = "fp16"
        elif "fp16" in args or "bf16" in args:
            out["precision"] = "fp32"
        if _true(args.get("fp8")) or (args.get("fp8") or "none").lower() in ("e4m3", "hybrid"):
            out["precision"] = "fp8"
        granularity = (args.get("recompute_granularity") or "").strip().lower()
        if granularity in ("full", "selective"):
            out["recompute"] = granularity
        elif _true(args.get("checkpoint_activations")):
            out["recompute"] = "full"
        elif _true(args.get("recompute_activations")):
            out["recompute"] = "selective"  # Megatron's --recompute-activations means selective
        elif any(
            k in args for k in ("checkpoint_activations", "recompute_granularity", "recompute_activations")
        ):
            out["recompute"] = "none"
        if "sequence_parallel" in args:
            out["sequence_parallel"] = _true(args.get("sequence_parallel"))
        if "swiglu" in args:
            out["swiglu"] = _true(args.get("swiglu"))
        if _true(args.get("deepspeed")):
            out["framework"] = "megatron-deepspeed"
        return out

    def _last_param(self, name: str) -> int | None:
        """The integer value of the last parameter `name` kept (one of `LINE_PARAMS`), or None."""
        values = [p["value"] for p in self.params if p["name"] == name]
        return int(values[-1]) if values else None

    def record(self) -> dict[str, Any]:
        """The row for `runs`: log-derived columns only (the user's options are applied later)."""
        columns = {"framework": "megatron", **self._from_args(), **self.columns}
        # what DeepSpeed's own lines say, where no argument gave it: its partition (the last stage's
        # number) and its configuration echo
        last_stage = self._last_param("deepspeed_pipe_stage")
        if last_stage is not None and not columns.get("pp"):
            columns["pp"] = last_stage + 1
        if self.v1_world and not columns.get("pp"):
            columns["pp"] = 1
        if self.logged_train_iters is not None and not columns.get("train_iters"):
            columns["train_iters"] = self.logged_train_iters
        train_batch = self._last_param("deepspeed_train_batch_size")
        if train_batch is not None and not columns.get("gbs"):
            columns["gbs"] = train_batch
        if self.logged_gbs is not None and not columns.get("gbs"):
            columns["gbs"] = self.logged_gbs
        if self.logged_seq_len is not None and not columns.get("seq_len"):
            columns["seq_len"] = self.logged_seq_len
        if self.rank_params and not columns.get("tp") and not columns.get("pp"):
            # no arguments block (a tail): every (tensor, pipeline) rank prints its parameter count, so the
            # largest of each names the degree; a grid with a hole is no proof of it
            tps = {tp for tp, _ in self.rank_params}
            pps = {pp for _, pp in self.rank_params}
            if len(self.rank_params) == len(tps) * len(pps) == (max(tps) + 1) * (max(pps) + 1):
                columns["tp"], columns["pp"] = max(tps) + 1, max(pps) + 1
        if self.params_printed:
            columns["params"] = self.params_printed
        elif self.rank_params and len(self.rank_params) == (columns.get("tp") or 0) * (
            columns.get("pp") or 0
        ):
            columns["params"] = sum(self.rank_params.values())
        mpi_ranks = self._last_param("mpi_ranks")
        if mpi_ranks and not columns.get("gpus"):  # an MPI launch's ranks, where no world size was printed
            columns["gpus"] = mpi_ranks
            per_node = self._last_param("mpi_ranks_per_node")
            if per_node and mpi_ranks % per_node == 0 and not columns.get("gpus_per_node"):
                columns["gpus_per_node"] = per_node
        if columns.get("gpus") and columns.get("tp") and columns.get("pp") and not columns.get("dp"):
            columns["dp"] = columns["gpus"] // (columns["tp"] * columns["pp"] * (columns.get("cp") or 1))
        if self.tflops_seen:
            columns["tflops_formula"] = "log: TFLOPs per GPU as printed"
        elif self.effective_tflops:
            columns["tflops_formula"] = "log: Effective Tera Flops per GPU (BigScience)"
        params = list(self.params)
        for (tp_rank, pp_rank), count in sorted(self.rank_params.items()):
            params.append(
                {"name": f"parameters_on_rank_{tp_rank}_{pp_rank}", "value": str(count), "line_no": None}
            )
        if self.ranks_seen and not columns.get("gpus"):  # where nothing gives the GPU count
            params.append({"name": "ranks_seen", "value": str(self.ranks_seen), "line_no": None})
        return {
            "run_key": self.run_key,
            "line_start": self.line_start,
            "line_end": self.line_end,
            **columns,
            "run_params": params,
        }


_STATE_FIELDS = (
    "run_key",
    "line_start",
    "line_end",
    "args",
    "params",
    "columns",
    "params_printed",
    "tflops_seen",
    "effective_tflops",
    "v1_world",
    "logged_gbs",
    "logged_train_iters",
    "logged_seq_len",
    "ranks_seen",
)
_DEFAULTED = {
    "v1_world",
    "logged_gbs",
    "logged_train_iters",
    "logged_seq_len",
    "ranks_seen",
}  # fields newer than some saved states
