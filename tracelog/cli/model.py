"""Commands of the model: predict, the hardware catalog, what a run or bench ran on, plan, calibrate."""

from __future__ import annotations

import sys
from typing import Any

import click

from tracelog import api
from tracelog.analysis.attention_backend import ATTENTION_BACKENDS
from tracelog.cli.base import (
    Context,
    cli,
    format_option,
    parse_tags,
    pass_ctx,
    uncalibrated_option,
    user_errors,
)
from tracelog.errors import TracelogError
from tracelog.render import render
from tracelog.store.benches import is_bench_ref


@cli.command()
@click.argument("run", required=False)
@click.option("--gpu", help="GPU model, a catalog id (see `tracelog hardware`).")
@click.option("--fabric", help="Inter-node link, a catalog id such as ib-hdr-x8.")
@click.option(
    "--efficiency",
    type=click.FloatRange(0, 1, min_open=True),
    help="Flat share of the dense peak for all FLOPs, instead of each operation timed at its own "
    "(its GEMM shape, the GPU and precision, memory-bound parts from HBM bandwidth).",
)
@click.option(
    "--model",
    "checkpoint",
    metavar="CHECKPOINT",
    help="A published checkpoint (meta-llama/Llama-3.1-8B) whose shape stands where the options give none.",
)
@click.option("--layers", type=click.IntRange(min=1))
@click.option("--hidden", type=click.IntRange(min=1))
@click.option("--heads", type=click.IntRange(min=1))
@click.option("--seq", "seq_len", type=click.IntRange(min=1), help="Sequence length.")
@click.option("--vocab", type=click.IntRange(min=1))
@click.option("--ffn-hidden", type=click.IntRange(min=1), help="MLP width.  [default: 4 x hidden]")
@click.option("--query-groups", type=click.IntRange(min=1), help="GQA key/value groups.  [default: heads]")
@click.option("--swiglu", is_flag=True, default=None, help="SwiGLU MLP (three GEMMs).")
@click.option(
    "--dropout/--no-dropout",
    default=None,
    help="Dropout above zero, whose masks stay for the backward pass.  [default: the run's; else on]",
)
@click.option(
    "--params", type=click.IntRange(min=1), help="Parameter count, when known (else from the shapes)."
)
@click.option("--gbs", type=click.IntRange(min=1), help="Global batch size.")
@click.option("--mbs", type=click.IntRange(min=1), help="Micro-batch size.")
@click.option("--tp", type=click.IntRange(min=1))
@click.option("--pp", type=click.IntRange(min=1))
@click.option("--dp", type=click.IntRange(min=1))
@click.option("--cp", type=click.IntRange(min=1))
@click.option("--vp", type=click.IntRange(min=1), help="Interleaved chunks per pipeline stage.")
@click.option("--num-experts", type=click.IntRange(min=1), help="MoE: routed experts per MoE layer.")
@click.option("--moe-topk", type=click.IntRange(min=1), help="MoE: experts each token is routed to.")
@click.option("--moe-ffn-hidden", type=click.IntRange(min=1), help="MoE: one expert's MLP width.")
@click.option(
    "--moe-shared-ffn-hidden", type=click.IntRange(min=1), help="MoE: the shared expert's MLP width."
)
@click.option("--ep", type=click.IntRange(min=1), help="MoE: expert-parallel size.")
@click.option(
    "--etp",
    type=click.IntRange(min=1),
    help="MoE: expert tensor-parallel size.  [default: --tp, as Megatron]",
)
@click.option("--sequence-parallel", is_flag=True, default=None)
@click.option(
    "--recompute",
    type=click.Choice(["none", "selective", "full", "op"]),
    help="selective: Megatron's (the attention core); op: torchtitan's per-operation policy.",
)
@click.option("--zero", "zero_stage", type=click.IntRange(0, 3), help="ZeRO stage.")
@click.option("--distributed-optimizer", is_flag=True, default=None, help="Megatron's distributed optimizer.")
@click.option("--precision", help="bf16, fp16, fp8 or fp32.")
@click.option("--gpus-per-node", type=click.IntRange(min=1))
@click.option(
    "--nics-per-node",
    type=click.IntRange(min=1),
    help="NICs per node, for a --fabric given per port (opa-100, roce-200g).",
)
@click.option(
    "--attention-backend",
    type=click.Choice(ATTENTION_BACKENDS),
    help="How attention ran (Megatron-LM's names).  [default: the run's arguments; without a run, "
    "flash for Megatron-LM and NeMo, unfused for Megatron-DeepSpeed and DeepSpeed]",
)
@click.option(
    "--framework",
    type=click.Choice(["megatron", "megatron-deepspeed", "deepspeed", "torchtitan", "hf-trainer"]),
    help="Sets how gradients are kept (fp32 main grads in Megatron), how attention runs (PyTorch's SDPA "
    "in torchtitan and the Hugging Face Trainer) and what --zero 3 means (FSDP2 in torchtitan).  "
    "[default: megatron]",
)
@click.option(
    "--torch-compile/--no-torch-compile",
    default=None,
    help="torchtitan, hf-trainer: whether the model ran under torch.compile (fused element-wise kernels).  "
    "[default: the run's log; without a run, not compiled, both trainers' default]",
)
@click.option(
    "--compiled-loss/--no-compiled-loss",
    default=None,
    help="torchtitan: whether the loss ran under torch.compile (from 2025-04 whenever the run compiled; "
    "since 2025-08 `--compile.components`).  [default: the run's log; without a run, as --torch-compile]",
)
@click.option(
    "--normalization",
    type=click.Choice(["LayerNorm", "RMSNorm"], case_sensitive=False),
    help="The blocks' norm (Megatron-LM's --normalization): an eager trainer runs RMSNorm as six kernels.  "
    "[default: the run's log; without a run, LayerNorm (RMSNorm for torchtitan)]",
)
@uncalibrated_option
@format_option
@pass_ctx
def predict(
    obj: Context,
    run: str | None,
    gpu: str | None,
    fabric: str | None,
    efficiency: float | None,
    distributed_optimizer: bool | None,
    attention_backend: str | None,
    uncalibrated: bool,
    fmt: str,
    torch_compile: bool | None,
    compiled_loss: bool | None,
    normalization: str | None,
    **config: Any,
) -> None:
    """What the model predicts for RUN, or for the configuration given: sec/it with its parts (compute,
    TP communication, bubble, DP communication), TFLOP/s and MFU, memory per GPU by part, FLOPs by
    formula, and what it had to assume. Options override the run's own values.

    \b
    Example:
        tracelog predict 176b-tp4
        tracelog predict 176b-tp4 --gpu h100-sxm5-80gb
        tracelog predict --gpu a100-sxm4-80gb --layers 70 --hidden 14336 --heads 112 --seq 2048 \\
            --vocab 250880 --gbs 2048 --mbs 2 --tp 4 --pp 12 --dp 8 --recompute full --zero 1 \\
            --framework megatron-deepspeed --format json
        tracelog predict --gpu h100-sxm5-80gb --layers 48 --hidden 2048 --heads 32 --query-groups 4 \\
            --seq 4096 --vocab 151936 --swiglu --num-experts 128 --moe-topk 8 --moe-ffn-hidden 768 \\
            --gbs 512 --mbs 1 --tp 1 --pp 1 --dp 16 --ep 8 --gpus-per-node 8 --precision bf16
        tracelog predict --gpu h100-sxm5-80gb --framework torchtitan --layers 32 --hidden 4096 --heads 32 \\
            --query-groups 8 --ffn-hidden 14336 --swiglu --seq 8192 --vocab 128256 --gbs 16 --mbs 2 \\
            --dp 8 --zero 3 --recompute op --torch-compile
        tracelog predict --gpu h100-sxm5-80gb --model Qwen/Qwen2.5-7B --seq 4096 --gbs 64 --mbs 2 --dp 8 \\
            --zero 3 --framework hf-trainer
    """
    values = {k: v for k, v in config.items() if v is not None}
    run_params = {"torch_compile": str(torch_compile)} if torch_compile is not None else {}
    if compiled_loss is not None:
        run_params["compiled_loss"] = str(compiled_loss)
    if normalization is not None:
        run_params["normalization"] = normalization
    with user_errors():
        if run is not None:
            store = obj.store()
        else:  # a configuration alone: the database only lends its fitted constants, if it exists
            store = obj.store(read_only=True) if obj.exists() and not uncalibrated else None
        frame = api.predict(
            store,
            run,
            gpu=gpu,
            fabric=fabric,
            efficiency=efficiency,
            distributed_optimizer=distributed_optimizer,
            attention_backend=attention_backend,
            calibrated=not uncalibrated,
            run_params=run_params or None,
            **values,
        )
    render(frame, fmt)


