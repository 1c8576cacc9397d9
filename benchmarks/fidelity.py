"""How close the analytic model comes to published training runs.

    python benchmarks/fidelity.py                  # the scorecard against the issue's targets
    python benchmarks/fidelity.py --json           # the same, machine-readable
    python benchmarks/fidelity.py --corpus DIR     # where the BigScience chronicles live
    python benchmarks/fidelity.py --calibrated     # also: calibrate on half the chronicles, score the rest

Rows come from two places. The BigScience tr11 (BLOOM-176B) prequel lab notes are read by tracelog's
own table parser (ingested into a scratch DuckDB, then `runs` ⋈ `run_summary`), with what the parser
does not carry (GPU, sequence, vocabulary, ZeRO stage, context lines it ties to one table only) filled
from `published_runs.toml`, line by line of the notes, and the nodes' network, which the notes never
state, from the BLOOM model card and paper (four Omni-Path 100 links per node). Papers' rows are in `published_runs.toml`, each
with its source; where a paper prints TFLOP/s and not seconds (Narayanan et al. 2021, Table 1), the
sec/it is derived with the paper's own FLOPs count, eq. 3, and the derivation is kept with the row.

Each row is predicted by the model (`tracelog.analysis.what_if.what_if`, nothing written) and scored:
- time error = predicted / measured − 1; the median |error| of the chronicles rows and of the others,
  the rows worse than 25 %, the worst ten;
- Spearman ρ of predicted against measured sec/it within each group of one model measured the same
  way (the ranking `tracelog plan` relies on), from pandas ranks (average ranks for ties);
- memory: measured peak / predicted per GPU, and whether every row recorded as OOM is predicted over
  the GPU's capacity.

`load_rows()` and `score(rows, predict=...)` are the library surface: a calibration can score a
candidate model by passing its own `predict(row) -> {"sec_per_it", "gpu_memory_mib", "capacity_mib"}`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from tracelog import api
from tracelog.analysis import calibration
from tracelog.analysis import inputs as run_inputs
from tracelog.analysis.attention_backend import default_attention_backend
from tracelog.analysis.predictions import infer
from tracelog.analysis.what_if import configuration_defaults, what_if
from tracelog.model.flops import ModelConfig, flops_narayanan

HERE = Path(__file__).resolve().parent
DATA = HERE / "published_runs.toml"
HELDOUT = HERE / "heldout_runs.toml"
"""Published runs gathered after the model was built and never used to set its constants: scored apart
(kind `held-out`), the test of how the model does on runs it never saw."""
MOE = HERE / "moe_runs.toml"
"""Published mixture-of-experts runs (expert parallelism): scored apart (kind `moe`), on their own line, out
of the other medians, the worst rows and the ranking count."""
TORCHTITAN = HERE / "torchtitan_runs.toml"
"""Published runs of a second framework, torchtitan (FSDP2, per-operation activation checkpointing,
torch.compile): scored apart (kind `torchtitan`) like the MoE rows, memory included."""
HELDOUT2 = HERE / "heldout2_runs.toml"
"""A second held-out set, from sources and eras no other file covers (llm-foundry's MPT tables on PyTorch FSDP, the
FlashAttention repository's GPT-3 table on DDP), mapped onto the model's semantics for an eager PyTorch trainer
(the file's header): scored apart (kind `held-out-2`) like the torchtitan rows."""
APART = ("moe", "torchtitan", "held-out-2")
"""Kinds scored on lines of their own, out of the other medians, the worst rows, the ranking and memory."""
DEFAULT_CORPUS = HERE.parents[1] / "shared" / "corpus" / "table"
DEFAULT_MEGATRON = DEFAULT_CORPUS.parent / "megatron"
MEGATRON_GPU = "v100-sxm2-32gb"
"""The corpus's Megatron logs never name their GPU; their SOURCES.md does: "BigScience GPT-2 scaling
experiments on Jean Zay, V100 32GB nodes"."""

# The targets of the fidelity issue (issue 11, item 8).
TARGETS = {
    "time_median_chronicles": 0.07,
    "time_median_published": 0.10,
    "time_worst": 0.25,
    "spearman_min": 0.6,
    "memory_within": 0.15,
}

# What a row may carry into the model: `what_if`'s configuration keys.
MODEL_KEYS = (
    "layers", "hidden", "heads", "seq_len", "vocab", "gbs", "mbs", "tp", "pp", "dp", "vp",
    "sequence_parallel", "recompute", "zero_stage", "precision", "gpus", "nodes", "gpus_per_node",
    "framework", "gpu_model", "fabric", "pp_partition_method", "ffn_hidden", "query_groups", "swiglu", "cp",
    "dropout", "nics_per_node", "kv_channels", "num_experts", "moe_topk", "moe_ffn_hidden", "moe_shared_ffn_hidden",
    "ep", "etp",
)  # fmt: skip
# What a row may say of the framework's overlaps and fusions, as the run's own arguments would
# (Megatron-LM's names): switches, and settings passed as written.
RUN_FLAGS = (
    "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap", "grad_reduce_in_fp32",
    "async_tensor_model_parallel_allreduce", "cross_entropy_loss_fusion", "use_precision_aware_optimizer",
    "model.megatron_amp_O2", "model.fp8_params", "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split", "overlap_moe_expert_parallel_comm", "torch_compile", "compiled_loss",
)  # fmt: skip
# (NeMo 1's configuration keys as its experiment configuration prints them: `model.optim.name`, ...)
RUN_SETTINGS = (
    "cross_entropy_fusion_impl", "nccl_version", "exp_avg_dtype", "exp_avg_sq_dtype", "main_params_dtype",
    "model.optim.name", "model.optim.dtype", "moe_token_dispatcher_type", "attention_kernel",
    "model.attn_config.attn_impl", "fsdp_config.mixed_precision",
)  # fmt: skip
SHAPE_KEYS = ("layers", "hidden", "heads", "seq_len", "vocab")

Predictor = Callable[[Mapping[str, Any]], Mapping[str, float | None]]


# ---------------------------------------------------------------------------------------------- rows
def load_data(path: Path = DATA) -> dict[str, Any]:
    with path.open("rb") as f:
        return tomllib.load(f)


def eq3_flops(row: Mapping[str, Any]) -> float:
    """Narayanan et al. 2021 §5.1 eq. 3 for the row's shape and batch (96 with full recomputation)."""
    cfg = ModelConfig(
        layers=int(row["layers"]),
        hidden=int(row["hidden"]),
        heads=int(row["heads"]),
        seq_len=int(row["seq_len"]),
        vocab=int(row["vocab"]),
    )
    return flops_narayanan(cfg, int(row["gbs"]), row.get("recompute") or "none")


def load_published(data: Mapping[str, Any], kind: str = "published") -> pd.DataFrame:
    """The papers' rows; a row with TFLOP/s and no sec/it gets sec/it = eq. 3 FLOPs / (TFLOP/s · GPUs)."""
    rows = []
    for run in data.get("run", []):
        row = {"kind": kind, **run}
        if row.get("sec_per_it") is None and row.get("tokens_per_sec_per_gpu"):
            tokens = row["gbs"] * row["seq_len"]
            row["sec_per_it"] = tokens / (row["tokens_per_sec_per_gpu"] * row["gpus"])
            row["derived"] = (
                f"sec/it = GBS x seq ({tokens} tokens) / ({row['tokens_per_sec_per_gpu']} tokens/s/GPU x "
                f"{row['gpus']} GPUs)"
            )
        elif row.get("sec_per_it") is None and row.get("tflops_per_gpu"):
            flops = eq3_flops(row)
            row["sec_per_it"] = flops / (row["tflops_per_gpu"] * 1e12 * row["gpus"])
            row["derived"] = (
                f"sec/it = eq. 3 ({flops / 1e18:.2f} EFLOP per iteration) / "
                f"({row['tflops_per_gpu']} TFLOP/s x {row['gpus']} GPUs)"
            )
        rows.append(row)
    return pd.DataFrame(rows)


CHRONICLES_SQL = """
SELECT r.run_id, r.name, r.status, r.nodes, r.gpus, r.tp, r.pp, r.dp, r.mbs, r.gbs, r.layers, r.hidden,
       r.heads, r.seq_len, r.vocab, r.zero_stage, r.precision, r.gpu_model, r.line_start AS line,
       s.sec_per_it, s.tflops_reported AS tflops_per_gpu, s.peak_reserved_mib AS memory_mib,
       try_cast(t.value AS INTEGER) AS table_line, d.value AS notes_date
FROM runs r
JOIN run_summary s USING (run_id)
LEFT JOIN run_params t ON t.run_id = r.run_id AND t.name = 'table_line'
LEFT JOIN run_params d ON d.run_id = r.run_id AND d.name = 'Notes'
WHERE s.sec_per_it IS NOT NULL OR upper(r.status) = 'OOM'
ORDER BY r.line_start
"""


def load_chronicles(corpus: Path, data: Mapping[str, Any]) -> tuple[pd.DataFrame, list[str]]:
    """The prequel's rows with a measured Sec/it or an OOM, as the table parser reads them, with the
    notes' context from `data["chronicles"]` applied. Returns the rows and what was left out and why."""
    ctx = data["chronicles"]
    path = corpus / ctx["file"]
    if not path.is_file():
        return pd.DataFrame(), [f"{path} not found: the chronicles rows are skipped (--corpus DIR)"]
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "chronicles.duckdb"
        api.ingest(db, [str(path)])
        con = duckdb.connect(str(db), read_only=True)
        try:
            df = con.sql(CHRONICLES_SQL).df()
        finally:
            con.close()
    by_table = {line: entry for entry in ctx.get("table", []) for line in entry["lines"]}
    rows, notes = [], []
    for rec in df.to_dict("records"):
        rec = {k: (None if _missing(v) else v) for k, v in rec.items()}
        entry = by_table.get(rec["table_line"], {})
        if "skip" in entry:
            continue
        for key, value in entry.get("fill", {}).items():
            if rec.get(key) is None:
                rec[key] = value
        rec.update(entry.get("override", {}))
        for key in (
            "gpu_model", "gpus_per_node", "fabric", "nics_per_node", "seq_len", "vocab", "framework",
            "zero_stage", "recompute", "nccl_version",
        ):  # fmt: skip
            if rec.get(key) is None:
                rec[key] = ctx[key]
        if rec.get("precision") is None:
            rec["precision"] = (
                ctx["precision_before_line_895"] if rec["line"] < 895 else ctx["precision_from_line_895"]
            )
        missing = [k for k in SHAPE_KEYS + ("tp", "pp", "dp", "mbs", "gbs") if rec.get(k) is None]
        if missing:
            notes.append(f"line {rec['line']}: left out, {', '.join(missing)} unknown")
            continue
        rec["kind"] = "chronicles"
        rec["id"] = f"tr11-line{rec['line']}"
        rec["group"] = f"tr11 {rec['layers']}x{rec['hidden']} {rec['notes_date'] or ''}".strip()
        rec["source"] = f"{ctx['file']} line {rec['line']}" + (
            f" ({entry['source']})" if "source" in entry else ""
        )
        rec["oom"] = (rec.get("status") or "").upper() == "OOM"
        if rec["sec_per_it"] and rec["tflops_per_gpu"]:
            # eq. 3 at the recorded sec/it against the printed TFLOPs: ~1 when the shape is right
            implied = eq3_flops(rec) / (rec["sec_per_it"] * rec["gpus"] * 1e12)
            rec["tflops_check"] = implied / rec["tflops_per_gpu"]
        rows.append(rec)
    skipped = sorted({e["skip"] for e in ctx.get("table", []) if "skip" in e})
    left_out = int(
        df["table_line"].isin([ln for e in ctx.get("table", []) if "skip" in e for ln in e["lines"]]).sum()
    )
    if left_out:
        notes.insert(0, f"{left_out} rows left out: " + "; ".join(skipped))
    return pd.DataFrame(rows), notes


def load_rows(
    corpus: Path | None = DEFAULT_CORPUS,
    data_path: Path = DATA,
    heldout_path: Path | None = HELDOUT,
    moe_path: Path | None = MOE,
    torchtitan_path: Path | None = TORCHTITAN,
    heldout2_path: Path | None = HELDOUT2,
) -> tuple[pd.DataFrame, list[str]]:
    """Every scored row (chronicles first, then the papers', the held-out runs, the MoE and torchtitan
    runs, the second held-out set), and notes on what was left out."""
    data = load_data(data_path)
    published = load_published(data)
    for path, kind in (
        (heldout_path, "held-out"),
        (moe_path, "moe"),
        (torchtitan_path, "torchtitan"),
        (heldout2_path, "held-out-2"),
    ):
        if path is not None and path.exists():
            published = pd.concat([published, load_published(load_data(path), kind)], ignore_index=True)
    if corpus is None:
        return published, ["chronicles not read (no corpus given)"]
    chronicles, notes = load_chronicles(Path(corpus), data)
    return pd.concat([chronicles, published], ignore_index=True), notes


def _missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


# ----------------------------------------------------------------------------------------- predict
def _metric(table: pd.DataFrame, metric: str) -> float | None:
    """One metric of a `what_if` table in seconds or MiB (memory is shown in GiB or MiB)."""
    hit = table[table["metric"] == metric]
    if hit.empty or _missing(hit["value"].iloc[0]):
        return None
    value, unit = float(hit["value"].iloc[0]), str(hit["unit"].iloc[0])
    return value * {"GiB": 1024.0, "MiB": 1.0, "GB": 1e9 / 2**20}.get(unit, 1.0)


def model_predict(row: Mapping[str, Any]) -> dict[str, float | None]:
    """The model's sec/it, memory per GPU and the GPU's capacity for one row (`what_if`, no store)."""
    config = {k: row[k] for k in MODEL_KEYS if k in row and not _missing(row[k])}
    for key in ("sequence_parallel", "swiglu", "dropout"):
        if key in config:
            config[key] = bool(config[key])
    flash = row.get("flash_attention")
    optimizer = row.get("distributed_optimizer")
    table = what_if(
        None,
        None,
        config,
        attention_backend=None if _missing(flash) else ("flash" if flash else "unfused"),
        distributed_optimizer=None if _missing(optimizer) else bool(optimizer),
        run_params={k: str(bool(row[k])) for k in RUN_FLAGS if k in row and not _missing(row[k])}
        | {k: str(row[k]) for k in RUN_SETTINGS if k in row and not _missing(row[k])}
        # a GPU that is not the catalog's part: its own memory, as a log's `device_memory_mib` gives it
        | ({} if _missing(row.get("capacity_mib")) else {"device_memory_mib": str(int(row["capacity_mib"]))}),
    )
    return {
        "sec_per_it": _metric(table, "sec_per_it"),
        "gpu_memory_mib": _metric(table, "gpu_memory_mib"),
        "capacity_mib": _metric(table, "gpu_capacity_mib"),
    }


# ------------------------------------------------------------------------------------------- score
def spearman(a: pd.Series, b: pd.Series) -> float:
    """Spearman's ρ: Pearson's correlation of the average ranks (ties share their mean rank)."""
    ra, rb = a.rank(method="average"), b.rank(method="average")
    if ra.std() == 0 or rb.std() == 0:
        return math.nan
    return float(ra.corr(rb))


def score(rows: pd.DataFrame, predict: Predictor = model_predict) -> dict[str, Any]:
    """Predict every row and score the time, ranking and memory against the targets (`TARGETS`)."""
    preds = [predict(r) for r in rows.to_dict("records")]
    df = rows.copy()
    for column in ("memory_mib", "oom", "kind", "group", "capacity_mib"):
        if column not in df:
            df[column] = None
    df["predicted_s"] = [p.get("sec_per_it") for p in preds]
    df["predicted_mib"] = [p.get("gpu_memory_mib") for p in preds]
    # a row's own capacity (its GPU is not the catalog's part) wins over the catalog's
    df["capacity_mib"] = [
        p.get("capacity_mib") if _missing(own) else own
        for own, p in zip(df["capacity_mib"], preds, strict=True)
    ]
    df["error"] = df["predicted_s"].astype(float) / df["sec_per_it"].astype(float) - 1
    timed = df[df["error"].notna()].copy()
    timed["abs_error"] = timed["error"].abs()

    def time_part(kind: str, target: float) -> dict[str, Any]:
        part = timed[timed["kind"] == kind]
        median = float(part["abs_error"].median()) if len(part) else math.nan
        return {"n": len(part), "median_abs_error": median, "target": target, "met": bool(median <= target)}

    dense = timed[~timed["kind"].isin(APART)]  # the MoE and torchtitan rows have lines of their own
    worst = dense.sort_values("abs_error", ascending=False).head(10)
    over = dense[dense["abs_error"] > TARGETS["time_worst"]]

    def rank_groups(part_rows: pd.DataFrame) -> list[dict[str, Any]]:
        groups = []
        for name, part in part_rows.groupby("group", sort=True):
            if len(part) < 3:
                continue
            rho = spearman(part["predicted_s"].astype(float), part["sec_per_it"].astype(float))
            groups.append(
                {"group": name, "n": len(part), "rho": rho, "met": bool(rho >= TARGETS["spearman_min"])}
            )
        return groups

    groups = rank_groups(dense)

    def apart(kind: str) -> dict[str, Any]:
        part = timed[timed["kind"] == kind]
        out: dict[str, Any] = {
            "rows": [_row_out(r) for r in part.sort_values("id").to_dict("records")],
            "groups": rank_groups(part),
        }
        mem = part[part["memory_mib"].notna() & part["predicted_mib"].notna()]
        if len(mem):
            ratio = mem["memory_mib"].astype(float) / mem["predicted_mib"].astype(float)
            out["memory"] = {"n": len(mem), "median_measured_over_predicted": float(ratio.median())}
        return out

    own = df[~df["kind"].isin(APART)]
    mem = own[own["memory_mib"].notna() & own["predicted_mib"].notna()]
    ratio = mem["memory_mib"].astype(float) / mem["predicted_mib"].astype(float)
    median_ratio = float(ratio.median()) if len(ratio) else math.nan
    within = int(((ratio - 1).abs() <= TARGETS["memory_within"]).sum())
    oom = df[df["oom"].astype("boolean").fillna(False).astype(bool)]
    oom_over = int((oom["predicted_mib"].astype(float) > oom["capacity_mib"].astype(float)).sum())
    # every timed row ran on its GPUs, so it fit: the model should not put it over capacity
    ran = df[df["sec_per_it"].notna() & df["predicted_mib"].notna()]
    ran_over = ran["predicted_mib"].astype(float) > ran["capacity_mib"].astype(float)
    return {
        "rows": len(df),
        "timed": len(timed),
        "time": {
            "chronicles": time_part("chronicles", TARGETS["time_median_chronicles"]),
            "published": time_part("published", TARGETS["time_median_published"]),
            "held-out": time_part("held-out", TARGETS["time_median_published"]),
            "moe": time_part("moe", TARGETS["time_median_published"]),
            "torchtitan": time_part("torchtitan", TARGETS["time_median_published"]),
            "held-out-2": time_part("held-out-2", TARGETS["time_median_published"]),
            "worse_than_target": {
                "n": len(over),
                "target": TARGETS["time_worst"],
                "met": len(over) == 0,
                "max_abs_error": float(dense["abs_error"].max()) if len(dense) else math.nan,
            },
        },
        "worst": [_row_out(r) for r in worst.to_dict("records")],
        "moe": apart("moe"),
        "torchtitan": apart("torchtitan"),
        "held-out-2": apart("held-out-2"),
        "rank": {
            "groups": groups,
            "met": sum(g["met"] for g in groups),
            "of": len(groups),
            "target": TARGETS["spearman_min"],
        },
        "memory": {
            "n": len(mem),
            "median_measured_over_predicted": median_ratio,
            "within_target": within,
            "target": TARGETS["memory_within"],
            # the "within 15 % of the Mem column": every row, not the median alone
            "median_met": bool(abs(median_ratio - 1) <= TARGETS["memory_within"]),
            "met": within == len(mem),
        },
        "oom": {"n": len(oom), "predicted_over_capacity": oom_over, "met": oom_over == len(oom)},
        "ran": {
            "n": len(ran),
            "predicted_over_capacity": [str(i) for i in ran.loc[ran_over, "id"]],
            "met": not ran_over.any(),
        },
        "table": [_row_out(r) for r in timed.to_dict("records")],
    }


def _row_out(rec: Mapping[str, Any]) -> dict[str, Any]:
    keys = (
        "id",
        "kind",
        "group",
        "gpus",
        "tp",
        "pp",
        "dp",
        "ep",
        "cp",
        "mbs",
        "gbs",
        "sec_per_it",
        "predicted_s",
        "error",
        "memory_mib",
        "predicted_mib",
    )
    out = {k: (None if _missing(rec.get(k)) else rec.get(k)) for k in keys}
    out["source"] = rec.get("source")
    return out


LAYOUT_KEYS = (
    "layers", "hidden", "heads", "seq_len", "tp", "pp", "dp", "mbs", "gbs", "zero_stage", "precision"
)  # fmt: skip


def repeats(rows: pd.DataFrame) -> dict[str, Any]:
    """The chronicles' noise floor: layouts recorded more than once with the same model, batch, ZeRO stage
    and precision (a row quoted twice with the same figures counts once). What separates their sec/it
    (max/min − 1) and Mem is what no model of the layout can explain."""
    part = rows[(rows["kind"] == "chronicles") & rows["sec_per_it"].notna()]
    out = []
    for _, g in part.groupby(list(LAYOUT_KEYS), dropna=False):
        distinct = g.drop_duplicates(subset=["sec_per_it", "memory_mib"])
        if len(distinct) < 2:
            continue
        secs = distinct["sec_per_it"].astype(float)
        mem = distinct["memory_mib"].dropna().astype(float)
        out.append(
            {
                "lines": [int(x) for x in distinct["line"]],
                "time_spread": float(secs.max() / secs.min() - 1),
                "memory_spread": float(mem.max() / mem.min() - 1) if len(mem) > 1 else None,
            }
        )
    spreads = pd.Series([r["time_spread"] for r in out], dtype=float)
    mem_spreads = [r for r in out if r["memory_spread"] is not None]
    return {
        "layouts": out,
        "median_time_spread": float(spreads.median()) if len(spreads) else math.nan,
        "max_time": max(out, key=lambda r: r["time_spread"], default=None),
        "max_memory": max(mem_spreads, key=lambda r: r["memory_spread"], default=None),
    }


# ------------------------------------------------------------------------------------------ render
def _pct(x: float) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{100 * x:.1f}%"


def _ok(met: bool) -> str:
    return "met" if met else "NOT met"


def _render_apart(kind: str, column: str, part: Mapping[str, Any]) -> list[str]:
    """The rows of a kind scored apart, with the parallel degree that sets them apart, and their ranking."""
    if not part["rows"]:
        return []
    lines = ["", f"{kind} rows:"]
    for w in part["rows"]:
        mem = ""
        if w.get("memory_mib") and w.get("predicted_mib"):
            mem = f"  memory {w['memory_mib'] / 1024:5.1f} / {w['predicted_mib'] / 1024:5.1f} GiB"
        lines.append(
            f"  {w['id']:<42} {column.upper()}{int(w.get(column) or 1):<3} measured {w['sec_per_it']:8.2f} s  "
            f"predicted {w['predicted_s']:8.2f} s  {100 * w['error']:+6.1f}%{mem}"
        )
    for g in part["groups"]:
        rho = "n/a" if math.isnan(g["rho"]) else f"{g['rho']:+.2f}"
        lines.append(f"  rank {g['group']:<30} n={g['n']:<3} rho {rho}")
    if "memory" in part:
        m = part["memory"]
        lines.append(
            f"  memory: measured/predicted median {m['median_measured_over_predicted']:.2f} over {m['n']} rows"
        )
    return lines


def render(result: Mapping[str, Any], notes: list[str]) -> str:
    t = result["time"]
    lines = [f"{result['rows']} rows, {result['timed']} with a measured sec/it", ""]
    lines += [f"note: {n}" for n in notes]
    lines += [
        "",
        "time: median |predicted/measured - 1|",
        f"  chronicles  {_pct(t['chronicles']['median_abs_error']):>7} over {t['chronicles']['n']:>3} rows"
        f"   target <= {_pct(t['chronicles']['target'])}  {_ok(t['chronicles']['met'])}",
        f"  published   {_pct(t['published']['median_abs_error']):>7} over {t['published']['n']:>3} rows"
        f"   target <= {_pct(t['published']['target'])}  {_ok(t['published']['met'])}",
        f"  held-out    {_pct(t['held-out']['median_abs_error']):>7} over {t['held-out']['n']:>3} rows"
        f"   target <= {_pct(t['held-out']['target'])}  {_ok(t['held-out']['met'])}",
        f"  moe         {_pct(t['moe']['median_abs_error']):>7} over {t['moe']['n']:>3} rows"
        f"   (scored apart, out of the lines above and below)",
        f"  torchtitan  {_pct(t['torchtitan']['median_abs_error']):>7} over {t['torchtitan']['n']:>3} rows"
        f"   (scored apart, as the MoE rows)",
        f"  held-out-2  {_pct(t['held-out-2']['median_abs_error']):>7} over {t['held-out-2']['n']:>3} rows"
        f"   (scored apart: FSDP and DDP trainers, heldout2_runs.toml)",
        f"  rows worse than {_pct(t['worse_than_target']['target'])}: {t['worse_than_target']['n']}"
        f" (worst {_pct(t['worse_than_target']['max_abs_error'])})   target 0  {_ok(t['worse_than_target']['met'])}",
        "",
        "worst rows:",
    ]
    for w in result["worst"]:
        lines.append(
            f"  {w['id']:<34} {w['group']:<24} measured {w['sec_per_it']:8.2f} s  predicted "
            f"{w['predicted_s']:8.2f} s  {100 * w['error']:+6.1f}%"
        )
    for kind, column in (("moe", "ep"), ("torchtitan", "cp"), ("held-out-2", "dp")):
        lines += _render_apart(kind, column, result[kind])
    r = result["rank"]
    lines += [
        "",
        f"ranking: Spearman rho per group (>= 3 rows), target >= {r['target']}: {r['met']} of {r['of']} met",
    ]
    for g in r["groups"]:
        rho = "n/a" if math.isnan(g["rho"]) else f"{g['rho']:+.2f}"
        lines.append(f"  {g['group']:<24} n={g['n']:<3} rho {rho}  {_ok(g['met'])}")
    rep = result.get("repeats")
    if rep and rep["layouts"]:
        worst_t, worst_m = rep["max_time"], rep["max_memory"]
        lines += [
            f"  noise floor: {len(rep['layouts'])} layouts measured more than once; their sec/it differ by "
            f"{_pct(rep['median_time_spread'])} (median), {_pct(worst_t['time_spread'])} at most "
            f"(lines {', '.join(map(str, worst_t['lines']))})"
            + (
                f"; Mem by up to {_pct(worst_m['memory_spread'])} "
                f"(lines {', '.join(map(str, worst_m['lines']))})"
                if worst_m
                else ""
            ),
        ]
    m, o, r = result["memory"], result["oom"], result["ran"]
    lines += [
        "",
        f"memory: measured/predicted median {m['median_measured_over_predicted']:.2f} over {m['n']} rows "
        f"({_ok(m['median_met'])} for the median), {m['within_target']} of {m['n']} within +-{_pct(m['target'])}"
        f"   target every row within {_pct(m['target'])}  {_ok(m['met'])}",
        f"OOM rows predicted over capacity: {o['predicted_over_capacity']} of {o['n']}   target all  {_ok(o['met'])}",
        f"rows that ran, predicted over capacity: {len(r['predicted_over_capacity'])} of {r['n']}"
        + (f" ({', '.join(r['predicted_over_capacity'])})" if r["predicted_over_capacity"] else "")
        + f"   target none  {_ok(r['met'])}",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------- calibrated
def _run_inputs(index: int, rec: Mapping[str, Any]) -> run_inputs.RunInputs:
    """A row as `tracelog calibrate` sees a stored run: the model's inputs and the measured sec/it."""
    config = {k: rec[k] for k in MODEL_KEYS if k in rec and not _missing(rec[k])}
    row = {"run_id": index, "framework": "megatron", **config, "sec_per_it": rec.get("sec_per_it")}
    return infer(run_inputs.build(row, {}))


def _median_error(runs: list[run_inputs.RunInputs], constants: calibration.Constants) -> float:
    errors = []
    for run in calibration.timed_runs(runs):
        assert run.gpu is not None and run.sec_per_it
        scale = constants.compute_scale(run.gpu.id, run.precision)
        errors.append(abs(calibration.predicted_sec_per_it(run, scale, constants) / run.sec_per_it - 1))
    return float(pd.Series(errors).median()) if errors else math.nan


def calibrated_split(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """Two-fold cross-validation of `tracelog calibrate` on the chronicles: the rows with a sec/it in line
    order, alternately into two halves; the compute scales are fitted on one half (`fit_compute`) and the
    other half's median |predicted/measured − 1| is taken with and without them, then the other way."""
    timed = rows[(rows["kind"] == "chronicles") & rows["sec_per_it"].notna()].reset_index(drop=True)
    runs = [_run_inputs(i, rec) for i, rec in enumerate(timed.to_dict("records"))]
    halves = {"even": runs[0::2], "odd": runs[1::2]}
    out = []
    for fit_on, test_on in (("even", "odd"), ("odd", "even")):
        fits = calibration.fit_compute(halves[fit_on])
        constants = calibration.Constants({f.scope: f.value for f in fits})
        out.append(
            {
                "fit_on": f"{fit_on} rows ({len(halves[fit_on])})",
                "scored_on": f"{test_on} rows ({len(halves[test_on])})",
                "scales": {f.scope: round(f.value, 4) for f in fits},
                "uncalibrated": _median_error(halves[test_on], calibration.TEXTBOOK),
                "calibrated": _median_error(halves[test_on], constants),
            }
        )
    return out


def _published_inputs(index: int, rec: Mapping[str, Any]) -> run_inputs.RunInputs:
    """A published row as `tracelog calibrate` sees a stored run, with the switches `model_predict` gives
    it (overlaps, distributed optimizer, attention)."""
    config = {k: rec[k] for k in MODEL_KEYS if k in rec and not _missing(rec[k])}
    params = {k: str(bool(rec[k])) for k in RUN_FLAGS if k in rec and not _missing(rec[k])}
    params |= {k: str(rec[k]) for k in RUN_SETTINGS if k in rec and not _missing(rec[k])}
    params = configuration_defaults(str(config.get("framework") or "megatron"), params)
    if not _missing(rec.get("distributed_optimizer")):
        params["use_distributed_optimizer"] = str(bool(rec["distributed_optimizer"]))
    flash = rec.get("flash_attention")
    framework = str(config.get("framework") or "megatron")
    params["attention_backend"] = (
        default_attention_backend(framework) if _missing(flash) else ("flash" if flash else "unfused")
    )
    row = {"run_id": index, "framework": "megatron", **config, "sec_per_it": rec.get("sec_per_it")}
    return infer(run_inputs.build(row, params))


def calibrated_heldout(rows: pd.DataFrame) -> dict[str, Any]:
    """`tracelog calibrate` fitted on the published rows (the compute scale per GPU and precision), scored
    on the held-out ones: what a cluster's own history would do for runs the model never saw. A held-out
    row whose GPU and precision no published row has keeps the textbook scale."""
    timed = rows[rows["sec_per_it"].notna()]
    fit_rows = timed[timed["kind"] == "published"].to_dict("records")
    test_rows = timed[timed["kind"] == "held-out"].to_dict("records")
    fit_runs = [_published_inputs(i, rec) for i, rec in enumerate(fit_rows)]
    test_runs = [_published_inputs(i, rec) for i, rec in enumerate(test_rows)]
    fits = calibration.fit_compute(fit_runs)
    constants = calibration.Constants({f.scope: f.value for f in fits})
    return {
        "fit_on": f"published rows ({len(fit_runs)})",
        "scored_on": f"held-out rows ({len(test_runs)})",
        "scales": {f.scope: round(f.value, 4) for f in fits},
        "uncalibrated": _median_error(test_runs, calibration.TEXTBOOK),
        "calibrated": _median_error(test_runs, constants),
    }


def render_calibrated(folds: list[Mapping[str, Any]]) -> str:
    lines = ["", "calibrated on half the chronicles, scored on the other half (median |error|):"]
    for f in folds:
        scales = ", ".join(f"{scope} x{value:.3f}" for scope, value in f["scales"].items())
        lines.append(
            f"  fit on {f['fit_on']}, scored on {f['scored_on']}: uncalibrated {_pct(f['uncalibrated'])}, "
            f"calibrated {_pct(f['calibrated'])}  ({scales})"
        )
    return "\n".join(lines)


# ------------------------------------------------------------------------------ Megatron's max reserved
RESERVED_SQL = """
SELECT s.path, r.framework, r.tp, r.pp, r.dp, r.mbs, r.zero_stage, max(m.max_reserved_mib) AS measured_mib,
    any_value(p.value) AS predicted_mib
FROM runs r JOIN sources s USING (source_id) JOIN memory m USING (run_id)
LEFT JOIN predictions p ON p.subject_kind = 'run' AND p.subject_id = r.run_id AND p.metric = 'gpu_reserved_mib'
WHERE m.max_reserved_mib IS NOT NULL
GROUP BY ALL ORDER BY s.path
"""


def max_reserved(folder: Path | None = DEFAULT_MEGATRON) -> list[dict[str, Any]]:
    """Every Megatron log of `folder` ingested by tracelog itself (GPU from `MEGATRON_GPU`), its highest
    `max reserved` over ranks against the model's `reserved` (the busiest stage, no CUDA context)."""
    files = sorted(folder.glob("*.out")) if folder is not None and folder.is_dir() else []
    if not files:
        return []
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "megatron.duckdb"
        api.ingest(db, [str(f) for f in files], gpu=MEGATRON_GPU)
        frame = api.sql(db, RESERVED_SQL)
    out = []
    for rec in frame.to_dict("records"):
        predicted = None if _missing(rec["predicted_mib"]) else float(rec["predicted_mib"])
        rec["file"] = Path(str(rec.pop("path"))).name
        rec["predicted_mib"] = predicted
        rec["ratio"] = float(rec["measured_mib"]) / predicted if predicted else math.nan
        out.append(rec)
    return out


def render_reserved(rows: list[Mapping[str, Any]]) -> str:
    if not rows:
        return "\nMegatron's max reserved: no corpus Megatron logs found"
    lines = [f"\nMegatron's max reserved ({MEGATRON_GPU}, corpus logs): measured / predicted reserved"]
    for r in rows:
        shown = {k: "-" if _missing(r[k]) else r[k] for k in ("tp", "pp", "dp", "mbs", "zero_stage")}
        layout = (
            f"{r['framework']} TP{shown['tp']} PP{shown['pp']} DP{shown['dp']} MBS{shown['mbs']}"
            f" ZeRO {shown['zero_stage']}"
        )
        predicted = r["predicted_mib"] if r["predicted_mib"] is not None else math.nan
        lines.append(
            f"  {r['file']:<52} {layout:<48} {r['measured_mib']:>7.0f} / {predicted:>7.0f} MiB = {r['ratio']:.2f}"
        )
    ratios = pd.Series([r["ratio"] for r in rows], dtype=float).dropna()
    within = int(((ratios - 1).abs() <= TARGETS["memory_within"]).sum())
    lines.append(f"  median {ratios.median():.2f}; {within} of {len(ratios)} within +-15%")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--corpus", type=Path, default=DEFAULT_CORPUS, help="folder of the BigScience chronicles"
    )
    parser.add_argument("--data", type=Path, default=DATA, help="the published runs (TOML)")
    parser.add_argument("--heldout", type=Path, default=HELDOUT, help="the held-out published runs (TOML)")
    parser.add_argument("--moe", type=Path, default=MOE, help="the published MoE runs (TOML)")
    parser.add_argument(
        "--torchtitan", type=Path, default=TORCHTITAN, help="the published torchtitan runs (TOML)"
    )
    parser.add_argument(
        "--heldout2", type=Path, default=HELDOUT2, help="the second held-out set of published runs (TOML)"
    )
    parser.add_argument(
        "--megatron", type=Path, default=DEFAULT_MEGATRON, help="folder of published Megatron logs (*.out)"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--calibrated", action="store_true", help="also cross-validate `tracelog calibrate` on the chronicles"
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows, notes = load_rows(args.corpus, args.data, args.heldout, args.moe, args.torchtitan, args.heldout2)
    result = score(rows)
    result["repeats"] = repeats(rows)
    result["notes"] = notes
    result["max_reserved"] = max_reserved(args.megatron)
    if args.calibrated:
        result["calibrated"] = calibrated_split(rows)
        if (rows["kind"] == "held-out").any():
            result["calibrated_heldout"] = calibrated_heldout(rows)
    result["seconds"] = round(time.perf_counter() - started, 2)
    if args.json:
        print(json.dumps(result, indent=2, default=float))
    else:
        print(render(result, notes))
        print(render_reserved(result["max_reserved"]))
        if args.calibrated:
            print(render_calibrated(result["calibrated"]))
            if "calibrated_heldout" in result:
                print(
                    render_calibrated([result["calibrated_heldout"]]).replace(
                        "half the chronicles, scored on the other half",
                        "the published rows, scored on the held-out ones",
                    )
                )
        print(f"\n({result['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
