"""The topology planner on BLOOM-176B (BigScience tr11) and small GPTs: legality, memory, ranking,
constraints, the assumed fabric and the runs a store already measured."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from tracelog import api
from tracelog.analysis.plan import USABLE_MEMORY_FRACTION
from tracelog.analysis.plan_space import layouts
from tracelog.cli import cli
from tracelog.errors import TracelogError

# BLOOM-176B as the planner sees it: 70 transformer layers plus the two embeddings, each given a pipeline
# slot of its own (`--pp-partition-method 'type:transformer|embedding'`, tr11 chronicles), i.e. 72 slots.
# BLOOM ran Megatron-DeepSpeed, whose attention materialises the scores (no flash kernel in 2022).
BLOOM = dict(
    gpus=384,
    gpu="a100-sxm4-80gb",
    layers=72,
    hidden=14336,
    heads=64,
    seq_len=2048,
    vocab=250880,
    gbs=2048,
    attention_backend="unfused",
)
BLOOM_ARGS = [
    "plan", "--gpus", "384", "--gpu", "a100-sxm4-80gb", "--layers", "72", "--hidden", "14336", "--heads", "64",
    "--seq", "2048", "--vocab", "250880", "--gbs", "2048", "--zero", "1", "--attention-backend", "unfused",
]  # fmt: skip
GIB_80 = 80 * 2**30

# Real rows of the tr11 chronicles prequel (chronicles-prequel.md lines 944-950: 02-28, NHIDDEN=14336,
# the 176B model), verbatim. The context lines are adapted: the depth is left out on purpose (the notes
# say NLAYERS=70, which the planner counts as 72 pipeline slots, see BLOOM above), and SEQ_LEN and the
# padded vocabulary come from train/tr11-176B-ml/tr11-176B-ml.slurm.
TR11_NOTES = """# tr11-176B: layouts measured on 48 nodes

NHIDDEN=14336;{depth} Model size: 176B
SEQ_LEN=2048; VOCAB_SIZE=250880