@cli.command()
@click.argument("entry", required=False, metavar="[GPU|LINK]")
@click.option("--links", is_flag=True, help="List the links instead of the GPUs.")
@format_option
def hardware(entry: str | None, links: bool, fmt: str) -> None:
    """The hardware catalog: GPUs (dense peaks, memory, SMs, links) or --links (unidirectional and
    bidirectional bandwidth apart); one entry in full with the source of every figure.

    \b
    Example:
        tracelog hardware
        tracelog hardware --links
        tracelog hardware a100-sxm4-80gb
    """
    with user_errors():
        frame = api.hardware(entry, kind="links" if links else "gpus")
    if entry is None and fmt == "table":
        # a terminal's listing: the figures that tell parts apart, the sources (a paragraph each) left to
        # the entry in full and to the machine formats
        shown = [c for c in (LINK_COLUMNS if links else GPU_COLUMNS) if c in frame.columns]
        render(frame[shown], fmt)
        sys.stdout.flush()  # the note goes to stderr, after the table
        click.echo(
            f"{len(frame)} {'links' if links else 'GPUs'}; `tracelog hardware ID` shows one with the source of "
            "every figure, --format csv every column",
            err=True,
        )
        return
    render(frame, fmt)


GPU_COLUMNS = (
    "id",
    "memory_gib",
    "memory_bandwidth_gbps",
    "sm_count",
    "bf16_tflops",
    "fp8_tflops",
    "fp4_tflops",
    "intra_node_link",
    "intra_unidirectional_gbps",
)
"""The catalog's GPU columns `tracelog hardware` lists at a terminal (dense peaks; the link one way)."""
LINK_COLUMNS = ("id", "name", "kind", "scope", "unidirectional_gbps", "bidirectional_gbps", "latency_us")
"""... and its link columns."""


