"""The topology planner: every legal DP×TP×PP×MBS layout of a model on a cluster, held against the GPU's
memory and ranked by predicted seconds per iteration.

Pure apart from `mark_measured`, which reads the runs a store already holds: the layout space comes from
`plan_space`, memory from `model.memory_per_gpu`, time from `model.predict_iteration` (compute per
operation, TP and DP collectives, pipeline sends and the bubble).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tracelog.analysis import calibration
from tracelog.analysis.attention_backend import backend_is_flash
from tracelog.analysis.plan_space import Constraint, Layout, layouts
from tracelog.errors import TracelogError
from tracelog.hardware import (
    Gpu,
    Link,
    domain_fabric,
    domain_hosts,
    domain_note,
    link,
    node_fabric,
    normalize_precision,
    peak_tflops,
)
from tracelog.hardware import gpu as catalog_gpu
from tracelog.model import (
    ModelConfig,
    TrainConfig,
    flops_megatron_lm,
    link_for,
    memory_per_gpu,
    predict_iteration,
)
from tracelog.model.memory import MemoryOptions, cuda_context_bytes
from tracelog.store import Store

if TYPE_CHECKING:
    import pandas as pd

USABLE_MEMORY_FRACTION = 1.0
"""Share of device memory a layout may fill. The whole device: the memory model's total already holds
the CUDA context (BigScience tr11 notes: 1271 MiB on a V100 32GB, 1573 MiB on an A100) and the caching
allocator's reserve over what tensors hold (`model.memory`), so a further margin would count them twice.
Lower it (`usable_fraction`) to keep headroom for what the model leaves out (NCCL's buffers)."""

FEASIBLE_COLUMNS = [
    "rank",
    "dp",
    "tp",
    "pp",
    "mbs",
    "microbatches",
    "nodes",
    "pred_sec_per_it",
    "pred_tflops",
    "mfu",
    "mem_gib",
    "mem_share",
    "need_gib",
    "bubble",
    "vp",
    "dp_link",
]
FULL_DEVICE_SHARE = 0.995
"""A share of the usable memory from which the caching allocator's reserve has filled it
(`model.memory.allocator_reserve`)."""
REJECTION_ORDER = ("memory", "constraint", "rule")
"""How `include_rejected` lists the rejected layouts: the nearest to fitting first."""


@dataclass(frozen=True)
class Fabric:
    """The inter-node link the planner uses, and whether the user named it or it was assumed."""

    link: Link
    assumed: bool

    @property
    def label(self) -> str:
        return f"{self.link.id} (assumed)" if self.assumed else self.link.id

    def note(self, g: Gpu) -> str:
        lk = self.link
        source = (
            f"assumed: the catalog's reference fabric for {g.id} nodes "
            f"({g.source_of('network_link').split(':')[0]}); name yours with --fabric (fabric=)"
            if self.assumed
            else "as named"
        )
        return (
            f"inter-node fabric: {lk.id} ({lk.name}, {lk.unidirectional_gbps:g} GB/s each way per {lk.scope}), "
            f"{source}"
        )


def resolve_fabric(
    g: Gpu, fabric: str | Link | None, spans_nodes: bool, nics_per_node: int | None = None
) -> Fabric | None:
    """The named link (a port across `nics_per_node` NICs, `node_fabric`); else the catalog's reference
    fabric for the GPU (`network_link`: the DGX system's compute fabric for A100, H100, H200, B200), marked
    as assumed; else, across nodes, an error: the planner does not guess a network."""
    if fabric is not None:
        named = link(fabric) if isinstance(fabric, str) else fabric
        return Fabric(node_fabric(named, nics_per_node), assumed=False)
    if g.network_link:
        return Fabric(link(g.network_link), assumed=True)
    if spans_nodes:
        raise TracelogError(
            f"the GPUs span nodes and the catalog has no reference fabric for {g.id}: name the inter-node "
            "link with --fabric (fabric=), a catalog link id such as ib-hdr-x8 or ib-ndr-x8"
        )
    return None


def _check_shape(cfg: ModelConfig, gpus: int, gpus_per_node: int, gbs: int) -> None:
    sizes = {
        "gpus": gpus,
        "gpus per node": gpus_per_node,
        "global batch": gbs,
        "layers": cfg.layers,
        "hidden": cfg.hidden,
        "heads": cfg.heads,
        "sequence length": cfg.seq_len,
        "vocab": cfg.vocab,
    }
    for what, value in sizes.items():
        if value < 1:
            raise TracelogError(f"{what} must be at least 1, not {value}")
    if cfg.hidden % cfg.heads:
        raise TracelogError(
            f"hidden {cfg.hidden} is not divisible by heads {cfg.heads} (Megatron asserts it)"
        )


def _failed_constraints(constraints: list[Constraint], names: dict[str, int]) -> list[str]:
    failed = []
    for c in constraints:
        try:
            ok = c(names)
        except (ArithmeticError, TypeError, ValueError) as exc:
            raise TracelogError(f"constraint {c.text!r}: {exc}") from None
        if not ok:
            failed.append(f"constraint {c.text!r} not met")
    return failed


def plan_layouts(
    cfg: ModelConfig,
    gpus: int,
    gpu: Gpu | str,
    gbs: int,
    *,
    gpus_per_node: int = 8,
    zero_stage: int = 0,
    precision: str = "bf16",
    recompute: str = "full",
    sequence_parallel: bool = False,
    fp32_grads: bool = True,
    flash_attention: bool = True,
    distributed_optimizer: bool = False,
    fabric: str | Link | None = None,
    nics_per_node: int | None = None,
    compute_efficiency: float | None = None,
    compute_scale: float = 1.0,
    vp: int | None = None,
    constraints: Iterable[str | Constraint] = (),
    usable_fraction: float = USABLE_MEMORY_FRACTION,
    top: int | None = 20,
    include_rejected: bool = False,
) -> pd.DataFrame:
    """Every layout that uses all `gpus`, the feasible ones ranked by predicted sec/it (the fastest `top`),
    then with `include_rejected` every other one with the reason in `rejected`. Notes on what was assumed
    are in `frame.attrs["notes"]`.

    Columns: pred_sec_per_it (model.predict_iteration), pred_tflops (hardware FLOPs, recomputation
    included, per GPU per second), mfu (model FLOPs in Megatron-LM's form over the dense peak, Korthikanti
    et al. 2022 §6.3), mem_gib and mem_share (the busiest pipeline stage's GPU, model.memory_per_gpu, over
    device memory: what PyTorch's allocator would reserve, as Megatron's `max reserved` reports it; its
    cache fills the room a layout leaves, so a layout that fits can show the whole device), need_gib (of
    that, what must fit: `MemoryBreakdown.needed`, whose distance to the device is the headroom), bubble ((p−1)/m), dp_link (the link bounding the DP collectives; "(assumed)" marks
    the default fabric).
    Gradients are fp32 by default (Megatron's main grads, the BF16 optimizer of Megatron-DeepSpeed).
    Attention is one flash kernel by default (`flash_attention`: Transformer Engine, Megatron-LM's default
    since 2024): no s² scores in memory and no fused-softmax rule; False plans the unfused path.
    `compute_scale` multiplies the efficiency (the constant `tracelog calibrate` fits; 1 is textbook).
    Compute is timed per operation (model.gemm) unless a flat `compute_efficiency` is given. With `vp`,
    every layout that allows it runs the interleaved schedule with `vp` chunks per stage (Megatron-LM:
    more than 2 stages, layers per stage divisible by vp, at least pp micro-batches), which divides
    the bubble by vp at the cost of vp times the pipeline sends; the `vp` column says which did.
    """
    import pandas as pd  # loaded by what returns a frame, not at start-up

    _check_shape(cfg, gpus, gpus_per_node, gbs)
    g = gpu if isinstance(gpu, Gpu) else catalog_gpu(gpu)
    hosts = domain_hosts(g, gpus_per_node) if gpus > gpus_per_node else 1
    host_gpus, gpus_per_node = gpus_per_node, gpus_per_node * hosts  # an NVL72 rack is the model's node
    precision = normalize_precision(precision)
    peak = peak_tflops(g, precision)
    if not 0 < usable_fraction <= 1:
        raise TracelogError(f"usable memory fraction must be in (0, 1], got {usable_fraction}")
    checks = [c if isinstance(c, Constraint) else Constraint(c) for c in constraints]
    spans_nodes = gpus > gpus_per_node
    net = resolve_fabric(g, fabric, spans_nodes, nics_per_node)
    if net is not None and hosts > 1:
        net = Fabric(domain_fabric(net.link, hosts), net.assumed)
    usable_bytes = g.memory_bytes * usable_fraction
    model_flops = flops_megatron_lm(cfg, gbs)

    rows: list[dict[str, Any]] = []
    kinds: Counter[str] = Counter()
    spaces = layouts(
        gpus,
        gpus_per_node,
        cfg.layers,
        cfg.heads,
        gbs,
        cfg.seq_len,
        require_fused_softmax=not flash_attention,
        query_groups=cfg.query_groups,
    )
    for layout, broken in spaces:
        reasons = list(broken)
        failed = _failed_constraints(checks, layout.names(cfg.layers, cfg.heads, cfg.hidden, cfg.seq_len))
        reasons += failed
        row = _row(layout, g, net)
        train = None
        if not gbs % (layout.dp * layout.mbs):
            train = TrainConfig(
                gbs=gbs,
                mbs=layout.mbs,
                tp=layout.tp,
                pp=layout.pp,
                dp=layout.dp,
                sequence_parallel=sequence_parallel,
                recompute=recompute,  # type: ignore[arg-type]
                zero_stage=zero_stage,
                precision=precision,
                fp32_grads=fp32_grads,
                flash_attention=flash_attention,
                distributed_optimizer=distributed_optimizer,
                vp=vp if vp and interleaving_ok(layout, cfg.layers, vp) else None,
            )
            row["vp"] = train.chunks
            options = MemoryOptions(cuda_context_bytes=cuda_context_bytes(g), capacity_bytes=usable_bytes)
            memory = memory_per_gpu(cfg, train, options)
            total = memory.total
            row.update(
                mem_gib=total / 2**30, mem_share=total / g.memory_bytes, need_gib=memory.needed() / 2**30
            )
            if total > usable_bytes:
                reasons.append(f"needs {total / 2**30:.1f} GiB of {usable_bytes / 2**30:.1f} usable")
        if reasons:
            kind = "rule" if broken else "constraint" if failed else "memory"
            kinds[kind] += 1
            rows.append({**row, "rejected": "; ".join(reasons), "order": REJECTION_ORDER.index(kind)})
            continue
        assert train is not None
        fabric_link = net.link if net else None
        it = predict_iteration(
            cfg,
            train,
            g,
            fabric_link,
            compute_efficiency,
            gpus_per_node=gpus_per_node,
            compute_scale=compute_scale,
        )
        rows.append(
            {
                **row,
                "pred_sec_per_it": it.total_s,
                "pred_tflops": it.hardware_flops / (it.total_s * gpus * 1e12),
                "mfu": model_flops / (it.total_s * gpus * 1e12) / peak,
                "bubble": it.bubble_fraction,
                "rejected": "",
            }
        )

    frame = pd.DataFrame(rows, columns=[*FEASIBLE_COLUMNS, "rejected", "order"])
    feasible = frame[frame["rejected"] == ""].sort_values(
        ["pred_sec_per_it", "need_gib", "tp", "pp", "mbs"], kind="stable"
    )
    feasible = feasible.assign(rank=range(1, len(feasible) + 1))
    usable_text = f"{usable_bytes / 2**30:.1f} GiB usable ({usable_fraction:.0%} of {g.memory_gib:.0f} GiB)"
    rejections = (
        f"{kinds['rule']} break a rule, {kinds['constraint']} fail a constraint, "
        f"{kinds['memory']} need more than {usable_text}"
    )
    if feasible.empty and not include_rejected:
        raise TracelogError(
            f"no layout of {gpus} GPUs fits: of {len(frame)}, {rejections}; "
            "--all (include_rejected=True) lists each with its reason"
        )
    counts = f"{len(feasible)} of {len(frame)} layouts of {gpus} GPUs fit; {rejections}"
    shown = feasible if top is None else feasible.head(top)
    notes = [counts + (f"; the fastest {len(shown)} shown" if len(shown) < len(feasible) else "")]
    notes.append(
        f"assumed: ZeRO-{zero_stage}, {precision}, {recompute} recompute, "
        f"{'fp32' if fp32_grads else precision} grads, sequence parallel {'on' if sequence_parallel else 'off'}, "
        f"{'flash' if flash_attention else 'unfused'} attention"
        f"{', distributed optimizer' if distributed_optimizer else ''}, "
        + (
            f"{compute_efficiency * compute_scale:.0%} of the {peak:g} TFLOPS dense {precision} peak of {g.id}"
            if compute_efficiency is not None
            else f"each GEMM at its sustained share of the {peak:g} TFLOPS dense {precision} peak of {g.id}"
        )
        + (f" (x the calibrated compute scale {compute_scale:.3g})" if compute_scale != 1.0 else "")
        + (f", interleaved schedule with {vp} chunks per stage where allowed" if vp and vp > 1 else "")
    )
    # the reserve yields to the memory a layout may fill (`MemoryOptions.capacity_bytes`), the device's
    # usable share, so that is what a capped total reaches
    full = shown[shown["mem_gib"] * 2**30 >= usable_bytes * FULL_DEVICE_SHARE]
    if not full.empty:
        room = "the whole device" if usable_fraction == 1 else f"the {usable_text}"
        notes.append(
            f"{len(full)} shown at {room} in mem_gib: PyTorch's allocator would cache the room "
            "they leave, and yields it before out-of-memory; need_gib is what must fit "
            f"(the smallest headroom shown: {(usable_bytes / 2**30 - full['need_gib']).min():.1f} GiB)"
        )
    if hosts > 1:
        notes.append(domain_note(g, host_gpus))
    if spans_nodes and net is not None:
        notes.append(net.note(g))
    if include_rejected:
        rejected = frame[frame["rejected"] != ""]
        rejected = rejected.sort_values(["order", "mem_gib", "tp", "pp", "mbs"], kind="stable")
        out = pd.concat([shown, rejected], ignore_index=True).drop(columns="order")
    else:
        out = shown.drop(columns=["rejected", "order"]).reset_index(drop=True)
    out["rank"] = out["rank"].astype("Int64")
    out.attrs["notes"] = notes
    return out


def interleaving_ok(layout: Layout, layers: int, vp: int) -> bool:
    """The conditions of Megatron-LM's interleaved 1F1B schedule (`megatron/training/arguments.py`):
    pipeline size above 2, layers per stage divisible by the chunks, and at least as many micro-batches
    as stages (versions before 2024 asked for a multiple of the pipeline size)."""
    return (
        vp > 1
        and layout.pp > 2
        and layers % layout.pp == 0
        and (layers // layout.pp) % vp == 0
        and layout.microbatches >= layout.pp
    )


def _row(layout: Layout, g: Gpu, net: Fabric | None) -> dict[str, Any]:
    """The layout itself and `dp_link`, the link that bounds its data-parallel collectives: the GPU's own
    link while the DP group (ranks TP apart) stays in a node, else the inter-node fabric."""
    dp_link = ""
    if layout.dp > 1:
        bottleneck = link_for(layout.dp, layout.gpus_per_node, g, net.link if net else None, stride=layout.tp)
        dp_link = net.label if net and bottleneck.id.startswith(f"{net.link.id}/") else bottleneck.id
    return {
        "dp": layout.dp,
        "tp": layout.tp,
        "pp": layout.pp,
        "mbs": layout.mbs,
        "microbatches": layout.microbatches,
        "nodes": layout.nodes,
        "dp_link": dp_link,
    }


def mark_measured(
    frame: pd.DataFrame,
    store: Store,
    cfg: ModelConfig,
    gpu_id: str,
    gpus: int,
    gbs: int,
    gpus_per_node: int = 8,
) -> pd.DataFrame:
    """Add the run measured at each layout, if the store holds one: same GPU count (or nodes × GPUs per
    node), DP, TP, PP, MBS and GBS, and the same GPU model, layers, hidden, heads and sequence length where
    the run records them. A run without TP or PP (plain DeepSpeed) counts as 1 when DP alone makes up
    its GPUs. Of several, the fastest by steady-state sec/it (run_summary) is shown, its
    label counting the others; a run with no time shows its status (e.g. OOM)."""
    measured = store.query(
        """
        SELECT s.dp, coalesce(s.tp, 1) AS tp, coalesce(s.pp, 1) AS pp, s.mbs, s.run_id AS measured_run_id,
               coalesce(s.name, 'run ' || s.run_id)
                 || CASE WHEN s.sec_per_it IS NULL AND r.status IS NOT NULL THEN ' (' || r.status || ')'
                         ELSE '' END
                 || CASE WHEN count(*) OVER w > 1 THEN ' +' || (count(*) OVER w - 1) || ' more' ELSE '' END
                 AS measured_run,
               s.sec_per_it AS measured_sec_per_it,
               s.tflops_reported AS measured_tflops
        FROM run_summary s JOIN runs r USING (run_id)
        WHERE coalesce(r.gpus, r.nodes * coalesce(r.gpus_per_node, ?)) = ? AND r.gbs = ? AND s.mbs IS NOT NULL
          AND s.dp * coalesce(s.tp, 1) * coalesce(s.pp, 1) * coalesce(r.cp, 1) = ?
          AND (r.gpu_model IS NULL OR r.gpu_model = ?)
          AND (r.layers IS NULL OR r.layers = ?) AND (r.hidden IS NULL OR r.hidden = ?)
          AND (r.heads IS NULL OR r.heads = ?) AND (r.seq_len IS NULL OR r.seq_len = ?)
        WINDOW w AS (PARTITION BY s.dp, coalesce(s.tp, 1), coalesce(s.pp, 1), s.mbs)
        QUALIFY row_number() OVER (w ORDER BY s.sec_per_it IS NULL, s.sec_per_it, s.run_id) = 1
        """,
        [gpus_per_node, gpus, gbs, gpus, gpu_id, cfg.layers, cfg.hidden, cfg.heads, cfg.seq_len],
    )
    keys = ["dp", "tp", "pp", "mbs"]
    measured = measured.astype({k: "int64" for k in keys})
    marked = frame.merge(measured, on=keys, how="left")
    marked["measured_run_id"] = marked["measured_run_id"].astype("Int64")
    marked["measured_run"] = marked["measured_run"].fillna("")
    order = [c for c in marked.columns if c != "rejected"] + (["rejected"] if "rejected" in marked else [])
    marked = marked[order]
    marked.attrs = dict(frame.attrs)
    return marked


@dataclass(frozen=True)
class PlanRequest:
    """What `tracelog plan` is asked: a GPT (layers, hidden, heads, sequence, vocabulary), a global batch,
    and the cluster (`gpus` GPUs of catalog id `gpu`, `gpus_per_node` to a node, `fabric` between nodes),
    with the training setup the layouts share and how to list them. `efficiency` is the share of the
    dense peak the GEMMs sustain (the model's default when None); `compute_scale` multiplies it: None
    takes the constant `tracelog calibrate` stored for the GPU and precision (1.0 without a store or a
    calibration), 1.0 is the textbook model."""

    gpus: int
    gpu: str
    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int
    gbs: int
    ffn_hidden: int | None = None
    query_groups: int | None = None
    swiglu: bool = False
    dropout: bool = True
    attention_backend: str = "flash"
    distributed_optimizer: bool = False
    gpus_per_node: int = 8
    zero_stage: int = 0
    precision: str = "bf16"
    recompute: str = "full"
    sequence_parallel: bool = False
    fabric: str | None = None
    nics_per_node: int | None = None
    efficiency: float | None = None
    compute_scale: float | None = None
    vp: int | None = None
    constraints: tuple[str, ...] = ()
    top: int | None = 20
    include_rejected: bool = False
    kv_channels: int | None = None
    tied_embeddings: bool = True
    llama_block: bool = False  # RMSNorm, rotary positions, no biases (Llama and its kin), else GPT's


def plan(request: PlanRequest, store: Store | None = None) -> pd.DataFrame:
    """The layouts of `request` ranked (see `plan_layouts`); with a store, those it already measured show
    the run and its sec/it and TFLOPs."""
    cfg = ModelConfig(
        layers=request.layers,
        hidden=request.hidden,
        heads=request.heads,
        seq_len=request.seq_len,
        vocab=request.vocab,
        ffn_hidden=request.ffn_hidden,
        query_groups=request.query_groups,
        swiglu=request.swiglu,
        dropout=request.dropout,
        kv_channels=request.kv_channels,
        tied_embeddings=request.tied_embeddings,
        rms_norm=request.llama_block,
        bias=not request.llama_block,
        learned_positions=not request.llama_block,
    )
    frame = plan_layouts(
        cfg,
        request.gpus,
        request.gpu,
        request.gbs,
        gpus_per_node=request.gpus_per_node,
        zero_stage=request.zero_stage,
        precision=request.precision,
        recompute=request.recompute,
        sequence_parallel=request.sequence_parallel,
        flash_attention=backend_is_flash(request.attention_backend),
        distributed_optimizer=request.distributed_optimizer,
        fabric=request.fabric,
        nics_per_node=request.nics_per_node,
        compute_efficiency=request.efficiency,
        vp=request.vp,
        compute_scale=request.compute_scale
        if request.compute_scale is not None
        else calibration.load(store).compute_scale(catalog_gpu(request.gpu).id, request.precision),
        constraints=list(request.constraints),
        top=request.top,
        include_rejected=request.include_rejected,
    )
    if store is None:
        return frame
    gpu_id = catalog_gpu(request.gpu).id
    return mark_measured(frame, store, cfg, gpu_id, request.gpus, request.gbs, request.gpus_per_node)