| Nodes | Size | DP | TP | PP | MBS | NHEADS |  GBS | Mem  | Sec/it | TFLOPs | Notes |
| ----: | ---: | -: | -: | -: | --: | -----: |  --: | ---: | -----: | -----: | ----: |
|    48 | 176B |  4 |  8 | 12 |   2 |     64 | 2048 | 40GB | 121.63 | 128.92 | 02-28 |
|    48 | 176B |  8 |  4 | 12 |   2 |     64 | 2048 | 59GB | 102.03 | 153.68 | 02-28 |
|    48 | 176B |  8 |  4 | 12 |   2 |    112 | 2048 | 59GB | 104.50 | 150.05 | 02-28 |
|    48 | 176B |  8 |  4 | 12 |   2 |    128 | 2048 | 60GB | 105.89 | 148.08 | 02-28 |
|    48 | 176B |  8 |  4 | 12 |   4 |     64 | 2048 | 73GB | 102.27 | 153.33 | 02-28 |
"""


def run(db: Path, *args: str):
    return CliRunner().invoke(cli, ["--db", str(db), *args], catch_exceptions=False)


def layout(frame: pd.DataFrame, dp: int, tp: int, pp: int, mbs: int) -> pd.Series:
    rows = frame[(frame.dp == dp) & (frame.tp == tp) & (frame.pp == pp) & (frame.mbs == mbs)]
    assert len(rows) == 1, f"dp{dp} tp{tp} pp{pp} mbs{mbs}: {len(rows)} rows"
    return rows.iloc[0]


@pytest.fixture
def tr11_db(tmp_path: Path) -> Path:
    notes = tmp_path / "tr11_topology.md"
    notes.write_text(TR11_NOTES.format(depth=""))
    db = tmp_path / "tr11.duckdb"
    (result,) = api.ingest(str(db), [str(notes)])
    assert result.runs == 5  # type: ignore[union-attr]
    return db


def test_bloom_keeps_the_bigscience_layout_and_rejects_what_cannot_fit() -> None:
    frame = api.plan(None, api.PlanRequest(**BLOOM, zero_stage=1, top=None, include_rejected=True))
    chosen = layout(frame, dp=8, tp=4, pp=12, mbs=2)
    assert chosen.rejected == "" and chosen["rank"] >= 1
    assert 30 < chosen.mem_gib < 60  # 59 GB measured by nvidia-smi, CUDA context and cache included
    assert 95 < chosen.pred_sec_per_it < 125  # measured 102.03 s/it on 02-28
    no_parallelism = frame[(frame.tp == 1) & (frame.pp == 1)]
    assert len(no_parallelism) == 5 and (no_parallelism.rejected != "").all()
    assert no_parallelism["rank"].isna().all()
    too_big = layout(frame, dp=128, tp=1, pp=3, mbs=1)  # legal, but a third of 176B on each GPU
    assert too_big.rejected.startswith("needs ") and "GiB of 80.0 usable" in too_big.rejected
    assert too_big.mem_gib > 300


@pytest.mark.parametrize(
    "case",
    [
        dict(BLOOM, zero_stage=1),
        dict(BLOOM, zero_stage=0, recompute="selective"),
        dict(gpus=16, gpu="a100-sxm4-80gb", layers=24, hidden=2048, heads=16, seq_len=2048, vocab=50257, gbs=512),
        dict(gpus=64, gpu="h100-sxm5-80gb", layers=32, hidden=4096, heads=32, seq_len=8192, vocab=128256, gbs=256,
             sequence_parallel=True, recompute="selective"),
    ],
    ids=["bloom-zero1", "bloom-zero0-selective", "gpt-1b-16gpu", "llama-8b-shape-64gpu"],
)  # fmt: skip
def test_every_listed_layout_obeys_the_rules_and_fits(case: dict) -> None:
    frame = api.plan(None, api.PlanRequest(**case, top=None))
    assert not frame.empty
    assert (frame.dp * frame.tp * frame.pp == case["gpus"]).all()
    assert (case["heads"] % frame.tp == 0).all() and (8 % frame.tp == 0).all()
    assert (case["layers"] % frame.pp == 0).all()
    assert (case["gbs"] % (frame.dp * frame.mbs) == 0).all()
    assert (frame.microbatches == case["gbs"] // (frame.dp * frame.mbs)).all()
    if case.get("attention_backend") == "unfused":  # Megatron's fused softmax kernel
        assert ((frame.mbs * case["heads"] // frame.tp) % 4 == 0).all()
    assert (frame.mem_gib * 2**30 <= USABLE_MEMORY_FRACTION * GIB_80).all()
    assert frame.mem_share.between(0, USABLE_MEMORY_FRACTION).all()
    assert ((frame.bubble - (frame.pp - 1) / frame.microbatches).abs() < 1e-12).all()
    assert frame.mfu.between(0.05, 0.52).all()  # below the assumed 52 % of peak: recompute, bubble, comms


def test_ranked_by_predicted_seconds_per_iteration() -> None:
    frame = api.plan(None, api.PlanRequest(**BLOOM, zero_stage=1, top=None))
    assert list(frame["rank"]) == list(range(1, len(frame) + 1))
    assert frame.pred_sec_per_it.is_monotonic_increasing
    assert frame.pred_sec_per_it.iloc[0] < frame.pred_sec_per_it.iloc[-1]
    top = api.plan(None, api.PlanRequest(**BLOOM, zero_stage=1, top=5))
    assert len(top) == 5 and top.pred_sec_per_it.tolist() == frame.pred_sec_per_it.head(5).tolist()
    assert "the fastest 5 shown" in top.attrs["notes"][0]


def test_zero_1_fits_layouts_that_zero_0_cannot() -> None:
    plain = api.plan(None, api.PlanRequest(**BLOOM, zero_stage=0, top=None, include_rejected=True))
    sharded = api.plan(None, api.PlanRequest(**BLOOM, zero_stage=1, top=None, include_rejected=True))
    assert layout(sharded, 8, 4, 12, 2).rejected == ""
    # 18 B/param unsharded, with the CUDA context and the allocator's reserve: over 80 GiB
    needs = layout(plain, 8, 4, 12, 2).rejected
    assert needs.startswith("needs ") and float(needs.split()[1]) > 80
    assert (sharded.rejected == "").sum() > (plain.rejected == "").sum()


def test_a_constraint_filters_and_says_so() -> None:
    everything = api.plan(None, api.PlanRequest(**BLOOM, zero_stage=1, top=None))
    constrained = api.plan(
        None,
        api.PlanRequest(
            **BLOOM, zero_stage=1, top=None, constraints=["dp % 8 == 0 and pp <= 12", "mbs >= 2"]
        ),
    )
    assert 0 < len(constrained) < len(everything)
    assert ((constrained.dp % 8 == 0) & (constrained.pp <= 12) & (constrained.mbs >= 2)).all()
    assert ((everything.dp % 8 != 0) | (everything.pp > 12) | (everything.mbs < 2)).any()
    with_rejected = api.plan(
        None,
        api.PlanRequest(**BLOOM, zero_stage=1, top=None, constraints=["mbs >= 2"], include_rejected=True),
    )
    assert layout(with_rejected, 8, 4, 12, 1).rejected == "constraint 'mbs >= 2' not met"


def test_all_lists_rejected_layouts_with_their_reasons() -> None:
    frame = api.plan(None, api.PlanRequest(**BLOOM, zero_stage=1, top=3, include_rejected=True))
    assert (frame.rejected.head(3) == "").all() and (frame.rejected.iloc[3:] != "").all()
    assert layout(frame, 384, 1, 1, 1).rejected == "GBS 2048 not divisible by DP·MBS 384"
    assert "layers 72 not divisible by PP 16" in layout(frame, 24, 1, 16, 1).rejected
    first_rejected = frame.rejected.iloc[3]
    assert first_rejected.startswith("needs ")  # the nearest to fitting come first


def test_the_assumed_fabric_is_said() -> None:
    frame = api.plan(None, api.PlanRequest(**BLOOM, zero_stage=1, top=None))
    note = frame.attrs["notes"][-1]
    assert note.startswith("inter-node fabric: ib-hdr-x8 (8 x InfiniBand HDR")
    assert (
        "assumed: the catalog's reference fabric for a100-sxm4-80gb nodes (NVIDIA DGX A100 datasheet)" in note
    )
    assert set(frame.dp_link) == {"ib-hdr-x8 (assumed)"}  # every BLOOM layout's DP group spans nodes
    hopper = api.plan(None, api.PlanRequest(**dict(BLOOM, gpu="h100-sxm5-80gb"), zero_stage=1, top=3))
    assert hopper.attrs["notes"][-1].startswith("inter-node fabric: ib-ndr-x8")


def test_dp_inside_a_node_uses_nvlink_across_nodes_the_named_fabric() -> None:
    gpt = dict(
        gpus=16, gpu="a100-sxm4-80gb", layers=24, hidden=2048, heads=16, seq_len=2048, vocab=50257, gbs=512
    )
    assumed = api.plan(None, api.PlanRequest(**gpt, top=None))
    named = api.plan(None, api.PlanRequest(**gpt, top=None, fabric="ib-ndr-x8"))
    assert "(assumed)" not in " ".join(named.attrs["notes"])
    joined = assumed.merge(named, on=["dp", "tp", "pp", "mbs"], suffixes=("_hdr", "_ndr"))
    across = joined[joined.dp_link_hdr == "ib-hdr-x8 (assumed)"]
    inside = joined[joined.dp_link_hdr == "nvlink3"]
    assert not across.empty and not inside.empty
    assert ((inside.dp - 1) * inside.tp < 8).all() and ((across.dp - 1) * across.tp >= 8).all()
    assert (across.dp_link_ndr == "ib-ndr-x8").all() and (inside.dp_link_ndr == "nvlink3").all()
    assert (across.pred_sec_per_it_ndr < across.pred_sec_per_it_hdr).all()  # twice the bandwidth
    # DP inside a node does not touch the fabric; only the pipeline sends between the two nodes do.
    faster = inside[inside.pred_sec_per_it_ndr != inside.pred_sec_per_it_hdr]
    assert (faster.pred_sec_per_it_ndr < faster.pred_sec_per_it_hdr).all() and (faster.pp > 1).all()


def test_a_gpu_without_a_reference_fabric_needs_one_named_across_nodes() -> None:
    gpt = dict(gpu="mi300x", layers=24, hidden=2048, heads=16, seq_len=2048, vocab=50257, gbs=256)
    with pytest.raises(TracelogError, match="no reference fabric for mi300x: name the inter-node link"):
        api.plan(None, api.PlanRequest(gpus=16, **gpt))
    named = api.plan(None, api.PlanRequest(gpus=16, **gpt, fabric="ib-ndr-x8", top=None))
    assert "ib-ndr-x8" in set(named.dp_link) and "as named" in named.attrs["notes"][-1]
    assert not api.plan(None, api.PlanRequest(gpus=8, **gpt)).empty  # one node: no fabric to name


def test_one_node_needs_no_fabric() -> None:
    frame = api.plan(None, api.PlanRequest(gpus=8, gpu="h100-sxm5-80gb", layers=24, hidden=2048, heads=16, seq_len=2048, vocab=50257, gbs=256))  # fmt: skip
    assert not any("fabric" in note for note in frame.attrs["notes"])
    assert set(frame.dp_link) <= {"nvlink4", ""}


def test_measured_runs_are_marked_with_their_numbers(tr11_db: Path) -> None:
    result = run(tr11_db, *BLOOM_ARGS, "--top", "40", "--format", "json")
    assert result.exit_code == 0, result.output
    frame = pd.DataFrame(json.loads(result.stdout))
    chosen = layout(frame, 8, 4, 12, 2)
    assert chosen.measured_run == "tr11-176B 48n dp8 tp4 pp12 mbs2 nh64"  # not the 112- or 128-head rows
    assert (chosen.measured_sec_per_it, chosen.measured_tflops) == (102.03, 153.68)
    assert abs(chosen.pred_sec_per_it / chosen.measured_sec_per_it - 1) < 0.15
    assert layout(frame, 4, 8, 12, 2).measured_sec_per_it == 121.63
    assert layout(frame, 8, 4, 12, 4).measured_tflops == 153.33
    assert frame.measured_run_id.notna().sum() == 3


def test_runs_of_another_depth_or_width_are_not_matched(tmp_path: Path) -> None:
    notes = tmp_path / "tr11_70_layers.md"
    notes.write_text(TR11_NOTES.format(depth=" NLAYERS=70;"))  # as the chronicles print it
    api.ingest(str(tmp_path / "t.duckdb"), [str(notes)])
    deeper = api.plan(str(tmp_path / "t.duckdb"), api.PlanRequest(**BLOOM, zero_stage=1, top=None))
    assert deeper.measured_run_id.isna().all()
    wider = api.plan(
        str(tmp_path / "t.duckdb"), api.PlanRequest(**dict(BLOOM, hidden=16384), zero_stage=1, top=None)
    )
    assert wider.measured_run_id.isna().all()


def test_cli_prints_the_table_and_the_assumed_fabric(tmp_path: Path) -> None:
    db = tmp_path / "none.duckdb"
    result = run(db, *BLOOM_ARGS, "--top", "5")
    assert result.exit_code == 0, result.output
    assert "ib-hdr-x8 (assumed)" in result.stdout
    assert "inter-node fabric: ib-hdr-x8 (8 x InfiniBand HDR" in result.stderr
    assert "assumed: ZeRO-1, bf16, full recompute" in result.stderr
    counts = re.search(
        r"(\d+) of 260 layouts of 384 GPUs fit; (\d+) break a rule, (\d+) fail a constraint, (\d+) need more",
        result.stderr,
    )
    assert counts is not None, result.stderr
    fit, rule, constraint, memory = map(int, counts.groups())
    assert fit + rule + constraint + memory == 260 and fit >= 5 and memory > 0
    assert result.stdout.count("\n") >= 5  # the five fastest are printed
    assert not db.exists()  # planning opens no database that is not there


@pytest.mark.parametrize(
    "constraint, message",
    [
        ("dpp > 2", "unknown name 'dpp'"),
        ("dp >", "is not an expression"),
        ("__import__('os')", "Call is not allowed"),
        ("dp % (tp - tp) == 0", "modulo by zero"),
    ],
)
def test_a_bad_constraint_exits_1_with_the_reason(tmp_path: Path, constraint: str, message: str) -> None:
    result = run(tmp_path / "t.duckdb", *BLOOM_ARGS, "--constraint", constraint)
    assert result.exit_code == 1
    assert message in result.output and "Traceback" not in result.output


def test_unknown_gpu_and_empty_space_are_errors(tmp_path: Path) -> None:
    unknown = run(tmp_path / "t.duckdb", *[a if a != "a100-sxm4-80gb" else "a100-80gb" for a in BLOOM_ARGS])
    assert unknown.exit_code == 1 and "unknown GPU 'a100-80gb'" in unknown.output
    # BLOOM's 70 transformer layers without the embedding slots: no PP divides 70 and leaves DP a power of 2
    args = [a if a != "72" else "70" for a in BLOOM_ARGS]
    empty = run(tmp_path / "t.duckdb", *args)
    assert empty.exit_code == 1
    assert "no layout of 384 GPUs fits: of 260, 260 break a rule" in empty.output
    listed = run(tmp_path / "t.duckdb", *args, "--all", "--format", "json")
    assert listed.exit_code == 0
    reasons = [row["rejected"] for row in json.loads(listed.stdout)]
    assert len(reasons) == 260 and all(reasons)
    assert any("layers 70 not divisible by PP 12" in r for r in reasons)
    with pytest.raises(TracelogError, match="has no bf16 peak"):
        api.plan(None, api.PlanRequest(**dict(BLOOM, gpu="v100-sxm2-32gb")))


# Llama 3 70B (Grattafiori et al. 2024, Table 3) on 64 H100 at sequence 8192, as the Megatron-Bridge
# DGX-H100 recipe trains it (GBS 128, no recomputation, sequence parallel, distributed optimizer).
LLAMA3_70B = dict(
    gpus=64, gpu="h100-sxm5-80gb", layers=80, hidden=8192, heads=64, seq_len=8192, vocab=128256, gbs=128,
    ffn_hidden=28672, query_groups=8, swiglu=True, recompute="none", sequence_parallel=True,
    distributed_optimizer=True, fabric="ib-ndr-x8",
)  # fmt: skip


def test_llama_plans_with_flash_attention_and_not_without() -> None:
    flash = api.plan(None, api.PlanRequest(**LLAMA3_70B, top=None, include_rejected=True))
    unfused = api.plan(
        None, api.PlanRequest(**LLAMA3_70B, attention_backend="unfused", top=None, include_rejected=True)
    )
    assert (flash.rejected == "").sum() > 0
    assert any("flash attention" in note for note in flash.attrs["notes"])
    # the same layout, with and without the s x s scores: 5·a·s/(h·t) more per token and layer at s 8192
    one, two = layout(flash, dp=1, tp=8, pp=8, mbs=1), layout(unfused, dp=1, tp=8, pp=8, mbs=1)
    assert two.mem_gib > 3 * one.mem_gib
    assert two.rejected.startswith("needs ")


def test_the_fused_softmax_rule_is_the_unfused_kernels_only() -> None:
    # 6 heads: MBS·heads/TP = 3 or 6 for MBS 1 and TP 2 is not a multiple of 4
    unfused = [b for _, b in layouts(8, 8, 4, 6, 64, 2048, require_fused_softmax=True)]
    flash = [b for _, b in layouts(8, 8, 4, 6, 64, 2048, require_fused_softmax=False)]
    assert any("fused softmax" in reason for broken in unfused for reason in broken)
    assert not any("fused softmax" in reason for broken in flash for reason in broken)


def test_tensor_parallelism_divides_the_query_groups() -> None:
    frame = api.plan(
        None, api.PlanRequest(**dict(LLAMA3_70B, query_groups=2), top=None, include_rejected=True)
    )
    assert frame[frame.tp.isin([4, 8])].rejected.str.contains("query groups 2 not divisible by TP").all()
    assert not frame[frame.tp <= 2].rejected.str.contains("query groups").any()


def test_plan_cli_takes_the_llama_shape() -> None:
    args = [
        "plan", "--gpus", "64", "--gpu", "h100-sxm5-80gb", "--layers", "80", "--hidden", "8192", "--heads", "64",
        "--seq", "8192", "--vocab", "128256", "--gbs", "128", "--ffn-hidden", "28672", "--query-groups", "8",
        "--swiglu", "--recompute", "none", "--sequence-parallel", "--distributed-optimizer",
        "--fabric", "ib-ndr-x8", "--format", "csv",
    ]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(io.StringIO(result.stdout))
    expected = api.plan(None, api.PlanRequest(**LLAMA3_70B))
    assert frame["pred_sec_per_it"].round(6).tolist() == expected["pred_sec_per_it"].round(6).tolist()
    assert "flash attention, distributed optimizer" in result.stderr


def test_plan_over_omni_path_ports_counts_the_node_s_nics() -> None:
    # BLOOM's nodes: four Omni-Path 100 Gb/s links each (BLOOM model card, "Hardware").
    def plan(*extra: str) -> pd.DataFrame:
        out = CliRunner().invoke(
            cli, [*BLOOM_ARGS, "--fabric", "opa-100", *extra, "--top", "40", "--format", "json"]
        )
        assert out.exit_code == 0, out.output
        return pd.DataFrame(json.loads(out.stdout)).set_index(["dp", "tp", "pp", "mbs"])

    one, four = plan(), plan("--nics-per-node", "4")
    assert set(four["dp_link"]) == {"opa-100-x4"} and set(one["dp_link"]) == {"opa-100"}
    both = one.index.intersection(four.index)
    assert len(both) > 10
    # the DP gradients and pipeline sends cross the network: four ports make every layout faster
    assert (four.loc[both, "pred_sec_per_it"] < one.loc[both, "pred_sec_per_it"]).all()


def test_a_layout_the_allocator_cache_fills_shows_what_must_fit() -> None:
    """BLOOM's MBS 4 layouts leave room that PyTorch's cache would take: mem_gib is the whole device, and
    need_gib (tensors, context, NCCL, the allocator's floor) shows the headroom left, which a note names."""
    frame = api.plan(None, api.PlanRequest(**BLOOM, zero_stage=1, top=None))
    full = frame[frame.mem_share >= 0.995]
    assert not full.empty  # the model caps the reserve at the device for some of BLOOM's layouts
    assert (full.need_gib < full.mem_gib - 1).all()
    assert (frame.need_gib <= frame.mem_gib + 1e-9).all()
    assert (frame.need_gib * 2**30 <= GIB_80).all()
    roomy = frame[frame.mem_share < 0.9]
    # where the cache does not reach the device, the reserve is 17 % of the tensors, the floor 4.5 %
    assert ((roomy.mem_gib - roomy.need_gib) > 0.05 * roomy.need_gib).all()
    notes = " ".join(frame.attrs["notes"])
    headroom = (80 - full.need_gib).min()
    assert f"{len(full)} shown at the whole device" in notes
    assert f"the smallest headroom shown: {headroom:.1f} GiB" in notes


def test_the_cache_note_holds_layouts_to_the_usable_memory() -> None:
    """With a usable share below the whole device, the reserve fills that share (`capacity_bytes`): the
    layouts it caps are noted and their headroom counted against it, not against the device."""
    from tracelog.analysis.plan import plan_layouts
    from tracelog.model.flops import ModelConfig

    shape = ModelConfig(layers=72, hidden=14336, heads=64, seq_len=2048, vocab=250880)
    frame = plan_layouts(
        shape, 384, "a100-sxm4-80gb", 2048, zero_stage=1, flash_attention=False, usable_fraction=0.9, top=None
    )
    usable = 0.9 * 80
    capped = frame[frame.mem_gib >= usable * 0.995]
    assert not capped.empty and (frame.mem_gib <= usable + 1e-9).all()
    notes = " ".join(frame.attrs["notes"])
    assert f"{len(capped)} shown at the 72.0 GiB usable (90% of 80 GiB)" in notes
    assert f"the smallest headroom shown: {(usable - capped.need_gib).min():.1f} GiB" in notes
