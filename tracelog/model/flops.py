"""FLOPs per training iteration, by each formula a framework prints, and what they mean per GPU.

A TFLOP/s figure is only comparable with the formula that produced it, so each formula is its own
function named after its source; none is "the" FLOP count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tracelog.errors import TracelogError

Recompute = Literal["none", "selective", "full", "op"]
RECOMPUTE_MODES: tuple[str, ...] = ("none", "selective", "full", "op")
"""`selective` is Megatron-LM's (the attention core), `op` torchtitan's per-operation policy
(`model.checkpointing`)."""
CROSS_ENTROPY_IMPLS: tuple[str, ...] = ("unfused", "fused", "te", "compiled")


@dataclass(frozen=True)
class ModelConfig:
    """A GPT-style decoder as Megatron builds it. `ffn_hidden` defaults to 4h, `query_groups` to `heads`
    (plain multi-head attention), `kv_channels` to h/heads; `params`, when given, overrides the count
    from the shapes. MoE: `num_experts` routed experts with `moe_topk` per token on every
    `moe_layer_freq`-th layer, each of width `moe_ffn_hidden` (default `ffn_hidden`), plus an optional
    shared expert of width `moe_shared_ffn_hidden`. `dropout`: hidden and attention dropout above zero
    (Megatron-LM's default 0.1; Llama, Nemotron and most recipes since 2023 train without), whose masks
    are kept for the backward pass. `rms_norm`: the block normalises with RMSNorm (Llama and its kin)
    instead of LayerNorm; the same bytes fused, more kernels run eagerly (`model.eager`)."""

    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int
    ffn_hidden: int | None = None
    query_groups: int | None = None
    kv_channels: int | None = None
    swiglu: bool = False
    params: int | None = None
    tied_embeddings: bool = True
    learned_positions: bool = True
    bias: bool = True
    num_experts: int | None = None
    moe_topk: int = 1
    moe_ffn_hidden: int | None = None
    moe_layer_freq: int = 1
    moe_shared_ffn_hidden: int | None = None
    dropout: bool = True
    rms_norm: bool = False

    @property
    def ffn(self) -> int:
        return self.ffn_hidden if self.ffn_hidden is not None else 4 * self.hidden

    @property
    def token_ffn(self) -> int:
        """The FFN width a token passes through: dense layers' f; for MoE the routed top-k experts plus
        the shared expert (the FLOPs; `model.moe` times them as grouped GEMMs after the dispatch)."""
        if self.num_experts and self.moe_layers == self.layers:
            return (self.moe_ffn_hidden or self.ffn) * self.moe_topk + (self.moe_shared_ffn_hidden or 0)
        return self.ffn

    @property
    def groups(self) -> int:
        return self.query_groups if self.query_groups is not None else self.heads

    @property
    def head_dim(self) -> int:
        return self.kv_channels if self.kv_channels is not None else self.hidden // self.heads

    @property
    def q_width(self) -> int:
        """The queries' width, heads x head dimension (h unless `kv_channels` says otherwise)."""
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """The keys' (and the values') width, query groups x head dimension (grouped-query attention)."""
        return self.groups * self.head_dim

    @property
    def moe_layers(self) -> int:
        if not self.num_experts:
            return 0
        return sum(1 for i in range(self.layers) if i % self.moe_layer_freq == 0)

    @property
    def dense_layers(self) -> int:
        return self.layers - self.moe_layers

    @property
    def all_moe(self) -> bool:
        """Every layer's MLP is a mixture of experts (Mixtral, Qwen3-MoE): what `model.moe` times; a model
        mixing dense and MoE layers (DeepSeek-V3's first three) is timed with `token_ffn` as before."""
        return bool(self.num_experts) and self.moe_layers == self.layers


def expert_params_per_layer(cfg: ModelConfig) -> int:
    """Parameters of one MoE layer's routed experts: `num_experts` MLPs of width `moe_ffn_hidden` (two
    input matrices with SwiGLU, biases when the model has them), what expert parallelism shards
    (Megatron-core `GroupedMLP`/`TEGroupedMLP`, megatron/core/transformer/moe/experts.py). The router and
    the shared expert are dense parameters, split over TP like the attention."""
    if not cfg.num_experts:
        return 0
    width, bias = cfg.moe_ffn_hidden or cfg.ffn, 1 if cfg.bias else 0
    up = 2 * width if cfg.swiglu else width
    return cfg.num_experts * (cfg.hidden * up + bias * up + width * cfg.hidden + bias * cfg.hidden)


def expert_params(cfg: ModelConfig) -> int:
    """Routed-expert parameters of the whole model (`expert_params_per_layer` × MoE layers)."""
    return cfg.moe_layers * expert_params_per_layer(cfg)


EMBEDDING_SLOTS = 2
"""Pipeline items DeepSpeed's `type:transformer|embedding` partition counts besides the transformer layers:
the input embedding on the first stage and its tied copy, the output layer, on the last (Megatron-DeepSpeed
`GPTModelPipe`: `TiedLayerSpec('embed', EmbeddingPipe)` at both ends of `self.specs`)."""


def stage_split(layers: int, pp: int, embedding_slots: bool = False) -> tuple[int, int, int]:
    """Transformer layers on the (first, fullest, last) pipeline stage. DeepSpeed's PipelineModule with
    `partition_method='type:transformer'` (Megatron-DeepSpeed's `GPTModelPipe`) weighs each transformer
    layer 1 and the rest 0 and calls `partition_balanced`: a binary search for the smallest bottleneck
    k = ⌈L/p⌉, then `_lprobe` fills the stages in order up to k, so every stage but the last holds k and
    the last the rest (BigScience tr11 chronicles-prequel line 875: "78/12=6.5 - so the last stage has 1
    block, while the rest have 7"). With `type:transformer|embedding` (line 900, "giving each embedding
    layer its own slot on par with transformer layers") the two embeddings weigh 1 too: k = ⌈(L+2)/p⌉
    and the first and last stages give one slot each to their embedding. Megatron-LM asks that p divide
    L (`--num-layers` checks), where all three are L/p."""
    if pp == 1:
        return layers, layers, layers
    slots = EMBEDDING_SLOTS if embedding_slots else 0
    items = layers + slots
    k = -(-items // pp)
    first = min(layers, k - slots // 2)
    last = max(0, items - (pp - 1) * k - slots // 2)
    return first, k, last


def stage_layers(layers: int, pp: int, embedding_slots: bool = False) -> int:
    """Transformer layers on the fullest pipeline stage (`stage_split`): ⌈L/p⌉, or ⌈(L+2)/p⌉ when the
    embeddings take a slot each. 1F1B runs at the pace of the slowest stage (Narayanan et al. 2021 §2.2)."""
    return stage_split(layers, pp, embedding_slots)[1]


@dataclass(frozen=True)
class TrainConfig:
    """How a run is laid out. `vp` is the number of interleaved model chunks per pipeline stage (None or
    1 = plain 1F1B). `fp32_grads`: gradients kept in fp32 whatever the training precision (Megatron's
    main grads, the BF16 optimizer of Megatron-DeepSpeed); otherwise they take the size of `precision`.
    `fp32_grad_buffer`: with Megatron's distributed optimizer, its data-parallel gradient buffer is fp32
    (Megatron-LM's default with bf16; off with Megatron-core's `grad_reduce_in_fp32` off).
    `fp32_reduce`: the data-parallel reduction moves the gradients in fp32 though they are computed in the
    training precision (Composer's FSDP mixed precision `DEFAULT`, `reduce_dtype` float32).
    `adam_state_bytes`: bytes per parameter of Adam's master weights and two moments, 12 in fp32 (the
    ZeRO paper's K, `model.memory.ADAM_STATE_BYTES`), fewer where the optimizer keeps them narrower
    (Megatron-core's precision-aware optimizer, NeMo 1's distributed Adam: `analysis.optimizer_state`).
    `flash_attention`: attention without the s² score matrix (Dao et al. 2022); `attention_kernel` which
    fused kernel of an earlier generation ran it (`model.attention_kernels`: flash-attn-1, triton), None for
    the framework's own (FlashAttention-2, or cuDNN under Transformer Engine); the `overlap_*` and
    `tp_comm_overlap` switches are Megatron-LM's arguments of the same names (DeepSpeed's `overlap_comm`
    maps to `overlap_grad_reduce`); `framework` is megatron, megatron-deepspeed or deepspeed.
    `embedding_slots`: DeepSpeed's pipeline partition counts each embedding as a layer
    (Megatron-DeepSpeed `--pp-partition-method 'type:transformer|embedding'`, see `stage_split`).
    `async_tp_allreduce`: the backward pass overlaps each column-parallel layer's input-gradient
    all-reduce (reduce-scatter with sequence parallelism) with its weight-gradient GEMM (Megatron-LM's
    `async_tensor_model_parallel_allreduce`, on by default since 2021-09; Transformer Engine's linear
    layers always). `cross_entropy`: how the vocabulary-parallel loss runs (`CROSS_ENTROPY_BYTES` in
    `model.gemm`): `unfused` (Megatron's `vocab_parallel_cross_entropy`), `fused`
    (`--cross-entropy-loss-fusion`), `te` (`--cross-entropy-fusion-impl te`) or `compiled` (PyTorch's
    cross entropy under torch.compile: torchtitan's compiled loss, `model.torch_native`). `compiled`: the
    element-wise work runs in fused kernels (a framework's own, or torch.compile's); False for a PyTorch
    trainer run eagerly (`model.eager`).
    MoE (Megatron-core's names): `ep` experts' parallel size (`--expert-model-parallel-size`), `etp` their
    tensor-parallel size (`--expert-tensor-parallel-size`, None: TP, as `initialize_model_parallel`
    defaults it), `moe_dispatcher` the token dispatcher (`--moe-token-dispatcher-type`: alltoall,
    allgather, flex), `moe_a2a_overlap` the expert-parallel all-to-all overlapped with another
    micro-batch's compute (`--overlap-moe-expert-parallel-comm`)."""

    gbs: int
    mbs: int
    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    vp: int | None = None
    sequence_parallel: bool = False
    recompute: Recompute = "none"
    zero_stage: int = 0
    precision: str = "bf16"
    distributed_optimizer: bool = False
    fp32_grads: bool = False
    fp32_grad_buffer: bool = True
    fp32_reduce: bool = False
    adam_state_bytes: float = 12.0
    flash_attention: bool = False
    attention_kernel: str | None = None
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    tp_comm_overlap: bool = False
    overlap_p2p_comm: bool = True
    framework: str = "megatron"
    embedding_slots: bool = False
    async_tp_allreduce: bool = False
    cross_entropy: str = "unfused"
    compiled: bool = True
    ep: int = 1
    etp: int | None = None
    moe_dispatcher: str = "alltoall"
    moe_a2a_overlap: bool = False

    def __post_init__(self) -> None:
        if self.recompute not in RECOMPUTE_MODES:
            raise TracelogError(
                f"recompute must be one of {', '.join(RECOMPUTE_MODES)}, not {self.recompute!r}"
            )
        if self.cross_entropy not in CROSS_ENTROPY_IMPLS:
            raise TracelogError(
                f"cross entropy must be one of {', '.join(CROSS_ENTROPY_IMPLS)}, not {self.cross_entropy!r}"
            )
        if self.zero_stage not in (0, 1, 2, 3):
            raise TracelogError(f"ZeRO stage must be 0 to 3, not {self.zero_stage}")
        for name in ("gbs", "mbs", "tp", "pp", "dp", "cp", "ep"):
            if getattr(self, name) < 1:
                raise TracelogError(f"{name} must be at least 1, not {getattr(self, name)}")
        if (self.tp * self.dp * self.cp) % (self.expert_tp * self.ep):
            # megatron/core/parallel_state.py: world size divisible by ETP x EP x PP
            raise TracelogError(
                f"EP {self.ep} x expert TP {self.expert_tp} does not divide TP x DP x CP = "
                f"{self.tp * self.dp * self.cp}"
            )

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def expert_tp(self) -> int:
        return self.etp if self.etp is not None else self.tp

    @property
    def expert_dp(self) -> int:
        """Expert-data-parallel size, the ranks an expert's replicas span and its gradients are reduced
        and its optimizer state sharded over: world / (ETP · EP · PP) (megatron/core/parallel_state.py,
        `expert_data_parallel_size`; the expert grid has no CP, which folds into it)."""
        return self.tp * self.dp * self.cp // (self.expert_tp * self.ep)

    @property
    def microbatches(self) -> int:
        """m = gbs / (dp · mbs): microbatches per pipeline per iteration (Narayanan et al. 2021 §2.2)."""
        per_step = self.dp * self.mbs
        if self.gbs % per_step:
            raise TracelogError(f"global batch {self.gbs} is not a multiple of dp·mbs = {self.dp}·{self.mbs}")
        return self.gbs // per_step

    @property
    def chunks(self) -> int:
        return self.vp or 1


def params_from_config(cfg: ModelConfig, *, include_embeddings: bool = True) -> int:
    """Parameter count of a Megatron GPT: per layer QKV, output projection, MLP (SwiGLU has two input
    matrices), biases and two norms; final norm; word embeddings (once if tied), learned positions.
    With the classic shapes this is l·(12h² + 13h) + V·h + s·h + 2h, the BigScience notes' formula."""
    h, q, kv = cfg.hidden, cfg.q_width, cfg.kv_width
    bias = 1 if cfg.bias else 0
    norm = 2 * h if cfg.bias else h  # LayerNorm has weight and bias; RMSNorm-style models only a weight
    attention = h * (q + 2 * kv) + bias * (q + 2 * kv) + q * h + bias * h

    def mlp(width: int) -> int:
        up = 2 * width if cfg.swiglu else width
        return h * up + bias * up + width * h + bias * h

    dense = mlp(cfg.ffn)
    experts = 0
    if cfg.num_experts:
        width = cfg.moe_ffn_hidden or cfg.ffn
        shared = mlp(cfg.moe_shared_ffn_hidden) if cfg.moe_shared_ffn_hidden else 0
        experts = cfg.num_experts * mlp(width) + shared + h * cfg.num_experts  # router: h × experts
    layers = cfg.layers * (attention + 2 * norm) + cfg.dense_layers * dense + cfg.moe_layers * experts
    total = layers + norm
    if include_embeddings:
        total += cfg.vocab * h * (1 if cfg.tied_embeddings else 2)
        if cfg.learned_positions:
            total += cfg.seq_len * h
    return total


def model_params(cfg: ModelConfig) -> int:
    """The configured parameter count if given, else the count from the shapes."""
    return cfg.params if cfg.params is not None else params_from_config(cfg)


def microbatch_tokens(cfg: ModelConfig, train: TrainConfig) -> int:
    """Tokens of one micro-batch on one context-parallel rank: b·s/cp (before any TP or sequence split)."""
    return train.mbs * (cfg.seq_len // train.cp)


def flops_narayanan(cfg: ModelConfig, gbs: int, recompute: Recompute | bool = "full") -> float:
    """Narayanan et al. 2021 (SC21) §5.1 eq. 3: 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) with full
    recomputation, 72 instead of 96 without. This is what Megatron-LM (2021) and Megatron-DeepSpeed print
    as `TFLOPs:` (coefficient 24 × checkpoint factor 4 or 3); selective recomputation counts as none."""
    full = recompute is True or recompute == "full"
    s, layers, h, v = cfg.seq_len, cfg.layers, cfg.hidden, cfg.vocab
    return (96 if full else 72) * gbs * s * layers * h**2 * (1 + s / (6 * h) + v / (16 * layers * h))


def _attention_forward_per_token(cfg: ModelConfig, causal_halved: bool = True) -> tuple[float, float]:
    """(projection, core) forward FLOPs of one attention layer per token, Megatron-LM's form: QKV and
    output projections 2·h·(q + 2kv) + 2·q·h; core QKᵀ and AV 4·q·s, halved for the causal mask."""
    q, kv = cfg.q_width, cfg.kv_width
    projections = 2 * cfg.hidden * (q + 2 * kv) + 2 * q * cfg.hidden
    core = 4 * q * cfg.seq_len  # 2 GEMMs × 2 FLOP/FMA × q·s
    return projections, core / 2 if causal_halved else core


def _mlp_forward_per_token(cfg: ModelConfig) -> float:
    """Forward FLOPs of all MLPs per token, Megatron-LM's form: 2·h·width·(3 with SwiGLU else 2) per
    dense layer; routed experts × top-k and the shared expert on MoE layers."""
    gemms = 3 if cfg.swiglu else 2
    total = cfg.dense_layers * 2 * cfg.hidden * cfg.ffn * gemms
    if cfg.moe_layers:
        width = (cfg.moe_ffn_hidden or cfg.ffn) * cfg.moe_topk + (cfg.moe_shared_ffn_hidden or 0)
        total += cfg.moe_layers * 2 * cfg.hidden * width * gemms
    return total


def forward_flops(cfg: ModelConfig, tokens: int, causal_halved: bool = True) -> float:
    """One forward pass over `tokens` tokens: all layers plus the logit layer 2·h·V per token."""
    projections, core = _attention_forward_per_token(cfg, causal_halved)
    per_token = cfg.layers * (projections + core) + _mlp_forward_per_token(cfg) + 2 * cfg.hidden * cfg.vocab
    return tokens * per_token


def flops_megatron_lm(cfg: ModelConfig, gbs: int, causal_halved: bool = True) -> float:
    """Current Megatron-LM `num_floating_point_operations` (megatron/training/training.py) for dense and
    MoE GPTs: every GEMM ×3 (forward, wgrad, dgrad; recomputation is never counted), GQA through query
    groups, SwiGLU 3 GEMMs instead of 2, causal attention halved (since 2025-03; `causal_halved=False`
    gives the form Megatron-LM printed before). MLA, MTP and hybrid Mamba layers are not modelled."""
    return 3 * forward_flops(cfg, gbs * cfg.seq_len, causal_halved)


def op_recompute_flops_per_token(cfg: ModelConfig) -> float:
    """FLOPs per token and layer torchtitan's per-operation policy recomputes (every second matrix
    product: wk, h × kv; wo, q × h; w3, h × f of a gated MLP; `model.checkpointing`, float8 or not), two
    FLOPs per multiply-add."""
    q, kv = cfg.q_width, cfg.kv_width
    gated = cfg.token_ffn if cfg.swiglu else 0
    return 2.0 * cfg.hidden * (kv + q + gated)


def hardware_flops(cfg: ModelConfig, gbs: int, recompute: Recompute) -> float:
    """FLOPs the GPUs actually execute: model FLOPs (Megatron-LM form) plus the recomputed forward:
    every transformer layer again for `full`, only the attention core (QKᵀ, softmax·V) for `selective`
    (Korthikanti et al. 2022 §5, §6.3: hardware vs model FLOPs), every second matrix product for `op`
    (torchtitan's policy, `model.checkpointing`)."""
    tokens = gbs * cfg.seq_len
    model = flops_megatron_lm(cfg, gbs)
    projections, core = _attention_forward_per_token(cfg)
    if recompute == "full":
        return model + tokens * (cfg.layers * (projections + core) + _mlp_forward_per_token(cfg))
    if recompute == "selective":
        return model + tokens * cfg.layers * core
    if recompute == "op":
        return model + tokens * cfg.layers * op_recompute_flops_per_token(cfg)
    return model


def flops_bloom(params: float, seq_len: int, gbs: int, recompute: bool = True) -> float:
    """BigScience rule of thumb (tr11 chronicles, `math` notes): params · 2 · (4 with recomputation,
    3 without) · seq · gbs."""
    return params * 2 * (4 if recompute else 3) * seq_len * gbs


def flops_6nd(params: float, tokens: float) -> float:
    """6·N·D (Kaplan et al. 2020; EleutherAI "Transformer Math 101"): training FLOPs ≈ 6 × params × tokens."""
    return 6 * params * tokens


def tflops_per_gpu(flops: float, sec_per_iter: float, gpus: int) -> float:
    """Achieved TFLOP/s per GPU: F / (t · gpus · 1e12), as Megatron prints it."""
    if sec_per_iter <= 0 or gpus <= 0:
        raise TracelogError(f"need a positive time and GPU count, got {sec_per_iter} s on {gpus} GPUs")
    return flops / (sec_per_iter * gpus * 1e12)


def mfu(tflops: float, peak: float) -> float:
    """Model FLOPs utilisation: achieved TFLOP/s over the dense peak (Chowdhery et al. 2022, PaLM §B)."""
    if peak <= 0:
        raise TracelogError(f"peak TFLOP/s must be positive, got {peak}")
    return tflops / peak