@cli.command(name="set")
@click.argument("run", metavar="RUN|bench:ID")
@click.option("--gpu", help="GPU model, a catalog id such as a100-sxm4-80gb.")
@click.option("--fabric", help="Inter-node link, a catalog id such as ib-hdr-x8.")
@click.option("--nodes", type=click.IntRange(min=1))
@click.option("--gpus-per-node", type=click.IntRange(min=1))
@click.option(
    "--nics-per-node",
    type=click.IntRange(min=1),
    help="NICs per node: a fabric given per port (opa-100, roce-200g) counts this many per node.",
)
@click.option(
    "--model",
    "checkpoint",
    metavar="CHECKPOINT",
    help="The published checkpoint a run trained (meta-llama/Llama-3.1-8B): its shape, for a log that "
    "prints none.",
)
@pass_ctx
def set_(
    obj: Context,
    run: str,
    gpu: str | None,
    fabric: str | None,
    nodes: int | None,
    gpus_per_node: int | None,
    nics_per_node: int | None,
    checkpoint: str | None,
) -> None:
    """Say what a run (or a bench, as bench:ID) ran on, or which checkpoint a run trained, after ingest;
    its predictions and flags are recomputed.

    \b
    Example:
        tracelog set 176b-tp4 --gpu a100-sxm4-80gb --nodes 48 --gpus-per-node 8
        tracelog set bench:3 --fabric ib-hdr-x8 --nodes 2 --gpus-per-node 8
        tracelog set bench:4 --fabric opa-100 --nics-per-node 4
        tracelog set sft-run --model Qwen/Qwen2.5-7B-Instruct --gpu h100-sxm5-80gb
    """
    with user_errors():
        if checkpoint is not None and is_bench_ref(run):
            raise TracelogError("--model names what a run trained; a bench trains nothing")
        if checkpoint is not None:
            subject_id, count = api.set_model(obj.store(), run, checkpoint)
        if checkpoint is None or any(
            v is not None for v in (gpu, fabric, nodes, gpus_per_node, nics_per_node)
        ):
            subject_id, count = api.set_hardware(
                obj.store(),
                run,
                gpu=gpu,
                fabric=fabric,
                nodes=nodes,
                gpus_per_node=gpus_per_node,
                nics_per_node=nics_per_node,
            )
    flags = f"{count} flag{'s' * (count != 1)}"
    if is_bench_ref(run):
        click.echo(f"bench {subject_id}: updated; {flags} (see tracelog show bench:{subject_id})")
    else:
        click.echo(f"run {subject_id}: updated; {flags} (see tracelog flags --run {subject_id})")


@cli.command()
@click.option("--gpus", type=click.IntRange(min=1), required=True, help="GPUs in the job.")
@click.option("--gpu", required=True, help="GPU model, a hardware catalog id such as a100-sxm4-80gb.")
@click.option(
    "--model",
    "checkpoint",
    metavar="CHECKPOINT",
    help="A published checkpoint (meta-llama/Llama-3.1-70B) whose shape to plan, instead of the shape's options.",
)
@click.option("--layers", type=click.IntRange(min=1), help="Transformer layers.")
@click.option("--hidden", type=click.IntRange(min=1), help="Hidden size.")
@click.option("--heads", type=click.IntRange(min=1), help="Attention heads.")
@click.option("--seq", "seq_len", type=click.IntRange(min=1), required=True, help="Sequence length.")
@click.option("--vocab", type=click.IntRange(min=1), help="Vocabulary size (padded).")
@click.option("--gbs", type=click.IntRange(min=1), required=True, help="Global batch size in samples.")
@click.option("--ffn-hidden", type=click.IntRange(min=1), help="MLP width.  [default: 4 x hidden]")
@click.option("--query-groups", type=click.IntRange(min=1), help="GQA key/value groups.  [default: heads]")
@click.option("--swiglu", is_flag=True, help="SwiGLU MLP (three GEMMs).")
@click.option(
    "--dropout/--no-dropout",
    default=None,
    help="Dropout above zero (Megatron-LM's default 0.1), whose masks stay for the backward pass.  "
    "[default: on; off with --model, whose recipes train without]",
)
@click.option(
    "--attention-backend",
    type=click.Choice(ATTENTION_BACKENDS),
    default="flash",
    show_default=True,
    help="How attention runs (Megatron-LM's names): unfused materialises the s x s scores.",
)
@click.option("--distributed-optimizer", is_flag=True, help="Megatron's distributed optimizer.")
@click.option("--gpus-per-node", type=click.IntRange(min=1), default=8, show_default=True)
@click.option(
    "--zero", "zero_stage", type=click.IntRange(0, 3), default=0, show_default=True, help="ZeRO stage."
)
@click.option("--precision", default="bf16", show_default=True, help="Training precision (peak and bytes).")
@click.option(
    "--recompute",
    type=click.Choice(["full", "selective", "none"]),
    default="full",
    show_default=True,
    help="Activation recomputation.",
)
@click.option("--sequence-parallel", is_flag=True, help="Megatron sequence parallelism with TP.")
@click.option("--fabric", help="Inter-node link, a catalog id (default: the GPU generation's DGX fabric).")
@click.option(
    "--nics-per-node",
    type=click.IntRange(min=1),
    help="NICs per node, for a --fabric given per port (opa-100, roce-200g).",
)
@click.option(
    "--efficiency",
    type=click.FloatRange(0, 1, min_open=True),
    help="Flat share of the dense peak for all FLOPs (default: each operation at its own).",
)
@click.option(
    "--vp",
    type=click.IntRange(min=1),
    help="Interleaved chunks per pipeline stage, used by the layouts that allow it.",
)
@click.option(
    "--constraint", "constraints", multiple=True, metavar="EXPR", help="e.g. 'dp % 4 == 0' (repeatable)."
)
@click.option(
    "--top", type=click.IntRange(min=1), default=20, show_default=True, help="Feasible layouts shown."
)
@click.option("--all", "include_rejected", is_flag=True, help="Also list rejected layouts with the reason.")
@uncalibrated_option
@format_option
@pass_ctx
def plan(obj: Context, fmt: str, constraints: tuple[str, ...], uncalibrated: bool, **request: Any) -> None:
    """Rank the DP×TP×PP×MBS layouts of a model by predicted sec/it; mark those measured in the database.

    \b
    Example:
        tracelog plan --gpus 384 --gpu a100-sxm4-80gb --layers 72 --hidden 14336 --heads 64 \\
            --seq 2048 --vocab 250880 --gbs 2048 --zero 1 --attention-backend unfused \\
            --fabric opa-100 --nics-per-node 4 --constraint 'mbs >= 2' --top 10
        tracelog plan --gpus 512 --gpu h100-sxm5-80gb --model meta-llama/Llama-3.1-70B --seq 8192 \\
            --gbs 1024 --distributed-optimizer --recompute selective
    """
    with user_errors():
        checkpoint = request.pop("checkpoint")
        if checkpoint is not None:
            shape = api.checkpoint_shape(checkpoint)
            request.update({k: v for k, v in shape.items() if request.get(k) in (None, False)})
        elif not all(request.get(k) for k in ("layers", "hidden", "heads", "vocab")):
            raise TracelogError(
                "give the model: --model CHECKPOINT, or --layers, --hidden, --heads and --vocab"
            )
        if request["dropout"] is None:
            request["dropout"] = checkpoint is None
        db = obj.store(read_only=True) if obj.exists() else None
        if uncalibrated:
            request["compute_scale"] = 1.0
        frame = api.plan(db, api.PlanRequest(constraints=constraints, **request))
    render(frame, fmt)
    sys.stdout.flush()  # the notes go to stderr: after the table, also when both go to one pipe
    for note in frame.attrs.get("notes", []):
        click.echo(note, err=True)


@cli.command()
@click.option("--run", "runs", multiple=True, help="Fit on this run only (repeatable).  [default: all]")
@click.option("--tag", "tags", multiple=True, metavar="KEY=VALUE", help="Fit on runs with this tag only.")
@click.option("--bench", "benches", multiple=True, metavar="ID", help="Fit on this bench only (repeatable).")
@click.option("--show", is_flag=True, help="Print the stored constants instead of fitting again.")
@format_option
@pass_ctx
def calibrate(
    obj: Context, runs: tuple[str, ...], tags: tuple[str, ...], benches: tuple[str, ...], show: bool, fmt: str
) -> None:
    """Fit the model's free constants to the runs and benches in the database and keep them.

    A compute scale per GPU model and precision (a multiplier on the GEMMs' sustained efficiency) from runs with a
    measured sec/it; α and the bandwidth efficiency per intra-node link from single-node nccl-tests
    benches, and per fabric (the network between nodes) from multi-node ones. Each constant is
    printed with its error on the runs or benches it was fitted on, on those left out of the fit
    (leave-one-out), and uncalibrated: the median |ln(predicted/measured)|. Predictions, comparisons and
    flags are recomputed with them; `predict --uncalibrated` and `plan --uncalibrated` show the
    textbook model.

    \b
    Example:
        tracelog ingest lab_notes.md --gpu a100-sxm4-80gb
        tracelog ingest nccl_all_reduce.txt
        tracelog calibrate
        tracelog calibrate --tag exp=topology       # fit on some runs only
        tracelog calibrate --show                   # the stored constants
    """
    with user_errors():
        store = obj.store()
        if show:
            frame = api.calibrations(store)
        else:
            frame = api.calibrate(
                store, runs=list(runs) or None, tags=parse_tags(tags) or None, benches=list(benches) or None
            )
    render(frame, fmt)
    sys.stdout.flush()  # the notes go to stderr: after the table, also when both go to one pipe
    for note in frame.attrs.get("notes", []):
        click.echo(note, err=True)
